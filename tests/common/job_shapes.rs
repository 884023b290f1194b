//! The every-shape job and its parts, written once for `tests/job_shapes.rs` and
//! `examples/job_shapes.rs` (which includes this file with `#[path]`): a checkpointed legacy
//! counting source, the run configuration, a runner that builds a job under a model, runs it
//! with injected faults and returns the committed output, and the job with every shape of the
//! job API with the output it must commit.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask::JobPhase;
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;

/// The three models, in the order the runs go.
pub const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// A checkpointed legacy source: `0..end`, state and emit in one locked section; it checks
/// for an injected source fault before every record. Before record `end / 2` it waits a little,
/// outside the lock, for a checkpoint to be committed, so the faults after it usually restore a
/// real position rather than start over (the assertions do not depend on it).
pub struct Count {
    pub end: u64,
    pub faults: Arc<FaultPlan>,
    pub committed: Arc<AtomicU64>,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            if n == self.end / 2 && self.committed.load(Ordering::Acquire) == 0 {
                // Give a checkpoint a chance (outside the lock) before the second half, so the
                // faults after it usually restore a real position; bounded, never a hang.
                drop(locked);
                for _ in 0..50 {
                    if self.committed.load(Ordering::Acquire) > 0 || ctx.is_cancelled() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.committed.fetch_max(1, Ordering::AcqRel);
                continue;
            }
            self.faults.check(FaultKind::Source);
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Checkpoints every 10 ms (counted into `committed`) that expire after 250 ms (under load a
/// checkpoint triggered while the tasks start may never complete; expiring it lets the next
/// one run), up to 10 restarts 1 ms apart, small
/// channels (barriers wait behind little data), and a fair checkpoint lock: the legacy model's
/// default eventual fairness lets a hot source starve the checkpoint trigger for a whole short
/// run.
pub fn config(dir: &std::path::Path, committed: &Arc<AtomicU64>) -> JobConfig {
    let committed = Arc::clone(committed);
    JobConfig::new(dir)
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                committed.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(250))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
}

/// What a shape builds its job with.
pub struct Shape<'a, T> {
    pub env: &'a StreamEnvironment,
    pub faults: Arc<FaultPlan>,
    pub out: &'a CollectHandle<T>,
    /// Checkpoints committed so far in this run.
    pub committed: Arc<AtomicU64>,
}

/// Builds the job `shape` describes under `model`, runs it with `faults`, and returns the
/// committed output (sorted) and the restarts.
pub fn run<T, B>(model: Model, faults: FaultPlan, shape: B) -> (Vec<T>, u32, JobPlan)
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + Ord + 'static,
    B: Fn(&Shape<'_, T>),
{
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(faults);
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    let committed = Arc::new(AtomicU64::new(0));
    shape(&Shape {
        env: &env,
        faults: Arc::clone(&faults),
        out: &out,
        committed: Arc::clone(&committed),
    });
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let plan = job.plan();
    let result = job
        .run(&config(dir.path(), &committed))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(
        faults.fired(),
        faults.planned().len(),
        "{model}: not every planned fault fired"
    );
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    let mut got = out.committed();
    got.sort();
    (got, result.restarts, plan)
}

/// Event time of the first input's `n`: in order.
pub fn time_a(n: u64) -> i64 {
    n as i64 * 10
}

/// Event time of the second input's `n`: out of order by 10 ms (the strategy allows 50).
pub fn time_b(n: u64) -> i64 {
    n as i64 * 20 + if n.is_multiple_of(2) { 30 } else { 0 }
}

/// The end of the one-second event-time window holding `ts`.
pub fn window_end(ts: i64) -> i64 {
    ts / 1_000 * 1_000 + 999
}

/// Per key: `(window end, sum of the first input, count of the second)` of the windows still
/// open, and whether the key's (never due) processing-time timer is registered.
pub type JoinState = (Vec<(i64, u64, u64)>, bool);

/// Joins both inputs per key (`n % 8`) and event-time window: a window's result leaves when the
/// combined watermark passes its end. The second input's multiples of 7 also go to the side
/// output `sevens`. Every key registers a processing-time timer an hour ahead, which never
/// fires (pending timers do not fire at end of input); the end-of-input hook reports each key,
/// whether the final watermark came first, and its pending timers.
pub struct Join {
    pub faults: Arc<FaultPlan>,
    pub sevens: OutputTag<u64>,
}

impl Join {
    fn add(ctx: &mut KeyedContext<'_, '_, u64, JoinState, String>, a: u64, b: u64) {
        let end = window_end(ctx.timestamp().expect("the strategy assigned one"));
        if !ctx.state().1 {
            let at = ctx.processing_time() + 3_600_000;
            ctx.register_processing_timer(at);
            ctx.state().1 = true;
        }
        let windows = &mut ctx.state().0;
        match windows.iter_mut().find(|w| w.0 == end) {
            Some(w) => {
                w.1 += a;
                w.2 += b;
            }
            None => windows.push((end, a, b)),
        }
        ctx.register_event_timer(end);
    }
}

impl CoProcessFunction for Join {
    type Key = u64;
    type In1 = (u64, i64);
    type In2 = u64;
    type Out = String;
    type State = JoinState;

    fn process_element1(
        &mut self,
        (n, _): (u64, i64),
        ctx: &mut KeyedContext<'_, '_, u64, JoinState, String>,
    ) -> Result<(), OperatorError> {
        Self::add(ctx, n, 0);
        Ok(())
    }

    fn process_element2(
        &mut self,
        n: u64,
        ctx: &mut KeyedContext<'_, '_, u64, JoinState, String>,
    ) -> Result<(), OperatorError> {
        if n.is_multiple_of(7) {
            ctx.output(&self.sevens, n)?;
        }
        Self::add(ctx, 0, 1);
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, JoinState, String>,
    ) -> Result<(), OperatorError> {
        let key = *ctx.key();
        if domain == TimeDomain::ProcessingTime {
            return ctx.collect(format!("processing timer fired k={key}"));
        }
        self.faults.check(FaultKind::Timer);
        let windows = &mut ctx.state().0;
        if let Some(i) = windows.iter().position(|w| w.0 == timestamp) {
            let (end, a, b) = windows.remove(i);
            ctx.collect(format!("join k={key} w={end} a={a} b={b}"))?;
        }
        Ok(())
    }

    fn end_input(
        &mut self,
        ctx: &mut EndOfInputContext<'_, '_, u64, JoinState, String>,
    ) -> Result<(), OperatorError> {
        let after_max = ctx.current_watermark().is_max();
        let pending = ctx.pending_processing_timers();
        let keys: Vec<(u64, usize)> = ctx.states().map(|(k, s)| (*k, s.0.len())).collect();
        for (key, open) in keys {
            let timers = pending.iter().filter(|(_, k)| *k == key).count();
            ctx.collect(format!(
                "end k={key} after_max={after_max} pending={timers} open={open}"
            ))?;
        }
        Ok(())
    }
}

pub const A_END: u64 = 1_200;
pub const B_END: u64 = 600;

/// What the every-shape job commits: the join's windows and end reports, two copies of every
/// first-input value (broadcast to two subtasks), and the side output, each with the
/// timestamp a context-aware map read.
pub fn every_shape_expected() -> Vec<String> {
    use std::collections::BTreeMap;
    let mut windows: BTreeMap<(u64, i64), (u64, u64)> = BTreeMap::new();
    for n in 0..A_END {
        windows.entry((n % 8, window_end(time_a(n)))).or_default().0 += n;
    }
    for n in 0..B_END {
        windows.entry((n % 8, window_end(time_b(n)))).or_default().1 += 1;
    }
    let mut expected: Vec<String> = windows
        .iter()
        .map(|((k, w), (a, b))| format!("join k={k} w={w} a={a} b={b} @Some({w})"))
        .collect();
    expected.extend((0..8).map(|k| format!("end k={k} after_max=true pending=1 open=0 @None")));
    for n in 0..A_END {
        let copy = format!("copy {n} @Some({})", time_a(n));
        expected.push(copy.clone());
        expected.push(copy);
    }
    expected.extend(
        (0..B_END)
            .filter(|n| n % 7 == 0)
            .map(|n| format!("seven {n} @Some({})", time_b(n))),
    );
    expected
}

/// The job with every shape, written once for every model.
pub fn every_shape(s: &Shape<'_, String>) {
    let (faults, committed) = (Arc::clone(&s.faults), Arc::clone(&s.committed));
    let stamp_faults = Arc::clone(&s.faults);
    // A legacy source, event time assigned after it, read by a context-aware map.
    let mut first = s
        .env
        .add_source("count", move |_| Count {
            end: A_END,
            faults: Arc::clone(&faults),
            committed: Arc::clone(&committed),
        })
        .assign_timestamps_and_watermarks(
            // Periodic watermarks every 5 ms, so windows also close while the job runs.
            WatermarkStrategy::for_monotonous_timestamps()
                .with_timestamp_assigner(|n: &u64, _| time_a(*n))
                .with_auto_watermark_interval(Duration::from_millis(5)),
        )
        .map_with_context("stamp", move |n: u64, ctx: &RecordContext<'_>| {
            stamp_faults.check(FaultKind::Operator);
            (n, ctx.timestamp().expect("assigned"))
        })
        .fan_out(&["joined", "copied"]);
    let copied = first.pop().expect("two branches");
    let joined = first.pop().expect("two branches");
    // A reader with out-of-order event time and idleness, spread round robin.
    let second = s
        .env
        .from_sequence("second", 0..B_END)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(50))
                .with_timestamp_assigner(|n: &u64, _| time_b(*n))
                .with_idleness(Duration::from_secs(600)),
        )
        .rebalance("spread", 2);
    let sevens: OutputTag<u64> = OutputTag::new("sevens");
    let join_faults = Arc::clone(&s.faults);
    let join_sevens = sevens.clone();
    let windows = joined
        .connect(second)
        .key_by(|(n, _): &(u64, i64)| n % 8, |n: &u64| n % 8)
        .process("join", 2, move |_| Join {
            faults: Arc::clone(&join_faults),
            sevens: join_sevens.clone(),
        });
    let sevens = windows
        .side_output(&sevens)
        .map("seven", |n: u64| format!("seven {n}"));
    let copies = copied
        .rescale("rescaled", 2)
        .shuffle_random("shuffled", 2)
        .partition_custom("custom", 2, |(n, _): &(u64, i64), p| *n as usize % p)
        .broadcast("copies", 2)
        .global("global")
        .map("copy", |(n, _): (u64, i64)| format!("copy {n}"));
    windows
        .union("all", [copies, sevens])
        .map_with_context("time", |line: String, ctx: &RecordContext<'_>| {
            format!("{line} @{:?}", ctx.timestamp())
        })
        .collect_sink("collect", s.out);
}
