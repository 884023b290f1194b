//! The processor's state that its handles and executors share (the mailbox and the control
//! flags), apart from the loop that owns it, so the processor, its executors and its handles
//! each import it and none imports another's module back.

use std::time::Instant;

use streamtask_core::live::Activity;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::OperatorEvent;
use streamtask_core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use streamtask_core::sync::{Arc, OnceLock};
use streamtask_core::trace::Tracer;

use crate::letter::{
    Control, EventRun, Letter, LetterKind, MailAction, StateAction, UnlockedAction,
};
use crate::mail::{Mail, Priority};
use crate::mailbox::TaskMailbox;
use crate::rejected::Rejected;

/// The processor's state shared with its handles: the mailbox and the control flags.
///
/// The flags are written only on the mailbox thread (by control mails and the [`Controller`])
/// and read there too, so they are `Relaxed`: they are atomics only because executors and
/// handles, which other threads hold, share this struct.
pub(crate) struct Core<S, E> {
    pub(crate) mailbox: TaskMailbox<Letter<S, E>>,
    pub(crate) loop_running: AtomicBool,
    pub(crate) loop_suspended: AtomicBool,
    /// The current suspension's token; 0 when the default action is available.
    pub(crate) suspension: AtomicU64,
    /// How event letters reach the state (its `OperatorMails::on_event`, which this type
    /// cannot name): set by the first event put, the same for every one.
    pub(crate) event_run: OnceLock<EventRun<S, E>>,
    pub(crate) metrics: Option<std::sync::Arc<TaskMetrics>>,
    pub(crate) tracer: Tracer,
}

impl<S, E> Core<S, E> {
    pub(crate) fn new(
        mailbox: TaskMailbox<Letter<S, E>>,
        metrics: Option<std::sync::Arc<TaskMetrics>>,
        tracer: Tracer,
    ) -> Self {
        Core {
            mailbox,
            loop_running: AtomicBool::new(true),
            loop_suspended: AtomicBool::new(false),
            suspension: AtomicU64::new(0),
            event_run: OnceLock::new(),
            metrics,
            tracer,
        }
    }

    #[inline]
    pub(crate) fn loop_possible(&self) -> bool {
        self.loop_running.load(Ordering::Relaxed) && !self.loop_suspended.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn default_action_available(&self) -> bool {
        self.suspension.load(Ordering::Relaxed) == 0
    }

    /// Runs one mail: control signals here, actions through `run_action`. Records the mail's
    /// latency and a span (mails only, never records).
    pub(crate) fn run_mail(
        &self,
        mail: Mail<Letter<S, E>>,
        run_action: impl FnOnce(StateAction<S, E>) -> Result<(), E>,
    ) -> Result<(), E> {
        let priority = mail.priority();
        let letter = mail.into_body();
        let is_signal = matches!(letter.kind, LetterKind::Control(Control::Signal));
        if let (Some(metrics), false) = (&self.metrics, is_signal) {
            metrics.live.enter_mail(letter.description);
            metrics.mails.inc();
            // Sampled: only the mails stamped at enqueue (see `letter`'s module docs).
            if let Some(enqueued) = letter.enqueued {
                metrics.mailbox_latency.record(enqueued.elapsed());
            }
        }
        let _span = self.tracer.span("mail", || letter.description.to_string());
        match letter.kind {
            LetterKind::Action(action) => run_action(StateAction::Boxed(action)),
            LetterKind::Event(event) => {
                let (Some(operator), Some(&run)) =
                    (priority.operator_index(), self.event_run.get())
                else {
                    unreachable!("event letters are put with their runner, at an exact priority");
                };
                run_action(StateAction::Event {
                    run,
                    operator,
                    event,
                })
            }
            LetterKind::Unlocked(action) => action.run(),
            LetterKind::Control(control) => self.apply(control),
        }
    }

    fn apply(&self, control: Control<E>) -> Result<(), E> {
        match control {
            Control::Poison => {
                self.loop_running.store(false, Ordering::Relaxed);
                self.loop_suspended.store(true, Ordering::Relaxed);
            }
            Control::SuspendLoop => self.loop_suspended.store(true, Ordering::Relaxed),
            Control::Resume(token) => {
                if self.suspension.load(Ordering::Relaxed) == token {
                    self.suspension.store(0, Ordering::Relaxed);
                }
            }
            Control::Signal => {}
            Control::Fail(error) => return Err(*error),
        }
        Ok(())
    }

    /// Puts `action` at `priority` if the mailbox is open, atomically; hands it back otherwise.
    /// The box is allocated outside the lock and unboxed again on refusal.
    pub(crate) fn enqueue<A>(
        &self,
        priority: Priority,
        description: &'static str,
        action: A,
    ) -> Result<(), Rejected<A>>
    where
        A: MailAction<S, E> + 'static,
    {
        self.put_boxed(priority, description, action, |boxed| {
            LetterKind::Action(boxed)
        })
    }

    /// Puts `event` for the operator whose priority is `priority` (one that names its index
    /// exactly, see [`Priority::operator_index`]), delivered by `run`, if the mailbox is open,
    /// atomically; hands it back otherwise.
    pub(crate) fn enqueue_event(
        &self,
        priority: Priority,
        event: OperatorEvent,
        run: EventRun<S, E>,
    ) -> Result<(), Rejected<OperatorEvent>> {
        debug_assert!(priority.operator_index().is_some());
        // Acquire once set: one load per event.
        self.event_run.get_or_init(|| run);
        self.put_letter(priority, "operator event", event, LetterKind::Event)
    }

    /// Puts an action that runs without the executor at `priority` if the mailbox is open,
    /// atomically; hands it back otherwise (see [`ProcessorHandle::execute_unlocked`]).
    pub(crate) fn enqueue_unlocked<A>(
        &self,
        priority: Priority,
        description: &'static str,
        action: A,
    ) -> Result<(), Rejected<A>>
    where
        A: UnlockedAction<E> + 'static,
    {
        self.put_boxed(priority, description, action, |boxed| {
            LetterKind::Unlocked(boxed)
        })
    }

    /// [`put_letter`](Self::put_letter) of `action` boxed (outside the lock), `kind` making the
    /// box a letter; a refused action is unboxed again.
    fn put_boxed<A>(
        &self,
        priority: Priority,
        description: &'static str,
        action: A,
        kind: impl FnOnce(Box<A>) -> LetterKind<S, E>,
    ) -> Result<(), Rejected<A>> {
        self.put_letter(priority, description, Box::new(action), kind)
            .map_err(|rejected| rejected.map(|boxed| *boxed))
    }

    /// The one way a mail action reaches the mailbox: `payload`, made a letter of `kind`, is put
    /// at `priority` if the mailbox accepts mails, and handed back otherwise.
    ///
    /// Off the mailbox thread the state check and the put are made atomic by the queue's lock.
    /// On the mailbox thread (a mail the task puts for itself: an async completion made inside
    /// its operator's call) no lock is needed for that, because only this thread changes the
    /// state, and the mailbox's owner `put` skips the queue's lock while nothing is queued.
    fn put_letter<P>(
        &self,
        priority: Priority,
        description: &'static str,
        payload: P,
        kind: impl FnOnce(P) -> LetterKind<S, E>,
    ) -> Result<(), Rejected<P>> {
        let enqueued = crate::letter::stamp();
        let mail = |payload| {
            Mail::new(
                priority,
                Letter {
                    kind: kind(payload),
                    description,
                    enqueued,
                },
            )
        };
        // On the mailbox thread: only this thread changes the mailbox's state, so the check and the
        // put need no lock between them.
        if self.mailbox.is_owner_thread() {
            let state = self.mailbox.state();
            if !state.is_accepting_mails() {
                return Err(Rejected::new(payload, state));
            }
            if self.mailbox.put(mail(payload)).is_err() {
                unreachable!("the mailbox was open, and only this thread changes its state");
            }
            return Ok(());
        }
        // Off the mailbox thread: check and put under the queue's lock, so a quiesce or close
        // cannot fall in between (a mail is refused, or it is queued and will run or be handed back
        // by `close`).
        self.mailbox.run_exclusively(|mailbox| {
            let state = mailbox.state();
            if !state.is_accepting_mails() {
                return Err(Rejected::new(payload, state));
            }
            if mailbox.put(mail(payload)).is_err() {
                unreachable!("the mailbox was open under the same lock");
            }
            Ok(())
        })
    }

    /// Puts a control mail first if the mailbox is open (atomically); does nothing otherwise.
    /// Cold: kept out of [`ring`](Self::ring)'s inlined fast path.
    #[cold]
    pub(crate) fn send_control_if_open(&self, description: &'static str, control: Control<E>) {
        self.mailbox.run_exclusively(|mailbox| {
            if mailbox.state().is_accepting_mails() {
                let _ = mailbox.put_first(Mail::new(
                    Priority::MAX,
                    Letter::control(description, control),
                ));
            }
        });
    }

    /// Rings the doorbell: the owner runs its doorbell action before its next record or mail
    /// batch. From any thread; no lock and no allocation unless the owner blocks for mail, when
    /// a signal mail wakes it. The ring and the owner's announced wait are `SeqCst` on both
    /// sides: either the ringer sees the owner waiting (and signals), or the owner sees the
    /// bell before it blocks. Inlined into the trigger call; both words are on the mailbox's
    /// one hot cache line.
    #[inline]
    pub(crate) fn ring(&self) {
        // 1. Ring (`SeqCst`): an owner running records sees it at its next flag load.
        self.mailbox.ring_doorbell();
        // 2. Then look for an announced wait (`SeqCst`): an owner that announced may be blocked in
        // `take`, where only a mail wakes it, so send one; an owner that has not announced yet
        // looks at the bell after announcing and sees this ring.
        if self.mailbox.owner_waiting() {
            self.send_control_if_open("doorbell", Control::Signal);
        }
    }

    /// Owner only: makes sure the loop looks at its flags at the next check.
    fn signal(&self) {
        // A waiting mail already makes the loop look at its flags; otherwise a signal mail at the
        // batch's front does (owner only: no queue lock).
        if !self.mailbox.has_mail_hint() {
            self.mailbox.push_batch_front(Mail::new(
                Priority::MAX,
                Letter::control("signal check", Control::Signal),
            ));
        }
    }

    /// The mailbox thread now does `activity` (see `streamtask_core::live`).
    #[inline]
    pub(crate) fn enter(&self, activity: Activity) {
        if let Some(metrics) = &self.metrics {
            metrics.live.enter(activity);
        }
    }

    pub(crate) fn record_suspended(&self, cause: SuspendCause, since: Instant) {
        if let Some(metrics) = &self.metrics {
            let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
            match cause {
                SuspendCause::Idle => metrics.idle_micros.add(micros),
                SuspendCause::Backpressure => metrics.backpressured_micros.add(micros),
            }
        }
    }
}

/// Resumes a suspension by token; erases the processor's type parameters so [`Suspension`]
/// and its wakers need none.
pub(crate) trait ResumeTarget: Send + Sync {
    fn resume(&self, token: u64);
}

pub(crate) struct CoreResume<S, E>(pub(crate) Arc<Core<S, E>>);

impl<S: 'static, E: Send + 'static> ResumeTarget for CoreResume<S, E> {
    fn resume(&self, token: u64) {
        // Refused once the mailbox is quiesced or closed: the loop is over, nothing to resume.
        let _ = self.0.mailbox.put_first(Mail::new(
            Priority::MAX,
            Letter::control("resume default action", Control::Resume(token)),
        ));
    }
}

/// The owner-side operations a [`Controller`] needs, without the processor's type parameters.
pub(crate) trait OwnerOps {
    fn current_suspension(&self) -> u64;
    fn suspend_with(&self, token: u64);
    fn complete_all(&self);
}

impl<S, E> OwnerOps for Core<S, E> {
    fn current_suspension(&self) -> u64 {
        self.suspension.load(Ordering::Relaxed)
    }

    fn suspend_with(&self, token: u64) {
        self.suspension.store(token, Ordering::Relaxed);
        self.signal();
    }

    fn complete_all(&self) {
        self.loop_running.store(false, Ordering::Relaxed);
        self.loop_suspended.store(true, Ordering::Relaxed);
        self.signal();
    }
}

/// Why the default action is suspended; decides which metric the waiting time goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SuspendCause {
    /// Waiting for input (`TaskMetrics::idle_micros`).
    Idle,
    /// Waiting for output space or for an operator to accept input again
    /// (`TaskMetrics::backpressured_micros`).
    Backpressure,
}
