//! The checkpoint triggers waiting for the lock: one queue, served by whichever holder of the
//! checkpoint lock gets there first, the source thread before its next section (the lock's
//! errand) or the mailbox thread running the trigger's mail. Each trigger is taken out of the
//! queue once (under its mutex), by a holder of the checkpoint lock, so it runs or declines
//! exactly once, and in the order the triggers were made (the lock serializes the holders).
//!
//! The mail is sent for every trigger, even one the source runs first. Sending it only when no
//! holder took the trigger within a grace (10 us, the triggering thread looking at a taken count
//! next to the queue) saves a hot source the mailbox thread's wake-up and the hand-over, but was
//! measured no better (issue 16): a trigger the source does not take at once (it is off its
//! core) then pays the grace before its mail, which is more than 1% of triggers on a two-core
//! machine, while the hot-source trigger is already at 2-5 us p99 from the call.

use std::collections::VecDeque;
use std::fmt;

use streamtask_core::sync::Mutex;

use super::body::PendingTrigger;

/// The triggers made and not yet taken (see the module docs).
pub(crate) struct PendingTriggers {
    queue: Mutex<VecDeque<PendingTrigger>>,
}

impl PendingTriggers {
    pub(crate) fn new() -> Self {
        PendingTriggers {
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// A trigger was made: it waits for the next holder of the checkpoint lock.
    pub(crate) fn push(&self, trigger: PendingTrigger) {
        self.queue.lock().push_back(trigger);
    }

    /// The oldest trigger waiting; call it holding the checkpoint lock.
    pub(crate) fn pop(&self) -> Option<PendingTrigger> {
        self.queue.lock().pop_front()
    }

    /// The task is ending and no holder will come: every trigger waiting declines (as it
    /// drops, outside the queue's mutex).
    pub(crate) fn decline_all(&self) {
        let left = std::mem::take(&mut *self.queue.lock());
        drop(left);
    }
}

impl fmt::Debug for PendingTriggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTriggers")
            .field("waiting", &self.queue.lock().len())
            .finish()
    }
}
