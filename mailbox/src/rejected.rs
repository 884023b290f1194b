//! [`Rejected`]: an action the mailbox refused, handed back with the state that refused it.

use std::fmt;

use crate::mailbox::MailboxState;

/// The mailbox refused an action; the action is handed back.
pub struct Rejected<A> {
    action: A,
    state: MailboxState,
}

impl<A> Rejected<A> {
    pub(crate) fn new(action: A, state: MailboxState) -> Self {
        Rejected { action, state }
    }

    pub(crate) fn map<B>(self, f: impl FnOnce(A) -> B) -> Rejected<B> {
        Rejected {
            action: f(self.action),
            state: self.state,
        }
    }

    /// The mailbox state that refused it.
    pub fn state(&self) -> MailboxState {
        self.state
    }

    /// The action that was not enqueued.
    pub fn into_inner(self) -> A {
        self.action
    }
}

impl<A> fmt::Debug for Rejected<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<A> fmt::Display for Rejected<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the mailbox is {} and accepts no mail; enqueue actions only while the task runs",
            self.state
        )
    }
}

impl<A> std::error::Error for Rejected<A> {}
