//! The watermark and stream-status valve; the rules and the state table are on
//! [`WatermarkValve`].

use std::fmt;

use streamtask_core::{StreamStatus, Watermark};

/// Something the valve emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValveOutput {
    /// The combined watermark advanced.
    Watermark(Watermark),
    /// The combined status changed.
    Status(StreamStatus),
}

/// What the valve emits for one input: at most a watermark and a status change, in the order to
/// forward them (iterate it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValveUpdate {
    outputs: [Option<ValveOutput>; 2],
}

impl ValveUpdate {
    fn push(&mut self, output: ValveOutput) {
        let slot = self
            .outputs
            .iter_mut()
            .find(|o| o.is_none())
            .expect("a valve update holds at most two outputs");
        *slot = Some(output);
    }

    /// The new combined watermark, if it advanced.
    pub fn watermark(&self) -> Option<Watermark> {
        self.iter().find_map(|o| match o {
            ValveOutput::Watermark(w) => Some(w),
            ValveOutput::Status(_) => None,
        })
    }

    /// The new combined status, if it changed.
    pub fn status(&self) -> Option<StreamStatus> {
        self.iter().find_map(|o| match o {
            ValveOutput::Status(s) => Some(s),
            ValveOutput::Watermark(_) => None,
        })
    }

    /// Whether nothing is emitted.
    pub fn is_empty(&self) -> bool {
        self.outputs[0].is_none()
    }

    /// The outputs in forwarding order.
    pub fn iter(&self) -> impl Iterator<Item = ValveOutput> + '_ {
        self.outputs.iter().flatten().copied()
    }
}

impl IntoIterator for ValveUpdate {
    type Item = ValveOutput;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<ValveOutput>, 2>>;

    fn into_iter(self) -> Self::IntoIter {
        self.outputs.into_iter().flatten()
    }
}

/// One channel's status as the valve sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelStatus {
    /// Produces records and watermarks.
    Active,
    /// Temporarily idle; its watermarks are ignored.
    Idle,
    /// Delivered end of input; left out for good.
    Ended,
}

#[derive(Debug, Clone, Copy)]
struct Channel {
    watermark: Watermark,
    status: ChannelStatus,
    /// Whether the channel takes part in the minimum (active and not behind the output).
    aligned: bool,
}

/// Combines the watermarks and stream statuses of N channels into one (Flink's
/// `StatusWatermarkValve`): a pure state machine the gates drive.
///
/// - The combined watermark is the minimum over the **active, aligned** channels, and is emitted
///   only when it advances.
/// - An **idle** channel does not hold the combined watermark back; its watermarks are ignored
///   until it is active again. When the last active channel goes idle, the valve flushes the
///   largest watermark any channel reached (nothing holds it back any more), then reports
///   `Idle`; the first channel to become active again reports `Active`.
/// - A channel that becomes active again with a watermark behind the combined one is not
///   **aligned**: it is left out of the minimum until it catches up (the combined watermark
///   never goes back).
/// - A channel that **ended** is left out for good; when every channel ended the combined
///   watermark is [`Watermark::MAX`] (emitted once, after `Active` if the valve was idle, so
///   downstream does not ignore it).
///
/// # Channel states
///
/// | state | in the minimum | moves to |
/// |---|---|---|
/// | active, aligned | yes | idle, ended |
/// | active, not aligned | no, until its watermark reaches the combined one | active aligned, idle, ended |
/// | idle | no; its watermarks are ignored | active (aligned if not behind), ended |
/// | ended | no, for good | - |
///
/// Delivering anything on an ended channel is a caller bug and panics.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::WatermarkValve;
/// use streamtask_core::{StreamStatus, Watermark};
///
/// let mut valve = WatermarkValve::new(2);
/// assert_eq!(valve.on_watermark(0, Watermark(10)), None); // channel 1 still at MIN
/// assert_eq!(valve.on_watermark(1, Watermark(7)), Some(Watermark(7)));
/// // Channel 1 goes idle: channel 0 alone decides.
/// let update = valve.on_status(1, StreamStatus::Idle);
/// assert_eq!(update.watermark(), Some(Watermark(10)));
/// assert_eq!(update.status(), None);
/// assert_eq!(valve.on_watermark(0, Watermark(12)), Some(Watermark(12)));
/// ```
#[derive(Clone)]
pub struct WatermarkValve {
    channels: Vec<Channel>,
    /// The last combined watermark emitted.
    watermark: Watermark,
    /// The last combined status emitted.
    status: StreamStatus,
}

impl WatermarkValve {
    /// A valve over `channels` channels, all active at [`Watermark::MIN`].
    pub fn new(channels: usize) -> Self {
        WatermarkValve {
            channels: vec![
                Channel {
                    watermark: Watermark::MIN,
                    status: ChannelStatus::Active,
                    aligned: true,
                };
                channels
            ],
            watermark: Watermark::MIN,
            status: StreamStatus::Active,
        }
    }

    /// Channel `channel` delivered `watermark`; returns the combined watermark if it advanced.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range or ended.
    pub fn on_watermark(&mut self, channel: usize, watermark: Watermark) -> Option<Watermark> {
        let ch = self.channel_mut(channel, "a watermark");
        if ch.status != ChannelStatus::Active || watermark <= ch.watermark {
            return None;
        }
        ch.watermark = watermark;
        let output = self.watermark;
        let ch = &mut self.channels[channel];
        if !ch.aligned && watermark >= output {
            ch.aligned = true;
        }
        self.advance_to_min()
    }

    /// Channel `channel` delivered a status change; returns what to forward.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range or ended.
    pub fn on_status(&mut self, channel: usize, status: StreamStatus) -> ValveUpdate {
        let mut update = ValveUpdate::default();
        let output = self.watermark;
        let ch = self.channel_mut(channel, "a stream status");
        match (ch.status, status) {
            (ChannelStatus::Active, StreamStatus::Idle) => {
                ch.status = ChannelStatus::Idle;
                ch.aligned = false;
                self.after_channel_left(&mut update);
            }
            (ChannelStatus::Idle, StreamStatus::Active) => {
                ch.status = ChannelStatus::Active;
                ch.aligned = ch.watermark >= output;
                if self.status == StreamStatus::Idle {
                    self.status = StreamStatus::Active;
                    update.push(ValveOutput::Status(StreamStatus::Active));
                }
            }
            _ => {}
        }
        update
    }

    /// Channel `channel` delivered end of input; returns what to forward.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range or already ended.
    pub fn on_end_of_input(&mut self, channel: usize) -> ValveUpdate {
        let mut update = ValveUpdate::default();
        let ch = self.channel_mut(channel, "end of input");
        let was_active = ch.status == ChannelStatus::Active;
        ch.status = ChannelStatus::Ended;
        ch.aligned = false;
        if self.all_ended() {
            if self.status == StreamStatus::Idle {
                self.status = StreamStatus::Active;
                update.push(ValveOutput::Status(StreamStatus::Active));
            }
            if self.watermark < Watermark::MAX {
                self.watermark = Watermark::MAX;
                update.push(ValveOutput::Watermark(Watermark::MAX));
            }
        } else if was_active {
            self.after_channel_left(&mut update);
        }
        update
    }

    /// The last combined watermark emitted ([`Watermark::MIN`] before the first).
    pub fn watermark(&self) -> Watermark {
        self.watermark
    }

    /// The combined status.
    pub fn status(&self) -> StreamStatus {
        self.status
    }

    /// The last watermark channel `channel` delivered.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    pub fn channel_watermark(&self, channel: usize) -> Watermark {
        self.channels[channel].watermark
    }

    /// Whether every channel ended.
    pub fn all_ended(&self) -> bool {
        self.channels
            .iter()
            .all(|c| c.status == ChannelStatus::Ended)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    fn channel_mut(&mut self, channel: usize, what: &str) -> &mut Channel {
        let ch = &mut self.channels[channel];
        assert!(
            ch.status != ChannelStatus::Ended,
            "channel {channel} delivered {what} after it Ended; stop reading a channel once it \
             delivered end of input"
        );
        ch
    }

    /// An active channel went idle or ended (and others remain): flush and go idle if no
    /// active channel is left, else the minimum may advance without it.
    fn after_channel_left(&mut self, update: &mut ValveUpdate) {
        let any_active = self
            .channels
            .iter()
            .any(|c| c.status == ChannelStatus::Active);
        if any_active {
            if let Some(w) = self.advance_to_min() {
                update.push(ValveOutput::Watermark(w));
            }
            return;
        }
        // Nothing active holds the watermark back any more: flush the furthest any channel got.
        let max = self
            .channels
            .iter()
            .filter(|c| c.status != ChannelStatus::Ended)
            .map(|c| c.watermark)
            .max()
            .unwrap_or(Watermark::MIN);
        if max > self.watermark {
            self.watermark = max;
            update.push(ValveOutput::Watermark(max));
        }
        if self.status == StreamStatus::Active {
            self.status = StreamStatus::Idle;
            update.push(ValveOutput::Status(StreamStatus::Idle));
        }
    }

    /// Emits the minimum over active aligned channels if it is ahead of the last output.
    fn advance_to_min(&mut self) -> Option<Watermark> {
        let min = self
            .channels
            .iter()
            .filter(|c| c.status == ChannelStatus::Active && c.aligned)
            .map(|c| c.watermark)
            .min()?;
        if min > self.watermark {
            self.watermark = min;
            Some(min)
        } else {
            None
        }
    }
}

impl fmt::Debug for WatermarkValve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatermarkValve")
            .field("watermark", &self.watermark)
            .field("status", &self.status)
            .field("channels", &self.channels)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wm(t: i64) -> Watermark {
        Watermark(t)
    }

    #[test]
    fn combined_is_the_minimum_and_only_advances() {
        let mut v = WatermarkValve::new(3);
        assert_eq!(v.on_watermark(0, wm(5)), None);
        assert_eq!(v.on_watermark(1, wm(3)), None);
        assert_eq!(v.on_watermark(2, wm(4)), Some(wm(3)));
        assert_eq!(v.on_watermark(1, wm(9)), Some(wm(4)));
        // A watermark that does not move the minimum emits nothing.
        assert_eq!(v.on_watermark(1, wm(10)), None);
        // A channel going back is ignored.
        assert_eq!(v.on_watermark(2, wm(1)), None);
        assert_eq!(v.channel_watermark(2), wm(4));
        assert_eq!(v.watermark(), wm(4));
    }

    #[test]
    fn idle_channels_do_not_hold_the_watermark_back() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(10));
        assert_eq!(v.on_watermark(1, wm(2)), Some(wm(2)));
        let u = v.on_status(1, StreamStatus::Idle);
        assert_eq!(
            u.iter().collect::<Vec<_>>(),
            [ValveOutput::Watermark(wm(10))]
        );
        assert_eq!(v.status(), StreamStatus::Active);
        // Watermarks of an idle channel are ignored.
        assert_eq!(v.on_watermark(1, wm(50)), None);
        assert_eq!(v.channel_watermark(1), wm(2));
    }

    #[test]
    fn all_idle_flushes_the_furthest_watermark_then_reports_idle() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(10));
        v.on_watermark(1, wm(20));
        assert_eq!(v.watermark(), wm(10));
        assert!(v.on_status(1, StreamStatus::Idle).is_empty());
        let u = v.on_status(0, StreamStatus::Idle);
        assert_eq!(
            u.into_iter().collect::<Vec<_>>(),
            [
                ValveOutput::Watermark(wm(20)),
                ValveOutput::Status(StreamStatus::Idle)
            ]
        );
        assert_eq!(v.status(), StreamStatus::Idle);
        // The first channel back reports active.
        let u = v.on_status(0, StreamStatus::Active);
        assert_eq!(u.status(), Some(StreamStatus::Active));
        assert_eq!(u.watermark(), None);
        // Repeating a status changes nothing.
        assert!(v.on_status(0, StreamStatus::Active).is_empty());
    }

    #[test]
    fn a_channel_back_from_idle_behind_the_output_waits_until_it_catches_up() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(5));
        v.on_watermark(1, wm(5));
        v.on_status(1, StreamStatus::Idle);
        assert_eq!(v.on_watermark(0, wm(30)), Some(wm(30)));
        v.on_status(1, StreamStatus::Active);
        // Channel 1 is at 5, behind the output 30: not aligned, so it does not hold back.
        assert_eq!(v.on_watermark(0, wm(40)), Some(wm(40)));
        assert_eq!(v.on_watermark(1, wm(35)), None);
        // Once it catches up it takes part again.
        assert_eq!(v.on_watermark(1, wm(45)), None);
        assert_eq!(v.on_watermark(0, wm(60)), Some(wm(45)));
    }

    #[test]
    fn ended_channels_are_left_out_and_all_ended_is_max() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(3));
        assert_eq!(v.on_watermark(1, wm(8)), Some(wm(3)));
        let u = v.on_end_of_input(0);
        assert_eq!(u.watermark(), Some(wm(8)));
        assert_eq!(v.on_watermark(1, wm(9)), Some(wm(9)));
        let u = v.on_end_of_input(1);
        assert_eq!(u.watermark(), Some(Watermark::MAX));
        assert!(v.all_ended());
    }

    #[test]
    fn all_ended_after_idle_reports_active_before_max() {
        let mut v = WatermarkValve::new(1);
        v.on_status(0, StreamStatus::Idle);
        let u = v.on_end_of_input(0);
        assert_eq!(
            u.into_iter().collect::<Vec<_>>(),
            [
                ValveOutput::Status(StreamStatus::Active),
                ValveOutput::Watermark(Watermark::MAX)
            ]
        );
    }

    #[test]
    fn the_last_active_channel_ending_turns_the_rest_idle() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(1));
        v.on_watermark(1, wm(4));
        v.on_status(1, StreamStatus::Idle);
        let u = v.on_end_of_input(0);
        assert_eq!(
            u.into_iter().collect::<Vec<_>>(),
            [
                ValveOutput::Watermark(wm(4)),
                ValveOutput::Status(StreamStatus::Idle)
            ]
        );
    }

    #[test]
    #[should_panic(expected = "after it Ended")]
    fn input_after_end_is_a_bug() {
        let mut v = WatermarkValve::new(2);
        v.on_end_of_input(0);
        v.on_watermark(0, wm(1));
    }
}
