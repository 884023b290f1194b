//! The barrier aligner: exactly-once checkpoint alignment over the N channels of a task's input,
//! as a pure state machine (no channels, no clock). The rules and state tables are on
//! [`BarrierAligner`].

use std::fmt;
use std::time::{Duration, Instant};

use streamtask_core::CheckpointBarrier;

/// What the caller does after delivering a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignerAction {
    /// Hold this channel back (stop reading it) until the checkpoint triggers or is aborted.
    Block,
    /// Every channel that has not ended delivered the barrier: snapshot now. Every channel is
    /// released.
    Trigger(Aligned),
    /// A newer barrier arrived while an older alignment was unfinished: the older checkpoint is
    /// aborted, every channel is released, and alignment for the newer one starts with this
    /// channel blocked.
    Superseded {
        /// The checkpoint whose alignment was abandoned.
        aborted: CheckpointBarrier,
        /// The checkpoint now being aligned.
        current: CheckpointBarrier,
    },
    /// The barrier is not newer than one already started, triggered or aborted: nothing to do,
    /// keep reading the channel.
    Ignore,
}

/// A checkpoint whose barriers are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aligned {
    /// The barrier to snapshot for (and forward downstream).
    pub barrier: CheckpointBarrier,
    /// When the first barrier of this checkpoint arrived (as the caller said).
    pub started_at: Instant,
    /// When the last one arrived (or the last missing channel ended).
    pub completed_at: Instant,
}

impl Aligned {
    /// How long the channels were held back: from the first to the last barrier.
    pub fn alignment_duration(&self) -> Duration {
        self.completed_at.saturating_duration_since(self.started_at)
    }
}

/// One channel's part in alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelState {
    /// Read normally.
    Open,
    /// Delivered the pending barrier; held back until trigger or abort.
    Blocked,
    /// Delivered end of input; never read again.
    Ended,
}

/// The checkpoint being aligned.
#[derive(Debug, Clone, Copy)]
struct Pending {
    barrier: CheckpointBarrier,
    started_at: Instant,
    /// Channels that delivered `barrier` (all of them `Blocked`).
    arrived: usize,
}

/// Exactly-once barrier alignment over a fixed number of channels: a pure state machine (no
/// channels, no clock) that both models drive through their gates.
///
/// When barrier `n` arrives on a channel, everything that channel delivered so far belongs to
/// checkpoint `n` and everything after it to the next one; so the channel is **blocked** (not
/// read) until every other channel delivered barrier `n` too. Then the checkpoint **triggers**
/// (the task snapshots) and every channel is released.
///
/// - A newer barrier `m > n` arriving while `n` is unfinished **supersedes** `n`: `n` is aborted
///   (reported), every channel is released, and alignment starts over for `m` with only the
///   channel that delivered `m` blocked. (An upstream task that aborted `n` never forwards it.)
/// - A barrier whose id is not newer than one already started, triggered or aborted is
///   **ignored**; so are the late barriers of an aborted checkpoint.
/// - **End of input** on a channel counts as aligned for the current and every later barrier.
/// - With one channel (or when every other channel ended) a barrier triggers at once.
///
/// The caller never reads a blocked or ended channel; delivering a barrier or end of input on
/// one is a caller bug and panics, naming the state.
///
/// # States
///
/// Per channel:
///
/// | state | meaning | moves to |
/// |---|---|---|
/// | `Open` | read normally | `Blocked` (delivers the pending barrier, others missing), `Ended` (end of input) |
/// | `Blocked` | delivered the pending barrier; held back | `Open` (trigger, supersede, abort) |
/// | `Ended` | delivered end of input; never read again | - |
///
/// The aligner as a whole:
///
/// | state | meaning | on a barrier newer than any seen | on the pending barrier | on end of input |
/// |---|---|---|---|---|
/// | idle | no checkpoint pending | `Trigger` if no other channel is open, else `Block` and aligning | - | - |
/// | aligning `n` | some channels delivered `n` | `Superseded`, aligning `m` | `Block`, or `Trigger` and idle when it was the last | `Trigger` and idle when it was the last |
///
/// # Examples
///
/// ```
/// use std::time::Instant;
/// use streamtask_core::CheckpointBarrier;
/// use streamtask_runtime::channel::{AlignerAction, BarrierAligner};
///
/// let now = Instant::now();
/// let mut aligner = BarrierAligner::new(3);
/// let b1 = CheckpointBarrier::new(1, 0);
///
/// assert_eq!(aligner.on_barrier(0, b1, now), AlignerAction::Block);
/// assert!(aligner.is_blocked(0));
/// assert_eq!(aligner.on_end_of_input(2, now), None); // channel 1 still owes barrier 1
/// match aligner.on_barrier(1, b1, now) {
///     AlignerAction::Trigger(aligned) => assert_eq!(aligned.barrier, b1),
///     other => panic!("expected a trigger, got {other:?}"),
/// }
/// assert!(!aligner.is_blocked(0));
///
/// // A newer barrier supersedes an unfinished alignment.
/// let (b2, b3) = (CheckpointBarrier::new(2, 0), CheckpointBarrier::new(3, 0));
/// assert_eq!(aligner.on_barrier(0, b2, now), AlignerAction::Block);
/// assert_eq!(
///     aligner.on_barrier(1, b3, now),
///     AlignerAction::Superseded { aborted: b2, current: b3 }
/// );
/// assert_eq!(aligner.on_barrier(0, b2, now), AlignerAction::Ignore); // late: already aborted
/// ```
///
/// A single channel aligns at once:
///
/// ```
/// use std::time::Instant;
/// use streamtask_core::CheckpointBarrier;
/// use streamtask_runtime::channel::{AlignerAction, BarrierAligner};
///
/// let mut single = BarrierAligner::new(1);
/// let b = CheckpointBarrier::new(7, 0);
/// assert!(matches!(single.on_barrier(0, b, Instant::now()), AlignerAction::Trigger(_)));
/// assert_eq!(single.on_barrier(0, b, Instant::now()), AlignerAction::Ignore);
/// ```
#[derive(Clone)]
pub struct BarrierAligner {
    channels: Vec<ChannelState>,
    pending: Option<Pending>,
    /// The newest checkpoint id started, triggered or aborted; barriers at or below it are
    /// stale (except the pending one's).
    newest: Option<u64>,
    ended: usize,
}

impl BarrierAligner {
    /// An aligner over `channels` channels, all open, nothing pending.
    pub fn new(channels: usize) -> Self {
        BarrierAligner {
            channels: vec![ChannelState::Open; channels],
            pending: None,
            newest: None,
            ended: 0,
        }
    }

    /// Channel `channel` delivered `barrier` at time `now` (the caller's clock; only used to
    /// report the alignment's duration).
    ///
    /// # Panics
    ///
    /// If `channel` is out of range, blocked or ended: a blocked or ended channel must not be
    /// read.
    pub fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now: Instant,
    ) -> AlignerAction {
        self.expect_open(channel, "a barrier");
        if let Some(pending) = &mut self.pending
            && barrier.id == pending.barrier.id
        {
            pending.arrived += 1;
            self.channels[channel] = ChannelState::Blocked;
            return match self.complete_if_aligned(now) {
                Some(aligned) => AlignerAction::Trigger(aligned),
                None => AlignerAction::Block,
            };
        }
        if self.newest.is_some_and(|newest| barrier.id <= newest) {
            return AlignerAction::Ignore;
        }
        self.newest = Some(barrier.id);
        let aborted = self.pending.take().map(|p| p.barrier);
        self.release_all();
        self.pending = Some(Pending {
            barrier,
            started_at: now,
            arrived: 1,
        });
        self.channels[channel] = ChannelState::Blocked;
        if let Some(aligned) = self.complete_if_aligned(now) {
            // Superseding never completes at once: the channels blocked for the aborted
            // checkpoint were open (not ended) and have not delivered the new barrier.
            debug_assert!(aborted.is_none(), "a superseding barrier completed at once");
            return AlignerAction::Trigger(aligned);
        }
        match aborted {
            Some(aborted) => AlignerAction::Superseded {
                aborted,
                current: barrier,
            },
            None => AlignerAction::Block,
        }
    }

    /// Channel `channel` delivered end of input at time `now`; it counts as aligned for the
    /// pending and every later barrier. Returns the pending checkpoint if this completed it.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range, blocked or already ended.
    pub fn on_end_of_input(&mut self, channel: usize, now: Instant) -> Option<Aligned> {
        self.expect_open(channel, "end of input");
        self.channels[channel] = ChannelState::Ended;
        self.ended += 1;
        self.complete_if_aligned(now)
    }

    /// Aborts checkpoint `id` from outside (the coordinator gave up on it): if it, or an older
    /// one, is pending, every channel is released and the pending barrier is returned. Barriers
    /// of `id` and older that arrive later are ignored.
    pub fn abort(&mut self, id: u64) -> Option<CheckpointBarrier> {
        self.newest = Some(self.newest.map_or(id, |newest| newest.max(id)));
        match self.pending {
            Some(pending) if pending.barrier.id <= id => {
                self.pending = None;
                self.release_all();
                Some(pending.barrier)
            }
            _ => None,
        }
    }

    /// Whether `channel` is held back for the pending checkpoint.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    #[inline]
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.channels[channel] == ChannelState::Blocked
    }

    /// Whether `channel` delivered end of input.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    #[inline]
    pub fn is_ended(&self, channel: usize) -> bool {
        self.channels[channel] == ChannelState::Ended
    }

    /// Whether `channel` may be read now (neither blocked nor ended).
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    #[inline]
    pub fn is_readable(&self, channel: usize) -> bool {
        self.channels[channel] == ChannelState::Open
    }

    /// Whether every channel delivered end of input.
    #[inline]
    pub fn all_ended(&self) -> bool {
        self.ended == self.channels.len()
    }

    /// The barrier being aligned, if any.
    pub fn pending(&self) -> Option<CheckpointBarrier> {
        self.pending.map(|p| p.barrier)
    }

    /// The newest checkpoint id started, triggered or aborted, if any: barriers of it and
    /// older ones are ignored (except the pending one's).
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// When the pending alignment started (the `now` of its first barrier), if any.
    pub fn alignment_started_at(&self) -> Option<Instant> {
        self.pending.map(|p| p.started_at)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    fn expect_open(&self, channel: usize, what: &str) {
        match self.channels[channel] {
            ChannelState::Open => {}
            ChannelState::Blocked => panic!(
                "channel {channel} delivered {what} while Blocked for checkpoint {:?}; a blocked \
                 channel must not be read until the aligner releases it",
                self.pending.map(|p| p.barrier.id)
            ),
            ChannelState::Ended => panic!(
                "channel {channel} delivered {what} after it Ended; stop reading a channel once \
                 it delivered end of input"
            ),
        }
    }

    /// Triggers the pending checkpoint if every channel that has not ended delivered it.
    fn complete_if_aligned(&mut self, now: Instant) -> Option<Aligned> {
        let pending = self.pending?;
        if pending.arrived + self.ended < self.channels.len() {
            return None;
        }
        self.pending = None;
        self.release_all();
        Some(Aligned {
            barrier: pending.barrier,
            started_at: pending.started_at,
            completed_at: now,
        })
    }

    fn release_all(&mut self) {
        for state in &mut self.channels {
            if *state == ChannelState::Blocked {
                *state = ChannelState::Open;
            }
        }
    }
}

impl fmt::Debug for BarrierAligner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierAligner")
            .field("channels", &self.channels)
            .field("pending", &self.pending.map(|p| p.barrier.id))
            .field("newest", &self.newest)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: u64) -> CheckpointBarrier {
        CheckpointBarrier::new(id, 0)
    }

    #[test]
    fn triggers_once_all_channels_delivered() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(5);
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(1, b(1), t0), AlignerAction::Block);
        assert_eq!(a.alignment_started_at(), Some(t0));
        assert_eq!(a.pending(), Some(b(1)));
        let AlignerAction::Trigger(aligned) = a.on_barrier(0, b(1), t1) else {
            panic!("expected a trigger");
        };
        assert_eq!(aligned.alignment_duration(), Duration::from_millis(5));
        assert_eq!(a.pending(), None);
        assert!(a.is_readable(0) && a.is_readable(1));
    }

    #[test]
    fn end_of_input_completes_a_pending_alignment() {
        let now = Instant::now();
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(0, b(4), now), AlignerAction::Block);
        let aligned = a.on_end_of_input(1, now).expect("completes");
        assert_eq!(aligned.barrier, b(4));
        // From now on channel 0 alone aligns.
        assert!(matches!(
            a.on_barrier(0, b(5), now),
            AlignerAction::Trigger(_)
        ));
        assert!(!a.all_ended());
        assert_eq!(a.on_end_of_input(0, now), None);
        assert!(a.all_ended());
    }

    #[test]
    fn external_abort_releases_and_ignores_late_barriers() {
        let now = Instant::now();
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, b(2), now);
        assert_eq!(a.abort(2), Some(b(2)));
        assert!(a.is_readable(0));
        assert_eq!(a.on_barrier(1, b(2), now), AlignerAction::Ignore);
        assert_eq!(a.abort(9), None);
        assert_eq!(a.on_barrier(1, b(8), now), AlignerAction::Ignore);
        assert_eq!(a.on_barrier(1, b(10), now), AlignerAction::Block);
    }

    #[test]
    #[should_panic(expected = "while Blocked")]
    fn reading_a_blocked_channel_is_a_bug() {
        let now = Instant::now();
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, b(1), now);
        a.on_barrier(0, b(2), now);
    }

    #[test]
    #[should_panic(expected = "after it Ended")]
    fn reading_an_ended_channel_is_a_bug() {
        let now = Instant::now();
        let mut a = BarrierAligner::new(2);
        a.on_end_of_input(0, now);
        a.on_end_of_input(0, now);
    }
}
