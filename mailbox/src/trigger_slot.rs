//! A source task's checkpoint-trigger slot: how `trigger_checkpoint` reaches the mailbox thread
//! with no allocation, no lock and no clock read of its own (the handle's one read is the
//! request time).
//!
//! The triggering thread writes the barrier into the slot (atomics) and rings the processor's
//! doorbell (a bit of the mailbox's one-load flag word); the mailbox thread sees it between
//! two records and snapshots. The slot is part of the mailbox, on the same cache line as that
//! flag word, so the call moves one line. When the slot is taken, or trigger mails are still queued (so a
//! slot trigger cannot overtake an older one), the trigger goes as a mail.
//!
//! The slot is a leaf: it knows atomics and barriers, not the mailbox or the task. The mailbox
//! holds it (it must sit on the mailbox's hot line) and the source task drives it; what the
//! slot needs of the mailbox (is it still accepting mails, ring the doorbell) is passed in as
//! closures, so neither the mailbox nor the slot imports the task, and the slot imports neither.
//!
//! # What the call costs
//!
//! The mailbox thread loads the flag word between every two records, so from the moment the
//! call's first read-modify-write takes the line, the mailbox thread asks for it back; each
//! further write of the call that comes after the line went back moves it once more (a move
//! between cores costs a few hundred cycles; PERF-NOTES.md has the figures). So the call
//! touches the line first with its claim and then writes it as few times, and as quickly, as
//! it can:
//!
//! - the request time is converted before the claim (std's time arithmetic is a call; between
//!   the claim and the publication it would hold the line long enough to lose it);
//! - publishing the slot is a plain release store of a word of its own (`full`), which only the
//!   claim holder sets; the claim's word also counts the queued trigger mails, so a
//!   publication there would have to be a read-modify-write that keeps the count. Two
//!   read-modify-writes on the line (the claim, the ring), not three.

use std::time::{Duration, Instant};

use streamtask_core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering, fence};
use streamtask_core::{Alignment, CheckpointBarrier, CheckpointKind};

/// What [`TriggerSlot::trigger`] did with a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// In the slot, the doorbell rung: the mailbox thread runs it or declines it at its end.
    Slotted,
    /// In the slot, but the mailbox stopped accepting meanwhile and this thread took it back:
    /// the caller declines it.
    TakenBack(CheckpointBarrier),
    /// Not in the slot (it was taken, or trigger mails wait): the caller sends it as a mail.
    Refused,
}

// The slot's `state` word: whether the slot is claimed (by a triggering thread writing it, or
// holding its trigger until that is taken) in the low bit, the number of trigger mails queued
// and not yet run or dropped above it. One word, so `offer` checks both with its one
// compare-exchange (no separate load of a second atomic on the triggering thread).
const EMPTY: u64 = 0;
const CLAIMED: u64 = 1;
/// One queued trigger mail in the `state` word.
const MAIL: u64 = 2;

/// One pending checkpoint trigger, written by any thread, taken by the mailbox thread.
///
/// Every mailbox holds one, on its hot cache line beside the flag word the doorbell rings
/// ([`TaskMailbox::trigger_slot`]): a trigger call writes the slot, rings and reads the state,
/// all on that one line, which the mailbox thread last wrote (answering the previous
/// doorbell), so the call moves one line to the triggering thread, not two.
pub(crate) struct TriggerSlot {
    /// Whether the slot is claimed, and the count of queued trigger mails (see the constants
    /// above): while any trigger mail is queued, triggers go as mails too, so they run in the
    /// order they were made.
    state: AtomicU64,
    /// Whether the claimed slot holds a trigger (1) or not yet, or not any more (0): set by
    /// the claim holder alone; whoever wins the compare-exchange back to 0 has the trigger and
    /// frees the claim.
    full: AtomicU8,
    id: AtomicU64,
    timestamp: AtomicU64,
    /// Nanoseconds from `base` to the trigger call.
    requested: AtomicU64,
    kind: AtomicU8,
    /// The barrier's [`Alignment`], as [`encode_alignment`] writes it.
    alignment: AtomicU32,
    base: Instant,
}

fn encode(kind: CheckpointKind) -> u8 {
    match kind {
        CheckpointKind::Checkpoint => 0,
        CheckpointKind::Savepoint => 1,
        CheckpointKind::DrainingSavepoint => 2,
    }
}

fn decode(kind: u8) -> CheckpointKind {
    match kind {
        1 => CheckpointKind::Savepoint,
        2 => CheckpointKind::DrainingSavepoint,
        _ => CheckpointKind::Checkpoint,
    }
}

/// 0 aligned, `u32::MAX` unaligned, otherwise the aligned timeout in whole milliseconds (at
/// least 1) plus one: four bytes keep the slot on its cache line.
fn encode_alignment(alignment: Alignment) -> u32 {
    match alignment {
        Alignment::Aligned => 0,
        Alignment::Unaligned => u32::MAX,
        Alignment::AlignedTimeout(timeout) => {
            let millis = timeout.as_micros().div_ceil(1000).max(1);
            u32::try_from(millis).map_or(u32::MAX - 1, |m| m.min(u32::MAX - 2) + 1)
        }
    }
}

fn decode_alignment(word: u32) -> Alignment {
    match word {
        0 => Alignment::Aligned,
        u32::MAX => Alignment::Unaligned,
        millis => Alignment::AlignedTimeout(Duration::from_millis(u64::from(millis - 1))),
    }
}

impl TriggerSlot {
    pub(crate) fn new() -> Self {
        TriggerSlot {
            state: AtomicU64::new(EMPTY),
            full: AtomicU8::new(0),
            id: AtomicU64::new(0),
            timestamp: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            kind: AtomicU8::new(0),
            alignment: AtomicU32::new(0),
            base: Instant::now(),
        }
    }

    /// When the slot's request times count from (see [`nanos_since`](Self::nanos_since)).
    pub(crate) fn base(&self) -> Instant {
        self.base
    }

    /// `requested` as the slot stores it: nanoseconds from `base` (the slot's
    /// [`base`](Self::base), a copy the triggering side keeps off the slot's line). Computed
    /// before the call touches the slot: std's out-of-line time arithmetic between the claim and
    /// the publication would hold the line long enough for the mailbox thread's next flag load
    /// to take it back, and the publication would then move it a second time.
    #[inline]
    pub(crate) fn nanos_since(base: Instant, requested: Instant) -> u64 {
        u64::try_from(requested.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Puts the trigger into the slot; `false` if it must go as a mail (the slot is taken, or
    /// older trigger mails wait). Inlined into the trigger call: the call's code stays in one
    /// place (a trigger arrives on a thread that has slept since the last one, cold caches), and
    /// between the claim and the publication there are only stores to the same line.
    #[inline]
    pub(crate) fn offer(&self, barrier: CheckpointBarrier, requested: u64) -> bool {
        // Unclaimed with no mail queued is the word 0: one compare-exchange checks both.
        // Acquire: the taker read the fields before it freed the claim.
        if self
            .state
            .compare_exchange(EMPTY, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.id.store(barrier.id, Ordering::Relaxed);
        // The bits of the i64, back in `take`.
        self.timestamp
            .store(barrier.timestamp as u64, Ordering::Relaxed);
        self.kind.store(encode(barrier.kind), Ordering::Relaxed);
        self.alignment
            .store(encode_alignment(barrier.alignment), Ordering::Relaxed);
        self.requested.store(requested, Ordering::Relaxed);
        // Published: a store, as only the claim holder sets `full` (a mail counted meanwhile
        // changes `state`, not this word). Release: a taker that loads it reads the fields.
        // Ordered before the closer's check by the `SeqCst` fence in `trigger` (see there).
        self.full.store(1, Ordering::Release);
        true
    }

    /// The triggering thread's half of the slot protocol: offer, `ring` (the processor's
    /// doorbell), then ask `accepting` whether the mailbox still accepts mails. `requested` is the call's time as
    /// [`nanos_since`](Self::nanos_since) gives it. Against [`take_left`](Self::take_left) on
    /// the mailbox thread at its end (quiesce, then take): each side stores first (the slot's
    /// `full`, the mailbox's state) and then loads what the other stored, across a `SeqCst` fence
    /// on both sides, so at least one sees the other; whoever then takes the trigger has it
    /// (one compare-exchange), so it is declined exactly once and never lost. Modelled in
    /// `tests/loom.rs`.
    #[inline]
    pub(crate) fn trigger(
        &self,
        accepting: impl FnOnce() -> bool,
        ring: impl FnOnce(),
        barrier: CheckpointBarrier,
        requested: u64,
    ) -> Offered {
        if !self.offer(barrier, requested) {
            return Offered::Refused;
        }
        ring();
        fence(Ordering::SeqCst);
        if !accepting()
            && let Some((barrier, _)) = self.take()
        {
            return Offered::TakenBack(barrier);
        }
        Offered::Slotted
    }

    /// The mailbox thread's half, after its mailbox stopped accepting mails (quiesced): the
    /// trigger left in the slot, which will never run (see [`trigger`](Self::trigger)).
    pub(crate) fn take_left(&self) -> Option<CheckpointBarrier> {
        fence(Ordering::SeqCst);
        self.take().map(|(barrier, _)| barrier)
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
        if self.full.load(Ordering::SeqCst) == 0 {
            return None;
        }
        // Full: nobody writes the fields until the claim is freed.
        let id = self.id.load(Ordering::Relaxed);
        if !take(id) {
            return None;
        }
        let barrier = CheckpointBarrier {
            id,
            timestamp: self.timestamp.load(Ordering::Relaxed) as i64,
            kind: decode(self.kind.load(Ordering::Relaxed)),
            alignment: decode_alignment(self.alignment.load(Ordering::Relaxed)),
        };
        let requested = self.base + Duration::from_nanos(self.requested.load(Ordering::Relaxed));
        // Whoever wins this (the owner, or a triggerer taking its trigger back) has it, and
        // frees the claim after it (keeping the mail count beside it): the fields were read.
        self.full
            .compare_exchange(1, 0, Ordering::SeqCst, Ordering::SeqCst)
            .ok()?;
        self.state.fetch_sub(CLAIMED, Ordering::SeqCst);
        Some((barrier, requested))
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
