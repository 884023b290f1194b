//! The machinery every legacy task shares: building the lock, timer service and event sink; the
//! "async calls" thread; the task thread's skeleton (restore and open under the lock, run, tear
//! down, join the helpers); and checkpoints.

use std::fmt;
use std::sync::Arc as StdArc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender, unbounded};
use streamtask_core::channel::{GateEvent, InputClosed, InputGate, TwoInputEvent, TwoInputGate};
use streamtask_core::operator::{EventSink, OperatorEvent, TaskServices};
use streamtask_core::sync::{Arc, thread};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError};
use streamtask_core::{CheckpointBarrier, TaskSnapshot, catch_panic};

use super::body::TaskBody;
use super::shared::{TaskShared, TaskState};
use super::{TaskHandle, TaskKind};
use crate::cancel::CancellationToken;
use crate::lock::{CheckpointLock, Fairness};
use crate::timer::SystemProcessingTimeService;

/// How long a stopping task may take before `join`/`cancel` give up on it.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(30);

/// What a task's handle sends to its async-calls thread.
pub(crate) enum AsyncCall {
    /// Source tasks: snapshot and broadcast `barrier`; `requested` is the trigger call's time.
    Trigger {
        barrier: CheckpointBarrier,
        requested: Instant,
    },
    Complete(u64),
    Aborted(u64),
    /// An operator event from a foreign thread.
    Event(usize, OperatorEvent),
    Stop,
}

/// The options every legacy task takes besides its config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuntimeOptions {
    pub(crate) fairness: Fairness,
    pub(crate) cancel_grace: Duration,
}

/// Everything the task thread needs.
pub(crate) struct Parts<B: TaskBody> {
    pub(crate) shared: Arc<TaskShared>,
    pub(crate) lock: Arc<CheckpointLock<B>>,
    pub(crate) timers: StdArc<SystemProcessingTimeService>,
    calls: Sender<AsyncCall>,
    async_thread: Option<thread::JoinHandle<()>>,
}

/// Builds a task's runtime and starts its threads: the timer thread, the async-calls thread,
/// and the task thread running `main` between opening and tearing down.
pub(crate) fn spawn<B, M>(
    config: TaskConfig,
    kind: TaskKind,
    options: RuntimeOptions,
    make_body: impl FnOnce(TaskServices) -> B,
    main: M,
) -> TaskHandle
where
    B: TaskBody,
    M: FnOnce(&Parts<B>) -> Result<(), TaskError> + Send + 'static,
{
    let TaskConfig {
        name,
        clock,
        responder,
        restore,
        metrics,
        tracer,
    } = config;
    let shared = Arc::new(TaskShared::new(
        name.clone(),
        StdArc::clone(&metrics),
        tracer.clone(),
        responder.clone(),
    ));
    let timer_config = TaskConfig::new(name.clone())
        .with_clock(clock)
        .with_metrics(StdArc::clone(&metrics))
        .with_tracer(tracer.clone());
    let timer_thread = format!("{name}-timer");
    let on_timer_error = {
        let shared = Arc::clone(&shared);
        move |error: TaskError| shared.fail(timer_thread, error)
    };
    let timers = StdArc::new(SystemProcessingTimeService::spawn(
        &timer_config,
        on_timer_error,
    ));
    let (calls, calls_rx) = unbounded();
    let events: StdArc<dyn EventSink> = StdArc::new(LegacyEvents {
        shared: Arc::clone(&shared),
        calls: calls.clone(),
    });
    let services = TaskServices::new(&name, timers.clone(), events);
    let body = make_body(services);
    let lock = Arc::new(
        CheckpointLock::new(body, options.fairness)
            .with_metrics(StdArc::clone(&metrics))
            .with_tracer(tracer),
    );
    timers.bind(Arc::clone(&lock), |body: &mut B, timer| {
        body.dispatch_timer(timer)
    });
    metrics.threads.add(3);

    let async_thread = {
        let shared = Arc::clone(&shared);
        let lock = Arc::clone(&lock);
        let thread_name = format!("{name}-async-calls");
        spawn_named(thread_name.clone(), move || {
            shared.register_current_thread();
            run_async_calls(&shared, &lock, &calls_rx, &thread_name);
        })
    };
    let mut parts = Parts {
        shared: Arc::clone(&shared),
        lock,
        timers,
        calls: calls.clone(),
        async_thread: Some(async_thread),
    };
    let task_thread = spawn_named(name.clone(), move || {
        parts.shared.register_current_thread();
        run_task_thread(&mut parts, restore, main);
    });
    TaskHandle::new(shared, calls, task_thread, kind, options.cancel_grace)
}

/// The task thread: restore and open under the lock, run `main`, record its failure, tear
/// down, and only then report the task ended.
fn run_task_thread<B, M>(parts: &mut Parts<B>, restore: Option<TaskSnapshot>, main: M)
where
    B: TaskBody,
    M: FnOnce(&Parts<B>) -> Result<(), TaskError>,
{
    let name = parts.shared.name.clone();
    // A thread waiting on the lock's condition (an async head, a full output) must notice
    // cancellation: the token's flag changes outside the lock, so notify after it.
    let waker = Arc::clone(&parts.lock);
    let wake_on_cancel = parts.shared.cancel.on_cancel(move || waker.wake_all());
    let result = catch_panic(|| -> Result<(), TaskError> {
        {
            // Open under the lock: nothing (timer, trigger, event) runs on the chain before
            // it is open.
            let mut body = parts.lock.lock();
            body.restore(restore.as_ref())?;
            body.open()?;
            if !parts
                .shared
                .transition(TaskState::Initializing, TaskState::Running)
            {
                return Ok(()); // stopped while opening
            }
        }
        main(parts)
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(error)) => parts.shared.fail(name.clone(), error),
        Err(panic) => parts.shared.fail(name.clone(), TaskError::Panic(panic)),
    }
    parts.teardown(&name);
    drop(wake_on_cancel);
    parts.shared.complete();
}

impl<B: TaskBody> Parts<B> {
    /// Every exit path: quiesce timers and close the chain under the lock, stop and join the
    /// timer and async-calls threads.
    fn teardown(&mut self, thread_name: &str) {
        {
            let mut body = self.lock.lock();
            self.timers.quiesce(&body);
            self.shared.mark_chain_closed();
            match catch_panic(|| body.close()) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::warn!("{thread_name}: closing the chain failed: {e}"),
                Err(panic) => log::warn!("{thread_name}: closing the chain panicked: {panic}"),
            }
            body.publish_metrics();
        }
        // Not under the lock: the timer thread may be waiting for it.
        self.timers.shutdown();
        let _ = self.calls.send(AsyncCall::Stop);
        if let Some(handle) = self.async_thread.take() {
            // Its failures went through `TaskShared::fail`; joining only reaps it.
            let _ = handle.join();
        }
    }

    /// End of input, under the lock: `finish` the chain, quiesce timers, end the output. Does
    /// nothing if the task is no longer running (it was stopped meanwhile).
    pub(crate) fn finish_with(
        &self,
        finish: impl FnOnce(&mut B) -> Result<(), streamtask_core::OperatorError>,
    ) -> Result<(), TaskError> {
        let mut body = self.lock.lock();
        if !self
            .shared
            .transition(TaskState::Running, TaskState::Finishing)
        {
            return Ok(());
        }
        finish(&mut body)?;
        self.timers.quiesce(&body);
        body.end_output()?;
        body.publish_metrics();
        Ok(())
    }

    /// A barrier-triggered checkpoint on the task thread.
    pub(crate) fn checkpoint(&self, barrier: CheckpointBarrier, requested: Instant) {
        perform_checkpoint(
            &self.shared,
            &self.lock,
            barrier,
            requested,
            &self.shared.name,
        );
    }
}

impl<B: TaskBody> fmt::Debug for Parts<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parts")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// Flink's `performCheckpoint`: under the lock, if running, prepare + broadcast the barrier +
/// snapshot; then acknowledge (or decline) through the responder. Records the start delay
/// (request to lock acquired) and the duration.
fn perform_checkpoint<B: TaskBody>(
    shared: &TaskShared,
    lock: &CheckpointLock<B>,
    barrier: CheckpointBarrier,
    requested: Instant,
    thread_name: &str,
) {
    let id = barrier.id;
    let mut body = lock.lock();
    let start = Instant::now();
    if shared.state() != TaskState::Running {
        drop(body);
        shared.responder.decline(id, DeclineReason::NotRunning);
        return;
    }
    shared
        .metrics
        .checkpoint_delay
        .record(start.saturating_duration_since(requested));
    let span = shared
        .tracer
        .span("checkpoint", || format!("checkpoint {id}"));
    let mut snapshot = TaskSnapshot::new();
    let result = catch_panic(|| body.checkpoint(barrier, &mut snapshot));
    shared.metrics.checkpoint_duration.record(start.elapsed());
    drop(body);
    drop(span);
    match result {
        Ok(Ok(())) => {
            shared.metrics.checkpoints.inc();
            shared.responder.acknowledge(id, snapshot);
        }
        Ok(Err(e)) => {
            let message = e.to_string();
            shared
                .responder
                .decline(id, DeclineReason::Failed(message.clone()));
            shared.fail(
                thread_name,
                TaskError::Checkpoint {
                    checkpoint: id,
                    message,
                },
            );
        }
        Err(panic) => {
            shared
                .responder
                .decline(id, DeclineReason::Failed(panic.clone()));
            shared.fail(thread_name, TaskError::Panic(panic));
        }
    }
}

/// The "async calls" thread (Flink's single-thread executor per task): checkpoint triggers of
/// source tasks, completion and abort notices, and operator events, each under the lock.
fn run_async_calls<B: TaskBody>(
    shared: &TaskShared,
    lock: &CheckpointLock<B>,
    calls: &Receiver<AsyncCall>,
    thread_name: &str,
) {
    while let Ok(call) = calls.recv() {
        match call {
            AsyncCall::Stop => break,
            AsyncCall::Trigger { barrier, requested } => {
                perform_checkpoint(shared, lock, barrier, requested, thread_name);
            }
            AsyncCall::Complete(id) => {
                run_locked(shared, lock, thread_name, |body| {
                    body.notify_checkpoint_complete(id)
                });
            }
            AsyncCall::Aborted(id) => {
                run_locked(shared, lock, thread_name, |body| {
                    body.notify_checkpoint_aborted(id)
                });
            }
            AsyncCall::Event(operator, event) => {
                run_locked(shared, lock, thread_name, |body| {
                    body.dispatch_event(operator, event)
                });
            }
        }
    }
}

/// Runs `f` under the lock while the task runs or finishes; a failure fails the task. Wakes
/// the lock's waiters afterwards (an event may have freed room an async head waits for).
pub(crate) fn run_locked<B: TaskBody>(
    shared: &TaskShared,
    lock: &CheckpointLock<B>,
    thread_name: &str,
    f: impl FnOnce(&mut B) -> Result<(), streamtask_core::OperatorError>,
) {
    let mut body = lock.lock();
    if !matches!(shared.state(), TaskState::Running | TaskState::Finishing)
        || shared.is_chain_closed()
    {
        return;
    }
    let result = catch_panic(|| f(&mut body));
    body.notify_all();
    drop(body);
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => shared.fail(thread_name, e),
        Err(panic) => shared.fail(thread_name, TaskError::Panic(panic)),
    }
}

/// The legacy model's [`EventSink`]: events go to the async-calls thread, which delivers each
/// under the checkpoint lock. Queueing (rather than locking on the sender's thread) is what
/// lets an operator send an event while its own task thread holds the non-reentrant lock.
struct LegacyEvents {
    shared: Arc<TaskShared>,
    calls: Sender<AsyncCall>,
}

impl EventSink for LegacyEvents {
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        if !self.shared.state().is_live() {
            return Err(event);
        }
        match self.calls.send(AsyncCall::Event(operator, event)) {
            Ok(()) => Ok(()),
            Err(crossbeam::channel::SendError(AsyncCall::Event(_, event))) => Err(event),
            Err(_) => unreachable!("an event send hands back the event it could not send"),
        }
    }
}

/// Starts a thread named `name` (unnamed under loom, which has no builder).
pub(crate) fn spawn_named(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> thread::JoinHandle<()> {
    #[cfg(not(loom))]
    {
        thread::Builder::new()
            .name(name)
            .spawn(body)
            .expect("the OS refused to start a task thread")
    }
    #[cfg(loom)]
    {
        let _ = name;
        thread::spawn(body)
    }
}

/// A gate the task thread blocks on, woken by data or by cancellation.
pub(crate) trait BlockingGate {
    type Event;
    fn poll(&mut self) -> Result<Self::Event, InputClosed>;
    fn register(&self, waker: &Waker);
    fn is_nothing(event: &Self::Event) -> bool;
}

impl<T> BlockingGate for InputGate<T> {
    type Event = GateEvent<T>;
    fn poll(&mut self) -> Result<GateEvent<T>, InputClosed> {
        self.poll_next()
    }
    fn register(&self, waker: &Waker) {
        self.register_waker(waker);
    }
    fn is_nothing(event: &GateEvent<T>) -> bool {
        matches!(event, GateEvent::Nothing)
    }
}

impl<A, B> BlockingGate for TwoInputGate<A, B> {
    type Event = TwoInputEvent<A, B>;
    fn poll(&mut self) -> Result<TwoInputEvent<A, B>, InputClosed> {
        self.poll_next()
    }
    fn register(&self, waker: &Waker) {
        self.register_waker(waker);
    }
    fn is_nothing(event: &TwoInputEvent<A, B>) -> bool {
        matches!(event, TwoInputEvent::Nothing)
    }
}

/// Unparks the task thread.
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: StdArc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &StdArc<Self>) {
        self.0.unpark();
    }
}

/// Reads a gate on the task thread, parking while there is nothing, and returning `None` once
/// `cancel` fired. Lost-wakeup free: poll; register the waker; poll again; check the token
/// (whose cancel hook unparks this thread); park. An unpark before the park makes it return
/// at once.
pub(crate) struct GateReader {
    waker: Waker,
    _unpark_on_cancel: crate::cancel::CancelHook,
    cancel: CancellationToken,
}

impl GateReader {
    /// A reader for the calling thread.
    pub(crate) fn new(cancel: &CancellationToken) -> Self {
        let me = thread::current();
        let on_cancel = me.clone();
        GateReader {
            waker: Waker::from(StdArc::new(Unpark(me))),
            _unpark_on_cancel: cancel.on_cancel(move || on_cancel.unpark()),
            cancel: cancel.clone(),
        }
    }

    pub(crate) fn next<G: BlockingGate>(
        &self,
        gate: &mut G,
    ) -> Result<Option<G::Event>, InputClosed> {
        loop {
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
            let event = gate.poll()?;
            if !G::is_nothing(&event) {
                return Ok(Some(event));
            }
            gate.register(&self.waker);
            let event = gate.poll()?;
            if !G::is_nothing(&event) {
                return Ok(Some(event));
            }
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
            thread::park();
        }
    }
}

impl fmt::Debug for GateReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateReader").finish_non_exhaustive()
    }
}
