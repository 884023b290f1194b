//! The checkpoint lock's condition: wait (releasing the lock) until notified.
//!
//! It does not pair a condition variable with the checkpoint mutex itself: the lock comes in two
//! mutex flavours (barging and parking) and its data may be unsized, and loom's condition
//! variable supports neither. Instead the condition is an *epoch*: a counter behind a small
//! mutex of its own, bumped by every notification, plus a count of registered waiters so a
//! notification with nobody waiting is one atomic load.
//!
//! # The lost-wakeup protocol
//!
//! Waiter (holding the checkpoint lock):
//!
//! 1. **register**: `waiters += 1`, then read `seen = epoch`;
//! 2. **try again**: check the condition; if it holds, unregister and return;
//! 3. release the checkpoint lock;
//! 4. **block** while `epoch == seen`;
//! 5. unregister, take the checkpoint lock again, go to 1.
//!
//! Notifier (after changing what the waiter checks):
//!
//! 1. if `waiters == 0`, return (nobody can be between steps 1 and 4);
//! 2. otherwise `epoch += 1` and wake every blocked waiter.
//!
//! Why nothing is lost: a waiter reads `seen` *before* it checks the condition. If the notifier's
//! change came before that check, the waiter sees it and does not block. If it came after, the
//! notifier's epoch bump also comes after the waiter's read (both happen under the epoch
//! mutex), so the waiter's `epoch == seen` test fails and it does not sleep.
//!
//! The notifier's fast path (step 1) relies on the checkpoint lock for ordering: a waiter
//! registers while holding the lock, and a notifier that changed the condition under the lock
//! took the lock after the waiter released it, so it sees the registration. A flag changed
//! *outside* the lock (the cancellation flag) has no such ordering; its setter calls
//! [`Condition::wake_all`], which always bumps the epoch under the epoch mutex: either the
//! waiter read `seen` before the bump (and does not sleep), or after it, and then the mutex
//! orders the flag's store before the waiter's check of it.

use std::time::{Duration, Instant};

use streamtask_core::sync::atomic::{AtomicUsize, Ordering};
use streamtask_core::sync::{Condvar, Mutex};

/// The epoch condition described in the module doc.
#[derive(Debug, Default)]
pub(crate) struct Condition {
    waiters: AtomicUsize,
    epoch: Mutex<u64>,
    changed: Condvar,
}

/// What a registered waiter saw when it registered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    seen: u64,
}

impl Condition {
    /// Step 1 of the waiter's protocol: count this thread as a waiter and note the epoch.
    pub(crate) fn register(&self) -> Ticket {
        // Relaxed would do (the checkpoint lock orders it before a notifier's load); SeqCst
        // costs nothing extra on this slow path.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        Ticket {
            seen: *self.epoch.lock(),
        }
    }

    /// Undoes [`register`](Self::register) when the waiter did not need to block.
    pub(crate) fn unregister(&self) {
        // Release: a stale count only causes a spurious (harmless) epoch bump.
        self.waiters.fetch_sub(1, Ordering::Release);
    }

    /// Step 4: blocks until the epoch moved past `ticket`, or until `deadline`. Unregisters.
    /// Returns `false` if the deadline passed first.
    pub(crate) fn block(&self, ticket: Ticket, deadline: Option<Instant>) -> bool {
        let mut epoch = self.epoch.lock();
        let mut notified = true;
        while *epoch == ticket.seen {
            match deadline {
                None => self.changed.wait(&mut epoch),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        notified = false;
                        break;
                    }
                    self.changed.wait_for(&mut epoch, deadline - now);
                }
            }
        }
        drop(epoch);
        self.unregister();
        notified
    }

    /// Wakes every waiter after a change made under the checkpoint lock; one atomic load when
    /// nobody waits.
    #[inline]
    pub(crate) fn notify_all(&self) {
        // Acquire: the registration it must see is ordered before it by the checkpoint lock
        // (module doc); Acquire documents that it reads another thread's write.
        if self.waiters.load(Ordering::Acquire) == 0 {
            return;
        }
        self.wake_all();
    }

    /// Wakes every waiter unconditionally: after a change made outside the checkpoint lock.
    pub(crate) fn wake_all(&self) {
        let mut epoch = self.epoch.lock();
        *epoch = epoch.wrapping_add(1);
        self.changed.notify_all();
    }
}

/// A deadline `timeout` from now (saturating far in the future).
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}
