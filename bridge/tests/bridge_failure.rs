//! A bridge task whose source fails, panics or finishes, or whose chain fails in a mail.

mod common;

use std::sync::Arc;

use common::{Count, Probe, ProbeLog, SharedOutput, logged, values};
use streamtask_bridge::LegacySourceStreamTask;
use streamtask_core::operator::{Context, Map};
use streamtask_core::task::{TaskConfig, TaskError, TaskOutcome};
use streamtask_core::{
    OperatorError, StreamRecord, operator::Operator, time::Clock, time::ManualClock, time::Timer,
};
use streamtask_legacy::{SourceContext, SourceFunction};

/// Emits `good` records, then fails (or panics).
struct FailsAfter {
    good: u64,
    panic: bool,
}

impl SourceFunction for FailsAfter {
    type Out = u64;
    type State = ();
    fn name(&self) -> &str {
        "flaky"
    }
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        for n in 0..self.good {
            ctx.collect(n)?;
        }
        if self.panic {
            panic!("source exploded at {}", self.good);
        }
        Err(OperatorError::user("flaky", "disk on fire"))
    }
}

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("flaky"),
        FailsAfter {
            good: 5,
            panic: false,
        },
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    let outcome = task.join();
    let failure = outcome
        .failure()
        .expect("the source's error fails the task");
    // Reported through the mailbox, from the source's thread, with the source's own error.
    assert_eq!(failure.thread, "flaky-legacy-source");
    assert!(failure.to_string().contains("disk on fire"), "{failure}");
    assert_eq!(values(&output.snapshot()), vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_panicking_source_fails_the_task_with_the_panic_message() {
    let log: ProbeLog = Arc::default();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("boom"),
        FailsAfter {
            good: 2,
            panic: true,
        },
        Probe::new(&log),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    let outcome = task.join();
    match outcome.failure().map(|f| &f.error) {
        Some(TaskError::Panic(message)) => assert_eq!(message, "source exploded at 2"),
        other => panic!("expected a panic failure, got {other:?}"),
    }
    // A failed task closes its chain without finishing it.
    assert!(logged(&log, "finish").is_empty());
    assert_eq!(logged(&log, "close").len(), 1);
}

#[test]
fn a_finishing_source_finishes_the_chain_once_then_closes_it() {
    let log: ProbeLog = Arc::default();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("finite"),
        Count::to(20),
        Probe::new(&log),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    assert!(task.join().is_finished());
    let order: Vec<String> = log.lock().unwrap().iter().map(|(w, _)| w.clone()).collect();
    assert_eq!(order, vec!["open", "finish", "close"]);
    // `finish` runs on the task thread (after the source thread ended), not the source's.
    assert_eq!(logged(&log, "finish")[0].1, "finite");
}

/// Fails when its timer fires.
struct FailingTimer;

impl Operator for FailingTimer {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "failing-timer"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        ctx.register_timer(5, 0)?;
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
        Err(OperatorError::user("failing-timer", "timer went wrong"))
    }
}

#[test]
fn a_failing_mail_fails_the_task_and_stops_the_source() {
    let clock = ManualClock::new(0);
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("timer-fails").with_clock(Clock::Manual(clock.clone())),
        Count::forever(),
        FailingTimer,
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| !e.is_empty());
    clock.advance(10);
    let outcome = task.join();
    let failure = outcome.failure().expect("the timer's error fails the task");
    // A mail runs on the task (mailbox) thread.
    assert_eq!(failure.thread, "timer-fails");
    assert!(
        failure.to_string().contains("timer went wrong"),
        "{failure}"
    );
    assert!(!matches!(outcome, TaskOutcome::Cancelled));
}

/// Fails in `finish`.
struct FailingFinish;

impl Operator for FailingFinish {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "failing-finish"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn finish(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        Err(OperatorError::user("failing-finish", "cannot flush"))
    }
}

#[test]
fn a_chain_that_fails_to_finish_fails_the_task() {
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("finish-fails"),
        Count::to(3),
        FailingFinish,
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    let outcome = task.join();
    assert!(
        outcome
            .failure()
            .is_some_and(|f| f.to_string().contains("cannot flush"))
    );
}

/// Fails every snapshot.
struct FailingSnapshot;

impl Operator for FailingSnapshot {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "failing-snapshot"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        Err(OperatorError::user("failing-snapshot", "state too big"))
    }
}

/// A hot source runs a trigger itself before its next section (or the mailbox thread does,
/// whichever holds the lock first): a failing checkpoint fails the task either way, with its
/// cause, and declines that checkpoint.
#[test]
fn a_failing_checkpoint_fails_the_task_whoever_runs_it() {
    let output = SharedOutput::new();
    let (responder, reports) = common::responder("snapshot-fails");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("snapshot-fails").with_responder(responder),
        Count::forever(),
        FailingSnapshot,
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| !e.is_empty());
    task.trigger_checkpoint(streamtask_core::CheckpointBarrier::new(1, 0))
        .unwrap();
    let outcome = task.join();
    let failure = outcome
        .failure()
        .expect("the snapshot's error fails the task");
    assert_eq!(failure.thread, "snapshot-fails");
    assert!(failure.to_string().contains("state too big"), "{failure}");
    assert!(matches!(
        common::report(&reports),
        streamtask_core::task::TaskReport::Declined {
            checkpoint: 1,
            reason: streamtask_core::task::DeclineReason::Failed(_),
            ..
        }
    ));
}
