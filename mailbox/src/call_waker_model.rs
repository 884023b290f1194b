//! The call wakers' protocol for the loom models in `tests/loom.rs`: the same code the keyed
//! async operator's wakers and wake mail run. Built only under `cfg(loom)`.

use streamtask_core::operator::EventSender;
use streamtask_core::sync::Arc;

use crate::call_waker::{CallWaker, WakeQueue};

/// One driver's ready list.
pub struct Queue(Arc<WakeQueue>);

impl Queue {
    /// A queue whose wake mails go through `events`.
    pub fn new(events: EventSender) -> Self {
        Queue(Arc::new(WakeQueue::new(events)))
    }

    /// The waker of call `id`.
    pub fn call(&self, id: u64) -> Call {
        Call(std::sync::Arc::new(CallWaker::new(id, Arc::clone(&self.0))))
    }

    /// The wake mail: takes the woken ids.
    pub fn take(&self) -> Vec<u64> {
        self.0.take()
    }
}

/// One call's waker.
#[derive(Clone)]
pub struct Call(std::sync::Arc<CallWaker>);

impl Call {
    /// Wakes the call (any thread).
    pub fn wake(&self) {
        self.0.wake_call();
    }

    /// The mailbox thread, right before it polls the call.
    pub fn begin_poll(&self) {
        self.0.begin_poll();
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").finish_non_exhaustive()
    }
}
