//! [`MailboxExecutor`]: how code reaches the task thread through the mailbox (Flink's
//! `MailboxExecutorImpl`), and the [`SubmitHandle`] of a submitted mail.
//!
//! | call | from | does |
//! |---|---|---|
//! | [`execute`](MailboxExecutor::execute) | any thread | enqueues an action at the executor's priority; its error ends the loop |
//! | [`submit`](MailboxExecutor::submit) | any thread | the same, with a handle to wait on (or `.await`: it is a future); its error goes to the handle, not the loop |
//! | [`yield_now`](MailboxExecutor::yield_now) | mailbox thread | runs the next mail of priority `>=` the executor's, blocking until one comes |
//! | [`try_yield`](MailboxExecutor::try_yield) | mailbox thread | the same without blocking |
//! | [`is_idle`](MailboxExecutor::is_idle) | mailbox thread | default action suspended, no mail waiting, mailbox open |
//! | [`should_interrupt`](MailboxExecutor::should_interrupt) | mailbox thread | whether a mail (or a rung doorbell) waits: one atomic load |
//!
//! A yield never runs a [deferrable](Priority::DEFERRABLE) mail, whatever the executor's
//! priority: such a mail re-enqueues itself while its work is not done, and a caller yielding
//! until no mail is left would run it forever (FLINK-35528). The loop runs it in its turn.
//!
//! # Yield and ownership
//!
//! In Flink an operator blocked on a full queue calls `yield()` from inside `processElement` and
//! runs its own completion mails re-entrantly. In Rust that operator holds `&mut self`, which is
//! part of the task state every mail needs, so it cannot run mails from inside itself: the
//! borrow checker forbids the re-entrancy Flink had to tame with priorities. `yield_now` therefore
//! takes the state as an argument, and is for code that holds the state but is not inside it:
//! the task's own control code, or a mail that drives others. Operators that wait for their own
//! mails use soft backpressure instead ([`Operator::accepts_input`](streamtask_core::operator::Operator::accepts_input)
//! returns `false`; the task suspends its default action and the completion mail resumes it),
//! so checkpoints keep flowing while they wait (FLINK-39835).
//!
//! An operator that must wait *inside* its handler is an
//! [`AsyncOperator`](crate::AsyncOperator): it `.await`s, and
//! [`AsyncContext::yield_now`](crate::AsyncContext::yield_now) is `yield()` without the
//! re-entrancy (the operator is inside its own pending future, not under a borrow).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use streamtask_core::sync::{Arc, Condvar, Mutex};

use crate::letter::{FnMail, MailAction};
use crate::mail::Priority;
use crate::mailbox::TakeError;
pub use crate::rejected::Rejected;
use crate::shared::Core;

/// Enqueues actions on the task state `S` at one [`Priority`]; cloneable and `Send`. Get one
/// from [`MailboxProcessor::mailbox_executor`](crate::MailboxProcessor::mailbox_executor).
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{Controller, Immediate, MailboxProcessor, Priority, TaskMailbox};
///
/// let mut processor =
///     MailboxProcessor::<u32, String, _>::new(TaskMailbox::new(), Immediate::new(1));
/// let executor = processor.mailbox_executor(Priority::MIN);
/// let doubled = std::thread::spawn(move || {
///     executor.submit("double", |n: &mut u32| { *n *= 2; Ok(*n) }).unwrap()
/// })
/// .join()
/// .unwrap();
/// let mut step = |_: &mut u32, c: &mut Controller<'_>| { c.all_actions_completed(); Ok(()) };
/// processor.run_mailbox_loop(&mut step).unwrap();
/// assert_eq!(doubled.wait().unwrap(), 2);
/// ```
pub struct MailboxExecutor<S, E> {
    core: Arc<Core<S, E>>,
    priority: Priority,
}

impl<S, E> MailboxExecutor<S, E> {
    pub(crate) fn new(core: Arc<Core<S, E>>, priority: Priority) -> Self {
        MailboxExecutor { core, priority }
    }

    /// The priority of this executor's mails, and the lowest priority its yields see.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Whether a mail waits (or the doorbell rang): what long work on the mailbox thread checks
    /// between chunks to let mails run (Flink's `shouldInterrupt`), one atomic load. Meaningful
    /// on the mailbox thread; a hint elsewhere.
    #[inline]
    pub fn should_interrupt(&self) -> bool {
        self.core.mailbox.has_mail_hint()
    }

    /// The lowest priority a yield of this executor looks at: its own, but never below
    /// [`Priority::MIN`], so no yield runs a deferrable mail.
    #[inline]
    fn yield_priority(&self) -> Priority {
        self.priority.max(Priority::MIN)
    }

    /// Whether the task is idle: the default action is suspended, no mail is waiting, and the
    /// mailbox still accepts mails (so a loop that is closing is not idle, FLINK-19109).
    /// Meaningful on the mailbox thread.
    pub fn is_idle(&self) -> bool {
        !self.core.default_action_available()
            && !self.core.mailbox.has_mail_hint()
            && self.core.mailbox.state().is_accepting_mails()
    }
}

impl<S: 'static, E: 'static> MailboxExecutor<S, E> {
    /// Enqueues `action` (FIFO among mails of the same visibility); from any thread. An error it
    /// returns ends the mailbox loop with that error.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the action when the mailbox no longer accepts mails.
    pub fn execute<F>(&self, description: &'static str, action: F) -> Result<(), Rejected<F>>
    where
        F: FnOnce(&mut S) -> Result<(), E> + Send + 'static,
    {
        self.core
            .enqueue(self.priority, description, FnMail(action))
            .map_err(|rejected| rejected.map(|FnMail(action)| action))
    }

    /// Enqueues `action` and returns a handle to wait for its result; from any thread. An error
    /// it returns goes to the handle and does not end the loop. Never wait on the handle from
    /// the mailbox thread itself: the mail could not run.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the action when the mailbox no longer accepts mails.
    pub fn submit<R, F>(
        &self,
        description: &'static str,
        action: F,
    ) -> Result<SubmitHandle<R, E>, Rejected<F>>
    where
        F: FnOnce(&mut S) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: Send,
    {
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Pending(None)),
            done: Condvar::new(),
        });
        let mail = SubmitMail {
            action,
            completer: Completer {
                slot: Some(Arc::clone(&slot)),
            },
        };
        match self.core.enqueue(self.priority, description, mail) {
            Ok(()) => Ok(SubmitHandle { slot }),
            Err(rejected) => Err(rejected.map(|mail| mail.action)),
        }
    }

    /// Runs the next mail whose priority is `>=` this executor's (and never a
    /// [deferrable](Priority::DEFERRABLE) one), blocking until one arrives; mailbox thread
    /// only. Actions run directly on `state` (the caller holds it), control mails on the
    /// processor's flags.
    ///
    /// # Errors
    ///
    /// [`YieldError::Failed`] with the mail's error (or a reported failure);
    /// [`YieldError::Mailbox`] off the mailbox thread, once closed, or when quiesced with
    /// nothing visible left.
    pub fn yield_now(&self, state: &mut S) -> Result<(), YieldError<E>> {
        let mail = self.core.mailbox.take(self.yield_priority())?;
        self.core
            .run_mail(mail, |action| action.run(state))
            .map_err(YieldError::Failed)
    }

    /// Runs the next visible mail if there is one (never a [deferrable](Priority::DEFERRABLE)
    /// one); returns whether one ran. Mailbox thread only.
    ///
    /// # Errors
    ///
    /// As [`yield_now`](Self::yield_now).
    pub fn try_yield(&self, state: &mut S) -> Result<bool, YieldError<E>> {
        match self.core.mailbox.try_take(self.yield_priority())? {
            Some(mail) => {
                self.core
                    .run_mail(mail, |action| action.run(state))
                    .map_err(YieldError::Failed)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl<S, E> Clone for MailboxExecutor<S, E> {
    fn clone(&self) -> Self {
        MailboxExecutor {
            core: Arc::clone(&self.core),
            priority: self.priority,
        }
    }
}

impl<S, E> fmt::Debug for MailboxExecutor<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxExecutor")
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

/// A yield failed.
#[derive(Debug, thiserror::Error)]
pub enum YieldError<E> {
    /// The mail that ran failed, or was a failure report.
    #[error("{0}")]
    Failed(E),
    /// The mailbox refused the take.
    #[error(transparent)]
    Mailbox(#[from] TakeError),
}

/// A submitted mail did not deliver a result.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError<E> {
    /// The action ran and returned this error.
    #[error("{0}")]
    Failed(E),
    /// The mail was dropped without running (the mailbox closed first, or the task failed); the
    /// task is over, resubmit to its successor if needed.
    #[error("the mail was dropped without running because the task ended first")]
    Cancelled,
}

struct Slot<R, E> {
    state: Mutex<SlotState<R, E>>,
    done: Condvar,
}

enum SlotState<R, E> {
    /// Not run yet; the waker of a task `.await`ing the handle, if one is.
    Pending(Option<Waker>),
    Ready(Result<R, SubmitError<E>>),
    Taken,
}

/// Completes the slot once; dropping it unused (the mail was dropped) cancels.
struct Completer<R, E> {
    slot: Option<Arc<Slot<R, E>>>,
}

impl<R, E> Completer<R, E> {
    fn finish(&mut self, result: Result<R, SubmitError<E>>) {
        if let Some(slot) = self.slot.take() {
            // Set the result and take the waker under the lock `poll` registers it under, so a
            // poll either sees the result or leaves a waker that is woken here.
            let waker = match std::mem::replace(&mut *slot.state.lock(), SlotState::Ready(result)) {
                SlotState::Pending(waker) => waker,
                SlotState::Ready(_) | SlotState::Taken => None,
            };
            slot.done.notify_all();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl<R, E> Drop for Completer<R, E> {
    fn drop(&mut self) {
        self.finish(Err(SubmitError::Cancelled));
    }
}

struct SubmitMail<F, R, E> {
    action: F,
    completer: Completer<R, E>,
}

impl<S, E, R, F> MailAction<S, E> for SubmitMail<F, R, E>
where
    F: FnOnce(&mut S) -> Result<R, E> + Send,
    R: Send,
    E: Send,
{
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E> {
        let SubmitMail {
            action,
            mut completer,
        } = *self;
        completer.finish((action)(state).map_err(SubmitError::Failed));
        Ok(())
    }
}

/// The result of a [`submit`](MailboxExecutor::submit)ted mail, once it ran.
pub struct SubmitHandle<R, E> {
    slot: Arc<Slot<R, E>>,
}

impl<R, E> SubmitHandle<R, E> {
    /// Whether the result is there (the mail ran or was dropped).
    pub fn is_done(&self) -> bool {
        !matches!(*self.slot.state.lock(), SlotState::Pending(_))
    }

    /// Waits for the result.
    ///
    /// # Errors
    ///
    /// [`SubmitError::Failed`] with the action's error, [`SubmitError::Cancelled`] if the mail
    /// was dropped without running.
    pub fn wait(self) -> Result<R, SubmitError<E>> {
        let mut state = self.slot.state.lock();
        while matches!(*state, SlotState::Pending(_)) {
            self.slot.done.wait(&mut state);
        }
        take(&mut state)
    }

    /// Waits at most `timeout`; gives the handle back if the result is not there by then.
    ///
    /// # Errors
    ///
    /// `Err(self)` on timeout.
    pub fn wait_timeout(self, timeout: Duration) -> Result<Result<R, SubmitError<E>>, Self> {
        let deadline = Instant::now() + timeout;
        {
            let mut state = self.slot.state.lock();
            while matches!(*state, SlotState::Pending(_)) {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                self.slot.done.wait_for(&mut state, deadline - now);
            }
            if !matches!(*state, SlotState::Pending(_)) {
                return Ok(take(&mut state));
            }
        }
        Err(self)
    }
}

fn take<R, E>(state: &mut SlotState<R, E>) -> Result<R, SubmitError<E>> {
    match std::mem::replace(state, SlotState::Taken) {
        SlotState::Ready(result) => result,
        SlotState::Pending(_) | SlotState::Taken => {
            unreachable!("a handle takes its result once, after it is ready")
        }
    }
}

/// A handle is also a future of the result, for async code (an
/// [`AsyncOperator`](crate::AsyncOperator) handed an executor of another mailbox): `.await`
/// does not block the thread, and the mail's completion wakes the awaiting task.
///
/// # Panics
///
/// If polled again after it returned the result.
impl<R, E> Future for SubmitHandle<R, E> {
    type Output = Result<R, SubmitError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let mut state = self.slot.state.lock();
        match &mut *state {
            // Registered under the lock `finish` sets the result under: no lost wake.
            SlotState::Pending(waker) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            SlotState::Ready(_) => Poll::Ready(take(&mut state)),
            SlotState::Taken => panic!("a SubmitHandle was polled after it returned its result"),
        }
    }
}

impl<R, E> fmt::Debug for SubmitHandle<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitHandle")
            .field("done", &self.is_done())
            .finish()
    }
}
