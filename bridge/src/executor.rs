//! [`CheckpointLockExecutor`]: the mailbox processor's [`ActionExecutor`] that runs every mail
//! under the checkpoint lock (Flink's `SynchronizedStreamTaskActionExecutor`).
//!
//! The processor hands each action mail (and each default-action step) to its executor; control
//! mails (poison, resume, failure reports) never reach it, so they run even while another thread
//! holds the lock. With this executor the task state lives inside a [`CheckpointLock`] shared
//! with a legacy source's thread, and a mail runs only while that thread is between two locked
//! sections.
//!
//! Each action takes the lock through [`CheckpointLock::request_handover`]: the source's
//! context lets go at its next section (every emit), so a mail waits for at most the section in
//! flight whatever the lock's fairness (the bounded bridge hand-over).
//!
//! After each action the executor notifies the lock's condition (one atomic load when nobody
//! waits): a mail may have changed what a source waiting on the condition checks (room in its
//! output, say).

use std::fmt;

use streamtask_core::sync::Arc;
use streamtask_legacy::CheckpointLock;
use streamtask_mailbox::ActionExecutor;

/// Runs each action on the state inside a [`CheckpointLock`], holding the lock (Flink's
/// `SynchronizedStreamTaskActionExecutor`).
///
/// The mailbox processor hands it every action mail and default-action step; control mails
/// (poison, resume, failure reports) never reach it, so they run even while another thread
/// holds the lock. After each action it notifies the lock's condition (one atomic load when
/// nobody waits): an action may have changed what a source waiting on the condition checks.
///
/// # Examples
///
/// ```
/// use streamtask_bridge::CheckpointLockExecutor;
/// use streamtask_core::sync::Arc;
/// use streamtask_legacy::{CheckpointLock, Fairness};
/// use streamtask_mailbox::ActionExecutor;
///
/// let lock = Arc::new(CheckpointLock::new(0u64, Fairness::Eventual));
/// let mut executor = CheckpointLockExecutor::new(Arc::clone(&lock));
/// executor.run(|n| *n += 1);
/// assert_eq!(*lock.lock(), 1);
/// ```
pub struct CheckpointLockExecutor<T> {
    lock: Arc<CheckpointLock<T>>,
}

impl<T> CheckpointLockExecutor<T> {
    /// An executor over the state behind `lock`.
    pub fn new(lock: Arc<CheckpointLock<T>>) -> Self {
        CheckpointLockExecutor { lock }
    }

    /// The lock the actions run under.
    pub fn lock(&self) -> &Arc<CheckpointLock<T>> {
        &self.lock
    }

    /// Runs `action` under `lock` as every mail runs: a pending mail asks the legacy source to
    /// let go at its next section, so it waits for at most the section in flight, whatever the
    /// lock's fairness; the lock's condition is notified after. What the executor does for a
    /// mail, for work that takes the lock itself (the bridge's checkpoint-trigger mail).
    pub(crate) fn run_on<R>(lock: &CheckpointLock<T>, action: impl FnOnce(&mut T) -> R) -> R {
        let mut state = lock.request_handover().lock();
        let result = action(&mut state);
        // Changed under the lock, so the fast-path notify is enough (legacy's condition docs).
        state.notify_all();
        result
    }
}

impl<T> ActionExecutor<T> for CheckpointLockExecutor<T> {
    #[inline]
    fn run<R>(&mut self, action: impl FnOnce(&mut T) -> R) -> R {
        Self::run_on(&self.lock, action)
    }
}

impl<T> fmt::Debug for CheckpointLockExecutor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointLockExecutor")
            .field("lock", &self.lock)
            .finish()
    }
}
