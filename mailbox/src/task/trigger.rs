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

// The slot's `state` word: the slot's state in the low two bits, the number of trigger mails
// queued and not yet run or dropped above them. One word, so `offer` checks both with its one
// compare-exchange (no separate load of a second atomic on the triggering thread).
const EMPTY: u64 = 0;
const WRITING: u64 = 1;
const FULL: u64 = 2;
const STATE_BITS: u64 = 0b11;
/// One queued trigger mail in the `state` word.
const MAIL: u64 = 4;

/// One pending checkpoint trigger, written by any thread, taken by the mailbox thread.
///
/// Everything a trigger writes or reads is on one cache line (`align(64)`), apart from the
/// owner's, so a trigger call moves this line and the mailbox's flag line and nothing else.
#[repr(align(64))]
pub(crate) struct TriggerSlot {
    /// The slot's state and the count of queued trigger mails (see the constants above): while
    /// any trigger mail is queued, triggers go as mails too, so they run in the order they were
    /// made.
    state: AtomicU64,
    id: AtomicU64,
    timestamp: AtomicU64,
    /// Nanoseconds from `base` to the trigger call.
    requested: AtomicU64,
    kind: AtomicU8,
    base: Instant,
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
            state: AtomicU64::new(EMPTY),
            id: AtomicU64::new(0),
            timestamp: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            kind: AtomicU8::new(0),
            base: Instant::now(),
        }
    }

    /// Puts the trigger into the slot; `false` if it must go as a mail (the slot is taken, or
    /// older trigger mails wait). Inlined into the trigger call: the call's code stays in one
    /// place (a trigger arrives on a thread that has slept since the last one, cold caches).
    #[inline]
    pub(crate) fn offer(&self, barrier: CheckpointBarrier, requested: Instant) -> bool {
        // EMPTY with no mail queued is the word 0: one compare-exchange checks both. Acquire:
        // the owner's take (the CAS back to EMPTY) read the fields before releasing the slot.
        if self
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
        // WRITING -> FULL. SeqCst: ordered before the ringer's and the closer's checks (see
        // `Remote`). An add, not a store: another triggering thread whose offer failed meanwhile
        // may have counted its mail in the same word.
        self.state.fetch_add(FULL - WRITING, Ordering::SeqCst);
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
        if self.state.load(Ordering::SeqCst) & STATE_BITS != FULL {
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
        // Whoever wins this (the owner, or a triggerer taking its trigger back) has it; the
        // mail count beside the state is kept. Only a taker moves FULL on, so the state bits
        // stay FULL while the count changes and the loop ends.
        let mut word = self.state.load(Ordering::SeqCst);
        loop {
            if word & STATE_BITS != FULL {
                return None;
            }
            match self.state.compare_exchange_weak(
                word,
                word - FULL + EMPTY,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some((barrier, requested)),
                Err(now) => word = now,
            }
        }
    }

    /// A trigger mail is about to be queued.
    pub(crate) fn mail_queued(&self) {
        self.state.fetch_add(MAIL, Ordering::SeqCst);
    }

    /// A trigger mail ran or was dropped.
    pub(crate) fn mail_done(&self) {
        self.state.fetch_sub(MAIL, Ordering::SeqCst);
    }
}
