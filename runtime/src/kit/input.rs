//! [`TaskInput`]: a task's input gate seen the same way for one and two inputs, so each model
//! reads gates with one loop.

use std::task::Waker;

use crate::channel::{
    ChannelState, GateEvent, InputClosed, InputGate, TwoInputEvent, TwoInputGate,
};
use streamtask_core::operator::{Operator, TwoInputChain, TwoInputOperator};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, operator::TaskOutput,
};

use super::body::{Applied, ChainBody};
use streamtask_core::operator::TaskChain;

/// One event of a task's input, whatever the number of inputs.
#[derive(Debug)]
pub enum InputEvent<R> {
    /// A record; it enters the chain through [`InputRecord::deliver`].
    Record(R),
    /// The combined watermark advanced.
    Watermark(Watermark),
    /// The combined stream status changed.
    Status(StreamStatus),
    /// Every channel delivered this barrier: snapshot now.
    Barrier(CheckpointBarrier),
    /// The first barrier of an unaligned checkpoint, ahead of the records before it: snapshot
    /// now; the acknowledgement waits for its [`ChannelState`](InputEvent::ChannelState).
    UnalignedBarrier(CheckpointBarrier),
    /// The channel state of unaligned checkpoint `id` is complete (or could not be stored):
    /// acknowledge (or decline) with it.
    ChannelState(u64, Result<ChannelState, String>),
    /// A newer barrier superseded checkpoint `id` during alignment: decline it.
    Superseded(u64),
    /// Input `n` (of two) ended; the other may still deliver.
    InputEnded(u8),
    /// Nothing can be read now.
    Nothing,
    /// Every input ended.
    EndOfInput,
}

impl<R> InputEvent<R> {
    /// Whether the event needs the chain to accept input (a record, or a watermark, which an
    /// async operator's queue counts too). The end of event time does not: it comes right
    /// before the end of input and enters the chain whether or not it has room (as Flink's
    /// `endData` advances the chain to it), so an async operator with a full queue holds it and
    /// still learns at once that its input ended (its due retries run then).
    pub fn needs_room(&self) -> bool {
        match self {
            InputEvent::Record(_) => true,
            InputEvent::Watermark(watermark) => !watermark.is_max(),
            _ => false,
        }
    }
}

impl<C, W> ChainBody<C, W>
where
    C: TaskChain,
    W: TaskOutput<C::Out>,
{
    /// Applies one input event: records, watermarks and status changes go through the chain,
    /// the end of one input of two ends the head's; what the model handles itself (a barrier,
    /// a superseded checkpoint, nothing to read, end of input) comes back.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    #[inline]
    pub fn apply<R: InputRecord<C>>(
        &mut self,
        event: InputEvent<R>,
    ) -> Result<Applied, OperatorError> {
        match event {
            InputEvent::Record(record) => record.deliver(self)?,
            InputEvent::Watermark(watermark) => self.process_watermark(watermark)?,
            InputEvent::Status(status) => self.process_status(status)?,
            InputEvent::InputEnded(input) => self.end_input_of(input)?,
            InputEvent::Barrier(barrier) => return Ok(Applied::Barrier(barrier)),
            InputEvent::UnalignedBarrier(barrier) => {
                self.unaligned_barrier_arrived(barrier.id);
                return Ok(Applied::Barrier(barrier));
            }
            InputEvent::ChannelState(id, state) => self.complete_channel_state(id, state),
            InputEvent::Superseded(id) => self.superseded(id),
            InputEvent::Nothing => return Ok(Applied::Nothing),
            InputEvent::EndOfInput => return Ok(Applied::EndOfInput),
        }
        Ok(Applied::Done)
    }
}

/// A record of a task's input and the chain kind it enters.
pub trait InputRecord<C: TaskChain>: Send + Sized {
    /// Sends the record through `body`'s chain.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn deliver<W: TaskOutput<C::Out>>(
        self,
        body: &mut ChainBody<C, W>,
    ) -> Result<(), OperatorError>;
}

impl<C: Operator> InputRecord<C> for StreamRecord<C::In>
where
    C::In: Send,
{
    #[inline]
    fn deliver<W: TaskOutput<C::Out>>(
        self,
        body: &mut ChainBody<C, W>,
    ) -> Result<(), OperatorError> {
        body.process(self)
    }
}

/// A record of a two-input task: of input 1 or of input 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoInputRecord<A, B> {
    /// A record of input 1.
    First(StreamRecord<A>),
    /// A record of input 2.
    Second(StreamRecord<B>),
}

impl<H, T> InputRecord<TwoInputChain<H, T>> for TwoInputRecord<H::In1, H::In2>
where
    H: TwoInputOperator,
    H::In1: Send,
    H::In2: Send,
    T: Operator<In = H::Out>,
{
    #[inline]
    fn deliver<W: TaskOutput<T::Out>>(
        self,
        body: &mut ChainBody<TwoInputChain<H, T>, W>,
    ) -> Result<(), OperatorError> {
        match self {
            TwoInputRecord::First(record) => body.process1(record),
            TwoInputRecord::Second(record) => body.process2(record),
        }
    }
}

/// A task's input gate: [`InputGate`] (one input) or [`TwoInputGate`] (two inputs, one aligner
/// over both).
pub trait TaskInput: Send + 'static {
    /// What a record of this input is.
    type Record: Send;
    /// Reads the next event without blocking.
    ///
    /// # Errors
    ///
    /// [`InputClosed`] if a channel closed without end of input.
    fn poll_event(&mut self) -> Result<InputEvent<Self::Record>, InputClosed>;
    /// Asks to be woken once an event may be available.
    fn register_waker(&self, waker: &Waker);
    /// Checkpoint `id` was aborted: releases the channels held back for its alignment. Returns
    /// whether any were (their data was already there: no data waker will announce it).
    fn abort_checkpoint(&mut self, id: u64) -> bool;
    /// Records alignment and input metrics into `metrics`.
    fn with_metrics(self, metrics: std::sync::Arc<streamtask_core::metrics::TaskMetrics>) -> Self
    where
        Self: Sized;
    /// When a task waiting for this input must poll again even if no waker fired (an
    /// iteration head's wait timeout); `None`, the default: only when woken.
    fn wake_at(&self) -> Option<std::time::Instant> {
        None
    }
    /// Releases what the input holds beyond its channels (an iteration head's alarm thread,
    /// joined here); the task calls it before it reports that it ended. The default does
    /// nothing.
    fn close(&mut self) {}
    /// Wakes `waker` whenever an unaligned barrier may be taken early, also while the task
    /// does not read its input (its output is full). The default does nothing.
    fn set_priority_waker(&mut self, _waker: Waker) {}
    /// Whether [`poll_priority`](Self::poll_priority) may return something: one load. The
    /// default: never.
    fn has_priority(&self) -> bool {
        false
    }
    /// Only the events of unaligned checkpoints, taking waiting barriers early (see
    /// [`InputGate::poll_priority`]); the default: none.
    fn poll_priority(&mut self) -> Option<InputEvent<Self::Record>> {
        None
    }
    /// Puts back the last record read, which the chain could not take yet: the next read of its
    /// channel returns it again, and an unaligned barrier that overtakes it stores it as channel
    /// state. Hands it back when the input cannot (the caller holds it).
    ///
    /// # Errors
    ///
    /// The record, when this input keeps no place for it.
    fn unread(&mut self, record: Self::Record) -> Result<(), Self::Record> {
        Err(record)
    }
}

fn gate_event<T>(event: GateEvent<T>) -> InputEvent<StreamRecord<T>> {
    match event {
        GateEvent::Record(record) => InputEvent::Record(record),
        GateEvent::Watermark(watermark) => InputEvent::Watermark(watermark),
        GateEvent::Status(status) => InputEvent::Status(status),
        GateEvent::Checkpoint(barrier) => InputEvent::Barrier(barrier),
        GateEvent::UnalignedCheckpoint(barrier) => InputEvent::UnalignedBarrier(barrier),
        GateEvent::ChannelState { id, state } => InputEvent::ChannelState(id, state),
        GateEvent::CheckpointAborted { id } => InputEvent::Superseded(id),
        GateEvent::Nothing => InputEvent::Nothing,
        GateEvent::EndOfInput => InputEvent::EndOfInput,
    }
}

fn two_input_event<A, B>(event: TwoInputEvent<A, B>) -> InputEvent<TwoInputRecord<A, B>> {
    match event {
        TwoInputEvent::Record1(record) => InputEvent::Record(TwoInputRecord::First(record)),
        TwoInputEvent::Record2(record) => InputEvent::Record(TwoInputRecord::Second(record)),
        TwoInputEvent::Watermark(watermark) => InputEvent::Watermark(watermark),
        TwoInputEvent::Status(status) => InputEvent::Status(status),
        TwoInputEvent::Checkpoint(barrier) => InputEvent::Barrier(barrier),
        TwoInputEvent::UnalignedCheckpoint(barrier) => InputEvent::UnalignedBarrier(barrier),
        TwoInputEvent::ChannelState { id, state } => InputEvent::ChannelState(id, state),
        TwoInputEvent::CheckpointAborted { id } => InputEvent::Superseded(id),
        TwoInputEvent::EndOfInput1 => InputEvent::InputEnded(1),
        TwoInputEvent::EndOfInput2 => InputEvent::InputEnded(2),
        TwoInputEvent::Nothing => InputEvent::Nothing,
        TwoInputEvent::EndOfInput => InputEvent::EndOfInput,
    }
}

impl<T: Send + 'static> TaskInput for InputGate<T> {
    type Record = StreamRecord<T>;

    #[inline]
    fn poll_event(&mut self) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        Ok(gate_event(self.poll_next()?))
    }

    fn set_priority_waker(&mut self, waker: Waker) {
        InputGate::set_priority_waker(self, waker);
    }

    #[inline]
    fn has_priority(&self) -> bool {
        InputGate::has_priority(self)
    }

    fn poll_priority(&mut self) -> Option<InputEvent<StreamRecord<T>>> {
        InputGate::poll_priority(self).map(gate_event)
    }

    fn unread(&mut self, record: StreamRecord<T>) -> Result<(), StreamRecord<T>> {
        InputGate::unread(self, record);
        Ok(())
    }

    fn register_waker(&self, waker: &Waker) {
        InputGate::register_waker(self, waker);
    }

    fn abort_checkpoint(&mut self, id: u64) -> bool {
        InputGate::abort_checkpoint(self, id).is_some()
    }

    fn with_metrics(self, metrics: std::sync::Arc<streamtask_core::metrics::TaskMetrics>) -> Self {
        InputGate::with_metrics(self, metrics)
    }
}

impl<A: Send + 'static, B: Send + 'static> TaskInput for TwoInputGate<A, B> {
    type Record = TwoInputRecord<A, B>;

    #[inline]
    fn poll_event(&mut self) -> Result<InputEvent<TwoInputRecord<A, B>>, InputClosed> {
        Ok(two_input_event(self.poll_next()?))
    }

    fn set_priority_waker(&mut self, waker: Waker) {
        TwoInputGate::set_priority_waker(self, waker);
    }

    #[inline]
    fn has_priority(&self) -> bool {
        TwoInputGate::has_priority(self)
    }

    fn poll_priority(&mut self) -> Option<InputEvent<TwoInputRecord<A, B>>> {
        TwoInputGate::poll_priority(self).map(two_input_event)
    }

    fn unread(&mut self, record: TwoInputRecord<A, B>) -> Result<(), TwoInputRecord<A, B>> {
        match record {
            TwoInputRecord::First(record) => self.unread1(record),
            TwoInputRecord::Second(record) => self.unread2(record),
        }
        Ok(())
    }

    fn register_waker(&self, waker: &Waker) {
        TwoInputGate::register_waker(self, waker);
    }

    fn abort_checkpoint(&mut self, id: u64) -> bool {
        TwoInputGate::abort_checkpoint(self, id).is_some()
    }

    fn with_metrics(self, metrics: std::sync::Arc<streamtask_core::metrics::TaskMetrics>) -> Self {
        TwoInputGate::with_metrics(self, metrics)
    }
}
