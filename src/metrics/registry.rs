//! The registry: which jobs and tasks there are, their newest rate samples, and the families
//! the renderer writes.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use streamtask_core::metrics::{LatencySummary, MetricsSummary, TaskMetrics};
use streamtask_core::sync::Mutex;
// The coordinator shares its statistics through the sync facade's `Arc` (loom's under
// `cfg(loom)`); the tasks' metrics and the registry itself through std's.
use streamtask_core::sync::Arc as StatsArc;

use super::exposition::{Exposition, Kind, Label};
use crate::Model;
use crate::checkpoint::{CheckpointStats, CheckpointStorage, CheckpointTiming};

/// The shortest interval a `*_per_second` gauge is computed over (see the module docs).
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Renders closer together than this share one kept sample.
const SAMPLE_SPACING: Duration = Duration::from_millis(100);

/// Where the metrics of running jobs are registered and read.
///
/// Give a clone to [`JobConfig::with_metrics`](crate::JobConfig::with_metrics): every attempt
/// of the job registers its tasks' metrics here (labels `job`, `task`, `subtask`, `model`,
/// `attempt`), beside the job's checkpoint counts and restarts (labels `job`, `model`). Any
/// thread may [`render`](Self::render) while the job runs, and after it ended (a job's series
/// stay until a job of the same name and model starts again).
///
/// A job is known by its [name](crate::JobConfig::job_name) and model: jobs that run at the
/// same time under one registry need different names.
///
/// # Examples
///
/// ```
/// use streamtask::MetricsRegistry;
/// use streamtask::prelude::*;
///
/// let env = StreamEnvironment::new(Model::Mailbox);
/// let out = CollectHandle::new();
/// env.from_sequence("numbers", 0..100)
///     .map("double", |n: u64| n * 2)
///     .collect_sink("collect", &out);
/// let registry = MetricsRegistry::new();
/// let dir = tempfile::tempdir().unwrap();
/// let config = JobConfig::new(dir.path())
///     .with_job_name("doubler")
///     .with_metrics(registry.clone());
/// env.build().unwrap().run(&config).unwrap();
/// assert_eq!(out.committed().len(), 100);
///
/// let text = registry.render();
/// assert!(text.contains("streamtask_task_busy_time_ms_per_second{job=\"doubler\""));
/// assert!(text.ends_with("# EOF\n"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct MetricsRegistry {
    shared: Arc<Mutex<Jobs>>,
}

impl MetricsRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        MetricsRegistry::default()
    }

    /// Every registered job's and task's metrics, as OpenMetrics 1.0 text (serve it with
    /// [`OPENMETRICS_CONTENT_TYPE`](crate::OPENMETRICS_CONTENT_TYPE)). README's "Metrics"
    /// section lists the families and the Flink metric each one is.
    pub fn render(&self) -> String {
        let now = Instant::now();
        // Read under the lock; format (and read checkpoint sizes from disk) without it, so a
        // job registering its tasks never waits for a slow disk.
        let (jobs, tasks) = {
            let mut registered = self.shared.lock();
            let jobs: Vec<JobRow> = registered.jobs.iter().map(JobEntry::row).collect();
            let tasks: Vec<TaskRow> = registered
                .jobs
                .iter_mut()
                .flat_map(|job| {
                    let (name, model, attempt) = (job.name.clone(), job.model, job.attempts);
                    job.tasks
                        .iter_mut()
                        .map(move |t| t.row(&name, model, attempt, now))
                })
                .collect();
            (jobs, tasks)
        };
        let mut out = Exposition::default();
        for family in JOB_FAMILIES {
            out.family(family.name, family.kind, family.help);
            for job in &jobs {
                let labels: [Label<'_>; 2] = [("job", &job.name), ("model", job.model.name())];
                let Some(value) = (family.value)(job) else {
                    continue;
                };
                // Job families are counters and gauges: one value each.
                match family.kind {
                    Kind::Counter => out.counter(family.name, &labels, value),
                    Kind::Gauge | Kind::Summary => out.gauge(family.name, &labels, value),
                }
            }
        }
        for family in TASK_FAMILIES {
            out.family(family.name, family.kind, family.help);
            for task in &tasks {
                let labels: [Label<'_>; 5] = [
                    ("job", &task.job),
                    ("task", &task.vertex),
                    ("subtask", &task.subtask),
                    ("model", task.model.name()),
                    ("attempt", &task.attempt),
                ];
                match (family.value)(task) {
                    TaskValue::Counter(v) => out.counter(family.name, &labels, v as f64),
                    TaskValue::Gauge(v) => out.gauge(family.name, &labels, v),
                    value @ (TaskValue::Latency(_) | TaskValue::Counts(_)) => {
                        // Latencies are kept in microseconds and rendered in milliseconds.
                        let (s, scale) = match value {
                            TaskValue::Latency(s) => (s, 1000.0),
                            TaskValue::Counts(s) => (s, 1.0),
                            TaskValue::Counter(_) | TaskValue::Gauge(_) => {
                                unreachable!("matched above")
                            }
                        };
                        // An empty distribution has no quantiles: NaN, as Prometheus's own
                        // clients render them, not a latency of 0.
                        let ms = |us: u64| {
                            if s.count == 0 {
                                f64::NAN
                            } else {
                                us as f64 / scale
                            }
                        };
                        out.summary(
                            family.name,
                            &labels,
                            &[(0.5, ms(s.p50)), (0.99, ms(s.p99)), (0.999, ms(s.p999))],
                            s.mean * s.count as f64 / scale,
                            s.count,
                        );
                    }
                }
            }
        }
        out.family(DRIFT_FAMILY, Kind::Gauge, DRIFT_HELP);
        for task in &tasks {
            if let Some(drift) = task.summary.watermark_alignment_drift {
                let labels: [Label<'_>; 5] = [
                    ("job", &task.job),
                    ("task", &task.vertex),
                    ("subtask", &task.subtask),
                    ("model", task.model.name()),
                    ("attempt", &task.attempt),
                ];
                out.gauge(DRIFT_FAMILY, &labels, drift as f64);
            }
        }
        for family in SPLIT_FAMILIES {
            out.family(family.name, family.kind, family.help);
            for task in &tasks {
                for split in &task.splits {
                    let labels: [Label<'_>; 6] = [
                        ("job", &task.job),
                        ("task", &task.vertex),
                        ("subtask", &task.subtask),
                        ("model", task.model.name()),
                        ("attempt", &task.attempt),
                        ("split", &split.split),
                    ];
                    let value = (family.value)(split);
                    match family.kind {
                        Kind::Counter => out.counter(family.name, &labels, value),
                        Kind::Gauge | Kind::Summary => out.gauge(family.name, &labels, value),
                    }
                }
            }
        }
        out.finish()
    }

    /// Registers a run of the job `name` under `model`, replacing an earlier run's.
    pub(crate) fn start_job(&self, name: &str, model: Model) -> JobScope {
        let mut registered = self.shared.lock();
        let entry = JobEntry::new(name, model);
        let index = match registered
            .jobs
            .iter()
            .position(|j| j.name == name && j.model == model)
        {
            Some(i) => {
                registered.jobs[i] = entry;
                i
            }
            None => {
                registered.jobs.push(entry);
                registered.jobs.len() - 1
            }
        };
        JobScope {
            registry: self.clone(),
            index,
        }
    }
}

/// Every job registered, in the order they first ran.
#[derive(Debug, Default)]
struct Jobs {
    jobs: Vec<JobEntry>,
}

/// A run of a job, as the executor reports it (see `executor.rs`).
#[derive(Debug)]
pub(crate) struct JobScope {
    registry: MetricsRegistry,
    index: usize,
}

impl JobScope {
    /// A new attempt starts: its checkpoint statistics (`None` without checkpoints) and the
    /// storage its checkpoints go to. The previous attempt's tasks are dropped.
    pub(crate) fn start_attempt(
        &self,
        stats: Option<StatsArc<CheckpointStats>>,
        storage: &CheckpointStorage,
    ) -> AttemptScope {
        let mut registered = self.registry.shared.lock();
        let job = &mut registered.jobs[self.index];
        if let Some(old) = job.stats.take() {
            job.completed_before += old.completed.get();
            job.failed_before += old.aborted.get();
            job.last_before = old.last_completed().or(job.last_before);
        }
        job.stats = stats;
        job.storage = Some(storage.clone());
        job.attempts += 1;
        job.tasks.clear();
        AttemptScope {
            registry: self.registry.clone(),
            index: self.index,
        }
    }
}

/// An attempt of a job, as the executor reports it.
#[derive(Debug)]
pub(crate) struct AttemptScope {
    registry: MetricsRegistry,
    index: usize,
}

impl AttemptScope {
    /// Registers the attempt's next task (the executor's task order: the index
    /// [`task_ended`](Self::task_ended) takes).
    pub(crate) fn register_task(&self, vertex: &str, subtask: usize, metrics: Arc<TaskMetrics>) {
        let mut registered = self.registry.shared.lock();
        registered.jobs[self.index].tasks.push(TaskEntry::new(
            vertex,
            subtask,
            metrics,
            Instant::now(),
        ));
    }

    /// The attempt's task `index` ended: its busy time stops growing.
    pub(crate) fn task_ended(&self, index: usize) {
        let mut registered = self.registry.shared.lock();
        if let Some(task) = registered.jobs[self.index].tasks.get_mut(index) {
            task.ended.get_or_insert_with(Instant::now);
        }
    }
}

/// What the registry knows of one job.
#[derive(Debug)]
struct JobEntry {
    name: String,
    model: Model,
    /// Attempts started (1 for the first).
    attempts: u32,
    /// The current attempt's checkpoint statistics.
    stats: Option<StatsArc<CheckpointStats>>,
    /// Checkpoints completed and failed by the earlier attempts.
    completed_before: u64,
    failed_before: u64,
    /// The newest checkpoint an earlier attempt completed.
    last_before: Option<CheckpointTiming>,
    storage: Option<CheckpointStorage>,
    tasks: Vec<TaskEntry>,
}

impl JobEntry {
    fn new(name: &str, model: Model) -> Self {
        JobEntry {
            name: name.to_string(),
            model,
            attempts: 0,
            stats: None,
            completed_before: 0,
            failed_before: 0,
            last_before: None,
            storage: None,
            tasks: Vec::new(),
        }
    }

    fn row(&self) -> JobRow {
        let stats = self.stats.as_deref();
        let current = |read: fn(&CheckpointStats) -> u64| stats.map_or(0, read);
        let last = stats
            .and_then(CheckpointStats::last_completed)
            .or(self.last_before);
        JobRow {
            name: self.name.clone(),
            model: self.model,
            completed: self.completed_before + current(|s| s.completed.get()),
            failed: self.failed_before + current(|s| s.aborted.get()),
            in_progress: current(|s| {
                s.triggered
                    .get()
                    .saturating_sub(s.completed.get() + s.aborted.get())
            }),
            restarts: u64::from(self.attempts.saturating_sub(1)),
            last_duration_ms: last.map(|l| l.duration_ms),
            last_path: last.and_then(|l| self.storage.as_ref()?.checkpoint_path(l.id)),
        }
    }
}

/// A job's values at one render.
#[derive(Debug)]
struct JobRow {
    name: String,
    model: Model,
    completed: u64,
    failed: u64,
    in_progress: u64,
    restarts: u64,
    last_duration_ms: Option<u64>,
    /// The newest completed checkpoint's directory (its size is read when rendered).
    last_path: Option<PathBuf>,
}

/// What the registry knows of one task.
#[derive(Debug)]
struct TaskEntry {
    vertex: String,
    subtask: usize,
    metrics: Arc<TaskMetrics>,
    started: Instant,
    ended: Option<Instant>,
    /// Kept samples, oldest first; the first is the task's start.
    samples: VecDeque<Sample>,
    /// Per split the task's reader holds: kept samples, oldest first; the first is the
    /// render that first saw the split.
    split_samples: HashMap<String, VecDeque<SplitSample>>,
}

/// A split's cumulative values at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct SplitSample {
    at: Option<Instant>,
    paused_ms: u64,
    idle_ms: u64,
}

/// A split's values at one render.
#[derive(Debug)]
struct SplitRow {
    split: String,
    paused_ms: u64,
    idle_ms: u64,
    paused_ms_per_second: f64,
    idle_ms_per_second: f64,
}

/// A task's cumulative values at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: Option<Instant>,
    records_in: u64,
    records_out: u64,
    busy_us: u64,
    idle_us: u64,
    backpressured_us: u64,
}

impl TaskEntry {
    fn new(vertex: &str, subtask: usize, metrics: Arc<TaskMetrics>, started: Instant) -> Self {
        let start = Sample {
            at: Some(started),
            ..Sample::default()
        };
        TaskEntry {
            vertex: vertex.to_string(),
            subtask,
            metrics,
            started,
            ended: None,
            samples: VecDeque::from([start]),
            split_samples: HashMap::new(),
        }
    }

    /// The task's values now, and its rates since the sample the window starts at.
    fn row(&mut self, job: &str, model: Model, attempt: u32, now: Instant) -> TaskRow {
        let m = Arc::clone(&self.metrics);
        let idle_us = m.idle_micros.get();
        let backpressured_us = m.backpressured_micros.get();
        // Busy is the rest of the task's time: neither waiting for input nor for output space.
        let alive = self
            .ended
            .unwrap_or(now)
            .saturating_duration_since(self.started);
        let alive_us = u64::try_from(alive.as_micros()).unwrap_or(u64::MAX);
        let sample = Sample {
            at: Some(now),
            records_in: m.records_in.get(),
            records_out: m.records_out.get(),
            busy_us: alive_us.saturating_sub(idle_us + backpressured_us),
            idle_us,
            backpressured_us,
        };
        let rates = self.rates_since_window(sample, now);
        let splits = self.split_rows(&m, now);
        TaskRow {
            job: job.to_string(),
            vertex: self.vertex.clone(),
            subtask: self.subtask.to_string(),
            model,
            attempt: attempt.to_string(),
            summary: m.summary(),
            last_delay_us: m.checkpoint_delay.last_micros(),
            now: sample,
            rates,
            splits,
        }
    }

    /// The splits the task's reader holds now, with their rates over the window; the samples
    /// of splits no longer held are dropped.
    fn split_rows(&mut self, metrics: &TaskMetrics, now: Instant) -> Vec<SplitRow> {
        let held: Vec<(String, u64, u64)> = metrics
            .splits
            .lock()
            .iter()
            .map(|(id, m)| (id.clone(), m.paused_millis.get(), m.idle_millis.get()))
            .collect();
        self.split_samples
            .retain(|id, _| held.iter().any(|(h, _, _)| h == id));
        held.into_iter()
            .map(|(split, paused_ms, idle_ms)| {
                let sample = SplitSample {
                    at: Some(now),
                    paused_ms,
                    idle_ms,
                };
                let samples = self
                    .split_samples
                    .entry(split.clone())
                    .or_insert_with(|| VecDeque::from([sample]));
                let (from, secs) = slide(samples, sample, |s| s.at, now);
                // Milliseconds per second over the window, at most 1000.
                let ms_per_second = |to: u64, from: u64| {
                    if secs > 0.0 {
                        (to.saturating_sub(from) as f64 / secs).min(1000.0)
                    } else {
                        0.0
                    }
                };
                SplitRow {
                    split,
                    paused_ms,
                    idle_ms,
                    paused_ms_per_second: ms_per_second(paused_ms, from.paused_ms),
                    idle_ms_per_second: ms_per_second(idle_ms, from.idle_ms),
                }
            })
            .collect()
    }

    /// Rates from the window's first sample to `sample`, then `sample` kept (at most one per
    /// [`SAMPLE_SPACING`]) and the samples before the window's start dropped.
    fn rates_since_window(&mut self, sample: Sample, now: Instant) -> Rates {
        let (from, secs) = slide(&mut self.samples, sample, |s| s.at, now);
        let per_second = |to: u64, from: u64| {
            if secs > 0.0 {
                to.saturating_sub(from) as f64 / secs
            } else {
                0.0
            }
        };
        // Microseconds per second / 1000 = milliseconds per second, at most 1000.
        let ms_per_second = |to: u64, from: u64| (per_second(to, from) / 1000.0).min(1000.0);
        Rates {
            records_in: per_second(sample.records_in, from.records_in),
            records_out: per_second(sample.records_out, from.records_out),
            busy_ms: ms_per_second(sample.busy_us, from.busy_us),
            idle_ms: ms_per_second(sample.idle_us, from.idle_us),
            backpressured_ms: ms_per_second(sample.backpressured_us, from.backpressured_us),
        }
    }
}

/// The rate window over kept `samples` (oldest first, never empty): drops the samples before
/// the window's start, returns the window's first sample and the seconds from it to `now`,
/// then keeps `sample` (at most one per [`SAMPLE_SPACING`]).
fn slide<S: Copy>(
    samples: &mut VecDeque<S>,
    sample: S,
    at: fn(&S) -> Option<Instant>,
    now: Instant,
) -> (S, f64) {
    let window_start = now.checked_sub(RATE_WINDOW);
    let base = samples
        .iter()
        .rposition(|s| window_start.is_some_and(|w| at(s).is_some_and(|t| t <= w)))
        .unwrap_or(0);
    samples.drain(..base);
    let from = samples[0];
    let secs = at(&from).map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
    let newest = samples.back().and_then(at);
    if newest.is_none_or(|t| now.saturating_duration_since(t) >= SAMPLE_SPACING) {
        samples.push_back(sample);
    }
    (from, secs)
}

/// A task's per-second rates over the window.
#[derive(Debug, Clone, Copy, Default)]
struct Rates {
    records_in: f64,
    records_out: f64,
    busy_ms: f64,
    idle_ms: f64,
    backpressured_ms: f64,
}

/// A task's values at one render.
#[derive(Debug)]
struct TaskRow {
    job: String,
    vertex: String,
    subtask: String,
    model: Model,
    attempt: String,
    summary: MetricsSummary,
    last_delay_us: Option<u64>,
    now: Sample,
    rates: Rates,
    splits: Vec<SplitRow>,
}

/// A job-level family: name, type, help, and its value (`None`: no sample for this job).
struct JobFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&JobRow) -> Option<f64>,
}

/// The job-level families, in rendering order. README's table lists them with Flink's names.
const JOB_FAMILIES: &[JobFamily] = &[
    JobFamily {
        name: "streamtask_job_number_of_completed_checkpoints",
        kind: Kind::Counter,
        help: "Checkpoints completed, over all attempts of the run (Flink: numberOfCompletedCheckpoints).",
        value: |j| Some(j.completed as f64),
    },
    JobFamily {
        name: "streamtask_job_number_of_failed_checkpoints",
        kind: Kind::Counter,
        help: "Checkpoints aborted for any reason, over all attempts of the run (Flink: numberOfFailedCheckpoints).",
        value: |j| Some(j.failed as f64),
    },
    JobFamily {
        name: "streamtask_job_number_of_in_progress_checkpoints",
        kind: Kind::Gauge,
        help: "Checkpoints triggered and not yet completed or aborted (Flink: numberOfInProgressCheckpoints).",
        value: |j| Some(j.in_progress as f64),
    },
    JobFamily {
        name: "streamtask_job_last_checkpoint_duration_ms",
        kind: Kind::Gauge,
        help: "Trigger to last acknowledgement of the newest completed checkpoint, in milliseconds (Flink: lastCheckpointDuration); absent before the first.",
        value: |j| j.last_duration_ms.map(|ms| ms as f64),
    },
    JobFamily {
        name: "streamtask_job_last_checkpoint_size_bytes",
        kind: Kind::Gauge,
        help: "Bytes the newest completed checkpoint takes in the checkpoint directory (Flink: lastCheckpointSize); absent before the first.",
        value: |j| j.last_path.as_deref().and_then(dir_size).map(|b| b as f64),
    },
    JobFamily {
        name: "streamtask_job_num_restarts",
        kind: Kind::Gauge,
        help: "Restarts of the run so far (Flink: numRestarts).",
        value: |j| Some(j.restarts as f64),
    },
];

/// A task-level family's value for one task.
enum TaskValue {
    Counter(u64),
    Gauge(f64),
    /// A latency distribution in microseconds, rendered as a summary in milliseconds.
    Latency(LatencySummary),
    /// A distribution of counts, rendered as a summary as it is.
    Counts(LatencySummary),
}

/// A task-level family: name, type, help, and its value (of that type).
struct TaskFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&TaskRow) -> TaskValue,
}

/// The task-level families, in rendering order. README's table lists them with Flink's names.
const TASK_FAMILIES: &[TaskFamily] = &[
    TaskFamily {
        name: "streamtask_task_num_records_in",
        kind: Kind::Counter,
        help: "Records that entered the task's chain (Flink: numRecordsIn).",
        value: |t| TaskValue::Counter(t.now.records_in),
    },
    TaskFamily {
        name: "streamtask_task_num_records_out",
        kind: Kind::Counter,
        help: "Records the task's chain emitted (Flink: numRecordsOut).",
        value: |t| TaskValue::Counter(t.now.records_out),
    },
    TaskFamily {
        name: "streamtask_task_num_records_in_per_second",
        kind: Kind::Gauge,
        help: "Records in per second over the rate window (Flink: numRecordsInPerSecond).",
        value: |t| TaskValue::Gauge(t.rates.records_in),
    },
    TaskFamily {
        name: "streamtask_task_num_records_out_per_second",
        kind: Kind::Gauge,
        help: "Records out per second over the rate window (Flink: numRecordsOutPerSecond).",
        value: |t| TaskValue::Gauge(t.rates.records_out),
    },
    TaskFamily {
        name: "streamtask_task_busy_time_ms_per_second",
        kind: Kind::Gauge,
        help: "Milliseconds per second the task neither waited for input nor for output space, over the rate window (Flink: busyTimeMsPerSecond).",
        value: |t| TaskValue::Gauge(t.rates.busy_ms),
    },
    TaskFamily {
        name: "streamtask_task_idle_time_ms_per_second",
        kind: Kind::Gauge,
        help: "Milliseconds per second the task waited for input, over the rate window (Flink: idleTimeMsPerSecond).",
        value: |t| TaskValue::Gauge(t.rates.idle_ms),
    },
    TaskFamily {
        name: "streamtask_task_back_pressured_time_ms_per_second",
        kind: Kind::Gauge,
        help: "Milliseconds per second the task waited for output space or a full operator, over the rate window (Flink: backPressuredTimeMsPerSecond).",
        value: |t| TaskValue::Gauge(t.rates.backpressured_ms),
    },
    TaskFamily {
        name: "streamtask_task_accumulate_busy_time_ms",
        kind: Kind::Counter,
        help: "Milliseconds the task was busy since it started (Flink: accumulateBusyTimeMs).",
        value: |t| TaskValue::Counter(t.now.busy_us / 1000),
    },
    TaskFamily {
        name: "streamtask_task_accumulate_idle_time_ms",
        kind: Kind::Counter,
        help: "Milliseconds the task waited for input since it started (Flink: accumulateIdleTimeMs).",
        value: |t| TaskValue::Counter(t.now.idle_us / 1000),
    },
    TaskFamily {
        name: "streamtask_task_accumulate_back_pressured_time_ms",
        kind: Kind::Counter,
        help: "Milliseconds the task waited for output space since it started (Flink: accumulateBackPressuredTimeMs).",
        value: |t| TaskValue::Counter(t.now.backpressured_us / 1000),
    },
    TaskFamily {
        name: "streamtask_task_checkpoint_start_delay_nanos",
        kind: Kind::Gauge,
        help: "From the trigger (or the last barrier's arrival) to the start of the task's newest snapshot, in nanoseconds at microsecond resolution; 0 before the first (Flink: checkpointStartDelayNanos).",
        value: |t| TaskValue::Gauge(t.last_delay_us.map_or(0.0, |us| us as f64 * 1000.0)),
    },
    TaskFamily {
        name: "streamtask_task_checkpoints",
        kind: Kind::Counter,
        help: "Snapshots the task took.",
        value: |t| TaskValue::Counter(t.summary.checkpoints),
    },
    TaskFamily {
        name: "streamtask_task_checkpoint_alignment_time_ms",
        kind: Kind::Summary,
        help: "From the first to the last barrier of a checkpoint on a multi-input task, in milliseconds (Flink's checkpointAlignmentTime, as a distribution).",
        value: |t| TaskValue::Latency(t.summary.alignment_us),
    },
    TaskFamily {
        name: "streamtask_task_mailbox_latency_ms",
        kind: Kind::Summary,
        help: "From a mail's enqueue to the start of its run, sampled, in milliseconds (Flink: mailboxLatencyMs); empty in the legacy model.",
        value: |t| TaskValue::Latency(t.summary.mailbox_latency_us),
    },
    TaskFamily {
        name: "streamtask_task_mails",
        kind: Kind::Counter,
        help: "Mails the task ran (checkpoint triggers that came without a mail included).",
        value: |t| TaskValue::Counter(t.summary.mails),
    },
    TaskFamily {
        name: "streamtask_task_checkpoint_lock_wait_ms",
        kind: Kind::Summary,
        help: "Time each acquirer waited for the checkpoint lock, in milliseconds; empty in the mailbox model.",
        value: |t| TaskValue::Latency(t.summary.lock_wait_us),
    },
    TaskFamily {
        name: "streamtask_task_timer_lateness_ms",
        kind: Kind::Summary,
        help: "From a timer's due time to the start of its callback, in milliseconds.",
        value: |t| TaskValue::Latency(t.summary.timer_lateness_us),
    },
    TaskFamily {
        name: "streamtask_task_async_batch_size",
        kind: Kind::Summary,
        help: "Records per batch a batched async operator called; empty without one.",
        value: |t| TaskValue::Counts(t.summary.async_batch_size),
    },
    TaskFamily {
        name: "streamtask_task_async_batch_wait_ms",
        kind: Kind::Summary,
        help: "From a batch's first record to the batch's call in a batched async operator, in milliseconds (processing-time resolution); empty without one.",
        value: |t| TaskValue::Latency(t.summary.async_batch_wait_us),
    },
];

/// The readers of aligned split sources: rendered only for them.
const DRIFT_FAMILY: &str = "streamtask_task_watermark_alignment_drift_ms";
const DRIFT_HELP: &str = "A reader of a split source with watermark alignment: its watermark less its alignment group's minimum, in milliseconds; absent for other tasks and before both are known (Flink: watermarkAlignmentDrift).";

/// A split-level family (labels: the task's and `split`): name, type, help, and its value.
struct SplitFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&SplitRow) -> f64,
}

/// The split-level families of split sources' readers, in rendering order. README's table
/// lists them with Flink's names.
const SPLIT_FAMILIES: &[SplitFamily] = &[
    SplitFamily {
        name: "streamtask_split_paused_time_ms_per_second",
        kind: Kind::Gauge,
        help: "Milliseconds per second a split was paused by watermark alignment, over the rate window (Flink 2.1 split metric: pausedTimePerSecond).",
        value: |s| s.paused_ms_per_second,
    },
    SplitFamily {
        name: "streamtask_split_idle_time_ms_per_second",
        kind: Kind::Gauge,
        help: "Milliseconds per second a split was idle and not paused, over the rate window (Flink 2.1 split metric: idleTimePerSecond).",
        value: |s| s.idle_ms_per_second,
    },
    SplitFamily {
        name: "streamtask_split_accumulated_paused_time_ms",
        kind: Kind::Counter,
        help: "Milliseconds a split was paused by watermark alignment while its reader held it.",
        value: |s| s.paused_ms as f64,
    },
    SplitFamily {
        name: "streamtask_split_accumulated_idle_time_ms",
        kind: Kind::Counter,
        help: "Milliseconds a split was idle and not paused while its reader held it.",
        value: |s| s.idle_ms as f64,
    },
];

/// Bytes of the regular files under `dir`; `None` if it cannot be read (a checkpoint being
/// removed as another completes).
fn dir_size(dir: &Path) -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            total += dir_size(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata().ok()?.len();
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope_with_task(registry: &MetricsRegistry) -> (AttemptScope, Arc<TaskMetrics>) {
        let storage = CheckpointStorage::in_memory(3).unwrap();
        let attempt = registry
            .start_job("orders", Model::Legacy)
            .start_attempt(None, &storage);
        let metrics = Arc::new(TaskMetrics::new("map#1"));
        attempt.register_task("map", 1, Arc::clone(&metrics));
        (attempt, metrics)
    }

    #[test]
    fn every_family_is_rendered_for_every_task() {
        let registry = MetricsRegistry::new();
        let (_attempt, metrics) = scope_with_task(&registry);
        metrics.records_in.add(5);
        let text = registry.render();
        let labels = "{job=\"orders\",task=\"map\",subtask=\"1\",model=\"legacy\",attempt=\"1\"";
        for family in TASK_FAMILIES {
            assert!(
                text.contains(&format!("# TYPE {} {}", family.name, family.kind.name())),
                "{} has no TYPE line:\n{text}",
                family.name
            );
            assert!(
                text.lines()
                    .any(|l| l.starts_with(family.name) && l.contains(labels)),
                "{} has no sample for the task:\n{text}",
                family.name
            );
        }
        assert!(text.contains(&format!(
            "streamtask_task_num_records_in_total{labels}}} 5\n"
        )));
        assert!(text.contains("streamtask_job_num_restarts{job=\"orders\",model=\"legacy\"} 0\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_split_held_by_a_reader_has_its_paused_and_idle_time_rendered() {
        let registry = MetricsRegistry::new();
        let (_attempt, metrics) = scope_with_task(&registry);
        let split = Arc::new(streamtask_core::metrics::SplitMetrics::default());
        metrics
            .splits
            .lock()
            .insert("p-0".to_string(), Arc::clone(&split));
        split.paused_millis.add(250);
        split.idle_millis.add(40);
        let text = registry.render();
        let labels = "{job=\"orders\",task=\"map\",subtask=\"1\",model=\"legacy\",attempt=\"1\",split=\"p-0\"}";
        for family in SPLIT_FAMILIES {
            assert!(
                text.contains(&format!("# TYPE {} {}", family.name, family.kind.name())),
                "{} has no TYPE line:\n{text}",
                family.name
            );
        }
        assert!(text.contains(&format!(
            "streamtask_split_accumulated_paused_time_ms_total{labels} 250\n"
        )));
        assert!(text.contains(&format!(
            "streamtask_split_accumulated_idle_time_ms_total{labels} 40\n"
        )));
        // The first render that sees a split starts its window: no rate yet.
        assert!(text.contains(&format!(
            "streamtask_split_paused_time_ms_per_second{labels} 0\n"
        )));
        // A split no longer held is no longer rendered.
        metrics.splits.lock().clear();
        assert!(!registry.render().contains("split=\"p-0\""));
        // The drift of an aligned reader, absent until it is known.
        assert!(!text.contains("streamtask_task_watermark_alignment_drift_ms{"));
        *metrics.watermark_alignment_drift.lock() = Some(7);
        assert!(registry.render().contains(
            "streamtask_task_watermark_alignment_drift_ms{job=\"orders\",task=\"map\",subtask=\"1\",model=\"legacy\",attempt=\"1\"} 7\n"
        ));
    }

    #[test]
    fn the_registry_is_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<MetricsRegistry>();
    }

    #[test]
    fn an_empty_distribution_has_nan_quantiles_and_a_zero_count() {
        let registry = MetricsRegistry::new();
        let (_attempt, metrics) = scope_with_task(&registry);
        metrics.timer_lateness.record_micros(1500);
        let text = registry.render();
        let of = |family: &str| -> Vec<&str> {
            text.lines().filter(|l| l.starts_with(family)).collect()
        };
        let empty = of("streamtask_task_mailbox_latency_ms");
        assert!(empty[0].ends_with("quantile=\"0.5\"} NaN"), "{empty:?}");
        assert!(empty[4].ends_with("} 0"), "{empty:?}");
        let one = of("streamtask_task_timer_lateness_ms");
        assert!(one[0].ends_with("quantile=\"0.5\"} 1.5"), "{one:?}");
        assert!(one[4].ends_with("} 1"), "{one:?}");
    }

    #[test]
    fn each_task_family_says_the_type_its_values_have() {
        let registry = MetricsRegistry::new();
        let (_attempt, _metrics) = scope_with_task(&registry);
        let row =
            registry.shared.lock().jobs[0].tasks[0].row("j", Model::Legacy, 1, Instant::now());
        for family in TASK_FAMILIES {
            let kind = match (family.value)(&row) {
                TaskValue::Counter(_) => Kind::Counter,
                TaskValue::Gauge(_) => Kind::Gauge,
                TaskValue::Latency(_) | TaskValue::Counts(_) => Kind::Summary,
            };
            assert_eq!(kind, family.kind, "{}", family.name);
        }
    }

    #[test]
    fn every_family_has_help_and_type_once_and_its_samples_together() {
        let registry = MetricsRegistry::new();
        let (attempt, _metrics) = scope_with_task(&registry);
        attempt.register_task("sink", 0, Arc::new(TaskMetrics::new("sink#0")));
        let text = registry.render();
        let mut seen: Vec<&str> = Vec::new();
        let mut current = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!seen.contains(&name), "{name} typed twice");
                seen.push(name);
                current = name;
            } else if !line.starts_with('#') {
                assert!(
                    line.starts_with(current),
                    "{line} outside its family {current}"
                );
            }
        }
        assert_eq!(
            seen.len(),
            TASK_FAMILIES.len() + JOB_FAMILIES.len() + SPLIT_FAMILIES.len() + 1
        );
    }

    #[test]
    fn a_new_attempt_replaces_the_tasks_and_counts_a_restart() {
        let registry = MetricsRegistry::new();
        let storage = CheckpointStorage::in_memory(3).unwrap();
        let job = registry.start_job("orders", Model::Mailbox);
        let first = job.start_attempt(None, &storage);
        first.register_task("map", 0, Arc::new(TaskMetrics::new("map#0")));
        let second = job.start_attempt(None, &storage);
        second.register_task("map", 0, Arc::new(TaskMetrics::new("map#0")));
        let text = registry.render();
        assert!(!text.contains("attempt=\"1\""), "{text}");
        assert!(text.contains("attempt=\"2\""), "{text}");
        assert!(text.contains("streamtask_job_num_restarts{job=\"orders\",model=\"mailbox\"} 1\n"));
    }

    #[test]
    fn rates_cover_the_window_from_the_tasks_start() {
        let metrics = Arc::new(TaskMetrics::new("map#0"));
        let start = Instant::now();
        let mut task = TaskEntry::new("map", 0, Arc::clone(&metrics), start);
        metrics.records_in.add(500);
        metrics.idle_micros.add(250_000);
        // Half a second after the start: younger than the window, so the rate is since start.
        let now = start + Duration::from_millis(500);
        let row = task.row("j", Model::Mailbox, 1, now);
        assert!(
            (row.rates.records_in - 1000.0).abs() < 1e-6,
            "{:?}",
            row.rates
        );
        assert!((row.rates.idle_ms - 500.0).abs() < 1e-6, "{:?}", row.rates);
        assert!((row.rates.busy_ms - 500.0).abs() < 1e-6, "{:?}", row.rates);
        // Two seconds later, 100 more records: the window starts at the sample kept above.
        metrics.records_in.add(100);
        let later = now + Duration::from_secs(2);
        let row = task.row("j", Model::Mailbox, 1, later);
        assert!(
            (row.rates.records_in - 50.0).abs() < 1e-6,
            "{:?}",
            row.rates
        );
        assert!(task.samples.len() <= 2, "older samples are dropped");
    }

    #[test]
    fn an_ended_task_stops_being_busy() {
        let metrics = Arc::new(TaskMetrics::new("map#0"));
        let start = Instant::now();
        let mut task = TaskEntry::new("map", 0, metrics, start);
        task.ended = Some(start + Duration::from_millis(100));
        let row = task.row("j", Model::Legacy, 1, start + Duration::from_secs(5));
        assert_eq!(row.now.busy_us, 100_000);
    }
}
