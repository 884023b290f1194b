//! [`LegacySourceStreamTask`]: a legacy [`SourceFunction`](streamtask_legacy::SourceFunction)
//! in the mailbox model, Flink 1.10's `SourceStreamTask` with its `LegacySourceFunctionThread`,
//! and the [`TaskHandle`] it returns. The threads, mails, protocol and lifecycle are written out
//! on [`LegacySourceStreamTask`]; `body` has what each mail does under the lock, `runtime` the
//! threads, `shared` the state machine and the source-exit latch.

mod body;
mod builder;
mod runtime;
mod shared;

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

use streamtask_core::CheckpointBarrier;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::{Arc, Mutex, thread};
use streamtask_core::task::{TaskError, TaskFailure, TaskOutcome, TriggerError};

use self::shared::Shared;
pub(crate) use self::shared::SourceExit;

pub use self::builder::{ChainingError, LegacySourceStreamTask};

/// The task-type-erased side of the mailbox a handle talks to.
trait Control: Send + Sync {
    fn trigger(&self, barrier: CheckpointBarrier);
    fn notify(&self, id: u64, completed: bool);
    fn end_loop(&self);
}

/// The control surface of a running [`LegacySourceStreamTask`]: the same calls as every model's
/// task handle.
///
/// Dropping a handle without joining cancels the task and waits for it (bounded as
/// [`join`](Self::join) is).
///
/// # Examples
///
/// See [`LegacySourceStreamTask`].
pub struct TaskHandle {
    name: String,
    metrics: StdArc<TaskMetrics>,
    control: StdArc<dyn Control>,
    shared: Arc<Shared>,
    thread: Mutex<Option<thread::JoinHandle<TaskOutcome>>>,
    grace: Duration,
}

impl TaskHandle {
    fn new(
        name: String,
        metrics: StdArc<TaskMetrics>,
        control: StdArc<dyn Control>,
        shared: Arc<Shared>,
        thread: thread::JoinHandle<TaskOutcome>,
        grace: Duration,
    ) -> Self {
        TaskHandle {
            name,
            metrics,
            control,
            shared,
            thread: Mutex::new(Some(thread)),
            grace,
        }
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task's metrics.
    pub fn metrics(&self) -> &StdArc<TaskMetrics> {
        &self.metrics
    }

    /// Triggers checkpoint `barrier.id`: a `Priority::MIN` mail that, under the checkpoint lock
    /// (so between two locked sections of the source), prepares the chain, sends the barrier
    /// downstream, snapshots the source's state and the chain, and acknowledges through the
    /// task's responder. A task that is not running (still opening, finishing, stopping or
    /// over) declines with `DeclineReason::NotRunning`, also when the mail is dropped unrun.
    ///
    /// # Errors
    ///
    /// None: a bridge task is always a source task. The `Result` is the shape every model's
    /// handle has (tasks with inputs return `TriggerError::NotASource`).
    pub fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        self.control.trigger(barrier);
        Ok(())
    }

    /// Checkpoint `id` completed on every task: a `Priority::MAX` mail that notifies the chain
    /// under the lock. Never reaches a closed chain (FLINK-16383); ignored once the task is over.
    pub fn notify_checkpoint_complete(&self, id: u64) {
        self.control.notify(id, true);
    }

    /// Checkpoint `id` was aborted: as [`notify_checkpoint_complete`](Self::notify_checkpoint_complete).
    pub fn notify_checkpoint_aborted(&self, id: u64) {
        self.control.notify(id, false);
    }

    /// Cancels the task, from any thread, any number of times; returns at once. The source's
    /// token is cancelled (reaching a source blocked while holding the lock) and the mailbox
    /// loop gets a poison mail. A task that is already finishing finishes.
    pub fn cancel(&self) {
        if self.shared.request_cancel() {
            self.control.end_loop();
        }
    }

    /// Whether the task ended (its thread reported an outcome).
    pub fn is_done(&self) -> bool {
        self.shared.is_done()
    }

    /// Waits for the task to end and reports how: as long as it runs; once it is stopping, at
    /// most twice the grace period (the task thread waits one grace period for the source, and
    /// gets another for its teardown). A task that does not end by then is reported as
    /// [`TaskError::CancellationIgnored`] and its thread is left behind.
    pub fn join(self) -> TaskOutcome {
        match self.wait_and_join() {
            Some(outcome) => outcome,
            None => {
                log::warn!(
                    "task {} did not stop within {:?}; its thread is left running",
                    self.name,
                    self.grace * 2
                );
                TaskOutcome::Failed(TaskFailure::new(
                    self.name.clone(),
                    TaskError::CancellationIgnored {
                        grace_ms: u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX),
                    },
                ))
            }
        }
    }

    /// Waits (bounded once stopping) and joins; `None` if the thread did not end (it is then
    /// detached).
    fn wait_and_join(&self) -> Option<TaskOutcome> {
        let ended = self.shared.wait_done(self.grace.saturating_mul(2));
        let handle = self.thread.lock().take()?;
        if !ended {
            drop(handle); // detach: it may never return
            return None;
        }
        Some(match handle.join() {
            Ok(outcome) => outcome,
            // The task thread catches every panic of user code; this is a bug in the runtime.
            Err(_) => TaskOutcome::Failed(TaskFailure::new(
                self.name.clone(),
                TaskError::Panic("the task thread panicked".to_string()),
            )),
        })
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        if self.thread.lock().is_some() {
            self.cancel();
            let _ = self.wait_and_join();
        }
    }
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("name", &self.name)
            .field("state", &self.shared.state())
            .finish_non_exhaustive()
    }
}
