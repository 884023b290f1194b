//! Checkpoint-trigger and timer latency (enqueue -> run) while the default action runs flat out:
//! a source task whose reader always has a record, through a map, into a discarding output.
//!
//! `cargo bench -p streamtask-mailbox --bench latency`
//!
//! - **checkpoints**: this thread calls `trigger_checkpoint` on absolute deadlines (every
//!   500 us from a fixed start, so a slow trigger does not shift the later ones); the task
//!   measures trigger call -> snapshot start (`checkpoint_delay`), this thread trigger call ->
//!   acknowledgement seen (which includes this thread's own wake-up from the channel: on a busy
//!   machine, scheduler latency).
//! - **timers**: the operator registers one processing-time timer per millisecond on absolute
//!   timestamps; the task measures timer mail enqueue -> run (`mailbox_latency`; timer mails are
//!   the only mails in this phase) and due time -> callback (`timer_lateness`, which includes
//!   the timer thread's wake-up).
//!
//! The first 200 samples of each phase are a warm-up and are subtracted from the histograms.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use streamtask_core::metrics::{LatencyHistogram, LatencySummary};
use streamtask_core::operator::Discard;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, operator::Context, operator::Operator,
    time::Clock, time::Timer,
};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};

const TRIGGER_PERIOD: Duration = Duration::from_micros(500);

/// Warm-up and measured samples per phase; `cargo test --all-targets` (no `--bench` argument)
/// runs a short smoke version instead of the measurement.
#[derive(Clone, Copy)]
struct Samples {
    warmup: u64,
    measured: u64,
}

/// Always has a record: the default action never waits.
struct Endless(u64);

impl SourceReader<u64> for Endless {
    fn name(&self) -> &str {
        "endless"
    }
    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        self.0 = self.0.wrapping_add(1);
        out.collect(self.0)?;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.0.to_le_bytes().to_vec())
    }
}

/// Triples records; registers `count` timers, one per millisecond from `first` on.
struct Timed {
    first: i64,
    count: u64,
    fired: Arc<AtomicU64>,
}

impl Operator for Timed {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "timed"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        for i in 0..self.count {
            ctx.register_timer(self.first + i as i64, i)?;
        }
        Ok(())
    }
    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(|x| x.wrapping_mul(3)))
    }
    fn on_processing_time(
        &mut self,
        _timer: Timer,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.fired.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

fn minus(histogram: &LatencyHistogram, warmup: &Histogram<u64>) -> LatencySummary {
    let mut all = histogram.to_histogram();
    all.subtract(warmup)
        .expect("the warm-up is part of the whole");
    LatencySummary::of(&all)
}

fn row(what: &str, s: &LatencySummary) {
    println!(
        "{what:<44} n={:>5}  p50={:>6} us  p99={:>6} us  p99.9={:>6} us  max={:>6} us",
        s.count, s.p50, s.p99, s.p999, s.max
    );
}

fn checkpoints(Samples { warmup, measured }: Samples) {
    let (reports_tx, reports) = crossbeam::channel::unbounded();
    let task = SourceStreamTask::new(
        TaskConfig::new("latency-checkpoints")
            .with_responder(CheckpointResponder::new("latency-checkpoints", reports_tx)),
        Endless(0),
        streamtask_core::operator::Map::new("triple", |x: u64| x.wrapping_mul(3)),
        Discard,
    )
    .spawn();
    let metrics = Arc::clone(task.metrics());
    let mut acked = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
    let mut warm = None;
    let start = Instant::now() + Duration::from_millis(20);
    for i in 0..warmup + measured {
        if i == warmup {
            warm = Some((
                metrics.checkpoint_delay.histogram().to_histogram(),
                Instant::now(),
                metrics.records_in.get(),
            ));
            acked.reset();
        }
        sleep_until(start + TRIGGER_PERIOD * i as u32);
        let triggered = Instant::now();
        task.trigger_checkpoint(CheckpointBarrier::new(i + 1, 0))
            .expect("a source task");
        match reports.recv().expect("the task reports") {
            TaskReport::Acknowledged { .. } => {
                let micros = triggered.elapsed().as_micros() as u64;
                acked.saturating_record(micros.max(1));
            }
            TaskReport::Declined { reason, .. } => panic!("declined: {reason}"),
        }
    }
    let (warm, measured_from, records_before) = warm.expect("warm-up ran");
    let rate =
        (metrics.records_in.get() - records_before) as f64 / measured_from.elapsed().as_secs_f64();
    task.cancel();
    task.join();
    println!(
        "checkpoints every {} us while the reader runs flat out ({:.1} M records/s)",
        TRIGGER_PERIOD.as_micros(),
        rate / 1e6
    );
    row(
        "  trigger call -> snapshot start",
        &minus(metrics.checkpoint_delay.histogram(), &warm),
    );
    row(
        "  trigger call -> ack seen by this thread",
        &LatencySummary::of(&acked),
    );
}

fn timers(Samples { warmup, measured }: Samples) {
    let fired = Arc::new(AtomicU64::new(0));
    let first = Clock::System.now_millis() + 50;
    let task = SourceStreamTask::new(
        TaskConfig::new("latency-timers"),
        Endless(0),
        Timed {
            first,
            // A few spare timers so that at least `measured` fire after the warm-up snapshot.
            count: warmup + measured + 10,
            fired: Arc::clone(&fired),
        },
        Discard,
    )
    .spawn();
    let metrics = Arc::clone(task.metrics());
    while fired.load(Ordering::Relaxed) < warmup {
        std::thread::sleep(Duration::from_millis(1));
    }
    let warm_mail = metrics.mailbox_latency.to_histogram();
    let warm_late = metrics.timer_lateness.to_histogram();
    let measured_from = Instant::now();
    let records_before = metrics.records_in.get();
    while fired.load(Ordering::Relaxed) < warmup + measured + 10 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let rate =
        (metrics.records_in.get() - records_before) as f64 / measured_from.elapsed().as_secs_f64();
    task.cancel();
    task.join();
    println!(
        "timers (one per ms) while the reader runs flat out ({:.1} M records/s)",
        rate / 1e6
    );
    row(
        "  timer mail enqueue -> run",
        &minus(&metrics.mailbox_latency, &warm_mail),
    );
    row(
        "  timer due -> callback (incl. timer thread)",
        &minus(&metrics.timer_lateness, &warm_late),
    );
}

fn main() {
    let samples = if std::env::args().any(|arg| arg == "--bench") {
        Samples {
            warmup: 200,
            measured: 2_000,
        }
    } else {
        Samples {
            warmup: 10,
            measured: 50,
        }
    };
    checkpoints(samples);
    timers(samples);
}
