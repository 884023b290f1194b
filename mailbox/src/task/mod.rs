//! Mailbox tasks: a source, one-input or two-input task on one thread, driven by a
//! [`MailboxProcessor`], behind one [`TaskHandle`].
//!
#![doc = include_str!("task.md")]

mod body;
mod input;
mod input_task;
mod iteration;
mod source;

use std::time::Instant;

use streamtask_core::operator::TaskChain;
use streamtask_core::operator::TaskOutput;
use streamtask_core::sync::spawn_named;
use streamtask_core::task::{DeclineReason, TaskConfig};
use streamtask_core::{CheckpointBarrier, catch_panic, task::TaskError, task::TaskFailure};
use streamtask_runtime::{ChainBody, TaskControl, TaskEnv, TaskParts, TaskSetup, TriggerMode};

use crate::action::Immediate;
use crate::executor::MailboxExecutor;
use crate::firing::MailboxFiring;
use crate::letter::MailAction;
use crate::mail::Priority;
use crate::mailbox::TaskMailbox;
use crate::processor::{
    Controller, DefaultAction, LoopError, MailboxProcessor, ProcessorBuilder, ProcessorHandle,
};
use crate::services::{MailboxEvents, MailboxTimerService};

pub use self::input_task::{InputStreamTask, OneInputStreamTask, TwoInputStreamTask};
pub use self::iteration::IterationHeadStreamTask;
pub use self::source::SourceStreamTask;
use streamtask_runtime::TaskHandle;

use self::body::MailboxBody;
use self::input::Input;
use crate::trigger_slot::{Offered, TriggerSlot};

/// How the handle reaches a mailbox task: a trigger through the mailbox's trigger slot (or as a
/// mail), every other call as a mail.
struct Remote<B> {
    processor: ProcessorHandle<B, TaskFailure>,
    /// The trigger slot's [`base`](TriggerSlot::base), kept here (beside the processor pointer
    /// the call reads anyway) so that the call converts its request time before it touches the
    /// slot's line, and touches that line first with the claim.
    slot_base: Instant,
    notices: MailboxExecutor<B, TaskFailure>,
    responder: streamtask_core::task::CheckpointResponder,
    timers: std::sync::Arc<MailboxTimerService<B, TaskFailure>>,
}

impl<I, C, W> Remote<MailboxBody<I, C, W>>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    /// The slot is taken (or trigger mails wait): the trigger goes as a mail. Out of line, so
    /// the fast path's code stays small.
    ///
    /// The mail is urgent ([`Priority::URGENT`]): it overtakes a batch the loop has already
    /// built (timer mails, say) instead of waiting for its end. Triggers still run oldest
    /// first: urgent mails are taken in the order they were put (the queue's urgent mails and
    /// the owner's round are both FIFO, and no trigger mail is put first), a trigger mail is
    /// put only while the slot is taken or older trigger mails wait (so the one trigger that
    /// can be older than it and not queued ahead of it is the slot's), and a trigger mail runs
    /// an older slot trigger before its own (`TriggerMail::run`).
    #[cold]
    #[inline(never)]
    fn trigger_by_mail(&self, barrier: CheckpointBarrier, requested: Instant) {
        self.processor.core().mailbox.trigger_slot().mail_queued();
        let trigger = TriggerMail {
            barrier,
            requested,
            responder: Some(self.responder.clone()),
            processor: self.processor.clone(),
        };
        // Refused once the task is ending: the mail comes back and, dropped, declines.
        let _ = self
            .processor
            .core()
            .enqueue(Priority::URGENT, "checkpoint trigger", trigger);
    }
}

impl<I, C, W> TaskControl for Remote<MailboxBody<I, C, W>>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier, requested: Instant) {
        // The fast way: the slot and the doorbell (no allocation, no lock), both on the
        // mailbox's hot line.
        let core = self.processor.core();
        let since = TriggerSlot::nanos_since(self.slot_base, requested);
        let accepting = || core.mailbox.state().is_accepting_mails();
        match core
            .mailbox
            .trigger_slot()
            .trigger(accepting, || core.ring(), barrier, since)
        {
            Offered::Slotted => {}
            Offered::TakenBack(barrier) => self
                .responder
                .decline(barrier.id, DeclineReason::NotRunning),
            Offered::Refused => self.trigger_by_mail(barrier, requested),
        }
    }

    fn notify_checkpoint(&self, id: u64, completed: bool) {
        let description = if completed {
            "checkpoint complete"
        } else {
            "checkpoint aborted"
        };
        // Refused once the task is over: nothing left to notify.
        let _ = self
            .notices
            .execute(description, move |body: &mut MailboxBody<I, C, W>| {
                body.notify(id, completed)
            });
    }

    fn abandon(&self) {
        // The task thread is stuck in user code; its timer thread only enqueues mails, so it
        // can be ended and joined from here.
        self.timers.shutdown();
    }
}

/// A checkpoint trigger on its way to the task thread. A trigger that never runs (refused by a
/// mailbox that no longer accepts mails, or dropped when the mailbox closes after a failure or a
/// cancel) declines the checkpoint as not running when it is dropped, so the coordinator hears
/// about every trigger.
/// Puts the mail that takes unaligned barriers early ([`MailboxBody::priority_input`]).
struct PriorityMail<B>(MailboxExecutor<B, TaskFailure>);

impl<I, C, W> std::task::Wake for PriorityMail<MailboxBody<I, C, W>>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        // Refused once the task is ending: nothing is left to checkpoint.
        let _ = self
            .0
            .execute("unaligned barrier", |body: &mut MailboxBody<I, C, W>| {
                body.priority_input()
            });
    }
}

struct TriggerMail<B> {
    barrier: CheckpointBarrier,
    requested: Instant,
    responder: Option<streamtask_core::task::CheckpointResponder>,
    /// The task's processor, for its mailbox's trigger slot: a trigger waiting there that is
    /// older than this one runs first. A queued mail holding the processor that holds the
    /// mailbox: the task thread's close at its end drops every mail left, which ends that.
    processor: ProcessorHandle<B, TaskFailure>,
}

impl<B> TriggerMail<B> {
    fn slot(&self) -> &TriggerSlot {
        self.processor.core().mailbox.trigger_slot()
    }
}

impl<I, C, W> MailAction<MailboxBody<I, C, W>, TaskFailure> for TriggerMail<MailboxBody<I, C, W>>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    fn run(mut self: Box<Self>, body: &mut MailboxBody<I, C, W>) -> Result<(), TaskFailure> {
        // Ran: from here on the body acknowledges or declines.
        self.responder = None;
        if let Some((older, requested)) = self.slot().take_older_than(self.barrier.id) {
            body.slot_checkpoint(older, requested)?;
        }
        body.checkpoint(self.barrier, self.requested)
    }
}

impl<B> Drop for TriggerMail<B> {
    fn drop(&mut self) {
        if let Some(responder) = self.responder.take() {
            responder.decline(self.barrier.id, DeclineReason::NotRunning);
        }
        self.slot().mail_done();
    }
}

type Processor<B> = MailboxProcessor<B, TaskFailure, Immediate<B>>;

/// What the task thread receives once everything is wired.
struct Setup<B> {
    processor: Processor<B>,
    timers: std::sync::Arc<MailboxTimerService<B, TaskFailure>>,
    parts: TaskParts,
    restore: Option<streamtask_core::state::TaskSnapshot>,
}

/// Starts the task thread and wires the mailbox, the services and the body around `input`,
/// `chain` and `output`.
fn spawn_task<I, C, W>(
    config: TaskConfig,
    mode: TriggerMode,
    input: I,
    chain: C,
    output: W,
) -> TaskHandle
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    type Body<I, C, W> = MailboxBody<I, C, W>;
    let (setup_tx, setup_rx) = streamtask_core::sync::channel::bounded::<Setup<Body<I, C, W>>>(1);
    let thread = spawn_named(config.name.clone(), move || {
        streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Task);
        // The spawning thread fails only before anything ran; then there is nothing to do.
        if let Ok(setup) = setup_rx.recv() {
            task_main(setup);
        }
    });

    let TaskSetup {
        parts,
        clock,
        restore,
        tracer,
        interruptible_timers,
    } = TaskSetup::new(config);
    let name = &parts.name;
    let metrics = &parts.metrics;
    let mailbox = TaskMailbox::with_owner(thread.thread().clone());
    let builder =
        ProcessorBuilder::with_metrics(mailbox, std::sync::Arc::clone(metrics), tracer.clone());
    let handle = builder.handle();
    let timers = std::sync::Arc::new(MailboxTimerService::with_metrics(
        &format!("{name}-timers"),
        clock,
        &handle,
        Some(std::sync::Arc::clone(metrics)),
        tracer.clone(),
    ));
    let events = std::sync::Arc::new(MailboxEvents::new(&handle));
    let mut input = input;
    // An unaligned barrier reaches the task as an urgent mail, also while the default action
    // is suspended on a full output.
    input.set_priority_waker(std::task::Waker::from(std::sync::Arc::new(PriorityMail(
        builder.mailbox_executor(Priority::URGENT),
    ))));
    let firing = std::sync::Arc::new(MailboxFiring::new(&handle, interruptible_timers));
    let services = streamtask_core::operator::TaskServices::new(name, timers.clone(), events)
        .with_firing(firing);
    let body = MailboxBody::new(
        input,
        ChainBody::new(chain, output, TaskEnv::new(parts.clone(), services, tracer)),
    );
    // Cancelled or failed: a poison mail ends the loop (a no-op once the mailbox closed).
    let poison = handle.clone();
    parts
        .lifecycle
        .set_stop_hook(move || poison.all_actions_completed());
    let slot = handle.clone();
    let remote = Remote {
        slot_base: handle.core().mailbox.trigger_slot().base(),
        notices: builder.mailbox_executor(Priority::MAX),
        processor: handle,
        responder: parts.responder.clone(),
        timers: std::sync::Arc::clone(&timers),
    };
    let mut processor = builder.build(Immediate::new(body));
    // The processor holds its doorbell action, which holds the processor's core: no cycle.
    processor.set_doorbell(Box::new(move |body: &mut Body<I, C, W>| {
        match slot.core().mailbox.trigger_slot().take() {
            Some((barrier, requested)) => body.slot_checkpoint(barrier, requested),
            None => Ok(()),
        }
    }));
    let setup = Setup {
        processor,
        timers,
        parts: parts.clone(),
        restore,
    };
    if setup_tx.send(setup).is_err() {
        unreachable!("the task thread waits for its setup before anything else");
    }
    TaskHandle::new(parts, mode, std::sync::Arc::new(remote), thread)
}

/// The default action of every task: one step of its body.
struct Step;

impl<I, C, W> DefaultAction<MailboxBody<I, C, W>, TaskFailure> for Step
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    #[inline]
    fn run_default_action(
        &mut self,
        body: &mut MailboxBody<I, C, W>,
        controller: &mut Controller<'_>,
    ) -> Result<(), TaskFailure> {
        body.step(controller)
    }
}

/// The task thread: open, loop, finish or not, and always clean up; the lifecycle's done latch
/// last.
fn task_main<I, C, W>(setup: Setup<MailboxBody<I, C, W>>)
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    let Setup {
        mut processor,
        timers,
        parts,
        restore,
    } = setup;
    let lifecycle = &parts.lifecycle;
    parts.metrics.threads.inc();
    let ran = catch_panic(|| -> Result<(), TaskFailure> {
        let body = processor.action_executor_mut().state_mut();
        body.open(restore.as_ref())?;
        if !lifecycle.start() {
            return Ok(()); // stopped while opening
        }
        match processor.run_mailbox_loop(&mut Step) {
            Ok(()) => Ok(()),
            Err(LoopError::Failed(failure)) => Err(failure),
            Err(LoopError::Mailbox(e)) => panic!("the task's own mailbox refused its loop: {e}"),
        }
    });
    match ran {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => {
            lifecycle.record_failure(failure);
        }
        Err(panic) => {
            lifecycle.fail(parts.name.clone(), TaskError::Panic(panic));
        }
    }
    let finished = processor.action_executor().state().is_finished();

    // Timers first, then the mailbox (FLINK-23558): nothing fires into a quiesced mailbox. A
    // finished task runs the mails left (triggers decline, notices reach the finished chain);
    // otherwise they are dropped (triggers decline as they drop).
    timers.quiesce();
    let _ = processor.prepare_close();
    // A trigger left in the slot never runs: declined (see `TriggerSlot::trigger`).
    if let Some(barrier) = processor.mailbox().trigger_slot().take_left() {
        parts
            .responder
            .decline(barrier.id, DeclineReason::NotRunning);
    }
    if finished && lifecycle.state() == streamtask_core::task::TaskState::Finishing {
        match catch_panic(|| processor.drain()) {
            Ok(Ok(())) => {}
            Ok(Err(failure)) => {
                lifecycle.record_failure(failure);
            }
            Err(panic) => {
                lifecycle.fail(parts.name.clone(), TaskError::Panic(panic));
            }
        }
    }
    timers.shutdown();
    let _ = processor.close();
    processor.action_executor_mut().state_mut().close();
    lifecycle.complete();
}
