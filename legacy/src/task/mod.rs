//! Legacy tasks: [`SourceStreamTask`], [`OneInputStreamTask`], [`TwoInputStreamTask`], and the
//! [`TaskHandle`] every one of them returns.
//!
//! # Threads
//!
//! | thread | name | does | under the lock |
//! |---|---|---|---|
//! | task | `<task>` | restore + open; the source's `run` or `while running && process_input()`; end of input; teardown | open, per emit / per record, finish, close |
//! | timer | `<task>-timer` | processing-time timers ([`SystemProcessingTimeService`](crate::SystemProcessingTimeService)) | per timer |
//! | async calls | `<task>-async-calls` | checkpoint triggers (source tasks), completion and abort notices, operator events | per call |
//!
//! Operator events (an [`EventSender`](streamtask_core::operator::EventSender) used from a
//! foreign thread) are queued to the async-calls thread, which delivers each under the lock and
//! then notifies the lock's condition. Queueing is deliberate: the lock is not reentrant, and an
//! operator may send an event while its own task thread holds the lock.
//!
//! Barrier-triggered checkpoints of input tasks run on the task thread, when the gate reports
//! the barrier aligned, as Flink's `getNextNonBlocked` did.
//!
//! # Lifecycle
//!
//! | state | meaning | moves to | by |
//! |---|---|---|---|
//! | `Initializing` | restoring and opening the chain, under the lock | `Running`; `Cancelling`, `Failing` | task thread (after open); `cancel`; a failure |
//! | `Running` | processing; triggers snapshot | `Finishing`; `Cancelling`, `Failing` | task thread at end of input, under the lock; `cancel`; a failure |
//! | `Finishing` | chain finishing, timers quiesced, output ended | `Finished`; `Cancelling`, `Failing` | task thread after teardown |
//! | `Cancelling` | source cancelled, threads stopping | `Cancelled` | task thread after teardown |
//! | `Failing` | first failure recorded, source cancelled, threads stopping | `Failed` | task thread after teardown |
//! | `Finished`, `Cancelled`, `Failed` | every thread of the task ended | - | - |
//!
//! A failure while `Cancelling` is ignored (as Flink ignores exceptions of a cancelled task);
//! a second failure while `Failing` is ignored (the first wins).
//!
//! Teardown, on every path: under the lock, quiesce the timers and close the chain; then shut
//! the timer thread down and stop the async-calls thread, joining both; then the task thread
//! reports the terminal state and ends. [`TaskHandle::join`] joins the task thread.
//!
//! # Cancellation
//!
//! [`TaskHandle::cancel`] (any thread, idempotent) marks the task `Cancelling` and cancels the
//! source's [`CancellationToken`](crate::CancellationToken): its flag, its hooks (closing
//! sockets), its sleeps, the lock's condition and the task thread's gate wait all notice. A
//! source that blocks while holding the lock is reached the same way. A source that ignores
//! cancellation cannot be stopped: after the grace period ([`DEFAULT_CANCEL_GRACE`] unless
//! set) `cancel` returns and `join` reports
//! [`TaskError::CancellationIgnored`](streamtask_core::TaskError::CancellationIgnored), leaving
//! the stuck thread behind (it joins its helpers itself if it ever returns).

mod async_wait;
mod body;
mod one_input;
mod runtime;
mod shared;
mod source_task;
mod two_input;

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use crossbeam::channel::Sender;
use streamtask_core::CheckpointBarrier;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::{Arc, Mutex, thread};
use streamtask_core::task::{DeclineReason, TaskError, TaskFailure, TaskOutcome, TriggerError};

use self::runtime::AsyncCall;
use self::shared::TaskShared;

pub use self::async_wait::{AsyncChainError, AsyncHead, AsyncWaitStreamTask, NoChain};
pub use self::one_input::OneInputStreamTask;
pub use self::runtime::DEFAULT_CANCEL_GRACE;
pub use self::shared::TaskState;
pub use self::source_task::SourceStreamTask;
pub use self::two_input::TwoInputStreamTask;

/// Which kind of task a handle controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    Source,
    OneInput,
    TwoInput,
}

/// The control surface of a running legacy task (the same names as every model's handle).
///
/// Dropping a handle without joining cancels the task and waits for it (up to the grace).
///
/// # Examples
///
/// See [`SourceStreamTask`].
pub struct TaskHandle {
    shared: Arc<TaskShared>,
    calls: Sender<AsyncCall>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
    kind: TaskKind,
    grace: Duration,
}

impl TaskHandle {
    fn new(
        shared: Arc<TaskShared>,
        calls: Sender<AsyncCall>,
        thread: thread::JoinHandle<()>,
        kind: TaskKind,
        grace: Duration,
    ) -> Self {
        TaskHandle {
            shared,
            calls,
            thread: Mutex::new(Some(thread)),
            kind,
            grace,
        }
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The task's metrics.
    pub fn metrics(&self) -> &StdArc<TaskMetrics> {
        &self.shared.metrics
    }

    /// Where the task is in its lifecycle.
    pub fn state(&self) -> TaskState {
        self.shared.state()
    }

    /// Starts checkpoint `barrier.id` on a source task: its async-calls thread takes the lock,
    /// snapshots, broadcasts the barrier and acknowledges through the responder. A task that is
    /// not running declines with [`DeclineReason::NotRunning`].
    ///
    /// # Errors
    ///
    /// [`TriggerError::NotASource`] for tasks with inputs (they checkpoint when barriers
    /// arrive).
    pub fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        if self.kind != TaskKind::Source {
            return Err(TriggerError::NotASource);
        }
        let call = AsyncCall::Trigger {
            barrier,
            requested: Instant::now(),
        };
        if !self.shared.state().is_live() || self.calls.send(call).is_err() {
            self.shared
                .responder
                .decline(barrier.id, DeclineReason::NotRunning);
        }
        Ok(())
    }

    /// Checkpoint `id` completed on every task: operators commit (on the async-calls thread,
    /// under the lock). Ignored once the task stopped.
    pub fn notify_checkpoint_complete(&self, id: u64) {
        let _ = self.calls.send(AsyncCall::Complete(id));
    }

    /// Checkpoint `id` was aborted: operators discard what they prepared. Ignored once the
    /// task stopped.
    pub fn notify_checkpoint_aborted(&self, id: u64) {
        let _ = self.calls.send(AsyncCall::Aborted(id));
    }

    /// Cancels the task from any thread: the source is cancelled and every thread stopped. Waits
    /// up to the grace period for the task to end and joins it; never hangs. Idempotent.
    pub fn cancel(&self) {
        self.shared.request_cancel();
        if self.shared.is_own_thread() {
            return; // called from inside the task: it cannot wait for itself
        }
        if self.shared.wait_done(self.grace) {
            self.join_thread();
        }
    }

    /// Whether every thread of the task has ended.
    pub fn is_done(&self) -> bool {
        self.shared.is_done()
    }

    /// Waits for the task to end (as long as it runs; at most the grace period once it is
    /// cancelled or failing) and reports how it ended.
    pub fn join(self) -> TaskOutcome {
        let ended = self.shared.wait_done(self.grace);
        if ended {
            self.join_thread();
            return self.shared.outcome();
        }
        log::warn!(
            "task {} did not stop within {:?}; its thread is left running",
            self.shared.name,
            self.grace
        );
        // Detach: the thread may never return.
        drop(self.thread.lock().take());
        TaskOutcome::Failed(TaskFailure::new(
            self.shared.name.clone(),
            TaskError::CancellationIgnored {
                grace_ms: u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX),
            },
        ))
    }

    fn join_thread(&self) {
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            // The task thread catches panics of user code; joining only reaps it.
            let _ = handle.join();
        }
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        if self.thread.lock().is_some() && !self.shared.is_own_thread() {
            self.cancel();
            drop(self.thread.lock().take());
        }
    }
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("name", &self.shared.name)
            .field("state", &self.shared.state())
            .finish_non_exhaustive()
    }
}
