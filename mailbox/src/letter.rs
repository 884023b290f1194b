//! [`Letter`]: what the processor's mails carry, an action on the task state or a control signal.
//!
//! # The mailbox-latency sample
//!
//! The mailbox-latency metric (enqueue to run) is sampled, as Flink samples its own: one mail
//! in [`MAILBOX_LATENCY_SAMPLE`] of those each thread puts carries its enqueue time (the first,
//! then every `MAILBOX_LATENCY_SAMPLE`-th), and only those are recorded when they run. Two
//! clock reads per mail were a tenth of a mail's cost on a hot completion path; a sample keeps
//! the distribution (every putting thread is sampled the same way) at one clock read pair per
//! `MAILBOX_LATENCY_SAMPLE` mails. The count of the histogram is therefore the number of
//! sampled mails, not of mails run (that is the `mails` counter).

use std::cell::Cell;
use std::fmt;
use std::time::Instant;

use streamtask_core::operator::OperatorEvent;

/// One mail in this many (of those a thread puts: the first, then every this-many-th) carries
/// its enqueue time, and only those are recorded in the mailbox-latency metric, as Flink
/// samples its own: so a mail costs no clock read on the common path. The metric's count is
/// the number of sampled mails; the `mails` counter counts them all.
pub const MAILBOX_LATENCY_SAMPLE: u32 = 16;

thread_local! {
    /// Mails this thread put, modulo [`MAILBOX_LATENCY_SAMPLE`].
    static PUT: Cell<u32> = const { Cell::new(0) };
}

/// The enqueue time of a mail about to be put, if it is one of the sample: the first of every
/// [`MAILBOX_LATENCY_SAMPLE`] this thread puts.
#[inline]
pub(crate) fn stamp() -> Option<Instant> {
    PUT.with(|put| {
        let n = put.get();
        put.set(if n + 1 == MAILBOX_LATENCY_SAMPLE {
            0
        } else {
            n + 1
        });
        (n == 0).then(Instant::now)
    })
}

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

/// An action a mail runs on the mailbox thread *without* the action executor: work that needs
/// the mailbox thread and the mails' order but reaches the state its own way (see
/// [`ProcessorHandle::execute_unlocked`](crate::ProcessorHandle::execute_unlocked)).
pub(crate) trait UnlockedAction<E>: Send {
    fn run(self: Box<Self>) -> Result<(), E>;
}

/// A closure as an [`UnlockedAction`].
pub(crate) struct FnUnlocked<F>(pub(crate) F);

impl<E, F> UnlockedAction<E> for FnUnlocked<F>
where
    F: FnOnce() -> Result<(), E> + Send,
{
    fn run(self: Box<Self>) -> Result<(), E> {
        (self.0)()
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
    /// A failure reported from another thread: the loop ends with it. Boxed: a failure is rare
    /// and large (a `TaskFailure` is over 100 bytes), and every mail is as large as this
    /// variant, moved in and out of the queue's buffers (a mail is 144 bytes with `E` inline,
    /// 64 boxed).
    Fail(Box<E>),
}

/// How an event mail delivers its event to the state: the state's
/// [`OperatorMails::on_event`](crate::OperatorMails::on_event), which the processor cannot
/// name itself (its state type has no such bound).
pub(crate) type EventRun<S, E> = fn(&mut S, usize, OperatorEvent) -> Result<(), E>;

pub(crate) enum LetterKind<S, E> {
    Action(Box<dyn MailAction<S, E>>),
    /// An event for the operator the mail's priority names (`Priority::operator_index`),
    /// delivered by the processor's [`EventRun`]. The event's own box travels in the letter:
    /// an event costs one allocation, not two (its box, and an action's around it), and the
    /// letter is no larger than one with an action.
    Event(OperatorEvent),
    /// Run without the action executor (see [`UnlockedAction`]).
    Unlocked(Box<dyn UnlockedAction<E>>),
    Control(Control<E>),
}

/// What a mail runs on the task state, through the processor's
/// [`ActionExecutor`](crate::ActionExecutor): a boxed action, or an event with how to deliver it.
pub(crate) enum StateAction<S, E> {
    Boxed(Box<dyn MailAction<S, E>>),
    Event {
        run: EventRun<S, E>,
        operator: usize,
        event: OperatorEvent,
    },
}

impl<S, E> StateAction<S, E> {
    /// Runs it on `state`.
    #[inline]
    pub(crate) fn run(self, state: &mut S) -> Result<(), E> {
        match self {
            StateAction::Boxed(action) => action.run(state),
            StateAction::Event {
                run,
                operator,
                event,
            } => run(state, operator, event),
        }
    }
}

/// What the [`MailboxProcessor`](crate::MailboxProcessor)'s mails carry: an action on the task
/// state `S` (run through the processor's [`ActionExecutor`](crate::ActionExecutor)), or one of
/// the processor's own control signals (run without it), plus a description for traces and,
/// for one mail in [`MAILBOX_LATENCY_SAMPLE`], the time it was enqueued (for the sampled
/// mailbox-latency metric).
///
/// Build actions with [`Letter::action`] and put them with a
/// [`MailboxExecutor`](crate::MailboxExecutor), or directly into the processor's
/// [`TaskMailbox`](crate::TaskMailbox).
pub struct Letter<S, E> {
    pub(crate) kind: LetterKind<S, E>,
    pub(crate) description: &'static str,
    /// Set for the mails of the latency sample (see the module docs).
    pub(crate) enqueued: Option<Instant>,
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
            enqueued: stamp(),
        }
    }

    pub(crate) fn control(description: &'static str, control: Control<E>) -> Self {
        Letter {
            kind: LetterKind::Control(control),
            description,
            enqueued: stamp(),
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

    /// When it was enqueued, if it is one of the mailbox-latency sample (one mail in
    /// [`MAILBOX_LATENCY_SAMPLE`] is; the others are not timed).
    pub fn enqueued_at(&self) -> Option<Instant> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mail;
    use streamtask_core::task::TaskFailure;

    /// Every mail moves in and out of the queue's buffers by value: the rare, large failure
    /// payload is boxed so it does not set the size of every mail.
    #[test]
    fn a_task_mail_fits_one_cache_line() {
        assert!(std::mem::size_of::<TaskFailure>() > 64);
        assert!(std::mem::size_of::<Mail<Letter<(), TaskFailure>>>() <= 64);
    }
}
