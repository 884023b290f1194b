//! What only the lock model does: the checkpoint lock around the kit's body, the timer thread
//! and the "async calls" thread that reach it under the lock, the task thread's skeleton
//! (restore and open under the lock, run, drain and finish, tear down, join the helpers), and the
//! gate loop every task with inputs runs. The steps themselves (checkpoint order, notices, end of
//! input, close) are the kit's.

use std::fmt;
use std::sync::{Arc as StdArc, OnceLock};
use std::task::{Wake, Waker};
use std::time::Instant;

use streamtask_core::live::Activity;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{EventSink, OperatorEvent, TaskServices};
use streamtask_core::sync::channel::{Receiver, SendError, Sender, unbounded};
use streamtask_core::sync::{Arc, spawn_named, thread};
use streamtask_core::task::{CheckpointResponder, DeclineReason, TaskConfig, TaskError};
use streamtask_core::{CheckpointBarrier, OperatorError, catch_panic, operator::TaskOutput};
use streamtask_runtime::channel::{InputClosed, InputEvent};
use streamtask_runtime::{
    Applied, ChainBody, Drain, InputRecord, TaskControl, TaskEnv, TaskHandle, TaskInput, TaskParts,
    TaskSetup, TriggerMode,
};

use super::body::LockedBody;
use crate::cancel::CancellationToken;
use crate::lock::{CheckpointGuard, CheckpointLock, Fairness};
use crate::timer::SystemProcessingTimeService;

/// What a task's handle (and its operators' event senders) send to its async-calls thread.
pub(crate) enum AsyncCall {
    /// Source tasks: snapshot and broadcast the trigger's barrier.
    Trigger(QueuedTrigger),
    /// A checkpoint-complete (`true`) or -aborted notice.
    Notify(u64, bool),
    /// An operator event from a foreign thread.
    Event(usize, OperatorEvent),
    Stop,
}

/// A checkpoint trigger on its way to the async-calls thread: its barrier, the trigger call's
/// time, and the responder that declines it if it never runs.
///
/// Every trigger the handle let through must reach the coordinator, as an acknowledgement or a
/// decline. One that does not run (queued behind `AsyncCall::Stop`, so the thread ends before
/// it, or left in the channel when the thread's receiver drops, or handed back by a failed
/// send) is dropped, and dropping it declines it with `NotRunning`: the coordinator learns at
/// once instead of at the checkpoint's timeout. Once taken to run, the kit's checkpoint answers
/// for it (and declines it itself if the task stopped meanwhile).
pub(crate) struct QueuedTrigger {
    barrier: CheckpointBarrier,
    requested: Instant,
    /// `None` once taken to run.
    decline_on_drop: Option<StdArc<CheckpointResponder>>,
}

impl QueuedTrigger {
    pub(crate) fn new(
        barrier: CheckpointBarrier,
        requested: Instant,
        responder: StdArc<CheckpointResponder>,
    ) -> Self {
        QueuedTrigger {
            barrier,
            requested,
            decline_on_drop: Some(responder),
        }
    }

    /// The barrier and the request time, for the checkpoint that now answers for it.
    fn take(mut self) -> (CheckpointBarrier, Instant) {
        self.decline_on_drop = None;
        (self.barrier, self.requested)
    }
}

impl Drop for QueuedTrigger {
    fn drop(&mut self) {
        if let Some(responder) = self.decline_on_drop.take() {
            responder.decline(self.barrier.id, DeclineReason::NotRunning);
        }
    }
}

/// Work a helper thread would need the lock for (an async head's emitter and the task thread's
/// own completions) that the task thread does itself before it waits: for room, for a drain
/// (holding the lock), or for input (taking it), instead of handing the lock over.
pub(crate) trait BeforeWait<B>: Send + Sync {
    /// Under the lock: does the waiting work; whether there was any.
    fn work(&self, body: &mut B) -> Result<bool, OperatorError>;

    /// Whether some of the work waits for the task thread alone (no helper was woken for it),
    /// so that parking for input must do it first.
    fn waits_for_task_thread(&self) -> bool;
}

/// Everything the task's threads share.
pub(crate) struct Parts<B> {
    pub(crate) task: TaskParts,
    /// Cancels the source and wakes the task thread; cancelled when the task starts stopping.
    pub(crate) cancel: CancellationToken,
    pub(crate) lock: Arc<CheckpointLock<B>>,
    pub(crate) timers: StdArc<SystemProcessingTimeService>,
    calls: Sender<AsyncCall>,
    async_thread: Option<thread::JoinHandle<()>>,
    /// Aborted checkpoints whose alignment the gate, which only the task thread touches, must
    /// release.
    aborts: Receiver<u64>,
    /// What the task thread does before it waits (for room, for input, for a drain): an async
    /// head's task applies the emitter's inbox itself then, its own completions among them (see
    /// `async_wait/emitter.rs`). Set at most once, by the task's `main`.
    before_wait: OnceLock<Box<dyn BeforeWait<B>>>,
}

/// The handle's way in: the async-calls thread; and, for an abort, the task thread that owns
/// the gate.
struct LegacyControl {
    calls: Sender<AsyncCall>,
    /// Shared by the triggers in flight (see [`QueuedTrigger`]).
    responder: StdArc<CheckpointResponder>,
    aborts: Sender<u64>,
    task_thread: thread::Thread,
}

impl TaskControl for LegacyControl {
    fn trigger_checkpoint(&self, barrier: CheckpointBarrier, requested: Instant) {
        let trigger = QueuedTrigger::new(barrier, requested, StdArc::clone(&self.responder));
        // A failed send (the async-calls thread is gone: the task is over) hands the trigger
        // back, and dropping it declines it.
        let _ = self.calls.send(AsyncCall::Trigger(trigger));
    }

    fn notify_checkpoint(&self, id: u64, completed: bool) {
        if !completed {
            // The task thread releases the channels held for its alignment (it owns the gate):
            // queue the id, then unpark it (a thread not parked returns from its next park at
            // once, and re-reads the queue first).
            let _ = self.aborts.send(id);
            self.task_thread.unpark();
        }
        // Refused once the task stopped: nothing left to notify.
        let _ = self.calls.send(AsyncCall::Notify(id, completed));
    }
}

/// Builds a task's runtime and starts its threads: the timer thread, the async-calls thread,
/// and the task thread running `main` between opening and tearing down. `make_body` builds what
/// the lock owns around the kit's `ChainBody` it is handed an environment for.
pub(crate) fn spawn<B, M>(
    config: TaskConfig,
    mode: TriggerMode,
    fairness: Fairness,
    bounded_handover: bool,
    make_body: impl FnOnce(TaskEnv, &TaskServices) -> B,
    main: M,
) -> TaskHandle
where
    B: LockedBody,
    M: FnOnce(&Parts<B>) -> Result<(), TaskError> + Send + 'static,
{
    let setup = TaskSetup::new(config);
    let (task, restore, tracer) = (setup.parts, setup.restore, setup.tracer);
    let name = task.name.clone();
    let metrics = StdArc::clone(&task.metrics);
    let cancel = CancellationToken::new();

    let timer_config = TaskConfig::new(name.clone())
        .with_clock(setup.clock)
        .with_metrics(StdArc::clone(&metrics))
        .with_tracer(tracer.clone());
    let timer_thread = format!("{name}-timer");
    let on_timer_error = {
        let lifecycle = Arc::clone(&task.lifecycle);
        move |error: TaskError| {
            lifecycle.fail(timer_thread.clone(), error);
        }
    };
    let timers = StdArc::new(SystemProcessingTimeService::spawn(
        &timer_config,
        on_timer_error,
    ));
    let (calls, calls_rx) = unbounded();
    let (aborts_tx, aborts) = unbounded();
    {
        // Cancelled or failed: the source's token (its flag, sleeps, hooks and the lock's
        // condition), and the helpers a stopping task no longer needs (a cancelled task fires no
        // timer; its triggers and notices would be declined or dropped), so they end even if the
        // task thread is stuck in user code; the teardown joins them.
        let (cancel, timers, calls) = (cancel.clone(), StdArc::clone(&timers), calls.clone());
        task.lifecycle.set_stop_hook(move || {
            cancel.cancel();
            timers.stop();
            let _ = calls.send(AsyncCall::Stop);
        });
    }
    let events: StdArc<dyn EventSink> = StdArc::new(LegacyEvents {
        task: task.clone(),
        calls: calls.clone(),
    });
    let services = TaskServices::new(&name, timers.clone(), events);
    let body = make_body(
        TaskEnv::new(task.clone(), services.clone(), tracer.clone()),
        &services,
    );
    let lock = Arc::new(
        CheckpointLock::new(body, fairness)
            .with_bounded_handover(bounded_handover)
            .with_metrics(StdArc::clone(&metrics))
            .with_tracer(tracer),
    );
    timers.bind(Arc::clone(&lock), |body: &mut B, timer| {
        body.dispatch_timer(timer)
    });
    metrics.threads.add(3);

    let async_thread = spawn_async_calls(&task, &lock, calls_rx);
    let mut parts = Parts {
        task: task.clone(),
        cancel,
        lock,
        timers,
        calls: calls.clone(),
        async_thread: Some(async_thread),
        aborts,
        before_wait: OnceLock::new(),
    };
    let task_thread = spawn_named(name, move || {
        streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Task);
        run_task_thread(&mut parts, restore, main);
    });
    let control = LegacyControl {
        calls,
        responder: StdArc::new(task.responder.clone()),
        aborts: aborts_tx,
        task_thread: task_thread.thread().clone(),
    };
    TaskHandle::new(task, mode, StdArc::new(control), task_thread)
}

/// The task thread: restore and open under the lock, run `main`, record its failure, tear
/// down, and only then report the task ended.
fn run_task_thread<B, M>(
    parts: &mut Parts<B>,
    restore: Option<streamtask_core::state::TaskSnapshot>,
    main: M,
) where
    B: LockedBody,
    M: FnOnce(&Parts<B>) -> Result<(), TaskError>,
{
    let name = parts.task.name.clone();
    let lifecycle = Arc::clone(&parts.task.lifecycle);
    // A thread waiting on the lock's condition (an async head, a full output) must notice
    // cancellation: the token's flag changes outside the lock, so notify after it.
    let waker = Arc::clone(&parts.lock);
    let wake_on_cancel = parts.cancel.on_cancel(move || waker.wake_all());
    let result = catch_panic(|| -> Result<(), TaskError> {
        {
            // Open under the lock: nothing (timer, trigger, event) runs on the chain before
            // it is open.
            let mut body = parts.lock.lock();
            body.restore_and_open(restore.as_ref())?;
            if !lifecycle.start() {
                return Ok(()); // stopped while opening
            }
        }
        main(parts)
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            lifecycle.fail(name.clone(), error);
        }
        Err(panic) => {
            lifecycle.fail(name.clone(), TaskError::Panic(panic));
        }
    }
    parts.teardown();
    drop(wake_on_cancel);
    parts.task.metrics.live.enter(Activity::Ended);
    lifecycle.complete();
}

impl<B: LockedBody> Parts<B> {
    /// Every exit path: quiesce timers and close the chain under the lock, stop and join the
    /// timer and async-calls threads.
    fn teardown(&mut self) {
        {
            let mut body = self.lock.lock();
            self.timers.quiesce(&body);
            body.close();
        }
        // Not under the lock: the timer thread may be waiting for it.
        self.timers.shutdown();
        let _ = self.calls.send(AsyncCall::Stop);
        if let Some(handle) = self.async_thread.take() {
            // Its failures went through the lifecycle; joining only reaps it.
            let _ = handle.join();
        }
    }

    /// End of input, under the lock: the chain's input ends operator by operator (waiting on
    /// the lock's condition, which releases the lock, while an operator drains), then it
    /// finishes and the output ends; then timers are quiesced. Does nothing once the task is
    /// stopping.
    pub(crate) fn finish(&self) -> Result<(), TaskError> {
        let mut guard = self.lock.lock();
        guard.body().begin_end_of_input();
        loop {
            if !self.task.lifecycle.state().is_live() {
                return Ok(()); // stopped meanwhile
            }
            match guard.body().end_input_step()? {
                Drain::Finished => break,
                Drain::Waiting => {
                    if self.work_before_wait(&mut guard)? {
                        continue; // the drain may have moved on
                    }
                    let cancel = &self.cancel;
                    guard.wait_until(|b| b.body().accepts_input() || cancel.is_cancelled());
                }
            }
        }
        self.timers.quiesce(&guard);
        Ok(())
    }

    /// A barrier-triggered checkpoint on the task thread; a draining savepoint's drain first
    /// (see [`drain_for`](Self::drain_for)).
    pub(crate) fn checkpoint(&self, barrier: CheckpointBarrier, requested: Instant) {
        if let Err(error) = self.drain_for(barrier) {
            self.task.lifecycle.fail(&self.task.name, error);
            return;
        }
        perform_checkpoint(&self.task, &self.lock, barrier, requested, &self.task.name);
    }

    /// The drain before a draining savepoint's barrier (`ChainBody::drain_for`), waiting as
    /// [`finish`](Self::finish) does while an operator has work in flight (an async head's
    /// completions), so the savepoint's snapshot follows the last of them. Nothing for any
    /// other barrier.
    fn drain_for(&self, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        if !barrier.kind.drains() {
            return Ok(());
        }
        let mut guard = self.lock.lock();
        loop {
            if !self.task.lifecycle.state().is_live() || self.cancel.is_cancelled() {
                return Ok(()); // stopped meanwhile
            }
            match guard.body().drain_for(barrier)? {
                Drain::Finished => return Ok(()),
                Drain::Waiting => {
                    if self.work_before_wait(&mut guard)? {
                        continue; // the drain may have moved on
                    }
                    let cancel = &self.cancel;
                    guard.wait_until(|b| b.body().accepts_input() || cancel.is_cancelled());
                }
            }
        }
    }

    /// Takes the lock for an event that needs the chain to accept input: if it does not, does
    /// the waiting work first (an async head's completions, see [`BeforeWait`]); while it
    /// still does not, waits on the lock's condition (releasing the lock). `None` if the task
    /// was cancelled meanwhile.
    pub(crate) fn lock_with_room(&self) -> Result<Option<CheckpointGuard<'_, B>>, TaskError> {
        let mut guard = self.lock.lock();
        if guard.body().accepts_input() {
            return Ok(Some(guard));
        }
        self.work_before_wait(&mut guard)?;
        if !guard.body().accepts_input() {
            let cancel = &self.cancel;
            // Waiting for the chain is backpressure (`backpressured_micros`, as the mailbox's
            // backpressure suspensions; a full output channel adds its own in the writer).
            let waited = Instant::now();
            let live = &self.task.metrics.live;
            live.enter(Activity::Backpressured);
            guard.wait_until(|b| b.body().accepts_input() || cancel.is_cancelled());
            live.enter(Activity::Processing);
            self.task
                .metrics
                .backpressured_micros
                .add(micros_since(waited));
            if !guard.body().accepts_input() {
                return Ok(None);
            }
        }
        Ok(Some(guard))
    }

    /// Sets what the task thread does before each of its waits (once; a second call is a bug).
    pub(crate) fn set_before_wait(&self, hook: impl BeforeWait<B> + 'static) {
        let set = self.before_wait.set(Box::new(hook));
        debug_assert!(set.is_ok(), "before_wait is set once");
    }

    /// Under the lock, before a wait: the waiting work, done here (see [`BeforeWait`]).
    fn work_before_wait(&self, body: &mut B) -> Result<bool, OperatorError> {
        match self.before_wait.get() {
            Some(hook) => hook.work(body),
            None => Ok(false),
        }
    }

    /// Before the task thread parks for input: takes the lock for the waiting work, if there
    /// is a hook (a failure fails the task, as the helper's would).
    fn work_before_park(&self) {
        if let Some(hook) = self.before_wait.get()
            && hook.waits_for_task_thread()
        {
            run_locked(&self.task, &self.lock, &self.task.name, |body| {
                hook.work(body).map(drop)
            });
        }
    }
}

impl<B> fmt::Debug for Parts<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parts")
            .field("task", &self.task.name)
            .finish_non_exhaustive()
    }
}

/// A checkpoint under the lock (the kit declines it if the task is not running); a failure
/// fails the task.
fn perform_checkpoint<B: LockedBody>(
    task: &TaskParts,
    lock: &CheckpointLock<B>,
    barrier: CheckpointBarrier,
    requested: Instant,
    thread_name: &str,
) {
    let taken = lock.lock_for_trigger().checkpoint(barrier, requested);
    if let Err(error) = taken {
        task.lifecycle.fail(thread_name, error);
    }
}

/// Starts the task's async-calls thread on `calls` (see [`run_async_calls`]).
pub(crate) fn spawn_async_calls<B: LockedBody>(
    task: &TaskParts,
    lock: &Arc<CheckpointLock<B>>,
    calls: Receiver<AsyncCall>,
) -> thread::JoinHandle<()> {
    let task = task.clone();
    let lock = Arc::clone(lock);
    let thread_name = format!("{}-async-calls", task.name);
    spawn_named(thread_name.clone(), move || {
        streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::AsyncCalls);
        run_async_calls(&task, &lock, &calls, &thread_name);
    })
}

/// The "async calls" thread (Flink's single-thread executor per task): checkpoint triggers of
/// source tasks, completion and abort notices, and operator events, each under the lock.
fn run_async_calls<B: LockedBody>(
    task: &TaskParts,
    lock: &CheckpointLock<B>,
    calls: &Receiver<AsyncCall>,
    thread_name: &str,
) {
    while let Ok(call) = calls.recv() {
        match call {
            AsyncCall::Stop => {
                // What is queued behind the stop never runs: dropped here, a trigger among
                // them declines. (One sent later is dropped with the receiver, or handed back
                // by its failed send, and declines the same way.)
                while let Ok(late) = calls.try_recv() {
                    drop(late);
                }
                break;
            }
            AsyncCall::Trigger(trigger) => {
                let (barrier, requested) = trigger.take();
                perform_checkpoint(task, lock, barrier, requested, thread_name);
            }
            AsyncCall::Notify(id, completed) => {
                run_locked(task, lock, thread_name, |body| {
                    body.body().notify_checkpoint(id, completed)
                });
            }
            AsyncCall::Event(operator, event) => {
                run_locked(task, lock, thread_name, |body| {
                    body.body().dispatch_event(operator, event)
                });
            }
        }
    }
}

/// Runs `f` under the lock while the task is live (the kit's body drops what a finished or
/// closed chain must not get); a failure fails the task. Wakes the lock's waiters afterwards
/// (an event may have freed room an async head waits for).
pub(crate) fn run_locked<B: LockedBody>(
    task: &TaskParts,
    lock: &CheckpointLock<B>,
    thread_name: &str,
    f: impl FnOnce(&mut B) -> Result<(), OperatorError>,
) {
    let mut body = lock.lock();
    if !task.lifecycle.state().is_live() {
        return;
    }
    let result = catch_panic(|| f(&mut body));
    body.notify_all();
    drop(body);
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            task.lifecycle.fail(thread_name, e);
        }
        Err(panic) => {
            task.lifecycle.fail(thread_name, TaskError::Panic(panic));
        }
    }
}

/// The legacy model's [`EventSink`]: events go to the async-calls thread, which delivers each
/// under the checkpoint lock. Queueing (rather than locking on the sender's thread) is what
/// lets an operator send an event while its own task thread holds the non-reentrant lock.
struct LegacyEvents {
    task: TaskParts,
    calls: Sender<AsyncCall>,
}

impl EventSink for LegacyEvents {
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        if !self.task.lifecycle.state().is_live() {
            return Err(event);
        }
        match self.calls.send(AsyncCall::Event(operator, event)) {
            Ok(()) => Ok(()),
            Err(SendError(AsyncCall::Event(_, event))) => Err(event),
            Err(_) => unreachable!("an event send hands back the event it could not send"),
        }
    }
}

/// `while running && process_input()`: the task thread reads `gate` outside the lock (parked
/// while there is nothing), then takes the lock once per event to put it through the chain; a
/// record or watermark first waits (releasing the lock) until the chain accepts input, so a
/// barrier that comes next is snapshotted at once. Aligned checkpoints run right here, as
/// Flink's `getNextNonBlocked` did; end of input drains and finishes the chain.
///
/// A failure (an error or a panic in the chain) is recorded while the gate still holds the input
/// channels: dropping them first would close the upstream's output, whose "output channel is
/// closed" failure could then reach the executor first, and the cancel it sends would make this
/// task's own failure, the cause, a failure while cancelling (ignored).
pub(crate) fn process_input<G, C, W>(
    parts: &Parts<ChainBody<C, W>>,
    mut gate: G,
) -> Result<(), TaskError>
where
    G: TaskInput,
    G::Record: InputRecord<C>,
    C: streamtask_core::operator::TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let failed = match catch_panic(|| read_input(parts, &mut gate)) {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error),
        Err(panic) => Some(TaskError::Panic(panic)),
    };
    if let Some(error) = failed {
        parts.task.lifecycle.fail(parts.task.name.clone(), error);
    }
    drop(gate);
    Ok(())
}

fn read_input<G, C, W>(parts: &Parts<ChainBody<C, W>>, gate: &mut G) -> Result<(), TaskError>
where
    G: TaskInput,
    G::Record: InputRecord<C>,
    C: streamtask_core::operator::TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let reader = GateReader::new(&parts.cancel, &parts.aborts, &parts.task.metrics);
    parts.task.metrics.live.enter(Activity::Processing);
    loop {
        let event = match reader.next(gate, || parts.work_before_park()) {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()), // cancelled
            Err(closed) => {
                // An upstream that ended with a stop-with-savepoint: this task's own notice
                // ends it (the stop hook cancels the token).
                parts.lock.lock().input_closed(closed)?;
                parts.cancel.wait();
                return Ok(());
            }
        };
        let mut body = if event.needs_room() {
            match parts.lock_with_room()? {
                Some(body) => body,
                None => return Ok(()), // cancelled while waiting
            }
        } else {
            parts.lock.lock()
        };
        match body.apply(event)? {
            Applied::Done | Applied::Nothing => {}
            Applied::Barrier(barrier) => {
                drop(body);
                parts.checkpoint(barrier, Instant::now());
            }
            Applied::EndOfInput => {
                // A pending stop-with-savepoint holds the end of input until its notice (see
                // `ChainBody::may_end_input`): the notice runs under the lock and notifies its
                // condition; a completed savepoint's stop hook cancels the token.
                if !body.may_end_input() {
                    let cancel = &parts.cancel;
                    body.wait_until(|b| b.may_end_input() || cancel.is_cancelled());
                    if !body.may_end_input() {
                        return Ok(()); // stopped: completed savepoint, cancel or failure
                    }
                }
                drop(body);
                return parts.finish();
            }
        }
    }
}

/// Whole microseconds since `start`, saturating.
fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
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
/// `cancel` fired. Lost-wakeup free: release the alignments of aborted checkpoints; poll;
/// register the waker; poll again; check the token (whose cancel hook unparks this thread) and
/// the aborts (whose sender unparks it); park. An unpark before the park makes it return at once.
pub(crate) struct GateReader<'a> {
    waker: Waker,
    _unpark_on_cancel: crate::cancel::CancelHook,
    cancel: CancellationToken,
    aborts: &'a Receiver<u64>,
    /// Where the time parked for input goes (`idle_micros`, as the mailbox's idle suspensions).
    metrics: &'a TaskMetrics,
}

impl<'a> GateReader<'a> {
    /// A reader for the calling thread.
    pub(crate) fn new(
        cancel: &CancellationToken,
        aborts: &'a Receiver<u64>,
        metrics: &'a TaskMetrics,
    ) -> Self {
        let me = thread::current();
        let on_cancel = me.clone();
        GateReader {
            waker: Waker::from(StdArc::new(Unpark(me))),
            _unpark_on_cancel: cancel.on_cancel(move || on_cancel.unpark()),
            cancel: cancel.clone(),
            aborts,
            metrics,
        }
    }

    /// The next event, or `None` once cancelled; `before_park` runs before each park.
    pub(crate) fn next<G: TaskInput>(
        &self,
        gate: &mut G,
        before_park: impl Fn(),
    ) -> Result<Option<InputEvent<G::Record>>, InputClosed> {
        loop {
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
            while let Ok(id) = self.aborts.try_recv() {
                gate.abort_checkpoint(id);
            }
            let event = gate.poll_event()?;
            if !matches!(event, InputEvent::Nothing) {
                return Ok(Some(event));
            }
            gate.register_waker(&self.waker);
            let event = gate.poll_event()?;
            if !matches!(event, InputEvent::Nothing) {
                return Ok(Some(event));
            }
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
            if !self.aborts.is_empty() {
                continue;
            }
            before_park();
            // What the thread does shows in the task's live state; stored around a park only,
            // never per record.
            self.metrics.live.enter(Activity::Idle);
            // Clock reads only around a park, never per record.
            let parked = Instant::now();
            match gate.wake_at() {
                // An iteration head after its input ended: poll again at its deadline (Flink's
                // `poll(timeout)` on the feedback queue).
                Some(at) => thread::park_timeout(at.saturating_duration_since(parked)),
                None => thread::park(),
            }
            self.metrics.idle_micros.add(micros_since(parked));
            self.metrics.live.enter(Activity::Processing);
        }
    }
}

impl fmt::Debug for GateReader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateReader").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use streamtask_core::operator::{Emitted, Map};
    use streamtask_core::task::TaskReport;
    use streamtask_core::testing::HarnessServices;
    use streamtask_core::trace::Tracer;

    use super::*;

    /// A trigger that passed the handle's check while the stop hook (or the teardown) queued
    /// `Stop` ahead of it never runs; it is declined at once, not left to its timeout.
    #[test]
    fn a_trigger_queued_behind_stop_is_declined_as_not_running() {
        let (to_coordinator, reports) = crossbeam::channel::unbounded();
        let responder = CheckpointResponder::new("stopping", to_coordinator);
        let setup = TaskSetup::new(TaskConfig::new("stopping").with_responder(responder.clone()));
        let env = TaskEnv::new(
            setup.parts.clone(),
            HarnessServices::new("stopping").services,
            Tracer::off(),
        );
        let body = ChainBody::new(
            Map::new("identity", |x: u32| x),
            Vec::<Emitted<u32>>::new(),
            env,
        );
        let lock = Arc::new(CheckpointLock::new(body, Fairness::Eventual));
        let (calls, inbox) = unbounded();
        calls.send(AsyncCall::Stop).ok();
        let trigger = QueuedTrigger::new(
            CheckpointBarrier::new(7, 0),
            Instant::now(),
            StdArc::new(responder),
        );
        calls.send(AsyncCall::Trigger(trigger)).ok();
        let thread = spawn_async_calls(&setup.parts, &lock, inbox);
        thread
            .join()
            .expect("the async-calls thread ends at the stop");
        match reports.try_recv() {
            Ok(TaskReport::Declined {
                checkpoint, reason, ..
            }) => assert_eq!((checkpoint, reason), (7, DeclineReason::NotRunning)),
            other => panic!("expected a decline, got {other:?}"),
        }
        assert!(reports.try_recv().is_err(), "declined once");
    }
}
