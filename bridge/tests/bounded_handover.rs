//! The bounded bridge hand-over: every mail of a `LegacySourceStreamTask` takes the checkpoint
//! lock through `CheckpointLock::request_handover`, so a checkpoint trigger waits for at most
//! the source's section in flight, whatever the lock's fairness.
//!
//! Deterministic: the source counts, under the lock, the sections that saw a request raised;
//! the trigger's snapshot (under the lock) reads and resets that count. An armed section waits,
//! holding the lock, until it sees the mail's request, so it is the one in flight: no section
//! may run after it before the snapshot. No timings.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use common::{HANG_GUARD, responder};
use streamtask_bridge::LegacySourceStreamTask;
use streamtask_core::operator::{Context, Discard, Operator};
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord};
use streamtask_legacy::{Fairness, SourceContext, SourceFunction};

/// Sections that saw a request raised since the requester last reset the count, and the most
/// any requester found.
#[derive(Debug, Default)]
struct Seen {
    since_reset: AtomicU64,
    most: AtomicU64,
    sections: AtomicU64,
    most_after_armed: AtomicU64,
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

/// Emits forever, one section per record. When armed, a section holds the lock until it sees
/// the mailbox thread's request (so it is the section in flight when the request came: with no
/// request the trigger never completes and the hang guard fails the test), and notes how many
/// sections had run by then.
struct Hot {
    seen: Arc<Seen>,
    arm: Arc<AtomicBool>,
    armed_at: Arc<AtomicU64>,
}

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
            self.seen.section(locked.handover_requested());
            if self.arm.swap(false, Ordering::SeqCst) {
                while !locked.handover_requested() && !locked.is_cancelled() {
                    thread::yield_now();
                }
                self.armed_at
                    .store(self.seen.sections.load(Ordering::SeqCst), Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

/// A map that, in each snapshot (under the lock, as the trigger's first step), reads how many
/// sections saw the trigger's request.
struct Snapshots(Arc<Seen>, Arc<AtomicU64>, Arc<AtomicBool>);

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
        // Still armed: no section was in flight when the mail asked (it got the lock at once).
        if !self.2.swap(false, Ordering::SeqCst) {
            let after = self.0.sections.load(Ordering::SeqCst) - self.1.load(Ordering::SeqCst);
            self.0.most_after_armed.fetch_max(after, Ordering::SeqCst);
        }
        Ok(())
    }
}

const TRIGGERS: u64 = 50;

#[test]
fn a_bridge_trigger_waits_for_at_most_one_section_under_every_fairness() {
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        let seen = Arc::new(Seen::default());
        let arm = Arc::new(AtomicBool::new(false));
        let armed_at = Arc::new(AtomicU64::new(0));
        let (responder, reports) = responder("hot");
        let task = LegacySourceStreamTask::new(
            TaskConfig::new("hot").with_responder(responder),
            Hot {
                seen: Arc::clone(&seen),
                arm: Arc::clone(&arm),
                armed_at: Arc::clone(&armed_at),
            },
            Snapshots(Arc::clone(&seen), Arc::clone(&armed_at), Arc::clone(&arm)),
            Discard,
        )
        .with_fairness(fairness)
        .spawn()
        .expect("a plain chain");
        let mut acked = 0;
        for id in 1..=TRIGGERS {
            seen.wait_sections(50);
            arm.store(true, Ordering::SeqCst);
            task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
                .expect("a running source task");
            match reports.recv_timeout(HANG_GUARD) {
                Ok(TaskReport::Acknowledged { .. }) => acked += 1,
                other => panic!("{fairness:?}, checkpoint {id}: {other:?}"),
            }
        }
        task.cancel();
        task.join();
        assert_eq!(acked, TRIGGERS, "{fairness:?}");
        let most = seen.most.load(Ordering::SeqCst);
        assert!(
            most <= 1,
            "{fairness:?}: {most} sections ran while a trigger mail waited for the lock"
        );
        let after = seen.most_after_armed.load(Ordering::SeqCst);
        assert_eq!(
            after, 0,
            "{fairness:?}: {after} sections ran after the one in flight when the mail asked"
        );
    }
}
