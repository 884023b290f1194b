//! Cancellation that reaches a source blocked in a wait or in I/O.
//!
//! Flink cancels a legacy source by calling `SourceFunction#cancel()` from another thread and
//! then interrupting the source thread, because the source may block (in I/O, in a sleep, or
//! while holding the checkpoint lock) where a flag alone does not reach it (FLINK-15076). Rust
//! has no thread interruption, so the token offers what interruption was used for:
//!
//! - a flag to poll: [`CancellationToken::is_cancelled`];
//! - waits that return early on cancellation: [`CancellationToken::sleep`] and
//!   [`CancellationToken::wait`];
//! - hooks that run on cancellation, to close a socket or wake a blocking call:
//!   [`CancellationToken::on_cancel`].
//!
//! # States
//!
//! | state | `is_cancelled` | `on_cancel(hook)` | moves to |
//! |---|---|---|---|
//! | active | `false` | hook kept until cancel (or its registration is dropped) | cancelled |
//! | cancelled | `true` | hook runs at once, on the caller's thread | - |
//!
//! `cancel` is idempotent; the first call runs the hooks (outside any lock, in registration
//! order) and wakes every sleeper.

use std::fmt;
use std::time::{Duration, Instant};

use streamtask_core::sync::atomic::{AtomicBool, Ordering};
use streamtask_core::sync::{Arc, Condvar, Mutex};

type Hook = Box<dyn FnOnce() + Send>;

/// A cloneable cancellation signal shared by a task and its source.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_legacy::CancellationToken;
///
/// let token = CancellationToken::new();
/// let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
/// let flag = closed.clone();
/// let _hook = token.on_cancel(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
///
/// let sleeper = {
///     let token = token.clone();
///     std::thread::spawn(move || token.sleep(Duration::from_secs(3600)))
/// };
/// token.cancel();
/// assert!(sleeper.join().unwrap().is_err()); // woken early
/// assert!(token.is_cancelled());
/// assert!(closed.load(std::sync::atomic::Ordering::SeqCst));
/// ```
#[derive(Clone)]
pub struct CancellationToken {
    inner: Arc<Inner>,
}

struct Inner {
    cancelled: AtomicBool,
    hooks: Mutex<Hooks>,
    woken: Condvar,
}

#[derive(Default)]
struct Hooks {
    next_id: u64,
    pending: Vec<(u64, Hook)>,
    cancelled: bool,
}

/// A wait was cut short because the token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cancelled; stop what you are doing and return from the source's run loop")]
pub struct Cancelled;

impl From<Cancelled> for streamtask_core::OperatorError {
    fn from(_: Cancelled) -> Self {
        streamtask_core::OperatorError::Cancelled
    }
}

impl CancellationToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        CancellationToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                hooks: Mutex::new(Hooks::default()),
                woken: Condvar::new(),
            }),
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        // Acquire: pairs with the Release store in `cancel`, so what the canceller did before
        // (closing things) is visible to whoever sees the flag.
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Cancels: sets the flag, runs every registered hook once (on this thread), and wakes
    /// every [`sleep`](Self::sleep) and [`wait`](Self::wait). Idempotent.
    pub fn cancel(&self) {
        let hooks = {
            let mut hooks = self.inner.hooks.lock();
            if hooks.cancelled {
                return;
            }
            hooks.cancelled = true;
            // Release: see `is_cancelled`. Stored under the hooks mutex so a sleeper that checked
            // the flag under it cannot miss the notification below. Hooks that wake a checkpoint
            // lock's waiters run after this store (`CheckpointLock::wake_all`).
            self.inner.cancelled.store(true, Ordering::Release);
            self.inner.woken.notify_all();
            std::mem::take(&mut hooks.pending)
        };
        for (_, hook) in hooks {
            hook();
        }
    }

    /// Sleeps for `duration` or until cancelled.
    ///
    /// # Errors
    ///
    /// [`Cancelled`] if the token was (or became) cancelled.
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let deadline = Instant::now().checked_add(duration);
        let mut hooks = self.inner.hooks.lock();
        loop {
            if hooks.cancelled {
                return Err(Cancelled);
            }
            let Some(deadline) = deadline else {
                self.inner.woken.wait(&mut hooks);
                continue;
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            self.inner.woken.wait_for(&mut hooks, deadline - now);
        }
    }

    /// Blocks until the token is cancelled.
    pub fn wait(&self) {
        let mut hooks = self.inner.hooks.lock();
        while !hooks.cancelled {
            self.inner.woken.wait(&mut hooks);
        }
    }

    /// Registers `hook` to run when the token is cancelled (at once, on this thread, if it
    /// already is). Dropping the returned registration unregisters a hook that has not run.
    ///
    /// Hooks run on the cancelling thread, outside any lock: keep them short and non-blocking
    /// (close a socket, set a flag, wake a condition).
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) -> CancelHook {
        let mut hooks = self.inner.hooks.lock();
        if hooks.cancelled {
            drop(hooks);
            hook();
            return CancelHook { token: None, id: 0 };
        }
        let id = hooks.next_id;
        hooks.next_id += 1;
        hooks.pending.push((id, Box::new(hook)));
        CancelHook {
            token: Some(self.clone()),
            id,
        }
    }
}

impl Default for CancellationToken {
    fn default() -> Self {
        CancellationToken::new()
    }
}

impl fmt::Debug for CancellationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancellationToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A hook registered with [`CancellationToken::on_cancel`]; dropping it unregisters the hook if
/// it has not run yet.
#[must_use = "dropping the registration unregisters the hook"]
pub struct CancelHook {
    token: Option<CancellationToken>,
    id: u64,
}

impl CancelHook {
    /// Keeps the hook registered for the token's whole life.
    pub fn forget(mut self) {
        self.token = None;
    }
}

impl Drop for CancelHook {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            token
                .inner
                .hooks
                .lock()
                .pending
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl fmt::Debug for CancelHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelHook")
            .field("registered", &self.token.is_some())
            .finish()
    }
}
