//! What every model's task runtime offers the executor, so the executor stays model-agnostic.
//!
//! Each model (`streamtask-legacy`, `streamtask-mailbox`, `streamtask-bridge`) has its own task
//! types, and each offers the same control surface:
//!
//! | call | from | effect |
//! |---|---|---|
//! | `trigger_checkpoint(barrier)` | coordinator thread | source tasks snapshot and broadcast the barrier; others get it through their inputs |
//! | `notify_checkpoint_complete(id)` / `notify_checkpoint_aborted(id)` | coordinator thread | operators commit or discard |
//! | `cancel()` | any thread | stops the task; every thread it started is joined |
//! | `join()` | the executor | waits for the [`TaskOutcome`] |
//!
//! Tasks report snapshots to the coordinator through a [`CheckpointResponder`]: an
//! acknowledgement with the task's [`TaskSnapshot`], or a decline with a reason.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

// crossbeam's channel in every build (not the facade's): the coordinator's driver selects over
// this and its control channel with crossbeam's `Select`, which has no loom counterpart. A send
// on it never blocks (unbounded), so it is no part of any task protocol loom models.
use crossbeam::channel::Sender;

use crate::error::OperatorError;
use crate::metrics::TaskMetrics;
use crate::state::TaskSnapshot;
use crate::time::{Clock, InterruptibleTimers};
use crate::trace::Tracer;

/// How long a stopping task may take before `join` gives up on it (unless the task's config
/// says otherwise).
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(30);

/// What every model's task needs besides its source, inputs, chain and output.
///
/// # Examples
///
/// ```
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{time::Clock, time::ManualClock};
///
/// let config = TaskConfig::new("map-0").with_clock(Clock::Manual(ManualClock::new(0)));
/// assert_eq!(config.name, "map-0");
/// assert_eq!(config.metrics.name, "map-0");
/// ```
#[derive(Debug, Clone)]
pub struct TaskConfig {
    /// The task's name; its threads are named after it.
    pub name: String,
    /// Where processing time comes from.
    pub clock: Clock,
    /// Where checkpoint acknowledgements and declines go.
    pub responder: CheckpointResponder,
    /// State to restore the chain (and source) from; `None` for a fresh start.
    pub restore: Option<TaskSnapshot>,
    /// The task's metrics, shared with whoever reads them.
    pub metrics: Arc<TaskMetrics>,
    /// Spans of who ran what (off by default).
    pub tracer: Tracer,
    /// How long `join` waits for the task once it is stopping (cancelled or failed) before it
    /// reports [`TaskError::CancellationIgnored`] and leaves the stuck thread behind.
    pub cancel_grace: Duration,
    /// Whether the task fires many due event-time timers in chunks with mails in between
    /// (models that cannot interrupt a firing ignore it).
    pub interruptible_timers: InterruptibleTimers,
}

impl TaskConfig {
    /// A fresh task `name` with the system clock, no coordinator, no restore, tracing off.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        TaskConfig {
            responder: CheckpointResponder::discard(name.clone()),
            metrics: Arc::new(TaskMetrics::new(name.clone())),
            name,
            clock: Clock::System,
            restore: None,
            tracer: Tracer::off(),
            cancel_grace: DEFAULT_CANCEL_GRACE,
            interruptible_timers: InterruptibleTimers::default(),
        }
    }

    /// Uses `clock` for processing time.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Reports checkpoints through `responder`.
    pub fn with_responder(mut self, responder: CheckpointResponder) -> Self {
        self.responder = responder;
        self
    }

    /// Restores from `snapshot`.
    pub fn with_restore(mut self, snapshot: Option<TaskSnapshot>) -> Self {
        self.restore = snapshot;
        self
    }

    /// Records metrics into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Records spans through `tracer`.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// Waits `grace` for a stopping task (see the runtime's `TaskHandle` for the cancel/join
    /// contract); [`DEFAULT_CANCEL_GRACE`] unless set.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Fires due event-time timers as `timers` says ([`InterruptibleTimers::default`] unless
    /// set).
    pub fn with_interruptible_timers(mut self, timers: InterruptibleTimers) -> Self {
        self.interruptible_timers = timers;
        self
    }
}

/// How a task ended.
#[derive(Debug)]
pub enum TaskOutcome {
    /// All input was processed and the chain finished.
    Finished,
    /// The task was cancelled before it finished.
    Cancelled,
    /// A thread of the task failed; the others were stopped.
    Failed(TaskFailure),
}

impl TaskOutcome {
    /// Whether the task finished normally.
    pub fn is_finished(&self) -> bool {
        matches!(self, TaskOutcome::Finished)
    }

    /// The failure, if the task failed.
    pub fn failure(&self) -> Option<&TaskFailure> {
        match self {
            TaskOutcome::Failed(f) => Some(f),
            _ => None,
        }
    }
}

impl fmt::Display for TaskOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskOutcome::Finished => f.write_str("finished"),
            TaskOutcome::Cancelled => f.write_str("cancelled"),
            TaskOutcome::Failed(failure) => write!(f, "failed: {failure}"),
        }
    }
}

/// The first failure of a task, and the thread it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{error} (on thread {thread})")]
pub struct TaskFailure {
    /// Name of the thread that failed (task thread, timer thread, source thread, ...).
    pub thread: String,
    /// What went wrong.
    #[source]
    pub error: TaskError,
}

impl TaskFailure {
    /// A failure of `error` on `thread`.
    pub fn new(thread: impl Into<String>, error: impl Into<TaskError>) -> Self {
        TaskFailure {
            thread: thread.into(),
            error: error.into(),
        }
    }
}

/// Why a task failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// An operator (or the source, or a user function) failed.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// User code panicked; the panic's message.
    #[error("panicked: {0}")]
    Panic(String),
    /// Taking a snapshot failed; the checkpoint was declined. (A panic while snapshotting is a
    /// [`TaskError::Panic`]; the decline names the checkpoint.)
    #[error("checkpoint {checkpoint} failed: {source}")]
    Checkpoint {
        /// The checkpoint.
        checkpoint: u64,
        /// What the snapshot failed with.
        #[source]
        source: OperatorError,
    },
    /// A source kept running after cancellation for longer than the grace period.
    #[error(
        "the source ignored cancellation for {grace_ms} ms and is still running; make its run \
         loop check the cancel flag or return when a blocking call is interrupted"
    )]
    CancellationIgnored {
        /// The grace period that passed, in milliseconds.
        grace_ms: u64,
    },
    /// An upstream channel closed without end of input (its task failed or was cancelled).
    #[error("input channel {channel} closed without end of input; the upstream task is gone")]
    InputClosed {
        /// The channel's index in the input gate.
        channel: usize,
    },
    /// The task thread ended without finishing, being cancelled or failing: a bug in the task
    /// runtime, reported rather than hidden.
    #[error(
        "the task thread ended while {state:?} without finishing, cancelling or failing; this is \
         a bug in the task runtime, please report it"
    )]
    Ended {
        /// The state it ended in.
        state: TaskState,
    },
}

impl TaskError {
    /// Whether this failure only reports that another task is gone (its channels closed under
    /// this one), so it is a consequence, not a cause, of a job's failure.
    pub fn is_consequence(&self) -> bool {
        match self {
            TaskError::InputClosed { .. } => true,
            TaskError::Operator(error) => error.is_output_closed(),
            // A snapshot that could not broadcast its barrier: the downstream task is gone.
            TaskError::Checkpoint { source, .. } => source.is_output_closed(),
            _ => false,
        }
    }
}

/// A checkpoint trigger reached a task that cannot start one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    /// Only source tasks are triggered; tasks with inputs checkpoint when barriers arrive.
    #[error(
        "this task reads inputs and checkpoints when barriers arrive through them; trigger its \
         upstream source tasks instead"
    )]
    NotASource,
}

/// Why a task declined a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclineReason {
    /// The task is not running (not yet started, finishing, or finished).
    NotRunning,
    /// A newer barrier superseded this checkpoint during alignment.
    Superseded,
    /// The checkpoint was cancelled during alignment (end of input, say).
    AlignmentAborted,
    /// The snapshot failed.
    Failed(String),
    /// The task could not take part because another task of the job is gone: its output
    /// channel closed under the barrier (the downstream task was cancelled or failed, and the
    /// attempt is being torn down). The task fails with the same cause; the checkpoint says
    /// nothing about the job's health (Flink's `TASK_FAILURE`, which its
    /// `CheckpointFailureManager` does not count).
    TaskFailure(String),
}

impl fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeclineReason::NotRunning => f.write_str("task not running"),
            DeclineReason::Superseded => f.write_str("superseded by a newer checkpoint"),
            DeclineReason::AlignmentAborted => f.write_str("alignment aborted"),
            DeclineReason::Failed(m) => write!(f, "snapshot failed: {m}"),
            DeclineReason::TaskFailure(m) => write!(f, "task failing: {m}"),
        }
    }
}

/// What a task tells the coordinator about a checkpoint.
#[derive(Debug)]
pub enum TaskReport {
    /// The task snapshotted its state for `checkpoint`.
    Acknowledged {
        /// The task's name.
        task: String,
        /// The checkpoint.
        checkpoint: u64,
        /// The task's state.
        snapshot: TaskSnapshot,
    },
    /// The task cannot take part in `checkpoint`.
    Declined {
        /// The task's name.
        task: String,
        /// The checkpoint.
        checkpoint: u64,
        /// Why.
        reason: DeclineReason,
    },
}

impl TaskReport {
    /// The checkpoint the report is about.
    pub fn checkpoint(&self) -> u64 {
        match self {
            TaskReport::Acknowledged { checkpoint, .. }
            | TaskReport::Declined { checkpoint, .. } => *checkpoint,
        }
    }

    /// The reporting task.
    pub fn task(&self) -> &str {
        match self {
            TaskReport::Acknowledged { task, .. } | TaskReport::Declined { task, .. } => task,
        }
    }
}

/// How a task reports to the checkpoint coordinator. Cloneable and `Send`.
#[derive(Clone)]
pub struct CheckpointResponder {
    task: String,
    reports: Option<Sender<TaskReport>>,
}

impl CheckpointResponder {
    /// A responder for `task` that sends to the coordinator's `reports` channel.
    pub fn new(task: impl Into<String>, reports: Sender<TaskReport>) -> Self {
        CheckpointResponder {
            task: task.into(),
            reports: Some(reports),
        }
    }

    /// A responder that drops every report (tasks run without a coordinator).
    pub fn discard(task: impl Into<String>) -> Self {
        CheckpointResponder {
            task: task.into(),
            reports: None,
        }
    }

    /// The task's name.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// Acknowledges `checkpoint` with `snapshot`. A coordinator that is gone is ignored (the job
    /// is shutting down).
    pub fn acknowledge(&self, checkpoint: u64, snapshot: TaskSnapshot) {
        self.send(TaskReport::Acknowledged {
            task: self.task.clone(),
            checkpoint,
            snapshot,
        });
    }

    /// Declines `checkpoint`.
    pub fn decline(&self, checkpoint: u64, reason: DeclineReason) {
        self.send(TaskReport::Declined {
            task: self.task.clone(),
            checkpoint,
            reason,
        });
    }

    fn send(&self, report: TaskReport) {
        if let Some(tx) = &self.reports
            && tx.send(report).is_err()
        {
            log::debug!("{}: coordinator gone, checkpoint report dropped", self.task);
        }
    }
}

impl fmt::Debug for CheckpointResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointResponder")
            .field("task", &self.task)
            .field("connected", &self.reports.is_some())
            .finish()
    }
}

/// Where a task is in its life:
///
/// | state | meaning | moves to | by |
/// |---|---|---|---|
/// | `Initializing` | restoring and opening the chain; triggers are declined | `Running`; `Cancelling`, `Failing` | the task thread once the chain is open; `cancel`; a failure |
/// | `Running` | processing input (or running the source); triggers snapshot | `Finishing`, `Suspending`; `Cancelling`, `Failing` | the task thread at end of input; the body at a stop-with-savepoint barrier; `cancel`; a failure |
/// | `Suspending` | took a stop-with-savepoint barrier: a source emits nothing more; triggers are declined, notices delivered | `Suspended` (the savepoint completed), `Running` (it was aborted); `Cancelling`, `Failing` | the body at the savepoint's notice; `cancel`; a failure |
/// | `Suspended` | the savepoint completed: the task's threads are stopping, without end of input (Flink's stop without `--drain`) | `Finished` | the task thread after teardown |
/// | `Finishing` | input ended: the chain drains and finishes; triggers are declined, notices still delivered | `Finished` (terminal); `Cancelling`, `Failing` | the task thread after teardown; `cancel`; a failure |
/// | `Cancelling` | `cancel()` was called; the task's threads are stopping | `Cancelled`; `Failed` (a thread was left behind) | the task thread after teardown |
/// | `Failing` | the first failure is kept; the task's threads are stopping | `Failed` | the task thread after teardown |
/// | `Finished`, `Cancelled`, `Failed` | every thread the task started has ended, but one left behind stuck in user code (see the runtime's `TaskHandle`) | - | - |
///
/// A failure or a cancel while `Suspended` is only logged too (the savepoint holds everything
/// the task did up to its barrier; whatever failed after it is not part of the job's output).
/// A failure while `Cancelling` is only logged (Flink ignores a cancelled task's errors,
/// FLINK-15811); a second failure while `Failing` too (the first wins). Every move into
/// `Cancelling` or `Failing` runs the task's stop hook once (cancel the source's token, put a
/// poison mail: whatever wakes that model's threads) and starts the grace period; so does the
/// move into `Suspended`, which is how a suspended task's threads learn to end.
///
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TaskState {
    /// Restoring and opening the chain; triggers are declined.
    Initializing = 0,
    /// Processing input (or running the source); triggers snapshot.
    Running = 1,
    /// Input ended: the chain drains and finishes; triggers are declined, notices delivered.
    Finishing = 2,
    /// `cancel()` was called; the task's threads are stopping.
    Cancelling = 3,
    /// A thread failed; the others are stopping.
    Failing = 4,
    /// Every thread ended after the chain finished.
    Finished = 5,
    /// Every thread ended after a cancellation.
    Cancelled = 6,
    /// The task ended after a failure (or left a thread behind that ignored cancellation).
    Failed = 7,
    /// Took a stop-with-savepoint barrier; waits for the savepoint (notices delivered).
    Suspending = 8,
    /// The stop-with-savepoint's savepoint completed; the task's threads are stopping, without
    /// end of input. Ends `Finished`.
    Suspended = 9,
}

impl TaskState {
    /// The state stored as `state as u8`: for the runtime's lifecycle, which keeps the state
    /// in an atomic byte.
    ///
    /// # Panics
    ///
    /// Panics on a byte no state is stored as.
    #[doc(hidden)]
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => TaskState::Initializing,
            1 => TaskState::Running,
            2 => TaskState::Finishing,
            3 => TaskState::Cancelling,
            4 => TaskState::Failing,
            5 => TaskState::Finished,
            6 => TaskState::Cancelled,
            7 => TaskState::Failed,
            8 => TaskState::Suspending,
            9 => TaskState::Suspended,
            // Only `TaskState as u8` is ever stored.
            other => panic!("impossible task state byte {other}"),
        }
    }

    /// Whether the task ended.
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
            TaskState::Initializing
                | TaskState::Running
                | TaskState::Finishing
                | TaskState::Suspending
        )
    }

    /// Whether the task was cancelled or failed and its threads are stopping.
    pub fn is_stopping(self) -> bool {
        matches!(self, TaskState::Cancelling | TaskState::Failing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responder_sends_acks_and_declines() {
        let (tx, rx) = crossbeam::channel::unbounded();
        let r = CheckpointResponder::new("t1", tx);
        r.acknowledge(3, TaskSnapshot::new());
        r.decline(4, DeclineReason::NotRunning);
        let a = rx.recv().unwrap();
        assert_eq!((a.task(), a.checkpoint()), ("t1", 3));
        let d = rx.recv().unwrap();
        assert!(matches!(
            d,
            TaskReport::Declined {
                reason: DeclineReason::NotRunning,
                ..
            }
        ));
        CheckpointResponder::discard("x").acknowledge(1, TaskSnapshot::new());
    }

    #[test]
    fn outcomes_display_their_cause() {
        let failed = TaskOutcome::Failed(TaskFailure::new("timer", TaskError::Panic("x".into())));
        assert_eq!(failed.to_string(), "failed: panicked: x (on thread timer)");
        assert!(TaskOutcome::Finished.is_finished());
        assert!(failed.failure().is_some());
    }
}
