//! A source task's checkpoint-trigger slot: how `trigger_checkpoint` reaches the mailbox thread
//! with no allocation, no lock and no clock read of its own (the handle's one read is the
//! request time).
//!
//! The triggering thread writes the barrier into the slot (atomics) and rings the processor's
//! doorbell (a bit of the mailbox's one-load flag word); the mailbox thread sees it between
//! two records and snapshots. When the slot is taken, or trigger mails are still queued (so a
//! slot trigger cannot overtake an older one), the trigger goes as a mail as before.

use std::time::{Duration, Instant};

use streamtask_core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use streamtask_core::{CheckpointBarrier, CheckpointKind};

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

/// One pending checkpoint trigger, written by any thread, taken by the mailbox thread.
pub(crate) struct TriggerSlot {
    state: AtomicU8,
    id: AtomicU64,
    timestamp: AtomicU64,
    kind: AtomicU8,
    /// Nanoseconds from `base` to the trigger call.
    requested: AtomicU64,
    base: Instant,
    /// Trigger mails queued and not yet run or dropped: while any is, triggers go as mails
    /// too, so they run in the order they were made.
    mails: AtomicU64,
}

fn encode(kind: CheckpointKind) -> u8 {
    match kind {
        CheckpointKind::Checkpoint => 0,
        CheckpointKind::Savepoint => 1,
    }
}

fn decode(kind: u8) -> CheckpointKind {
    if kind == 1 {
        CheckpointKind::Savepoint
    } else {
        CheckpointKind::Checkpoint
    }
}

impl TriggerSlot {
    pub(crate) fn new() -> Self {
        TriggerSlot {
            state: AtomicU8::new(EMPTY),
            id: AtomicU64::new(0),
            timestamp: AtomicU64::new(0),
            kind: AtomicU8::new(0),
            requested: AtomicU64::new(0),
            base: Instant::now(),
            mails: AtomicU64::new(0),
        }
    }

    /// Puts the trigger into the slot; `false` if it must go as a mail (the slot is taken, or
    /// older trigger mails wait).
    pub(crate) fn offer(&self, barrier: CheckpointBarrier, requested: Instant) -> bool {
        if self.mails.load(Ordering::SeqCst) != 0
            || self
                .state
                .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let since = requested.saturating_duration_since(self.base);
        self.id.store(barrier.id, Ordering::Relaxed);
        // The bits of the i64, back in `take`.
        self.timestamp
            .store(barrier.timestamp as u64, Ordering::Relaxed);
        self.kind.store(encode(barrier.kind), Ordering::Relaxed);
        self.requested.store(
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        // SeqCst: ordered before the ringer's and the closer's checks (see `Remote`).
        self.state.store(FULL, Ordering::SeqCst);
        true
    }

    /// Takes the pending trigger, if there is one.
    pub(crate) fn take(&self) -> Option<(CheckpointBarrier, Instant)> {
        self.take_if(|_| true)
    }

    /// Takes the pending trigger if its id is below `id` (it was made before that one).
    pub(crate) fn take_older_than(&self, id: u64) -> Option<(CheckpointBarrier, Instant)> {
        self.take_if(|pending| pending < id)
    }

    fn take_if(&self, take: impl FnOnce(u64) -> bool) -> Option<(CheckpointBarrier, Instant)> {
        if self.state.load(Ordering::SeqCst) != FULL {
            return None;
        }
        // FULL: nobody writes the fields until the state is EMPTY again.
        let id = self.id.load(Ordering::Relaxed);
        if !take(id) {
            return None;
        }
        let barrier = CheckpointBarrier {
            id,
            timestamp: self.timestamp.load(Ordering::Relaxed) as i64,
            kind: decode(self.kind.load(Ordering::Relaxed)),
        };
        let requested = self.base + Duration::from_nanos(self.requested.load(Ordering::Relaxed));
        // Whoever wins this (the owner, or a triggerer taking its trigger back) has it.
        self.state
            .compare_exchange(FULL, EMPTY, Ordering::SeqCst, Ordering::Relaxed)
            .ok()
            .map(|_| (barrier, requested))
    }

    /// A trigger mail is about to be queued.
    pub(crate) fn mail_queued(&self) {
        self.mails.fetch_add(1, Ordering::SeqCst);
    }

    /// A trigger mail ran or was dropped.
    pub(crate) fn mail_done(&self) {
        self.mails.fetch_sub(1, Ordering::SeqCst);
    }
}
