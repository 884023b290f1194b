//! Input gates: a task's input over N channels, read fairly, with barrier alignment and watermark
//! combination built in; see [`InputGate`] and [`TwoInputGate`].

use std::collections::VecDeque;
use std::fmt;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

// std's `Arc`: the task's metrics are shared as `std::sync::Arc<TaskMetrics>` (see
// `TaskConfig`), and `Waker::from` needs std's `Arc`; neither is a protocol loom should model.
use std::sync::Arc;

use super::aligner::{Aligned, AlignerAction, BarrierAligner};
use super::backoff::Backoff;
use super::bounded::{Receiver, TryRecvError};
use super::valve::{ValveOutput, ValveUpdate, WatermarkValve};
use crate::sync::thread;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::task::TaskError;
use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord, StreamStatus, Watermark};

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

/// What [`InputGate::poll_next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateEvent<T> {
    /// A record to process.
    Record(StreamRecord<T>),
    /// The combined watermark advanced.
    Watermark(Watermark),
    /// The combined stream status changed.
    Status(StreamStatus),
    /// Every channel delivered this barrier (or ended): snapshot now, then forward the barrier.
    Checkpoint(CheckpointBarrier),
    /// A newer barrier superseded this checkpoint during alignment; decline it.
    CheckpointAborted {
        /// The aborted checkpoint.
        id: u64,
    },
    /// Nothing can be read now: register a waker, poll again, then suspend.
    Nothing,
    /// Every channel ended; nothing will ever follow (returned on every later poll).
    EndOfInput,
}

/// What [`TwoInputGate::poll_next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoInputEvent<A, B> {
    /// A record of input 1.
    Record1(StreamRecord<A>),
    /// A record of input 2.
    Record2(StreamRecord<B>),
    /// The watermark combined over both inputs advanced.
    Watermark(Watermark),
    /// The status combined over both inputs changed.
    Status(StreamStatus),
    /// Every channel of both inputs delivered this barrier (or ended): snapshot now.
    Checkpoint(CheckpointBarrier),
    /// A newer barrier superseded this checkpoint during alignment; decline it.
    CheckpointAborted {
        /// The aborted checkpoint.
        id: u64,
    },
    /// Every channel of input 1 ended: call `end_input(1)`.
    EndOfInput1,
    /// Every channel of input 2 ended: call `end_input(2)`.
    EndOfInput2,
    /// Nothing can be read now: register a waker, poll again, then suspend.
    Nothing,
    /// Both inputs ended (after their `EndOfInput1` / `EndOfInput2`); returned on every later
    /// poll.
    EndOfInput,
}

/// A one-input task's input: N channels read round robin, barriers aligned, watermarks and
/// status combined.
///
/// [`TwoInputGate`] is its two-input sibling (one aligner over the channels of both inputs,
/// because a checkpoint of a two-input task cuts both). Both read the
/// channels round robin, one element per channel per turn, skipping channels that are blocked
/// for alignment or ended; they turn what they read into events:
///
/// | read on a channel | event |
/// |---|---|
/// | record | `Record` (`Record1` / `Record2`) |
/// | watermark, status | `Watermark` / `Status` only when the combined value changes ([`WatermarkValve`]) |
/// | barrier | nothing (the channel is blocked), `Checkpoint` once aligned, `CheckpointAborted` when superseded ([`BarrierAligner`]) |
/// | end of input | maybe `Watermark` / `Checkpoint`; `EndOfInput1` / `EndOfInput2` when an input of a two-input gate ended; `EndOfInput` once every channel ended |
/// | disconnection without end of input | the error [`InputClosed`] (the upstream task failed) |
///
/// # Polling without lost wakeups (the mailbox model)
///
/// [`InputGate::poll_next`] never blocks. When it returns [`GateEvent::Nothing`]:
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
/// use streamtask_runtime::channel::{GateEvent, InputGate, bounded};
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
/// assert_eq!(gate.poll_next().unwrap(), GateEvent::Record(StreamRecord::new("before")));
/// assert!(gate.is_blocked(0));
/// assert_eq!(gate.poll_next().unwrap(), GateEvent::Checkpoint(barrier));
/// assert_eq!(gate.poll_next().unwrap(), GateEvent::Record(StreamRecord::new("after")));
/// assert_eq!(gate.poll_next().unwrap(), GateEvent::Nothing);
/// ```
pub struct InputGate<T> {
    channels: Vec<Receiver<StreamElement<T>>>,
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
        Ok(InputGate { channels, core })
    }

    /// Records alignment durations into `metrics.alignment` (when there are several channels).
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.core.metrics = Some(metrics);
        self
    }

    /// The next event, without blocking.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn poll_next(&mut self) -> Result<GateEvent<T>, InputClosed> {
        let channels = &mut self.channels;
        let polled = self
            .core
            .poll(|ch| channels[ch].try_recv_mut().map(|e| split(e, |r| r)))?;
        Ok(match polled {
            Polled::Record(r) => GateEvent::Record(r),
            Polled::Signal(Signal::Watermark(w)) => GateEvent::Watermark(w),
            Polled::Signal(Signal::Status(s)) => GateEvent::Status(s),
            Polled::Signal(Signal::Checkpoint(b)) => GateEvent::Checkpoint(b),
            Polled::Signal(Signal::Aborted(id)) => GateEvent::CheckpointAborted { id },
            // A one-input core reports no per-input ends; all-ended follows.
            Polled::Signal(Signal::InputEnded(_)) | Polled::AllEnded => GateEvent::EndOfInput,
            Polled::Nothing => GateEvent::Nothing,
        })
    }

    /// Asks to be woken through `waker` when a readable channel (not blocked, not ended) receives
    /// data or disconnects; wakes at once if an event is already waiting. Call it after
    /// [`poll_next`](Self::poll_next) returned `Nothing`, then poll once more before suspending.
    pub fn register_waker(&self, waker: &Waker) {
        self.core
            .register_waker(waker, |ch, w| self.channels[ch].register_data_waker(w));
    }

    /// The next event, parking the calling thread while there is none (never `Nothing`).
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_blocking(&mut self) -> Result<GateEvent<T>, InputClosed> {
        wait_for_event(self, None, Self::poll_next, Self::register_waker, |e| {
            matches!(e, GateEvent::Nothing)
        })
    }

    /// The next event, parking the calling thread at most `timeout`; `Nothing` if none came.
    ///
    /// Under `cfg(loom)` the wait is untimed.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<GateEvent<T>, InputClosed> {
        wait_for_event(
            self,
            Instant::now().checked_add(timeout),
            Self::poll_next,
            Self::register_waker,
            |e| matches!(e, GateEvent::Nothing),
        )
    }

    /// The coordinator aborted checkpoint `id`: if it (or an older one) is being aligned, every
    /// channel is released and its barrier returned. Late barriers of `id` are ignored.
    pub fn abort_checkpoint(&mut self, id: u64) -> Option<CheckpointBarrier> {
        self.core.aligner.abort(id)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels.len()
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
            .field("channels", &self.channels.len())
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
/// use streamtask_runtime::channel::{TwoInputEvent, TwoInputGate, bounded};
/// use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord, Watermark};
///
/// let (numbers, rx1) = bounded::<StreamElement<u32>>(8).unwrap();
/// let (words, rx2) = bounded::<StreamElement<String>>(8).unwrap();
/// let mut gate = TwoInputGate::new(vec![rx1], vec![rx2]).unwrap();
///
/// numbers.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0))).unwrap();
/// numbers.send(StreamElement::Record(StreamRecord::new(7))).unwrap();
/// numbers.send(StreamElement::Watermark(Watermark(10))).unwrap();
/// assert_eq!(gate.poll_next().unwrap(), TwoInputEvent::Nothing); // input 1 held back
/// words.send(StreamElement::Watermark(Watermark(5))).unwrap();
/// words.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0))).unwrap();
/// assert_eq!(gate.poll_next().unwrap(), TwoInputEvent::Checkpoint(CheckpointBarrier::new(1, 0)));
/// assert_eq!(gate.poll_next().unwrap(), TwoInputEvent::Record1(StreamRecord::new(7)));
/// assert_eq!(gate.poll_next().unwrap(), TwoInputEvent::Watermark(Watermark(5)));
/// ```
pub struct TwoInputGate<A, B> {
    input1: Vec<Receiver<StreamElement<A>>>,
    input2: Vec<Receiver<StreamElement<B>>>,
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
        Ok(TwoInputGate {
            input1,
            input2,
            core,
        })
    }

    /// Records alignment durations into `metrics.alignment`.
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.core.metrics = Some(metrics);
        self
    }

    /// The next event, without blocking.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn poll_next(&mut self) -> Result<TwoInputEvent<A, B>, InputClosed> {
        let (input1, input2) = (&mut self.input1, &mut self.input2);
        let n1 = input1.len();
        let polled = self.core.poll(|ch| {
            if ch < n1 {
                input1[ch].try_recv_mut().map(|e| split(e, Either::One))
            } else {
                input2[ch - n1]
                    .try_recv_mut()
                    .map(|e| split(e, Either::Two))
            }
        })?;
        Ok(match polled {
            Polled::Record(Either::One(r)) => TwoInputEvent::Record1(r),
            Polled::Record(Either::Two(r)) => TwoInputEvent::Record2(r),
            Polled::Signal(Signal::Watermark(w)) => TwoInputEvent::Watermark(w),
            Polled::Signal(Signal::Status(s)) => TwoInputEvent::Status(s),
            Polled::Signal(Signal::Checkpoint(b)) => TwoInputEvent::Checkpoint(b),
            Polled::Signal(Signal::Aborted(id)) => TwoInputEvent::CheckpointAborted { id },
            Polled::Signal(Signal::InputEnded(0)) => TwoInputEvent::EndOfInput1,
            Polled::Signal(Signal::InputEnded(_)) => TwoInputEvent::EndOfInput2,
            Polled::AllEnded => TwoInputEvent::EndOfInput,
            Polled::Nothing => TwoInputEvent::Nothing,
        })
    }

    /// Asks to be woken through `waker` when a readable channel of either input receives data or
    /// disconnects; wakes at once if an event is already waiting. Same protocol as
    /// [`InputGate::register_waker`].
    pub fn register_waker(&self, waker: &Waker) {
        let n1 = self.input1.len();
        self.core.register_waker(waker, |ch, w| {
            if ch < n1 {
                self.input1[ch].register_data_waker(w);
            } else {
                self.input2[ch - n1].register_data_waker(w);
            }
        });
    }

    /// The next event, parking the calling thread while there is none (never `Nothing`).
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_blocking(&mut self) -> Result<TwoInputEvent<A, B>, InputClosed> {
        wait_for_event(self, None, Self::poll_next, Self::register_waker, |e| {
            matches!(e, TwoInputEvent::Nothing)
        })
    }

    /// The next event, parking the calling thread at most `timeout`; `Nothing` if none came.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] when a channel disconnected without end of input.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<TwoInputEvent<A, B>, InputClosed> {
        wait_for_event(
            self,
            Instant::now().checked_add(timeout),
            Self::poll_next,
            Self::register_waker,
            |e| matches!(e, TwoInputEvent::Nothing),
        )
    }

    /// The coordinator aborted checkpoint `id`; as [`InputGate::abort_checkpoint`].
    pub fn abort_checkpoint(&mut self, id: u64) -> Option<CheckpointBarrier> {
        self.core.aligner.abort(id)
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
            .field("input1", &self.input1.len())
            .field("input2", &self.input2.len())
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
    metrics: Option<Arc<TaskMetrics>>,
}

impl GateCore {
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
            metrics: None,
        }
    }

    /// Polls readable channels round robin until one yields an event or a full turn finds
    /// nothing.
    #[inline]
    fn poll<R>(
        &mut self,
        mut try_recv: impl FnMut(usize) -> Result<Item<R>, TryRecvError>,
    ) -> Result<Polled<R>, InputClosed> {
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
            match try_recv(ch) {
                Ok(Item::Record(record)) => return Ok(Polled::Record(record)),
                Ok(Item::Control(control)) => {
                    self.on_control(ch, control);
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

    fn register_waker(&self, waker: &Waker, mut register: impl FnMut(usize, &Waker)) {
        if !self.pending.is_empty() || self.aligner.all_ended() {
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
            Control::Barrier(b) => match self.aligner.on_barrier(ch, b, Instant::now()) {
                AlignerAction::Block | AlignerAction::Ignore => {}
                AlignerAction::Trigger(aligned) => self.triggered(aligned),
                AlignerAction::Superseded { aborted, .. } => {
                    self.pending.push_back(Signal::Aborted(aborted.id));
                }
            },
            Control::End => {
                let update = self.inputs[input].on_end_of_input(local);
                for output in update {
                    self.forward(input, output);
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
