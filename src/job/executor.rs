//! The local executor: runs a [`JobGraph`] as threads, with checkpoints into a directory and
//! restarts from the latest completed checkpoint.
//!
//! # One attempt
//!
//! 1. The first attempt starts where the [`Restore`] setting says (see `restore.rs`: a fresh
//!    start never restores by itself, and refuses an unfinished earlier run's state); a
//!    restart restores the newest completed checkpoint, or with
//!    [`JobConfig::fallback_to_older`] the newest intact one.
//! 2. Fresh channels are made for every edge.
//! 3. The checkpoint coordinator's driver starts (if checkpoints are on); every task reports to
//!    it, and its actions are carried out on the tasks: triggers on source tasks, completion
//!    and abort notices on all.
//! 4. Every task starts, restored from its part of the checkpoint.
//! 5. The executor watches the tasks. A finished task is reported to the coordinator (no
//!    checkpoint can complete once a task has finished). The first failed or cancelled task
//!    ends the attempt: every other task is cancelled and joined, the driver stopped.
//!
//! # The job
//!
//! Attempts repeat until one finishes or the [`RestartStrategy`] allows no more. After the last
//! task finished, the finalizers run (the file sinks commit their final transactions): only
//! then is the output of a successful run complete. Exactly-once means the committed output
//! after any number of failed attempts equals that of a run without failures.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::checkpoint::{
    CheckpointConfig, CheckpointCoordinator, CheckpointFailures, CheckpointStorage,
    CompletedCheckpoint, CoordinatorAction, CoordinatorDriver, SavepointFailure,
};
use crate::metrics::{AttemptScope, JobScope, MetricsRegistry};
use streamtask_core::metrics::{LatencyHistogram, MetricsSummary, TaskMetrics};
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_core::task::{CheckpointResponder, TaskConfig};
use streamtask_core::time::InterruptibleTimers;
use streamtask_core::trace::Tracer;
use streamtask_core::{task::TaskError, task::TaskOutcome, time::Clock};
use streamtask_legacy::Fairness;

use super::environment::JobGraph;
use super::error::{AttemptFailure, TaskFailed};
use super::from_source::enumerators_on_action;
use super::non_recoverable::restart_cannot_fix;
use super::restore::{Restore, write_marker};
use super::savepoint::StopWithSavepoint;
use super::spawn::SpawnCtx;
use super::stall::{StallCallback, StallProbe};
use super::wiring::Wiring;
use super::{DirLock, JobError, RunningTask};

/// How often a failed job is restarted, and after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartStrategy {
    /// Restarts allowed after the first attempt.
    pub attempts: u32,
    /// Wait before each restart.
    pub delay: Duration,
}

impl RestartStrategy {
    /// No restarts: the first failure fails the job.
    pub const NONE: RestartStrategy = RestartStrategy {
        attempts: 0,
        delay: Duration::ZERO,
    };

    /// Up to `attempts` restarts, `delay` apart.
    pub fn fixed_delay(attempts: u32, delay: Duration) -> Self {
        RestartStrategy { attempts, delay }
    }
}

/// Called with the number of records the sources have read so far, a few times a second.
pub type ProgressCallback = Arc<dyn Fn(u64) + Send + Sync>;

/// A moment of a checkpoint, reported to a [`PhaseCallback`] on the coordinator's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobPhase {
    /// Checkpoint `id` was triggered on the sources; its barriers are in flight.
    CheckpointTriggered {
        /// The checkpoint's id.
        id: u64,
    },
    /// Checkpoint `id` is stored (every sink pre-committed) and its completion notices, which
    /// commit the sinks, are about to go out.
    CheckpointCommitting {
        /// The checkpoint's id.
        id: u64,
    },
}

/// Called at each [`JobPhase`]; the coordinator waits while it runs (a test can stop the
/// process at an exact moment of the protocol).
pub type PhaseCallback = Arc<dyn Fn(JobPhase) + Send + Sync>;

/// How the executor runs a job.
#[derive(Clone)]
pub struct JobConfig {
    /// Checkpointing; `None` runs without checkpoints (a failure then restarts from scratch).
    pub checkpoint: Option<CheckpointConfig>,
    /// Where completed checkpoints are written.
    pub checkpoint_dir: PathBuf,
    /// Completed checkpoints kept.
    pub retained_checkpoints: usize,
    /// Restarts after failures.
    pub restart: RestartStrategy,
    /// Capacity of each channel between tasks, in elements.
    pub channel_capacity: usize,
    /// Processing time.
    pub clock: Clock,
    /// Spans of who ran what.
    pub tracer: Tracer,
    /// Fairness of the checkpoint locks (legacy and bridge models).
    pub fairness: Fairness,
    /// Progress reports.
    pub on_progress: Option<ProgressCallback>,
    /// Checkpoint phase reports.
    pub on_phase: Option<PhaseCallback>,
    /// Stalled-checkpoint reports (see [`with_stall_reports`](Self::with_stall_reports)).
    pub on_stall: Option<StallCallback>,
    /// Set to cancel the job from another thread.
    pub cancel: Arc<AtomicBool>,
    /// Where the first attempt starts (default: fresh).
    pub restore: Restore,
    /// Whether a damaged newest checkpoint may be skipped for an older one (default: no, a
    /// [`JobError::DamagedCheckpoint`]). The two-phase sinks then rewind the output committed
    /// after the restored checkpoint, so the committed output stays exactly-once.
    pub fallback_to_older: bool,
    /// Stop with a savepoint (see [`StopWithSavepoint`]); `None`: run to the end.
    pub stop_with_savepoint: Option<StopWithSavepoint>,
    /// Whether a savepoint's state for operators the job lacks may be dropped (default: no,
    /// a [`JobError::NonRestoredState`]), as Flink's `--allowNonRestoredState`.
    pub allow_non_restored_state: bool,
    /// How long a cancelled or failed attempt waits for each task to stop before it leaves a
    /// thread stuck in user code behind (default 30 s, as Flink's task cancellation timeout is
    /// a setting too).
    pub cancel_grace: Duration,
    /// Whether tasks fire many due event-time timers in chunks, letting checkpoints and other
    /// mails run in between (Flink's `execution.interruptible-timers.enabled`; default on,
    /// see [`InterruptibleTimers`]). The legacy model cannot and ignores it.
    pub interruptible_timers: InterruptibleTimers,
    /// Where the tasks' and the job's metrics are registered while it runs (default: nowhere;
    /// see [`MetricsRegistry`]).
    pub metrics: Option<MetricsRegistry>,
    /// The job's name, its `job` label in the [`metrics`](Self::metrics) (default `"job"`).
    pub job_name: String,
}

impl JobConfig {
    /// Checkpoints every 100 ms into `<work_dir>/checkpoints`, 3 retained, up to 3 restarts
    /// 10 ms apart, channels of 1024 elements, the system clock, no tracing, eventual fairness.
    pub fn new(work_dir: impl AsRef<Path>) -> Self {
        JobConfig {
            checkpoint: Some(CheckpointConfig::new(Duration::from_millis(100))),
            checkpoint_dir: work_dir.as_ref().join("checkpoints"),
            retained_checkpoints: 3,
            restart: RestartStrategy::fixed_delay(3, Duration::from_millis(10)),
            channel_capacity: 1024,
            clock: Clock::System,
            tracer: Tracer::off(),
            fairness: Fairness::default(),
            on_progress: None,
            on_phase: None,
            on_stall: None,
            cancel: Arc::new(AtomicBool::new(false)),
            restore: Restore::Fresh,
            fallback_to_older: false,
            stop_with_savepoint: None,
            allow_non_restored_state: false,
            cancel_grace: streamtask_core::task::DEFAULT_CANCEL_GRACE,
            interruptible_timers: InterruptibleTimers::default(),
            metrics: None,
            job_name: "job".to_string(),
        }
    }

    /// Registers every attempt's tasks, and the job's checkpoint counts and restarts, in
    /// `registry` while the job runs (see [`MetricsRegistry`]).
    pub fn with_metrics(mut self, registry: MetricsRegistry) -> Self {
        self.metrics = Some(registry);
        self
    }

    /// Names the job (its `job` label in the [metrics](Self::with_metrics)).
    pub fn with_job_name(mut self, name: impl Into<String>) -> Self {
        self.job_name = name.into();
        self
    }

    /// Sets how tasks fire many due event-time timers (see
    /// [`interruptible_timers`](Self::interruptible_timers)).
    pub fn with_interruptible_timers(mut self, timers: InterruptibleTimers) -> Self {
        self.interruptible_timers = timers;
        self
    }

    /// Sets how long a stopping attempt waits for each task (see
    /// [`cancel_grace`](Self::cancel_grace)).
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Sets where the first attempt starts.
    pub fn with_restore(mut self, restore: Restore) -> Self {
        self.restore = restore;
        self
    }

    /// Stops the run with a savepoint as `stop` says (its handle, or a checkpoint count).
    pub fn with_stop_with_savepoint(mut self, stop: StopWithSavepoint) -> Self {
        self.stop_with_savepoint = Some(stop);
        self
    }

    /// Allows (or forbids) dropping a savepoint's state for operators the job lacks.
    pub fn with_allow_non_restored_state(mut self, allow: bool) -> Self {
        self.allow_non_restored_state = allow;
        self
    }

    /// Allows (or forbids) falling back past a damaged newest checkpoint.
    pub fn with_fallback_to_older(mut self, fallback: bool) -> Self {
        self.fallback_to_older = fallback;
        self
    }

    /// Checks, before anything is built or generated, that the restore setting fits what an
    /// earlier run left in the checkpoint directory; [`JobGraph::run`] checks it again.
    ///
    /// # Errors
    ///
    /// [`JobError::UnfinishedRun`] for a fresh start over an unfinished run,
    /// [`JobError::NothingToResume`] for a resume of a finished run, [`JobError::Storage`] if
    /// the directory cannot be read; for [`Restore::Savepoint`], the savepoint is read:
    /// [`JobError::DamagedSavepoint`], or [`JobError::Storage`] if it is not one.
    pub fn check_restore(&self) -> Result<(), JobError> {
        super::restore::check(
            &self.restore,
            &self.checkpoint_dir,
            self.retained_checkpoints,
        )
    }

    /// Cancels the job when `flag` is set (from a signal handler, another thread).
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = flag;
        self
    }

    /// Sets the checkpoint configuration (`None`: no checkpoints).
    pub fn with_checkpoints(mut self, checkpoint: Option<CheckpointConfig>) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    /// Sets the restart strategy.
    pub fn with_restart(mut self, restart: RestartStrategy) -> Self {
        self.restart = restart;
        self
    }

    /// Sets the channel capacity.
    pub fn with_channel_capacity(mut self, capacity: usize) -> Self {
        self.channel_capacity = capacity;
        self
    }

    /// Sets the tracer.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// Sets the checkpoint lock's fairness.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Reports checkpoint phases through `callback`.
    pub fn with_phases(mut self, callback: PhaseCallback) -> Self {
        self.on_phase = Some(callback);
        self
    }

    /// Hands every [`StallReport`](crate::StallReport) to `callback`: a checkpoint pending for longer than
    /// [`CheckpointConfig::stall_report_after`] (and again every such period while it stays
    /// pending), with where each missing task's barrier is and what its threads do. Without a
    /// callback the report is logged as a warning.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    /// use streamtask::StallReport;
    ///
    /// let seen: Arc<Mutex<Vec<StallReport>>> = Arc::default();
    /// let sink = Arc::clone(&seen);
    /// let dir = tempfile::tempdir().unwrap();
    /// let config = JobConfig::new(dir.path())
    ///     .with_checkpoints(Some(
    ///         CheckpointConfig::new(Duration::from_millis(50))
    ///             .with_stall_report_after(Duration::from_millis(500)),
    ///     ))
    ///     .with_stall_reports(Arc::new(move |report: &StallReport| {
    ///         sink.lock().unwrap().push(report.clone());
    ///     }));
    /// assert!(config.on_stall.is_some());
    /// ```
    pub fn with_stall_reports(mut self, callback: StallCallback) -> Self {
        self.on_stall = Some(callback);
        self
    }

    /// Reports progress through `callback`.
    pub fn with_progress(mut self, callback: ProgressCallback) -> Self {
        self.on_progress = Some(callback);
        self
    }
}

impl std::fmt::Debug for JobConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobConfig")
            .field("checkpoint", &self.checkpoint)
            .field("checkpoint_dir", &self.checkpoint_dir)
            .field("restart", &self.restart)
            .field("channel_capacity", &self.channel_capacity)
            .field("fairness", &self.fairness)
            .field("restore", &self.restore)
            .field("fallback_to_older", &self.fallback_to_older)
            .field("stop_with_savepoint", &self.stop_with_savepoint)
            .field("allow_non_restored_state", &self.allow_non_restored_state)
            .field("job_name", &self.job_name)
            .finish_non_exhaustive()
    }
}

/// One task of the final attempt.
#[derive(Debug, Clone)]
pub struct TaskResult {
    /// `<vertex>#<subtask>`.
    pub name: String,
    /// How it ended.
    pub outcome: String,
    /// Its metrics.
    pub metrics: MetricsSummary,
}

/// Latency distributions merged over every task of every attempt.
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Checkpoint start delay of the source tasks.
    pub checkpoint_delay: LatencyHistogram,
    /// Timer lateness, all tasks.
    pub timer_lateness: LatencyHistogram,
    /// Checkpoint-lock wait, all tasks.
    pub lock_wait: LatencyHistogram,
    /// Mailbox latency, all tasks.
    pub mailbox_latency: LatencyHistogram,
    /// Time the tasks spent waiting for input, summed over every task of every attempt.
    pub idle: Duration,
    /// Time the tasks spent blocked on a full output or a chain that took no input, summed.
    pub backpressured: Duration,
    /// Threads the tasks of the final attempt started.
    pub threads: u64,
    /// Records the sources read, final attempt.
    pub source_records: u64,
}

/// What a finished job reports.
#[derive(Debug)]
pub struct JobResult {
    /// Restarts it took.
    pub restarts: u32,
    /// The first failure of each failed attempt (the task and operator that failed and why, or
    /// the checkpoints that failed), oldest first.
    pub failures: Vec<AttemptFailure>,
    /// Wall time of the whole run, restarts included.
    pub elapsed: Duration,
    /// Tasks of the final attempt.
    pub tasks: Vec<TaskResult>,
    /// Merged latencies.
    pub metrics: JobMetrics,
    /// Checkpoints completed, all attempts.
    pub checkpoints_completed: u64,
    /// Checkpoints aborted, all attempts.
    pub checkpoints_aborted: u64,
    /// Throughput over time: (seconds since start, source records per second).
    pub throughput_series: Vec<(f64, f64)>,
    /// Each checkpoint's start delay on a source task: (seconds since start, microseconds).
    pub checkpoint_series: Vec<(f64, u64)>,
    /// The checkpoint the first attempt restored (a resume), if any.
    pub restored_from: Option<u64>,
    /// The savepoint the run stopped with ([`JobConfig::with_stop_with_savepoint`]); `None`
    /// if the job ran to its end (it finished before the savepoint was due or completed).
    pub savepoint: Option<PathBuf>,
}

const POLL: Duration = Duration::from_millis(2);
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

struct AttemptEnd {
    failure: Option<AttemptFailure>,
    /// Tasks that ignored cancellation (each left its stuck thread behind).
    left_behind: Vec<TaskFailed>,
    /// Whether the failure is one no restart can fix (see `non_recoverable.rs`).
    non_recoverable: bool,
    /// The savepoint this attempt stopped with.
    savepoint: Option<PathBuf>,
    /// The stop-with-savepoint that failed and ended this attempt.
    savepoint_failure: Option<SavepointFailure>,
    last_checkpoint_id: u64,
    completed: u64,
    aborted: u64,
    /// Each task's name, how it ended, its metrics.
    tasks: Vec<(String, String, Arc<TaskMetrics>)>,
}

impl JobGraph {
    /// Runs the job to the end, restarting after failures.
    ///
    /// # Errors
    ///
    /// [`JobError::Failed`] when no restart is left, [`JobError::NonRecoverable`] at once for a
    /// failure no restart can fix (see [`NonRecoverable`](crate::NonRecoverable)),
    /// [`JobError::Cancelled`] when `config.cancel` was set, [`JobError::SavepointFailed`] when a
    /// stop-with-savepoint's savepoint failed ([`JobError::SavepointDirectory`] before anything
    /// runs if its directory is unusable); before anything runs, [`JobError::UnfinishedRun`],
    /// [`JobError::NothingToResume`], [`JobError::DamagedCheckpoint`] and
    /// [`JobError::ShapeMismatch`] from the restore setting; [`JobError::Lock`] if another run
    /// holds the checkpoint directory or a sink's output directory; and configuration, storage
    /// or sink errors.
    pub fn run(&self, config: &JobConfig) -> Result<JobResult, JobError> {
        if config.channel_capacity == 0 {
            return Err(streamtask_runtime::channel::ChannelError::ZeroCapacity.into());
        }
        if let Some(cp) = &config.checkpoint {
            cp.validate()?;
            if self.has_iteration && cp.alignment != streamtask_core::Alignment::Aligned {
                return Err(JobError::Config(
                    "unaligned checkpoints do not cover an iteration's feedback edge (Flink \
                     does not offer them there either); keep this job's checkpoints aligned"
                        .into(),
                ));
            }
        }
        if config.stop_with_savepoint.is_some() {
            if config.checkpoint.is_none() {
                return Err(JobError::Config(
                    "stop-with-savepoint needs checkpoints; set a checkpoint configuration".into(),
                ));
            }
            // Fail before anything runs if the savepoint could not name its operators or
            // could not be written.
            self.shape()?;
            if let Some(stop) = &config.stop_with_savepoint {
                stop.check_dir()?;
            }
        }
        // Before anything in them is read or written; held until the run returns.
        let _locks = self.lock_dirs(&config.checkpoint_dir)?;
        let storage =
            CheckpointStorage::directory(&config.checkpoint_dir, config.retained_checkpoints)?;
        let mut restored = self.first_restore(
            &config.restore,
            config.fallback_to_older,
            config.allow_non_restored_state,
            &storage,
            &config.checkpoint_dir,
        )?;
        // A restore from elsewhere is the fallback of every restart until this run completes a
        // checkpoint of its own.
        let initial = restored.clone();
        let initial_path = match &config.restore {
            Restore::From(path) | Restore::Savepoint(path) => Some(path.clone()),
            _ => restored
                .as_ref()
                .and_then(|c| storage.checkpoint_path(c.id)),
        };
        let restored_from = restored.as_ref().map(|c| c.id);
        write_marker(&config.checkpoint_dir, false)?;
        let start = Instant::now();
        let mut sampler = Sampler::new(start);
        let mut restarts = 0;
        let mut failures = Vec::new();
        // New checkpoints get ids after every stored one and after the restored one.
        let mut last_id = storage
            .completed_ids()?
            .last()
            .copied()
            .unwrap_or(0)
            .max(restored.as_ref().map_or(0, |c| c.id));
        let mut completed = 0;
        let mut aborted = 0;
        let mut metrics = JobMetrics::default();
        let registered = config
            .metrics
            .as_ref()
            .map(|registry| registry.start_job(&config.job_name, self.model));
        loop {
            let end = self.run_attempt(
                config,
                &storage,
                restored.take(),
                (last_id, completed),
                &mut sampler,
                registered.as_ref(),
            )?;
            last_id = end.last_checkpoint_id;
            completed += end.completed;
            aborted += end.aborted;
            for (name, _, m) in &end.tasks {
                if self.is_source_task(name) {
                    metrics
                        .checkpoint_delay
                        .merge(m.checkpoint_delay.histogram());
                    sampler.checkpoints.extend(
                        m.checkpoint_delay.samples().into_iter().map(|(at, us)| {
                            (at.saturating_duration_since(start).as_secs_f64(), us)
                        }),
                    );
                }
                metrics.timer_lateness.merge(&m.timer_lateness);
                metrics.lock_wait.merge(&m.lock_wait);
                metrics.idle += Duration::from_micros(m.idle_micros.get());
                metrics.backpressured += Duration::from_micros(m.backpressured_micros.get());
                metrics.mailbox_latency.merge(&m.mailbox_latency);
            }
            if config.cancel.load(Ordering::Acquire) {
                return Err(JobError::Cancelled {
                    left_behind: end.left_behind,
                });
            }
            if let Some(failure) = end.savepoint_failure {
                // The stop failed; a restart would not make it succeed (Flink fails the stop,
                // not the job, and leaves the caller to decide).
                return Err(JobError::SavepointFailed { failure });
            }
            match end.failure {
                None => {
                    for finalize in &self.finalizers {
                        finalize()?;
                    }
                    // Only now is the output complete: nothing is left to resume.
                    write_marker(&config.checkpoint_dir, true)?;
                    let mut metrics = metrics;
                    metrics.threads = end.tasks.iter().map(|(_, _, m)| m.threads.get()).sum();
                    metrics.source_records = end
                        .tasks
                        .iter()
                        .filter(|(n, _, _)| self.is_source_task(n))
                        .map(|(_, _, m)| m.records_in.get())
                        .sum();
                    sampler.checkpoints.sort_by(|a, b| a.0.total_cmp(&b.0));
                    return Ok(JobResult {
                        restarts,
                        failures,
                        elapsed: start.elapsed(),
                        tasks: end
                            .tasks
                            .into_iter()
                            .map(|(name, outcome, m)| TaskResult {
                                name,
                                outcome,
                                metrics: m.summary(),
                            })
                            .collect(),
                        metrics,
                        checkpoints_completed: completed,
                        checkpoints_aborted: aborted,
                        throughput_series: sampler.throughput,
                        checkpoint_series: sampler.checkpoints,
                        restored_from,
                        savepoint: end.savepoint,
                    });
                }
                Some(failure) => {
                    // A fault injected on purpose is what the run asked for: below warnings,
                    // so a soak's thousands of them do not bury the progress and real errors.
                    let text = failure.to_string();
                    if crate::fault::is_injected(&text) {
                        log::info!("attempt {} failed: {text}", restarts + 1);
                    } else {
                        log::warn!("attempt {} failed: {text}", restarts + 1);
                    }
                    failures.push(failure.clone());
                    if end.non_recoverable {
                        return Err(JobError::NonRecoverable {
                            attempts: restarts + 1,
                            last: failure,
                        });
                    }
                    if restarts >= config.restart.attempts {
                        return Err(JobError::Failed {
                            attempts: restarts + 1,
                            last: failure,
                        });
                    }
                    restarts += 1;
                    std::thread::sleep(config.restart.delay);
                    let (checkpoint, from) =
                        match self.restore_point(config.fallback_to_older, &storage)? {
                            Some(c) => {
                                let path = storage.checkpoint_path(c.id);
                                (Some(c), path)
                            }
                            None => (initial.clone(), initial_path.clone()),
                        };
                    restored = checkpoint;
                    match &restored {
                        Some(c) => log::info!(
                            "attempt {} restores checkpoint {} from {}",
                            restarts + 1,
                            c.id,
                            from.unwrap_or_else(|| config.checkpoint_dir.clone())
                                .display()
                        ),
                        None => log::info!(
                            "attempt {} starts from the beginning (no checkpoint completed)",
                            restarts + 1
                        ),
                    }
                }
            }
        }
    }

    /// Locks the checkpoint directory and every sink's output directory for this run: one
    /// run at a time per directory (see [`DirLock`]).
    fn lock_dirs(&self, checkpoint_dir: &Path) -> Result<Vec<DirLock>, JobError> {
        let mut dirs: Vec<&Path> = vec![checkpoint_dir];
        for dir in &self.sink_dirs {
            if !dirs.contains(&dir.as_path()) {
                dirs.push(dir);
            }
        }
        Ok(dirs
            .into_iter()
            .map(DirLock::acquire)
            .collect::<Result<_, _>>()?)
    }

    /// For the stall reports: each task's name, runtime and the upstream task of each of its
    /// gate's channels (see [`EdgeSpec::upstream_of`](super::builder::EdgeSpec::upstream_of)).
    fn stall_targets(
        &self,
        names: &[(usize, usize, String)],
    ) -> Vec<(String, &'static str, Vec<String>)> {
        names
            .iter()
            .map(|(vi, subtask, name)| {
                let vertex = &self.vertices[*vi];
                let upstream = self
                    .edges
                    .iter()
                    .filter(|e| e.to == vertex.name)
                    .flat_map(|e| e.upstream_of(*subtask))
                    .collect();
                (name.clone(), vertex.plan.runtime, upstream)
            })
            .collect()
    }

    fn is_source_task(&self, task: &str) -> bool {
        let vertex = task.rsplit_once('#').map_or(task, |(v, _)| v);
        self.vertices
            .iter()
            .any(|v| v.is_source && v.name == vertex)
    }

    pub(crate) fn task_names(&self) -> Vec<(usize, usize, String)> {
        self.vertices
            .iter()
            .enumerate()
            .flat_map(|(vi, v)| (0..v.parallelism).map(move |s| (vi, s, format!("{}#{s}", v.name))))
            .collect()
    }

    fn run_attempt(
        &self,
        config: &JobConfig,
        storage: &CheckpointStorage,
        restored: Option<CompletedCheckpoint>,
        (last_id, completed_before): (u64, u64),
        sampler: &mut Sampler,
        registered: Option<&JobScope>,
    ) -> Result<AttemptEnd, JobError> {
        let names = self.task_names();
        let sources: Vec<String> = names
            .iter()
            .filter(|(vi, _, _)| self.vertices[*vi].is_source)
            .map(|(_, _, n)| n.clone())
            .collect();
        let edges = self
            .edges
            .iter()
            .map(|e| (e.create)(e.pattern, e.up, e.down, config.channel_capacity))
            .collect::<Result<Vec<_>, _>>()?;
        let wiring = Wiring::new(edges);
        let releases = wiring.take_releases();

        let handles: Arc<Mutex<Vec<Option<RunningTask>>>> = Arc::new(Mutex::new(Vec::new()));
        // The driver exists before the tasks (their responders come from it), but a trigger
        // carried out while they are being spawned would miss the sources not started yet, and
        // the checkpoint would wait for their acknowledgements until it expired, holding every
        // later one back: triggers wait until every task of the attempt was spawned (or the
        // attempt gave up spawning).
        let spawned = Arc::new(SpawnedLatch::default());
        // Set by the coordinator's thread when too many checkpoints failed in a row.
        let checkpoints_failed: Arc<Mutex<Option<CheckpointFailures>>> = Arc::default();
        let savepoint = super::savepoint::AttemptSavepoint::new(self, config)?;
        // FLIP-27 enumerators: restored before any task starts, snapshotted at trigger time.
        self.start_enumerators(restored.as_ref())?;
        let enumerators = self.enumerator_hooks();
        let driver = match &config.checkpoint {
            Some(cp) => {
                let coordinator = CheckpointCoordinator::new(
                    *cp,
                    storage.clone(),
                    names.iter().map(|(_, _, n)| n.clone()),
                    sources.iter().cloned(),
                    config.clock.now_millis(),
                )?
                .with_ids_after(last_id)
                .with_source_identities(self.source_identity_tasks());
                let coordinator = match &savepoint {
                    Some(sp) => coordinator
                        .with_savepoint_writer(sp.writer())
                        .with_savepoint_drain(sp.drains()),
                    None => coordinator,
                };
                let savepoint = savepoint.clone();
                let on_tasks = Arc::clone(&handles);
                let source_set = sources.clone();
                let on_phase = config.on_phase.clone();
                let spawned = Arc::clone(&spawned);
                let failed = Arc::clone(&checkpoints_failed);
                let probe = StallProbe {
                    model: self.model.name(),
                    tasks: self.stall_targets(&names),
                    running: Arc::clone(&handles),
                };
                let on_stall = config.on_stall.clone();
                Some(CoordinatorDriver::spawn_with_stalls(
                    coordinator,
                    config.clock.clone(),
                    move |action| {
                        if matches!(action, CoordinatorAction::Trigger(_)) {
                            spawned.wait();
                        }
                        enumerators_on_action(&enumerators, action);
                        if let CoordinatorAction::FailJob(failures) = action {
                            failed.lock().get_or_insert_with(|| failures.clone());
                        }
                        if let Some(sp) = &savepoint {
                            sp.on_action(action);
                        }
                        if let (Some(report), CoordinatorAction::Complete { id }) =
                            (&on_phase, action)
                        {
                            report(JobPhase::CheckpointCommitting { id: *id });
                        }
                        carry_out(action, &on_tasks, &source_set);
                        if let (Some(sp), CoordinatorAction::Complete { id }) = (&savepoint, action)
                        {
                            sp.completed(*id);
                        }
                        if let (Some(report), CoordinatorAction::Trigger(barrier)) =
                            (&on_phase, action)
                        {
                            report(JobPhase::CheckpointTriggered { id: barrier.id });
                        }
                    },
                    move |stalled| {
                        let report = probe.report(stalled);
                        match &on_stall {
                            Some(callback) => callback(&report),
                            None => log::warn!("{report}"),
                        }
                    },
                ))
            }
            None => None,
        };

        let registered: Option<AttemptScope> = registered
            .map(|job| job.start_attempt(driver.as_ref().map(CoordinatorDriver::stats), storage));
        let mut task_metrics = Vec::with_capacity(names.len());
        for (vi, subtask, name) in &names {
            let responder = match &driver {
                Some(d) => d.responder(name.clone()),
                None => CheckpointResponder::discard(name.clone()),
            };
            let metrics = Arc::new(TaskMetrics::new(name.clone()));
            task_metrics.push(Arc::clone(&metrics));
            if let Some(attempt) = &registered {
                attempt.register_task(&self.vertices[*vi].name, *subtask, Arc::clone(&metrics));
            }
            let task_config = TaskConfig::new(name.clone())
                .with_clock(config.clock.clone())
                .with_responder(responder)
                .with_restore(restored.as_ref().and_then(|c| c.task(name).cloned()))
                .with_metrics(Arc::clone(&metrics))
                .with_tracer(config.tracer.clone())
                .with_cancel_grace(config.cancel_grace)
                .with_interruptible_timers(config.interruptible_timers);
            let ctx = SpawnCtx {
                model: self.model,
                subtask: *subtask,
                wiring: &wiring,
                fairness: config.fairness,
                codecs: &self.codecs,
                alignment: config
                    .checkpoint
                    .as_ref()
                    .map_or(streamtask_core::Alignment::Aligned, |c| c.alignment),
                metrics,
            };
            match (self.vertices[*vi].spawn)(&ctx, task_config) {
                Ok(task) => handles.lock().push(Some(task)),
                Err(e) => {
                    // Tear down what started, then report the build problem (not restartable).
                    spawned.open();
                    let started: Vec<RunningTask> = handles.lock().drain(..).flatten().collect();
                    started.iter().for_each(RunningTask::cancel);
                    started.into_iter().for_each(|t| drop(t.join()));
                    self.end_enumerators();
                    if let Some(d) = driver {
                        let _ = d.stop();
                    }
                    return Err(e);
                }
            }
        }
        drop(wiring);
        spawned.open();

        let source_metrics: Vec<Arc<TaskMetrics>> = names
            .iter()
            .zip(&task_metrics)
            .filter(|((vi, _, _), _)| self.vertices[*vi].is_source)
            .map(|(_, m)| Arc::clone(m))
            .collect();
        let mut outcomes: Vec<Option<TaskOutcome>> = names.iter().map(|_| None).collect();
        // The operator each task ran last, read once it ended or was given up on.
        let mut ran: Vec<Option<String>> = names.iter().map(|_| None).collect();
        let mut cancelled_by_us = vec![false; names.len()];
        let mut stopping = false;
        let mut suspended = false;
        loop {
            std::thread::sleep(POLL);
            self.discover_splits();
            sampler.sample(&source_metrics, config.on_progress.as_ref());
            let done: Vec<(usize, RunningTask)> = {
                let mut tasks = handles.lock();
                let finished: Vec<usize> = (0..tasks.len())
                    .filter(|&i| tasks[i].as_ref().is_some_and(RunningTask::is_done))
                    .collect();
                finished
                    .into_iter()
                    .filter_map(|i| tasks[i].take().map(|t| (i, t)))
                    .collect()
            };
            for (i, task) in done {
                let running = task.running_operator();
                let outcome = task.join();
                ran[i] = running.name();
                if let Some(attempt) = &registered {
                    attempt.task_ended(i);
                }
                match &outcome {
                    TaskOutcome::Finished => {
                        if let Some(d) = &driver {
                            d.task_finished(names[i].2.clone());
                        }
                    }
                    TaskOutcome::Failed(_) | TaskOutcome::Cancelled => stopping = true,
                }
                outcomes[i] = Some(outcome);
            }
            if config.cancel.load(Ordering::Acquire) || checkpoints_failed.lock().is_some() {
                stopping = true;
            }
            if let (Some(sp), Some(d)) = (&savepoint, &driver) {
                if sp.trigger_if_due(completed_before + d.stats().summary().completed) {
                    d.trigger_savepoint();
                }
                // Stop-with-savepoint, step 4: the savepoint is durable and its notices are out;
                // every task took its barrier and ends by itself on the notice (suspended).
                suspended |= sp.is_complete();
                // A failed savepoint fails the stop: the attempt ends (tasks that took its
                // barrier resumed on its abort notice, and are cancelled like the rest).
                if !suspended && sp.failure().is_some() {
                    stopping = true;
                }
            }
            if stopping || suspended {
                // Stop the rest: cancel everything first, then join (a task blocked on a full
                // channel needs its neighbours gone to notice). Suspended tasks are only
                // joined: cancelling one before its notice ran would skip its commit.
                let rest: Vec<(usize, RunningTask)> = {
                    let mut tasks = handles.lock();
                    (0..tasks.len())
                        .filter_map(|i| tasks[i].take().map(|t| (i, t)))
                        .collect()
                };
                if stopping {
                    rest.iter().for_each(|(_, t)| t.cancel());
                    // Then release every channel: a cancelled task blocked sending to a task
                    // stuck in user code ends too (its output fails, which a cancelled task
                    // does not report).
                    releases.iter().for_each(|release| release());
                }
                for (i, task) in rest {
                    cancelled_by_us[i] = stopping;
                    let running = task.running_operator();
                    outcomes[i] = Some(task.join());
                    ran[i] = running.name();
                    if let Some(attempt) = &registered {
                        attempt.task_ended(i);
                    }
                }
                break;
            }
            if outcomes.iter().all(Option::is_some) {
                break;
            }
        }
        let outcomes = outcomes_of(&names, outcomes, &ran);
        let taken = savepoint.as_ref().and_then(|sp| sp.path());
        let savepoint_failure = match taken {
            Some(_) => None,
            None => savepoint.as_ref().and_then(|sp| sp.failure()),
        };
        let cancelled = config.cancel.load(Ordering::Acquire);
        let left_behind = if cancelled {
            outcomes
                .iter()
                .filter(|o| {
                    o.failed.as_ref().is_some_and(|f| {
                        matches!(f.error(), Some(TaskError::CancellationIgnored { .. }))
                    })
                })
                .filter_map(|o| o.failed.clone())
                .collect()
        } else {
            Vec::new()
        };
        let mut non_recoverable = false;
        let failure = if cancelled {
            None
        } else if taken.is_some() || savepoint_failure.is_some() {
            // Whatever failed while the tasks were being stopped happened after the savepoint,
            // or is the cancel that ended the failed stop.
            None
        } else {
            let cause = first_cause(&outcomes, &cancelled_by_us).map(|(cause, cannot_fix)| {
                non_recoverable = cannot_fix;
                cause
            });
            match checkpoints_failed.lock().take() {
                // A task that failed by itself (its snapshot, say) is the cause; one left
                // behind when the attempt was stopped for the failed checkpoints (a task stuck
                // in user code: what held them back) is not.
                Some(failures)
                    if cause.as_ref().is_none_or(|c| {
                        c.error().is_none_or(|e| {
                            e.is_consequence() || matches!(e, TaskError::CancellationIgnored { .. })
                        })
                    }) =>
                {
                    Some(AttemptFailure::Checkpoints(failures))
                }
                _ => cause.map(AttemptFailure::Task),
            }
        };
        sampler.sample_final(&source_metrics, config.on_progress.as_ref());
        // A trigger waiting for readers that never started gives up before the driver stops.
        self.end_enumerators();

        let (last_checkpoint_id, completed, aborted) = match driver {
            Some(d) => {
                // Read the counts after the coordinator stopped: a checkpoint it was completing
                // when the tasks ended still counts.
                let stats = d.stats();
                let coordinator = d.stop().map_err(|e| JobError::Config(e.to_string()))?;
                let stats = stats.summary();
                (coordinator.last_id(), stats.completed, stats.aborted)
            }
            None => (last_id, 0, 0),
        };
        Ok(AttemptEnd {
            failure,
            left_behind,
            non_recoverable,
            savepoint: taken,
            savepoint_failure,
            last_checkpoint_id,
            completed,
            aborted,
            tasks: names
                .into_iter()
                .zip(outcomes)
                .zip(task_metrics)
                .map(|(((_, _, name), outcome), m)| (name, outcome.text, m))
                .collect(),
        })
    }
}

/// How one task of an attempt ended, in the job's terms.
struct Ended {
    /// The task.
    task: String,
    /// The outcome, as `TaskResult` shows it.
    text: String,
    /// Whether it ended cancelled.
    cancelled: bool,
    /// Its failure, naming the operator where one ran user code.
    failed: Option<TaskFailed>,
}

/// The attempt's outcomes as the job reports them; `ran` is the operator each task ran last.
fn outcomes_of(
    names: &[(usize, usize, String)],
    outcomes: Vec<Option<TaskOutcome>>,
    ran: &[Option<String>],
) -> Vec<Ended> {
    outcomes
        .into_iter()
        .enumerate()
        .map(|(i, outcome)| {
            let outcome = outcome.unwrap_or(TaskOutcome::Cancelled);
            let text = outcome.to_string();
            let cancelled = matches!(outcome, TaskOutcome::Cancelled);
            let failed = match outcome {
                TaskOutcome::Failed(failure) => {
                    // Only a failure in user code of the chain is an operator's; the operator
                    // index says nothing about the task's own source or runtime.
                    let in_operator = matches!(
                        failure.error,
                        TaskError::Operator(_)
                            | TaskError::Panic(_)
                            | TaskError::CancellationIgnored { .. }
                            | TaskError::Checkpoint { .. }
                    );
                    Some(TaskFailed {
                        task: names[i].2.clone(),
                        operator: ran[i].clone().filter(|_| in_operator),
                        failure: Some(Arc::new(failure)),
                    })
                }
                _ => None,
            };
            Ended {
                task: names[i].2.clone(),
                text,
                cancelled,
                failed,
            }
        })
        .collect()
}

/// The failure that ended an attempt, and whether no restart can fix it. Once one task fails,
/// its neighbours fail too (their channels close under them) and the rest are cancelled; which
/// of them the executor saw first is a race. So the cause is chosen after every task was
/// joined: the first failure no restart can fix (restarting is pointless if any task has one),
/// else the first that is not a consequence of another, else the first consequence, else an
/// unexpected cancel.
fn first_cause(outcomes: &[Ended], cancelled_by_us: &[bool]) -> Option<(TaskFailed, bool)> {
    let failed = || outcomes.iter().filter_map(|o| o.failed.as_ref());
    let cannot_fix = |f: &&TaskFailed| f.failure.as_deref().is_some_and(|f| restart_cannot_fix(f));
    if let Some(f) = failed().find(cannot_fix) {
        return Some((f.clone(), true));
    }
    let is_consequence = |f: &&TaskFailed| f.error().is_some_and(TaskError::is_consequence);
    if let Some(f) = failed().find(|f| !is_consequence(f)) {
        return Some((f.clone(), false));
    }
    if let Some(f) = failed().next() {
        return Some((f.clone(), false));
    }
    outcomes
        .iter()
        .enumerate()
        .find(|(i, o)| o.cancelled && !cancelled_by_us[*i])
        .map(|(i, _)| {
            let cancelled = TaskFailed {
                task: outcomes[i].task.clone(),
                operator: None,
                failure: None,
            };
            (cancelled, false)
        })
}

/// Opened once every task of an attempt was spawned; the coordinator's triggers wait for it.
#[derive(Debug, Default)]
struct SpawnedLatch {
    open: Mutex<bool>,
    opened: Condvar,
}

impl SpawnedLatch {
    fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
    }
}

fn carry_out(
    action: &CoordinatorAction,
    tasks: &Mutex<Vec<Option<RunningTask>>>,
    sources: &[String],
) {
    let tasks = tasks.lock();
    let running = tasks.iter().flatten();
    match action {
        CoordinatorAction::Trigger(barrier) => {
            for task in running.filter(|t| sources.iter().any(|s| s == t.name())) {
                if let Err(e) = task.trigger_checkpoint(*barrier) {
                    // A follow-on of the task's own failure, which the attempt reports once.
                    log::debug!("{}: {e}", task.name());
                }
            }
        }
        CoordinatorAction::Complete { id } => {
            running.for_each(|t| t.notify_checkpoint_complete(*id));
        }
        CoordinatorAction::Abort { id, .. } => {
            running.for_each(|t| t.notify_checkpoint_aborted(*id));
        }
        // The executor's loop fails the attempt.
        CoordinatorAction::FailJob(_) => {}
    }
}

/// Samples source throughput for the progress bar and the plot.
struct Sampler {
    start: Instant,
    last_at: Instant,
    last_records: u64,
    base_records: u64,
    throughput: Vec<(f64, f64)>,
    checkpoints: Vec<(f64, u64)>,
}

impl Sampler {
    fn new(start: Instant) -> Self {
        Sampler {
            start,
            last_at: start,
            last_records: 0,
            base_records: 0,
            throughput: Vec::new(),
            checkpoints: Vec::new(),
        }
    }

    fn sample(&mut self, sources: &[Arc<TaskMetrics>], progress: Option<&ProgressCallback>) {
        if self.last_at.elapsed() >= SAMPLE_EVERY {
            self.sample_now(sources, progress);
        }
    }

    /// The sample at the end of an attempt: progress always, a throughput point only for a
    /// bucket at least half as long as the others (a short last bucket would plot as a false
    /// drop).
    fn sample_final(&mut self, sources: &[Arc<TaskMetrics>], progress: Option<&ProgressCallback>) {
        if self.last_at.elapsed() >= SAMPLE_EVERY / 2 {
            self.sample_now(sources, progress);
        } else if let Some(progress) = progress {
            let records: u64 = sources.iter().map(|m| m.records_in.get()).sum::<u64>();
            let base = if records < self.last_records {
                self.base_records + self.last_records
            } else {
                self.base_records
            };
            progress(base + records);
        }
    }

    fn sample_now(&mut self, sources: &[Arc<TaskMetrics>], progress: Option<&ProgressCallback>) {
        let now = Instant::now();
        let records: u64 = sources.iter().map(|m| m.records_in.get()).sum::<u64>();
        // A restarted attempt counts from zero again; keep the series monotonic per attempt.
        if records < self.last_records {
            self.base_records += self.last_records;
            self.last_records = 0;
        }
        let secs = now.duration_since(self.last_at).as_secs_f64();
        if secs > 0.0 {
            let rate = (records - self.last_records) as f64 / secs;
            self.throughput
                .push((now.duration_since(self.start).as_secs_f64(), rate));
        }
        self.last_at = now;
        self.last_records = records;
        if let Some(progress) = progress {
            progress(self.base_records + records);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_last_bucket_plots_no_false_drop() {
        // The end-of-attempt sample may cover a few milliseconds with no new records; it must
        // not plot as a drop to 0 records/s.
        let start = Instant::now() - Duration::from_secs(1);
        let mut sampler = Sampler::new(start);
        sampler.last_at = start;
        let source = Arc::new(TaskMetrics::new("orders#0"));
        source.records_in.add(1_000);
        sampler.sample_now(std::slice::from_ref(&source), None);
        assert_eq!(sampler.throughput.len(), 1);
        // Immediately after: a bucket far shorter than SAMPLE_EVERY.
        sampler.sample_final(std::slice::from_ref(&source), None);
        assert_eq!(sampler.throughput.len(), 1, "no point for a partial bucket");
        assert!(sampler.throughput.iter().all(|&(_, rate)| rate > 0.0));
    }

    #[test]
    fn the_final_sample_still_reports_progress() {
        let mut sampler = Sampler::new(Instant::now());
        let source = Arc::new(TaskMetrics::new("orders#0"));
        source.records_in.add(7);
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let report = Arc::clone(&seen);
        let progress: ProgressCallback = Arc::new(move |n| report.store(n, Ordering::SeqCst));
        sampler.sample_final(std::slice::from_ref(&source), Some(&progress));
        assert_eq!(seen.load(Ordering::SeqCst), 7);
    }
}
