//! The bounded hand-over: a thread that asks for the checkpoint lock
//! ([`CheckpointLock::request_handover`]) gets it within one section of a hot source, whatever
//! the lock's fairness; the legacy task's checkpoint trigger asks this way with
//! `SourceStreamTask::with_bounded_handover(true)`.
//!
//! Deterministic: the source counts, under the lock, the sections that saw a request raised;
//! the requester reads and resets that count once it holds the lock. Every section that starts
//! after the request lets go instead, so only the one in flight can count: at most one emit
//! between the request and the hand-over. No timings.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use common::{HANG_GUARD, responder, wait_running};
use streamtask_core::operator::{Context, Discard, Emitted, Operator, Output};
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{
    CheckpointBarrier, ManualClock, OperatorError, StreamRecord, StreamStatus, Watermark,
};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
    SourceContextConfig, SourceFunction, SourceOutput, SourceStreamTask,
};

/// Sections that saw a request raised since the requester last reset the count, and the most
/// any requester found.
#[derive(Debug, Default)]
struct Seen {
    since_reset: AtomicU64,
    most: AtomicU64,
    sections: AtomicU64,
}

impl Seen {
    /// In a section, under the lock.
    fn section(&self, requested: bool) {
        if requested {
            self.since_reset.fetch_add(1, Ordering::SeqCst);
        }
        self.sections.fetch_add(1, Ordering::SeqCst);
    }

    /// The requester, holding the lock: how many sections saw its request.
    fn handed_over(&self) -> u64 {
        let seen = self.since_reset.swap(0, Ordering::SeqCst);
        self.most.fetch_max(seen, Ordering::SeqCst);
        seen
    }

    /// Waits (yielding, no timing) until the source ran `n` more sections: it is hot again.
    fn wait_sections(&self, n: u64) {
        let from = self.sections.load(Ordering::SeqCst);
        while self.sections.load(Ordering::SeqCst) < from + n {
            thread::yield_now();
        }
    }
}

/// Emits forever, one section per record, noting in each whether a hand-over was asked for.
struct Hot(Arc<Seen>);

impl SourceFunction for Hot {
    type Out = u64;
    type State = u64;
    fn name(&self) -> &str {
        "hot"
    }
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
            self.0.section(locked.handover_requested());
        }
        Ok(())
    }
}

/// A map that, in each snapshot (under the lock, as the trigger's first step), reads how many
/// sections saw the trigger's request.
struct Snapshots(Arc<Seen>);

impl Operator for Snapshots {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "snapshots"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint_id: u64,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.0.handed_over();
        Ok(())
    }
}

/// A source output that counts and drops what it gets.
#[derive(Debug, Default)]
struct Count(u64);

impl Output<u64> for Count {
    fn collect(&mut self, _record: StreamRecord<u64>) -> Result<(), OperatorError> {
        self.0 += 1;
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl SourceOutput<u64> for Count {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

const ROUNDS: u64 = 200;

#[test]
fn a_requester_gets_the_lock_within_one_section_under_every_fairness() {
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
        let cell = SourceCell::new(
            0u64,
            Emission::new(SourceContextConfig::processing_time(), timers),
            Count::default(),
        );
        let lock = CheckpointLock::new(cell, fairness);
        let seen = Arc::new(Seen::default());
        let cancel = CancellationToken::new();
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                let mut ctx = SourceContext::new(&lock, &cancel);
                while !stop.load(Ordering::SeqCst) {
                    let mut locked = ctx.lock();
                    *locked.state_mut() += 1;
                    locked.collect(1u64).expect("discarded");
                    seen.section(locked.handover_requested());
                }
            });
            for _ in 0..ROUNDS {
                seen.wait_sections(50);
                let request = lock.request_handover();
                let guard = request.lock();
                let found = seen.handed_over();
                assert!(
                    found <= 1,
                    "{fairness:?}: {found} sections ran between the request and the hand-over"
                );
                drop(guard);
            }
            stop.store(true, Ordering::SeqCst);
        });
        assert!(!lock.handover_requested());
        let cell = lock.into_inner();
        assert!(*cell.state() >= ROUNDS * 50);
        assert_eq!(cell.output().0, *cell.state());
    }
}

#[test]
fn a_dropped_request_releases_a_source_waiting_for_it() {
    let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
    let cell = SourceCell::new(
        0u64,
        Emission::new(SourceContextConfig::processing_time(), timers),
        Vec::<Emitted<u64>>::new(),
    );
    let lock = CheckpointLock::new(cell, Fairness::Eventual);
    let cancel = CancellationToken::new();
    let request = lock.request_handover();
    thread::scope(|s| {
        let source = s.spawn(|| {
            let mut ctx = SourceContext::new(&lock, &cancel);
            // Waits (lock released) until the request is dropped, then emits.
            ctx.collect(7).expect("emitted");
        });
        // The source cannot emit while the request stands: it waits with the lock released,
        // so the lock is free for others.
        assert!(lock.lock().output().is_empty());
        drop(request);
        source
            .join()
            .expect("the source returns once the request is gone");
    });
    assert_eq!(lock.into_inner().output().len(), 1);
}

fn legacy_triggers(bounded: bool) -> (u64, u64) {
    let seen = Arc::new(Seen::default());
    let (responder, reports) = responder("hot");
    let task = SourceStreamTask::new(
        TaskConfig::new("hot").with_responder(responder),
        Hot(Arc::clone(&seen)),
        Snapshots(Arc::clone(&seen)),
        Discard,
    )
    .with_fairness(Fairness::Eventual)
    .with_bounded_handover(bounded)
    .spawn();
    wait_running(&task);
    let mut acked = 0;
    for id in 1..=ROUNDS / 4 {
        seen.wait_sections(50);
        task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .expect("a running source task");
        match reports.recv_timeout(HANG_GUARD) {
            Ok(TaskReport::Acknowledged { .. }) => acked += 1,
            other => panic!("checkpoint {id}: {other:?}"),
        }
    }
    task.cancel();
    task.join();
    (acked, seen.most.load(Ordering::SeqCst))
}

#[test]
fn the_legacy_trigger_with_the_bounded_handover_waits_for_at_most_one_section() {
    let (acked, most) = legacy_triggers(true);
    assert_eq!(acked, ROUNDS / 4);
    assert!(most <= 1, "{most} sections ran while a trigger waited");
}
