//! [`MailboxFiring`]: the mailbox model's [`TimerFiring`] service. A long firing of event-time
//! timers looks at the mailbox's flag word between chunks (one atomic load) and defers the
//! rest to a [deferrable](Priority::DEFERRABLE) mail that delivers a continuation event to the
//! operator (the protocol is on [`TimerFiring`]'s module).

use std::fmt;
use std::num::NonZeroUsize;

use streamtask_core::operator::{OperatorEvent, TimerFiring};
use streamtask_core::sync::Arc;
use streamtask_core::time::InterruptibleTimers;

use crate::letter::MailAction;
use crate::mail::Priority;
use crate::processor::ProcessorHandle;
use crate::services::OperatorMails;
use crate::shared::Core;

/// Lets the operators of a mailbox task interrupt long firings of event-time timers: mails
/// waiting run between two chunks, the rest of the firing follows in a deferrable mail.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use streamtask_core::operator::{OperatorEvent, TaskServices, TimerFiring};
/// use streamtask_core::time::InterruptibleTimers;
/// use streamtask_mailbox::{MailboxFiring, OperatorMails, ProcessorBuilder, TaskMailbox};
///
/// struct Operators(u32);
/// impl OperatorMails<String> for Operators {
///     fn on_timer(&mut self, _: streamtask_core::time::Timer) -> Result<(), String> { Ok(()) }
///     fn on_event(&mut self, _: usize, _: OperatorEvent) -> Result<(), String> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
///
/// let builder = ProcessorBuilder::<Operators, String>::new(TaskMailbox::new());
/// let firing = MailboxFiring::new(&builder.handle(), InterruptibleTimers::enabled());
/// assert!(firing.chunk().is_some());
/// assert!(!firing.should_interrupt());
/// firing.defer(0, Box::new(())).unwrap();
/// assert!(firing.should_interrupt()); // the continuation itself waits now
/// ```
pub struct MailboxFiring<S, E> {
    core: Arc<Core<S, E>>,
    chunk: Option<NonZeroUsize>,
}

impl<S, E> MailboxFiring<S, E> {
    /// The firing service of the processor `handle` reaches, as `setting` says (disabled: it
    /// never interrupts).
    pub fn new(handle: &ProcessorHandle<S, E>, setting: InterruptibleTimers) -> Self {
        MailboxFiring {
            core: Arc::clone(handle.core()),
            chunk: setting.is_enabled().then(|| setting.chunk()),
        }
    }
}

impl<S: OperatorMails<E> + 'static, E: Send + 'static> TimerFiring for MailboxFiring<S, E> {
    fn chunk(&self) -> Option<NonZeroUsize> {
        self.chunk
    }

    #[inline]
    fn should_interrupt(&self) -> bool {
        // Any mail, or a rung doorbell (a source task's checkpoint trigger): the flag word.
        self.core.mailbox.has_mail_hint()
    }

    fn defer(&self, operator: usize, continuation: OperatorEvent) -> Result<(), OperatorEvent> {
        if self.chunk.is_none() {
            return Err(continuation);
        }
        // Refused once the mailbox no longer takes mails: the event comes back and the firing
        // goes on at once.
        self.core
            .enqueue(
                Priority::DEFERRABLE,
                "timer firing continuation",
                Continuation {
                    operator,
                    event: continuation,
                },
            )
            .map_err(|rejected| rejected.into_inner().event)
    }
}

impl<S, E> fmt::Debug for MailboxFiring<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxFiring")
            .field("chunk", &self.chunk)
            .finish_non_exhaustive()
    }
}

/// The deferrable mail that carries a continuation event to its operator.
struct Continuation {
    operator: usize,
    event: OperatorEvent,
}

impl<S: OperatorMails<E>, E> MailAction<S, E> for Continuation {
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E> {
        let Continuation { operator, event } = *self;
        state.on_event(operator, event)
    }
}
