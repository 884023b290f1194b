//! Test support for the bounded hand-over ([`CheckpointLock::request_handover`]): what this
//! crate's lock tests and the workspace's cross-model conformance suite (`tests/task_runtime.rs`,
//! legacy with the option and the bridge) share, so "how many sections ran between a request
//! and the hand-over" is counted one way for every task that asks.
//!
//! A hot source and the requester share a [`HandoverProbe`]: the source notes, under the lock,
//! each section and whether it saw a request raised; the requester, once it holds the lock,
//! reads and resets how many sections saw its request. Every section that starts after the
//! request lets go instead, so only the one in flight can count: a bounded hand-over finds at
//! most one. [`HotSource`] is such a source (a task's), [`SnapshotProbe`] the chain operator
//! that reads the probe as a checkpoint trigger's first step under the lock.
//!
//! Arming ([`HandoverProbe::arm`]) makes the next section hold the lock until it sees a
//! request, so that section is certainly the one in flight when the request came; the probe
//! then also counts the sections that ran after it before the requester got the lock (none,
//! for a bounded hand-over). Nothing here measures time: waits yield until a count moves.
//!
//! [`CheckpointLock::request_handover`]: crate::CheckpointLock::request_handover

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use streamtask_core::operator::{Context, Operator};
use streamtask_core::{OperatorError, StreamRecord};

use crate::source::{SourceContext, SourceFunction};

/// Counts of a hot source's sections, shared by the source and whoever asks it for the lock.
///
/// Every count is `SeqCst`: the source writes under the checkpoint lock and the requester
/// reads holding it, and the test threads that wait on `sections` read it without the lock.
///
/// # Examples
///
/// ```
/// use streamtask_legacy::testing::HandoverProbe;
///
/// let probe = HandoverProbe::default();
/// probe.section(false);
/// probe.section(true);
/// assert_eq!(probe.handed_over(), 1);
/// assert_eq!((probe.sections(), probe.most()), (2, 1));
/// ```
#[derive(Debug, Default)]
pub struct HandoverProbe {
    /// Sections that saw a request since the requester last reset the count.
    since_reset: AtomicU64,
    /// The most any requester found.
    most: AtomicU64,
    /// Every section so far.
    sections: AtomicU64,
    /// The test asked the next section to wait for a request.
    arm: AtomicBool,
    /// An armed section waited and saw the request; `armed_at` holds `sections` then.
    waited: AtomicBool,
    armed_at: AtomicU64,
    /// The most sections that ran after an armed one before its requester got the lock.
    most_after_armed: AtomicU64,
}

impl HandoverProbe {
    /// In a section, under the lock: counts it, and whether it saw a request (`requested`).
    pub fn section(&self, requested: bool) {
        if requested {
            self.since_reset.fetch_add(1, Ordering::SeqCst);
        }
        self.sections.fetch_add(1, Ordering::SeqCst);
    }

    /// The requester, holding the lock: how many sections saw its request since the last call
    /// (a bounded hand-over finds at most one). Also disarms the probe, and after an armed
    /// section notes how many sections ran after it.
    pub fn handed_over(&self) -> u64 {
        let seen = self.since_reset.swap(0, Ordering::SeqCst);
        self.most.fetch_max(seen, Ordering::SeqCst);
        // Still armed: no section was in flight when the request came (it got the lock at once).
        self.arm.store(false, Ordering::SeqCst);
        if self.waited.swap(false, Ordering::SeqCst) {
            let after = self.sections() - self.armed_at.load(Ordering::SeqCst);
            self.most_after_armed.fetch_max(after, Ordering::SeqCst);
        }
        seen
    }

    /// Waits (yielding, no timing) until the source ran `n` more sections: it is hot again.
    pub fn wait_sections(&self, n: u64) {
        let from = self.sections();
        while self.sections() < from + n {
            thread::yield_now();
        }
    }

    /// Makes the source's next section hold the lock until it sees a request (see the module
    /// docs); [`handed_over`](Self::handed_over) disarms it.
    pub fn arm(&self) {
        // A new trigger's count starts here: sections that saw a request raised before it was
        // made are not its own (in the bridge, an earlier trigger's mail, sent after the
        // source ran that trigger itself, raises one).
        self.since_reset.store(0, Ordering::SeqCst);
        self.arm.store(true, Ordering::SeqCst);
    }

    /// Sections so far.
    pub fn sections(&self) -> u64 {
        self.sections.load(Ordering::SeqCst)
    }

    /// The most sections any requester found had seen its request.
    pub fn most(&self) -> u64 {
        self.most.load(Ordering::SeqCst)
    }

    /// The most sections that ran after an armed section before its requester got the lock.
    pub fn most_after_armed(&self) -> u64 {
        self.most_after_armed.load(Ordering::SeqCst)
    }

    /// Takes the arming, if set (the source's side).
    fn take_arm(&self) -> bool {
        self.arm.swap(false, Ordering::SeqCst)
    }

    /// An armed section saw the request (the source's side, under the lock).
    fn armed_section_waited(&self) {
        self.armed_at.store(self.sections(), Ordering::SeqCst);
        self.waited.store(true, Ordering::SeqCst);
    }
}

/// A legacy source that emits `0, 1, 2, ..` until cancelled, one section per record, noting
/// each section in its [`HandoverProbe`]. An armed section holds the lock until it sees a
/// request (with none, the requester never gets the lock and a test's hang guard fails it).
#[derive(Debug)]
pub struct HotSource(pub Arc<HandoverProbe>);

impl SourceFunction for HotSource {
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
            if self.0.take_arm() {
                while !locked.handover_requested() && !locked.is_cancelled() {
                    thread::yield_now();
                }
                self.0.armed_section_waited();
            }
        }
        Ok(())
    }
}

/// A pass-through operator that, in each checkpoint's pre-barrier step (under the lock, the
/// trigger's first step), reads how many sections saw the trigger's request
/// ([`HandoverProbe::handed_over`]).
#[derive(Debug)]
pub struct SnapshotProbe(pub Arc<HandoverProbe>);

impl Operator for SnapshotProbe {
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
