//! [`TaskInput`]: a task's input gate seen the same way for one and two inputs, so each model
//! reads gates with one loop; [`ChainBody::apply`] puts the gate's [`InputEvent`] through the
//! chain.

use std::task::Waker;

use crate::channel::{InputClosed, InputEvent, InputGate, TwoInputGate, TwoInputRecord};
use streamtask_core::operator::{Operator, TwoInputChain, TwoInputOperator};
use streamtask_core::{OperatorError, StreamRecord, operator::TaskOutput};

use super::body::{Applied, ChainBody};
use streamtask_core::operator::TaskChain;

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
            InputEvent::ChannelState { id, state } => self.complete_channel_state(id, state),
            InputEvent::Superseded { id } => self.superseded(id),
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

impl<T: Send + 'static> TaskInput for InputGate<T> {
    type Record = StreamRecord<T>;

    #[inline]
    fn poll_event(&mut self) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        self.poll_next()
    }

    fn set_priority_waker(&mut self, waker: Waker) {
        InputGate::set_priority_waker(self, waker);
    }

    #[inline]
    fn has_priority(&self) -> bool {
        InputGate::has_priority(self)
    }

    fn poll_priority(&mut self) -> Option<InputEvent<StreamRecord<T>>> {
        InputGate::poll_priority(self)
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
        self.poll_next()
    }

    fn set_priority_waker(&mut self, waker: Waker) {
        TwoInputGate::set_priority_waker(self, waker);
    }

    #[inline]
    fn has_priority(&self) -> bool {
        TwoInputGate::has_priority(self)
    }

    fn poll_priority(&mut self) -> Option<InputEvent<TwoInputRecord<A, B>>> {
        TwoInputGate::poll_priority(self)
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
