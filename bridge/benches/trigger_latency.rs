//! Checkpoint-trigger latency under a source that emits as fast as it can, for the legacy
//! `SourceStreamTask`, the bridge `LegacySourceStreamTask` (per lock fairness) and the
//! `HandoffReader` in a mailbox `SourceTask`, in one run: triggers on absolute deadlines every
//! millisecond (a slow snapshot does not delay the next trigger: no coordinated omission),
//! latency from each trigger's *scheduled* time to the start of its snapshot (the chain's
//! `prepare_snapshot_pre_barrier`, which every model runs first). The source's throughput
//! meanwhile, the task's own trigger-call-to-start metric and the snapshot duration are printed
//! next to it.
//!
//! `cargo bench -p streamtask-bridge --bench trigger_latency` (run by `cargo test --all-targets`
//! it does a tiny smoke run).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Count, Model, Stamp};
use hdrhistogram::Histogram;
use streamtask_bridge::{HandoffReader, LegacySourceStreamTask};
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::Discard;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskOutcome, TaskReport};
use streamtask_core::{CheckpointBarrier, TriggerError};
use streamtask_legacy::{Fairness, SourceStreamTask};
use streamtask_mailbox::SourceTask;

/// The three handles behind one interface, for this bench only.
enum Running {
    Legacy(streamtask_legacy::TaskHandle),
    Bridge(streamtask_bridge::TaskHandle),
    Mailbox(streamtask_mailbox::TaskHandle),
}

impl Running {
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
    fn stop(self) -> TaskOutcome {
        match self {
            Running::Legacy(t) => {
                t.cancel();
                t.join()
            }
            Running::Bridge(t) => {
                t.cancel();
                t.join()
            }
            Running::Mailbox(t) => {
                t.cancel();
                t.join()
            }
        }
    }
}

fn run(model: Model, fairness: Fairness, triggers: u64, interval: Duration) {
    let stamp = Stamp::new();
    let starts = Arc::clone(&stamp.starts);
    let (reports, acks) = crossbeam::channel::unbounded();
    let name = format!("{} {fairness:?}", model.label());
    let config = TaskConfig::new(name.clone())
        .with_responder(CheckpointResponder::new(name.clone(), reports))
        .with_cancel_grace(Duration::from_secs(60));
    let source = Count { limit: None };
    let task = match model {
        Model::Legacy => Running::Legacy(
            SourceStreamTask::new(config, source, stamp, Discard)
                .with_fairness(fairness)
                .spawn(),
        ),
        Model::Bridge => Running::Bridge(
            LegacySourceStreamTask::new(config, source, stamp, Discard)
                .with_fairness(fairness)
                .spawn()
                .expect("a plain chain"),
        ),
        Model::Handoff => Running::Mailbox(SourceTask::spawn(
            config,
            HandoffReader::new(source).with_capacity(1024),
            stamp,
            Discard,
        )),
        Model::Native => unreachable!("the native reader has no source thread to compare"),
    };
    let metrics = task.metrics();
    // Let the source get hot (records flowing).
    let warm = Instant::now() + Duration::from_secs(10);
    while metrics.records_in.get() == 0 && Instant::now() < warm {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    let records_before = metrics.records_in.get();
    let begin = Instant::now();
    let scheduled: Vec<Instant> = (0..triggers).map(|k| begin + interval * k as u32).collect();
    for (k, at) in scheduled.iter().enumerate() {
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        task.trigger(CheckpointBarrier::new(k as u64 + 1, 0))
            .unwrap();
    }
    // Wait (bounded) for every trigger's report.
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
    let mut hist = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
    for (id, start) in starts.lock().unwrap().iter() {
        let at = scheduled[(*id - 1) as usize];
        hist.saturating_record(start.saturating_duration_since(at).as_micros().max(1) as u64);
    }
    let summary = metrics.summary();
    println!(
        "{:<45} triggers={triggers} acked={acked} | scheduled->snapshot (us): p50={} p99={} \
         p99.9={} max={} | call->start: {} | snapshot: p50={}us max={}us | records/s: {:.0}",
        name,
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max(),
        summary.checkpoint_delay_us,
        summary.checkpoint_duration_us.p50,
        summary.checkpoint_duration_us.max,
        records as f64 / elapsed,
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let triggers = if bench { 2_000 } else { 20 };
    let interval = Duration::from_millis(1);
    let configs: &[(Model, Fairness)] = if bench {
        &[
            (Model::Legacy, Fairness::Eventual),
            (Model::Bridge, Fairness::Eventual),
            (Model::Handoff, Fairness::Eventual),
            (Model::Legacy, Fairness::Unfair),
            (Model::Bridge, Fairness::Unfair),
            (Model::Bridge, Fairness::Fair),
        ]
    } else {
        &[
            (Model::Legacy, Fairness::Eventual),
            (Model::Bridge, Fairness::Eventual),
            (Model::Handoff, Fairness::Eventual),
        ]
    };
    for &(model, fairness) in configs {
        run(model, fairness, triggers, interval);
    }
}
