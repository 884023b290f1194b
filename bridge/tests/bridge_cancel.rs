//! Cancelling a bridge task: a source blocked while holding the checkpoint lock (with and
//! without a mail waiting for that lock, FLINK-15076), a source that ignores cancellation
//! (reported after the grace period, FLINK-15467), errors of a cancelled source (FLINK-15811).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::{Count, Probe, ProbeLog, SharedOutput, logged, report, responder, wait_until};
use streamtask_bridge::LegacySourceStreamTask;
use streamtask_core::operator::{Context, Map};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError, TaskOutcome, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, operator::Operator};
use streamtask_legacy::{SourceContext, SourceFunction};

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("count"),
        Count::forever(),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| e.len() > 10);
    task.cancel();
    task.cancel(); // idempotent
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

/// Takes the lock, says so, then blocks until cancelled while still holding it (Flink's
/// `testCancellationWithSourceBlockedOnLock`).
struct BlocksHoldingTheLock {
    holding: mpsc::Sender<()>,
}

impl SourceFunction for BlocksHoldingTheLock {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        let token = ctx.cancellation().clone();
        let mut locked = ctx.lock();
        locked.collect(1)?;
        *locked.state_mut() = 1;
        self.holding.send(()).unwrap();
        token.wait(); // blocks with the lock held; only cancellation reaches it
        Ok(())
    }
}

fn blocked_task(
    name: &str,
    log: &ProbeLog,
) -> (streamtask_runtime::TaskHandle, mpsc::Receiver<()>) {
    let (holding, held) = mpsc::channel();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new(name),
        BlocksHoldingTheLock { holding },
        Probe::new(log),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    (task, held)
}

#[test]
fn cancellation_with_the_source_blocked_on_the_lock() {
    let log: ProbeLog = Arc::default();
    let (task, held) = blocked_task("blocked", &log);
    held.recv().unwrap();
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    assert_eq!(logged(&log, "close").len(), 1);
}

#[test]
fn cancellation_with_the_source_blocked_on_the_lock_and_a_mail_waiting_for_it() {
    let log: ProbeLog = Arc::default();
    let (responder, reports) = responder("blocked-with-mail");
    let (holding, held) = mpsc::channel();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("blocked-with-mail").with_responder(responder),
        BlocksHoldingTheLock { holding },
        Probe::new(&log),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    held.recv().unwrap();
    // The trigger mail needs the lock the source holds: the mailbox thread waits for it.
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    task.notify_checkpoint_complete(0);
    // Give the mailbox thread a chance to reach the lock (not needed for the assertions, which
    // hold in every interleaving).
    std::thread::sleep(Duration::from_millis(20));
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    match report(&reports) {
        TaskReport::Declined {
            checkpoint, reason, ..
        } => {
            assert_eq!(checkpoint, 1);
            assert_eq!(reason, DeclineReason::NotRunning);
        }
        other => panic!("a cancelled task declines, got {other:?}"),
    }
    assert_eq!(logged(&log, "close").len(), 1);
}

/// Ignores cancellation until released.
struct IgnoresCancel {
    released: Arc<AtomicBool>,
    hold_the_lock: bool,
    started: mpsc::Sender<()>,
}

impl SourceFunction for IgnoresCancel {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        let locked = self.hold_the_lock.then(|| ctx.lock());
        self.started.send(()).unwrap();
        while !self.released.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(locked);
        Ok(())
    }
}

fn ignoring_task(
    name: &str,
    hold_the_lock: bool,
    log: &ProbeLog,
) -> (
    streamtask_runtime::TaskHandle,
    Arc<AtomicBool>,
    mpsc::Receiver<()>,
) {
    let released = Arc::new(AtomicBool::new(false));
    let (started, running) = mpsc::channel();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new(name).with_cancel_grace(Duration::from_millis(100)),
        IgnoresCancel {
            released: Arc::clone(&released),
            hold_the_lock,
            started,
        },
        Probe::new(log),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    (task, released, running)
}

#[test]
fn a_source_that_ignores_cancellation_is_reported_after_the_grace_period() {
    let log: ProbeLog = Arc::default();
    let (task, released, running) = ignoring_task("stubborn", false, &log);
    running.recv().unwrap();
    task.cancel();
    let outcome = task.join();
    let failure = outcome.failure().expect("reported, not hung");
    assert!(matches!(
        failure.error,
        TaskError::CancellationIgnored { grace_ms: 100 }
    ));
    assert!(failure.to_string().contains("check the cancel flag"));
    // The chain stays open while the source may still emit into it ...
    assert!(logged(&log, "close").is_empty());
    // ... and the source thread closes it when it finally returns.
    released.store(true, Ordering::SeqCst);
    wait_until(|| logged(&log, "close").len() == 1);
}

#[test]
fn a_source_that_ignores_cancellation_while_holding_the_lock_is_reported_too() {
    let log: ProbeLog = Arc::default();
    let (task, released, running) = ignoring_task("stubborn-locked", true, &log);
    running.recv().unwrap();
    // The mailbox thread blocks on the lock for this mail, so it cannot even end its loop.
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    task.cancel();
    let outcome = task.join();
    assert!(matches!(
        outcome.failure().map(|f| &f.error),
        Some(TaskError::CancellationIgnored { grace_ms: 100 })
    ));
    released.store(true, Ordering::SeqCst);
    // Once the source lets go, every thread of the task ends and the chain is closed once.
    wait_until(|| logged(&log, "close").len() == 1);
}

/// Returns an error once cancelled (an interrupted blocking call, say).
struct FailsWhenCancelled;

impl SourceFunction for FailsWhenCancelled {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        ctx.collect(1)?;
        ctx.sleep(Duration::from_secs(3600))?; // Err(Cancelled) when cancelled
        Err(OperatorError::user("source", "interrupted"))
    }
}

#[test]
fn errors_of_a_cancelled_source_are_not_failures() {
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("interrupted"),
        FailsWhenCancelled,
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| !e.is_empty());
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

#[test]
fn cancelling_a_finished_task_keeps_it_finished() {
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("done"),
        Count::to(10),
        Map::new("id", |n: u64| n),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    wait_until(|| task.is_done());
    task.cancel();
    assert!(task.join().is_finished());
}

/// Blocks in `open` until released, so the task is cancelled before its source starts.
struct SlowOpen {
    release: mpsc::Receiver<()>,
    opening: mpsc::Sender<()>,
}

impl Operator for SlowOpen {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "slow-open"
    }
    fn open(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.opening.send(()).unwrap();
        self.release.recv().unwrap();
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
}

/// Records whether it ever ran.
struct MustNotRun(Arc<AtomicBool>);

impl SourceFunction for MustNotRun {
    type Out = u64;
    type State = ();
    fn run(&mut self, _ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn cancelling_while_opening_never_starts_the_source() {
    let ran = Arc::new(AtomicBool::new(false));
    let (release_tx, release) = mpsc::channel();
    let (opening, opened) = mpsc::channel();
    let (responder, reports) = responder("opening");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("opening").with_responder(responder),
        MustNotRun(Arc::clone(&ran)),
        SlowOpen { release, opening },
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    opened.recv().unwrap();
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    task.cancel();
    release_tx.send(()).unwrap();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    assert!(!ran.load(Ordering::SeqCst));
    assert!(matches!(
        report(&reports),
        TaskReport::Declined {
            reason: DeclineReason::NotRunning,
            ..
        }
    ));
}
