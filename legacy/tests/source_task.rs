//! `SourceStreamTask`: a source on the task thread with a chain behind it (ports of Flink's
//! `SourceStreamTaskTest` and `StreamTaskTest` behaviours).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use common::{HANG_GUARD, SharedOutput, responder, values, wait_running};
use streamtask_core::operator::{Context, Emitted, Map, Operator};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, Watermark, state::TaskSnapshot,
    time::ManualClock, time::Timer,
};
use streamtask_legacy::{Fairness, SourceContext, SourceFunction, SourceStreamTask};

/// Emits `0..limit` (or forever), counting in its checkpointed state under the guard.
struct Counter {
    limit: Option<u64>,
}

impl SourceFunction for Counter {
    type Out = u64;
    type State = u64;
    fn name(&self) -> &str {
        "counter"
    }
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if Some(n) == self.limit {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

fn identity() -> Map<u64, u64, fn(u64) -> u64> {
    Map::new("identity", |n| n)
}

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("smoke"),
        Counter { limit: Some(3) },
        Map::new("double", |n: u64| n * 2),
        output.clone(),
    )
    .spawn();
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(
        output.take(),
        vec![
            Emitted::Record(StreamRecord::new(0)),
            Emitted::Record(StreamRecord::new(2)),
            Emitted::Record(StreamRecord::new(4)),
            Emitted::Watermark(Watermark::MAX),
            Emitted::EndOfInput,
        ]
    );
    assert_eq!(metrics.records_in.get(), 3);
    assert_eq!(metrics.records_out.get(), 3);
    assert_eq!(metrics.threads.get(), 3);
}

/// `SourceStreamTaskTest#testCheckpointing`: a source that updates its count and emits under
/// the guard is never snapshotted mid-update, while checkpoints fire every few milliseconds;
/// every snapshot's count equals the records before its barrier, and the output is the last
/// snapshot's count plus what followed it.
#[test]
fn snapshots_never_see_half_an_update_while_checkpoints_fire_continuously() {
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        let output = SharedOutput::new();
        let (responder, reports) = responder("count");
        let config = TaskConfig::new("count").with_responder(responder);
        let task =
            SourceStreamTask::new(config, Counter { limit: None }, identity(), output.clone())
                .with_fairness(fairness)
                .spawn();
        wait_running(&task);
        let mut acked = Vec::new();
        for id in 1..=20u64 {
            task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
                .unwrap();
            match reports.recv_timeout(HANG_GUARD).expect("a report") {
                TaskReport::Acknowledged {
                    snapshot,
                    checkpoint,
                    ..
                } => {
                    let count: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
                    acked.push((checkpoint, count));
                }
                other => panic!("unexpected report {other:?}"),
            }
            thread::sleep(Duration::from_millis(2));
        }
        task.cancel();
        assert!(matches!(
            task.join(),
            streamtask_core::task::TaskOutcome::Cancelled
        ));
        let emitted = output.take();
        let mut before = 0u64;
        let mut by_barrier = Vec::new();
        for e in &emitted {
            match e {
                Emitted::Record(r) => {
                    assert_eq!(r.value, before, "records are consecutive");
                    before += 1;
                }
                Emitted::Barrier(b) => by_barrier.push((b.id, before)),
                _ => {}
            }
        }
        assert_eq!(by_barrier, acked, "{fairness:?}");
        let (_, last) = *acked.last().unwrap();
        let after_last = emitted
            .iter()
            .skip_while(|e| !matches!(e, Emitted::Barrier(b) if b.id == 20))
            .filter(|e| matches!(e, Emitted::Record(_)))
            .count() as u64;
        assert_eq!(before, last + after_last);
        assert!(
            !emitted.contains(&Emitted::EndOfInput),
            "a cancelled source does not end its output"
        );
    }
}

#[test]
fn a_restored_source_continues_from_its_snapshot() {
    let mut snapshot = TaskSnapshot::new();
    snapshot.put_value(TaskSnapshot::SOURCE, &7u64).unwrap();
    let output = SharedOutput::new();
    let config = TaskConfig::new("restored").with_restore(Some(snapshot));
    let task = SourceStreamTask::new(
        config,
        Counter { limit: Some(10) },
        identity(),
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    assert_eq!(values(&output.take()), vec![7, 8, 9]);
}

#[test]
fn a_trigger_after_the_task_ended_is_declined_as_not_running() {
    let (responder, reports) = responder("done");
    let config = TaskConfig::new("done").with_responder(responder);
    let task = SourceStreamTask::new(
        config,
        Counter { limit: Some(1) },
        identity(),
        SharedOutput::new(),
    )
    .spawn();
    while !task.is_done() {
        thread::yield_now();
    }
    task.trigger_checkpoint(CheckpointBarrier::new(5, 0))
        .unwrap();
    match reports.recv_timeout(HANG_GUARD).unwrap() {
        TaskReport::Declined {
            checkpoint, reason, ..
        } => {
            assert_eq!((checkpoint, reason), (5, DeclineReason::NotRunning));
        }
        other => panic!("unexpected report {other:?}"),
    }
    assert!(task.join().is_finished());
}

#[test]
fn a_failing_source_fails_the_task_with_its_error_and_thread() {
    struct Failing;
    impl SourceFunction for Failing {
        type Out = u64;
        type State = ();
        fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
            ctx.collect(1)?;
            Err(OperatorError::user("failing", "disk on fire"))
        }
    }
    let task = SourceStreamTask::new(
        TaskConfig::new("failing"),
        Failing,
        identity(),
        SharedOutput::new(),
    )
    .spawn();
    let outcome = task.join();
    let failure = outcome.failure().expect("failed");
    assert_eq!(failure.thread, "failing");
    assert!(failure.to_string().contains("disk on fire"), "{failure}");
}

#[test]
fn a_panicking_source_fails_the_task_with_the_panic_message() {
    struct Panicking;
    impl SourceFunction for Panicking {
        type Out = u64;
        type State = ();
        fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
            let _locked = ctx.lock(); // unwinding must release the lock
            panic!("source exploded");
        }
    }
    let task = SourceStreamTask::new(
        TaskConfig::new("panicking"),
        Panicking,
        identity(),
        SharedOutput::new(),
    )
    .spawn();
    let outcome = task.join();
    let failure = outcome.failure().expect("failed");
    assert!(matches!(&failure.error, TaskError::Panic(m) if m == "source exploded"));
}

/// Records lifecycle calls and timer/notification arrivals; checks they come after `open`.
struct Probe {
    opened: Arc<AtomicBool>,
    early: Arc<AtomicBool>,
    completed: Arc<AtomicU64>,
    fired: Arc<AtomicU64>,
}

impl Operator for Probe {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "probe"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        // A timer in the past fires at once, but not before `open` returned (the lock is held).
        ctx.register_timer(0, 1)?;
        thread::sleep(Duration::from_millis(5));
        self.opened.store(true, Ordering::SeqCst);
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn on_processing_time(
        &mut self,
        _timer: Timer,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if !self.opened.load(Ordering::SeqCst) {
            self.early.store(true, Ordering::SeqCst);
        }
        self.fired.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.completed.store(id, Ordering::SeqCst);
        Ok(())
    }
}

/// Waits until the source is cancelled, holding nothing.
struct UntilCancelled;

impl SourceFunction for UntilCancelled {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        ctx.cancellation().wait();
        Ok(())
    }
}

#[test]
fn the_chain_is_open_before_any_timer_fires_and_completion_notices_arrive() {
    let probe = Probe {
        opened: Arc::default(),
        early: Arc::default(),
        completed: Arc::default(),
        fired: Arc::default(),
    };
    let (early, completed, fired) = (
        probe.early.clone(),
        probe.completed.clone(),
        probe.fired.clone(),
    );
    let task = SourceStreamTask::new(
        TaskConfig::new("probe"),
        UntilCancelled,
        probe,
        SharedOutput::new(),
    )
    .spawn();
    wait_running(&task);
    task.notify_checkpoint_complete(4);
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while completed.load(Ordering::SeqCst) != 4 || fired.load(Ordering::SeqCst) != 1 {
        assert!(std::time::Instant::now() < deadline, "hang guard");
        thread::sleep(Duration::from_millis(1));
    }
    task.cancel();
    assert!(matches!(
        task.join(),
        streamtask_core::task::TaskOutcome::Cancelled
    ));
    assert_eq!(completed.load(Ordering::SeqCst), 4);
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    assert!(
        !early.load(Ordering::SeqCst),
        "a timer fired before open returned"
    );
}

#[test]
fn ingestion_time_sources_get_processing_time_stamps_and_automatic_watermarks() {
    let clock = ManualClock::new(1_000);
    struct Two;
    impl SourceFunction for Two {
        type Out = u64;
        type State = ();
        fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
            ctx.collect(1)?;
            ctx.collect(2)
        }
    }
    let output = SharedOutput::new();
    let config = TaskConfig::new("ingest").with_clock(streamtask_core::time::Clock::Manual(clock));
    let context =
        streamtask_legacy::SourceContextConfig::ingestion_time(Duration::from_millis(100)).unwrap();
    let task = SourceStreamTask::new(config, Two, identity(), output.clone())
        .with_context(context)
        .spawn();
    assert!(task.join().is_finished());
    assert_eq!(
        output.take(),
        vec![
            Emitted::Record(StreamRecord::with_timestamp(1, 1_000)),
            Emitted::Watermark(Watermark(1_000)),
            Emitted::Record(StreamRecord::with_timestamp(2, 1_000)),
            Emitted::Watermark(Watermark::MAX),
            Emitted::EndOfInput,
        ]
    );
}

#[test]
fn trigger_latency_and_checkpoint_metrics_are_recorded() {
    let (responder, reports) = responder("m");
    let config = TaskConfig::new("m").with_responder(responder);
    let task =
        SourceStreamTask::new(config, UntilCancelled, identity(), SharedOutput::new()).spawn();
    wait_running(&task);
    for id in 1..=3 {
        task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .unwrap();
        assert!(matches!(
            reports.recv_timeout(HANG_GUARD).unwrap(),
            TaskReport::Acknowledged { .. }
        ));
    }
    let metrics = Arc::clone(task.metrics());
    task.cancel();
    let _ = task.join();
    assert_eq!(metrics.checkpoints.get(), 3);
    assert_eq!(metrics.checkpoint_delay.count(), 3);
    assert_eq!(metrics.checkpoint_duration.count(), 3);
}
