//! Checkpoint trigger latency under a source that emits as fast as it can, per lock fairness:
//! from each trigger's *scheduled* time (absolute deadlines every millisecond, so a slow
//! snapshot does not delay the next trigger: no coordinated omission) to the start of its
//! snapshot (the chain's `prepare_snapshot_pre_barrier`, which runs under the lock).
//!
//! `cargo bench -p streamtask-legacy --bench trigger_latency` (run by `cargo test` it does a
//! short smoke run).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use streamtask_core::operator::{Context, Discard, Operator};
use streamtask_core::task::TaskState;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord};
use streamtask_legacy::{Fairness, SourceContext, SourceFunction, SourceStreamTask};

/// Emits forever, one lock acquisition per record, with a little work per record.
struct Hot;

impl SourceFunction for Hot {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// A map that records when each checkpoint's snapshot started.
struct Stamp {
    starts: Arc<Mutex<Vec<(u64, Instant)>>>,
}

impl Operator for Stamp {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "stamp"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(|n| n.wrapping_mul(31)))
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.starts
            .lock()
            .unwrap()
            .push((checkpoint_id, Instant::now()));
        Ok(())
    }
}

fn run(fairness: Fairness, triggers: u64, interval: Duration) {
    let starts = Arc::new(Mutex::new(Vec::new()));
    let (reports, acks) = crossbeam::channel::unbounded();
    let config = TaskConfig::new(format!("hot-{fairness:?}"))
        .with_responder(CheckpointResponder::new("hot", reports))
        .with_cancel_grace(Duration::from_secs(60));
    let metrics = Arc::clone(&config.metrics);
    let task = SourceStreamTask::new(
        config,
        Hot,
        Stamp {
            starts: Arc::clone(&starts),
        },
        Discard,
    )
    .with_fairness(fairness)
    .spawn();
    while task.state() == TaskState::Initializing {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50)); // let the source get hot
    let begin = Instant::now();
    let scheduled: Vec<Instant> = (0..triggers).map(|k| begin + interval * k as u32).collect();
    for (k, at) in scheduled.iter().enumerate() {
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        task.trigger_checkpoint(CheckpointBarrier::new(k as u64 + 1, 0))
            .unwrap();
    }
    // Wait (bounded) for every trigger's report.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked = 0;
    while acked < triggers && Instant::now() < deadline {
        match acks.recv_timeout(Duration::from_millis(100)) {
            Ok(TaskReport::Acknowledged { .. }) => acked += 1,
            Ok(TaskReport::Declined { .. }) => {}
            Err(_) => {}
        }
    }
    task.cancel();
    let records = metrics.records_in.get();
    let _ = task.join();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
    for (id, start) in starts.lock().unwrap().iter() {
        let at = scheduled[(*id - 1) as usize];
        hist.saturating_record(start.saturating_duration_since(at).as_micros().max(1) as u64);
    }
    let elapsed = begin.elapsed().as_secs_f64();
    println!(
        "{:<9} triggers={} acked={} | from scheduled time (us): p50={} p99={} p99.9={} max={} | trigger call->start (task metric): {} | lock waits: {} | source records/s: {:.0}",
        format!("{fairness:?}"),
        triggers,
        acked,
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max(),
        metrics.checkpoint_delay.summary(),
        metrics.lock_wait.count(),
        records as f64 / elapsed,
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench {
        for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
            run(fairness, 2_000, Duration::from_millis(1));
        }
    } else {
        // `cargo test --all-targets`: a smoke run only.
        run(Fairness::Eventual, 20, Duration::from_millis(1));
    }
}
