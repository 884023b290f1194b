//! [`TaskHandle`]: the one control surface of a running task, whatever its model.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use crate::sync::{Arc, Mutex, thread};
use streamtask_core::CheckpointBarrier;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::RunningOperator;
use streamtask_core::task::TriggerError;
use streamtask_core::task::{
    CheckpointResponder, DeclineReason, TaskError, TaskFailure, TaskOutcome,
};

use super::lifecycle::{Lifecycle, duration_ms};
use streamtask_core::task::TaskState;

/// How a model's handle reaches its task: the calls that differ per model (a channel to the
/// async-calls thread under the checkpoint lock, or a mail). Everything else a handle does (the
/// lifecycle, cancel, join) is the same in every model and lives in [`TaskHandle`].
pub trait TaskControl: Send + Sync + 'static {
    /// Starts checkpoint `barrier.id` on a running source task; `requested` is the trigger
    /// call's time (the start delay counts from it). A trigger that cannot run must decline
    /// through the task's responder, never vanish.
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier, requested: Instant);
    /// Delivers a checkpoint-complete (`completed`) or -aborted notice to the task's chain.
    fn notify_checkpoint(&self, id: u64, completed: bool);
    /// `join` gave up on the task (a thread ignored cancellation for the grace period): stop,
    /// without waiting for the stuck thread, every helper thread that does not need it (a timer
    /// thread, an async-calls thread), so only the stuck thread is left behind.
    fn abandon(&self) {}
}

/// Whether a task is triggered from outside or through its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerMode {
    /// A source task: the coordinator triggers it.
    Source,
    /// A task with inputs: it checkpoints when barriers arrive.
    Inputs,
}

/// The control surface of a running task, the same in every model.
///
/// # Cancel and join: one contract
///
/// - [`cancel`](Self::cancel) may be called from any thread, any number of times, and returns at
///   once: a live task (initializing, running or finishing) becomes `Cancelling` and its model's
///   stop hook wakes every thread it started (the source's cancellation token, a poison mail).
/// - [`join`](Self::join) waits as long as the task runs while it is live; once it is stopping
///   (cancelled, or failed) it waits at most the task's cancel grace
///   ([`TaskConfig::with_cancel_grace`](streamtask_core::task::TaskConfig::with_cancel_grace), 30 s by
///   default) counted from the stop. A task that has not ended by then is reported as
///   [`TaskError::CancellationIgnored`]: its stuck thread (a source that ignores cancellation,
///   user code in an endless loop) is left behind and cleans up after itself if it ever returns;
///   every other thread of the task has been joined.
/// - Dropping a handle that was not joined cancels the task and joins it the same way, so a
///   handle never leaves threads behind but that one stuck thread.
///
/// # Examples
///
/// A model crate builds one with [`TaskHandle::new`]; see `streamtask-mailbox`'s `SourceStreamTask`
/// or `streamtask-legacy`'s `SourceStreamTask` for a running example.
// `repr(C, align(64))`: what a trigger reads (the mode, the lifecycle and the control) comes
// first, on one cache line. A coordinator's thread sleeps between triggers, so each line the
// call touches is likely a miss.
#[repr(C, align(64))]
pub struct TaskHandle {
    mode: TriggerMode,
    lifecycle: Arc<Lifecycle>,
    // std's `Arc`: a model's control is coerced to `dyn TaskControl`, which loom's cannot do.
    control: StdArc<dyn TaskControl>,
    name: String,
    metrics: StdArc<TaskMetrics>,
    responder: CheckpointResponder,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
    grace: Duration,
    running: StdArc<RunningOperator>,
}

impl TaskHandle {
    /// A handle over the task whose main thread is `thread`. The thread must end by calling
    /// [`Lifecycle::complete`] after joining every other thread of the task.
    pub fn new(
        parts: super::TaskParts,
        mode: TriggerMode,
        control: StdArc<dyn TaskControl>,
        thread: thread::JoinHandle<()>,
    ) -> Self {
        let super::TaskParts {
            name,
            metrics,
            lifecycle,
            responder,
            grace,
            running,
        } = parts;
        TaskHandle {
            name,
            metrics,
            mode,
            lifecycle,
            control,
            responder,
            thread: Mutex::new(Some(thread)),
            grace,
            running,
        }
    }

    /// Which operator of the task's chain runs (or ran last) user code: read it after a
    /// failure, or after [`join`](Self::join) gave up on a thread stuck in user code, to name
    /// the operator (see [`RunningOperator`]).
    pub fn running_operator(&self) -> StdArc<RunningOperator> {
        StdArc::clone(&self.running)
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task's metrics.
    pub fn metrics(&self) -> &StdArc<TaskMetrics> {
        &self.metrics
    }

    /// Where the task is in its lifecycle.
    pub fn state(&self) -> TaskState {
        self.lifecycle.state()
    }

    /// Starts checkpoint `barrier.id` on a source task: between two steps of the source (a mail,
    /// or the async-calls thread under the checkpoint lock) the chain is prepared, the barrier
    /// sent downstream, the source and the chain snapshotted, and the snapshot acknowledged
    /// through the task's responder. A trigger that arrives while the task opens waits for it; a
    /// task that is finishing, stopping or over declines with [`DeclineReason::NotRunning`].
    ///
    /// # Errors
    ///
    /// [`TriggerError::NotASource`] for tasks with inputs (they checkpoint when barriers
    /// arrive).
    pub fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        if self.mode != TriggerMode::Source {
            return Err(TriggerError::NotASource);
        }
        // The request time first: the clock read is ordered (the vDSO's `lfence`), so read
        // after the lifecycle it would wait for that load, and the control's loads for it. Read
        // first, it waits for nothing, and the lifecycle's line and the control's lines (the
        // vtable, the model's state, its hot line) are fetched together, not one after the
        // other: the coordinator's thread slept since its last trigger, so each may be a miss.
        let requested = Instant::now();
        // A trigger that arrives while the chain opens waits for it (behind the lock, or as a
        // mail); the body checks again when it runs.
        if matches!(
            self.lifecycle.state(),
            TaskState::Initializing | TaskState::Running
        ) {
            self.control.trigger_checkpoint(barrier, requested);
        } else {
            self.responder
                .decline(barrier.id, DeclineReason::NotRunning);
        }
        Ok(())
    }

    /// Checkpoint `id` completed on every task: the chain commits. Ignored once the task ended.
    pub fn notify_checkpoint_complete(&self, id: u64) {
        if !self.lifecycle.state().is_terminal() {
            self.control.notify_checkpoint(id, true);
        }
    }

    /// Checkpoint `id` was aborted: the chain discards what it prepared and channels held for
    /// its alignment are released. Ignored once the task ended.
    pub fn notify_checkpoint_aborted(&self, id: u64) {
        if !self.lifecycle.state().is_terminal() {
            self.control.notify_checkpoint(id, false);
        }
    }

    /// Cancels the task; returns at once (see the type's docs for the contract).
    pub fn cancel(&self) {
        self.lifecycle.request_cancel();
    }

    /// Whether the task ended (every thread it started joined).
    pub fn is_done(&self) -> bool {
        self.lifecycle.is_done()
    }

    /// Waits for the task to end and reports how (see the type's docs for how long).
    pub fn join(self) -> TaskOutcome {
        match self.wait_and_join() {
            Some(outcome) => outcome,
            None => TaskOutcome::Failed(TaskFailure::new(
                self.name.clone(),
                TaskError::CancellationIgnored {
                    grace_ms: duration_ms(self.grace),
                },
            )),
        }
    }

    /// Waits (bounded once stopping) and joins; `None` if the task did not end in time (its
    /// thread is then detached).
    fn wait_and_join(&self) -> Option<TaskOutcome> {
        let thread = self.thread.lock().take()?;
        if thread.thread().id() == thread::current().id() {
            // Called from inside the task: it cannot wait for itself.
            return None;
        }
        if !self.lifecycle.wait_done(self.grace) {
            log::warn!(
                "task {} did not stop within {:?} of being stopped; its thread is left behind",
                self.name,
                self.grace
            );
            self.control.abandon();
            drop(thread); // detach: it may never return
            return None;
        }
        match thread.join() {
            Ok(()) => Some(self.lifecycle.outcome()),
            // The task thread catches every panic of user code; this is a bug in the runtime.
            Err(_) => Some(TaskOutcome::Failed(TaskFailure::new(
                self.name.clone(),
                TaskError::Panic("the task runtime's own thread panicked".to_string()),
            ))),
        }
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
            .field("state", &self.lifecycle.state())
            .finish_non_exhaustive()
    }
}
