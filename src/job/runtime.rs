//! The running tasks of a job, whatever their model: one enum over each model's task handle,
//! with the control surface they all share.

use streamtask_core::{CheckpointBarrier, TaskOutcome, TriggerError};

/// A running task of any model.
#[derive(Debug)]
pub(crate) enum RunningTask {
    /// A checkpoint-lock task.
    Legacy(streamtask_legacy::TaskHandle),
    /// A mailbox task (also what the bridge model runs for readers and inputs).
    Mailbox(streamtask_mailbox::TaskHandle),
    /// A legacy source on its own thread, mails under the checkpoint lock.
    Bridge(streamtask_bridge::TaskHandle),
}

macro_rules! each {
    ($self:ident, $h:ident => $e:expr) => {
        match $self {
            RunningTask::Legacy($h) => $e,
            RunningTask::Mailbox($h) => $e,
            RunningTask::Bridge($h) => $e,
        }
    };
}

impl RunningTask {
    pub(crate) fn name(&self) -> &str {
        each!(self, h => h.name())
    }

    pub(crate) fn trigger_checkpoint(
        &self,
        barrier: CheckpointBarrier,
    ) -> Result<(), TriggerError> {
        each!(self, h => h.trigger_checkpoint(barrier))
    }

    pub(crate) fn notify_checkpoint_complete(&self, id: u64) {
        each!(self, h => h.notify_checkpoint_complete(id))
    }

    pub(crate) fn notify_checkpoint_aborted(&self, id: u64) {
        each!(self, h => h.notify_checkpoint_aborted(id))
    }

    pub(crate) fn cancel(&self) {
        each!(self, h => h.cancel())
    }

    pub(crate) fn is_done(&self) -> bool {
        each!(self, h => h.is_done())
    }

    pub(crate) fn join(self) -> TaskOutcome {
        each!(self, h => h.join())
    }
}
