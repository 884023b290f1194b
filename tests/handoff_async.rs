//! A legacy `SourceFunction` moved to the mailbox model through a `HandoffReader` (with no
//! `with_context`: it keeps the source's time characteristic), chained with an async operator
//! in one mailbox task, under checkpoints and restarts: the committed output is exactly once,
//! and every record keeps its timestamp and its place after the watermarks before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use streamtask::JobPhase;
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask_bridge::HandoffReader;
use streamtask_core::async_io::{BlockingAsyncFunction, BlockingPool, OutputMode};

const END: u64 = 1_500;

/// An event-time source: record `n` at timestamp `n`, then watermark `n`; state and emits in
/// one locked section. It checks for an injected source fault before every record, and before
/// record `END / 2` waits a little (outside the lock, bounded) for a checkpoint to commit, so
/// the faults after it usually restore a real position.
struct Clicks {
    faults: Arc<FaultPlan>,
    committed: Arc<AtomicU64>,
}

impl SourceFunction for Clicks {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "clicks"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        let mut waited = false;
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == END {
                return Ok(());
            }
            if n == END / 2 && !waited {
                waited = true;
                drop(locked);
                for _ in 0..50 {
                    if self.committed.load(Ordering::Acquire) > 0 || ctx.is_cancelled() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            self.faults.check(FaultKind::Source);
            locked.collect_with_timestamp(n, n as i64)?;
            locked.emit_watermark(Watermark(n as i64))?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Emits `(value, timestamp, the last watermark before the record)`.
struct Stamp {
    watermark: i64,
}

impl Operator for Stamp {
    type In = u64;
    type Out = (u64, i64, i64);

    fn name(&self) -> &str {
        "stamp"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, (u64, i64, i64)>,
    ) -> Result<(), OperatorError> {
        let ts = record.timestamp.unwrap_or(i64::MIN);
        ctx.collect(StreamRecord::new((record.value, ts, self.watermark)))
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, (u64, i64, i64)>,
    ) -> Result<(), OperatorError> {
        self.watermark = watermark.timestamp();
        ctx.emit_watermark(watermark)
    }
}

fn run(faults: FaultPlan, mode: OutputMode) -> (Vec<(u64, i64, i64)>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(faults);
    let committed = Arc::new(AtomicU64::new(0));
    let pool = BlockingPool::new("times-ten", 2, 64).unwrap();
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = CollectHandle::new();
    let (source_faults, source_committed) = (Arc::clone(&faults), Arc::clone(&committed));
    let times_ten = {
        let (pool, faults) = (pool.clone(), Arc::clone(&faults));
        move |_subtask: usize| {
            let faults = Arc::clone(&faults);
            BlockingAsyncFunction::new(
                pool.clone(),
                || Ok(()),
                move |_: &mut (), n: &u64| {
                    faults.check(FaultKind::AsyncCompletion);
                    Ok(vec![n * 10])
                },
            )
        }
    };
    env.add_reader("clicks", move |_| {
        // No with_context: the reader keeps the source's own timestamps and watermarks.
        HandoffReader::new(Clicks {
            faults: Arc::clone(&source_faults),
            committed: Arc::clone(&source_committed),
        })
        .with_capacity(8)
    })
    .async_wait(
        "times ten",
        AsyncConfig::new(mode, 8).with_timeout(Duration::from_secs(30)),
        times_ten,
    )
    .operator(|_| Stamp {
        watermark: i64::MIN,
    })
    .collect_sink("collect", &out);
    let job = env.build().unwrap();
    // The reader, the async operator and the sink share one mailbox task.
    assert_eq!(job.vertices().len(), 1, "{}", job.plan());
    let counter = Arc::clone(&committed);
    let config = JobConfig::new(dir.path())
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                counter.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(5))
                .with_timeout(Duration::from_millis(250))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16);
    let result = job.run(&config).unwrap();
    pool.shutdown();
    assert_eq!(
        faults.fired(),
        faults.planned().len(),
        "every planned fault fired"
    );
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{:?}",
        result.failures
    );
    let mut got = out.committed();
    got.sort();
    (got, result.restarts)
}

fn check(got: &[(u64, i64, i64)]) {
    let values: Vec<u64> = got.iter().map(|&(v, _, _)| v).collect();
    assert_eq!(
        values,
        (0..END).map(|n| n * 10).collect::<Vec<_>>(),
        "exactly once"
    );
    for &(value, ts, watermark) in got {
        assert_eq!(ts, (value / 10) as i64, "the record kept its timestamp");
        assert!(
            watermark < ts,
            "watermark {watermark} overtook record @ {ts}"
        );
    }
    // Watermarks did flow: after the first record, every record saw the one before it.
    assert!(got.iter().any(|&(_, _, watermark)| watermark >= 0));
}

#[test]
fn smoke() {
    let (got, restarts) = run(FaultPlan::none(), OutputMode::Ordered);
    assert_eq!(restarts, 0);
    check(&got);
}

#[test]
fn a_handoff_reader_chained_with_an_async_operator_is_exactly_once_across_restarts() {
    for mode in [OutputMode::Ordered, OutputMode::Unordered] {
        let faults = FaultPlan::at(&[
            (FaultKind::Source, 400),
            (FaultKind::AsyncCompletion, 1_000),
            (FaultKind::Source, 1_300),
        ]);
        let (got, restarts) = run(faults, mode);
        assert!(restarts >= 2, "{mode:?}: the faults restarted the job");
        check(&got);
    }
}
