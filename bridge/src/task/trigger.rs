//! The checkpoint triggers waiting for the lock: one queue, served by whichever holder of the
//! checkpoint lock gets there first, the source thread before its next section (the lock's
//! errand) or the mailbox thread running the trigger's fallback mail. Each trigger is taken out
//! of the queue once (under its mutex), by a holder of the checkpoint lock, so it runs or
//! declines exactly once, and in the order the triggers were made (the lock serializes the
//! holders).
//!
//! # The fallback mail is posted only when needed
//!
//! A hot source takes a trigger within one section, long before a woken mailbox thread could;
//! a mail that then finds nothing still costs a wake-up of the mailbox thread and a hand-over
//! of the lock (the source lets go and sleeps until the mailbox thread had it), and on a
//! two-core machine that wake-up preempts the source, often while it runs the trigger. So the
//! triggering thread [offers](PendingTriggers::offer) the trigger: queues it, posts the errand,
//! and looks for up to [`TAKE_GRACE`] whether a holder took it; only if none did (the source is
//! blocked outside the lock, sleeping, finished, or in a long section) it posts the mail.
//!
//! | step | who | why no trigger is lost |
//! |---|---|---|
//! | push (under the queue's mutex), then post the errand, then look at the taken count | triggering thread | - |
//! | take triggers out of the queue, oldest first, raising the taken count under the queue's mutex | a holder of the checkpoint lock | a trigger counted as taken is that holder's: it runs or declines it |
//! | taken count past this trigger: done, no mail | triggering thread | the holder that took it runs it (or, failing, ends the task, whose end declines what is left) |
//! | otherwise: post the fallback mail | triggering thread | the mail takes the lock and runs what waits, whatever the source does; a mail that finds nothing does nothing |

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use streamtask_core::sync::Mutex;
use streamtask_core::sync::atomic::{AtomicU64, Ordering};

/// How long a triggering thread looks whether a holder took its trigger before it posts the
/// fallback mail: a hot source takes it within one section (well under a microsecond); a
/// source that did not take it by then is not hot (or is off its core), and the mail's
/// wake-up (tens of microseconds) dwarfs the wait.
pub(crate) const TAKE_GRACE: Duration = Duration::from_micros(10);

/// How many looks the triggering thread takes between two readings of the clock.
const SPINS: u32 = 64;

/// How many looks at most under loom (time is not modelled there): one after a yield.
const LOOM_LOOKS: u32 = 1;

/// What [`PendingTriggers::offer`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// `pub` for the loom models, which get it re-exported under `cfg(loom)` only.
#[allow(unreachable_pub)]
pub enum Offer {
    /// A holder of the lock took the trigger: it runs (or declines) it; nothing more to do.
    Taken,
    /// No holder took it yet: post the fallback mail.
    Waiting,
}

/// The triggers made and not yet taken (see the module docs). Generic over the trigger for the
/// loom models.
#[allow(unreachable_pub)]
pub struct PendingTriggers<T> {
    queue: Mutex<Queue<T>>,
    /// Triggers taken out of the queue so far (raised under the queue's mutex): the `n`th
    /// trigger pushed was taken once this is `n` or more.
    taken: AtomicU64,
}

struct Queue<T> {
    waiting: VecDeque<T>,
    pushed: u64,
}

#[allow(unreachable_pub)]
impl<T> PendingTriggers<T> {
    /// No trigger made yet.
    pub fn new() -> Self {
        PendingTriggers {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                pushed: 0,
            }),
            taken: AtomicU64::new(0),
        }
    }

    /// A trigger was made: queues it for the next holder of the checkpoint lock, calls `post`
    /// (which asks the holders: the lock's errand), then looks for up to [`TAKE_GRACE`]
    /// whether a holder took it. [`Offer::Waiting`]: the caller posts the fallback mail.
    pub fn offer(&self, trigger: T, post: impl FnOnce()) -> Offer {
        let seq = {
            let mut queue = self.queue.lock();
            queue.waiting.push_back(trigger);
            queue.pushed += 1;
            queue.pushed
        };
        post();
        if self.wait_taken(seq) {
            Offer::Taken
        } else {
            Offer::Waiting
        }
    }

    /// Looks (spinning) until the `seq`th trigger was taken, for at most [`TAKE_GRACE`];
    /// whether it was. It spins rather than yields: a yield on a busy machine can cost the
    /// caller a whole time slice (milliseconds), and the grace bounds what the spin costs.
    fn wait_taken(&self, seq: u64) -> bool {
        let taken = || self.taken.load(Ordering::Acquire) >= seq;
        if cfg!(loom) {
            for _ in 0..LOOM_LOOKS {
                streamtask_core::sync::thread::yield_now();
                if taken() {
                    return true;
                }
            }
            return taken();
        }
        let start = Instant::now();
        loop {
            for _ in 0..SPINS {
                if taken() {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= TAKE_GRACE {
                return taken();
            }
        }
    }

    /// The oldest trigger waiting; call it holding the checkpoint lock. The caller runs or
    /// declines it.
    pub fn pop(&self) -> Option<T> {
        let mut queue = self.queue.lock();
        let trigger = queue.waiting.pop_front()?;
        // Release: a triggering thread that sees the count knows its trigger is a holder's.
        self.taken.fetch_add(1, Ordering::Release);
        Some(trigger)
    }

    /// The task is ending and no holder will come: every trigger waiting declines (as it
    /// drops, outside the queue's mutex).
    pub fn decline_all(&self) {
        let left = {
            let mut queue = self.queue.lock();
            let left = std::mem::take(&mut queue.waiting);
            self.taken.fetch_add(left.len() as u64, Ordering::Release);
            left
        };
        drop(left);
    }
}

impl<T> Default for PendingTriggers<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for PendingTriggers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTriggers")
            .field("waiting", &self.queue.lock().waiting.len())
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish()
    }
}
