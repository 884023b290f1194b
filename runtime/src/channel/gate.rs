//! Input gates: a task's input over N channels, read fairly, with barrier alignment and watermark
//! combination built in; see [`InputGate`] and [`TwoInputGate`].

use std::collections::VecDeque;
use std::fmt;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

// std's `Arc`: the task's metrics are shared as `std::sync::Arc<TaskMetrics>` (see
// `TaskConfig`), and `Waker::from` needs std's `Arc`; neither is a protocol loom should model.
use std::sync::Arc;

use std::collections::BTreeMap;

use super::aligner::{Aligned, AlignerAction, BarrierAligner};
use super::backoff::Backoff;
use super::bounded::{PriorityBell, Receiver, TryRecvError};
use super::event::{InputEvent, TwoInputRecord};
use super::state::{ChannelCodec, ChannelState};
use super::valve::{ValveOutput, ValveUpdate, WatermarkValve};
use crate::sync::thread;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::task::TaskError;
use streamtask_core::{
    Alignment, CheckpointBarrier, StreamElement, StreamRecord, StreamStatus, Watermark,
};

/// An input channel disconnected without end of input: its upstream task failed or was
/// cancelled, so this task must fail too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "input channel {channel} closed without end of input; the upstream task is gone (failed or \
     cancelled), so fail this task and restart the job from its latest checkpoint"
)]
pub struct InputClosed {
    /// The channel's index in the gate (for a two-input gate, input 1's channels come first).
    pub channel: usize,
}

impl From<InputClosed> for TaskError {
    fn from(e: InputClosed) -> Self {
        TaskError::InputClosed { channel: e.channel }
    }
}

/// A gate could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// An input gate got no channels.
    #[error("an input gate needs at least one channel; pass the receivers of the upstream tasks")]
    NoChannels,
    /// One input of a two-input gate got no channels.
    #[error(
        "input {input} of a two-input gate has no channels; give both inputs at least one \
         receiver"
    )]
    EmptyInput {
        /// The input without channels (1 or 2).
        input: u8,
    },
}

/// A one-input task's input: N channels read round robin, barriers aligned, watermarks and
/// status combined.
///
/// [`TwoInputGate`] is its two-input sibling (one aligner over the channels of both inputs,
/// because a checkpoint of a two-input task cuts both). Both read the
/// channels round robin, one element per channel per turn, skipping channels that are blocked
/// for alignment or ended; they turn what they read into [`InputEvent`]s:
///
/// | read on a channel | event |
/// |---|---|
/// | record | `Record` (of a two-input gate: [`TwoInputRecord::First`] / [`TwoInputRecord::Second`]) |
/// | watermark, status | `Watermark` / `Status` only when the combined value changes ([`WatermarkValve`]) |
/// | barrier | nothing (the channel is blocked), `Barrier` once aligned, `Superseded` when superseded ([`BarrierAligner`]) |
/// | end of input | maybe `Watermark` / `Barrier`; `InputEnded(1)` / `InputEnded(2)` when an input of a two-input gate ended; `EndOfInput` once every channel ended |
/// | disconnection without end of input | the error [`InputClosed`] (the upstream task failed) |
///
/// # Polling without lost wakeups (the mailbox model)
///
/// [`InputGate::poll_next`] never blocks. When it returns [`InputEvent::Nothing`]:
///
/// 1. register the task's waker with [`InputGate::register_waker`] (it registers on every channel
///    that may be read: not blocked, not ended);
/// 2. call `poll_next` again: whatever arrived before the registration is found here;
/// 3. if it is still `Nothing`, suspend; the first channel that receives data (or disconnects)
///    wakes the waker, whose wake enqueues the resume mail.
///
/// Blocked channels need no registration: they are released inside `poll_next`, on the task's
/// own thread, when the checkpoint triggers or is aborted. The [channel module](super) explains
/// why the channel side loses no notice.
///
/// # Blocking (the legacy model)
///
/// [`InputGate::next_blocking`] runs the same protocol with a waker that unparks the calling
/// thread, and parks between polls. [`InputGate::next_timeout`] bounds the wait so a caller can
/// check a cancellation flag.
///
/// # Examples
///
/// Channel 0 delivers barrier 1 first; it is held back until channel 1 delivers it too:
///
/// ```
/// use streamtask_runtime::channel::{InputEvent, InputGate, bounded};
/// use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord};
///
/// let (tx0, rx0) = bounded(8).unwrap();
/// let (tx1, rx1) = bounded(8).unwrap();
/// let barrier = CheckpointBarrier::new(1, 0);
/// tx0.send(StreamElement::Barrier(barrier)).unwrap();
/// tx0.send(StreamElement::Record(StreamRecord::new("after"))).unwrap();
/// tx1.send(StreamElement::Record(StreamRecord::new("before"))).unwrap();
/// tx1.send(StreamElement::Barrier(barrier)).unwrap();
///
/// let mut gate = InputGate::new(vec![rx0, rx1]).unwrap();
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Record(StreamRecord::new("before")));
/// assert!(gate.is_blocked(0));
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier));
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Record(StreamRecord::new("after")));
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
/// ```
pub struct InputGate<T> {
    lanes: Lanes<T>,
    core: GateCore,
}

impl<T> InputGate<T> {
    /// A gate over `channels`.
    ///
    /// # Errors
    ///
    /// [`GateError::NoChannels`] if `channels` is empty.
    pub fn new(channels: Vec<Receiver<StreamElement<T>>>) -> Result<Self, GateError> {
        if channels.is_empty() {
            return Err(GateError::NoChannels);
        }
        let core = GateCore::new(&[channels.len()]);
        let lanes = Lanes::new(channels, &core.bell);
        Ok(InputGate { lanes, core })
    }

    /// Lets the gate take unaligned barriers early, storing what they overtook with `codec`
    /// (without one, every barrier is aligned).
    pub fn with_codec(mut self, codec: ChannelCodec<T>) -> Self {
        self.lanes.codec = Some(codec);
        self
    }

    /// Puts a restored checkpoint's channel state back in front of the channels (channel
    /// index to its elements, oldest first): they are read before anything the channels
    /// deliver.
    ///
    /// # Panics
    ///
    /// If a channel index is out of range (a checkpoint of another parallelism: the job
    /// refuses those before it builds a gate).
    pub fn with_channel_state(mut self, elements: BTreeMap<usize, Vec<StreamElement<T>>>) -> Self {
        for (channel, elements) in elements {
            self.lanes.restore(channel, elements);
        }
        self
    }

    /// Wakes `waker` whenever a priority element arrives on any channel, also while nothing
    /// reads the gate (a task whose output is full); see [`PriorityBell`].
    pub fn set_priority_waker(&self, waker: Waker) {
        self.core.bell.set_waker(waker);
    }

    /// Whether an unaligned barrier may be waiting to be taken early: a priority element
    /// arrived, or an aligned timeout is due. One load in the common case.
    #[inline]
    pub fn has_priority(&self) -> bool {
        self.core.has_priority()
    }

    /// Only what unaligned checkpoints produce, taking waiting barriers early: the events
    /// [`UnalignedBarrier`](InputEvent::UnalignedBarrier),
    /// [`ChannelState`](InputEvent::ChannelState) and
    /// [`Superseded`](InputEvent::Superseded) of a superseded one; `None` when
    /// there are none. For a task that does not read its input now (its output is full).
    pub fn poll_priority(&mut self) -> Option<InputEvent<StreamRecord<T>>> {
        self.core.poll_priority(&mut self.lanes).map(|signal| {
            match Self::event(Polled::Signal(signal)) {
                InputEvent::Nothing => unreachable!("a priority signal is an event"),
                event => event,
            }
        })
    }

    /// Puts `record`, the last one [`poll_next`](Self::poll_next) returned, back in front of
    /// its channel: the next poll of that channel returns it again. For a task whose chain
    /// cannot take it yet: in the channel, an unaligned barrier that overtakes it stores it
    /// as channel state.
    pub fn unread(&mut self, record: StreamRecord<T>) {
        let ch = self.core.last;
        self.core.forget_captured(ch);
        self.lanes.unread(ch, StreamElement::Record(record));
    }

    fn event(polled: Polled<StreamRecord<T>>) -> InputEvent<StreamRecord<T>> {
        match polled {
            Polled::Record(r) => InputEvent::Record(r),
            Polled::Signal(Signal::Watermark(w)) => InputEvent::Watermark(w),
            Polled::Signal(Signal::Status(s)) => InputEvent::Status(s),
            Polled::Signal(Signal::Checkpoint(b)) => InputEvent::Barrier(b),
            Polled::Signal(Signal::Unaligned(b)) => InputEvent::UnalignedBarrier(b),
            Polled::Signal(Signal::ChannelState(id, state)) => {
                InputEvent::ChannelState { id, state }
            }
            Polled::Signal(Signal::Aborted(id)) => InputEvent::Superseded { id },
            // A one-input core reports no per-input ends; all-ended follows.
            Polled::Signal(Signal::InputEnded(_)) | Polled::AllEnded => InputEvent::EndOfInput,
            Polled::Nothing => InputEvent::Nothing,
        }
    }

    /// Records alignment durations into `metrics.alignment` (when there are several channels),
    /// and each channel's barriers into `metrics.live`.
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.core.set_metrics(metrics);
        self
    }

    /// The next event, without blocking.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn poll_next(&mut self) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        let polled = self.core.poll(&mut self.lanes)?;
        Ok(Self::event(polled))
    }

    /// Asks to be woken through `waker` when a readable channel (not blocked, not ended) receives
    /// data or disconnects; wakes at once if an event is already waiting. Call it after
    /// [`poll_next`](Self::poll_next) returned `Nothing`, then poll once more before suspending.
    pub fn register_waker(&self, waker: &Waker) {
        if self.lanes.replaying > 0 {
            waker.wake_by_ref();
            return;
        }
        self.core.register_waker(waker, |ch, w| {
            self.lanes.channels[ch].register_data_waker(w)
        });
    }

    /// The next event, parking the calling thread while there is none (never `Nothing`).
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_blocking(&mut self) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        wait_for_event(self, None, Self::poll_next, Self::register_waker, |e| {
            matches!(e, InputEvent::Nothing)
        })
    }

    /// The next event, parking the calling thread at most `timeout`; `Nothing` if none came.
    ///
    /// Under `cfg(loom)` the wait is untimed.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        wait_for_event(
            self,
            Instant::now().checked_add(timeout),
            Self::poll_next,
            Self::register_waker,
            |e| matches!(e, InputEvent::Nothing),
        )
    }

    /// The coordinator aborted checkpoint `id`: if it (or an older one) is being aligned, every
    /// channel is released and its barrier returned. Late barriers of `id` are ignored.
    pub fn abort_checkpoint(&mut self, id: u64) -> Option<CheckpointBarrier> {
        self.core.abort(id)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.lanes.channels.len()
    }

    /// Whether `channel` is held back for alignment.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.core.aligner.is_blocked(channel)
    }

    /// Whether `channel` delivered end of input.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    pub fn is_ended(&self, channel: usize) -> bool {
        self.core.aligner.is_ended(channel)
    }

    /// The checkpoint being aligned, if any.
    pub fn pending_checkpoint(&self) -> Option<CheckpointBarrier> {
        self.core.aligner.pending()
    }

    /// The combined watermark emitted last.
    pub fn watermark(&self) -> Watermark {
        self.core.combined.watermark()
    }

    /// The combined stream status.
    pub fn status(&self) -> StreamStatus {
        self.core.combined.status()
    }
}

impl<T> fmt::Debug for InputGate<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputGate")
            .field("channels", &self.lanes.channels.len())
            .field("core", &self.core)
            .finish()
    }
}

/// A two-input task's input: the channels of input 1 (`StreamElement<A>`) and input 2
/// (`StreamElement<B>`) read round robin, with one barrier aligner over all of them and the
/// watermark combined per input and then over both; it reads and behaves as [`InputGate`] does.
///
/// Channel indices (in [`InputClosed`], [`is_blocked`](Self::is_blocked)) number input 1's
/// channels first, then input 2's.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{InputEvent, TwoInputGate, TwoInputRecord, bounded};
/// use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord, Watermark};
///
/// let (numbers, rx1) = bounded::<StreamElement<u32>>(8).unwrap();
/// let (words, rx2) = bounded::<StreamElement<String>>(8).unwrap();
/// let mut gate = TwoInputGate::new(vec![rx1], vec![rx2]).unwrap();
///
/// numbers.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0))).unwrap();
/// numbers.send(StreamElement::Record(StreamRecord::new(7))).unwrap();
/// numbers.send(StreamElement::Watermark(Watermark(10))).unwrap();
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing); // input 1 held back
/// words.send(StreamElement::Watermark(Watermark(5))).unwrap();
/// words.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0))).unwrap();
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(CheckpointBarrier::new(1, 0)));
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Record(TwoInputRecord::First(StreamRecord::new(7))));
/// assert_eq!(gate.poll_next().unwrap(), InputEvent::Watermark(Watermark(5)));
/// ```
pub struct TwoInputGate<A, B> {
    lanes: Pair<A, B>,
    core: GateCore,
}

impl<A, B> TwoInputGate<A, B> {
    /// A gate over `input1`'s and `input2`'s channels.
    ///
    /// # Errors
    ///
    /// [`GateError::EmptyInput`] if either input has no channel.
    pub fn new(
        input1: Vec<Receiver<StreamElement<A>>>,
        input2: Vec<Receiver<StreamElement<B>>>,
    ) -> Result<Self, GateError> {
        if input1.is_empty() {
            return Err(GateError::EmptyInput { input: 1 });
        }
        if input2.is_empty() {
            return Err(GateError::EmptyInput { input: 2 });
        }
        let core = GateCore::new(&[input1.len(), input2.len()]);
        let lanes = Pair {
            one: Lanes::new(input1, &core.bell),
            two: Lanes::new(input2, &core.bell),
        };
        Ok(TwoInputGate { lanes, core })
    }

    /// As [`InputGate::with_codec`], with a codec per input.
    pub fn with_codecs(mut self, codec1: ChannelCodec<A>, codec2: ChannelCodec<B>) -> Self {
        self.lanes.one.codec = Some(codec1);
        self.lanes.two.codec = Some(codec2);
        self
    }

    /// As [`InputGate::with_channel_state`], per input (channel indices within each input).
    ///
    /// # Panics
    ///
    /// If a channel index is out of range.
    pub fn with_channel_state(
        mut self,
        input1: BTreeMap<usize, Vec<StreamElement<A>>>,
        input2: BTreeMap<usize, Vec<StreamElement<B>>>,
    ) -> Self {
        for (channel, elements) in input1 {
            self.lanes.one.restore(channel, elements);
        }
        for (channel, elements) in input2 {
            self.lanes.two.restore(channel, elements);
        }
        self
    }

    /// As [`InputGate::set_priority_waker`].
    pub fn set_priority_waker(&self, waker: Waker) {
        self.core.bell.set_waker(waker);
    }

    /// As [`InputGate::has_priority`].
    #[inline]
    pub fn has_priority(&self) -> bool {
        self.core.has_priority()
    }

    /// As [`InputGate::poll_priority`].
    pub fn poll_priority(&mut self) -> Option<InputEvent<TwoInputRecord<A, B>>> {
        self.core
            .poll_priority(&mut self.lanes)
            .map(|signal| Self::event(Polled::Signal(signal)))
    }

    /// As [`InputGate::unread`], for the last record of input 1.
    pub fn unread1(&mut self, record: StreamRecord<A>) {
        let ch = self.core.last;
        self.core.forget_captured(ch);
        self.lanes.one.unread(ch, StreamElement::Record(record));
    }

    /// As [`InputGate::unread`], for the last record of input 2.
    pub fn unread2(&mut self, record: StreamRecord<B>) {
        let ch = self.core.last;
        self.core.forget_captured(ch);
        let n1 = self.lanes.one.channels.len();
        self.lanes
            .two
            .unread(ch - n1, StreamElement::Record(record));
    }

    fn event(polled: Polled<Either<A, B>>) -> InputEvent<TwoInputRecord<A, B>> {
        match polled {
            Polled::Record(Either::One(r)) => InputEvent::Record(TwoInputRecord::First(r)),
            Polled::Record(Either::Two(r)) => InputEvent::Record(TwoInputRecord::Second(r)),
            Polled::Signal(Signal::Watermark(w)) => InputEvent::Watermark(w),
            Polled::Signal(Signal::Status(s)) => InputEvent::Status(s),
            Polled::Signal(Signal::Checkpoint(b)) => InputEvent::Barrier(b),
            Polled::Signal(Signal::Unaligned(b)) => InputEvent::UnalignedBarrier(b),
            Polled::Signal(Signal::ChannelState(id, state)) => {
                InputEvent::ChannelState { id, state }
            }
            Polled::Signal(Signal::Aborted(id)) => InputEvent::Superseded { id },
            Polled::Signal(Signal::InputEnded(0)) => InputEvent::InputEnded(1),
            Polled::Signal(Signal::InputEnded(_)) => InputEvent::InputEnded(2),
            Polled::AllEnded => InputEvent::EndOfInput,
            Polled::Nothing => InputEvent::Nothing,
        }
    }

    /// Records alignment durations into `metrics.alignment`, and each channel's barriers into
    /// `metrics.live` (input 1's channels first).
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.core.set_metrics(metrics);
        self
    }

    /// The next event, without blocking.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn poll_next(&mut self) -> Result<InputEvent<TwoInputRecord<A, B>>, InputClosed> {
        let polled = self.core.poll(&mut self.lanes)?;
        Ok(Self::event(polled))
    }

    /// Asks to be woken through `waker` when a readable channel of either input receives data or
    /// disconnects; wakes at once if an event is already waiting. Same protocol as
    /// [`InputGate::register_waker`].
    pub fn register_waker(&self, waker: &Waker) {
        if self.lanes.one.replaying > 0 || self.lanes.two.replaying > 0 {
            waker.wake_by_ref();
            return;
        }
        let n1 = self.lanes.one.channels.len();
        self.core.register_waker(waker, |ch, w| {
            if ch < n1 {
                self.lanes.one.channels[ch].register_data_waker(w);
            } else {
                self.lanes.two.channels[ch - n1].register_data_waker(w);
            }
        });
    }

    /// The next event, parking the calling thread while there is none (never `Nothing`).
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_blocking(&mut self) -> Result<InputEvent<TwoInputRecord<A, B>>, InputClosed> {
        wait_for_event(self, None, Self::poll_next, Self::register_waker, |e| {
            matches!(e, InputEvent::Nothing)
        })
    }

    /// The next event, parking the calling thread at most `timeout`; `Nothing` if none came.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<InputEvent<TwoInputRecord<A, B>>, InputClosed> {
        wait_for_event(
            self,
            Instant::now().checked_add(timeout),
            Self::poll_next,
            Self::register_waker,
            |e| matches!(e, InputEvent::Nothing),
        )
    }

    /// The coordinator aborted checkpoint `id`; as [`InputGate::abort_checkpoint`].
    pub fn abort_checkpoint(&mut self, id: u64) -> Option<CheckpointBarrier> {
        self.core.abort(id)
    }

    /// Whether channel `channel` (input 1's first) is held back for alignment.
    ///
    /// # Panics
    ///
    /// If `channel` is out of range.
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.core.aligner.is_blocked(channel)
    }

    /// The checkpoint being aligned, if any.
    pub fn pending_checkpoint(&self) -> Option<CheckpointBarrier> {
        self.core.aligner.pending()
    }

    /// The watermark combined over both inputs, emitted last.
    pub fn watermark(&self) -> Watermark {
        self.core.combined.watermark()
    }

    /// The combined watermark of input `input` alone (1 or 2).
    ///
    /// # Panics
    ///
    /// If `input` is neither 1 nor 2.
    pub fn input_watermark(&self, input: u8) -> Watermark {
        self.core.inputs[input_index(input)].watermark()
    }

    /// Whether every channel of input `input` (1 or 2) ended.
    ///
    /// # Panics
    ///
    /// If `input` is neither 1 nor 2.
    pub fn is_input_ended(&self, input: u8) -> bool {
        self.core.inputs[input_index(input)].all_ended()
    }

    /// The status combined over both inputs.
    pub fn status(&self) -> StreamStatus {
        self.core.combined.status()
    }
}

impl<A, B> fmt::Debug for TwoInputGate<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputGate")
            .field("input1", &self.lanes.one.channels.len())
            .field("input2", &self.lanes.two.channels.len())
            .field("core", &self.core)
            .finish()
    }
}

fn input_index(input: u8) -> usize {
    match input {
        1 => 0,
        2 => 1,
        other => panic!("a two-input gate has inputs 1 and 2, not {other}"),
    }
}

// ---- the engine both gates share ----

/// A record of either input of a two-input gate.
enum Either<A, B> {
    One(StreamRecord<A>),
    Two(StreamRecord<B>),
}

/// What a channel delivered, with the record's type erased into `R`.
enum Item<R> {
    Record(R),
    Control(Control),
}

/// The non-record elements; the same for every element type.
enum Control {
    Watermark(Watermark),
    Status(StreamStatus),
    Barrier(CheckpointBarrier),
    End,
}

fn split<T, R>(element: StreamElement<T>, wrap: impl FnOnce(StreamRecord<T>) -> R) -> Item<R> {
    match element {
        StreamElement::Record(r) => Item::Record(wrap(r)),
        StreamElement::Watermark(w) => Item::Control(Control::Watermark(w)),
        StreamElement::Status(s) => Item::Control(Control::Status(s)),
        StreamElement::Barrier(b) => Item::Control(Control::Barrier(b)),
        StreamElement::EndOfInput => Item::Control(Control::End),
    }
}

/// Events that carry no record; queued because one element may cause several.
#[derive(Debug)]
enum Signal {
    Watermark(Watermark),
    Status(StreamStatus),
    Checkpoint(CheckpointBarrier),
    Unaligned(CheckpointBarrier),
    ChannelState(u64, Result<ChannelState, String>),
    Aborted(u64),
    /// Every channel of this input (0-based) ended; only for gates with several inputs.
    InputEnded(usize),
}

enum Polled<R> {
    Record(R),
    Signal(Signal),
    Nothing,
    AllEnded,
}

/// The channels of one element type in a gate, with what was put back in front of them and
/// the codec their channel state is written with.
struct Lanes<T> {
    channels: Vec<Receiver<StreamElement<T>>>,
    /// Read before the channel itself: a restored checkpoint's channel state, and records the
    /// task read but could not take yet (oldest first).
    replay: Vec<VecDeque<StreamElement<T>>>,
    /// How many replay queues hold elements: none, the common case, costs one test per read.
    replaying: usize,
    codec: Option<ChannelCodec<T>>,
}

impl<T> Lanes<T> {
    fn new(
        channels: Vec<Receiver<StreamElement<T>>>,
        bell: &crate::sync::Arc<PriorityBell>,
    ) -> Self {
        for channel in &channels {
            channel.set_priority_bell(crate::sync::Arc::clone(bell));
        }
        let replay = channels.iter().map(|_| VecDeque::new()).collect();
        Lanes {
            channels,
            replay,
            replaying: 0,
            codec: None,
        }
    }

    /// The next element of channel `ch` (its replay first); into `capture` too when given.
    #[inline]
    fn try_recv(
        &mut self,
        ch: usize,
        capture: Option<&mut Capture>,
        flat: usize,
    ) -> Result<StreamElement<T>, TryRecvError> {
        let element = match self.replayed(ch) {
            Some(element) => element,
            None => self.channels[ch].try_recv_mut()?,
        };
        if let Some(capture) = capture {
            capture.add(flat, &element, self.codec.as_ref());
        }
        Ok(element)
    }

    #[inline]
    fn replayed(&mut self, ch: usize) -> Option<StreamElement<T>> {
        if self.replaying == 0 {
            return None;
        }
        let element = self.replay[ch].pop_front()?;
        if self.replay[ch].is_empty() {
            self.replaying -= 1;
        }
        Some(element)
    }

    fn peek_priority(&self, ch: usize) -> Option<CheckpointBarrier> {
        self.channels[ch]
            .peek_priority(|e| match e {
                StreamElement::Barrier(b) => Some(*b),
                _ => None,
            })
            .flatten()
    }

    /// Takes channel `ch`'s oldest priority barrier early; `capture`, when given, stores what
    /// it overtook: the replayed elements, then the channel's own.
    fn overtake(
        &mut self,
        ch: usize,
        capture: Option<&mut Capture>,
        flat: usize,
    ) -> Option<CheckpointBarrier> {
        let element = match capture {
            Some(capture) => {
                let codec = self.codec.as_ref();
                for element in &self.replay[ch] {
                    capture.add(flat, element, codec);
                }
                self.channels[ch].take_priority(|_| true, |e| capture.add(flat, e, codec))?
            }
            None => self.channels[ch].take_priority(|_| true, |_| {})?,
        };
        match element {
            StreamElement::Barrier(barrier) => Some(barrier),
            _ => None,
        }
    }

    fn unread(&mut self, ch: usize, element: StreamElement<T>) {
        if self.replay[ch].is_empty() {
            self.replaying += 1;
        }
        self.replay[ch].push_front(element);
    }

    fn restore(&mut self, ch: usize, elements: Vec<StreamElement<T>>) {
        assert!(
            ch < self.channels.len(),
            "channel state for channel {ch} of a gate with {} channels",
            self.channels.len()
        );
        if elements.is_empty() {
            return;
        }
        if self.replay[ch].is_empty() {
            self.replaying += 1;
        }
        self.replay[ch].extend(elements);
    }
}

/// The two inputs' lanes of a two-input gate, seen as one flat list of channels.
struct Pair<A, B> {
    one: Lanes<A>,
    two: Lanes<B>,
}

/// How the engine reaches a gate's typed channels.
trait GateChannels {
    type Record;
    fn try_recv(
        &mut self,
        ch: usize,
        capture: Option<&mut Capture>,
    ) -> Result<Item<Self::Record>, TryRecvError>;
    fn peek_priority(&self, ch: usize) -> Option<CheckpointBarrier>;
    fn overtake(&mut self, ch: usize, capture: Option<&mut Capture>) -> Option<CheckpointBarrier>;
    /// Whether every channel has a codec: only then are barriers taken early.
    fn can_capture(&self) -> bool;
}

impl<T> GateChannels for Lanes<T> {
    type Record = StreamRecord<T>;

    #[inline]
    fn try_recv(
        &mut self,
        ch: usize,
        capture: Option<&mut Capture>,
    ) -> Result<Item<StreamRecord<T>>, TryRecvError> {
        Lanes::try_recv(self, ch, capture, ch).map(|e| split(e, |r| r))
    }

    fn peek_priority(&self, ch: usize) -> Option<CheckpointBarrier> {
        Lanes::peek_priority(self, ch)
    }

    fn overtake(&mut self, ch: usize, capture: Option<&mut Capture>) -> Option<CheckpointBarrier> {
        Lanes::overtake(self, ch, capture, ch)
    }

    fn can_capture(&self) -> bool {
        self.codec.is_some()
    }
}

impl<A, B> GateChannels for Pair<A, B> {
    type Record = Either<A, B>;

    #[inline]
    fn try_recv(
        &mut self,
        ch: usize,
        capture: Option<&mut Capture>,
    ) -> Result<Item<Either<A, B>>, TryRecvError> {
        let n1 = self.one.channels.len();
        if ch < n1 {
            self.one
                .try_recv(ch, capture, ch)
                .map(|e| split(e, Either::One))
        } else {
            self.two
                .try_recv(ch - n1, capture, ch)
                .map(|e| split(e, Either::Two))
        }
    }

    fn peek_priority(&self, ch: usize) -> Option<CheckpointBarrier> {
        let n1 = self.one.channels.len();
        if ch < n1 {
            self.one.peek_priority(ch)
        } else {
            self.two.peek_priority(ch - n1)
        }
    }

    fn overtake(&mut self, ch: usize, capture: Option<&mut Capture>) -> Option<CheckpointBarrier> {
        let n1 = self.one.channels.len();
        if ch < n1 {
            self.one.overtake(ch, capture, ch)
        } else {
            self.two.overtake(ch - n1, capture, ch)
        }
    }

    fn can_capture(&self) -> bool {
        self.one.codec.is_some() && self.two.codec.is_some()
    }
}

/// The channel state of the unaligned checkpoint being taken.
struct Capture {
    /// Its barrier, as forwarded (unaligned).
    barrier: CheckpointBarrier,
    /// Channels whose barrier has not arrived (and that have not ended): what they deliver
    /// until it does is channel state.
    open: Vec<bool>,
    open_count: usize,
    state: ChannelState,
    /// Why an element could not be stored: the checkpoint is declined.
    failure: Option<String>,
    /// When the first barrier arrived.
    started: Instant,
}

impl Capture {
    /// Stores `element` as channel `ch`'s (barriers and ends are not state).
    fn add<T>(&mut self, ch: usize, element: &StreamElement<T>, codec: Option<&ChannelCodec<T>>) {
        if matches!(
            element,
            StreamElement::Barrier(_) | StreamElement::EndOfInput
        ) {
            return;
        }
        match codec.map(|codec| codec.encode(element)) {
            Some(Ok(bytes)) => self.state.push(ch, bytes),
            Some(Err(message)) => {
                self.failure.get_or_insert(message);
            }
            None => {
                self.failure
                    .get_or_insert_with(|| format!("input channel {ch} has no codec"));
            }
        }
    }

    fn close(&mut self, ch: usize) {
        if self.open[ch] {
            self.open[ch] = false;
            self.open_count -= 1;
        }
    }
}

/// Alignment, watermark combination, the round-robin cursor and queued signals: everything but
/// the channels themselves, so both gates share it.
struct GateCore {
    aligner: BarrierAligner,
    /// One valve per input, over that input's channels.
    inputs: Vec<WatermarkValve>,
    /// Combines the inputs' valves (one channel per input).
    combined: WatermarkValve,
    /// First flat channel index of each input, then the total.
    starts: Vec<usize>,
    /// The channel read first by the next poll.
    cursor: usize,
    pending: VecDeque<Signal>,
    /// What unaligned checkpoints produce; returned before `pending`.
    urgent: VecDeque<Signal>,
    metrics: Option<Arc<TaskMetrics>>,
    /// Rung by a priority element on any channel.
    bell: crate::sync::Arc<PriorityBell>,
    /// The unaligned checkpoint whose channel state is being taken.
    capture: Option<Capture>,
    /// The checkpoint whose barrier this gate saw first, and when: an aligned timeout counts
    /// from then.
    first_seen: Option<(u64, Instant)>,
    /// When an aligned timeout falls due: a poll then looks at the priority lanes again.
    recheck_at: Option<Instant>,
    /// The channel the last record came from.
    last: usize,
}

impl GateCore {
    /// Records into `metrics`; its live state learns how many channels the gate reads.
    fn set_metrics(&mut self, metrics: Arc<TaskMetrics>) {
        metrics.live.set_inputs(self.aligner.channels());
        self.metrics = Some(metrics);
    }

    /// Channel `ch` delivered checkpoint `id`'s barrier (in order or early): the live state
    /// shows it arrived there. Once per barrier and channel.
    fn note_barrier(&self, ch: usize, id: u64) {
        if let Some(metrics) = &self.metrics {
            metrics.live.barrier_received(ch, id);
        }
    }

    fn new(sizes: &[usize]) -> Self {
        let mut starts = Vec::with_capacity(sizes.len() + 1);
        let mut total = 0;
        for &size in sizes {
            starts.push(total);
            total += size;
        }
        starts.push(total);
        GateCore {
            aligner: BarrierAligner::new(total),
            inputs: sizes.iter().map(|&n| WatermarkValve::new(n)).collect(),
            combined: WatermarkValve::new(sizes.len()),
            starts,
            cursor: 0,
            pending: VecDeque::new(),
            urgent: VecDeque::new(),
            metrics: None,
            bell: PriorityBell::new(),
            capture: None,
            first_seen: None,
            recheck_at: None,
            last: 0,
        }
    }

    #[inline]
    fn has_priority(&self) -> bool {
        !self.urgent.is_empty()
            || self.bell.is_rung()
            || self.recheck_at.is_some_and(|at| Instant::now() >= at)
    }

    /// Polls readable channels round robin until one yields an event or a full turn finds
    /// nothing. Unaligned barriers waiting in the priority lanes go first.
    #[inline]
    fn poll<G: GateChannels>(&mut self, io: &mut G) -> Result<Polled<G::Record>, InputClosed> {
        if self.bell.is_rung() || self.recheck_at.is_some() {
            self.on_priority(io);
        }
        if let Some(signal) = self.urgent.pop_front() {
            return Ok(Polled::Signal(signal));
        }
        if let Some(signal) = self.pending.pop_front() {
            return Ok(Polled::Signal(signal));
        }
        let n = self.aligner.channels();
        // Channels in a row that had nothing; a full turn of them means nothing is available.
        let mut quiet = 0;
        while quiet < n {
            let ch = self.cursor;
            self.cursor = if ch + 1 == n { 0 } else { ch + 1 };
            if !self.aligner.is_readable(ch) {
                quiet += 1;
                continue;
            }
            let capture = self.capture.as_mut().filter(|c| c.open[ch]);
            match io.try_recv(ch, capture) {
                Ok(Item::Record(record)) => {
                    self.last = ch;
                    return Ok(Polled::Record(record));
                }
                Ok(Item::Control(control)) => {
                    self.on_control(ch, control);
                    if let Some(signal) = self.urgent.pop_front() {
                        return Ok(Polled::Signal(signal));
                    }
                    if let Some(signal) = self.pending.pop_front() {
                        return Ok(Polled::Signal(signal));
                    }
                    // It changed nothing visible (a watermark behind, a blocking barrier):
                    // readability may have changed, so look at every channel again.
                    quiet = 0;
                }
                Err(TryRecvError::Empty) => quiet += 1,
                Err(TryRecvError::Disconnected) => return Err(InputClosed { channel: ch }),
            }
        }
        Ok(if self.aligner.all_ended() {
            Polled::AllEnded
        } else {
            Polled::Nothing
        })
    }

    /// Only what unaligned checkpoints produce (see [`InputGate::poll_priority`]).
    fn poll_priority<G: GateChannels>(&mut self, io: &mut G) -> Option<Signal> {
        if self.bell.is_rung() || self.recheck_at.is_some() {
            self.on_priority(io);
        }
        self.urgent.pop_front()
    }

    /// Takes early every priority barrier that may go early, and switches an alignment whose
    /// timeout passed to unaligned.
    #[cold]
    fn on_priority<G: GateChannels>(&mut self, io: &mut G) {
        let now = Instant::now();
        if self.recheck_at.is_some_and(|at| now < at) && !self.bell.is_rung() {
            return;
        }
        self.bell.take();
        self.recheck_at = None;
        if !io.can_capture() {
            // Barriers stay in their lanes and arrive in order: aligned.
            return;
        }
        if let Some(pending) = self.aligner.pending()
            && let Alignment::AlignedTimeout(timeout) = pending.alignment
            && self.capture.is_none()
        {
            if self.timed_out(pending.id, timeout, now) {
                self.start_capture(io, pending, None, now);
            } else {
                self.recheck(pending.id, timeout, now);
            }
        }
        for ch in 0..self.aligner.channels() {
            if self.aligner.is_ended(ch) {
                continue;
            }
            while let Some(barrier) = io.peek_priority(ch) {
                if !self.goes_early(barrier, now) {
                    break;
                }
                self.overtake(io, ch, barrier, now);
            }
        }
    }

    /// Whether `barrier`, waiting in a priority lane, is taken now rather than in order.
    fn goes_early(&mut self, barrier: CheckpointBarrier, now: Instant) -> bool {
        if let Some(capture) = &self.capture
            && barrier.id <= capture.barrier.id
        {
            // The checkpoint being taken unaligned, or a late barrier of an older one.
            return true;
        }
        match barrier.alignment {
            Alignment::Unaligned => true,
            Alignment::Aligned => false,
            Alignment::AlignedTimeout(timeout) => {
                if self.timed_out(barrier.id, timeout, now) {
                    true
                } else {
                    self.recheck(barrier.id, timeout, now);
                    false
                }
            }
        }
    }

    /// Whether checkpoint `id`'s aligned timeout passed, counted from this gate's first sight
    /// of its barrier (which this call may be).
    fn timed_out(&mut self, id: u64, timeout: Duration, now: Instant) -> bool {
        let seen = match self.first_seen {
            Some((seen_id, at)) if seen_id == id => at,
            _ => {
                self.first_seen = Some((id, now));
                now
            }
        };
        now.saturating_duration_since(seen) >= timeout
    }

    /// Looks at the priority lanes again once checkpoint `id`'s aligned timeout falls due.
    fn recheck(&mut self, id: u64, timeout: Duration, now: Instant) {
        let seen = match self.first_seen {
            Some((seen_id, at)) if seen_id == id => at,
            _ => now,
        };
        let due = seen + timeout;
        self.recheck_at = Some(self.recheck_at.map_or(due, |at| at.min(due)));
    }

    /// Takes channel `ch`'s priority `barrier` early.
    fn overtake<G: GateChannels>(
        &mut self,
        io: &mut G,
        ch: usize,
        barrier: CheckpointBarrier,
        now: Instant,
    ) {
        self.note_barrier(ch, barrier.id);
        match &mut self.capture {
            Some(capture) if capture.barrier.id == barrier.id => {
                // This channel's barrier of the checkpoint being taken: what it overtook
                // completes the channel's state.
                let open = capture.open[ch];
                io.overtake(ch, open.then_some(&mut *capture));
                capture.close(ch);
                self.complete_if_done(now);
                return;
            }
            Some(capture) if capture.barrier.id > barrier.id => {
                // Late: its checkpoint was superseded.
                io.overtake(ch, None);
                return;
            }
            Some(_) => {
                let superseded = self.capture.take().expect("matched");
                self.urgent
                    .push_back(Signal::Aborted(superseded.barrier.id));
            }
            None => {}
        }
        let stale = self
            .aligner
            .newest()
            .is_some_and(|newest| barrier.id <= newest)
            && self.aligner.pending().is_none_or(|p| p.id != barrier.id);
        if stale {
            io.overtake(ch, None);
            return;
        }
        self.start_capture(io, barrier, Some(ch), now);
    }

    /// Starts unaligned checkpoint `barrier`: the task snapshots now. `ch` delivered the
    /// barrier early (its overtaken elements are stored); `None` when an alignment timed out.
    fn start_capture<G: GateChannels>(
        &mut self,
        io: &mut G,
        barrier: CheckpointBarrier,
        ch: Option<usize>,
        now: Instant,
    ) {
        let n = self.aligner.channels();
        // An alignment of this checkpoint in progress (it timed out): the channels it blocked
        // delivered the barrier in order already.
        let aligning = self.aligner.pending().filter(|p| p.id == barrier.id);
        let started = match aligning {
            Some(_) => self.aligner.alignment_started_at().unwrap_or(now),
            None => now,
        };
        let delivered = |c: usize| aligning.is_some() && self.aligner.is_blocked(c);
        let open: Vec<bool> = (0..n)
            .map(|c| !(self.aligner.is_ended(c) || delivered(c)))
            .collect();
        // Releases every blocked channel; barriers of this checkpoint and older ones that
        // arrive in order from now on are ignored by the aligner.
        if let Some(aborted) = self.aligner.abort(barrier.id)
            && aborted.id != barrier.id
        {
            self.urgent.push_back(Signal::Aborted(aborted.id));
        }
        let forwarded = barrier.with_alignment(Alignment::Unaligned);
        let mut capture = Capture {
            barrier: forwarded,
            open_count: open.iter().filter(|&&o| o).count(),
            open,
            state: ChannelState::new(),
            failure: None,
            started,
        };
        if let Some(ch) = ch {
            io.overtake(ch, Some(&mut capture));
            capture.close(ch);
        }
        self.urgent.push_back(Signal::Unaligned(forwarded));
        self.capture = Some(capture);
        self.complete_if_done(now);
    }

    /// Hands over the channel state once every channel's barrier arrived (or it ended).
    fn complete_if_done(&mut self, now: Instant) {
        if self.capture.as_ref().is_none_or(|c| c.open_count > 0) {
            return;
        }
        let capture = self.capture.take().expect("checked");
        let id = capture.barrier.id;
        if self.first_seen.is_some_and(|(seen, _)| seen <= id) {
            self.first_seen = None;
        }
        if let Some(metrics) = &self.metrics {
            if self.aligner.channels() > 1 {
                metrics
                    .alignment
                    .record(now.saturating_duration_since(capture.started));
            }
            if capture.failure.is_none() {
                metrics
                    .channel_state_records
                    .add(capture.state.elements() as u64);
                metrics
                    .channel_state_bytes
                    .add(capture.state.bytes() as u64);
            }
        }
        let state = match capture.failure {
            None => Ok(capture.state),
            Some(failure) => Err(format!(
                "channel state of checkpoint {id} could not be stored: {failure}"
            )),
        };
        self.urgent.push_back(Signal::ChannelState(id, state));
    }

    /// The task put back the last record of channel `ch`: if it was stored as channel state,
    /// it is stored again when read again.
    fn forget_captured(&mut self, ch: usize) {
        if let Some(capture) = &mut self.capture
            && capture.open[ch]
        {
            capture.state.pop(ch);
        }
    }

    /// The coordinator aborted checkpoint `id`: an unaligned one being taken stops storing,
    /// an aligned one releases its channels.
    fn abort(&mut self, id: u64) -> Option<CheckpointBarrier> {
        if let Some(capture) = &self.capture
            && capture.barrier.id <= id
        {
            let capture = self.capture.take().expect("checked");
            self.aligner.abort(id);
            return Some(capture.barrier);
        }
        self.aligner.abort(id)
    }

    fn register_waker(&self, waker: &Waker, mut register: impl FnMut(usize, &Waker)) {
        if !self.pending.is_empty()
            || !self.urgent.is_empty()
            || self.bell.is_rung()
            || self.aligner.all_ended()
        {
            waker.wake_by_ref();
            return;
        }
        for ch in 0..self.aligner.channels() {
            if self.aligner.is_readable(ch) {
                register(ch, waker);
            }
        }
    }

    /// (input, channel within the input) of flat channel `ch`.
    fn locate(&self, ch: usize) -> (usize, usize) {
        let input = self.starts[1..]
            .iter()
            .position(|&end| ch < end)
            .unwrap_or(0);
        (input, ch - self.starts[input])
    }

    fn on_control(&mut self, ch: usize, control: Control) {
        let (input, local) = self.locate(ch);
        match control {
            Control::Watermark(w) => {
                if let Some(w) = self.inputs[input].on_watermark(local, w) {
                    self.forward(input, ValveOutput::Watermark(w));
                }
            }
            Control::Status(s) => {
                let update = self.inputs[input].on_status(local, s);
                for output in update {
                    self.forward(input, output);
                }
            }
            Control::Barrier(b) => self.on_barrier(ch, b),
            Control::End => {
                if let Some(metrics) = &self.metrics {
                    metrics.live.input_ended(ch);
                }
                let update = self.inputs[input].on_end_of_input(local);
                for output in update {
                    self.forward(input, output);
                }
                if let Some(capture) = &mut self.capture {
                    capture.close(ch);
                    self.complete_if_done(Instant::now());
                }
                // Snapshot before the operators hear of the end: after a restore from this
                // checkpoint they hear it again.
                if let Some(aligned) = self.aligner.on_end_of_input(ch, Instant::now()) {
                    self.triggered(aligned);
                }
                if self.inputs[input].all_ended() {
                    let update = self.combined.on_end_of_input(input);
                    self.push_combined(update);
                    if self.inputs.len() > 1 {
                        self.pending.push_back(Signal::InputEnded(input));
                    }
                }
            }
        }
    }

    /// A barrier read in order.
    fn on_barrier(&mut self, ch: usize, b: CheckpointBarrier) {
        self.note_barrier(ch, b.id);
        if let Some(capture) = &mut self.capture {
            if capture.barrier.id == b.id {
                // Came in order before the gate took it early: the channel's state is complete.
                capture.close(ch);
                self.complete_if_done(Instant::now());
                return;
            }
            if capture.barrier.id > b.id {
                return;
            }
            // A newer aligned barrier (a savepoint) supersedes the unaligned checkpoint.
            let superseded = self.capture.take().expect("checked");
            self.urgent
                .push_back(Signal::Aborted(superseded.barrier.id));
        }
        let now = Instant::now();
        match self.aligner.on_barrier(ch, b, now) {
            AlignerAction::Block => {
                if let Alignment::AlignedTimeout(timeout) = b.alignment {
                    // Counts from this first sight; the next poll after it switches.
                    self.timed_out(b.id, timeout, now);
                    self.recheck(b.id, timeout, now);
                }
            }
            AlignerAction::Ignore => {}
            AlignerAction::Trigger(aligned) => self.triggered(aligned),
            AlignerAction::Superseded { aborted, current } => {
                self.pending.push_back(Signal::Aborted(aborted.id));
                if let Alignment::AlignedTimeout(timeout) = current.alignment {
                    self.timed_out(current.id, timeout, now);
                    self.recheck(current.id, timeout, now);
                }
            }
        }
    }

    /// Feeds one input valve's output into the combining valve.
    fn forward(&mut self, input: usize, output: ValveOutput) {
        match output {
            ValveOutput::Watermark(w) => {
                if let Some(w) = self.combined.on_watermark(input, w) {
                    self.pending.push_back(Signal::Watermark(w));
                }
            }
            ValveOutput::Status(s) => {
                let update = self.combined.on_status(input, s);
                self.push_combined(update);
            }
        }
    }

    fn push_combined(&mut self, update: ValveUpdate) {
        for output in update {
            self.pending.push_back(match output {
                ValveOutput::Watermark(w) => Signal::Watermark(w),
                ValveOutput::Status(s) => Signal::Status(s),
            });
        }
    }

    fn triggered(&mut self, aligned: Aligned) {
        if self
            .first_seen
            .is_some_and(|(seen, _)| seen <= aligned.barrier.id)
        {
            self.first_seen = None;
            self.recheck_at = None;
        }
        if let Some(metrics) = &self.metrics
            && self.aligner.channels() > 1
        {
            metrics.alignment.record(aligned.alignment_duration());
        }
        self.pending.push_back(Signal::Checkpoint(aligned.barrier));
    }
}

impl fmt::Debug for GateCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateCore")
            .field("aligner", &self.aligner)
            .field("watermark", &self.combined.watermark())
            .field("status", &self.combined.status())
            .field("queued", &self.pending.len())
            .field("unaligned", &self.capture.as_ref().map(|c| c.barrier.id))
            .finish_non_exhaustive()
    }
}

/// Wakes a parked thread.
struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The blocking form of the polling protocol: poll (a few times, backing off); register a waker
/// that unparks this thread; poll again; park; repeat. An unpark that comes before the park makes the park return at once
/// (the thread's token), so the notice is not lost; a spurious return just polls again. Returns
/// the "nothing" event once `deadline` passed.
fn wait_for_event<G, E>(
    gate: &mut G,
    deadline: Option<Instant>,
    poll: fn(&mut G) -> Result<E, InputClosed>,
    register: fn(&G, &Waker),
    is_nothing: fn(&E) -> bool,
) -> Result<E, InputClosed> {
    let event = poll(gate)?;
    if !is_nothing(&event) {
        return Ok(event);
    }
    // Parking and unparking cost microseconds; data usually follows within nanoseconds.
    let mut backoff = Backoff::new();
    while !backoff.is_exhausted() {
        backoff.snooze();
        let event = poll(gate)?;
        if !is_nothing(&event) {
            return Ok(event);
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    loop {
        register(gate, &waker);
        let event = poll(gate)?;
        if !is_nothing(&event) {
            return Ok(event);
        }
        match deadline {
            None => thread::park(),
            Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => thread::park_timeout(left),
                _ => return Ok(event),
            },
        }
    }
}
