//! [`LegacySourceStreamTask`]: a legacy [`SourceFunction`](streamtask_legacy::SourceFunction)
//! in the mailbox model, Flink 1.10's `SourceStreamTask` with its `LegacySourceFunctionThread`,
//! and the [`TaskHandle`] it returns.
//!
//! # Threads
//!
//! | thread | name | runs | under the checkpoint lock |
//! |---|---|---|---|
//! | task (mailbox) | `<task>` | restore + open; the mailbox loop, which only takes mails; finish; teardown | open, every action mail, finish, close |
//! | source | `<task>-legacy-source` | `run_source`: the function's `run`, and for a finite source `Watermark::MAX` + `end_input` | every locked section of the source, and so every record through the chain |
//! | timers | `<task>-timers` (started by the first registration) | only enqueues timer mails | never |
//!
//! The lock owns the source's state and context together with the operator chain and the
//! task's output, so everything behind the source runs either on the source thread inside one
//! of its locked sections, or on the mailbox thread inside a mail: never both at once.
//!
//! # Mails
//!
//! | mail | priority | under the lock | does |
//! |---|---|---|---|
//! | checkpoint trigger | `MIN` | yes | prepare, broadcast the barrier, snapshot source state + chain, acknowledge |
//! | timer of operator `i` | `operator(i)` | yes | the chain's `dispatch_timer`; context timers go to the source's context |
//! | event for operator `i` | `operator(i)` | yes | the chain's `dispatch_event` |
//! | checkpoint complete / aborted | `MAX` | yes | the chain's notices (never to a closed chain, FLINK-16383) |
//! | poison (source ended, cancel), resume, failure report | `MAX`, first | **no** | end the loop |
//!
//! Control mails never take the lock ([`CheckpointLockExecutor`](crate::CheckpointLockExecutor)
//! only runs action mails), so the loop can always be told to end. No mail is enqueued
//! periodically: every mail takes the lock the source wants, so internal periodic mails would
//! slow the source down (FLINK-23560).
//!
//! # Protocol
//!
//! ```text
//! task thread                                  source thread
//! -----------                                  -------------
//! lock { restore, open }; Initializing->Running
//! spawn source thread ----------------------->  run_source(function, lock, token)
//! loop: take mail (blocks while none)            loop { lock { state, emit -> chain } }
//!       action mail: lock { run it }             (a mail waits for the lock until the
//!       control mail: no lock                     current section ends, and vice versa)
//!                                              finite: lock { MAX watermark, end_input }
//!                                              ended: put poison first   | failed: put failure report first
//!                                              exit latch: ended
//! loop ends (poison, failure, or cancel's poison)
//! wait for the exit latch (<= grace once stopping), join
//! source finished: Running->Finishing, lock { finish chain, quiesce timers, end output }
//! quiesce timers, quiesce mailbox, drain (if finishing), lock { close chain },
//! shut timers down, close mailbox; report the outcome
//! ```
//!
//! # Lifecycle
//!
//! | state | meaning | moves to | by |
//! |---|---|---|---|
//! | `Initializing` | restoring and opening under the lock | `Running`; `Cancelling`, `Failing` | task thread; `cancel`; a failure |
//! | `Running` | the source runs, mails run | `Finishing`; `Cancelling`, `Failing` | task thread after the source ended; `cancel`; a failure |
//! | `Finishing` | finishing the chain, draining mails | `Finished`; `Failing` | task thread |
//! | `Cancelling` | source cancelled, threads stopping | `Cancelled`, or `Failed` with `CancellationIgnored` | task thread |
//! | `Failing` | first failure kept, source cancelled | `Failed` | task thread |
//!
//! A failure while `Cancelling` is ignored, as are a cancelled source's errors (FLINK-15811);
//! a `cancel` once `Finishing` does nothing (the task finishes).
//!
//! # Cancellation
//!
//! [`TaskHandle::cancel`] marks the task `Cancelling`, cancels the source's
//! [`CancellationToken`](streamtask_legacy::CancellationToken) and puts a poison mail first. The
//! token is what interruption was in Flink (FLINK-15076): its flag, its sleeps, its hooks
//! (closing a socket the source blocks on) and the lock's condition all notice it, so a source
//! that blocks while *holding* the lock is reached too; the mailbox thread, which may itself be
//! waiting for that lock to run a mail, gets it once the source returns and then sees the poison.
//! A source that ignores cancellation is waited for `grace` (see
//! [`with_cancel_grace`](LegacySourceStreamTask::with_cancel_grace)); then the task reports
//! [`TaskError::CancellationIgnored`](streamtask_core::TaskError::CancellationIgnored) instead of
//! hanging, leaving that one thread behind, which closes the chain itself if it ever returns.
//! [`TaskHandle::join`] gives the task thread another `grace` for its own teardown (it may be
//! waiting for a lock the stuck source holds) before it reports the same.

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
