//! The bridge task's threads: wiring, the task (mailbox) thread, and the source thread.

use std::sync::Arc as StdArc;

use serde::Serialize;
use std::time::Duration;

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{TaskOutput, TaskServices};
use streamtask_core::sync::{Arc, thread};
use streamtask_core::task::{TaskConfig, TaskError, TaskFailure, TaskOutcome};
use streamtask_core::{CheckpointBarrier, Operator, TaskSnapshot, TimerService, catch_panic};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContextConfig,
    SourceFunction, run_source,
};
use streamtask_mailbox::{
    Controller, LoopError, MailboxEvents, MailboxExecutor, MailboxProcessor, MailboxTimerService,
    Priority, ProcessorBuilder, ProcessorHandle, TaskMailbox,
};

use super::body::{self, BodyEnv, BridgeCell, ChainBody, MailFailure, PendingTrigger};
use super::shared::{Shared, SourceExit, TaskState};
use super::{Control, TaskHandle};
use crate::executor::CheckpointLockExecutor;

type Cell<F, C, W> = BridgeCell<<F as SourceFunction>::State, C, W>;
type Processor<F, C, W> =
    MailboxProcessor<Cell<F, C, W>, MailFailure, CheckpointLockExecutor<Cell<F, C, W>>>;

/// What `LegacySourceStreamTask::spawn` hands over.
pub(crate) struct Options {
    pub(crate) context: SourceContextConfig,
    pub(crate) fairness: Fairness,
    pub(crate) cancel_grace: Duration,
}

/// The handle's side of the mailbox: the executors its calls enqueue through.
struct Remote<S> {
    main: MailboxExecutor<S, MailFailure>,
    notices: MailboxExecutor<S, MailFailure>,
    processor: ProcessorHandle<S, MailFailure>,
    responder: streamtask_core::task::CheckpointResponder,
}

impl<S, C, W> Control for Remote<BridgeCell<S, C, W>>
where
    S: Serialize + Send + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn trigger(&self, barrier: CheckpointBarrier) {
        let trigger = PendingTrigger::new(barrier, self.responder.clone());
        // A refused mail is dropped here, and the trigger in it declines as it drops.
        let _ = self.main.execute(
            "checkpoint trigger",
            move |cell: &mut BridgeCell<S, C, W>| body::trigger_checkpoint(cell, trigger),
        );
    }

    fn notify(&self, id: u64, completed: bool) {
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

    fn end_loop(&self) {
        self.processor.all_actions_completed();
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
    shared: Arc<Shared>,
    name: String,
    metrics: StdArc<TaskMetrics>,
    grace: Duration,
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
    let (setup_tx, setup_rx) = crossbeam::channel::bounded::<Setup<F, C, W>>(1);
    let thread = streamtask_core::sync::spawn_named(config.name.clone(), move || {
        match setup_rx.recv() {
            Ok(setup) => task_main(setup),
            // The spawning thread failed while wiring the task; nothing ever ran.
            Err(_) => TaskOutcome::Cancelled,
        }
    });

    let TaskConfig {
        name,
        clock,
        responder,
        restore,
        metrics,
        tracer,
    } = config;
    let mailbox = TaskMailbox::with_owner(thread.thread().clone());
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
    let shared = Arc::new(Shared::new());
    let env = BodyEnv::new(
        name.clone(),
        source.name().to_string(),
        StdArc::clone(&metrics),
        tracer.clone(),
        responder.clone(),
        shared.cancel.clone(),
    );
    let context_timers: StdArc<dyn TimerService> = timers.clone();
    let cell = SourceCell::new(
        F::State::default(),
        Emission::new(options.context, context_timers),
        ChainBody::new(chain, output, services, env),
    );
    let lock = Arc::new(
        CheckpointLock::new(cell, options.fairness)
            .with_metrics(StdArc::clone(&metrics))
            .with_tracer(tracer),
    );
    let remote = Remote {
        main: builder.mailbox_executor(Priority::MIN),
        notices: builder.mailbox_executor(Priority::MAX),
        processor: handle.clone(),
        responder,
    };
    let processor = builder.build(CheckpointLockExecutor::new(Arc::clone(&lock)));
    let setup = Setup {
        processor,
        handle,
        lock,
        timers,
        source,
        restore,
        shared: Arc::clone(&shared),
        name: name.clone(),
        metrics: StdArc::clone(&metrics),
        grace: options.cancel_grace,
    };
    if setup_tx.send(setup).is_err() {
        unreachable!("the task thread waits for its setup before anything else");
    }
    TaskHandle::new(
        name,
        metrics,
        StdArc::new(remote),
        shared,
        thread,
        options.cancel_grace,
    )
}

/// The first failure of the task, kept by the task thread.
struct Failures<'a> {
    shared: &'a Shared,
    name: &'a str,
    first: Option<TaskFailure>,
}

impl Failures<'_> {
    fn fail(&mut self, failure: TaskFailure) {
        if self.shared.fail() {
            log::warn!("task {} failed: {failure}", self.name);
            self.first = Some(failure);
        } else {
            log::debug!(
                "task {}: failure while stopping ignored: {failure}",
                self.name
            );
        }
    }

    fn fail_with(&mut self, error: impl Into<TaskError>) {
        self.fail(TaskFailure::new(self.name.to_string(), error));
    }
}

/// The task (mailbox) thread: open under the lock, start the source thread, take mails until
/// the source ends or the task is cancelled or fails, wait for the source thread, finish or not,
/// and always clean up. The protocol is written out in the [`task` module](super).
fn task_main<F, C, W>(setup: Setup<F, C, W>) -> TaskOutcome
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
        shared,
        name,
        metrics,
        grace,
    } = setup;
    metrics.threads.inc();
    let mut failures = Failures {
        shared: &shared,
        name: &name,
        first: None,
    };

    // 1. Restore and open under the lock: nothing (a timer, a trigger, the source) reaches the
    //    chain before it is open.
    match catch_panic(|| body::open(&mut lock.lock(), restore.as_ref())) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => failures.fail_with(error),
        Err(panic) => failures.fail_with(TaskError::Panic(panic)),
    }

    // 2. Start the source thread, unless cancelled or failed meanwhile.
    let mut source_thread = None;
    let exit = Arc::new(SourceExit::new());
    if shared.transition(TaskState::Initializing, TaskState::Running) {
        source_thread = Some(spawn_source(
            source,
            &lock,
            &shared.cancel,
            &handle,
            &exit,
            &name,
            &metrics,
        ));
        // 3. Only mails from now on: the default action suspends itself for good.
        let mut mails_only = |_: &mut Cell<F, C, W>, controller: &mut Controller<'_>| {
            controller.suspend_default_action();
            Ok(())
        };
        match catch_panic(|| processor.run_mailbox_loop(&mut mails_only)) {
            Ok(Ok(())) => {}
            Ok(Err(LoopError::Failed(MailFailure(failure)))) => failures.fail(failure),
            Ok(Err(LoopError::Mailbox(e))) => {
                failures.fail_with(TaskError::Panic(format!(
                    "the task's own mailbox refused its loop: {e}"
                )));
            }
            Err(panic) => failures.fail_with(TaskError::Panic(panic)),
        }
    }

    // 4. The task never ends while the source thread runs (FLINK-15467): wait for it, up to the
    //    grace period once the task is stopping.
    let source_ended = match source_thread {
        None => true,
        Some(thread) => {
            if exit.wait_ended(grace) {
                // Its failures went through the mailbox; joining only reaps it.
                let _ = thread.join();
                true
            } else {
                log::warn!(
                    "task {name}: the source ignored cancellation for {grace:?}; its thread is \
                     left behind and closes the chain itself if it ever returns"
                );
                false // dropping the handle detaches the thread
            }
        }
    };

    // 5. End of input: the source returned, so finish the chain (under the lock).
    if source_ended && shared.transition(TaskState::Running, TaskState::Finishing) {
        let finished = catch_panic(|| {
            let mut cell = lock.lock();
            let body = cell.output_mut();
            body.finish_chain()?;
            timers.quiesce();
            body.end_output()
        });
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failures.fail_with(error),
            Err(panic) => failures.fail_with(TaskError::Panic(panic)),
        }
    }

    // 6. Teardown: timers first, then the mailbox (FLINK-23558). A finishing task runs the mails
    //    left (triggers decline, notices reach the finished chain); otherwise they are dropped
    //    (triggers decline as they drop). Then the chain closes, under the lock, unless an
    //    abandoned source thread may still hold it: that thread closes the chain itself.
    timers.quiesce();
    let _ = processor.prepare_close();
    if shared.state() == TaskState::Finishing {
        match catch_panic(|| processor.drain()) {
            Ok(Ok(())) => {}
            Ok(Err(MailFailure(failure))) => failures.fail(failure),
            Err(panic) => failures.fail_with(TaskError::Panic(panic)),
        }
    }
    if source_ended {
        body::close(&mut lock.lock());
    }
    timers.shutdown();
    let _ = processor.close();

    let (terminal, outcome) = match shared.state() {
        TaskState::Finishing => (TaskState::Finished, TaskOutcome::Finished),
        TaskState::Cancelling if source_ended => (TaskState::Cancelled, TaskOutcome::Cancelled),
        TaskState::Cancelling => (
            TaskState::Failed,
            TaskOutcome::Failed(TaskFailure::new(
                name.clone(),
                TaskError::CancellationIgnored {
                    grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                },
            )),
        ),
        state => {
            let failure = failures.first.take().unwrap_or_else(|| {
                TaskFailure::new(
                    name.clone(),
                    TaskError::Source(format!("the task ended while {state:?} without a failure")),
                )
            });
            (TaskState::Failed, TaskOutcome::Failed(failure))
        }
    };
    shared.complete(terminal);
    outcome
}

/// Starts the legacy source on its own thread: `run_source` (the context's timers, the
/// function, and for a finite source `Watermark::MAX` + `end_input` under the lock), then its
/// completion into the mailbox: a poison mail when it ended, a failure report when it failed
/// (unless cancelled: a cancelled source's errors are not failures, FLINK-15811).
fn spawn_source<F, C, W>(
    mut function: F,
    lock: &Arc<CheckpointLock<Cell<F, C, W>>>,
    cancel: &CancellationToken,
    handle: &ProcessorHandle<Cell<F, C, W>, MailFailure>,
    exit: &Arc<SourceExit>,
    task: &str,
    metrics: &StdArc<TaskMetrics>,
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
    let thread_name = format!("{task}-legacy-source");
    metrics.threads.inc();
    streamtask_core::sync::spawn_named(thread_name.clone(), move || {
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
            body::close(&mut lock.lock());
        }
    })
}
