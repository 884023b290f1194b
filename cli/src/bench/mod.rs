//! `streamtask bench`: the model-comparison measurements of one machine in one run.
//!
//! Ratios from separate runs on a shared, noisy machine say little, so every measurement here
//! runs in the same process, in interleaved rounds (round 1 runs each measurement once, then
//! round 2, ...), and each figure is the median over the rounds. What is compared:
//!
//! | key | what | better |
//! |---|---|---|
//! | `source_task_vs_bare` | a mailbox `SourceStreamTask` through a map, ns/record, over a bare loop of the same steps | lower |
//! | `source_task_marginal_vs_bare` | the same without what a run costs once (spawn, join, a cold core): `(t(2N) - t(N)) / N` over the bare loop's ns/record; a reference next to `source_task_vs_bare`, which is unchanged | lower |
//! | `vs_tokio_batched_throughput` | the same task's records/s under 1 ms triggers over a tokio `select!` loop batching 1024 records | higher |
//! | `vs_tokio_batched_p99` | their trigger latency (scheduled -> snapshot), p99, task over tokio: each runner's samples of every round pooled into one histogram, the ratio of the two pooled p99s | lower |
//! | `vs_tokio_batched_p99_from_call` | the same from each trigger's call (the trigger thread's clock read right before it) instead of its scheduled time: the runners' own part, without the trigger thread's lateness; a reference | lower |
//! | `trigger_call_p50_us` | the mailbox `trigger_checkpoint` call on the triggering thread, median | lower |
//! | `put_take_vs_crossbeam` | crossbeam unbounded time over mailbox time, 1/2/4 producers, `take` and batch paths | higher |
//! | `async_littles_law` | async I/O (capacity 100, 1 ms) achieved over Little's bound | higher |
//! | `async_key_ordered_littles_law` | key-ordered async I/O (capacity 100, 1 ms) over Little's bound, with 1, 10 and 1,000 keys per model (one call per key in flight: with fewer keys than the capacity the figure is at most `keys / 100`) | higher |
//! | `async_fn_inflight_littles_law` | the keyed async-fn operator (mailbox model) awaiting a 1 ms reply per record, at in-flight caps 1, 100 and 1,000 (`{"1": .., "100": .., "1000": ..}`), records/s over Little's bound `cap / 1 ms` ([`async_fn`]) | higher |
//! | `async_zero_latency` | async I/O at zero latency (capacity 100), ns/record of the whole job, per model and mode, for three ways a call completes (below), each model's map task as the baseline, and legacy over mailbox | lower |
//! | `handoff_vs_legacy` | the `HandoffReader`'s records/s over the legacy task's, capacity 64 and 1024 | higher |
//! | `bridge_vs_legacy_trigger_p99` | trigger latency p99 under a hot legacy source, bridge over legacy: each runner's samples of every round pooled, the ratio of the two pooled p99s (as `vs_tokio_batched_p99`) | lower |
//! | `bridge_vs_legacy_trigger_p99_unfair` | the same with the checkpoint lock's `Fairness::Unfair` (a futex mutex with no hand-off: a Java monitor, Flink 1.9's lock) for both runners; a reference next to `bridge_vs_legacy_trigger_p99`, which stays on `Fairness::Eventual` (below) | lower |
//! | `legacy_bounded_handover_trigger_p99` | the same (pooled) for the legacy task with the bounded hand-over on, over legacy's default | lower |
//! | `unaligned_vs_aligned_p99` | the demo job under backpressure: checkpoint end-to-end p99 (trigger to completion at the coordinator) with unaligned checkpoints over aligned ones, `{mailbox, bridge}`, each runner's checkpoints of every round pooled | lower |
//! | `timely_vs_local_mailbox` | the demo job's records/s on timely (orders over wall time, start-up included, checkpoints every 50 ms, committed digest checked against the local run's) over the local mailbox executor's on the same data in the same round, timely on 1 process (1 worker, in this process) and on 2 processes (1 worker each, started as `run --engine timely` starts them): `{"1": .., "2": ..}` ([`timely_demo`]); scaling is not a target on a 2-core machine | higher |
//! | `timely_sample_vs_local_mailbox` | the same for the timely engine's sample job (many input files, timely's epochs capped at 100,000 records, output checked against the data; 2 processes started as `streamtask timely-worker`): `{"1": .., "2": ..}` ([`timely`]); a reference next to `timely_vs_local_mailbox` | higher |
//! | `interruptible_timers_mail_p99_us` | `{"on": .., "off": ..}`: p99 in us of an urgent mail (a source task's checkpoint trigger) waiting while a watermark fires 100,000 event-time timers, interruptible timers on and off; every round's samples pooled per setting ([`timers`]) | lower |
//!
//! Every trigger-latency measurement (the tasks' and the tokio peer's) sends its triggers from a
//! thread that waits for each deadline with [`clock::sleep_until`]: timer slack 1 ns, a sleep
//! until shortly before the deadline, then yields. A plain `std::thread::sleep` woke the trigger
//! thread up to milliseconds late while a core spins (the hot source), and that lateness, the
//! same for every runner, was most of every p99 and pulled every latency ratio towards 1. The
//! floor is lowered alike for every runner, so no ratio gains from it but by the models' own
//! differences.
//!
//! Trigger-latency p99s are not medians of per-round figures: a round has 2,000 triggers per
//! runner, and its p99 (the 20th-slowest) is set by whatever else the machine ran in those two
//! seconds, which differs between the runners' windows (the trigger thread's own lateness in a
//! window moved 2-3x from window to window on a loaded machine); the median of per-round
//! *ratios* of such p99s once read 2.39x while the medians of the p99s themselves were 233 us
//! (mailbox) and 353 us (tokio). Pooling every round's
//! samples (10,000 per runner in a full run) and alternating which runner goes first from round
//! to round gives each runner the same mix of machine states. `trigger_latency` has the pooled
//! figures behind the ratios, and the lateness of the trigger thread itself
//! (scheduled -> call), which is in every scheduled-time figure alike. The same holds for the
//! hot-source rows (legacy, bridge, legacy with the bounded hand-over): one preemption of the
//! legacy source moved a round's legacy p99 from 16 us to 7.9 ms, and with it the per-round
//! ratio from 0.2x to 0.001x.
//!
//! `bridge_vs_legacy_trigger_p99` runs both tasks with the lock's `Fairness::Eventual`
//! (parking_lot's: barging, with a forced hand-off about every 0.5 ms), which bounds how long
//! legacy's trigger waits behind a hot source. Flink 1.9's checkpoint lock is a Java monitor,
//! which has no such bound (a source re-taking it in a tight loop can starve the trigger): on
//! it both models' trigger p99s are in milliseconds. `bridge_vs_legacy_trigger_p99_unfair`
//! runs the same pair on `Fairness::Unfair` next to it, as a reference; the target stays on the
//! `Eventual` row.
//!
//! `async_zero_latency` has three rows per model and mode ([`async_io::ZeroLatency`]), each
//! model's map task as the baseline:
//!
//! - `routed`: every call completes inside `invoke` with the operator's inline completions off,
//!   so each completion takes the model's route (a completion mail; the emitter thread under
//!   the lock), as one from a client thread does. **The row's target** (mailbox <= 250
//!   ns/record, legacy <= 2x mailbox) applies here: it is about the operator's own cost per
//!   record, completion path included.
//! - `remote` (reference): a completer thread answers every call at once, so the completion
//!   comes from another thread. Its wall time is mostly the simulated service's, not the
//!   operator's: a call that finds the completer asleep wakes it (a futex wake), and the woken
//!   thread preempts the task thread, so a record costs a share of a sleep of the completer
//!   and of a preemption of the task thread (0.55 of each per record under the mailbox model,
//!   0.27 under the legacy one, in a `perf record -e context-switches` of 1,000,000 records),
//!   microseconds each on two cores.
//! - `inline` (reference): completed inside `invoke`, inline completions on (the default): no
//!   completion travels at all, only the engine's own cost is left.
//!
//! `unaligned_vs_aligned_p99` runs the demo job ([`backpressure`]) five times a round: legacy,
//! mailbox and bridge with aligned checkpoints, mailbox and bridge with unaligned ones (legacy's
//! unaligned checkpoints still wait for its source's checkpoint lock; `compare` shows them),
//! the order reversed every other round. Its p99s pool every
//! round's checkpoints per runner, as the trigger-latency rows do; the aligned p99 of every
//! model is in `backpressure_checkpoints`.
//!
//! The figures are for reading, never for asserting: CI runs `streamtask bench --quick` and
//! checks only that it completes and what keys the report has.

pub mod async_fn;
pub mod async_io;
pub mod backpressure;
pub mod clock;
pub mod hot_path;
pub mod models;
pub mod put_take;
pub mod sources;
pub mod timely;
pub mod timely_demo;
pub mod timers;
pub mod tokio_peer;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use streamtask_core::Alignment;
use streamtask_core::async_io::OutputMode;
use streamtask_core::metrics::LatencyHistogram;
use streamtask_core::time::InterruptibleTimers;
use streamtask_legacy::Fairness;

use async_io::ZeroLatency;
use models::Runner;
use put_take::Consumer;
use streamtask::Model;

/// Whether `cargo bench` runs the calling bench (it passes `--bench`); under `cargo test` the
/// benches only check that they run, on tiny inputs.
pub fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// How much `streamtask bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// Interleaved rounds; each figure is the median over them.
    pub rounds: usize,
    /// Tiny inputs (seconds, for CI): the figures mean little.
    pub quick: bool,
}

impl BenchConfig {
    /// The measurement: five rounds (about a minute on two cores).
    pub fn full() -> Self {
        BenchConfig {
            rounds: 5,
            quick: false,
        }
    }

    /// One round on tiny inputs: checks that everything runs, in seconds.
    pub fn quick() -> Self {
        BenchConfig {
            rounds: 1,
            quick: true,
        }
    }

    fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// One model's put/take against crossbeam.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PutTake {
    /// Producer threads.
    pub producers: u64,
    /// Crossbeam's time over the mailbox's with `take` per mail (>= 1: the mailbox is as fast).
    pub take: f64,
    /// The same for the processor's batch path.
    pub batch: f64,
}

/// Achieved over Little's bound, ordered and unordered.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AsyncModes {
    /// Ordered output.
    pub ordered: f64,
    /// Unordered output.
    pub unordered: f64,
}

/// Little's-law fractions of both models.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AsyncLittlesLaw {
    /// The legacy async operator (emitter thread under the lock).
    pub legacy: AsyncModes,
    /// The mailbox async operator (completion mails).
    pub mailbox: AsyncModes,
}

/// Key-ordered async I/O's fraction of Little's bound, by number of keys.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ByKeys {
    /// One key: one call at a time.
    #[serde(rename = "1")]
    pub one: f64,
    /// Ten keys.
    #[serde(rename = "10")]
    pub ten: f64,
    /// A thousand keys (the target row).
    #[serde(rename = "1000")]
    pub thousand: f64,
}

/// Key-ordered Little's-law fractions of both models.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AsyncKeyOrderedLittlesLaw {
    /// The legacy async operator.
    pub legacy: ByKeys,
    /// The mailbox async operator.
    pub mailbox: ByKeys,
}

/// A figure per model.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerModel {
    /// The legacy model.
    pub legacy: f64,
    /// The mailbox model.
    pub mailbox: f64,
}

/// A ratio per model that can choose its checkpoints' alignment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UnalignedVsAligned {
    /// The mailbox model.
    pub mailbox: f64,
    /// The bridge model.
    pub bridge: f64,
}

/// The demo job under backpressure: each runner's checkpoint end-to-end p99 (every round's
/// checkpoints pooled), in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BackpressureCheckpoints {
    /// Orders per run.
    pub orders: u64,
    /// Checkpoint interval, milliseconds.
    pub checkpoint_interval_ms: u64,
    /// Aligned checkpoints, every model.
    pub aligned_p99_us: PerModelAll,
    /// Unaligned checkpoints (the legacy model has none).
    pub unaligned_p99_us: UnalignedVsAligned,
    /// Checkpoints pooled, the fewest of any runner.
    pub fewest_checkpoints: u64,
}

/// A figure for each of the three models.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerModelAll {
    /// The legacy model.
    pub legacy: f64,
    /// The mailbox model.
    pub mailbox: f64,
    /// The bridge model.
    pub bridge: f64,
}

/// One way of completing zero-latency calls: ns/record of the whole job per model and mode,
/// and legacy's time over mailbox's (the median of the rounds' ratios).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ZeroLatencyRun {
    /// The legacy async operator, ns/record.
    pub legacy: AsyncModes,
    /// The mailbox async operator, ns/record.
    pub mailbox: AsyncModes,
    /// Legacy over mailbox.
    pub legacy_vs_mailbox: AsyncModes,
}

/// Async I/O at zero latency (see the module doc): what each model's operator costs per
/// record, completion path included.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AsyncZeroLatency {
    /// Records per run.
    pub records: u64,
    /// The operator's capacity.
    pub capacity: usize,
    /// Each model's map task, ns/record: the job without async I/O.
    pub map_ns: PerModel,
    /// Completed inside `invoke`, inline completions off, so each completion takes the model's
    /// route (from the task thread): the target's row.
    pub routed: ZeroLatencyRun,
    /// A completer thread answers every call at once (a reference: mostly the simulated
    /// service's own wake-ups).
    pub remote: ZeroLatencyRun,
    /// Completed inside `invoke`, inline completions on (the default): no route.
    pub inline: ZeroLatencyRun,
}

/// One runner's trigger latency under 1 ms triggers, every round's samples pooled, in
/// microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TriggerLatency {
    /// Samples pooled.
    pub samples: u64,
    /// Scheduled time -> snapshot, median.
    pub p50_us: f64,
    /// Scheduled time -> snapshot, 99th percentile.
    pub p99_us: f64,
    /// Scheduled time -> snapshot, 99.9th percentile.
    pub p999_us: f64,
    /// Call -> snapshot (the runner's own part), median.
    pub from_call_p50_us: f64,
    /// Call -> snapshot, 99th percentile.
    pub from_call_p99_us: f64,
    /// The trigger thread's lateness (scheduled -> call), 99th percentile: in every
    /// scheduled-time figure, the same for every runner.
    pub lateness_p99_us: f64,
}

/// One runner's trigger-latency histograms, every round's samples pooled (what
/// [`TriggerLatency`] summarizes).
#[derive(Debug)]
pub struct Pooled {
    latency: Histogram<u64>,
    from_call: Histogram<u64>,
    lateness: Histogram<u64>,
}

impl Default for Pooled {
    fn default() -> Self {
        Pooled {
            latency: models::new_histogram(),
            from_call: models::new_histogram(),
            lateness: models::new_histogram(),
        }
    }
}

impl Pooled {
    /// Adds one run's samples.
    pub fn add(&mut self, run: &models::TriggerRun) {
        for (pool, samples) in [
            (&mut self.latency, &run.latency),
            (&mut self.from_call, &run.from_call),
            (&mut self.lateness, &run.lateness),
        ] {
            pool.add(samples).expect("histograms of the same bounds");
        }
    }

    /// The pooled figures.
    pub fn summary(&self) -> TriggerLatency {
        let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
        TriggerLatency {
            samples: self.latency.len(),
            p50_us: us(&self.latency, 0.5),
            p99_us: us(&self.latency, 0.99),
            p999_us: us(&self.latency, 0.999),
            from_call_p50_us: us(&self.from_call, 0.5),
            from_call_p99_us: us(&self.from_call, 0.99),
            lateness_p99_us: us(&self.lateness, 0.99),
        }
    }
}

/// Everything one `streamtask bench` run measured (medians over its rounds).
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Rounds run.
    pub rounds: usize,
    /// Whether it was a quick run (tiny inputs).
    pub quick: bool,
    /// Source task ns/record over the bare loop's.
    pub source_task_vs_bare: f64,
    /// The source task's ns/record.
    pub source_task_ns: f64,
    /// The bare loop's ns/record.
    pub bare_ns: f64,
    /// The source task's marginal ns/record (`(t(2N) - t(N)) / N`: what a run costs once, its
    /// setup, cancels out) over the bare loop's.
    pub source_task_marginal_vs_bare: f64,
    /// The source task's marginal ns/record.
    pub source_task_marginal_ns: f64,
    /// Source task records/s under triggers over the tokio loop's (batched 1024).
    pub vs_tokio_batched_throughput: f64,
    /// Source task trigger p99 over the tokio loop's (batched 1024), each the p99 of every
    /// round's samples pooled.
    pub vs_tokio_batched_p99: f64,
    /// The same from each trigger's call instead of its scheduled time (the runners' own part).
    pub vs_tokio_batched_p99_from_call: f64,
    /// The same against the per-record tokio loop.
    pub vs_tokio_per_record_throughput: f64,
    /// The same against the per-record tokio loop.
    pub vs_tokio_per_record_p99: f64,
    /// Records/s (median over rounds) and trigger p99 (us, pooled over rounds) of each of:
    /// mailbox, tokio batched, tokio per record.
    pub trigger_runs: BTreeMap<String, (f64, f64)>,
    /// The pooled trigger latencies behind `trigger_runs`, by the same labels.
    pub trigger_latency: BTreeMap<String, TriggerLatency>,
    /// The mailbox `trigger_checkpoint` call, median, microseconds.
    pub trigger_call_p50_us: f64,
    /// Put/take against crossbeam, for 1, 2 and 4 producers.
    pub put_take_vs_crossbeam: Vec<PutTake>,
    /// Async I/O at capacity 100 and 1 ms latency: achieved over Little's bound.
    pub async_littles_law: AsyncLittlesLaw,
    /// Key-ordered async I/O at capacity 100 and 1 ms latency with 1, 10 and 1,000 keys:
    /// achieved over Little's bound.
    pub async_key_ordered_littles_law: AsyncKeyOrderedLittlesLaw,
    /// The keyed async-fn operator awaiting 1 ms per record: records/s over Little's bound, by
    /// in-flight cap ("1", "100", "1000").
    pub async_fn_inflight_littles_law: BTreeMap<String, f64>,
    /// Async I/O at capacity 100 and zero latency, ns/record.
    pub async_zero_latency: AsyncZeroLatency,
    /// The handoff reader's records/s over the legacy task's, by capacity ("64", "1024").
    pub handoff_vs_legacy: BTreeMap<String, f64>,
    /// Trigger p99 under a hot source: bridge over legacy (lock fairness `Eventual`), each of
    /// every round's samples pooled (their summaries are in `trigger_latency`).
    pub bridge_vs_legacy_trigger_p99: f64,
    /// The legacy and bridge pooled p99s (us) behind that ratio.
    pub legacy_trigger_p99_us: f64,
    /// See `legacy_trigger_p99_us`.
    pub bridge_trigger_p99_us: f64,
    /// The same ratio with the lock's fairness `Unfair` for both (a Java monitor, Flink 1.9's
    /// checkpoint lock): a reference next to `bridge_vs_legacy_trigger_p99`.
    pub bridge_vs_legacy_trigger_p99_unfair: f64,
    /// The legacy and bridge pooled p99s (us) behind the `Unfair` ratio.
    pub legacy_unfair_trigger_p99_us: f64,
    /// See `legacy_unfair_trigger_p99_us`.
    pub bridge_unfair_trigger_p99_us: f64,
    /// Trigger p99 under a hot source: the legacy task with the bounded hand-over on
    /// (`SourceStreamTask::with_bounded_handover(true)`) over the legacy default, same run.
    pub legacy_bounded_handover_trigger_p99: f64,
    /// The p99 (us) behind that ratio (the default's is `legacy_trigger_p99_us`).
    pub legacy_bounded_handover_trigger_p99_us: f64,
    /// The source's records/s under those triggers with the bounded hand-over on, over the
    /// default's: what asking the source to let go costs it.
    pub legacy_bounded_handover_throughput: f64,
    /// The demo job under backpressure: checkpoint end-to-end p99 with unaligned checkpoints
    /// over aligned ones, same run, every round's checkpoints pooled.
    pub unaligned_vs_aligned_p99: UnalignedVsAligned,
    /// The p99s behind that ratio, and each model's aligned one.
    pub backpressure_checkpoints: BackpressureCheckpoints,
    /// p99 in us of an urgent mail (a source task's checkpoint trigger) waiting while a
    /// watermark fires 100,000 event-time timers, with interruptible timers on and off.
    pub interruptible_timers_mail_p99_us: OnOff,
    /// Urgent mails measured for that row, on and off (every round pooled).
    pub interruptible_timers_mail_samples: OnOff,
    /// The demo job's records/s on timely over the local mailbox executor's, by processes
    /// ("1", "2"); `NaN` if a run failed (the reason is logged).
    pub timely_vs_local_mailbox: BTreeMap<String, f64>,
    /// The records/s behind that ratio: "local mailbox", "timely 1", "timely 2".
    pub timely_records_per_s: BTreeMap<String, f64>,
    /// The timely engine's sample job's records/s on timely over the local mailbox
    /// executor's, by processes ("1", "2"); `NaN` if a run failed (the reason is logged).
    pub timely_sample_vs_local_mailbox: BTreeMap<String, f64>,
    /// The records/s behind that ratio: "local mailbox", "timely 1", "timely 2".
    pub timely_sample_records_per_s: BTreeMap<String, f64>,
}

/// A figure with interruptible timers on and off.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OnOff {
    /// Interruptible timers on (chunks of the default size).
    pub on: f64,
    /// Off: the firing runs in one go.
    pub off: f64,
}

/// The median of `xs` (the upper one of an even count); `NaN` for none.
fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Samples per named figure, one per round.
#[derive(Default)]
struct Samples(BTreeMap<String, Vec<f64>>);

impl Samples {
    fn push(&mut self, name: impl Into<String>, value: f64) {
        self.0.entry(name.into()).or_default().push(value);
    }
    fn median(&self, name: &str) -> f64 {
        median(self.0.get(name).cloned().unwrap_or_default())
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Runs every measurement `config.rounds` times, interleaved, and reports the medians.
/// `progress` hears the name of each measurement as it starts.
///
/// # Panics
///
/// If a measured task fails (none of them should).
pub fn run(config: BenchConfig, mut progress: impl FnMut(usize, &str)) -> BenchReport {
    let records = config.pick(200_000, 5_000_000);
    let triggers = config.pick(50, 2_000);
    let interval = Duration::from_millis(1);
    let mails = config.pick(20_000, 200_000);
    let async_records = config.pick(2_000, 50_000);
    let key_ordered_records_per_key = config.pick(50, 500);
    let async_fn_per_cap = config.pick(20, 200);
    let zero_latency_records = config.pick(2_000, 250_000);
    let handoff_records = config.pick(100_000, 2_000_000);
    let backpressure_orders = config.pick(10_000, 20_000);
    let backpressure_interval = Duration::from_millis(config.pick(20, 50));
    let mut pooled_backpressure: Vec<backpressure::PooledDurations> = backpressure::RUNNERS
        .iter()
        .map(|_| backpressure::PooledDurations::default())
        .collect();
    // Generated once, before the rounds; the runs start over in it.
    let backpressure_job =
        backpressure::BackpressureJob::new(backpressure_orders, backpressure_interval);
    let mut s = Samples::default();
    let mut pooled_mailbox = Pooled::default();
    let mut pooled_batched = Pooled::default();
    let mut pooled_per_record = Pooled::default();
    let mut pooled_legacy = Pooled::default();
    let mut pooled_bridge = Pooled::default();
    let mut pooled_bounded = Pooled::default();
    let mut pooled_legacy_unfair = Pooled::default();
    let mut pooled_bridge_unfair = Pooled::default();
    let (timers_on, timers_off) = (LatencyHistogram::new(), LatencyHistogram::new());
    let timely_bench = timely::TimelyBench::new(config.pick(20_000, 400_000));
    let demo_timely_bench = timely_demo::DemoTimelyBench::new(config.pick(5_000, 100_000));
    for round in 0..config.rounds {
        progress(
            round,
            "the demo job on timely and on the local mailbox executor",
        );
        match demo_timely_bench
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|b| b.round())
        {
            Ok(r) => push_timely(&mut s, "timely", r),
            Err(e) => log::warn!("the demo-on-timely row's round {round} failed: {e}"),
        }
        progress(
            round,
            "the sample job on timely and on the local mailbox executor",
        );
        match timely_bench
            .as_ref()
            .map_err(ToString::to_string)
            .and_then(|b| b.round())
        {
            Ok(r) => push_timely(&mut s, "timely_sample", r),
            Err(e) => log::warn!("the timely sample row's round {round} failed: {e}"),
        }

        progress(round, "hot path");
        let bare = hot_path::bare_loop(records);
        let task = hot_path::source_task(records);
        s.push("bare_ns", secs(bare) * 1e9 / records as f64);
        s.push("task_ns", secs(task) * 1e9 / records as f64);
        s.push("task_vs_bare", secs(task) / secs(bare));
        let task_twice = hot_path::source_task(2 * records);
        let marginal = secs(task_twice) - secs(task);
        s.push("task_marginal_ns", marginal * 1e9 / records as f64);
        s.push("task_marginal_vs_bare", marginal / secs(bare));

        progress(round, "triggers: mailbox vs tokio select!");
        // Which runner goes first alternates, so neither always gets the same slot of a round.
        let (mailbox, batched, per_record) = if round % 2 == 0 {
            let mailbox =
                models::hot_triggers(Runner::Native, Fairness::Eventual, triggers, interval);
            let batched = tokio_peer::select_loop(1024, triggers, interval);
            let per_record = tokio_peer::select_loop(1, triggers, interval);
            (mailbox, batched, per_record)
        } else {
            let per_record = tokio_peer::select_loop(1, triggers, interval);
            let batched = tokio_peer::select_loop(1024, triggers, interval);
            let mailbox =
                models::hot_triggers(Runner::Native, Fairness::Eventual, triggers, interval);
            (mailbox, batched, per_record)
        };
        for (pool, run) in [
            (&mut pooled_mailbox, &mailbox),
            (&mut pooled_batched, &batched),
            (&mut pooled_per_record, &per_record),
        ] {
            pool.add(run);
        }
        s.push("mailbox_rps", mailbox.records_per_s);
        s.push("tokio_batched_rps", batched.records_per_s);
        s.push("tokio_per_record_rps", per_record.records_per_s);
        s.push("trigger_call_p50", mailbox.call_p50_us);
        s.push(
            "vs_tokio_batched_rps",
            mailbox.records_per_s / batched.records_per_s,
        );
        s.push(
            "vs_tokio_per_record_rps",
            mailbox.records_per_s / per_record.records_per_s,
        );

        progress(round, "mailbox put/take vs crossbeam");
        for (producers, take, batch) in [
            (1, "put_take_1", "put_batch_1"),
            (2, "put_take_2", "put_batch_2"),
            (4, "put_take_4", "put_batch_4"),
        ] {
            let crossbeam = put_take::crossbeam_run(producers, mails);
            let taken = put_take::mailbox_run(producers, mails, Consumer::Take);
            let batched = put_take::mailbox_run(producers, mails, Consumer::Batch);
            s.push(take, secs(crossbeam) / secs(taken));
            s.push(batch, secs(crossbeam) / secs(batched));
        }

        progress(round, "async I/O at Little's bound");
        for (model, mode, name) in [
            (Model::Legacy, OutputMode::Ordered, "async_legacy_ordered"),
            (Model::Mailbox, OutputMode::Ordered, "async_mailbox_ordered"),
            (
                Model::Legacy,
                OutputMode::Unordered,
                "async_legacy_unordered",
            ),
            (
                Model::Mailbox,
                OutputMode::Unordered,
                "async_mailbox_unordered",
            ),
        ] {
            let law =
                async_io::littles_law(model, mode, 100, Duration::from_millis(1), async_records);
            s.push(name, law.of_bound);
        }

        progress(round, "key-ordered async I/O at Little's bound");
        for model in [Model::Legacy, Model::Mailbox] {
            for keys in KEY_COUNTS {
                // One call per key in flight: few keys run at `keys / latency` records/s, so
                // their runs are shorter, to last about as long as the others.
                let records = async_records.min(keys * key_ordered_records_per_key);
                let law = async_io::key_ordered_littles_law(
                    model,
                    keys,
                    100,
                    Duration::from_millis(1),
                    records,
                );
                s.push(key_ordered_name(model, keys), law.of_bound);
            }
        }

        progress(round, "async-fn operator at Little's bound");
        for cap in async_fn::CAPS {
            // Calls of 1 ms: `cap * per_cap` records take about `per_cap` ms at the bound.
            let records = cap as u64 * async_fn_per_cap;
            let run = async_fn::littles_law(cap, Duration::from_millis(1), records);
            s.push(format!("async_fn_{cap}"), run.of_bound);
        }

        progress(round, "async I/O at zero latency");
        // Which model goes first alternates, so neither always gets the same slot.
        let models = if round % 2 == 0 {
            [Model::Legacy, Model::Mailbox]
        } else {
            [Model::Mailbox, Model::Legacy]
        };
        for model in models {
            let map = async_io::run(
                model,
                async_io::Chain::Map,
                async_io::Immediate,
                zero_latency_records,
            );
            s.push(
                zero_latency_name(model, None, OutputMode::Ordered),
                secs(map) * 1e9 / zero_latency_records as f64,
            );
        }
        for how in ZeroLatency::ALL {
            for mode in [OutputMode::Ordered, OutputMode::Unordered] {
                let mut ns = [0.0; 2];
                for model in models {
                    let time = async_io::zero_latency(
                        model,
                        mode,
                        ZERO_LATENCY_CAPACITY,
                        how,
                        zero_latency_records,
                    );
                    let figure = secs(time) * 1e9 / zero_latency_records as f64;
                    ns[usize::from(model == Model::Mailbox)] = figure;
                    s.push(zero_latency_name(model, Some(how), mode), figure);
                }
                s.push(zero_latency_ratio_name(how, mode), ns[0] / ns[1]);
            }
        }

        progress(round, "handoff vs legacy");
        let legacy = models::throughput(Runner::Legacy, handoff_records);
        for (capacity, name) in [(64, "handoff_64"), (1024, "handoff_1024")] {
            let handoff = models::throughput(Runner::Handoff(capacity), handoff_records);
            s.push(name, secs(legacy) / secs(handoff));
        }

        progress(
            round,
            "bridge and bounded hand-over vs legacy trigger latency",
        );
        // The runners' order alternates by round, and their p99s are of every round's
        // samples pooled per runner, as for the tokio peer: a per-round p99 of 2,000 samples is
        // the 20th worst, which one preemption of the other core moves by an order of magnitude.
        // The `Unfair` pair (Flink 1.9's lock; a reference) runs in the same rotation.
        let mut order = [
            (Runner::Legacy, Fairness::Eventual),
            (Runner::Bridge, Fairness::Eventual),
            (Runner::LegacyBoundedHandover, Fairness::Eventual),
            (Runner::Legacy, Fairness::Unfair),
            (Runner::Bridge, Fairness::Unfair),
        ];
        if round % 2 == 1 {
            order.reverse();
        }
        let (mut legacy_rps, mut bounded_rps) = (0.0, 0.0);
        for (runner, fairness) in order {
            let run = models::hot_triggers(runner, fairness, triggers, interval);
            match (runner, fairness) {
                (Runner::Legacy, Fairness::Eventual) => {
                    legacy_rps = run.records_per_s;
                    pooled_legacy.add(&run);
                }
                (Runner::Bridge, Fairness::Eventual) => pooled_bridge.add(&run),
                (Runner::Legacy, _) => pooled_legacy_unfair.add(&run),
                (Runner::Bridge, _) => pooled_bridge_unfair.add(&run),
                _ => {
                    bounded_rps = run.records_per_s;
                    pooled_bounded.add(&run);
                }
            }
        }
        s.push("bounded_vs_legacy_rps", bounded_rps / legacy_rps);

        progress(
            round,
            "demo job under backpressure: unaligned vs aligned checkpoints",
        );
        let mut order: Vec<usize> = (0..backpressure::RUNNERS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let durations = backpressure_job.run(backpressure::RUNNERS[i]);
            pooled_backpressure[i].add(&durations);
        }

        progress(
            round,
            "an urgent mail while a watermark fires 100,000 timers",
        );
        let mut settings = [
            (InterruptibleTimers::enabled(), &timers_on),
            (InterruptibleTimers::disabled(), &timers_off),
        ];
        if round % 2 == 1 {
            settings.reverse();
        }
        for (setting, pool) in settings {
            timers::urgent_mail_while_firing(FIRED_TIMERS, setting, pool);
        }
    }
    drop(backpressure_job);
    let bp_p99 = |model: Model, alignment: Alignment| {
        backpressure::RUNNERS
            .iter()
            .position(|r| r.model == model && r.alignment == alignment)
            .map_or(f64::NAN, |i| pooled_backpressure[i].p99_us())
    };
    let backpressure_checkpoints = BackpressureCheckpoints {
        orders: backpressure_orders,
        checkpoint_interval_ms: u64::try_from(backpressure_interval.as_millis())
            .unwrap_or(u64::MAX),
        aligned_p99_us: PerModelAll {
            legacy: bp_p99(Model::Legacy, Alignment::Aligned),
            mailbox: bp_p99(Model::Mailbox, Alignment::Aligned),
            bridge: bp_p99(Model::Bridge, Alignment::Aligned),
        },
        unaligned_p99_us: UnalignedVsAligned {
            mailbox: bp_p99(Model::Mailbox, Alignment::Unaligned),
            bridge: bp_p99(Model::Bridge, Alignment::Unaligned),
        },
        fewest_checkpoints: pooled_backpressure
            .iter()
            .map(backpressure::PooledDurations::count)
            .min()
            .unwrap_or(0),
    };
    let unaligned_vs_aligned_p99 = UnalignedVsAligned {
        mailbox: backpressure_checkpoints.unaligned_p99_us.mailbox
            / backpressure_checkpoints.aligned_p99_us.mailbox,
        bridge: backpressure_checkpoints.unaligned_p99_us.bridge
            / backpressure_checkpoints.aligned_p99_us.bridge,
    };
    let mut trigger_runs = BTreeMap::new();
    let mut trigger_latency = BTreeMap::new();
    for (label, rps, pooled) in [
        ("mailbox", "mailbox_rps", &pooled_mailbox),
        ("tokio batched 1024", "tokio_batched_rps", &pooled_batched),
        (
            "tokio per record",
            "tokio_per_record_rps",
            &pooled_per_record,
        ),
    ] {
        let summary = pooled.summary();
        trigger_runs.insert(label.to_string(), (s.median(rps), summary.p99_us));
        trigger_latency.insert(label.to_string(), summary);
    }
    let (mailbox, batched, per_record) = (
        pooled_mailbox.summary(),
        pooled_batched.summary(),
        pooled_per_record.summary(),
    );
    let (legacy, bridge, bounded) = (
        pooled_legacy.summary(),
        pooled_bridge.summary(),
        pooled_bounded.summary(),
    );
    let (legacy_unfair, bridge_unfair) = (
        pooled_legacy_unfair.summary(),
        pooled_bridge_unfair.summary(),
    );
    for (label, summary) in [
        ("legacy (hot source)", legacy),
        ("bridge (hot source)", bridge),
        ("legacy bounded hand-over (hot source)", bounded),
        ("legacy, lock Unfair (hot source)", legacy_unfair),
        ("bridge, lock Unfair (hot source)", bridge_unfair),
    ] {
        trigger_latency.insert(label.to_string(), summary);
    }
    BenchReport {
        rounds: config.rounds,
        quick: config.quick,
        source_task_vs_bare: s.median("task_vs_bare"),
        source_task_ns: s.median("task_ns"),
        bare_ns: s.median("bare_ns"),
        source_task_marginal_vs_bare: s.median("task_marginal_vs_bare"),
        source_task_marginal_ns: s.median("task_marginal_ns"),
        vs_tokio_batched_throughput: s.median("vs_tokio_batched_rps"),
        vs_tokio_batched_p99: mailbox.p99_us / batched.p99_us,
        vs_tokio_batched_p99_from_call: mailbox.from_call_p99_us / batched.from_call_p99_us,
        vs_tokio_per_record_throughput: s.median("vs_tokio_per_record_rps"),
        vs_tokio_per_record_p99: mailbox.p99_us / per_record.p99_us,
        trigger_runs,
        trigger_latency,
        trigger_call_p50_us: s.median("trigger_call_p50"),
        put_take_vs_crossbeam: [
            (1, "put_take_1", "put_batch_1"),
            (2, "put_take_2", "put_batch_2"),
            (4, "put_take_4", "put_batch_4"),
        ]
        .into_iter()
        .map(|(producers, take, batch)| PutTake {
            producers,
            take: s.median(take),
            batch: s.median(batch),
        })
        .collect(),
        async_littles_law: AsyncLittlesLaw {
            legacy: AsyncModes {
                ordered: s.median("async_legacy_ordered"),
                unordered: s.median("async_legacy_unordered"),
            },
            mailbox: AsyncModes {
                ordered: s.median("async_mailbox_ordered"),
                unordered: s.median("async_mailbox_unordered"),
            },
        },
        async_key_ordered_littles_law: AsyncKeyOrderedLittlesLaw {
            legacy: by_keys(&s, Model::Legacy),
            mailbox: by_keys(&s, Model::Mailbox),
        },
        async_fn_inflight_littles_law: async_fn::CAPS
            .iter()
            .map(|cap| (cap.to_string(), s.median(&format!("async_fn_{cap}"))))
            .collect(),
        async_zero_latency: AsyncZeroLatency {
            records: zero_latency_records,
            capacity: ZERO_LATENCY_CAPACITY,
            map_ns: PerModel {
                legacy: s.median(&zero_latency_name(Model::Legacy, None, OutputMode::Ordered)),
                mailbox: s.median(&zero_latency_name(
                    Model::Mailbox,
                    None,
                    OutputMode::Ordered,
                )),
            },
            routed: zero_latency_run(&s, ZeroLatency::Routed),
            remote: zero_latency_run(&s, ZeroLatency::Remote),
            inline: zero_latency_run(&s, ZeroLatency::Inline),
        },
        handoff_vs_legacy: [("64", "handoff_64"), ("1024", "handoff_1024")]
            .into_iter()
            .map(|(capacity, name)| (capacity.to_string(), s.median(name)))
            .collect(),
        bridge_vs_legacy_trigger_p99: bridge.p99_us / legacy.p99_us,
        legacy_trigger_p99_us: legacy.p99_us,
        bridge_trigger_p99_us: bridge.p99_us,
        bridge_vs_legacy_trigger_p99_unfair: bridge_unfair.p99_us / legacy_unfair.p99_us,
        legacy_unfair_trigger_p99_us: legacy_unfair.p99_us,
        bridge_unfair_trigger_p99_us: bridge_unfair.p99_us,
        legacy_bounded_handover_trigger_p99: bounded.p99_us / legacy.p99_us,
        legacy_bounded_handover_trigger_p99_us: bounded.p99_us,
        legacy_bounded_handover_throughput: s.median("bounded_vs_legacy_rps"),
        unaligned_vs_aligned_p99,
        backpressure_checkpoints,
        interruptible_timers_mail_p99_us: OnOff {
            on: timers_on.summary().p99 as f64,
            off: timers_off.summary().p99 as f64,
        },
        interruptible_timers_mail_samples: OnOff {
            on: timers_on.count() as f64,
            off: timers_off.count() as f64,
        },
        timely_vs_local_mailbox: timely_ratios(&s, "timely"),
        timely_records_per_s: timely_rates(&s, "timely"),
        timely_sample_vs_local_mailbox: timely_ratios(&s, "timely_sample"),
        timely_sample_records_per_s: timely_rates(&s, "timely_sample"),
    }
}

/// Adds one round of a timely row to the samples named after `prefix`.
fn push_timely(s: &mut Samples, prefix: &str, r: timely::TimelyRound) {
    s.push(format!("{prefix}_1_vs_local"), r.one / r.local);
    s.push(format!("{prefix}_2_vs_local"), r.two / r.local);
    s.push(format!("{prefix}_local_rps"), r.local);
    s.push(format!("{prefix}_1_rps"), r.one);
    s.push(format!("{prefix}_2_rps"), r.two);
}

/// A timely row's ratios by processes, from the samples named after `prefix`.
fn timely_ratios(s: &Samples, prefix: &str) -> BTreeMap<String, f64> {
    BTreeMap::from([
        ("1".to_string(), s.median(&format!("{prefix}_1_vs_local"))),
        ("2".to_string(), s.median(&format!("{prefix}_2_vs_local"))),
    ])
}

/// The records/s behind a timely row's ratios, from the samples named after `prefix`.
fn timely_rates(s: &Samples, prefix: &str) -> BTreeMap<String, f64> {
    BTreeMap::from([
        (
            "local mailbox".to_string(),
            s.median(&format!("{prefix}_local_rps")),
        ),
        ("timely 1".to_string(), s.median(&format!("{prefix}_1_rps"))),
        ("timely 2".to_string(), s.median(&format!("{prefix}_2_rps"))),
    ])
}

/// Event-time timers the watermark of the interruptible-timers row makes due.
const FIRED_TIMERS: u64 = 100_000;

/// The async operator's capacity in the zero-latency measurement (what the target assumes).
const ZERO_LATENCY_CAPACITY: usize = 100;

/// The sample name of a zero-latency figure in ns/record: the model's map task for
/// `how == None`, else its async operator completed as `how` says, in `mode`.
fn zero_latency_name(model: Model, how: Option<ZeroLatency>, mode: OutputMode) -> String {
    match how {
        None => format!("zero_map_{model}"),
        Some(how) => format!("zero_{}_{model}_{}", how.key(), mode_key(mode)),
    }
}

/// The sample name of legacy's zero-latency time over mailbox's.
fn zero_latency_ratio_name(how: ZeroLatency, mode: OutputMode) -> String {
    format!("zero_{}_ratio_{}", how.key(), mode_key(mode))
}

fn mode_key(mode: OutputMode) -> &'static str {
    match mode {
        OutputMode::Ordered => "ordered",
        OutputMode::Unordered => "unordered",
        OutputMode::KeyOrdered => "key_ordered",
    }
}

/// The key counts of the key-ordered Little's-law row.
const KEY_COUNTS: [u64; 3] = [1, 10, 1_000];

/// The sample name of a key-ordered Little's-law run.
fn key_ordered_name(model: Model, keys: u64) -> String {
    format!("async_{model}_key_ordered_{keys}")
}

/// The medians of one model's key-ordered Little's-law runs.
fn by_keys(s: &Samples, model: Model) -> ByKeys {
    ByKeys {
        one: s.median(&key_ordered_name(model, 1)),
        ten: s.median(&key_ordered_name(model, 10)),
        thousand: s.median(&key_ordered_name(model, 1_000)),
    }
}

/// The medians of one zero-latency row.
fn zero_latency_run(s: &Samples, how: ZeroLatency) -> ZeroLatencyRun {
    let modes = |model: Model| AsyncModes {
        ordered: s.median(&zero_latency_name(model, Some(how), OutputMode::Ordered)),
        unordered: s.median(&zero_latency_name(model, Some(how), OutputMode::Unordered)),
    };
    ZeroLatencyRun {
        legacy: modes(Model::Legacy),
        mailbox: modes(Model::Mailbox),
        legacy_vs_mailbox: AsyncModes {
            ordered: s.median(&zero_latency_ratio_name(how, OutputMode::Ordered)),
            unordered: s.median(&zero_latency_ratio_name(how, OutputMode::Unordered)),
        },
    }
}

/// A target's verdict.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

impl fmt::Display for BenchReport {
    /// The table of ratios, with the target each ratio is held to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "streamtask bench: {} round(s){}, medians",
            self.rounds,
            if self.quick {
                " (quick: tiny inputs, figures mean little)"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "{:<58} {:>12} {:>12}  verdict",
            "what", "measured", "target"
        )?;
        let mut row = |what: String, measured: String, target: &str, met: bool| {
            writeln!(
                f,
                "{what:<58} {measured:>12} {target:>12}  {}",
                verdict(met)
            )
        };
        row(
            format!(
                "source task vs bare loop ({:.2} vs {:.2} ns/record)",
                self.source_task_ns, self.bare_ns
            ),
            format!("{:.2}x", self.source_task_vs_bare),
            "<= 1.5x",
            self.source_task_vs_bare <= 1.5,
        )?;
        row(
            format!(
                "the same, marginal: t(2N) - t(N) ({:.2} ns/record; reference)",
                self.source_task_marginal_ns
            ),
            format!("{:.2}x", self.source_task_marginal_vs_bare),
            "-",
            true,
        )?;
        row(
            "records/s under 1 ms triggers vs tokio select! batched 1024".into(),
            format!("{:.2}x", self.vs_tokio_batched_throughput),
            ">= 1x",
            self.vs_tokio_batched_throughput >= 1.0,
        )?;
        let pooled = |label: &str| {
            self.trigger_latency
                .get(label)
                .copied()
                .map_or((f64::NAN, f64::NAN), |t| (t.p99_us, t.from_call_p99_us))
        };
        let (mailbox, batched) = (pooled("mailbox"), pooled("tokio batched 1024"));
        row(
            format!(
                "trigger p99 vs tokio select! batched 1024 (pooled: {:.0} vs {:.0} us)",
                mailbox.0, batched.0
            ),
            format!("{:.2}x", self.vs_tokio_batched_p99),
            "<= 1x",
            self.vs_tokio_batched_p99 <= 1.0,
        )?;
        row(
            format!(
                "  the same from the call ({:.1} vs {:.1} us; reference)",
                mailbox.1, batched.1
            ),
            format!("{:.2}x", self.vs_tokio_batched_p99_from_call),
            "-",
            true,
        )?;
        row(
            "records/s vs tokio select! per record (reference)".into(),
            format!("{:.2}x", self.vs_tokio_per_record_throughput),
            "-",
            true,
        )?;
        row(
            "trigger p99 vs tokio select! per record (reference)".into(),
            format!("{:.2}x", self.vs_tokio_per_record_p99),
            "-",
            true,
        )?;
        row(
            "trigger_checkpoint call p50".into(),
            format!("{:.3} us", self.trigger_call_p50_us),
            "<= 0.3 us",
            self.trigger_call_p50_us <= 0.3,
        )?;
        for p in &self.put_take_vs_crossbeam {
            row(
                format!("put/take vs crossbeam, {} producer(s): take", p.producers),
                format!("{:.2}x", p.take),
                ">= 0.8x",
                p.take >= 0.8,
            )?;
            row(
                format!("put/take vs crossbeam, {} producer(s): batch", p.producers),
                format!("{:.2}x", p.batch),
                ">= 0.8x",
                p.batch >= 0.8,
            )?;
        }
        let law = &self.async_littles_law;
        for (model, modes) in [("legacy", law.legacy), ("mailbox", law.mailbox)] {
            for (mode, value) in [("ordered", modes.ordered), ("unordered", modes.unordered)] {
                row(
                    format!("async I/O (C=100, 1 ms) of Little's bound: {model} {mode}"),
                    format!("{value:.3}"),
                    ">= 0.9",
                    value >= 0.9,
                )?;
            }
        }
        let keyed = &self.async_key_ordered_littles_law;
        for (model, by) in [("legacy", keyed.legacy), ("mailbox", keyed.mailbox)] {
            for (keys, value, target) in [
                (1, by.one, None),
                (10, by.ten, None),
                (1_000, by.thousand, Some(0.9)),
            ] {
                row(
                    format!(
                        "async key-ordered (C=100, 1 ms), {keys} key(s), of Little's bound: {model}{}",
                        if target.is_some() {
                            ""
                        } else {
                            "; reference (at most keys/100)"
                        }
                    ),
                    format!("{value:.3}"),
                    if target.is_some() { ">= 0.9" } else { "-" },
                    target.is_none_or(|t| value >= t),
                )?;
            }
        }
        for cap in async_fn::CAPS {
            let value = self
                .async_fn_inflight_littles_law
                .get(&cap.to_string())
                .copied()
                .unwrap_or(f64::NAN);
            // The target is at cap 100; the others show how it scales.
            let target = cap == 100;
            row(
                format!("async-fn keyed operator (1 ms) of Little's bound: cap {cap}"),
                format!("{value:.3}"),
                if target { ">= 0.8" } else { "-" },
                !target || value >= 0.8,
            )?;
        }
        let zero = &self.async_zero_latency;
        for (how, run, note) in [
            (ZeroLatency::Routed, zero.routed, "routed"),
            (ZeroLatency::Remote, zero.remote, "remote; reference"),
            (ZeroLatency::Inline, zero.inline, "inline; reference"),
        ] {
            let target = how == ZeroLatency::Routed;
            for (mode, mailbox, legacy, ratio) in [
                (
                    "ordered",
                    run.mailbox.ordered,
                    run.legacy.ordered,
                    run.legacy_vs_mailbox.ordered,
                ),
                (
                    "unordered",
                    run.mailbox.unordered,
                    run.legacy.unordered,
                    run.legacy_vs_mailbox.unordered,
                ),
            ] {
                row(
                    format!("async I/O zero latency {mode}, {note}: mailbox"),
                    format!("{mailbox:.0} ns"),
                    if target { "<= 250 ns" } else { "-" },
                    !target || mailbox <= 250.0,
                )?;
                row(
                    format!("  the same, legacy over mailbox ({legacy:.0} vs {mailbox:.0} ns)"),
                    format!("{ratio:.2}x"),
                    if target { "<= 2x" } else { "-" },
                    !target || ratio <= 2.0,
                )?;
            }
        }
        row(
            "  map task, no async I/O (baseline; legacy | mailbox ns/record)".into(),
            format!("{:.0} | {:.0}", zero.map_ns.legacy, zero.map_ns.mailbox),
            "-",
            true,
        )?;
        for (capacity, value) in &self.handoff_vs_legacy {
            row(
                format!("HandoffReader vs legacy task, capacity {capacity}"),
                format!("{value:.2}x"),
                ">= 0.5x",
                *value >= 0.5,
            )?;
        }
        row(
            format!(
                "bridge vs legacy trigger p99, hot source ({:.0} vs {:.0} us)",
                self.bridge_trigger_p99_us, self.legacy_trigger_p99_us
            ),
            format!("{:.3}x", self.bridge_vs_legacy_trigger_p99),
            "<= 0.1x",
            self.bridge_vs_legacy_trigger_p99 <= 0.1,
        )?;
        row(
            format!(
                "  the same, Unfair lock, Flink 1.9's ({:.0} vs {:.0} us)",
                self.bridge_unfair_trigger_p99_us, self.legacy_unfair_trigger_p99_us
            ),
            format!("{:.3}x", self.bridge_vs_legacy_trigger_p99_unfair),
            "-",
            true,
        )?;
        row(
            format!(
                "legacy bounded hand-over vs default trigger p99 ({:.0} vs {:.0} us)",
                self.legacy_bounded_handover_trigger_p99_us, self.legacy_trigger_p99_us
            ),
            format!("{:.3}x", self.legacy_bounded_handover_trigger_p99),
            "-",
            true,
        )?;
        row(
            "legacy bounded hand-over vs default records/s under triggers".into(),
            format!("{:.2}x", self.legacy_bounded_handover_throughput),
            "-",
            true,
        )?;
        let bp = &self.backpressure_checkpoints;
        for (model, ratio, unaligned, aligned, target) in [
            (
                "mailbox",
                self.unaligned_vs_aligned_p99.mailbox,
                bp.unaligned_p99_us.mailbox,
                bp.aligned_p99_us.mailbox,
                true,
            ),
            (
                "bridge",
                self.unaligned_vs_aligned_p99.bridge,
                bp.unaligned_p99_us.bridge,
                bp.aligned_p99_us.bridge,
                false,
            ),
        ] {
            row(
                format!(
                    "backpressure: unaligned/aligned p99, {model} ({:.0} vs {:.0} ms)",
                    unaligned / 1e3,
                    aligned / 1e3
                ),
                format!("{ratio:.3}x"),
                if target { "<= 0.1x" } else { "-" },
                !target || ratio <= 0.1,
            )?;
        }
        row(
            "  aligned checkpoint p99 (legacy | mailbox | bridge)".into(),
            format!(
                "{:.0} | {:.0} | {:.0} ms",
                bp.aligned_p99_us.legacy / 1e3,
                bp.aligned_p99_us.mailbox / 1e3,
                bp.aligned_p99_us.bridge / 1e3
            ),
            "-",
            true,
        )?;
        let (on, off) = (
            self.interruptible_timers_mail_p99_us,
            self.interruptible_timers_mail_samples,
        );
        row(
            format!(
                "urgent mail p99 while 100k timers fire, on | off ({:.0} | {:.0} samples)",
                off.on, off.off
            ),
            format!("{:.0} | {:.0} us", on.on, on.off),
            "on < off",
            on.on < on.off,
        )?;
        for (job, ratios, target) in [
            ("demo job", &self.timely_vs_local_mailbox, Some(0.5)),
            ("sample job", &self.timely_sample_vs_local_mailbox, None),
        ] {
            for processes in ["1", "2"] {
                let value = ratios.get(processes).copied().unwrap_or(f64::NAN);
                let target = target.filter(|_| processes == "1");
                row(
                    format!("{job} on timely, {processes} process(es), over local mailbox"),
                    format!("{value:.3}"),
                    if target.is_some() { ">= 0.5" } else { "-" },
                    target.is_none_or(|t| value >= t),
                )?;
            }
        }
        for (job, rates) in [
            ("demo job", &self.timely_records_per_s),
            ("sample job", &self.timely_sample_records_per_s),
        ] {
            for (label, rps) in rates {
                writeln!(f, "  {job}: {label:<20} {rps:>14.0} records/s")?;
            }
        }
        for (label, (rps, p99)) in &self.trigger_runs {
            writeln!(
                f,
                "  under triggers: {label:<20} {rps:>14.0} records/s  p99 {p99:>9.1} us"
            )?;
        }
        for (label, t) in &self.trigger_latency {
            writeln!(
                f,
                "  trigger latency, {label:<20} {:>6} samples: p50 {:.1} p99 {:.1} p99.9 {:.1} us; \
                 from the call p50 {:.1} p99 {:.1} us; trigger thread late p99 {:.1} us",
                t.samples,
                t.p50_us,
                t.p99_us,
                t.p999_us,
                t.from_call_p50_us,
                t.from_call_p99_us,
                t.lateness_p99_us
            )?;
        }
        Ok(())
    }
}
