//! [`ActionExecutor`]: how the processor reaches the task state, the seam the bridge implements.
//!
#![doc = include_str!("action.md")]

use std::fmt;

/// Runs actions on the task state `S` on behalf of the
/// [`MailboxProcessor`](crate::MailboxProcessor).
///
#[doc = include_str!("action.md")]
///
/// # Examples
///
/// An executor that keeps the state behind a mutex shared with another thread (the shape of the
/// bridge's checkpoint-lock executor):
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamtask_mailbox::ActionExecutor;
///
/// struct Locked<S>(Arc<Mutex<S>>);
///
/// impl<S> ActionExecutor<S> for Locked<S> {
///     fn run<R>(&mut self, action: impl FnOnce(&mut S) -> R) -> R {
///         let mut state = self.0.lock().unwrap();
///         action(&mut state)
///     }
/// }
///
/// let shared = Arc::new(Mutex::new(0u64));
/// let mut executor = Locked(Arc::clone(&shared));
/// executor.run(|n| *n += 1);
/// assert_eq!(*shared.lock().unwrap(), 1);
/// ```
pub trait ActionExecutor<S> {
    /// Runs `action` with exclusive access to the state and returns what it returns.
    fn run<R>(&mut self, action: impl FnOnce(&mut S) -> R) -> R;
}

/// The executor of tasks that own their state: runs every action inline, with no lock.
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{ActionExecutor, Immediate};
///
/// let mut executor = Immediate::new(vec![1, 2]);
/// executor.run(|v| v.push(3));
/// assert_eq!(executor.into_inner(), vec![1, 2, 3]);
/// ```
pub struct Immediate<S> {
    state: S,
}

impl<S> Immediate<S> {
    /// Owns `state`.
    pub fn new(state: S) -> Self {
        Immediate { state }
    }

    /// The state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The state, mutably.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// Gives the state back.
    pub fn into_inner(self) -> S {
        self.state
    }
}

impl<S> ActionExecutor<S> for Immediate<S> {
    #[inline]
    fn run<R>(&mut self, action: impl FnOnce(&mut S) -> R) -> R {
        action(&mut self.state)
    }
}

impl<S> fmt::Debug for Immediate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Immediate").finish_non_exhaustive()
    }
}
