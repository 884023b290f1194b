//! The bridge task's threads: wiring, the task (mailbox) thread, and the source thread. The
//! lifecycle, the handle and every step on the chain are the kit's; what is the bridge's own is
//! who runs where (the source on its thread, mails under the lock) and the source-exit latch.

use std::sync::Arc as StdArc;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::{TaskOutput, TaskServices};
use streamtask_core::sync::{Arc, spawn_named, thread};
use streamtask_core::task::TaskState;
use streamtask_core::task::{TaskConfig, TaskError, TaskFailure};
use streamtask_core::{
    CheckpointBarrier, catch_panic, operator::Operator, state::TaskSnapshot, time::TimerService,
};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContextConfig,
    SourceFunction, run_source,
};
use streamtask_mailbox::{
    Controller, LoopError, MailboxEvents, MailboxExecutor, MailboxProcessor, MailboxTimerService,
    Priority, ProcessorBuilder, ProcessorHandle, TaskMailbox,
};
use streamtask_runtime::{
    ChainBody, Drain, TaskControl, TaskEnv, TaskHandle, TaskParts, TaskSetup, TriggerMode,
};

use super::SourceExit;
use super::body::{self, BridgeCell, Holder, MailFailure};
use super::trigger::PendingTrigger;
use super::trigger::PendingTriggers;
use crate::executor::CheckpointLockExecutor;

type Cell<F, C, W> = BridgeCell<<F as SourceFunction>::State, C, W>;
type Processor<F, C, W> =
    MailboxProcessor<Cell<F, C, W>, MailFailure, CheckpointLockExecutor<Cell<F, C, W>>>;

/// The part of the cancel grace the task thread waits for a stopping source; the rest is left
/// for its own teardown, so `join` sees the task end within the grace.
const SOURCE_SHARE_OF_GRACE: u32 = 4; // three quarters: grace - grace / 4

/// What `LegacySourceStreamTask::spawn` hands over.
pub(crate) struct Options {
    pub(crate) context: SourceContextConfig,
    pub(crate) fairness: Fairness,
}

/// The handle's side of the task: the executors its calls enqueue through, and the triggers
/// waiting for the lock with the lock they wait for.
struct Remote<S> {
    handle: ProcessorHandle<S, MailFailure>,
    notices: MailboxExecutor<S, MailFailure>,
    pending: StdArc<PendingTriggers>,
    lock: Arc<CheckpointLock<S>>,
}

impl<S, C, W> TaskControl for Remote<BridgeCell<S, C, W>>
where
    S: Serialize + DeserializeOwned + Default + Send + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier, requested: Instant) {
        // Queued first, then asked for twice; whichever holder of the lock comes first runs it
        // (see `trigger`): the source thread before its next section (one emit away while it
        // runs hot, and nobody is woken) ...
        self.pending.push(PendingTrigger::new(barrier, requested));
        self.lock.post_errand();
        // ... or the mailbox thread, for a source that emits no section soon (blocked outside
        // the lock, waiting for room, sleeping). Not through the executor: the mail looks at
        // the queue first and asks for the lock only if the errand left a trigger. Urgent: it
        // overtakes a batch of mails already built (see `trigger`'s module docs).
        let pending = StdArc::clone(&self.pending);
        let lock = Arc::clone(&self.lock);
        let mail = move || {
            pending.run_fallback(&lock, |cell| {
                body::run_pending(cell, &pending, Holder::Mail)
            })
        };
        if self
            .handle
            .execute_unlocked(Priority::URGENT, "checkpoint trigger", mail)
            .is_err()
        {
            // Refused: the task is ending and no mail runs any more; what waits declines
            // (whoever takes a trigger out of the queue has it, so each declines once).
            self.pending.decline_all();
        }
    }

    fn notify_checkpoint(&self, id: u64, completed: bool) {
        // Refused once the task is over: nothing left to notify.
        let description = if completed {
            "checkpoint complete"
        } else {
            "checkpoint aborted"
        };
        let _ = self
            .notices
            .execute(description, move |cell: &mut BridgeCell<S, C, W>| {
                body::notify(cell, id, completed)
            });
    }
}

/// What the task thread receives once everything is wired.
struct Setup<F: SourceFunction, C, W> {
    processor: Processor<F, C, W>,
    handle: ProcessorHandle<Cell<F, C, W>, MailFailure>,
    lock: Arc<CheckpointLock<Cell<F, C, W>>>,
    timers: StdArc<MailboxTimerService<Cell<F, C, W>, MailFailure>>,
    source: F,
    restore: Option<TaskSnapshot>,
    task: TaskParts,
    cancel: CancellationToken,
    pending: StdArc<PendingTriggers>,
}

/// Wires the task and starts its thread; the thread starts the source once the chain is open.
pub(crate) fn spawn<F, C, W>(
    config: TaskConfig,
    source: F,
    chain: C,
    output: W,
    options: Options,
) -> TaskHandle
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let (setup_tx, setup_rx) = streamtask_core::sync::channel::bounded::<Setup<F, C, W>>(1);
    let thread = spawn_named(config.name.clone(), move || {
        streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Task);
        // The spawning thread fails only before anything ran; then there is nothing to do.
        if let Ok(setup) = setup_rx.recv() {
            task_main(setup);
        }
    });

    // The chain runs on the legacy source's thread, which holds the checkpoint lock for a
    // whole firing of event-time timers: it cannot be interrupted, whatever the setting says.
    let TaskSetup {
        parts: task,
        clock,
        restore,
        tracer,
        interruptible_timers: _,
    } = TaskSetup::new(config);
    let name = task.name.clone();
    let metrics = StdArc::clone(&task.metrics);
    // Mails come rarely here, and the source thread runs flat out: a take that finds nothing
    // parks at once, so the mailbox thread, woken for a trigger the source's errand already
    // ran, does not spin and yield on a core the source or the triggering thread needs.
    let mailbox = TaskMailbox::with_owner(thread.thread().clone()).with_spin_before_park(false);
    let builder = ProcessorBuilder::<Cell<F, C, W>, MailFailure>::with_metrics(
        mailbox,
        StdArc::clone(&metrics),
        tracer.clone(),
    );
    let handle = builder.handle();
    let timers = StdArc::new(MailboxTimerService::with_metrics(
        &format!("{name}-timers"),
        clock,
        &handle,
        Some(StdArc::clone(&metrics)),
        tracer.clone(),
    ));
    let events = StdArc::new(MailboxEvents::new(&handle));
    let services = TaskServices::new(&name, timers.clone(), events);
    let context_timers: StdArc<dyn TimerService> = timers.clone();
    let cell = SourceCell::new(
        F::State::default(),
        Emission::new(options.context, context_timers),
        ChainBody::new(
            chain,
            output,
            TaskEnv::new(task.clone(), services, tracer.clone()),
        ),
    )
    .with_name(source.name());
    // The triggers waiting for the lock; the lock's errand runs them on the source thread
    // before its next section. A checkpoint that fails there fails the task as it would in a
    // mail (the first failure wins; the stop hook ends the loop).
    let pending = StdArc::new(PendingTriggers::new(task.responder.clone()));
    let errand = {
        let pending = StdArc::clone(&pending);
        let lifecycle = Arc::clone(&task.lifecycle);
        move |cell: &mut Cell<F, C, W>| {
            if let Err(MailFailure(failure)) = body::run_pending(cell, &pending, Holder::Errand) {
                lifecycle.record_failure(failure);
            }
        }
    };
    let lock = Arc::new(
        CheckpointLock::new(cell, options.fairness)
            .with_metrics(StdArc::clone(&metrics))
            .with_tracer(tracer)
            .with_errand(errand),
    );
    // Cancelled or failed: the source's token (reaching a source blocked while holding the
    // lock), and a poison mail for the loop (a no-op once the mailbox closed).
    let cancel = CancellationToken::new();
    {
        let cancel = cancel.clone();
        let poison = handle.clone();
        task.lifecycle.set_stop_hook(move || {
            cancel.cancel();
            poison.all_actions_completed();
        });
    }
    let remote = Remote {
        handle: handle.clone(),
        notices: builder.mailbox_executor(Priority::MAX),
        pending: StdArc::clone(&pending),
        lock: Arc::clone(&lock),
    };
    let processor = builder.build(CheckpointLockExecutor::new(Arc::clone(&lock)));
    let setup = Setup {
        processor,
        handle,
        lock,
        timers,
        source,
        restore,
        task: task.clone(),
        cancel,
        pending,
    };
    if setup_tx.send(setup).is_err() {
        unreachable!("the task thread waits for its setup before anything else");
    }
    TaskHandle::new(task, TriggerMode::Source, StdArc::new(remote), thread)
}

/// The task (mailbox) thread: open under the lock, start the source thread, take mails until
/// the source ends or the task is cancelled or fails, wait for the source thread, finish or not,
/// and always clean up. The protocol is written out on
/// [`LegacySourceStreamTask`](crate::LegacySourceStreamTask).
fn task_main<F, C, W>(setup: Setup<F, C, W>)
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let Setup {
        mut processor,
        handle,
        lock,
        timers,
        source,
        restore,
        task,
        cancel,
        pending,
    } = setup;
    let lifecycle = &task.lifecycle;
    let name = task.name.as_str();
    task.metrics.threads.inc();
    let fail = |failure: TaskFailure| {
        lifecycle.record_failure(failure);
    };
    let fail_with = |error: TaskError| {
        lifecycle.fail(name, error);
    };

    // 1. Restore and open under the lock: nothing (a timer, a trigger, the source) reaches the
    //    chain before it is open.
    match catch_panic(|| lock.lock().restore_and_open(restore.as_ref())) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => fail_with(error.into()),
        Err(panic) => fail_with(TaskError::Panic(panic)),
    }

    // 2. Start the source thread, unless cancelled or failed meanwhile.
    let mut source_thread = None;
    let exit = Arc::new(SourceExit::new());
    if lifecycle.start() {
        source_thread = Some(spawn_source(source, &lock, &cancel, &handle, &exit, &task));
        // 3. Only mails from now on: the default action suspends itself for good.
        let mut mails_only = |_: &mut Cell<F, C, W>, controller: &mut Controller<'_>| {
            controller.suspend_default_action();
            Ok(())
        };
        match catch_panic(|| processor.run_mailbox_loop(&mut mails_only)) {
            Ok(Ok(())) => {}
            Ok(Err(LoopError::Failed(MailFailure(failure)))) => fail(failure),
            Ok(Err(LoopError::Mailbox(e))) => fail_with(TaskError::Panic(format!(
                "the task's own mailbox refused its loop: {e}"
            ))),
            Err(panic) => fail_with(TaskError::Panic(panic)),
        }
    }

    // 4. The task never ends while the source thread runs (FLINK-15467): wait for it; once the
    //    task is stopping, for most of the cancel grace (counted from the stop).
    let source_ended = match source_thread {
        None => true,
        Some(thread) => {
            let ended = match lifecycle.stopped_at() {
                None => exit.wait_ended(task.grace), // finishing: the source already returned
                Some(stopped_at) => {
                    let share = task.grace - task.grace / SOURCE_SHARE_OF_GRACE;
                    exit.wait_ended_until(stopped_at + share)
                }
            };
            if ended {
                // Its failures went through the mailbox; joining only reaps it.
                let _ = thread.join();
            } else {
                log::warn!(
                    "task {name}: the source ignored cancellation for {:?}; its thread is left \
                     behind and closes the chain itself if it ever returns",
                    task.grace
                );
                lifecycle.left_behind(task.grace);
                drop(thread); // detach
            }
            ended
        }
    };

    // 5. End of input: the source returned and began the chain's end of input (on its thread,
    //    under the lock); finish the chain and quiesce the timers.
    if source_ended && lifecycle.state() == TaskState::Finishing {
        let finished = catch_panic(|| -> Result<(), TaskError> {
            let mut cell = lock.lock();
            match cell.output_mut().end_input_step()? {
                Drain::Finished => {}
                Drain::Waiting => unreachable!(
                    "the chaining rule keeps operators that wait for their own events out of \
                     bridge chains"
                ),
            }
            timers.quiesce();
            Ok(())
        });
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(error)) => fail_with(error),
            Err(panic) => fail_with(TaskError::Panic(panic)),
        }
    }

    // 6. Teardown: timers first, then the mailbox (FLINK-23558). A finishing task runs the mails
    //    left (triggers decline, notices reach the finished chain); otherwise they are dropped
    //    (triggers decline as they drop). Then the chain closes, under the lock, unless an
    //    abandoned source thread may still hold it: that thread closes the chain itself.
    timers.quiesce();
    let _ = processor.prepare_close();
    if lifecycle.state() == TaskState::Finishing {
        match catch_panic(|| processor.drain()) {
            Ok(Ok(())) => {}
            Ok(Err(MailFailure(failure))) => fail(failure),
            Err(panic) => fail_with(TaskError::Panic(panic)),
        }
    }
    if source_ended {
        lock.lock().close();
    }
    timers.shutdown();
    let _ = processor.close();
    // Triggers no holder took (their mails were dropped, or the source stopped first) decline.
    pending.decline_all();
    lifecycle.complete();
}

/// Starts the legacy source on its own thread: `run_source` (the context's timers, the
/// function, and for a finite source `Watermark::MAX` + the chain's end of input under the
/// lock), then its completion into the mailbox: a poison mail when it ended, a failure report
/// when it failed (unless cancelled: a cancelled source's errors are not failures, FLINK-15811).
fn spawn_source<F, C, W>(
    mut function: F,
    lock: &Arc<CheckpointLock<Cell<F, C, W>>>,
    cancel: &CancellationToken,
    handle: &ProcessorHandle<Cell<F, C, W>, MailFailure>,
    exit: &Arc<SourceExit>,
    task: &TaskParts,
) -> thread::JoinHandle<()>
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let lock = Arc::clone(lock);
    let cancel = cancel.clone();
    let handle = handle.clone();
    let exit = Arc::clone(exit);
    let thread_name = format!("{}-legacy-source", task.name);
    task.metrics.threads.inc();
    spawn_named(thread_name.clone(), move || {
        streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Source);
        let error = match catch_panic(|| run_source(&mut function, &lock, &cancel)) {
            Ok(Ok(_end)) => None,
            Ok(Err(error)) => Some(TaskError::from(error)),
            Err(panic) => Some(TaskError::Panic(panic)),
        };
        match error {
            Some(error) if !cancel.is_cancelled() => {
                let failure = MailFailure(TaskFailure::new(thread_name, error));
                if let Err(MailFailure(failure)) = handle.report_failure(failure) {
                    log::warn!("source failure after the task ended: {failure}");
                }
            }
            Some(error) => {
                log::debug!("{thread_name}: error after cancellation ignored: {error}");
                handle.all_actions_completed();
            }
            // Ended (or cancelled): the loop ends. A no-op once the mailbox is closed.
            None => handle.all_actions_completed(),
        }
        drop(function);
        if !exit.source_ended() {
            // The task thread gave up on this thread and did not touch the lock: close the
            // chain now that nothing else will.
            lock.lock().close();
        }
    })
}
