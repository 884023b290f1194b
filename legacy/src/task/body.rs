//! What the checkpoint lock owns in each kind of task, over the kit's
//! [`ChainBody`](streamtask_runtime::ChainBody):
//!
//! | task | the lock owns |
//! |---|---|
//! | `SourceStreamTask` | `SourceCell<S, ChainBody<C, W>>`: the source's state and context bookkeeping, then the chain |
//! | `OneInputStreamTask`, `AsyncWaitStreamTask` | `ChainBody<C, W>` |
//! | `TwoInputStreamTask` | `ChainBody<TwoInputChain<H, T>, W>` |
//!
//! [`LockedBody`] is what the task's threads do to it, holding the lock; only the source cell
//! adds anything (its state in the snapshot, its context's timers, its context closed).

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::Operator;
use streamtask_core::operator::TaskChain;
use streamtask_core::{
    CheckpointBarrier, OperatorError, operator::TaskOutput, state::TaskSnapshot, task::TaskError,
    time::Timer,
};
use streamtask_runtime::{BodyPhase, ChainBody};

use std::time::Instant;

use crate::source::{CONTEXT_TIMER_OPERATOR, SourceCell, SourceOutput, restore_source_state};

/// What a legacy task's threads do to what its checkpoint lock owns.
pub(crate) trait LockedBody: Send + 'static {
    /// The chain.
    type Chain: TaskChain + 'static;
    /// The task's output.
    type Output: TaskOutput<<Self::Chain as TaskChain>::Out> + 'static;

    /// The kit's body.
    fn body(&mut self) -> &mut ChainBody<Self::Chain, Self::Output>;

    /// Restores (source state and) chain from `restore`, then opens the chain.
    fn restore_and_open(&mut self, restore: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        self.body().restore_and_open(restore)
    }

    /// A checkpoint, in Flink's order (see [`ChainBody::checkpoint`]).
    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
    ) -> Result<(), TaskError> {
        self.body().checkpoint(barrier, requested, |_, _| Ok(()))
    }

    /// A timer of the chain (or of the source's context).
    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        self.body().dispatch_timer(timer)
    }

    /// Closes (the source's context and) the chain: on every exit path.
    fn close(&mut self) {
        self.body().close();
    }
}

impl<C, W> LockedBody for ChainBody<C, W>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    type Chain = C;
    type Output = W;

    #[inline]
    fn body(&mut self) -> &mut ChainBody<C, W> {
        self
    }
}

/// The source task's body: the source's state and context bookkeeping, then the chain.
impl<S, C, W> LockedBody for SourceCell<S, ChainBody<C, W>>
where
    S: Serialize + DeserializeOwned + Default + Send + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    type Chain = C;
    type Output = W;

    #[inline]
    fn body(&mut self) -> &mut ChainBody<C, W> {
        self.output_mut()
    }

    fn restore_and_open(&mut self, restore: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        SourceCell::restore_and_open(self, restore)
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
    ) -> Result<(), TaskError> {
        SourceCell::checkpoint(self, barrier, requested)
    }

    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        SourceCell::dispatch_timer(self, timer)
    }

    fn close(&mut self) {
        SourceCell::close(self);
    }
}

/// What a legacy source task does to its cell under the lock, in this crate's tasks and the
/// bridge's: the kit's body steps, with the source's state and context added.
impl<S, C, W> SourceCell<S, ChainBody<C, W>>
where
    S: Serialize + DeserializeOwned + Default,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    /// Restores the source's state (from [`TaskSnapshot::SOURCE`]) and the chain, then opens
    /// the chain.
    ///
    /// # Errors
    ///
    /// A state that does not decode; a snapshot with elements in flight
    /// ([`TaskSnapshot::SOURCE_IN_FLIGHT`], written by the bridge's `HandoffReader`), which
    /// this task cannot replay (the bridge's `InFlightReplay` around the source can, with the
    /// entry taken out of the snapshot, as the job API does); whatever an operator's restore or
    /// `open` fails with.
    pub fn restore_and_open(
        &mut self,
        restore: Option<&TaskSnapshot>,
    ) -> Result<(), OperatorError> {
        if restore.is_some_and(|s| s.get(TaskSnapshot::SOURCE_IN_FLIGHT).is_some()) {
            return Err(OperatorError::user(
                self.name().to_string(),
                "the snapshot holds elements a HandoffReader had in flight; run the source in \
                 streamtask_bridge::InFlightReplay with that entry taken out of the snapshot \
                 (TaskSnapshot::remove), as the job API does, so they are replayed, not lost",
            ));
        }
        *self.state_mut() =
            restore_source_state(restore).map_err(|e| OperatorError::state(self.name(), e))?;
        self.output_mut().restore_and_open(restore)
    }

    /// A checkpoint in Flink's order (see [`ChainBody::checkpoint`]), with the source's state
    /// snapshotted between the barrier and the chain. Run it under the lock, so the source is
    /// between two locked sections and its state agrees with what it emitted.
    ///
    /// # Errors
    ///
    /// [`TaskError::Checkpoint`] when a step failed; the checkpoint was declined.
    pub fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
    ) -> Result<(), TaskError> {
        let name = self.name().to_string();
        let (state, body) = self.state_and_output_mut();
        body.checkpoint(barrier, requested, |_, into| {
            into.put_value(TaskSnapshot::SOURCE, &*state)
                .map_err(|e| OperatorError::state(name, e))
        })
    }

    /// A timer: the context's own (automatic watermarks, idleness) or the chain's; dropped
    /// once the chain finished.
    ///
    /// # Errors
    ///
    /// Whatever the operator (or the context's output) fails with.
    pub fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        if timer.operator != CONTEXT_TIMER_OPERATOR {
            return self.output_mut().dispatch_timer(timer);
        }
        if matches!(
            self.output().phase(),
            BodyPhase::Running | BodyPhase::Draining
        ) {
            self.on_context_timer::<C::In>(timer)
        } else {
            Ok(())
        }
    }

    /// Closes the context and the chain (once; on every exit path).
    pub fn close(&mut self) {
        self.close_context();
        self.output_mut().close();
    }
}

/// Where a legacy source emits, in the source task and the bridge: through the chain. The end
/// of a finite source's input starts the chain's end of input; the task thread drains and
/// finishes it.
impl<C, W> SourceOutput<C::In> for ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    fn end_input(&mut self) -> Result<(), OperatorError> {
        self.begin_end_of_input();
        Ok(())
    }

    /// The kit's check ([`ChainBody::source_may_emit`]): no room while the chain refuses input,
    /// nor while a stop-with-savepoint is pending (the source's next section waits for the
    /// savepoint; once it completes the source is cancelled, once aborted it goes on).
    #[inline]
    fn has_capacity(&self) -> bool {
        self.source_may_emit()
    }

    #[inline]
    fn starts_after_end_of_input(&self) -> bool {
        self.is_drained()
    }
}
