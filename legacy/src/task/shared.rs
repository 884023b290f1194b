//! What every thread of a task shares: the lifecycle state, the first failure, the
//! cancellation token, and the "done" latch `join` waits on.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use streamtask_core::sync::{Condvar, Mutex, thread};
use streamtask_core::task::{CheckpointResponder, TaskError, TaskFailure, TaskOutcome};
use streamtask_core::trace::Tracer;

use crate::cancel::CancellationToken;
use crate::lock::deadline_after;

/// Where a legacy task is in its life; [`TaskHandle`](crate::TaskHandle) tables the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TaskState {
    /// Restoring and opening the chain under the lock; triggers are declined.
    Initializing = 0,
    /// Processing input (or running the source); triggers snapshot.
    Running = 1,
    /// Input ended: the chain finishes, timers are quiesced; triggers are declined,
    /// completion notices still delivered.
    Finishing = 2,
    /// `cancel()` was called; the task's threads are stopping.
    Cancelling = 3,
    /// A thread failed; the others are stopping.
    Failing = 4,
    /// Every thread ended after the chain finished.
    Finished = 5,
    /// Every thread ended after a cancellation.
    Cancelled = 6,
    /// Every thread ended after a failure.
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

    /// Whether every thread of the task has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Finished | TaskState::Cancelled | TaskState::Failed
        )
    }

    /// Whether the task is still doing its work (neither stopping nor ended).
    pub fn is_live(self) -> bool {
        matches!(
            self,
            TaskState::Initializing | TaskState::Running | TaskState::Finishing
        )
    }
}

/// The state of one task, shared by its threads and its handle.
pub(crate) struct TaskShared {
    pub(crate) name: String,
    state: AtomicU8,
    failure: Mutex<Option<TaskFailure>>,
    /// Cancels the source and wakes the task thread; cancelled on cancel and on failure.
    pub(crate) cancel: CancellationToken,
    pub(crate) metrics: StdArc<TaskMetrics>,
    pub(crate) tracer: Tracer,
    pub(crate) responder: CheckpointResponder,
    /// Set once the task thread ended; `join` waits on it (also woken when stop is requested).
    done: Mutex<bool>,
    done_changed: Condvar,
    /// Threads of this task, so a handle called from one of them does not wait for itself.
    threads: Mutex<Vec<thread::ThreadId>>,
    /// Set under the checkpoint lock just before the chain closes: from then on notices and
    /// events are not delivered (a closed operator must not be called; FLINK-16383).
    chain_closed: AtomicBool,
}

impl TaskShared {
    /// Marks the chain closed; call with the checkpoint lock held.
    pub(crate) fn mark_chain_closed(&self) {
        // Relaxed: written and read only under the checkpoint lock, which orders them.
        self.chain_closed.store(true, Ordering::Relaxed);
    }

    /// Whether the chain is closed; call with the checkpoint lock held.
    pub(crate) fn is_chain_closed(&self) -> bool {
        self.chain_closed.load(Ordering::Relaxed)
    }

    pub(crate) fn new(
        name: String,
        metrics: StdArc<TaskMetrics>,
        tracer: Tracer,
        responder: CheckpointResponder,
    ) -> Self {
        TaskShared {
            name,
            state: AtomicU8::new(TaskState::Initializing as u8),
            chain_closed: AtomicBool::new(false),
            failure: Mutex::new(None),
            cancel: CancellationToken::new(),
            metrics,
            tracer,
            responder,
            done: Mutex::new(false),
            done_changed: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn state(&self) -> TaskState {
        // Acquire: pairs with the Release of every transition.
        TaskState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves `from` -> `to` if the task is in `from`.
    pub(crate) fn transition(&self, from: TaskState, to: TaskState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Moves any live state to `to`; returns the state it left, if it was live.
    fn stop_as(&self, to: TaskState) -> Option<TaskState> {
        let mut current = self.state();
        while current.is_live() {
            match self.state.compare_exchange(
                current as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(current),
                Err(actual) => current = TaskState::from_u8(actual),
            }
        }
        None
    }

    /// `cancel()`: a live task becomes `Cancelling`, its source is cancelled and its threads
    /// woken. Idempotent; does nothing once stopping or ended.
    pub(crate) fn request_cancel(&self) {
        if self.stop_as(TaskState::Cancelling).is_some() {
            self.cancel.cancel();
            self.wake_joiners();
        }
    }

    /// The first failure of any thread: a live task becomes `Failing` and keeps this failure;
    /// later failures, and failures after a cancel, are only logged.
    pub(crate) fn fail(&self, thread: impl Into<String>, error: impl Into<TaskError>) {
        let failure = TaskFailure::new(thread, error);
        let mut slot = self.failure.lock();
        if slot.is_none() && self.stop_as(TaskState::Failing).is_some() {
            log::warn!("task {} failed: {failure}", self.name);
            *slot = Some(failure);
            drop(slot);
            self.cancel.cancel();
            self.wake_joiners();
        } else {
            log::debug!("task {}: later failure ignored: {failure}", self.name);
        }
    }

    /// The task thread ended: the stopping or finishing state becomes terminal, and joiners
    /// wake. Returns the outcome.
    pub(crate) fn complete(&self) -> TaskState {
        let terminal = match self.state() {
            TaskState::Finishing => TaskState::Finished,
            TaskState::Cancelling => TaskState::Cancelled,
            TaskState::Failing | TaskState::Failed => TaskState::Failed,
            TaskState::Cancelled => TaskState::Cancelled,
            TaskState::Finished => TaskState::Finished,
            // The task thread ended without finishing or being stopped: a bug in the task's
            // loop, reported rather than hidden.
            state @ (TaskState::Initializing | TaskState::Running) => {
                self.fail(
                    self.name.clone(),
                    TaskError::Source(format!("the task thread ended while {state:?}")),
                );
                TaskState::Failed
            }
        };
        self.state.store(terminal as u8, Ordering::Release);
        let mut done = self.done.lock();
        *done = true;
        self.done_changed.notify_all();
        terminal
    }

    fn wake_joiners(&self) {
        let _done = self.done.lock();
        self.done_changed.notify_all();
    }

    /// Waits until the task thread ended. While the task runs this waits as long as it takes;
    /// once it is stopping (cancelled or failed) it waits at most `grace` more. Returns whether
    /// the task ended.
    pub(crate) fn wait_done(&self, grace: Duration) -> bool {
        let mut done = self.done.lock();
        let mut deadline: Option<Instant> = None;
        loop {
            if *done {
                return true;
            }
            if deadline.is_none()
                && matches!(self.state(), TaskState::Cancelling | TaskState::Failing)
            {
                deadline = Some(deadline_after(grace));
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

    pub(crate) fn is_done(&self) -> bool {
        *self.done.lock()
    }

    pub(crate) fn register_current_thread(&self) {
        self.threads.lock().push(current_thread_id());
    }

    pub(crate) fn is_own_thread(&self) -> bool {
        self.threads.lock().contains(&current_thread_id())
    }

    /// The outcome once terminal.
    pub(crate) fn outcome(&self) -> TaskOutcome {
        match self.state() {
            TaskState::Finished => TaskOutcome::Finished,
            TaskState::Cancelled => TaskOutcome::Cancelled,
            _ => match self.failure.lock().take() {
                Some(failure) => TaskOutcome::Failed(failure),
                None => TaskOutcome::Failed(TaskFailure::new(
                    self.name.clone(),
                    TaskError::Source("the task failed without a recorded error".to_string()),
                )),
            },
        }
    }
}

/// The calling thread's id, as the facade's `ThreadId` type.
fn current_thread_id() -> thread::ThreadId {
    #[cfg(not(loom))]
    {
        thread::current().id()
    }
    // Under loom the facade's `ThreadId` is std's (loom's threads are not modelled as OS
    // threads here, and tasks never run under loom; only their code must build).
    #[cfg(loom)]
    {
        std::thread::current().id()
    }
}

impl fmt::Debug for TaskShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskShared")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
