//! What the task thread and the handle share: the lifecycle state, the cancellation token, and
//! the "done" latch `join` waits on; and the latch between the task thread and the source
//! thread.

use std::fmt;
use std::time::{Duration, Instant};

use streamtask_core::sync::atomic::{AtomicU8, Ordering};
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_legacy::CancellationToken;

/// Where a bridge task is in its life; see the [`task` module](super) for the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum TaskState {
    /// Restoring and opening the chain under the lock; the source thread is not started yet.
    Initializing = 0,
    /// The source thread runs; the mailbox thread takes mails.
    Running = 1,
    /// The source ended its input; the task thread finishes the chain and drains the mailbox.
    Finishing = 2,
    /// `cancel()` was called; the threads are stopping.
    Cancelling = 3,
    /// A failure was recorded; the threads are stopping.
    Failing = 4,
    /// Every thread ended after the chain finished.
    Finished = 5,
    /// Every thread ended after a cancellation.
    Cancelled = 6,
    /// The task ended after a failure (or a source that ignored cancellation).
    Failed = 7,
}

impl TaskState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => TaskState::Initializing,
            1 => TaskState::Running,
            2 => TaskState::Finishing,
            3 => TaskState::Cancelling,
            4 => TaskState::Failing,
            5 => TaskState::Finished,
            6 => TaskState::Cancelled,
            _ => TaskState::Failed,
        }
    }

    fn is_stopping(self) -> bool {
        matches!(self, TaskState::Cancelling | TaskState::Failing)
    }
}

/// The state one task's handle and task thread share.
pub(crate) struct Shared {
    state: AtomicU8,
    /// Cancels the source: on `cancel()` and on the first failure.
    pub(crate) cancel: CancellationToken,
    done: Mutex<bool>,
    done_changed: Condvar,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            state: AtomicU8::new(TaskState::Initializing as u8),
            cancel: CancellationToken::new(),
            done: Mutex::new(false),
            done_changed: Condvar::new(),
        }
    }

    pub(crate) fn state(&self) -> TaskState {
        // Acquire pairs with the AcqRel of every transition.
        TaskState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves `from` -> `to` if the task is in `from`.
    pub(crate) fn transition(&self, from: TaskState, to: TaskState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Moves any state in `from` to `to`; returns whether it did.
    fn stop_from(&self, from: &[TaskState], to: TaskState) -> bool {
        let mut current = self.state();
        while from.contains(&current) {
            match self.state.compare_exchange(
                current as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => current = TaskState::from_u8(actual),
            }
        }
        false
    }

    /// `cancel()`: an initializing or running task becomes `Cancelling` and its source is
    /// cancelled. Returns whether this call did it (once finishing, a task finishes).
    pub(crate) fn request_cancel(&self) -> bool {
        if self.stop_from(
            &[TaskState::Initializing, TaskState::Running],
            TaskState::Cancelling,
        ) {
            self.cancel.cancel();
            self.wake_joiners();
            true
        } else {
            false
        }
    }

    /// The first failure: a task that is not stopping becomes `Failing` and its source is
    /// cancelled. Returns whether this failure is the task's (a failure after `cancel()` is
    /// ignored, as Flink ignores a cancelled source's errors, FLINK-15811).
    pub(crate) fn fail(&self) -> bool {
        if self.stop_from(
            &[
                TaskState::Initializing,
                TaskState::Running,
                TaskState::Finishing,
            ],
            TaskState::Failing,
        ) {
            self.cancel.cancel();
            self.wake_joiners();
            true
        } else {
            false
        }
    }

    /// The task thread is about to end: the state becomes terminal and joiners wake.
    pub(crate) fn complete(&self, terminal: TaskState) {
        self.state.store(terminal as u8, Ordering::Release);
        let mut done = self.done.lock();
        *done = true;
        self.done_changed.notify_all();
    }

    fn wake_joiners(&self) {
        let _done = self.done.lock();
        self.done_changed.notify_all();
    }

    pub(crate) fn is_done(&self) -> bool {
        *self.done.lock()
    }

    /// Waits until the task thread ended: as long as it takes while the task runs, at most
    /// `budget` once it is stopping. Returns whether it ended.
    pub(crate) fn wait_done(&self, budget: Duration) -> bool {
        let mut done = self.done.lock();
        let mut deadline: Option<Instant> = None;
        loop {
            if *done {
                return true;
            }
            if deadline.is_none() && self.state().is_stopping() {
                deadline = Some(after(budget));
            }
            match deadline {
                None => self.done_changed.wait(&mut done),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    self.done_changed.wait_for(&mut done, deadline - now);
                }
            }
        }
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// `timeout` from now, saturating far in the future.
pub(crate) fn after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// The hand-over between a source thread and the thread that waits for it (the bridge's task
/// thread, a handoff reader's `close`).
///
/// | state | meaning | moves to |
/// |---|---|---|
/// | running | the source thread runs | ended (the source thread, at its very end), abandoned (the waiter, after the grace period) |
/// | ended | the source thread is about to return; join it | - |
/// | abandoned | the waiter gave up; the source thread cleans up after itself if it ever returns | - |
///
/// Both moves happen under one mutex, so exactly one side does the clean-up that needs the
/// source to have stopped (closing the chain, shutting the context's timers down).
pub(crate) struct SourceExit {
    state: Mutex<ExitState>,
    changed: Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitState {
    Running,
    Ended,
    Abandoned,
}

impl SourceExit {
    pub(crate) fn new() -> Self {
        SourceExit {
            state: Mutex::new(ExitState::Running),
            changed: Condvar::new(),
        }
    }

    /// The source thread's last step: marks it ended and returns `true`, or returns `false` if
    /// the waiter abandoned it (the caller then cleans up itself).
    pub(crate) fn source_ended(&self) -> bool {
        let mut state = self.state.lock();
        if *state == ExitState::Abandoned {
            return false;
        }
        *state = ExitState::Ended;
        self.changed.notify_all();
        true
    }

    /// Waits up to `grace` for the source thread to end; returns `true` if it did, `false` if
    /// it is abandoned (it cleans up after itself if it ever returns).
    pub(crate) fn wait_ended(&self, grace: Duration) -> bool {
        let deadline = after(grace);
        let mut state = self.state.lock();
        loop {
            match *state {
                ExitState::Ended => return true,
                ExitState::Abandoned => return false,
                ExitState::Running => {}
            }
            let now = Instant::now();
            if now >= deadline {
                *state = ExitState::Abandoned;
                return false;
            }
            self.changed.wait_for(&mut state, deadline - now);
        }
    }
}

impl fmt::Debug for SourceExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceExit")
            .field("state", &*self.state.lock())
            .finish()
    }
}
