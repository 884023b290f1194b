//! Mailbox tasks: a source, one-input or two-input task on one thread, driven by a
//! [`MailboxProcessor`], behind one [`TaskHandle`].
//!
#![doc = include_str!("task.md")]

mod body;
mod one_input;
mod source;
mod two_input;

use std::fmt;
use std::time::Instant;

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::atomic::{AtomicBool, Ordering};
use streamtask_core::sync::{Arc, thread};
use streamtask_core::task::{DeclineReason, TaskConfig};
use streamtask_core::{CheckpointBarrier, TaskError, TaskFailure, TaskOutcome, TriggerError};

use crate::action::Immediate;
use crate::executor::MailboxExecutor;
use crate::letter::MailAction;
use crate::mail::Priority;
use crate::mailbox::TaskMailbox;
use crate::processor::{
    Controller, DefaultAction, LoopError, MailboxProcessor, ProcessorBuilder, ProcessorHandle,
};
use crate::services::{MailboxEvents, MailboxTimerService};

pub use self::one_input::OneInputTask;
pub use self::source::SourceTask;
pub use self::two_input::TwoInputTask;

use self::body::{TaskBody, TaskEnv};

/// The control surface of a running mailbox task: the same calls as every model's task, so the
/// executor can treat them alike. [`join`](Self::join) it for the outcome; dropping it without
/// joining cancels the task and waits for its thread, so no thread is ever left behind.
///
/// See [`SourceTask`] for an example.
///
#[doc = include_str!("task.md")]
pub struct TaskHandle {
    name: String,
    metrics: std::sync::Arc<TaskMetrics>,
    control: std::sync::Arc<dyn TaskControl>,
    thread: Option<thread::JoinHandle<TaskOutcome>>,
}

impl TaskHandle {
    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task's metrics.
    pub fn metrics(&self) -> &std::sync::Arc<TaskMetrics> {
        &self.metrics
    }

    /// Triggers checkpoint `barrier.id` on a source task: a [`Priority::MIN`] mail that, between
    /// two reader steps, snapshots the reader and the chain, sends the barrier downstream and
    /// acknowledges through the task's responder. A task that is not running (finishing or
    /// finished) declines with [`DeclineReason::NotRunning`].
    ///
    /// # Errors
    ///
    /// [`TriggerError::NotASource`] on a task with inputs: it checkpoints when barriers arrive.
    pub fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        self.control.trigger_checkpoint(barrier)
    }

    /// Checkpoint `id` completed everywhere: a [`Priority::MAX`] mail that notifies the chain
    /// (and reader). Ignored once the task is over.
    pub fn notify_checkpoint_complete(&self, id: u64) {
        self.control.notify(id, true);
    }

    /// Checkpoint `id` was aborted: a [`Priority::MAX`] mail that notifies the chain (and
    /// reader) and releases channels held for its alignment. Ignored once the task is over.
    pub fn notify_checkpoint_aborted(&self, id: u64) {
        self.control.notify(id, false);
    }

    /// Cancels the task: from any thread, any number of times. A task that already finished
    /// stays finished.
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Whether the task thread has ended (every thread it started joined).
    pub fn is_done(&self) -> bool {
        self.control.is_done()
    }

    /// Waits for the task to end and returns how it ended.
    pub fn join(mut self) -> TaskOutcome {
        let thread = self.thread.take().expect("a handle is joined at most once");
        match thread.join() {
            Ok(outcome) => outcome,
            // The task thread catches every panic of user code; this is a bug in the runtime.
            Err(payload) => TaskOutcome::Failed(TaskFailure::new(
                self.name.clone(),
                TaskError::Panic(panic_message(payload.as_ref())),
            )),
        }
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.control.cancel();
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("name", &self.name)
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// The task-type-erased remote control behind a [`TaskHandle`].
trait TaskControl: Send + Sync {
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError>;
    fn notify(&self, id: u64, completed: bool);
    fn cancel(&self);
    fn is_done(&self) -> bool;
}

/// Flags the handle and the task thread share.
struct Shared {
    cancelled: AtomicBool,
    done: AtomicBool,
}

struct Remote<B> {
    is_source: bool,
    processor: ProcessorHandle<B, TaskFailure>,
    notices: MailboxExecutor<B, TaskFailure>,
    responder: streamtask_core::task::CheckpointResponder,
    shared: Arc<Shared>,
}

impl<B: TaskBody> TaskControl for Remote<B> {
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier) -> Result<(), TriggerError> {
        if !self.is_source {
            return Err(TriggerError::NotASource);
        }
        let trigger = TriggerMail {
            barrier,
            triggered: Instant::now(),
            responder: Some(self.responder.clone()),
        };
        // Refused once the task is ending: the mail comes back and, dropped, declines.
        let _ = self
            .processor
            .core()
            .enqueue(Priority::MIN, "checkpoint trigger", trigger);
        Ok(())
    }

    fn notify(&self, id: u64, completed: bool) {
        // Refused once the task is over: nothing left to notify.
        if completed {
            let _ = self
                .notices
                .execute("checkpoint complete", move |body: &mut B| {
                    body.notify_checkpoint_complete(id)
                });
        } else {
            let _ = self
                .notices
                .execute("checkpoint aborted", move |body: &mut B| {
                    body.notify_checkpoint_aborted(id)
                });
        }
    }

    fn cancel(&self) {
        // Release: the task thread reads the flag after the poison mail ended its loop; the
        // mailbox lock between the two orders them anyway.
        self.shared.cancelled.store(true, Ordering::Release);
        self.processor.all_actions_completed();
    }

    fn is_done(&self) -> bool {
        // Acquire pairs with the Release store at the very end of the task thread.
        self.shared.done.load(Ordering::Acquire)
    }
}

/// A checkpoint trigger on its way to the task thread. A trigger that never runs (refused by a
/// mailbox that no longer accepts mails, or dropped when the mailbox closes after a failure or a
/// cancel) declines the checkpoint as not running when it is dropped, so the coordinator hears
/// about every trigger.
struct TriggerMail {
    barrier: CheckpointBarrier,
    triggered: Instant,
    responder: Option<streamtask_core::task::CheckpointResponder>,
}

impl<B: TaskBody> MailAction<B, TaskFailure> for TriggerMail {
    fn run(mut self: Box<Self>, body: &mut B) -> Result<(), TaskFailure> {
        // Ran: from here on the body acknowledges or declines.
        self.responder = None;
        body.trigger_checkpoint(self.barrier, self.triggered)
    }
}

impl Drop for TriggerMail {
    fn drop(&mut self) {
        if let Some(responder) = self.responder.take() {
            responder.decline(self.barrier.id, DeclineReason::NotRunning);
        }
    }
}

/// What the task thread receives once everything is wired.
struct Setup<B: TaskBody> {
    processor: MailboxProcessor<B, TaskFailure, Immediate<B>>,
    timers: std::sync::Arc<MailboxTimerService<B, TaskFailure>>,
    shared: Arc<Shared>,
    name: String,
    metrics: std::sync::Arc<TaskMetrics>,
}

/// Starts the task thread and wires the mailbox, the services and the body `make` builds.
fn spawn_task<B: TaskBody>(
    config: TaskConfig,
    is_source: bool,
    make: impl FnOnce(TaskEnv) -> B,
) -> TaskHandle {
    let (setup_tx, setup_rx) = crossbeam::channel::bounded::<Setup<B>>(1);
    let thread = spawn_named(&config.name, move || match setup_rx.recv() {
        Ok(setup) => task_main(setup),
        // The spawning thread failed while wiring the task; nothing ever ran.
        Err(_) => TaskOutcome::Cancelled,
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
    let builder =
        ProcessorBuilder::with_metrics(mailbox, std::sync::Arc::clone(&metrics), tracer.clone());
    let handle = builder.handle();
    let timers = std::sync::Arc::new(MailboxTimerService::with_metrics(
        &format!("{name}-timers"),
        clock,
        &handle,
        Some(std::sync::Arc::clone(&metrics)),
        tracer.clone(),
    ));
    let events = std::sync::Arc::new(MailboxEvents::new(&handle));
    let services = streamtask_core::operator::TaskServices::new(&name, timers.clone(), events);
    let env = TaskEnv::new(
        name.clone(),
        services,
        responder.clone(),
        std::sync::Arc::clone(&metrics),
        tracer,
        restore,
    );
    let body = make(env);
    let shared = Arc::new(Shared {
        cancelled: AtomicBool::new(false),
        done: AtomicBool::new(false),
    });
    let remote = Remote {
        is_source,
        notices: builder.mailbox_executor(Priority::MAX),
        processor: handle,
        responder,
        shared: Arc::clone(&shared),
    };
    let processor = builder.build(Immediate::new(body));
    let setup = Setup {
        processor,
        timers,
        shared,
        name: name.clone(),
        metrics: std::sync::Arc::clone(&metrics),
    };
    if setup_tx.send(setup).is_err() {
        unreachable!("the task thread waits for its setup before anything else");
    }
    TaskHandle {
        name,
        metrics,
        control: std::sync::Arc::new(remote),
        thread: Some(thread),
    }
}

fn spawn_named<F>(name: &str, body: F) -> thread::JoinHandle<TaskOutcome>
where
    F: FnOnce() -> TaskOutcome + Send + 'static,
{
    #[cfg(not(loom))]
    {
        thread::Builder::new()
            .name(name.to_string())
            .spawn(body)
            .expect("the OS refused to start a task thread")
    }
    #[cfg(loom)]
    {
        let _ = name;
        thread::spawn(body)
    }
}

/// The default action of every task: one step of its body.
struct Step;

impl<B: TaskBody> DefaultAction<B, TaskFailure> for Step {
    #[inline]
    fn run_default_action(
        &mut self,
        body: &mut B,
        controller: &mut Controller<'_>,
    ) -> Result<(), TaskFailure> {
        body.step(controller)
    }
}

/// The task thread: open, loop, finish or not, and always clean up.
fn task_main<B: TaskBody>(setup: Setup<B>) -> TaskOutcome {
    let Setup {
        mut processor,
        timers,
        shared,
        name,
        metrics,
    } = setup;
    metrics.threads.inc();
    let panicked = |message: String| TaskFailure::new(name.clone(), TaskError::Panic(message));

    let ran = streamtask_core::catch_panic(|| -> Result<(), TaskFailure> {
        processor.action_executor_mut().state_mut().open()?;
        match processor.run_mailbox_loop(&mut Step) {
            Ok(()) => Ok(()),
            Err(LoopError::Failed(failure)) => Err(failure),
            Err(LoopError::Mailbox(e)) => panic!("the task's own mailbox refused its loop: {e}"),
        }
    });
    let mut failure = match ran {
        Ok(Ok(())) => None,
        Ok(Err(failure)) => Some(failure),
        Err(message) => Some(panicked(message)),
    };
    let finished = failure.is_none() && processor.action_executor().state().is_finished();

    // Timers first, then the mailbox (FLINK-23558): nothing fires into a quiesced mailbox.
    timers.quiesce();
    let _ = processor.prepare_close();
    if finished {
        match streamtask_core::catch_panic(|| processor.drain()) {
            Ok(Ok(())) => {}
            Ok(Err(f)) => failure = Some(f),
            Err(message) => failure = Some(panicked(message)),
        }
    }
    timers.shutdown();
    let _ = processor.close();
    let body = processor.action_executor_mut().state_mut();
    body.publish_metrics();
    if let Err(message) = streamtask_core::catch_panic(|| body.close()) {
        log::warn!("{name}: closing panicked after the task ended: {message}");
    }

    let outcome = match failure {
        Some(failure) => TaskOutcome::Failed(failure),
        None if finished => TaskOutcome::Finished,
        None => {
            debug_assert!(shared.cancelled.load(Ordering::Acquire));
            TaskOutcome::Cancelled
        }
    };
    // Release pairs with the Acquire in `is_done`: whoever sees `done` sees everything above.
    shared.done.store(true, Ordering::Release);
    outcome
}
