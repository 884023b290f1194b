//! The checkpoint-trigger slot's protocol for the loom models in `tests/loom.rs`: the same code
//! the source task's trigger call and its end run, over a plain mailbox (the doorbell rung as
//! the processor rings it). Built only under `cfg(loom)`.

use std::time::Instant;

use streamtask_core::CheckpointBarrier;

use crate::mailbox::TaskMailbox;
use crate::trigger_slot::{Offered, TriggerSlot};

/// What a trigger call did, by checkpoint id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// In the slot; the mailbox thread has it.
    Slotted,
    /// Taken back by the triggering thread (to decline it).
    TakenBack(u64),
    /// Not in the slot: it would go as a mail.
    Refused,
}

/// A mailbox's trigger slot (on its hot line, as a task's).
pub struct Slot<'a, T>(&'a TaskMailbox<T>);

impl<T> std::fmt::Debug for Slot<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

impl<'a, T> Slot<'a, T> {
    /// The slot of `mailbox`.
    pub fn of(mailbox: &'a TaskMailbox<T>) -> Self {
        Slot(mailbox)
    }

    fn slot(&self) -> &'a TriggerSlot {
        self.0.trigger_slot()
    }

    /// The trigger call's fast path (`Remote::trigger_checkpoint`).
    pub fn trigger(&self, id: u64) -> Outcome {
        let mailbox = self.0;
        let ring = || mailbox.ring_doorbell();
        let slot = self.slot();
        let requested = TriggerSlot::nanos_since(slot.base(), Instant::now());
        let accepting = || mailbox.state().is_accepting_mails();
        match slot.trigger(accepting, ring, CheckpointBarrier::new(id, 0), requested) {
            Offered::Slotted => Outcome::Slotted,
            Offered::TakenBack(barrier) => Outcome::TakenBack(barrier.id),
            Offered::Refused => Outcome::Refused,
        }
    }

    /// The mailbox thread answering the doorbell: the pending trigger's id.
    pub fn take(&self) -> Option<u64> {
        self.slot().take().map(|(barrier, _)| barrier.id)
    }

    /// The mailbox thread at its end, after quiescing: the trigger left, to decline.
    pub fn take_left(&self) -> Option<u64> {
        self.slot().take_left().map(|barrier| barrier.id)
    }

    /// A trigger mail is about to be queued (after a refused offer).
    pub fn mail_queued(&self) {
        self.slot().mail_queued();
    }

    /// A trigger mail ran or was dropped.
    pub fn mail_done(&self) {
        self.slot().mail_done();
    }
}
