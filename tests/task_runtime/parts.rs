//! The test's own parts, the same in every model: an event log that operators, sources and the
//! task output all write to (so one list shows the order of everything), a latch, a scripted
//! source (legacy `SourceFunction` and mailbox `SourceReader` over one script), a recording
//! operator with injectable faults, and the thread and error checks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use streamtask_core::operator::Emitted;
use streamtask_core::state::encode;
use streamtask_core::time::{Period, Timer, TimerHandle};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, operator::Context,
    operator::Operator, operator::Output, operator::TaskOutput, task::TaskError,
};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// A guard against hangs only: no test asserts on time.
pub(crate) const GUARD: Duration = Duration::from_secs(30);

/// Records at or above this value are "hot" filler: counted, not logged.
pub(crate) const HOT: u64 = 1 << 40;

/// One thing that happened in a task, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ev {
    Open(&'static str),
    Record(&'static str, u64),
    Prepare(&'static str, u64),
    Snapshot(&'static str, u64),
    Complete(&'static str, u64),
    Aborted(&'static str, u64),
    Timer(&'static str),
    /// A run of the operator's periodic timer, with the run's scheduled timestamp.
    Periodic(&'static str, i64),
    EndInput(&'static str),
    Finish(&'static str),
    Close(&'static str),
    /// The source's state was taken for a snapshot.
    SourceSnapshot,
    /// The reader got a checkpoint notice.
    SourceComplete(u64),
    SourceAborted(u64),
    /// The legacy source holds the checkpoint lock and blocks.
    SourceBlocked,
    /// User code (source or operator) is stuck and ignores cancellation.
    Stuck,
    /// The task emitted this.
    Out(Emitted<u64>),
}

/// The shared event log.
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<LogInner>);

#[derive(Default)]
pub(crate) struct LogInner {
    events: Mutex<Vec<Ev>>,
    changed: Condvar,
    hot: AtomicU64,
}

impl Log {
    /// The events, also after a test thread panicked while it held them (so the task's own
    /// threads never panic on a poisoned log).
    fn events(&self) -> MutexGuard<'_, Vec<Ev>> {
        self.0.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, ev: Ev) {
        self.events().push(ev);
        self.0.changed.notify_all();
    }

    fn hot(&self) {
        // Relaxed: a counter read only by `wait_hot`, which takes the events lock afterwards.
        let n = self.0.hot.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(64) {
            let _guard = self.events();
            self.0.changed.notify_all();
        }
    }

    pub(crate) fn all(&self) -> Vec<Ev> {
        self.events().clone()
    }

    /// Waits (hang guard only) until `done` holds for the log; returns the log.
    pub(crate) fn wait_for(&self, what: &str, done: impl Fn(&[Ev]) -> bool) -> Vec<Ev> {
        let deadline = Instant::now() + GUARD;
        let mut events = self.events();
        while !done(&events) {
            let now = Instant::now();
            if now >= deadline {
                let seen = events.clone();
                drop(events); // unpoisoned: the task's threads keep logging
                panic!("waited for {what}; the log is {seen:?}");
            }
            events = self
                .0
                .changed
                .wait_timeout(events, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        events.clone()
    }

    /// Waits until `ev` was logged.
    pub(crate) fn wait_ev(&self, ev: Ev) -> Vec<Ev> {
        self.wait_for(&format!("{ev:?}"), |evs| evs.contains(&ev))
    }

    /// Waits until `n` hot records left the task.
    pub(crate) fn wait_hot(&self, n: u64) {
        self.wait_for(&format!("{n} hot records"), |_| {
            self.0.hot.load(Ordering::Relaxed) >= n
        });
    }
}

/// Where `ev` first appears in `events`; fails naming it if it never does.
pub(crate) fn pos(events: &[Ev], ev: &Ev) -> usize {
    events
        .iter()
        .position(|e| e == ev)
        .unwrap_or_else(|| panic!("{ev:?} is not in {events:?}"))
}

/// The values of the records the task emitted.
pub(crate) fn out_values(events: &[Ev]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Ev::Out(Emitted::Record(r)) => Some(r.value),
            _ => None,
        })
        .collect()
}

/// A one-shot gate user code waits on until the test opens it.
#[derive(Clone, Default)]
pub(crate) struct Latch(Arc<(Mutex<bool>, Condvar)>);

impl Latch {
    pub(crate) fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }

    /// Waits until opened. User code calling this ignores cancellation on purpose; every test
    /// opens its latches when it ends, also when it fails (see the adapter's `Drop`).
    pub(crate) fn wait(&self) {
        let mut open = self.0.0.lock().unwrap();
        while !*open {
            open = self.0.1.wait(open).unwrap();
        }
    }
}

// ---- the task output ---------------------------------------------------------------------------

/// The task's output: everything it emits goes to the log.
#[derive(Clone)]
pub(crate) struct Recorder(pub Log);

impl Recorder {
    fn push(&self, e: Emitted<u64>) {
        match e {
            Emitted::Record(r) if r.value >= HOT => self.0.hot(),
            e => self.0.push(Ev::Out(e)),
        }
    }
}

impl Output<u64> for Recorder {
    fn collect(&mut self, record: StreamRecord<u64>) -> Result<(), OperatorError> {
        self.push(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.push(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(Emitted::Status(status));
        Ok(())
    }
}

impl TaskOutput<u64> for Recorder {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.push(Emitted::Barrier(barrier));
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.push(Emitted::EndOfInput);
        Ok(())
    }
}

// ---- the recording operator ---------------------------------------------------------------------

/// What a processing-time timer callback does.
#[derive(Clone, Default)]
pub(crate) enum TimerAct {
    #[default]
    Log,
    Fail,
    /// Blocks until the latch opens (a callback running when the task is cancelled).
    Block(Latch),
}

/// Faults a [`Probe`] injects; set on the tail operator `p1` only.
#[derive(Clone, Default)]
pub(crate) struct Faults {
    /// `process_element` of this value fails.
    pub(crate) fail_on: Option<u64>,
    /// `process_element` of this value blocks until the latch opens, ignoring cancellation.
    pub(crate) stuck_on: Option<(u64, Latch)>,
    /// `snapshot_state` fails.
    pub(crate) fail_snapshot: bool,
    /// `snapshot_state` blocks until the latch opens (a checkpoint in progress).
    pub(crate) block_snapshot: Option<Latch>,
    /// `open` registers a processing-time timer for this time.
    pub(crate) timer_at: Option<i64>,
    /// What the timer does when it fires (the periodic one too).
    pub(crate) timer: TimerAct,
    /// `open` registers a periodic timer: its first timestamp and its period.
    pub(crate) periodic: Option<(i64, Period)>,
    /// `process_element` of this value cancels the periodic timer.
    pub(crate) cancel_periodic_on: Option<u64>,
}

/// The tag of a [`Probe`]'s periodic timer.
const PERIODIC_TAG: u64 = 7;

/// An operator that logs every call, forwards records, and keeps the number of records it
/// processed as its state.
pub(crate) struct Probe {
    name: &'static str,
    log: Log,
    faults: Faults,
    processed: u64,
    periodic: Option<TimerHandle>,
}

impl Probe {
    pub(crate) fn new(name: &'static str, log: &Log, faults: Faults) -> Self {
        Probe {
            name,
            log: log.clone(),
            faults,
            processed: 0,
            periodic: None,
        }
    }
}

impl Operator for Probe {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        self.name
    }

    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        if let Some(at) = self.faults.timer_at {
            ctx.register_timer(at, 0)?;
        }
        if let Some((first, period)) = self.faults.periodic {
            self.periodic = Some(ctx.register_periodic(first, period, PERIODIC_TAG)?);
        }
        // Last, so a test that saw it may move the clock past what `open` registered.
        self.log.push(Ev::Open(self.name));
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        // Before the record is logged, so a test that saw it knows the cancel is done.
        if self.faults.cancel_periodic_on == Some(record.value)
            && let Some(handle) = self.periodic.take()
        {
            ctx.cancel_timer(handle);
        }
        if record.value < HOT {
            self.log.push(Ev::Record(self.name, record.value));
        }
        if self.faults.fail_on == Some(record.value) {
            return Err(OperatorError::user(self.name, "failed on purpose"));
        }
        if let Some((value, latch)) = &self.faults.stuck_on
            && *value == record.value
        {
            self.log.push(Ev::Stuck);
            latch.wait();
        }
        self.processed += 1;
        ctx.collect(record)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if timer.tag == PERIODIC_TAG {
            self.log.push(Ev::Periodic(self.name, timer.timestamp));
        } else {
            self.log.push(Ev::Timer(self.name));
        }
        match &self.faults.timer {
            TimerAct::Log => Ok(()),
            TimerAct::Fail => Err(OperatorError::user(self.name, "timer failed on purpose")),
            TimerAct::Block(latch) => {
                latch.wait();
                Ok(())
            }
        }
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.log.push(Ev::Prepare(self.name, checkpoint_id));
        Ok(())
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.log.push(Ev::Snapshot(self.name, checkpoint_id));
        if let Some(latch) = &self.faults.block_snapshot {
            latch.wait();
        }
        if self.faults.fail_snapshot {
            return Err(OperatorError::user(self.name, "snapshot failed on purpose"));
        }
        let bytes = encode(&self.processed).map_err(|e| OperatorError::state(self.name, e))?;
        Ok(Some(bytes))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.log.push(Ev::Complete(self.name, checkpoint_id));
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.log.push(Ev::Aborted(self.name, checkpoint_id));
        Ok(())
    }

    fn end_input(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.log.push(Ev::EndInput(self.name));
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.log.push(Ev::Finish(self.name));
        Ok(())
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.log.push(Ev::Close(self.name));
        Ok(())
    }
}

// ---- the scripted source -----------------------------------------------------------------------

/// What the source does next.
pub(crate) enum Cmd {
    Emit(u64),
    End,
    Fail,
    Panic,
    /// Emit hot records until cancelled.
    Hot,
    /// Take the checkpoint lock and block holding it until cancelled (legacy sources only).
    BlockHoldingLock,
    /// Block until the latch opens, ignoring cancellation.
    Stuck(Latch),
}

#[derive(Default)]
struct ScriptState {
    cmds: VecDeque<Cmd>,
    waker: Option<Waker>,
    cancelled: bool,
}

/// The commands the test gives the source; a legacy source blocks on it (reached by its
/// cancellation hook), a reader polls it and registers a waker.
#[derive(Clone, Default)]
pub(crate) struct Script(Arc<(Mutex<ScriptState>, Condvar)>);

impl Script {
    pub(crate) fn push(&self, cmd: Cmd) {
        let waker = {
            let mut state = self.0.0.lock().unwrap();
            state.cmds.push_back(cmd);
            state.waker.take()
        };
        self.0.1.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(crate) fn cancel(&self) {
        self.0.0.lock().unwrap().cancelled = true;
        self.0.1.notify_all();
    }

    fn next_blocking(&self) -> Option<Cmd> {
        let mut state = self.0.0.lock().unwrap();
        loop {
            if let Some(cmd) = state.cmds.pop_front() {
                return Some(cmd);
            }
            if state.cancelled {
                return None;
            }
            state = self.0.1.wait(state).unwrap();
        }
    }

    fn wait_cancelled(&self) {
        let mut state = self.0.0.lock().unwrap();
        while !state.cancelled {
            state = self.0.1.wait(state).unwrap();
        }
    }

    fn try_next(&self) -> Option<Cmd> {
        self.0.0.lock().unwrap().cmds.pop_front()
    }

    fn register(&self, waker: &Waker) {
        let mut state = self.0.0.lock().unwrap();
        if state.cmds.is_empty() {
            state.waker = Some(waker.clone());
        } else {
            drop(state);
            waker.wake_by_ref();
        }
    }
}

/// A legacy source's checkpointed state: how many records it emitted. Serializing it (which
/// the task does only to snapshot it) logs [`Ev::SourceSnapshot`], so the log shows when the
/// source state was taken.
#[derive(Default)]
pub(crate) struct SourceState {
    pub(crate) emitted: u64,
    log: Option<Log>,
}

impl Serialize for SourceState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Some(log) = &self.log {
            log.push(Ev::SourceSnapshot);
        }
        self.emitted.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SourceState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(SourceState {
            emitted: u64::deserialize(deserializer)?,
            log: None,
        })
    }
}

/// A legacy `SourceFunction` playing the script.
pub(crate) struct ScriptedSource {
    pub(crate) script: Script,
    pub(crate) log: Log,
}

impl SourceFunction for ScriptedSource {
    type Out = u64;
    type State = SourceState;

    fn name(&self) -> &str {
        "src"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, SourceState>) -> Result<(), OperatorError> {
        let script = self.script.clone();
        let _hook = ctx.on_cancel(move || script.cancel());
        ctx.lock().state_mut().log = Some(self.log.clone());
        while let Some(cmd) = self.script.next_blocking() {
            match cmd {
                Cmd::Emit(value) => {
                    let mut section = ctx.lock();
                    section.state_mut().emitted += 1;
                    section.collect(value)?;
                }
                Cmd::End => return Ok(()),
                Cmd::Fail => return Err(OperatorError::user("src", "the source failed")),
                Cmd::Panic => panic!("the source panicked on purpose"),
                Cmd::Hot => {
                    while !ctx.is_cancelled() {
                        let mut section = ctx.lock();
                        section.state_mut().emitted += 1;
                        section.collect(HOT)?;
                    }
                    return Ok(());
                }
                Cmd::BlockHoldingLock => {
                    let section = ctx.lock();
                    self.log.push(Ev::SourceBlocked);
                    // A blocking call under the lock; the cancellation hook interrupts it.
                    self.script.wait_cancelled();
                    drop(section);
                    return Ok(());
                }
                Cmd::Stuck(latch) => {
                    self.log.push(Ev::Stuck);
                    latch.wait();
                    return Ok(());
                }
            }
        }
        Ok(()) // cancelled
    }
}

/// A mailbox `SourceReader` playing the script.
pub(crate) struct ScriptedReader {
    pub(crate) script: Script,
    pub(crate) log: Log,
    pub(crate) emitted: u64,
    pub(crate) hot: bool,
}

impl SourceReader<u64> for ScriptedReader {
    fn name(&self) -> &str {
        "src"
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        if self.hot {
            self.emitted += 1;
            output.collect(HOT)?;
            return Ok(InputStatus::MoreAvailable);
        }
        match self.script.try_next() {
            None => Ok(InputStatus::NothingAvailable),
            Some(Cmd::Emit(value)) => {
                self.emitted += 1;
                output.collect(value)?;
                Ok(InputStatus::MoreAvailable)
            }
            Some(Cmd::End) => Ok(InputStatus::EndOfInput),
            Some(Cmd::Fail) => Err(OperatorError::user("src", "the source failed")),
            Some(Cmd::Panic) => panic!("the source panicked on purpose"),
            Some(Cmd::Hot) => {
                self.hot = true;
                Ok(InputStatus::MoreAvailable)
            }
            Some(Cmd::BlockHoldingLock) => unreachable!("a reader holds no lock"),
            Some(Cmd::Stuck(latch)) => {
                self.log.push(Ev::Stuck);
                latch.wait();
                Ok(InputStatus::MoreAvailable)
            }
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.script.register(waker);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        self.log.push(Ev::SourceSnapshot);
        encode(&self.emitted).map_err(|e| OperatorError::state("src", e))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.log.push(Ev::SourceComplete(checkpoint_id));
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.log.push(Ev::SourceAborted(checkpoint_id));
        Ok(())
    }
}

// ---- threads and errors ------------------------------------------------------------------------

/// The names of this process's threads that start with `prefix` (a task's threads are named
/// after the task; the kernel keeps 15 bytes of a name).
pub(crate) fn threads_named(prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let Ok(entry) = entry else { continue };
        // A thread may end between the listing and the read: skip it.
        if let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) {
            let comm = comm.trim_end().to_string();
            if comm.starts_with(prefix) {
                names.push(comm);
            }
        }
    }
    names
}

/// Whether `error` is, or was caused by, the operator error `pick` accepts. Walks the typed
/// cause chain (`Error::source`); never reads a message.
pub(crate) fn caused_by(error: &TaskError, pick: impl Fn(&OperatorError) -> bool) -> bool {
    if let TaskError::Operator(op) = error
        && pick(op)
    {
        return true;
    }
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        if let Some(op) = e.downcast_ref::<OperatorError>()
            && pick(op)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A user error of operator `name`.
pub(crate) fn user_error_of(name: &'static str) -> impl Fn(&OperatorError) -> bool {
    move |e| matches!(e, OperatorError::User { operator, .. } if operator == name)
}
