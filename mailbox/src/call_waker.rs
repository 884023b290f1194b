//! Wakers for many calls in flight on one mailbox thread: each call's [`Waker`] puts the call's
//! id in a ready list and enqueues at most one wake mail for the whole list.
//!
//! # Protocol
//!
//! A waker ([`CallWaker`]) and the mailbox thread share two flags and a list:
//!
//! | what | who sets it | who clears it |
//! |---|---|---|
//! | `scheduled` (per call) | a wake, before it lists the call | the mailbox thread, right before it polls the call |
//! | `ready` (the list of woken ids) | a wake, under the queue's lock | the wake mail takes it, under the lock |
//! | `mail_queued` (per driver) | a wake that listed an id, under the lock | the wake mail, under the lock, as it takes the list |
//!
//! 1. `wake`: if `scheduled` was clear, set it, then under the lock push the id and, if no mail
//!    is queued, mark one queued; outside the lock, enqueue the wake mail if it marked one.
//! 2. the wake mail: under the lock clear `mail_queued` and take the list; then for each id
//!    still in flight clear its `scheduled` and poll it.
//!
//! No wake is lost: a wake before the mail takes the list is in the list the mail takes; a wake
//! after that finds `mail_queued` clear and enqueues a new mail; a wake of a call whose
//! `scheduled` is still set (listed, not yet polled) is absorbed by the poll to come, which
//! clears the flag *before* it polls, so a wake during the poll lists the call again. The flag
//! and the list share one lock, so "listed" and "a mail will come" change together.
//!
//! A wake for a call that has completed names an id no longer in flight: the mail skips it
//! (ids are never reused). A wake after the task ended is refused by the mailbox and dropped.

use std::task::Wake;

use streamtask_core::operator::EventSender;
use streamtask_core::sync::atomic::{AtomicBool, Ordering};
use streamtask_core::sync::{Arc, Mutex};

/// The wake mail's event (an [`OperatorEvent`](streamtask_core::operator::OperatorEvent) for
/// the operator itself).
pub(crate) struct WakeEvent;

/// The ready list of one driver, and its wake-mail sender.
pub(crate) struct WakeQueue {
    inner: Mutex<Ready>,
    events: EventSender,
}

struct Ready {
    ids: Vec<u64>,
    mail_queued: bool,
}

impl WakeQueue {
    /// A queue whose wake mails go through `events` (the operator's own event sender).
    pub(crate) fn new(events: EventSender) -> Self {
        WakeQueue {
            inner: Mutex::new(Ready {
                ids: Vec::new(),
                mail_queued: false,
            }),
            events,
        }
    }

    /// Step 2 of the protocol: the wake mail takes the woken ids (and a wake from now on
    /// enqueues another mail).
    pub(crate) fn take(&self) -> Vec<u64> {
        let mut ready = self.inner.lock();
        ready.mail_queued = false;
        std::mem::take(&mut ready.ids)
    }

    /// Step 1, after `scheduled` was set: lists `id`, and enqueues a wake mail unless one is.
    fn push(&self, id: u64) {
        let send = {
            let mut ready = self.inner.lock();
            ready.ids.push(id);
            !std::mem::replace(&mut ready.mail_queued, true)
        };
        if send && self.events.send(WakeEvent).is_err() {
            log::debug!(
                "a wake for operator {} arrived after its task ended; dropped",
                self.events.operator()
            );
        }
    }
}

/// The [`Waker`](std::task::Waker) of one call (see the module doc's protocol).
pub(crate) struct CallWaker {
    id: u64,
    scheduled: AtomicBool,
    queue: Arc<WakeQueue>,
}

impl CallWaker {
    /// The waker of call `id`.
    pub(crate) fn new(id: u64, queue: Arc<WakeQueue>) -> Self {
        CallWaker {
            id,
            scheduled: AtomicBool::new(false),
            queue,
        }
    }

    /// The mailbox thread, right before it polls the call: a wake from now on lists it again.
    pub(crate) fn begin_poll(&self) {
        // Acquire: reads the flag a waker set, so what happened before that wake (the
        // completion it announces) is visible to the poll that follows.
        self.scheduled.swap(false, Ordering::Acquire);
    }

    /// Step 1 of the protocol.
    pub(crate) fn wake_call(&self) {
        // AcqRel: pairs with `begin_poll`'s swap; a wake that finds the flag set is absorbed
        // by the poll to come, which clears it first.
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            self.queue.push(self.id);
        }
    }
}

impl Wake for CallWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_call();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wake_call();
    }
}
