//! What the checkpoint lock owns in a bridge task, and what each mail does to it.
//!
//! The lock owns a legacy [`SourceCell`] whose backend is the kit's [`ChainBody`]: the
//! source's state, the context's bookkeeping, and the operator chain with the task's output.
//! The source thread reaches the chain through the body's `SourceOutput` methods (inside its
//! locked sections); the mailbox thread through the mails below, each run under the lock by the
//! [`CheckpointLockExecutor`](crate::CheckpointLockExecutor). The steps (checkpoint order,
//! notices, timers, end of input, close) are the kit's and legacy's source cell's; the phases
//! (what a finished or closed chain still gets) are the kit's body phases. Every mail that may
//! emit publishes the record counts after it (the kit's
//! [`publish_after_mail`](ChainBody::publish_after_mail), with the source taken as possibly
//! idle), so records a timer or an async completion emitted while the source waits are seen.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::Operator;
use streamtask_core::operator::{OperatorEvent, TaskOutput};
use streamtask_core::task::{TaskError, TaskFailure};
use streamtask_core::time::Timer;
use streamtask_legacy::SourceCell;
use streamtask_mailbox::OperatorMails;
use streamtask_runtime::ChainBody;

use super::trigger::{PendingTrigger, PendingTriggers};

/// A failure that ends the mailbox loop. A type of this crate, so that the crate may implement
/// the mailbox's [`OperatorMails`] for legacy's [`SourceCell`] (the orphan rule wants one local
/// type in the impl).
pub(crate) struct MailFailure(pub(crate) TaskFailure);

impl fmt::Debug for MailFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What the checkpoint lock owns: the source's state and context, then the chain.
pub(crate) type BridgeCell<S, C, W> = SourceCell<S, ChainBody<C, W>>;

fn failure<C, W>(body: &ChainBody<C, W>, error: impl Into<TaskError>) -> MailFailure
where
    C: streamtask_core::operator::TaskChain,
    W: TaskOutput<C::Out>,
{
    MailFailure(TaskFailure::new(body.name(), error))
}

/// Who runs the waiting triggers (see [`run_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// The trigger's mail on the mailbox thread (the processor counts the mail).
    Mail,
    /// The lock's errand on the source thread: each trigger is counted as a mail, as the
    /// mailbox model counts a trigger from its slot.
    Errand,
}

/// Runs every trigger waiting, oldest first, under the lock: the trigger mail on the mailbox
/// thread, or the lock's errand on the source thread before its next section, whichever holds
/// the lock first (the other finds none). A failed checkpoint stops the run; the triggers left
/// wait for the next holder, or decline at the task's end.
pub(crate) fn run_pending<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    pending: &PendingTriggers,
    holder: Holder,
) -> Result<(), MailFailure>
where
    S: Serialize + DeserializeOwned + Default,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    pending.run_all(cell, |cell, trigger| {
        trigger_checkpoint(cell, trigger, holder)
    })
}

/// One checkpoint trigger, under the lock: so the source is between two locked sections and
/// its state agrees with what it emitted (the kit declines a task that is not running).
fn trigger_checkpoint<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    trigger: PendingTrigger,
    holder: Holder,
) -> Result<(), MailFailure>
where
    S: Serialize + DeserializeOwned + Default,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    let PendingTrigger { barrier, requested } = trigger;
    if holder == Holder::Errand {
        cell.output().metrics().count_trigger_as_mail(requested);
    }
    cell.checkpoint(barrier, requested)
        .map_err(|e| failure(cell.output(), e))
}

/// A checkpoint-complete (`completed`) or -aborted notice, under the lock; never delivered to a
/// closed chain (FLINK-16383).
pub(crate) fn notify<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    id: u64,
    completed: bool,
) -> Result<(), MailFailure>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    let body = cell.output_mut();
    body.notify_checkpoint(id, completed)
        .map_err(|e| failure(body, e))?;
    after_mail(body);
    Ok(())
}

/// After a mail that may have emitted (a notice, a timer, an event): publishes the records
/// counted so far. The mailbox thread cannot tell whether the source thread will publish them
/// (it may be waiting outside the lock for as long as it likes), so every such mail publishes,
/// as the kit's rule has it for a default action that may be suspended
/// ([`ChainBody::publish_after_mail`]).
fn after_mail<C, W>(body: &mut ChainBody<C, W>)
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    body.publish_after_mail(true);
}

/// Timers and events of the chain, as mails under the lock. Context timers (automatic
/// watermarks, idleness checks) go to the source's context.
impl<S, C, W> OperatorMails<MailFailure> for BridgeCell<S, C, W>
where
    S: Serialize + DeserializeOwned + Default + Send + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn on_timer(&mut self, timer: Timer) -> Result<(), MailFailure> {
        self.dispatch_timer(timer)
            .map_err(|e| failure(self.output(), e))?;
        after_mail(self.output_mut());
        Ok(())
    }

    fn on_event(&mut self, operator: usize, event: OperatorEvent) -> Result<(), MailFailure> {
        let body = self.output_mut();
        body.dispatch_event(operator, event)
            .map_err(|e| failure(body, e))?;
        after_mail(body);
        Ok(())
    }
}
