//! Readers, operators and outputs the task tests share.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender};
use streamtask_core::operator::{Context, Emitted, EventSender, EventSink, OperatorEvent};
use streamtask_core::state::{decode, encode};
use streamtask_core::task::{CheckpointResponder, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, operator::Operator,
    operator::Output, operator::TaskOutput, time::Timer,
};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// Generous: only a guard against hangs, never a timing claim.
pub const GUARD: Duration = Duration::from_secs(30);

/// A shared log of what happened, in order.
pub type Log = Arc<Mutex<Vec<String>>>;

pub fn log() -> Log {
    Arc::default()
}

pub fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// A responder whose reports the test reads.
pub fn responder(task: &str) -> (CheckpointResponder, Receiver<TaskReport>) {
    let (tx, rx) = crossbeam::channel::unbounded();
    (CheckpointResponder::new(task, tx), rx)
}

/// Polls `condition` until it holds (or the guard time passes).
pub fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within the guard time"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn next_report(reports: &Receiver<TaskReport>) -> TaskReport {
    reports
        .recv_timeout(GUARD)
        .expect("a checkpoint report within the guard time")
}

// ---------------------------------------------------------------------------------------------

struct OutputState<T> {
    emitted: Vec<Emitted<T>>,
    available: bool,
    waker: Option<Waker>,
}

/// A task output the test can read while the task owns it, and switch unavailable.
pub struct SharedOutput<T> {
    state: Arc<(Mutex<OutputState<T>>, Condvar)>,
}

impl<T> Clone for SharedOutput<T> {
    fn clone(&self) -> Self {
        SharedOutput {
            state: Arc::clone(&self.state),
        }
    }
}

impl<T: Clone> SharedOutput<T> {
    pub fn new() -> Self {
        SharedOutput {
            state: Arc::new((
                Mutex::new(OutputState {
                    emitted: Vec::new(),
                    available: true,
                    waker: None,
                }),
                Condvar::new(),
            )),
        }
    }

    pub fn emitted(&self) -> Vec<Emitted<T>> {
        self.state.0.lock().unwrap().emitted.clone()
    }

    pub fn values(&self) -> Vec<T> {
        self.emitted()
            .into_iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect()
    }

    /// Makes the output (un)available; becoming available wakes the registered waker.
    pub fn set_available(&self, available: bool) {
        let waker = {
            let mut state = self.state.0.lock().unwrap();
            state.available = available;
            if available { state.waker.take() } else { None }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Waits until `done` holds for what was emitted (or the guard time passes).
    pub fn wait_until(&self, done: impl Fn(&[Emitted<T>]) -> bool) {
        let deadline = Instant::now() + GUARD;
        let mut state = self.state.0.lock().unwrap();
        while !done(&state.emitted) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "output condition not reached within the guard time"
            );
            state = self.state.1.wait_timeout(state, deadline - now).unwrap().0;
        }
    }

    /// Waits until the task registered an availability waker (it found the output full).
    pub fn wait_for_waker(&self) {
        let deadline = Instant::now() + GUARD;
        let mut state = self.state.0.lock().unwrap();
        while state.waker.is_none() {
            let now = Instant::now();
            assert!(
                now < deadline,
                "no availability waker within the guard time"
            );
            state = self.state.1.wait_timeout(state, deadline - now).unwrap().0;
        }
    }

    fn push(&mut self, e: Emitted<T>) -> Result<(), OperatorError> {
        self.state.0.lock().unwrap().emitted.push(e);
        self.state.1.notify_all();
        Ok(())
    }
}

impl<T: Clone> Output<T> for SharedOutput<T> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.push(Emitted::Record(record))
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.push(Emitted::Watermark(watermark))
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(Emitted::Status(status))
    }
}

impl<T: Clone + Send> TaskOutput<T> for SharedOutput<T> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.push(Emitted::Barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.push(Emitted::EndOfInput)
    }
    fn is_available(&self) -> bool {
        self.state.0.lock().unwrap().available
    }
    fn register_availability_waker(&self, waker: &Waker) {
        let mut state = self.state.0.lock().unwrap();
        if state.available {
            waker.wake_by_ref();
        } else {
            state.waker = Some(waker.clone());
            self.state.1.notify_all();
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Emits `next..end`, one per poll; its state is the next value.
pub struct CountingReader {
    pub next: u64,
    pub end: u64,
    pub log: Log,
}

impl CountingReader {
    pub fn new(end: u64, log: &Log) -> Self {
        CountingReader {
            next: 0,
            end,
            log: Arc::clone(log),
        }
    }
}

impl SourceReader<u64> for CountingReader {
    fn name(&self) -> &str {
        "counting"
    }
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("counting", e))?;
        }
        Ok(())
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next >= self.end {
            return Ok(InputStatus::EndOfInput);
        }
        output.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("reader snapshot {checkpoint_id} at {}", self.next));
        encode(&self.next).map_err(|e| OperatorError::state("counting", e))
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("reader complete {id}"));
        Ok(())
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("reader aborted {id}"));
        Ok(())
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        self.log.lock().unwrap().push("reader close".into());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

/// What a test feeds a [`FeedReader`].
pub enum Feed<T> {
    Record(T),
    Timestamped(T, i64),
    Watermark(i64),
    Idle,
    End,
    Fail(&'static str),
    Panic(&'static str),
}

/// A reader fed by the test through a [`Feeder`]; `NothingAvailable` while nothing is fed.
pub struct FeedReader<T> {
    rx: Receiver<Feed<T>>,
    waker: Arc<Mutex<Option<Waker>>>,
    pub log: Log,
}

/// Feeds a [`FeedReader`] and wakes it, as an I/O thread would.
pub struct Feeder<T> {
    tx: Sender<Feed<T>>,
    waker: Arc<Mutex<Option<Waker>>>,
}

pub fn feed<T>(log: &Log) -> (Feeder<T>, FeedReader<T>) {
    let (tx, rx) = crossbeam::channel::unbounded();
    let waker = Arc::new(Mutex::new(None));
    (
        Feeder {
            tx,
            waker: Arc::clone(&waker),
        },
        FeedReader {
            rx,
            waker,
            log: Arc::clone(log),
        },
    )
}

impl<T> Feeder<T> {
    pub fn send(&self, feed: Feed<T>) {
        self.tx.send(feed).unwrap();
        // After the send: a waker registered before it is woken here; one registered after it
        // sees the data itself (see `register_waker`).
        let waker = self.waker.lock().unwrap().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Waits until the reader registered a waker (the task went idle).
    pub fn wait_until_idle(&self) {
        let deadline = Instant::now() + GUARD;
        while self.waker.lock().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the task never went idle");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl<T: Send> SourceReader<T> for FeedReader<T> {
    fn name(&self) -> &str {
        "feed"
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, T>,
    ) -> Result<InputStatus, OperatorError> {
        match self.rx.try_recv() {
            Ok(Feed::Record(v)) => output.collect(v)?,
            Ok(Feed::Timestamped(v, ts)) => output.collect_with_timestamp(v, ts)?,
            Ok(Feed::Watermark(ts)) => output.emit_watermark(Watermark(ts))?,
            Ok(Feed::Idle) => output.mark_idle()?,
            Ok(Feed::End) => return Ok(InputStatus::EndOfInput),
            Ok(Feed::Fail(message)) => return Err(OperatorError::user("feed", message)),
            Ok(Feed::Panic(message)) => panic!("{message}"),
            Err(_) => return Ok(InputStatus::NothingAvailable),
        }
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        *self.waker.lock().unwrap() = Some(waker.clone());
        // Data that arrived between poll_next and now: wake at once (the lost-wakeup window).
        if !self.rx.is_empty()
            && let Some(waker) = self.waker.lock().unwrap().take()
        {
            waker.wake();
        }
    }
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("feed snapshot {checkpoint_id}"));
        Ok(Vec::new())
    }
}

// ---------------------------------------------------------------------------------------------

/// Passes records through, logs its lifecycle, timers and events; timers and events emit
/// `1000 + tag` and the event's `u64` payload. Registers `timers` (timestamps) on open.
pub struct Probe {
    pub name: &'static str,
    pub log: Log,
    pub timers: Vec<i64>,
    pub panic_on_timer: bool,
    pub seen: u64,
}

impl Probe {
    pub fn new(name: &'static str, log: &Log) -> Self {
        Probe {
            name,
            log: Arc::clone(log),
            timers: Vec::new(),
            panic_on_timer: false,
            seen: 0,
        }
    }

    pub fn with_timers(mut self, timers: &[i64]) -> Self {
        self.timers = timers.to_vec();
        self
    }

    fn record(&self, what: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}: {what}", self.name));
    }
}

impl Operator for Probe {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        self.name
    }
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.seen = decode(bytes).map_err(|e| OperatorError::state(self.name, e))?;
        }
        self.record(format!("init seen={}", self.seen));
        Ok(())
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.record(format!(
            "open on {}",
            std::thread::current().name().unwrap_or("?")
        ));
        for (tag, &ts) in self.timers.iter().enumerate() {
            ctx.register_timer(ts, tag as u64)?;
        }
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen += 1;
        ctx.collect(record)
    }
    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.record(format!(
            "timer {} at {} on {}",
            timer.tag,
            timer.timestamp,
            std::thread::current().name().unwrap_or("?")
        ));
        if self.panic_on_timer {
            panic!("timer callback exploded");
        }
        ctx.collect(StreamRecord::new(1000 + timer.tag))
    }
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        let value = *event
            .downcast::<u64>()
            .map_err(|_| OperatorError::user(self.name, "events must be u64"))?;
        if value == u64::MAX {
            panic!("event callback exploded");
        }
        self.record(format!("event {value}"));
        ctx.collect(StreamRecord::new(value))
    }
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.record(format!("snapshot {checkpoint_id} seen={}", self.seen));
        Ok(Some(
            encode(&self.seen).map_err(|e| OperatorError::state(self.name, e))?,
        ))
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.record(format!("complete {id}"));
        Ok(())
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.record(format!("aborted {id}"));
        Ok(())
    }
    fn end_input(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.record("end_input".into());
        Ok(())
    }
    fn finish(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.record("finish".into());
        Ok(())
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        self.record("close".into());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

/// A request an [`AsyncLike`] operator sends to its "client"; complete it with
/// `request.sender.send(request.value)`.
pub struct Request {
    pub value: u64,
    pub sender: EventSender,
}

impl Request {
    pub fn complete(self) {
        self.sender.send(self.value).unwrap();
    }
}

/// Shaped like an async I/O operator: each record becomes a request to an outside client; at
/// most `capacity` are in flight, after which it accepts no input (soft backpressure) until a
/// completion event arrives. Completions emit `value * 10`. After `end_input` it accepts input
/// only once nothing is in flight, so the task waits for the drain. Its state is the in-flight
/// values.
pub struct AsyncLike {
    pub capacity: usize,
    pub in_flight: VecDeque<u64>,
    pub requests: Sender<Request>,
    pub sender: Option<EventSender>,
    pub ended: bool,
    pub log: Log,
}

impl AsyncLike {
    pub fn new(capacity: usize, log: &Log) -> (Self, Receiver<Request>) {
        let (tx, rx) = crossbeam::channel::unbounded();
        (
            AsyncLike {
                capacity,
                in_flight: VecDeque::new(),
                requests: tx,
                sender: None,
                ended: false,
                log: Arc::clone(log),
            },
            rx,
        )
    }
}

impl Operator for AsyncLike {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "async-like"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.sender = Some(ctx.event_sender());
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        assert!(
            self.in_flight.len() < self.capacity,
            "the task fed an operator that accepts no input"
        );
        self.in_flight.push_back(record.value);
        let sender = self.sender.clone().expect("opened");
        let _ = self.requests.send(Request {
            value: record.value,
            sender,
        });
        Ok(())
    }
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        let value = *event.downcast::<u64>().expect("u64 completions");
        self.in_flight.retain(|v| *v != value);
        ctx.collect(StreamRecord::new(value * 10))
    }
    fn accepts_input(&self) -> bool {
        if self.ended {
            self.in_flight.is_empty()
        } else {
            self.in_flight.len() < self.capacity
        }
    }
    fn waits_for_own_events(&self) -> bool {
        true
    }
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        let in_flight: Vec<u64> = self.in_flight.iter().copied().collect();
        self.log.lock().unwrap().push(format!(
            "async snapshot {checkpoint_id} in flight {in_flight:?}"
        ));
        Ok(Some(encode(&in_flight).unwrap()))
    }
    fn end_input(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.ended = true;
        self.log.lock().unwrap().push(format!(
            "async end_input with {} in flight",
            self.in_flight.len()
        ));
        Ok(())
    }
    fn finish(&mut self, _ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        self.log.lock().unwrap().push(format!(
            "async finish with {} in flight",
            self.in_flight.len()
        ));
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

/// What an [`Exposing`] operator hands the test: its own sender and the task's event sink.
pub type Exposed = (EventSender, Arc<dyn EventSink>);

/// Hands its [`EventSender`] and the task's event sink to the test on open; emits each `u64`
/// event it gets, logging the thread it ran on; panics on `u64::MAX`.
pub struct Exposing {
    pub senders: Sender<Exposed>,
    pub log: Log,
}

impl Exposing {
    pub fn new(log: &Log) -> (Self, Receiver<Exposed>) {
        let (tx, rx) = crossbeam::channel::unbounded();
        (
            Exposing {
                senders: tx,
                log: Arc::clone(log),
            },
            rx,
        )
    }
}

impl Operator for Exposing {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "exposing"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        let sink = Arc::clone(ctx.services().events());
        self.senders.send((ctx.event_sender(), sink)).unwrap();
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        let value = *event.downcast::<u64>().expect("u64 events");
        if value == u64::MAX {
            panic!("event callback exploded");
        }
        self.log.lock().unwrap().push(format!(
            "event {value} for operator {} on {}",
            ctx.operator_index(),
            std::thread::current().name().unwrap_or("?")
        ));
        ctx.collect(StreamRecord::new(value))
    }
}
