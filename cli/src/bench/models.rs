//! One legacy source (and its native port) behind the same chain under each model: throughput
//! to the end, and checkpoint-trigger latency while the source runs flat out.
//!
//! Every task ends in the same [`Sum`] the bare loop and the tokio peer end in: with a
//! discarding output the compiler drops the map's `x * 31` and the tasks did less work per
//! record than the peer they are compared with (an earlier version did; its
//! `vs_tokio_batched_throughput` flattered the mailbox).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use streamtask_bridge::{HandoffReader, LegacySourceStreamTask};
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskOutcome, TaskReport};
use streamtask_core::{CheckpointBarrier, task::TriggerError};
use streamtask_legacy::{Fairness, SourceStreamTask};

use super::clock;
use super::hot_path::Sum;
use super::sources::{Count, CountReader, Stamp};

/// Which task runs the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `streamtask_legacy::SourceStreamTask`: the source on the task thread, under the lock.
    Legacy,
    /// The same with the bounded hand-over on
    /// (`SourceStreamTask::with_bounded_handover(true)`): a checkpoint trigger asks the source
    /// to let go of the lock at its next section.
    LegacyBoundedHandover,
    /// `streamtask_bridge::LegacySourceStreamTask`: the source on its own thread, mails under
    /// the lock.
    Bridge,
    /// `streamtask_bridge::HandoffReader` of this capacity in a mailbox `SourceStreamTask`.
    Handoff(usize),
    /// The native port in a mailbox `SourceStreamTask`.
    Native,
}

impl Runner {
    /// A short label.
    pub fn label(self) -> String {
        match self {
            Runner::Legacy => "legacy".into(),
            Runner::LegacyBoundedHandover => "legacy (bounded hand-over)".into(),
            Runner::Bridge => "bridge".into(),
            Runner::Handoff(capacity) => format!("handoff({capacity})"),
            Runner::Native => "mailbox".into(),
        }
    }
}

/// The handles of the models behind one interface.
enum Running {
    Legacy(streamtask_runtime::TaskHandle),
    Bridge(streamtask_runtime::TaskHandle),
    Mailbox(streamtask_runtime::TaskHandle),
}

impl Running {
    fn spawn(
        runner: Runner,
        fairness: Fairness,
        config: TaskConfig,
        limit: Option<u64>,
        stamp: Stamp,
    ) -> Self {
        let source = Count { limit };
        match runner {
            Runner::Legacy | Runner::LegacyBoundedHandover => Running::Legacy(
                SourceStreamTask::new(config, source, stamp, Sum::default())
                    .with_fairness(fairness)
                    .with_bounded_handover(runner == Runner::LegacyBoundedHandover)
                    .spawn(),
            ),
            Runner::Bridge => Running::Bridge(
                LegacySourceStreamTask::new(config, source, stamp, Sum::default())
                    .with_fairness(fairness)
                    .spawn()
                    .expect("a plain chain"),
            ),
            Runner::Handoff(capacity) => Running::Mailbox(
                streamtask_mailbox::SourceStreamTask::new(
                    config,
                    HandoffReader::new(source).with_capacity(capacity),
                    stamp,
                    Sum::default(),
                )
                .spawn(),
            ),
            Runner::Native => Running::Mailbox(
                streamtask_mailbox::SourceStreamTask::new(
                    config,
                    CountReader {
                        next: 0,
                        limit: limit.unwrap_or(u64::MAX),
                    },
                    stamp,
                    Sum::default(),
                )
                .spawn(),
            ),
        }
    }

    fn trigger(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        match self {
            Running::Legacy(t) => t.trigger_checkpoint(barrier),
            Running::Bridge(t) => t.trigger_checkpoint(barrier),
            Running::Mailbox(t) => t.trigger_checkpoint(barrier),
        }
    }

    fn metrics(&self) -> Arc<TaskMetrics> {
        match self {
            Running::Legacy(t) => Arc::clone(t.metrics()),
            Running::Bridge(t) => Arc::clone(t.metrics()),
            Running::Mailbox(t) => Arc::clone(t.metrics()),
        }
    }

    fn join(self) -> TaskOutcome {
        match self {
            Running::Legacy(t) => t.join(),
            Running::Bridge(t) => t.join(),
            Running::Mailbox(t) => t.join(),
        }
    }

    fn stop(self) -> TaskOutcome {
        match &self {
            Running::Legacy(t) => t.cancel(),
            Running::Bridge(t) => t.cancel(),
            Running::Mailbox(t) => t.cancel(),
        }
        self.join()
    }
}

/// `records` records of the counting source through `runner`: the wall time, spawn to join.
///
/// # Panics
///
/// If the task does not finish.
pub fn throughput(runner: Runner, records: u64) -> Duration {
    let start = Instant::now();
    let task = Running::spawn(
        runner,
        Fairness::Eventual,
        TaskConfig::new(runner.label()),
        Some(records),
        Stamp::new(),
    );
    let outcome = task.join();
    let elapsed = start.elapsed();
    assert!(outcome.is_finished(), "{}: {outcome}", runner.label());
    elapsed
}

/// What [`hot_triggers`] measured.
#[derive(Debug, Clone)]
pub struct TriggerRun {
    /// Scheduled trigger time -> snapshot start, median, in microseconds.
    pub p50_us: f64,
    /// The same, 99th percentile.
    pub p99_us: f64,
    /// The same, 99.9th percentile.
    pub p999_us: f64,
    /// The same, the slowest.
    pub max_us: f64,
    /// How long the `trigger_checkpoint` call itself took on this thread, median, in
    /// microseconds.
    pub call_p50_us: f64,
    /// Records per second the source got through meanwhile.
    pub records_per_s: f64,
    /// Triggers acknowledged.
    pub acked: u64,
    /// Every trigger's scheduled time -> snapshot start, in nanoseconds (what `p50_us` ..
    /// `max_us` summarize), to pool over rounds.
    pub latency: Histogram<u64>,
    /// Every trigger's call (the triggering thread's clock read right before the call) ->
    /// snapshot start, in nanoseconds: the runner's own part, without the triggering thread's
    /// lateness to its deadline.
    pub from_call: Histogram<u64>,
    /// Every trigger's lateness: scheduled time -> call, in nanoseconds (the trigger thread's
    /// own, in every runner's `latency` alike).
    pub lateness: Histogram<u64>,
}

/// Triggers `triggers` checkpoints on absolute deadlines every `interval` (a slow snapshot does
/// not delay the next one: no coordinated omission) while the source runs flat out under
/// `runner`; latency from each trigger's scheduled time to the start of its snapshot.
///
/// # Panics
///
/// If a trigger is refused or the task does not end cancelled.
pub fn hot_triggers(
    runner: Runner,
    fairness: Fairness,
    triggers: u64,
    interval: Duration,
) -> TriggerRun {
    let (reports, acks) = crossbeam::channel::unbounded();
    let name = format!("{} {fairness:?}", runner.label());
    let config = TaskConfig::new(name.clone())
        .with_responder(CheckpointResponder::new(name.clone(), reports))
        .with_cancel_grace(Duration::from_secs(60));
    let stamp = Stamp::new();
    let starts = Arc::clone(&stamp.starts);
    let task = Running::spawn(runner, fairness, config, None, stamp);
    let metrics = task.metrics();
    let warm = Instant::now() + Duration::from_secs(10);
    while metrics.records_in.get() == 0 && Instant::now() < warm {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let records_before = metrics.records_in.get();
    let begin = Instant::now();
    let scheduled: Vec<Instant> = (0..triggers).map(|k| begin + interval * k as u32).collect();
    // The triggers come from a thread of their own with precise timers (see `clock`), so the
    // tasks' threads, spawned from this one, keep the default timer slack.
    let (calls, called_at, lateness) = std::thread::scope(|scope| {
        let trigger_thread = scope.spawn(|| {
            clock::precise_timers();
            let mut calls = new_histogram();
            let mut called_at = Vec::with_capacity(scheduled.len());
            let mut lateness = new_histogram();
            for (k, at) in scheduled.iter().enumerate() {
                clock::sleep_until(*at);
                let called = Instant::now();
                task.trigger(CheckpointBarrier::new(k as u64 + 1, 0))
                    .expect("a source task");
                calls.saturating_record(nanos(called.elapsed()));
                called_at.push(called);
                lateness.saturating_record(nanos(called.saturating_duration_since(*at)));
            }
            (calls, called_at, lateness)
        });
        trigger_thread.join().expect("the trigger thread")
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut acked, mut declined) = (0, 0);
    while acked + declined < triggers && Instant::now() < deadline {
        match acks.recv_timeout(Duration::from_millis(100)) {
            Ok(TaskReport::Acknowledged { .. }) => acked += 1,
            Ok(TaskReport::Declined { .. }) => declined += 1,
            Err(_) => {}
        }
    }
    let elapsed = begin.elapsed().as_secs_f64();
    let records = metrics.records_in.get() - records_before;
    let outcome = task.stop();
    assert!(
        matches!(outcome, TaskOutcome::Cancelled),
        "{name}: {outcome}"
    );
    let mut latency = new_histogram();
    let mut from_call = new_histogram();
    for (id, start) in starts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        if let Some(i) = usize::try_from(*id - 1)
            .ok()
            .filter(|i| *i < scheduled.len())
        {
            latency.saturating_record(nanos(start.saturating_duration_since(scheduled[i])));
            from_call.saturating_record(nanos(start.saturating_duration_since(called_at[i])));
        }
    }
    TriggerRun {
        p50_us: latency.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: latency.value_at_quantile(0.99) as f64 / 1e3,
        p999_us: latency.value_at_quantile(0.999) as f64 / 1e3,
        max_us: latency.max() as f64 / 1e3,
        call_p50_us: calls.value_at_quantile(0.5) as f64 / 1e3,
        records_per_s: records as f64 / elapsed,
        acked,
        latency,
        from_call,
        lateness,
    }
}

/// An empty latency histogram (nanoseconds, 1 ns to 10 minutes, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds")
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}
