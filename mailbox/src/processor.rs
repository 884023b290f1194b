//! [`MailboxProcessor`]: the task thread's loop (Flink's `MailboxProcessor`).
//!
#![doc = include_str!("processor.md")]

use std::cell::Cell;
use std::fmt;
use std::task::Waker;
use std::time::Instant;

use streamtask_core::live::Activity;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::Arc;
use streamtask_core::sync::atomic::Ordering;
use streamtask_core::trace::Tracer;

pub use crate::shared::SuspendCause;

use crate::action::{ActionExecutor, Immediate};
use crate::executor::MailboxExecutor;
use crate::letter::{Control, FnUnlocked, Letter, LetterKind};
use crate::mail::{Mail, Priority};
use crate::mailbox::{MailHint, MailboxState, TakeError, TaskMailbox, WrongThread};
use crate::rejected::Rejected;
use crate::shared::{Core, CoreResume, OwnerOps, ResumeTarget};

/// What only the owner thread touches: the last suspension token handed out and the cause of
/// the current suspension. Cells, so one [`Controller`] can live through a whole loop while the
/// loop reads them.
#[derive(Debug, Default)]
struct OwnerLocal {
    next_token: Cell<u64>,
    cause: Cell<Option<SuspendCause>>,
}

/// What the default action gets to steer the loop; owner thread only.
pub struct Controller<'a> {
    ops: &'a dyn OwnerOps,
    mail: MailHint<'a>,
    owner: &'a OwnerLocal,
    resume: &'a std::sync::Arc<dyn ResumeTarget>,
}

impl Controller<'_> {
    /// Suspends the default action until the returned [`Suspension`] is resumed; mails keep
    /// running meanwhile. Suspending again while suspended returns the current suspension.
    /// The time spent waiting is not measured (see
    /// [`suspend_default_action_for`](Self::suspend_default_action_for)).
    pub fn suspend_default_action(&mut self) -> Suspension {
        self.suspend(None)
    }

    /// As [`suspend_default_action`](Self::suspend_default_action), counting the time the loop
    /// waits for mail as idle or backpressured time (time spent running mails is not counted).
    pub fn suspend_default_action_for(&mut self, cause: SuspendCause) -> Suspension {
        self.suspend(Some(cause))
    }

    fn suspend(&mut self, cause: Option<SuspendCause>) -> Suspension {
        let current = self.ops.current_suspension();
        let token = if current != 0 {
            current
        } else {
            let token = self.owner.next_token.get() + 1;
            self.owner.next_token.set(token);
            self.owner.cause.set(cause);
            self.ops.suspend_with(token);
            token
        };
        Suspension {
            token,
            target: std::sync::Arc::clone(self.resume),
        }
    }

    /// Whether a mail is waiting: one atomic load. A default action that processes several
    /// records per step checks it between records and returns as soon as it is set, so a mail
    /// waits for at most the record in flight (what a loop batching records per select gives
    /// up).
    #[inline]
    pub fn has_mail(&self) -> bool {
        self.mail.is_set()
    }

    /// The flag [`has_mail`](Self::has_mail) loads, to copy into a loop's locals.
    #[inline]
    pub(crate) fn mail_hint(&self) -> MailHint<'_> {
        self.mail
    }

    /// Ends the loop for good after this step (end of input).
    pub fn all_actions_completed(&mut self) {
        self.ops.complete_all();
    }
}

impl fmt::Debug for Controller<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("suspension", &self.ops.current_suspension())
            .finish()
    }
}

/// A suspension of the default action; resume it from any thread, as often as you like.
#[derive(Clone)]
pub struct Suspension {
    token: u64,
    target: std::sync::Arc<dyn ResumeTarget>,
}

impl Suspension {
    /// Makes the default action available again, unless a newer suspension replaced this one or
    /// the loop is over (both harmless). From any thread; idempotent.
    pub fn resume(&self) {
        self.target.resume(self.token);
    }

    /// A [`Waker`] that resumes this suspension: what the task registers with its input,
    /// reader or output to be told when to continue.
    pub fn waker(&self) -> Waker {
        Waker::from(std::sync::Arc::new(ResumeWaker(self.clone())))
    }
}

impl fmt::Debug for Suspension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Suspension")
            .field("token", &self.token)
            .finish()
    }
}

struct ResumeWaker(Suspension);

impl std::task::Wake for ResumeWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.resume();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.resume();
    }
}

/// One step of the task's work, run by the loop whenever no mail is waiting.
///
/// Implemented for closures `FnMut(&mut S, &mut Controller<'_>) -> Result<(), E>`.
pub trait DefaultAction<S, E> {
    /// Does one bounded piece of work (process one input), without blocking.
    ///
    /// # Errors
    ///
    /// An error ends the loop with that error.
    fn run_default_action(
        &mut self,
        state: &mut S,
        controller: &mut Controller<'_>,
    ) -> Result<(), E>;
}

impl<S, E, F> DefaultAction<S, E> for F
where
    F: FnMut(&mut S, &mut Controller<'_>) -> Result<(), E>,
{
    #[inline]
    fn run_default_action(
        &mut self,
        state: &mut S,
        controller: &mut Controller<'_>,
    ) -> Result<(), E> {
        self(state, controller)
    }
}

/// Why the loop stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum LoopError<E> {
    /// A mail or the default action failed, or a failure was reported from another thread.
    #[error("{0}")]
    Failed(E),
    /// The mailbox refused: the loop was run off the mailbox thread, or the mailbox was closed
    /// (or quiesced with the default action suspended, so nothing could ever resume it).
    #[error(transparent)]
    Mailbox(#[from] TakeError),
}

/// Builds a [`MailboxProcessor`] in two steps, so that handles the state needs (a timer service
/// that enqueues mails, say) exist before the state does.
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{Immediate, Priority, ProcessorBuilder, TaskMailbox};
///
/// let builder = ProcessorBuilder::<Vec<u32>, String>::new(TaskMailbox::new());
/// let executor = builder.mailbox_executor(Priority::operator(0));
/// let mut processor = builder.build(Immediate::new(Vec::new()));
/// executor.execute("push", |v: &mut Vec<u32>| { v.push(7); Ok(()) }).unwrap();
/// let mut idle = |_: &mut Vec<u32>, c: &mut streamtask_mailbox::Controller<'_>| {
///     c.all_actions_completed();
///     Ok(())
/// };
/// processor.run_mailbox_loop(&mut idle).unwrap();
/// assert_eq!(processor.action_executor().state(), &vec![7]);
/// ```
pub struct ProcessorBuilder<S, E> {
    core: Arc<Core<S, E>>,
}

impl<S: 'static, E: Send + 'static> ProcessorBuilder<S, E> {
    /// A processor over `mailbox`, without metrics.
    pub fn new(mailbox: TaskMailbox<Letter<S, E>>) -> Self {
        ProcessorBuilder {
            core: Arc::new(Core::new(mailbox, None, Tracer::off())),
        }
    }

    /// A processor over `mailbox` that records mail count, mailbox latency and idle /
    /// backpressured time into `metrics`, and a span per mail into `tracer`.
    pub fn with_metrics(
        mailbox: TaskMailbox<Letter<S, E>>,
        metrics: std::sync::Arc<TaskMetrics>,
        tracer: Tracer,
    ) -> Self {
        ProcessorBuilder {
            core: Arc::new(Core::new(mailbox, Some(metrics), tracer)),
        }
    }

    /// A handle for other threads.
    pub fn handle(&self) -> ProcessorHandle<S, E> {
        ProcessorHandle {
            core: Arc::clone(&self.core),
        }
    }

    /// An executor whose mails carry `priority`.
    pub fn mailbox_executor(&self, priority: Priority) -> MailboxExecutor<S, E> {
        MailboxExecutor::new(Arc::clone(&self.core), priority)
    }

    /// The processor, running actions through `executor`.
    pub fn build<X: ActionExecutor<S>>(self, executor: X) -> MailboxProcessor<S, E, X> {
        let resume: std::sync::Arc<dyn ResumeTarget> =
            std::sync::Arc::new(CoreResume(Arc::clone(&self.core)));
        MailboxProcessor {
            core: self.core,
            executor,
            owner: OwnerLocal::default(),
            resume,
            doorbell: None,
        }
    }
}

impl<S, E> fmt::Debug for ProcessorBuilder<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorBuilder")
            .field("mailbox", &self.core.mailbox)
            .finish()
    }
}

/// The mailbox loop of one task thread.
///
#[doc = include_str!("processor.md")]
///
/// # Examples
///
/// A default action that counts to three, a mail from another thread, and the end:
///
/// ```
/// use streamtask_mailbox::{Controller, Immediate, MailboxProcessor, Priority, TaskMailbox};
///
/// let mut processor = MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0u32));
/// let executor = processor.mailbox_executor(Priority::MIN);
/// std::thread::spawn(move || executor.execute("add 100", |n: &mut u32| { *n += 100; Ok(()) }))
///     .join()
///     .unwrap()
///     .unwrap();
///
/// let mut count = |n: &mut u32, c: &mut Controller<'_>| -> Result<(), String> {
///     *n += 1;
///     if *n % 100 == 3 {
///         c.all_actions_completed();
///     }
///     Ok(())
/// };
/// processor.run_mailbox_loop(&mut count).unwrap();
/// assert_eq!(*processor.action_executor().state(), 103);
/// ```
pub struct MailboxProcessor<S, E, X = Immediate<S>> {
    core: Arc<Core<S, E>>,
    executor: X,
    owner: OwnerLocal,
    resume: std::sync::Arc<dyn ResumeTarget>,
    doorbell: Option<Doorbell<S, E>>,
}

/// What the owner runs when the doorbell rang (see [`Core::ring`]).
pub(crate) type Doorbell<S, E> = Box<dyn FnMut(&mut S) -> Result<(), E> + Send>;

impl<S: 'static, E: Send + 'static, X: ActionExecutor<S>> MailboxProcessor<S, E, X> {
    /// A processor over `mailbox` (whose owner thread will run the loop), running actions
    /// through `executor`, without metrics. See [`ProcessorBuilder`] for more.
    pub fn new(mailbox: TaskMailbox<Letter<S, E>>, executor: X) -> Self {
        ProcessorBuilder::new(mailbox).build(executor)
    }
}

impl<S, E, X: ActionExecutor<S>> MailboxProcessor<S, E, X> {
    /// The mailbox.
    pub fn mailbox(&self) -> &TaskMailbox<Letter<S, E>> {
        &self.core.mailbox
    }

    /// A handle for other threads: end, suspend, report failures.
    pub fn handle(&self) -> ProcessorHandle<S, E> {
        ProcessorHandle {
            core: Arc::clone(&self.core),
        }
    }

    /// An executor whose mails carry `priority`.
    pub fn mailbox_executor(&self, priority: Priority) -> MailboxExecutor<S, E> {
        MailboxExecutor::new(Arc::clone(&self.core), priority)
    }

    /// The executor for task-level mails ([`Priority::MIN`]).
    pub fn main_executor(&self) -> MailboxExecutor<S, E> {
        self.mailbox_executor(Priority::MIN)
    }

    /// The action executor (and through it, the state).
    pub fn action_executor(&self) -> &X {
        &self.executor
    }

    /// The action executor, mutably.
    pub fn action_executor_mut(&mut self) -> &mut X {
        &mut self.executor
    }

    /// Whether the loop may still run (no poison mail has run).
    pub fn is_mailbox_loop_running(&self) -> bool {
        self.core.loop_running.load(Ordering::Relaxed)
    }

    /// Whether the default action is available (not suspended).
    pub fn is_default_action_available(&self) -> bool {
        self.core.default_action_available()
    }

    /// Whether a mail is waiting; owner only.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the mailbox thread.
    pub fn has_mail(&self) -> Result<bool, WrongThread> {
        self.core.mailbox.has_mail()
    }

    /// Ends the loop for good, from any thread (a poison mail, put only while open).
    pub fn all_actions_completed(&self) {
        self.core
            .send_control_if_open("poison mail", Control::Poison);
    }

    /// Makes [`run_mailbox_loop`](Self::run_mailbox_loop) return; it can be called again.
    pub fn suspend(&self) {
        self.core
            .send_control_if_open("suspend mailbox loop", Control::SuspendLoop);
    }

    fn check_runnable(&self) -> Result<(), TakeError> {
        if !self.core.mailbox.is_owner_thread() {
            return Err(TakeError::WrongThread);
        }
        if self.core.mailbox.state() == MailboxState::Closed {
            return Err(TakeError::Closed);
        }
        Ok(())
    }

    /// Runs the loop until all actions completed, [`suspend`](ProcessorHandle::suspend), or an
    /// error. After a suspend it can be run again; after completion it returns at once.
    ///
    /// # Errors
    ///
    /// [`LoopError::Failed`] with the first error of a mail, the default action or a reported
    /// failure (the mails left stay in the mailbox); [`LoopError::Mailbox`] when called off the
    /// mailbox thread or with a closed mailbox.
    pub fn run_mailbox_loop<D: DefaultAction<S, E>>(
        &mut self,
        default: &mut D,
    ) -> Result<(), LoopError<E>> {
        self.check_runnable()?;
        if !self.start_loop() {
            return Ok(());
        }
        let MailboxProcessor {
            core,
            executor,
            owner,
            resume,
            doorbell,
        } = self;
        let (core, owner): (&Core<S, E>, &OwnerLocal) = (core, owner);
        // One controller for the whole loop: nothing is set up per step.
        let mut controller = Controller {
            ops: core,
            mail: core.mailbox.mail_hint(),
            owner,
            resume,
        };
        // Mails first: what was put before the loop started runs before any record, and may end or
        // suspend the loop.
        if !process_mail(core, executor, owner, doorbell)? {
            return Ok(());
        }
        // What the thread does shows in the task's live state: input steps from here until a
        // mail runs (which shows itself), so one store per mail batch, never per record.
        core.enter(Activity::Processing);
        loop {
            // One default-action step; it is bounded (it checks the mail flag between records), so
            // a mail waits for at most the record in flight.
            executor
                .run(|state| default.run_default_action(state, &mut controller))
                .map_err(LoopError::Failed)?;
            // The hot path: one atomic load when no mail is waiting.
            if core.mailbox.has_mail_hint() {
                if !process_mail(core, executor, owner, doorbell)? {
                    return Ok(());
                }
                core.enter(Activity::Processing);
            }
        }
    }

    /// A loop left by `suspend` may run again; one left by a poison mail may not (Flink 1.13+).
    fn start_loop(&self) -> bool {
        let running = self.core.loop_running.load(Ordering::Relaxed);
        self.core.loop_suspended.store(!running, Ordering::Relaxed);
        running
    }

    /// For tests: runs one mail if one is waiting, else one default-action step if it is
    /// available and the loop is running. Returns whether anything ran (FLINK-18906); drive a
    /// processor to quiescence with `while processor.run_mailbox_step(&mut action)? {}`.
    ///
    /// # Errors
    ///
    /// As [`run_mailbox_loop`](Self::run_mailbox_loop).
    pub fn run_mailbox_step<D: DefaultAction<S, E>>(
        &mut self,
        default: &mut D,
    ) -> Result<bool, LoopError<E>> {
        self.check_runnable()?;
        self.start_loop();
        // Mails before the default action, as in the loop: make a batch and run its first mail.
        self.core.mailbox.create_batch_unchecked();
        if let Some(mail) = self.core.mailbox.try_take_from_batch_unchecked()? {
            run_mail(&self.core, &mut self.executor, mail)?;
            return Ok(true);
        }
        // The batch is empty: every mail put before the bell rang ran.
        if answer_doorbell(&self.core, &mut self.executor, &mut self.doorbell)? {
            return Ok(true);
        }
        if self.core.default_action_available() && self.core.loop_possible() {
            let mut controller = Controller {
                ops: &*self.core,
                mail: self.core.mailbox.mail_hint(),
                owner: &self.owner,
                resume: &self.resume,
            };
            self.executor
                .run(|state| default.run_default_action(state, &mut controller))
                .map_err(LoopError::Failed)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Sets what the owner runs when [`Core::ring`] rang the doorbell: before the next record
    /// (the default action checks the mailbox's flag between records) or mail batch.
    pub(crate) fn set_doorbell(&mut self, action: Doorbell<S, E>) {
        self.doorbell = Some(action);
    }

    /// Quiesces the mailbox: new mails are refused, the queued ones stay. Owner only.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the mailbox thread.
    pub fn prepare_close(&self) -> Result<(), WrongThread> {
        self.core.mailbox.quiesce()
    }

    /// Runs every mail left, in order (batch first), through the action executor. If no other
    /// thread puts meanwhile, the mailbox is empty afterwards.
    ///
    /// # Errors
    ///
    /// The first error of a mail; the mails after it are dropped.
    pub fn drain(&mut self) -> Result<(), E> {
        for mail in self.core.mailbox.drain() {
            let executor = &mut self.executor;
            self.core
                .run_mail(mail, |action| executor.run(|state| action.run(state)))?;
        }
        Ok(())
    }

    /// Closes the mailbox and drops the mails left (pending submit handles see
    /// [`SubmitError::Cancelled`](crate::SubmitError::Cancelled)); returns how many. Owner only;
    /// a second close drops nothing.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the mailbox thread.
    pub fn close(&mut self) -> Result<usize, WrongThread> {
        let dropped = self.core.mailbox.close()?;
        Ok(dropped.len())
    }
}

/// Runs the batch, then (while the default action is suspended) every mail as it comes.
/// Returns whether the loop may go on.
fn process_mail<S, E, X: ActionExecutor<S>>(
    core: &Core<S, E>,
    executor: &mut X,
    owner: &OwnerLocal,
    doorbell: &mut Option<Doorbell<S, E>>,
) -> Result<bool, LoopError<E>> {
    // Every mail queued now, then the doorbell if it rang before the batch was made.
    run_batch(core, executor, doorbell)?;
    // While the default action is suspended the loop only runs mails, waiting for each. The wait is
    // the lost-wakeup protocol: try, announce the wait, look at the bell again, block.
    while core.loop_possible() && !core.default_action_available() {
        // A ring is not a mail (no `take` sees it): answer it through a batch, after the mails put
        // before it.
        if core.mailbox.doorbell_rung() {
            run_batch(core, executor, doorbell)?;
            continue;
        }
        // 1. Try: a mail already queued runs without any wait.
        // At the lowest priority: the loop runs deferrable mails too (a yield does not), so a
        // default action suspended until a deferred continuation ran gets it run here.
        let mail = match core.mailbox.try_take_unchecked(Priority::DEFERRABLE)? {
            Some(mail) => mail,
            None => {
                // 2. Register interest: announce the wait (`SeqCst`), then 3. look at the bell once
                // more: a ring before the announcement is seen here, a ring after it finds the
                // owner waiting and sends a signal mail (see `Core::ring`).
                core.mailbox.announce_wait();
                if core.mailbox.doorbell_rung() {
                    core.mailbox.end_wait();
                    continue;
                }
                // 4. Block in the mailbox's `take`: every put pushes and notifies under the queue's
                // lock, which the take checks and waits under, so no mail slips past it.
                let mail = take_blocking(core, owner);
                // Not waiting any more: a ringer need not send a signal mail.
                core.mailbox.end_wait();
                mail?
            }
        };
        run_mail(core, executor, mail)?;
    }
    let possible = core.loop_possible();
    if !possible {
        // The owner's own signal mails only made the loop look at its flags, which it just
        // did; do not leave them for `drain` or `close` to count.
        core.mailbox.discard_batch_head_while(|letter| {
            matches!(letter.kind, LetterKind::Control(Control::Signal))
        });
    }
    Ok(possible)
}

/// Runs the batch (every mail queued now), then, if the doorbell had rung before the batch was
/// made, the doorbell action: what rang it waits for the mails put before it (their order is
/// kept) and for no more than one batch.
fn run_batch<S, E, X: ActionExecutor<S>>(
    core: &Core<S, E>,
    executor: &mut X,
    doorbell: &mut Option<Doorbell<S, E>>,
) -> Result<(), LoopError<E>> {
    // Every mail put before the ring is in the queue or the batch once the bell is seen: both
    // set bits of the same flag word, the mail's first.
    let rung = core.mailbox.doorbell_rung();
    let mut next = take_first_of_batch(core)?;
    // The batch's mails in order, while the loop may run: a poison or suspend mail stops it, and
    // what is left stays for the next run, `drain` or `close`.
    while let Some(mail) = next {
        run_mail(core, executor, mail)?;
        next = if core.loop_possible() {
            core.mailbox.try_take_from_batch_unchecked()?
        } else {
            None
        };
    }
    // The doorbell after the batch: the mails put before the ring ran first, and a ring waits for
    // at most one batch.
    if rung && core.loop_possible() {
        answer_doorbell(core, executor, doorbell)?;
    }
    Ok(())
}

/// Makes the batch and takes its first mail if the loop may run it (one step for both where
/// the mailbox can: a mail the task put for itself).
fn take_first_of_batch<S, E>(core: &Core<S, E>) -> Result<Option<Mail<Letter<S, E>>>, TakeError> {
    if core.loop_possible() {
        core.mailbox.create_batch_and_take_unchecked()
    } else {
        core.mailbox.create_batch_unchecked();
        Ok(None)
    }
}

/// Runs the doorbell action if the doorbell rang; returns whether it did.
fn answer_doorbell<S, E, X: ActionExecutor<S>>(
    core: &Core<S, E>,
    executor: &mut X,
    doorbell: &mut Option<Doorbell<S, E>>,
) -> Result<bool, LoopError<E>> {
    // Clear the bell before running its action: a ring during the action rings again and is
    // answered next time, never lost.
    if !core.mailbox.answer_doorbell() {
        return Ok(false);
    }
    if let Some(action) = doorbell {
        executor
            .run(|state| action(state))
            .map_err(LoopError::Failed)?;
    }
    Ok(true)
}

/// Blocks for the next mail; the wait counts as idle or backpressured time.
fn take_blocking<S, E>(
    core: &Core<S, E>,
    owner: &OwnerLocal,
) -> Result<Mail<Letter<S, E>>, TakeError> {
    core.enter(match owner.cause.get() {
        Some(SuspendCause::Idle) => Activity::Idle,
        Some(SuspendCause::Backpressure) => Activity::Backpressured,
        None => Activity::Suspended,
    });
    // The clock is read only when the suspension has a cause to count the wait as.
    match owner.cause.get() {
        Some(cause) => {
            let since = Instant::now();
            let mail = core.mailbox.take_unchecked(Priority::DEFERRABLE);
            core.record_suspended(cause, since);
            mail
        }
        None => core.mailbox.take_unchecked(Priority::DEFERRABLE),
    }
}

/// Runs one mail: actions through the executor, control mails on the flags.
fn run_mail<S, E, X: ActionExecutor<S>>(
    core: &Core<S, E>,
    executor: &mut X,
    mail: Mail<Letter<S, E>>,
) -> Result<(), LoopError<E>> {
    core.run_mail(mail, |action| executor.run(|state| action.run(state)))
        .map_err(LoopError::Failed)
}

impl<S, E, X> fmt::Debug for MailboxProcessor<S, E, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxProcessor")
            .field("mailbox", &self.core.mailbox)
            .field(
                "loop_running",
                &self.core.loop_running.load(Ordering::Relaxed),
            )
            .field("default_available", &self.core.default_action_available())
            .finish_non_exhaustive()
    }
}

/// What other threads hold to steer a [`MailboxProcessor`]: end or suspend its loop, or fail it.
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{Controller, Immediate, LoopError, MailboxProcessor, TaskMailbox};
///
/// let mut processor = MailboxProcessor::new(TaskMailbox::new(), Immediate::new(()));
/// let handle = processor.handle();
/// std::thread::spawn(move || handle.report_failure("disk full".to_string()).unwrap())
///     .join()
///     .unwrap();
/// let mut idle = |_: &mut (), c: &mut Controller<'_>| {
///     c.suspend_default_action();
///     Ok(())
/// };
/// match processor.run_mailbox_loop(&mut idle) {
///     Err(LoopError::Failed(message)) => assert_eq!(message, "disk full"),
///     other => panic!("unexpected {other:?}"),
/// }
/// ```
pub struct ProcessorHandle<S, E> {
    core: Arc<Core<S, E>>,
}

impl<S, E> ProcessorHandle<S, E> {
    /// Ends the loop for good: a poison mail put first, atomically only while the mailbox is
    /// open; a no-op afterwards (cancelling a task that already finished is fine).
    pub fn all_actions_completed(&self) {
        self.core
            .send_control_if_open("poison mail", Control::Poison);
    }

    /// Makes the loop return (it can be run again): a suspend mail, only while open.
    pub fn suspend(&self) {
        self.core
            .send_control_if_open("suspend mailbox loop", Control::SuspendLoop);
    }

    /// Fails the loop with `error` from any thread: a failure mail put first; when it runs, the
    /// loop ends with `error`.
    ///
    /// # Errors
    ///
    /// Gives `error` back when the mailbox no longer accepts mails (the loop is over).
    pub fn report_failure(&self, error: E) -> Result<(), E> {
        self.core
            .mailbox
            .put_first(Mail::new(
                Priority::MAX,
                Letter::control("failure report", Control::Fail(Box::new(error))),
            ))
            .map_err(|refused| match refused.into_inner().into_body().kind {
                LetterKind::Control(Control::Fail(error)) => *error,
                _ => unreachable!("a refused failure report hands back that report"),
            })
    }

    /// Puts a mail at `priority` whose `action` runs on the mailbox thread, in the mails' order,
    /// but *not* through the processor's [`ActionExecutor`]: it gets no state, and reaches what
    /// it needs its own way. For work that may find itself already done and should then not
    /// pay for the executor: the bridge's checkpoint-trigger mail, whose trigger the legacy
    /// source usually ran already through the checkpoint lock's errand, looks at its queue
    /// before it asks the source for the lock (with the executor, every such mail made a hot
    /// source let go of the lock and park). Counted and sampled as every mail; an error ends
    /// the loop with it.
    ///
    /// # Errors
    ///
    /// Hands `action` back when the mailbox no longer accepts mails.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use streamtask_mailbox::{Immediate, Priority, ProcessorBuilder, TaskMailbox};
    ///
    /// let builder = ProcessorBuilder::<u32, String>::new(TaskMailbox::new());
    /// let handle = builder.handle();
    /// let mut processor = builder.build(Immediate::new(0));
    /// let seen = Arc::new(AtomicU32::new(0));
    /// let counter = Arc::clone(&seen);
    /// handle
    ///     .execute_unlocked(Priority::MIN, "look", move || {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///         Ok(())
    ///     })
    ///     .unwrap();
    /// let mut idle = |_: &mut u32, c: &mut streamtask_mailbox::Controller<'_>| {
    ///     c.all_actions_completed();
    ///     Ok(())
    /// };
    /// processor.run_mailbox_loop(&mut idle).unwrap();
    /// assert_eq!(seen.load(Ordering::Relaxed), 1);
    /// ```
    pub fn execute_unlocked<F>(
        &self,
        priority: Priority,
        description: &'static str,
        action: F,
    ) -> Result<(), Rejected<F>>
    where
        F: FnOnce() -> Result<(), E> + Send + 'static,
        E: 'static,
    {
        self.core
            .enqueue_unlocked(priority, description, FnUnlocked(action))
            .map_err(|rejected| rejected.map(|FnUnlocked(action)| action))
    }

    /// Whether no poison mail has run yet (a snapshot; exact only on the mailbox thread).
    pub fn is_mailbox_loop_running(&self) -> bool {
        self.core.loop_running.load(Ordering::Relaxed)
    }

    /// The mailbox's state.
    pub fn mailbox_state(&self) -> MailboxState {
        self.core.mailbox.state()
    }

    /// An executor whose mails carry `priority`.
    pub fn mailbox_executor(&self, priority: Priority) -> MailboxExecutor<S, E> {
        MailboxExecutor::new(Arc::clone(&self.core), priority)
    }

    pub(crate) fn core(&self) -> &Arc<Core<S, E>> {
        &self.core
    }
}

impl<S, E> Clone for ProcessorHandle<S, E> {
    fn clone(&self) -> Self {
        ProcessorHandle {
            core: Arc::clone(&self.core),
        }
    }
}

impl<S, E> fmt::Debug for ProcessorHandle<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorHandle")
            .field("mailbox", &self.core.mailbox)
            .finish()
    }
}
