//! [`TaskChain`]: what a task does to its chain, whatever its number of inputs.
//!
//! For the task-runtime kit (`streamtask-runtime`), whose task body drives a chain through it; an
//! operator never implements it. It lives beside [`Operator`] and [`TwoInputChain`] because it is
//! implemented for both (every `Operator`, and the two-input chain), which only the crate that
//! defines them may do.

use super::{Context, Operator, OperatorEvent, TwoInputChain, TwoInputOperator};
use crate::element::{StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::state::TaskSnapshot;
use crate::time::Timer;

/// The calls every task makes on its operator chain, the same for a one-input chain (any
/// [`Operator`], chained or not) and a [`TwoInputChain`]; records go in through the kind's own
/// methods (the runtime's `ChainBody::process`, `process1`, `process2`).
///
/// Operators are numbered head first from 0; `end_input_at` takes one index at a time so a
/// runtime can let each operator drain before the next one's input ends.
pub trait TaskChain: Send {
    /// What the chain's last operator emits.
    type Out;

    /// Restores every operator from `snapshot` (`None`: a fresh start).
    ///
    /// # Errors
    ///
    /// Whatever an operator's `initialize_state` fails with.
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError>;
    /// Opens the chain, tail first.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `open` fails with.
    fn open(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError>;
    /// A watermark for the head.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// A stream status change for the head.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// A timer for the operator it names.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// An event for operator `operator`.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// Whether the head takes input now (an async operator with a full queue does not).
    fn accepts_input(&self) -> bool;
    /// Before the barrier goes downstream (operators may flush).
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// Snapshots every operator into `into`.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn snapshot(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError>;
    /// Checkpoint `checkpoint_id` completed on every task.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError>;
    /// Checkpoint `checkpoint_id` was aborted.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError>;
    /// Input `input` of several ended (the others may still deliver); a one-input chain gets
    /// none (its input's end is the end of input).
    ///
    /// # Errors
    ///
    /// Whatever the head fails with.
    fn end_input_of(
        &mut self,
        input: u8,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// How many operators the chain has.
    fn chain_len(&self) -> usize;
    /// End of input for the operator at index `operator` only.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;
    /// Finishes the chain, head to tail, after every operator's input ended.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    fn finish(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError>;
    /// Releases the chain's resources.
    ///
    /// # Errors
    ///
    /// The first failure.
    fn close(&mut self) -> Result<(), OperatorError>;
    /// The operators' names, head first.
    fn chain_names(&self) -> Vec<String>;
}

impl<C: Operator> TaskChain for C {
    type Out = C::Out;

    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        self.restore_chain(snapshot, 0)
    }
    fn open(&mut self, ctx: &mut Context<'_, C::Out>) -> Result<(), OperatorError> {
        Operator::open(self, ctx)
    }
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::process_watermark(self, watermark, ctx)
    }
    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::process_status(self, status, ctx)
    }
    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::dispatch_timer(self, timer, ctx)
    }
    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::dispatch_event(self, operator, event, ctx)
    }
    #[inline]
    fn accepts_input(&self) -> bool {
        Operator::accepts_input(self)
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::prepare_snapshot_pre_barrier(self, checkpoint_id, ctx)
    }
    fn snapshot(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        self.snapshot_chain(checkpoint_id, 0, into)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        Operator::notify_checkpoint_complete(self, checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        Operator::notify_checkpoint_aborted(self, checkpoint_id)
    }
    fn end_input_of(
        &mut self,
        input: u8,
        _ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        debug_assert!(
            false,
            "a one-input chain got the end of input {input} of several"
        );
        Ok(())
    }
    fn chain_len(&self) -> usize {
        Operator::chain_len(self)
    }
    fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        Operator::end_input_at(self, operator, ctx)
    }
    fn finish(&mut self, ctx: &mut Context<'_, C::Out>) -> Result<(), OperatorError> {
        Operator::finish(self, ctx)
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        Operator::close(self)
    }
    fn chain_names(&self) -> Vec<String> {
        Operator::chain_names(self)
    }
}

impl<H, T> TaskChain for TwoInputChain<H, T>
where
    H: TwoInputOperator,
    T: Operator<In = H::Out>,
{
    type Out = T::Out;

    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        TwoInputChain::restore(self, snapshot)
    }
    fn open(&mut self, ctx: &mut Context<'_, T::Out>) -> Result<(), OperatorError> {
        TwoInputChain::open(self, ctx)
    }
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::process_watermark(self, watermark, ctx)
    }
    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::process_status(self, status, ctx)
    }
    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::dispatch_timer(self, timer, ctx)
    }
    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::dispatch_event(self, operator, event, ctx)
    }
    #[inline]
    fn accepts_input(&self) -> bool {
        TwoInputChain::accepts_input(self)
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::prepare_snapshot_pre_barrier(self, checkpoint_id, ctx)
    }
    fn snapshot(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        TwoInputChain::snapshot(self, checkpoint_id, into)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        TwoInputChain::notify_checkpoint_complete(self, checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        TwoInputChain::notify_checkpoint_aborted(self, checkpoint_id)
    }
    fn end_input_of(
        &mut self,
        input: u8,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::end_input(self, input, ctx)
    }
    fn chain_len(&self) -> usize {
        TwoInputChain::chain_len(self)
    }
    fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        TwoInputChain::end_input_at(self, operator, ctx)
    }
    fn finish(&mut self, ctx: &mut Context<'_, T::Out>) -> Result<(), OperatorError> {
        TwoInputChain::finish_tail(self, ctx)
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        TwoInputChain::close(self)
    }
    fn chain_names(&self) -> Vec<String> {
        TwoInputChain::chain_names(self)
    }
}
