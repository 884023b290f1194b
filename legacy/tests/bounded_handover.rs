//! The bounded hand-over: a thread that asks for the checkpoint lock
//! ([`CheckpointLock::request_handover`]) gets it within one section of a hot source, whatever
//! the lock's fairness. The tasks that ask this way (the legacy task's checkpoint trigger with
//! `SourceStreamTask::with_bounded_handover(true)`, every bridge mail) are checked in the
//! cross-model conformance suite, `tests/task_runtime.rs`.
//!
//! Deterministic: the source counts, under the lock, the sections that saw a request raised;
//! the requester reads and resets that count once it holds the lock. Every section that starts
//! after the request lets go instead, so only the one in flight can count: at most one emit
//! between the request and the hand-over. No timings. The counting is
//! `streamtask_legacy::testing`'s, shared with the conformance suite's hand-over test.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use streamtask_core::operator::{Emitted, Output};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark, time::ManualClock};
use streamtask_legacy::testing::HandoverProbe;
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
    SourceContextConfig, SourceOutput,
};

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
        let seen = Arc::new(HandoverProbe::default());
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
