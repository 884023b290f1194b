//! Cancellation: the token, and cancelling tasks whose source blocks (holding the lock or not),
//! ignores cancellation, or waits for input.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::{HANG_GUARD, SharedOutput, responder, wait_running};
use streamtask_core::operator::{Discard, Map};
use streamtask_core::task::TaskState;
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError, TaskOutcome, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamElement};
use streamtask_legacy::{
    CancellationToken, OneInputStreamTask, SourceContext, SourceFunction, SourceStreamTask,
};
use streamtask_runtime::channel::{InputGate, bounded};

#[test]
fn smoke() {
    let token = CancellationToken::new();
    assert!(!token.is_cancelled());
    token.cancel();
    token.cancel();
    assert!(token.is_cancelled());
    assert!(token.sleep(Duration::from_secs(3600)).is_err());
}

#[test]
fn hooks_run_once_on_cancel_and_at_once_when_registered_late() {
    let token = CancellationToken::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let kept = token.on_cancel(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let r = Arc::clone(&runs);
    drop(token.on_cancel(move || {
        r.fetch_add(100, Ordering::SeqCst); // unregistered: never runs
    }));
    token.cancel();
    token.cancel();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let r = Arc::clone(&runs);
    let _late = token.on_cancel(move || {
        r.fetch_add(10, Ordering::SeqCst);
    });
    assert_eq!(runs.load(Ordering::SeqCst), 11);
    drop(kept);
}

#[test]
fn cancel_wakes_sleepers_and_waiters_on_other_threads() {
    let token = CancellationToken::new();
    let sleeper = {
        let token = token.clone();
        thread::spawn(move || token.sleep(Duration::from_secs(3600)))
    };
    let waiter = {
        let token = token.clone();
        thread::spawn(move || token.wait())
    };
    token.cancel();
    assert!(sleeper.join().unwrap().is_err());
    waiter.join().unwrap();
    assert_eq!(
        CancellationToken::new().sleep(Duration::from_millis(1)),
        Ok(())
    );
}

/// Takes the lock, then blocks until cancelled while holding it (Flink's
/// `testCancellationWithSourceBlockedOnLock`).
struct BlocksHoldingTheLock {
    holding: mpsc::Sender<()>,
}

impl SourceFunction for BlocksHoldingTheLock {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        let token = ctx.cancellation().clone();
        let mut locked = ctx.lock();
        locked.collect(1)?;
        self.holding.send(()).unwrap();
        token.wait(); // blocked, lock held
        Ok(())
    }
}

#[test]
fn cancel_stops_a_source_blocked_while_holding_the_lock_with_calls_pending() {
    let (holding, held) = mpsc::channel();
    let (responder, reports) = responder("blocked");
    let config = TaskConfig::new("blocked").with_responder(responder);
    let task = SourceStreamTask::new(
        config,
        BlocksHoldingTheLock { holding },
        Map::new("id", |n: u64| n),
        SharedOutput::new(),
    )
    .spawn();
    held.recv_timeout(HANG_GUARD).unwrap();
    // A trigger and a notice now wait for the lock on the async-calls thread.
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    task.notify_checkpoint_complete(0);
    // `cancel` returns at once (every model's contract); `join` waits for the teardown.
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    match reports.recv_timeout(HANG_GUARD).unwrap() {
        TaskReport::Declined { reason, .. } => assert_eq!(reason, DeclineReason::NotRunning),
        other => panic!("unexpected report {other:?}"),
    }
}

/// Blocks on something cancellation does not reach.
struct IgnoresCancel {
    release: mpsc::Receiver<()>,
    started: mpsc::Sender<()>,
}

impl SourceFunction for IgnoresCancel {
    type Out = u64;
    type State = ();
    fn run(&mut self, _ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        self.started.send(()).unwrap();
        let _ = self.release.recv();
        Ok(())
    }
}

#[test]
fn a_source_ignoring_cancel_is_reported_after_the_grace_period_instead_of_hanging() {
    let (release_tx, release) = mpsc::channel();
    let (started, started_rx) = mpsc::channel();
    let task = SourceStreamTask::new(
        TaskConfig::new("stubborn").with_cancel_grace(Duration::from_millis(50)),
        IgnoresCancel { release, started },
        Map::new("id", |n: u64| n),
        Discard,
    )
    .spawn();
    started_rx.recv_timeout(HANG_GUARD).unwrap();
    task.cancel(); // returns after the grace period
    assert_eq!(task.state(), TaskState::Cancelling);
    let outcome = task.join();
    let failure = outcome.failure().expect("reported as a failure");
    assert_eq!(failure.thread, "stubborn");
    assert!(matches!(
        failure.error,
        TaskError::CancellationIgnored { grace_ms: 50 }
    ));
    // Let the stuck source go; its thread then tears down on its own.
    release_tx.send(()).unwrap();
}

#[test]
fn cancel_is_idempotent_and_callable_from_several_threads() {
    let task = Arc::new(
        SourceStreamTask::new(
            TaskConfig::new("many"),
            Waits,
            Map::new("id", |n: u64| n),
            Discard,
        )
        .spawn(),
    );
    wait_running(&task);
    let cancellers: Vec<_> = (0..4)
        .map(|_| {
            let task = Arc::clone(&task);
            thread::spawn(move || task.cancel())
        })
        .collect();
    for c in cancellers {
        c.join().unwrap();
    }
    task.cancel();
    let task = Arc::into_inner(task).unwrap();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

/// Sleeps in a loop until cancelled.
struct Waits;

impl SourceFunction for Waits {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        loop {
            ctx.sleep(Duration::from_millis(10))?;
        }
    }
}

#[test]
fn a_source_returning_the_cancelled_error_ends_as_cancelled_not_failed() {
    let task = SourceStreamTask::new(
        TaskConfig::new("sleepy"),
        Waits,
        Map::new("id", |n: u64| n),
        Discard,
    )
    .spawn();
    wait_running(&task);
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

#[test]
fn cancel_reaches_an_input_task_waiting_for_input() {
    let (tx, rx) = bounded::<StreamElement<u64>>(4).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let task = OneInputStreamTask::new(
        TaskConfig::new("idle"),
        gate,
        Map::new("id", |n: u64| n),
        Discard,
    )
    .spawn();
    wait_running(&task);
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    drop(tx);
}

/// The threads of this process whose name starts with `prefix` and that are not already
/// exiting, from `/proc/self/task` (Linux). A joined thread can stay listed for a moment after
/// `join` returns, but by then the kernel has marked it exiting (`PF_EXITING`), so it is not
/// counted; a thread that is still running user code is.
fn live_threads_named(prefix: &str) -> usize {
    const PF_EXITING: u64 = 0x4;
    let mut count = 0;
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task is readable") {
        let dir = entry.expect("a task entry").path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended while we looked
        };
        // stat is "tid (comm) state ppid pgrp session tty tpgid flags ..."; comm may hold spaces.
        let after_comm = &stat[stat.rfind(')').expect("stat has a comm") + 1..];
        let flags: u64 = after_comm
            .split_whitespace()
            .nth(6)
            .and_then(|f| f.parse().ok())
            .expect("stat has flags");
        if comm.trim_end().starts_with(prefix) && flags & PF_EXITING == 0 {
            count += 1;
        }
    }
    count
}

#[test]
fn dropping_a_handle_cancels_and_joins_the_task() {
    // A name no other test uses: its threads are "dropjoin", "dropjoin-timer", ...
    let task = SourceStreamTask::new(
        TaskConfig::new("dropjoin"),
        Waits,
        Map::new("id", |n: u64| n),
        Discard,
    )
    .spawn();
    wait_running(&task);
    assert!(
        live_threads_named("dropjoin") > 0,
        "the running task's threads are visible"
    );
    drop(task); // must not hang or leave threads behind
    assert_eq!(
        live_threads_named("dropjoin"),
        0,
        "dropping the handle left a thread of the task running"
    );
}
