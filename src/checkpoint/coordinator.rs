//! [`CheckpointCoordinator`]: the state machine that triggers checkpoints, collects the tasks'
//! reports, and completes or aborts each checkpoint.
//!
//! It never reads a clock and never blocks: every call takes the current processing time
//! (`now`, milliseconds from a [`Clock`](streamtask_core::time::Clock)) and returns the
//! [`CoordinatorAction`]s the executor must carry out. That keeps it deterministic under a
//! [`ManualClock`](streamtask_core::time::ManualClock); [`CoordinatorDriver`](super::CoordinatorDriver) runs it
//! on a thread against a real clock.
//!
//! # The coordinator's states
//!
//! | state | triggers | pending checkpoints | moves to |
//! |---|---|---|---|
//! | `Running` | when the interval and minimum pause passed and a slot is free | complete or abort | `Stopped` when a task finishes |
//! | `Stopped` | never | none (aborted on entry) | - |
//!
//! # Timing rules
//!
//! - The first checkpoint is due one interval after the coordinator was created.
//! - Checkpoint `n + 1` is due at the later of `trigger(n) + interval` and
//!   `end(latest completed or aborted) + min_pause`, and only while fewer than `max_concurrent`
//!   are pending. A poll later than that triggers once (no catching up).
//! - A pending checkpoint is aborted as expired once `now >= trigger + timeout`.
//!
//! Flink also caps concurrency at one whenever a minimum pause is set; here the two limits apply
//! independently, as configured.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use streamtask_core::metrics::{Counter, LatencyHistogram, LatencySummary};
use streamtask_core::state::TaskSnapshot;
use streamtask_core::sync::{Arc, Mutex};
use streamtask_core::task::{DeclineReason, TaskReport};
use streamtask_core::{Alignment, CheckpointBarrier};

use super::{CheckpointStorage, CompletedCheckpoint, StorageError};

/// When checkpoints are taken and how long they may take.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask::checkpoint::{CheckpointConfig, ConfigError};
///
/// let config = CheckpointConfig::new(Duration::from_secs(1))
///     .with_min_pause(Duration::from_millis(500))
///     .with_max_concurrent(2)
///     .with_timeout(Duration::from_secs(30));
/// assert!(config.validate().is_ok());
///
/// let too_short = config.with_timeout(Duration::from_millis(10));
/// assert!(matches!(
///     too_short.validate(),
///     Err(ConfigError::TimeoutShorterThanInterval { .. })
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Time between two triggers (at least 1 ms).
    pub interval: Duration,
    /// Minimum time between the end (completion or abort) of one checkpoint and the next
    /// trigger. Zero by default.
    pub min_pause: Duration,
    /// How many checkpoints may be pending at once (at least 1). One by default.
    pub max_concurrent: usize,
    /// How long a checkpoint may stay pending before it is aborted (at least the interval).
    pub timeout: Duration,
    /// How many checkpoint failures in a row the job tolerates (Flink's
    /// `execution.checkpointing.tolerable-failed-checkpoints`); one more fails it, and its
    /// restart strategy applies. 0 by default, as Flink's;
    /// [`UNLIMITED_FAILURES`](Self::UNLIMITED_FAILURES) never fails it. Which failures count:
    /// see [`AbortReason::counts_as_failure`].
    pub tolerable_failures: u32,
    /// How checkpoint barriers pass tasks with inputs: aligned (the default, as Flink's),
    /// unaligned, or aligned until a timeout. Savepoints are always aligned. The legacy model
    /// aligns every barrier (see MIGRATION.md, "Checkpoints under backpressure").
    pub alignment: Alignment,
    /// How long a checkpoint may stay pending before it is reported as stalled (the job's
    /// [`StallReport`](crate::StallReport): where each missing task's barrier is and what its
    /// thread does), and again every such period while it stays pending; `None` reports none.
    /// By default [`default_stall_report_after`](Self::default_stall_report_after) of the
    /// interval given to [`new`](Self::new).
    pub stall_report_after: Option<Duration>,
}

impl CheckpointConfig {
    /// The timeout unless told otherwise (or the interval, if that is longer): ten minutes, as
    /// Flink's.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

    /// [`tolerable_failures`](Self::tolerable_failures) that no number of failures exceeds.
    pub const UNLIMITED_FAILURES: u32 = u32::MAX;

    /// The shortest default [`stall_report_after`](Self::stall_report_after): one second.
    pub const MIN_DEFAULT_STALL_REPORT_AFTER: Duration = Duration::from_secs(1);

    /// The stall-report threshold unless told otherwise: three intervals (a checkpoint that
    /// is still pending when two more would have been due is late by any measure), but at
    /// least [`MIN_DEFAULT_STALL_REPORT_AFTER`](Self::MIN_DEFAULT_STALL_REPORT_AFTER), so short
    /// intervals do not report every hiccup.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::checkpoint::CheckpointConfig;
    ///
    /// let ms = Duration::from_millis;
    /// assert_eq!(CheckpointConfig::default_stall_report_after(ms(50)), ms(1000));
    /// assert_eq!(CheckpointConfig::default_stall_report_after(ms(2000)), ms(6000));
    /// ```
    pub fn default_stall_report_after(interval: Duration) -> Duration {
        interval
            .saturating_mul(3)
            .max(Self::MIN_DEFAULT_STALL_REPORT_AFTER)
    }

    /// Checkpoints every `interval`, no minimum pause, one at a time, timing out after
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT) or the interval, whichever is longer.
    pub fn new(interval: Duration) -> Self {
        CheckpointConfig {
            interval,
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            timeout: interval.max(Self::DEFAULT_TIMEOUT),
            tolerable_failures: 0,
            alignment: Alignment::Aligned,
            stall_report_after: Some(Self::default_stall_report_after(interval)),
        }
    }

    /// Reports a checkpoint as stalled once it was pending for `after`, and again every
    /// `after` while it stays pending (see [`stall_report_after`](Self::stall_report_after)).
    pub fn with_stall_report_after(mut self, after: Duration) -> Self {
        self.stall_report_after = Some(after);
        self
    }

    /// Reports no stalled checkpoint.
    pub fn without_stall_reports(mut self) -> Self {
        self.stall_report_after = None;
        self
    }

    /// Unaligned checkpoints (Flink's `execution.checkpointing.unaligned.enabled`): a barrier
    /// overtakes the records queued ahead of it, and the records it overtook are stored with
    /// the checkpoint as channel state.
    pub fn with_unaligned(mut self) -> Self {
        self.alignment = Alignment::Unaligned;
        self
    }

    /// Aligned checkpoints that switch to unaligned once `timeout` has passed since their
    /// trigger (Flink's `execution.checkpointing.aligned-checkpoint-timeout`); a zero timeout
    /// is unaligned from the start.
    pub fn with_aligned_timeout(mut self, timeout: Duration) -> Self {
        self.alignment = if timeout.is_zero() {
            Alignment::Unaligned
        } else {
            Alignment::AlignedTimeout(timeout)
        };
        self
    }

    /// Tolerates `failures` checkpoint failures in a row before the job fails (see
    /// [`tolerable_failures`](Self::tolerable_failures)).
    pub fn with_tolerable_failures(mut self, failures: u32) -> Self {
        self.tolerable_failures = failures;
        self
    }

    /// Waits at least `min_pause` after a checkpoint ends before triggering the next.
    pub fn with_min_pause(mut self, min_pause: Duration) -> Self {
        self.min_pause = min_pause;
        self
    }

    /// Allows `max_concurrent` pending checkpoints at once.
    pub fn with_max_concurrent(mut self, max_concurrent: usize) -> Self {
        self.max_concurrent = max_concurrent;
        self
    }

    /// Aborts a checkpoint still pending `timeout` after its trigger.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroInterval`] for an interval under 1 ms,
    /// [`ConfigError::ZeroMaxConcurrent`] for `max_concurrent == 0`,
    /// [`ConfigError::TimeoutShorterThanInterval`] for a timeout shorter than the interval,
    /// [`ConfigError::ZeroStallReportAfter`] for a stall-report threshold under 1 ms.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self
            .stall_report_after
            .is_some_and(|after| after < Duration::from_millis(1))
        {
            return Err(ConfigError::ZeroStallReportAfter);
        }
        if self.interval < Duration::from_millis(1) {
            return Err(ConfigError::ZeroInterval);
        }
        if self.max_concurrent == 0 {
            return Err(ConfigError::ZeroMaxConcurrent);
        }
        if self.timeout < self.interval {
            return Err(ConfigError::TimeoutShorterThanInterval {
                timeout: self.timeout,
                interval: self.interval,
            });
        }
        Ok(())
    }
}

/// A [`CheckpointConfig`] is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The interval is zero (or under the clock's 1 ms resolution).
    #[error("the checkpoint interval is zero or under 1 ms; set an interval of at least 1 ms")]
    ZeroInterval,
    /// No checkpoint may be pending, so none could ever start.
    #[error("max_concurrent is 0, so no checkpoint could ever start; allow at least 1")]
    ZeroMaxConcurrent,
    /// Checkpoints would time out before the next one is even due.
    #[error(
        "the checkpoint timeout ({timeout:?}) is shorter than the interval ({interval:?}); set a \
         timeout of at least the interval"
    )]
    TimeoutShorterThanInterval {
        /// The configured timeout.
        timeout: Duration,
        /// The configured interval.
        interval: Duration,
    },
    /// Every pending checkpoint would be reported as stalled at once.
    #[error(
        "the stall-report threshold is zero or under 1 ms; set at least 1 ms, or turn the \
         reports off (CheckpointConfig::without_stall_reports)"
    )]
    ZeroStallReportAfter,
}

/// What the executor must do after a coordinator call.
#[derive(Debug, Clone)]
pub enum CoordinatorAction {
    /// Start a checkpoint: call `trigger_checkpoint(barrier)` on every
    /// [triggered task](CheckpointCoordinator::triggered_tasks).
    Trigger(CheckpointBarrier),
    /// Checkpoint `id` is stored: call `notify_checkpoint_complete(id)` on every task.
    Complete {
        /// The checkpoint.
        id: u64,
    },
    /// Checkpoint `id` will never complete: call `notify_checkpoint_aborted(id)` on every task.
    Abort {
        /// The checkpoint.
        id: u64,
        /// Why.
        reason: AbortReason,
    },
    /// More checkpoints failed in a row than the configuration tolerates
    /// ([`CheckpointConfig::tolerable_failures`]): fail the job (its restart strategy
    /// applies). Follows the [`Abort`](Self::Abort) of checkpoint `id`, the last failure.
    FailJob(CheckpointFailures),
}

/// Checkpoints failed in a row beyond what the job tolerates.
#[derive(Debug, Clone)]
pub struct CheckpointFailures {
    /// The checkpoint whose failure went past the threshold.
    pub id: u64,
    /// Failures in a row, this one included.
    pub failures: u32,
    /// How many the job tolerates.
    pub tolerable: u32,
    /// Why the last one failed.
    pub reason: AbortReason,
}

impl fmt::Display for CheckpointFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} checkpoints failed in a row, more than the {} tolerated (the last, {}, {}); \
             find what holds the checkpoints back (a task stuck in user code, a full disk), or \
             raise the tolerance (--tolerable-failed-checkpoints, \
             CheckpointConfig::with_tolerable_failures)",
            self.failures, self.tolerable, self.id, self.reason
        )
    }
}

impl CoordinatorAction {
    /// The checkpoint the action is about.
    pub fn checkpoint(&self) -> u64 {
        match self {
            CoordinatorAction::Trigger(barrier) => barrier.id,
            CoordinatorAction::Complete { id } | CoordinatorAction::Abort { id, .. } => *id,
            CoordinatorAction::FailJob(failures) => failures.id,
        }
    }
}

/// Why a checkpoint was aborted.
#[derive(Debug, Clone)]
pub enum AbortReason {
    /// It was still pending when its timeout passed.
    Expired,
    /// A task declined it.
    Declined {
        /// The declining task.
        task: String,
        /// The task's reason.
        reason: DeclineReason,
    },
    /// A newer checkpoint completed first, which makes this one useless (Flink's "subsumed").
    Subsumed {
        /// The newer, completed checkpoint.
        by: u64,
    },
    /// A task finished, after which no checkpoint can complete.
    TaskFinished {
        /// The finished task.
        task: String,
    },
    /// Every task acknowledged, but storing the checkpoint failed.
    StorageFailed(Arc<StorageError>),
}

impl AbortReason {
    /// Whether the abort counts against the job's tolerable checkpoint failures, as Flink's
    /// `CheckpointFailureManager` counts them: an expired checkpoint, one that could not be
    /// stored (Flink's `IO_EXCEPTION`), and one a task declined because its snapshot failed
    /// (`CHECKPOINT_DECLINED`). A decline because a task is not running, was superseded or
    /// ended its input, or failed because another task is gone
    /// ([`DeclineReason::TaskFailure`], Flink's `TASK_FAILURE`: the job fails over for that
    /// task's failure, not for the checkpoint), a subsumed checkpoint, or a finished task say
    /// nothing about the job's health and do not count.
    pub fn counts_as_failure(&self) -> bool {
        matches!(
            self,
            AbortReason::Expired
                | AbortReason::StorageFailed(_)
                | AbortReason::Declined {
                    reason: DeclineReason::Failed(_),
                    ..
                }
        )
    }

    /// Whether the abort only reports that the job is ending by itself: a task finished, or
    /// declined because it is not running (finishing or failing) or its alignment ended with
    /// its input. Such an abort does not fail a stop-with-savepoint: the job's own end decides.
    pub fn is_job_ending(&self) -> bool {
        matches!(
            self,
            AbortReason::TaskFinished { .. }
                | AbortReason::Declined {
                    reason: DeclineReason::NotRunning | DeclineReason::AlignmentAborted,
                    ..
                }
        )
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Expired => f.write_str("expired before every task acknowledged"),
            AbortReason::Declined { task, reason } => write!(f, "declined by {task}: {reason}"),
            AbortReason::Subsumed { by } => write!(f, "subsumed by completed checkpoint {by}"),
            AbortReason::TaskFinished { task } => write!(f, "task {task} finished"),
            AbortReason::StorageFailed(err) => write!(f, "storing failed: {}", &**err),
        }
    }
}

/// Creating a coordinator or handing it a report failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The storage could not be read for the ids already used.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No task would acknowledge, so a checkpoint would complete empty.
    #[error("the coordinator has no tasks; list every task of the job (each one acknowledges)")]
    NoTasks,
    /// No task would receive the trigger, so no checkpoint could ever complete.
    #[error("no task is triggered; name the job's source tasks as the triggered tasks")]
    NoTriggeredTasks,
    /// A task was named as triggered but not as acknowledging.
    #[error(
        "triggered task {task} is not one of the coordinator's tasks; list every triggered task \
         among the tasks too"
    )]
    UnknownTriggeredTask {
        /// The task.
        task: String,
    },
    /// A report or notice named a task the coordinator does not know.
    #[error(
        "task {task} is not one of the coordinator's tasks; list every task of the job when \
         creating the coordinator"
    )]
    UnknownTask {
        /// The task.
        task: String,
    },
    /// A task reported a checkpoint that was never triggered.
    #[error(
        "task {task} reported checkpoint {checkpoint}, which was never triggered (the newest is \
         {newest}); report only the ids of barriers the task received"
    )]
    UnknownCheckpoint {
        /// The reporting task.
        task: String,
        /// The id it reported.
        checkpoint: u64,
        /// The newest id triggered.
        newest: u64,
    },
}

/// A checkpoint pending for longer than its configuration's
/// [`stall_report_after`](CheckpointConfig::stall_report_after), as the coordinator sees it (see
/// [`CheckpointCoordinator::stalled`]): which tasks acknowledged it and which did not. The job
/// completes it into a [`StallReport`](crate::StallReport) with what each missing task does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledCheckpoint {
    /// The checkpoint.
    pub id: u64,
    /// Whether it is the stop-with-savepoint's savepoint.
    pub savepoint: bool,
    /// When it was triggered (the coordinator's `now`, milliseconds).
    pub triggered_at: i64,
    /// How long it has been pending, milliseconds.
    pub pending_ms: u64,
    /// The threshold it passed, milliseconds.
    pub threshold_ms: u64,
    /// Which report of this checkpoint this is: 1 at one threshold, 2 a threshold later, ...
    pub report: u32,
    /// The tasks that acknowledged it, in name order.
    pub acknowledged: Vec<String>,
    /// The tasks that did not, in name order.
    pub missing: Vec<String>,
}

/// Checkpoint statistics, shared (`Arc`) between the coordinator and whoever reads them.
///
/// Durations are measured on the coordinator's clock, from trigger to completion (every task
/// acknowledged): the checkpoint's end-to-end duration.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    /// Checkpoints triggered.
    pub triggered: Counter,
    /// Checkpoints completed (stored).
    pub completed: Counter,
    /// Checkpoints aborted, for any reason.
    pub aborted: Counter,
    /// Reports the coordinator refused (unknown task or checkpoint): a wiring bug.
    pub rejected_reports: Counter,
    /// From trigger to completion.
    pub duration: LatencyHistogram,
    /// The latest completed checkpoints, oldest first, at most
    /// [`SERIES_CAPACITY`](Self::SERIES_CAPACITY).
    series: Mutex<VecDeque<CheckpointTiming>>,
}

impl CheckpointStats {
    /// Completed checkpoints [`series`](Self::series) keeps: the latest ones; each completion
    /// past it drops the oldest. Every checkpoint of a run of more than two hours at one
    /// checkpoint a second, in a few hundred kilobytes; [`duration`](Self::duration) counts
    /// them all.
    pub const SERIES_CAPACITY: usize = 8192;

    /// A serializable copy of the statistics.
    pub fn summary(&self) -> CheckpointStatsSummary {
        CheckpointStatsSummary {
            triggered: self.triggered.get(),
            completed: self.completed.get(),
            aborted: self.aborted.get(),
            rejected_reports: self.rejected_reports.get(),
            duration_us: self.duration.summary(),
            series: self.series(),
        }
    }

    /// The end-to-end duration of each of the latest completed checkpoints (at most
    /// [`SERIES_CAPACITY`](Self::SERIES_CAPACITY)), oldest first.
    pub fn series(&self) -> Vec<CheckpointTiming> {
        self.series.lock().iter().copied().collect()
    }

    /// The newest completed checkpoint's timing, if any completed.
    pub fn last_completed(&self) -> Option<CheckpointTiming> {
        self.series.lock().back().copied()
    }

    /// Records a completed checkpoint in the histogram and the series.
    fn record_completed(&self, timing: CheckpointTiming) {
        self.duration
            .record_micros(timing.duration_ms.saturating_mul(1000));
        let mut series = self.series.lock();
        if series.len() == Self::SERIES_CAPACITY {
            series.pop_front();
        }
        series.push_back(timing);
    }
}

/// One completed checkpoint's end-to-end duration, on the coordinator's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointTiming {
    /// The checkpoint.
    pub id: u64,
    /// When it was triggered (the coordinator's `now`, milliseconds).
    pub triggered_at: i64,
    /// From the trigger to the last acknowledgement, milliseconds.
    pub duration_ms: u64,
}

/// A point-in-time copy of [`CheckpointStats`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)] // Each field mirrors the `CheckpointStats` field of the same name.
pub struct CheckpointStatsSummary {
    pub triggered: u64,
    pub completed: u64,
    pub aborted: u64,
    pub rejected_reports: u64,
    pub duration_us: LatencySummary,
    #[serde(default)]
    pub series: Vec<CheckpointTiming>,
}

/// Decides when checkpoints start, collects every task's acknowledgement, stores completed
/// checkpoints, and aborts the ones that cannot complete.
///
/// A deterministic state machine: [`poll`](Self::poll) at (or after)
/// [`next_deadline`](Self::next_deadline), [`receive`](Self::receive) each
/// [`TaskReport`], and carry out the returned [`CoordinatorAction`]s in order. The module docs
/// hold the state table and the timing rules.
///
/// Once any task finishes, no checkpoint can complete any more (Flink up to 1.13, before
/// FLIP-147): call [`task_finished`](Self::task_finished), which aborts the pending checkpoints
/// and stops triggering.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_core::state::TaskSnapshot;
/// use streamtask::checkpoint::{
///     CheckpointConfig, CheckpointCoordinator, CheckpointStorage, CoordinatorAction,
/// };
/// use streamtask_core::task::TaskReport;
///
/// let storage = CheckpointStorage::in_memory(1).unwrap();
/// let config = CheckpointConfig::new(Duration::from_millis(100));
/// let mut coordinator =
///     CheckpointCoordinator::new(config, storage.clone(), ["source", "sink"], ["source"], 0)
///         .unwrap();
/// assert!(coordinator.poll(99).is_empty());
/// assert_eq!(coordinator.next_deadline(), Some(100));
///
/// let actions = coordinator.poll(100);
/// let CoordinatorAction::Trigger(barrier) = &actions[0] else { panic!("{actions:?}") };
/// assert_eq!((barrier.id, barrier.timestamp), (1, 100));
///
/// for task in ["source", "sink"] {
///     let report = TaskReport::Acknowledged {
///         task: task.to_string(),
///         checkpoint: 1,
///         snapshot: TaskSnapshot::new(),
///     };
///     let actions = coordinator.receive(report, 120).unwrap();
///     if task == "sink" {
///         assert!(matches!(actions[..], [CoordinatorAction::Complete { id: 1 }]));
///     }
/// }
/// assert_eq!(storage.latest().unwrap().unwrap().id, 1);
/// ```
#[derive(Debug)]
pub struct CheckpointCoordinator {
    timing: Timing,
    storage: CheckpointStorage,
    /// Every task that must acknowledge.
    tasks: BTreeSet<String>,
    /// The tasks that receive the trigger (sources), a subset of `tasks`.
    triggered: Vec<String>,
    state: State,
    pending: BTreeMap<u64, PendingCheckpoint>,
    /// The highest id triggered, stored or declared used.
    last_id: u64,
    /// When the coordinator was created: the first interval counts from here.
    created: i64,
    last_trigger: Option<i64>,
    /// When the latest checkpoint completed or was aborted.
    last_end: Option<i64>,
    stats: Arc<CheckpointStats>,
    /// Where the stop-with-savepoint is.
    savepoint: SavepointState,
    /// Where a completed savepoint goes instead of the checkpoint storage.
    savepoint_writer: Option<WriterSlot>,
    /// Whether the savepoint drains the job first (Flink's `stop --drain`).
    savepoint_drains: bool,
    /// Checkpoint failures since the last completed checkpoint (see
    /// [`AbortReason::counts_as_failure`]).
    failures_in_a_row: u32,
    /// What each source task read, stamped into its snapshot of every stored checkpoint.
    source_identities: BTreeMap<String, String>,
}

/// The savepoint writer, shown as a placeholder by `Debug`.
struct WriterSlot(SavepointWriter);

impl fmt::Debug for WriterSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SavepointWriter")
    }
}

/// Writes a completed savepoint durably (before its completion notices commit the sinks).
pub type SavepointWriter =
    Box<dyn FnMut(&CompletedCheckpoint) -> Result<(), StorageError> + Send + Sync + 'static>;

/// Where a stop-with-savepoint is:
///
/// | state | checkpoints triggered | moves to |
/// |---|---|---|
/// | `NotRequested` | periodically | `Requested` ([`trigger_savepoint`](CheckpointCoordinator::trigger_savepoint)) |
/// | `Requested` | none; the savepoint at the next poll | `Pending` (triggered) |
/// | `Pending(id)` | none | `Completed(id)` (stored); `Failed` (expired, declined, not stored); `Pending(id)` kept when a task finished or is finishing (the job ends by itself) |
/// | `Completed(id)` | none | - |
/// | `Failed` | periodically again: the stop failed, the job goes on (Flink's contract) | - |
///
/// A failed savepoint is never triggered again: the stop fails and its caller decides (the
/// executor ends the run with the failure). Retrying behind the caller's back would hide a
/// savepoint that can never be written (an unusable directory) as an endless stop.
#[derive(Debug, Clone)]
enum SavepointState {
    NotRequested,
    Requested,
    Pending(u64),
    Completed(u64),
    Failed(SavepointFailure),
}

/// A stop-with-savepoint whose savepoint was aborted: the stop failed.
#[derive(Debug, Clone)]
pub struct SavepointFailure {
    /// The savepoint's checkpoint id.
    pub id: u64,
    /// Why it was aborted.
    pub reason: AbortReason,
}

impl fmt::Display for SavepointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "savepoint {} was aborted: {}", self.id, self.reason)
    }
}

/// The coordinator's lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Checkpoints are triggered periodically and may complete.
    Running,
    /// A task finished: nothing is triggered, nothing pending can complete.
    Stopped {
        /// The first task that finished.
        finished: String,
    },
}

/// [`CheckpointConfig`] in the clock's milliseconds.
#[derive(Debug, Clone, Copy)]
struct Timing {
    interval: i64,
    min_pause: i64,
    timeout: i64,
    max_concurrent: usize,
    tolerable_failures: u32,
    alignment: Alignment,
    stall_after: Option<i64>,
}

impl Timing {
    fn of(config: &CheckpointConfig) -> Self {
        let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timing {
            interval: millis(config.interval),
            min_pause: millis(config.min_pause),
            timeout: millis(config.timeout),
            max_concurrent: config.max_concurrent,
            tolerable_failures: config.tolerable_failures,
            alignment: config.alignment,
            stall_after: config.stall_report_after.map(millis),
        }
    }
}

/// A checkpoint triggered but not yet completed or aborted.
#[derive(Debug)]
struct PendingCheckpoint {
    /// When it was triggered.
    timestamp: i64,
    /// When it expires.
    deadline: i64,
    /// The snapshots of the tasks that acknowledged so far.
    acks: BTreeMap<String, TaskSnapshot>,
    /// When it is reported as stalled next (`i64::MAX`: never).
    stall_report_at: i64,
    /// How many stall reports it had.
    stall_reports: u32,
}

impl CheckpointCoordinator {
    /// A coordinator created at processing time `now`, whose `tasks` must all acknowledge each
    /// checkpoint and whose `triggered` tasks (the sources) receive the trigger.
    ///
    /// Checkpoint ids continue after every id `storage` holds, so a restarted job never reuses
    /// one. The first checkpoint is due at `now + interval`.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Config`] if `config` is invalid; [`CoordinatorError::NoTasks`],
    /// [`CoordinatorError::NoTriggeredTasks`] or [`CoordinatorError::UnknownTriggeredTask`]
    /// if the task lists do not fit; [`CoordinatorError::Storage`] if the storage cannot be
    /// listed.
    pub fn new<T, S>(
        config: CheckpointConfig,
        storage: CheckpointStorage,
        tasks: impl IntoIterator<Item = T>,
        triggered: impl IntoIterator<Item = S>,
        now: i64,
    ) -> Result<Self, CoordinatorError>
    where
        T: Into<String>,
        S: Into<String>,
    {
        config.validate()?;
        let tasks: BTreeSet<String> = tasks.into_iter().map(Into::into).collect();
        if tasks.is_empty() {
            return Err(CoordinatorError::NoTasks);
        }
        let mut triggered_tasks: Vec<String> = Vec::new();
        for task in triggered {
            let task = task.into();
            if !tasks.contains(&task) {
                return Err(CoordinatorError::UnknownTriggeredTask { task });
            }
            if !triggered_tasks.contains(&task) {
                triggered_tasks.push(task);
            }
        }
        if triggered_tasks.is_empty() {
            return Err(CoordinatorError::NoTriggeredTasks);
        }
        let last_id = storage.completed_ids()?.last().copied().unwrap_or(0);
        Ok(CheckpointCoordinator {
            timing: Timing::of(&config),
            storage,
            tasks,
            triggered: triggered_tasks,
            state: State::Running,
            pending: BTreeMap::new(),
            last_id,
            created: now,
            last_trigger: None,
            last_end: None,
            stats: Arc::new(CheckpointStats::default()),
            savepoint: SavepointState::NotRequested,
            savepoint_writer: None,
            savepoint_drains: false,
            failures_in_a_row: 0,
            source_identities: BTreeMap::new(),
        })
    }

    /// Continues ids after `id` too (the executor passes the last id of a previous coordinator
    /// of the same job, whose aborted checkpoints the storage does not know).
    pub fn with_ids_after(mut self, id: u64) -> Self {
        self.last_id = self.last_id.max(id);
        self
    }

    /// Stamps what each source task read (`task` -> identity) into that task's snapshot of
    /// every checkpoint stored, under [`TaskSnapshot::SOURCE_IDENTITY`], so that a restore
    /// can refuse a checkpoint taken over other input. Savepoints record it in their own
    /// metadata instead.
    pub fn with_source_identities(mut self, identities: BTreeMap<String, String>) -> Self {
        self.source_identities = identities;
        self
    }

    /// Sets where a savepoint goes when it completes (see
    /// [`trigger_savepoint`](Self::trigger_savepoint)); without a writer a savepoint is refused.
    pub fn with_savepoint_writer(mut self, writer: SavepointWriter) -> Self {
        self.savepoint_writer = Some(WriterSlot(writer));
        self
    }

    /// Makes the savepoint a draining one (Flink's `stop --drain`): its barrier is of kind
    /// [`CheckpointKind::DrainingSavepoint`](streamtask_core::CheckpointKind::DrainingSavepoint),
    /// so every task ends its input before it takes the barrier. Default: no drain.
    pub fn with_savepoint_drain(mut self, drain: bool) -> Self {
        self.savepoint_drains = drain;
        self
    }

    /// Asks for a savepoint, as the first half of Flink's stop-with-savepoint: a barrier of
    /// kind [`CheckpointKind::Savepoint`](streamtask_core::CheckpointKind::Savepoint) whose
    /// snapshot, once every task acknowledged, goes to the savepoint writer (never to the
    /// checkpoint storage, so retention never deletes it). From now on no checkpoint is
    /// triggered. A savepoint that expires, is declined or cannot be written fails the stop
    /// ([`savepoint_failure`](Self::savepoint_failure)) and is not triggered again; periodic
    /// checkpoints resume. Returns the trigger (none if one was requested already, no writer
    /// is set, or a task finished).
    pub fn trigger_savepoint(&mut self, now: i64) -> Vec<CoordinatorAction> {
        if self.savepoint_writer.is_none() {
            log::warn!("savepoint not triggered: no savepoint location is set");
            return Vec::new();
        }
        if matches!(self.savepoint, SavepointState::NotRequested) {
            self.savepoint = SavepointState::Requested;
        }
        self.poll(now)
    }

    /// The id of the savepoint that completed, if one did.
    pub fn completed_savepoint(&self) -> Option<u64> {
        match self.savepoint {
            SavepointState::Completed(id) => Some(id),
            _ => None,
        }
    }

    /// Why the stop-with-savepoint failed, if it did (see
    /// [`trigger_savepoint`](Self::trigger_savepoint)).
    pub fn savepoint_failure(&self) -> Option<&SavepointFailure> {
        match &self.savepoint {
            SavepointState::Failed(failure) => Some(failure),
            _ => None,
        }
    }

    fn start_savepoint(&mut self, now: i64, actions: &mut Vec<CoordinatorAction>) {
        self.last_id += 1;
        let id = self.last_id;
        self.pending.insert(
            id,
            PendingCheckpoint {
                timestamp: now,
                deadline: now.saturating_add(self.timing.timeout),
                acks: BTreeMap::new(),
                stall_report_at: self.stall_report_at(now),
                stall_reports: 0,
            },
        );
        self.savepoint = SavepointState::Pending(id);
        self.last_trigger = Some(now);
        self.stats.triggered.inc();
        log::info!(
            "triggering savepoint {id}{}",
            if self.savepoint_drains {
                " (drain)"
            } else {
                ""
            }
        );
        let mut barrier = CheckpointBarrier::new(id, now);
        barrier.kind = if self.savepoint_drains {
            streamtask_core::CheckpointKind::DrainingSavepoint
        } else {
            streamtask_core::CheckpointKind::Savepoint
        };
        actions.push(CoordinatorAction::Trigger(barrier));
    }

    /// Triggers a checkpoint if one is due and aborts the expired ones.
    ///
    /// Returns the actions to carry out, in order: aborts first, then at most one trigger.
    pub fn poll(&mut self, now: i64) -> Vec<CoordinatorAction> {
        let mut actions = Vec::new();
        self.expire(now, &mut actions);
        match self.savepoint {
            SavepointState::Requested if !self.is_stopped() => {
                self.start_savepoint(now, &mut actions);
                return actions;
            }
            SavepointState::Requested
            | SavepointState::Pending(_)
            | SavepointState::Completed(_) => return actions,
            SavepointState::NotRequested | SavepointState::Failed(_) => {}
        }
        if self.next_trigger_at().is_some_and(|due| now >= due) {
            self.last_id += 1;
            let id = self.last_id;
            self.pending.insert(
                id,
                PendingCheckpoint {
                    timestamp: now,
                    deadline: now.saturating_add(self.timing.timeout),
                    acks: BTreeMap::new(),
                    stall_report_at: self.stall_report_at(now),
                    stall_reports: 0,
                },
            );
            self.last_trigger = Some(now);
            self.stats.triggered.inc();
            log::debug!("triggering checkpoint {id} at {now}");
            actions.push(CoordinatorAction::Trigger(
                CheckpointBarrier::new(id, now).with_alignment(self.timing.alignment),
            ));
        }
        actions
    }

    /// Takes a task's acknowledgement or decline.
    ///
    /// The last acknowledgement of a checkpoint stores it and returns, in order, an
    /// [`Abort`](CoordinatorAction::Abort) for each older pending checkpoint (subsumed) and
    /// [`Complete`](CoordinatorAction::Complete); a decline returns `Abort`. Expired
    /// checkpoints are aborted first, as in [`poll`](Self::poll). Reports about checkpoints
    /// that already completed or were aborted, and repeated acknowledgements, are logged and
    /// ignored: they are the normal late arrivals of a concurrent system.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::UnknownTask`] if the report comes from a task the coordinator does
    /// not know; [`CoordinatorError::UnknownCheckpoint`] if it names an id never triggered.
    /// Either is a wiring bug; the report is dropped.
    pub fn receive(
        &mut self,
        report: TaskReport,
        now: i64,
    ) -> Result<Vec<CoordinatorAction>, CoordinatorError> {
        if !self.tasks.contains(report.task()) {
            return Err(CoordinatorError::UnknownTask {
                task: report.task().to_string(),
            });
        }
        let id = report.checkpoint();
        if id > self.last_id {
            return Err(CoordinatorError::UnknownCheckpoint {
                task: report.task().to_string(),
                checkpoint: id,
                newest: self.last_id,
            });
        }
        let mut actions = Vec::new();
        self.expire(now, &mut actions);
        let Some(pending) = self.pending.get_mut(&id) else {
            log::debug!(
                "ignoring a report of {} about checkpoint {id}, which is no longer pending",
                report.task()
            );
            return Ok(actions);
        };
        match report {
            TaskReport::Acknowledged { task, snapshot, .. } => {
                if pending.acks.contains_key(&task) {
                    log::warn!("ignoring a repeated acknowledgement of {task} for checkpoint {id}");
                    return Ok(actions);
                }
                pending.acks.insert(task, snapshot);
                if pending.acks.len() == self.tasks.len() {
                    self.complete(id, now, &mut actions);
                }
            }
            TaskReport::Declined { task, reason, .. } => {
                log::info!("checkpoint {id} declined by {task}: {reason}");
                self.abort(
                    id,
                    AbortReason::Declined { task, reason },
                    now,
                    &mut actions,
                );
            }
        }
        Ok(actions)
    }

    /// Tells the coordinator that `task` finished: no checkpoint can complete any more, so the
    /// pending ones are aborted and none is triggered from now on. Repeated calls do nothing.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::UnknownTask`] if the coordinator does not know `task`.
    pub fn task_finished(
        &mut self,
        task: &str,
        now: i64,
    ) -> Result<Vec<CoordinatorAction>, CoordinatorError> {
        if !self.tasks.contains(task) {
            return Err(CoordinatorError::UnknownTask {
                task: task.to_string(),
            });
        }
        let mut actions = Vec::new();
        if let State::Stopped { finished } = &self.state {
            log::debug!("task {task} finished; checkpoints already stopped when {finished} did");
        } else {
            log::info!("task {task} finished: no further checkpoint can complete");
            self.state = State::Stopped {
                finished: task.to_string(),
            };
            let ids: Vec<u64> = self.pending.keys().copied().collect();
            for id in ids {
                let reason = AbortReason::TaskFinished {
                    task: task.to_string(),
                };
                self.abort(id, reason, now, &mut actions);
            }
        }
        Ok(actions)
    }

    /// When a checkpoint triggered at `now` is first reported as stalled.
    fn stall_report_at(&self, now: i64) -> i64 {
        self.timing
            .stall_after
            .map_or(i64::MAX, |after| now.saturating_add(after))
    }

    /// The pending checkpoints that are stalled at `now`: pending for the configured
    /// [`stall_report_after`](CheckpointConfig::stall_report_after), each reported once per
    /// such period while it stays pending (the first report at one period, the next at two).
    /// Oldest first.
    pub fn stalled(&mut self, now: i64) -> Vec<StalledCheckpoint> {
        let Some(after) = self.timing.stall_after else {
            return Vec::new();
        };
        let savepoint = match self.savepoint {
            SavepointState::Pending(id) => Some(id),
            _ => None,
        };
        let mut stalled = Vec::new();
        for (&id, pending) in &mut self.pending {
            if now < pending.stall_report_at {
                continue;
            }
            pending.stall_reports += 1;
            // At most one report per period, however late the poll (no catching up).
            pending.stall_report_at = now.saturating_add(after);
            stalled.push(StalledCheckpoint {
                id,
                savepoint: savepoint == Some(id),
                triggered_at: pending.timestamp,
                pending_ms: u64::try_from(now.saturating_sub(pending.timestamp)).unwrap_or(0),
                threshold_ms: u64::try_from(after).unwrap_or(0),
                report: pending.stall_reports,
                acknowledged: pending.acks.keys().cloned().collect(),
                missing: self
                    .tasks
                    .iter()
                    .filter(|t| !pending.acks.contains_key(*t))
                    .cloned()
                    .collect(),
            });
        }
        stalled
    }

    /// When [`stalled`](Self::stalled) reports next; `None` when nothing is pending or the
    /// reports are off.
    pub fn next_stall_report(&self) -> Option<i64> {
        self.pending
            .values()
            .map(|p| p.stall_report_at)
            .filter(|&at| at != i64::MAX)
            .min()
    }

    /// The earliest time at which [`poll`](Self::poll) has something to do (a trigger or an
    /// expiry); `None` once the coordinator is stopped (a task finished), as nothing is
    /// scheduled then.
    pub fn next_deadline(&self) -> Option<i64> {
        let expiry = self.pending.values().map(|p| p.deadline).min();
        match (expiry, self.next_trigger_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The newest intact completed checkpoint in the storage: the one to restore from.
    ///
    /// # Errors
    ///
    /// As [`CheckpointStorage::latest`].
    pub fn latest_completed(&self) -> Result<Option<CompletedCheckpoint>, StorageError> {
        self.storage.latest()
    }

    /// The tasks that must acknowledge every checkpoint, in name order.
    pub fn tasks(&self) -> impl Iterator<Item = &str> {
        self.tasks.iter().map(String::as_str)
    }

    /// The tasks that receive [`CoordinatorAction::Trigger`] (the sources).
    pub fn triggered_tasks(&self) -> &[String] {
        &self.triggered
    }

    /// The ids of the pending checkpoints, oldest first.
    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// The highest checkpoint id used so far (0 if none).
    pub fn last_id(&self) -> u64 {
        self.last_id
    }

    /// Whether a task finished, so that no checkpoint is triggered any more.
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, State::Stopped { .. })
    }

    /// The storage completed checkpoints go to.
    pub fn storage(&self) -> &CheckpointStorage {
        &self.storage
    }

    /// The statistics, shared with whoever reads them.
    pub fn stats(&self) -> Arc<CheckpointStats> {
        Arc::clone(&self.stats)
    }

    /// When the next trigger is due, if one can happen at all.
    fn next_trigger_at(&self) -> Option<i64> {
        match self.savepoint {
            // Due at once; never a checkpoint while a savepoint is asked for or taken.
            SavepointState::Requested => {
                return (!self.is_stopped()).then(|| self.last_end.unwrap_or(self.created));
            }
            SavepointState::Pending(_) | SavepointState::Completed(_) => return None,
            SavepointState::NotRequested | SavepointState::Failed(_) => {}
        }
        if self.is_stopped() || self.pending.len() >= self.timing.max_concurrent {
            return None;
        }
        let by_interval = self
            .last_trigger
            .unwrap_or(self.created)
            .saturating_add(self.timing.interval);
        let by_pause = self
            .last_end
            .map_or(i64::MIN, |end| end.saturating_add(self.timing.min_pause));
        Some(by_interval.max(by_pause))
    }

    fn expire(&mut self, now: i64, actions: &mut Vec<CoordinatorAction>) {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now >= p.deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            log::warn!("checkpoint {id} expired before every task acknowledged");
            self.abort(id, AbortReason::Expired, now, actions);
        }
    }

    fn abort(
        &mut self,
        id: u64,
        reason: AbortReason,
        now: i64,
        actions: &mut Vec<CoordinatorAction>,
    ) {
        if self.pending.remove(&id).is_some() {
            self.aborted(id, reason, now, actions);
        }
    }

    /// Checkpoint `id`, no longer pending, is aborted for `reason`; an aborted savepoint fails
    /// the stop, unless the job is ending by itself.
    fn aborted(
        &mut self,
        id: u64,
        reason: AbortReason,
        now: i64,
        actions: &mut Vec<CoordinatorAction>,
    ) {
        let is_savepoint = matches!(self.savepoint, SavepointState::Pending(p) if p == id);
        // A savepoint's failure fails its stop, not the job: it is not counted.
        let fail_job = (!is_savepoint && reason.counts_as_failure())
            .then(|| self.count_failure(id, &reason))
            .flatten();
        if is_savepoint {
            if reason.is_job_ending() {
                // The job ends without the savepoint (its tasks finish or fail by
                // themselves); nothing is triggered any more.
                log::info!("savepoint {id} aborted ({reason}); the job is ending by itself");
            } else {
                log::warn!("savepoint {id} aborted ({reason}): the stop-with-savepoint fails");
                self.savepoint = SavepointState::Failed(SavepointFailure {
                    id,
                    reason: reason.clone(),
                });
            }
        }
        self.last_end = Some(now);
        self.stats.aborted.inc();
        actions.push(CoordinatorAction::Abort { id, reason });
        actions.extend(fail_job.map(CoordinatorAction::FailJob));
    }

    /// Counts checkpoint `id`'s failure; past the tolerated number, the job fails (and the
    /// count starts over, for the restarted job).
    fn count_failure(&mut self, id: u64, reason: &AbortReason) -> Option<CheckpointFailures> {
        let tolerable = self.timing.tolerable_failures;
        if tolerable == CheckpointConfig::UNLIMITED_FAILURES {
            return None;
        }
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        if self.failures_in_a_row <= tolerable {
            return None;
        }
        let failures = std::mem::take(&mut self.failures_in_a_row);
        let text = reason.to_string();
        // A snapshot failed by a fault injected on purpose is what the run asked for: below
        // warnings, as the executor logs the attempt it fails.
        let level = if crate::fault::is_injected(&text) {
            log::Level::Info
        } else {
            log::Level::Warn
        };
        log::log!(
            level,
            "checkpoint {id} failed ({text}): {failures} failures in a row, more than the \
             {tolerable} tolerated; the job fails"
        );
        Some(CheckpointFailures {
            id,
            failures,
            tolerable,
            reason: reason.clone(),
        })
    }

    fn complete(&mut self, id: u64, now: i64, actions: &mut Vec<CoordinatorAction>) {
        let pending = self
            .pending
            .remove(&id)
            .expect("complete is called for a pending checkpoint");
        let mut checkpoint = CompletedCheckpoint {
            id,
            timestamp: pending.timestamp,
            tasks: pending.acks,
        };
        let is_savepoint = matches!(self.savepoint, SavepointState::Pending(p) if p == id);
        if !is_savepoint {
            for (task, identity) in &self.source_identities {
                if let Some(snapshot) = checkpoint.tasks.get_mut(task) {
                    snapshot.put(TaskSnapshot::SOURCE_IDENTITY, identity.as_bytes().to_vec());
                }
            }
        }
        let stored = match &mut self.savepoint_writer {
            Some(WriterSlot(write)) if is_savepoint => write(&checkpoint),
            _ => self.storage.store(&checkpoint),
        };
        if let Err(err) = stored {
            log::error!("checkpoint {id} could not be stored: {err}");
            let reason = AbortReason::StorageFailed(Arc::new(err));
            self.aborted(id, reason, now, actions);
            return;
        }
        if is_savepoint {
            self.savepoint = SavepointState::Completed(id);
        }
        // Older pending checkpoints can only restore to an earlier state: drop them, as Flink
        // does before it sends the completion notices.
        let older: Vec<u64> = self.pending.range(..id).map(|(&older, _)| older).collect();
        for older in older {
            self.abort(older, AbortReason::Subsumed { by: id }, now, actions);
        }
        self.last_end = Some(now);
        self.failures_in_a_row = 0;
        self.stats.completed.inc();
        self.stats.record_completed(CheckpointTiming {
            id,
            triggered_at: pending.timestamp,
            duration_ms: u64::try_from(now.saturating_sub(pending.timestamp)).unwrap_or(0),
        });
        log::debug!("checkpoint {id} completed at {now}");
        actions.push(CoordinatorAction::Complete { id });
    }
}
