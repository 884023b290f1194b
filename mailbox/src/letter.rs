//! [`Letter`]: what the processor's mails carry, an action on the task state or a control signal.

use std::fmt;
use std::time::Instant;

/// An action a mail runs on the task state `S`; an error ends the mailbox loop.
///
/// Closures get it through [`Letter::action`]; the crate's own mails (submit, timers, events)
/// implement it on named structs so a refused mail can hand its payload back unboxed.
pub(crate) trait MailAction<S, E>: Send {
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E>;
}

/// A closure as a [`MailAction`].
pub(crate) struct FnMail<F>(pub(crate) F);

impl<S, E, F> MailAction<S, E> for FnMail<F>
where
    F: FnOnce(&mut S) -> Result<(), E> + Send,
{
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E> {
        (self.0)(state)
    }
}

/// Signals that change the processor's control flow. They run on the mailbox thread without the
/// action executor (so never under the bridge's checkpoint lock).
pub(crate) enum Control<E> {
    /// `all_actions_completed`: the loop ends for good.
    Poison,
    /// `suspend`: the loop returns and may be run again.
    SuspendLoop,
    /// Resume the default action if its suspension is still the one with this token.
    Resume(u64),
    /// Nothing; it only makes the loop look at its flags (the owner set them directly).
    Signal,
    /// A failure reported from another thread: the loop ends with it.
    Fail(E),
}

pub(crate) enum LetterKind<S, E> {
    Action(Box<dyn MailAction<S, E>>),
    Control(Control<E>),
}

/// What the [`MailboxProcessor`](crate::MailboxProcessor)'s mails carry: an action on the task
/// state `S` (run through the processor's [`ActionExecutor`](crate::ActionExecutor)), or one of
/// the processor's own control signals (run without it), plus a description for traces and the
/// time it was enqueued (for the mailbox-latency metric).
///
/// Build actions with [`Letter::action`] and put them with a
/// [`MailboxExecutor`](crate::MailboxExecutor), or directly into the processor's
/// [`TaskMailbox`](crate::TaskMailbox).
pub struct Letter<S, E> {
    pub(crate) kind: LetterKind<S, E>,
    pub(crate) description: &'static str,
    pub(crate) enqueued: Instant,
}

impl<S, E> Letter<S, E> {
    /// An action on the task state; its error ends the mailbox loop with that error.
    pub fn action<F>(description: &'static str, action: F) -> Self
    where
        F: FnOnce(&mut S) -> Result<(), E> + Send + 'static,
        S: 'static,
        E: 'static,
    {
        Letter::boxed(description, Box::new(FnMail(action)))
    }

    pub(crate) fn boxed(description: &'static str, action: Box<dyn MailAction<S, E>>) -> Self {
        Letter {
            kind: LetterKind::Action(action),
            description,
            enqueued: Instant::now(),
        }
    }

    pub(crate) fn control(description: &'static str, control: Control<E>) -> Self {
        Letter {
            kind: LetterKind::Control(control),
            description,
            enqueued: Instant::now(),
        }
    }

    /// What the mail is for.
    pub fn description(&self) -> &'static str {
        self.description
    }

    /// Whether this is one of the processor's control signals.
    pub fn is_control(&self) -> bool {
        matches!(self.kind, LetterKind::Control(_))
    }

    /// When it was enqueued.
    pub fn enqueued_at(&self) -> Instant {
        self.enqueued
    }
}

impl<S, E> fmt::Debug for Letter<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Letter")
            .field("description", &self.description)
            .field("control", &self.is_control())
            .finish_non_exhaustive()
    }
}
