//! The latch between a source thread and the thread that waits for it (the bridge's task
//! thread, a handoff reader's `close`). The task's own lifecycle is the kit's
//! ([`Lifecycle`](streamtask_runtime::Lifecycle)).

use std::fmt;
use std::time::{Duration, Instant};

use streamtask_core::sync::{Condvar, Mutex};

/// `timeout` from now, saturating far in the future.
pub(crate) fn after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// The hand-over between a source thread and the thread that waits for it (the bridge's task
/// thread, a handoff reader's `close`).
///
/// | state | meaning | moves to |
/// |---|---|---|
/// | running | the source thread runs | ended (the source thread, at its very end), abandoned (the waiter, after the grace period) |
/// | ended | the source thread is about to return; join it | - |
/// | abandoned | the waiter gave up; the source thread cleans up after itself if it ever returns | - |
///
/// Both moves happen under one mutex, so exactly one side does the clean-up that needs the
/// source to have stopped (closing the chain, shutting the context's timers down).
// `pub` for the loom models, which get it re-exported under `cfg(loom)` only.
#[allow(unreachable_pub)]
pub struct SourceExit {
    state: Mutex<ExitState>,
    changed: Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitState {
    Running,
    Ended,
    Abandoned,
}

#[allow(unreachable_pub)]
impl SourceExit {
    /// A latch for a source thread that runs.
    pub fn new() -> Self {
        SourceExit {
            state: Mutex::new(ExitState::Running),
            changed: Condvar::new(),
        }
    }

    /// The source thread's last step: marks it ended and returns `true`, or returns `false` if
    /// the waiter abandoned it (the caller then cleans up itself).
    pub fn source_ended(&self) -> bool {
        let mut state = self.state.lock();
        if *state == ExitState::Abandoned {
            return false;
        }
        *state = ExitState::Ended;
        self.changed.notify_all();
        true
    }

    /// Waits up to `grace` for the source thread to end; returns `true` if it did, `false` if
    /// it is abandoned (it cleans up after itself if it ever returns).
    pub fn wait_ended(&self, grace: Duration) -> bool {
        self.wait_ended_until(after(grace))
    }

    /// Waits until `deadline` at most for the source thread to end; see
    /// [`wait_ended`](Self::wait_ended).
    pub fn wait_ended_until(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        loop {
            match *state {
                ExitState::Ended => return true,
                ExitState::Abandoned => return false,
                ExitState::Running => {}
            }
            let now = Instant::now();
            if now >= deadline {
                *state = ExitState::Abandoned;
                return false;
            }
            self.changed.wait_for(&mut state, deadline - now);
        }
    }
}

impl fmt::Debug for SourceExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceExit")
            .field("state", &*self.state.lock())
            .finish()
    }
}
