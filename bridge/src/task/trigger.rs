//! The checkpoint triggers waiting for the lock: one queue, served by whichever holder of the
//! checkpoint lock gets there first, the source thread before its next section (the lock's
//! errand) or the mailbox thread running the trigger's mail. Each trigger is taken out of the
//! queue once (under its mutex), by a holder of the checkpoint lock, so it runs or declines
//! exactly once, and in the order the triggers were made (the lock serializes the holders).
//!
//! The mail is sent for every trigger, even one the source runs first, but it runs without the
//! mailbox's action executor
//! ([`ProcessorHandle::execute_unlocked`](streamtask_mailbox::ProcessorHandle::execute_unlocked)) and looks at the queue
//! before it asks for the lock ([`PendingTriggers::run_fallback`]): through
//! the executor, every trigger's mail would ask the source for the lock (a bounded hand-over),
//! so a hot source whose errand had already run the trigger would let go of the lock and park
//! on the lock's condition until the mailbox thread had taken and released it, for nothing,
//! once per trigger (two context switches of the source thread and a wake-up of it, on a
//! machine where the triggering thread may need the other core). A mail that finds the queue
//! empty ends there, and the source never lets go for it.
//!
//! Each trigger is pushed before its mail is put, and taken out of the queue once, under the
//! queue's mutex, by a holder of the checkpoint lock; so a mail that finds the queue empty
//! finds its trigger taken (run, or running), and one that finds it not empty takes the lock
//! and runs what is left (possibly nothing, if the errand came first after all). Modelled in
//! `tests/loom.rs` (`a_trigger_runs_once_whoever_takes_it`).
//!
//! The mail is urgent ([`Priority::URGENT`](streamtask_mailbox::Priority::URGENT)): it
//! overtakes the rest of a batch the mailbox thread has already built (timer and event mails,
//! each of which takes the checkpoint lock from the source in turn), so a source that takes no
//! section soon does not make a trigger wait for that batch. It cannot reorder triggers: the
//! mail carries none, it runs whatever this queue holds, oldest first, so the order is the
//! queue's whichever mail runs first; and running ahead of mails queued earlier is what a
//! trigger run by the source's errand does anyway. The mailbox's fairness rule keeps the
//! mails from being starved (a trigger per checkpoint is no stream of urgent mails anyway).
//!
//! The responder is the queue's, not each trigger's: a trigger call clones nothing (a
//! responder clone is a `String` allocation).
//!
//! The mail is sent at once for every trigger, not only when no holder took the trigger within
//! a grace: a grace would save a hot source the mailbox thread's wake-up, but a trigger the
//! source does not take at once (it is off its core) would then pay the grace before its mail,
//! and on a two-core machine that is often enough to raise the p99. PERF-NOTES.md has the
//! measurements ("Bridge checkpoint triggers").

use std::collections::VecDeque;
use std::fmt;
use std::time::Instant;

use streamtask_core::CheckpointBarrier;
use streamtask_core::sync::Mutex;
use streamtask_core::task::{CheckpointResponder, DeclineReason};
use streamtask_legacy::CheckpointLock;

use crate::executor::CheckpointLockExecutor;

/// A checkpoint trigger on its way to a holder of the lock. One that no holder takes (the task
/// ended first) declines through the queue's responder
/// ([`PendingTriggers::decline_all`]), so the coordinator always hears back.
#[derive(Debug, Clone, Copy)]
// `pub` for the loom models, which get it re-exported under `cfg(loom)` only.
#[allow(unreachable_pub)]
pub struct PendingTrigger {
    pub(crate) barrier: CheckpointBarrier,
    pub(crate) requested: Instant,
}

#[allow(unreachable_pub)]
impl PendingTrigger {
    /// A trigger made at `requested`.
    pub fn new(barrier: CheckpointBarrier, requested: Instant) -> Self {
        PendingTrigger { barrier, requested }
    }

    /// Its checkpoint's id.
    pub fn id(&self) -> u64 {
        self.barrier.id
    }
}

/// The triggers made and not yet taken (see the module docs), and the responder through which
/// those that never run decline.
// `pub` for the loom models, which get it re-exported under `cfg(loom)` only.
#[allow(unreachable_pub)]
pub struct PendingTriggers {
    queue: Mutex<VecDeque<PendingTrigger>>,
    responder: CheckpointResponder,
}

#[allow(unreachable_pub)]
impl PendingTriggers {
    /// An empty queue; what never runs declines through `responder`.
    pub fn new(responder: CheckpointResponder) -> Self {
        PendingTriggers {
            queue: Mutex::new(VecDeque::new()),
            responder,
        }
    }

    /// Whether no trigger waits (the fallback mail's look before it asks for the lock).
    pub fn is_empty(&self) -> bool {
        self.queue.lock().is_empty()
    }

    /// A trigger was made: it waits for the next holder of the checkpoint lock.
    pub fn push(&self, trigger: PendingTrigger) {
        self.queue.lock().push_back(trigger);
    }

    /// The oldest trigger waiting; call it holding the checkpoint lock.
    pub fn pop(&self) -> Option<PendingTrigger> {
        self.queue.lock().pop_front()
    }

    /// Runs every trigger waiting, oldest first, with `run`; call it holding the checkpoint lock
    /// (`cell` is what it guards). A failed trigger stops the run; the triggers left wait for
    /// the next holder, or decline at the task's end.
    pub fn run_all<T: ?Sized, E>(
        &self,
        cell: &mut T,
        mut run: impl FnMut(&mut T, PendingTrigger) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(trigger) = self.pop() {
            run(cell, trigger)?;
        }
        Ok(())
    }

    /// The fallback mail's part, not holding the lock: if a holder of the lock took every
    /// trigger already (the source's errand, most of the time), nothing; otherwise `run_left`
    /// (which runs what is left, see [`run_all`](Self::run_all)) under `lock`, taken as the
    /// action executor takes it for every mail (a bounded hand-over).
    pub fn run_fallback<T, E>(
        &self,
        lock: &CheckpointLock<T>,
        run_left: impl FnOnce(&mut T) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.is_empty() {
            // Taken by a holder of the lock: run, or running.
            return Ok(());
        }
        CheckpointLockExecutor::run_on(lock, run_left)
    }

    /// The task is ending and no holder will come: every trigger waiting declines (outside the
    /// queue's mutex).
    pub fn decline_all(&self) {
        let left = std::mem::take(&mut *self.queue.lock());
        for trigger in left {
            self.responder
                .decline(trigger.id(), DeclineReason::NotRunning);
        }
    }
}

impl fmt::Debug for PendingTriggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTriggers")
            .field("waiting", &self.queue.lock().len())
            .finish()
    }
}
