//! Helpers shared by the bridge's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, unbounded};
use streamtask_core::operator::{Emitted, Output, TaskOutput};
use streamtask_core::task::{CheckpointResponder, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark};
use streamtask_legacy::{SourceContext, SourceFunction};

/// A hang guard only: no test asserts on time.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// A task output the test can read while the task runs.
#[derive(Debug)]
pub struct SharedOutput<T>(pub Arc<Mutex<Vec<Emitted<T>>>>);

impl<T> Clone for SharedOutput<T> {
    fn clone(&self) -> Self {
        SharedOutput(Arc::clone(&self.0))
    }
}

impl<T> SharedOutput<T> {
    pub fn new() -> Self {
        SharedOutput(Arc::new(Mutex::new(Vec::new())))
    }

    pub fn snapshot(&self) -> Vec<Emitted<T>>
    where
        T: Clone,
    {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Waits (hang guard only) until `done` holds for what was emitted so far.
    pub fn wait_for(&self, mut done: impl FnMut(&[Emitted<T>]) -> bool) {
        let deadline = Instant::now() + HANG_GUARD;
        while !done(&self.0.lock().unwrap()) {
            assert!(
                Instant::now() < deadline,
                "hang guard: condition never held"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl<T> Output<T> for SharedOutput<T> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Status(status));
        Ok(())
    }
}

impl<T: Send> TaskOutput<T> for SharedOutput<T> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Barrier(barrier));
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::EndOfInput);
        Ok(())
    }
}

/// A responder whose reports the test receives.
pub fn responder(task: &str) -> (CheckpointResponder, Receiver<TaskReport>) {
    let (tx, rx) = unbounded();
    (CheckpointResponder::new(task, tx), rx)
}

/// The record values in `emitted`.
pub fn values<T: Clone>(emitted: &[Emitted<T>]) -> Vec<T> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value.clone()),
            _ => None,
        })
        .collect()
}

/// Record values emitted before the barrier of checkpoint `id`.
pub fn values_before_barrier<T: Clone>(emitted: &[Emitted<T>], id: u64) -> Vec<T> {
    let end = emitted
        .iter()
        .position(|e| matches!(e, Emitted::Barrier(b) if b.id == id))
        .expect("the barrier was emitted");
    values(&emitted[..end])
}

/// Counts from its state up to `limit` (exclusive), one locked section per record that emits
/// the number and advances the state: the canonical checkpointed legacy source. `limit: None`
/// counts until cancelled.
#[derive(Debug, Clone)]
pub struct Count {
    pub limit: Option<u64>,
}

impl Count {
    pub fn to(limit: u64) -> Self {
        Count { limit: Some(limit) }
    }

    pub fn forever() -> Self {
        Count { limit: None }
    }
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if Some(n) == self.limit {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Receives a report (hang guard only).
pub fn report(reports: &Receiver<TaskReport>) -> TaskReport {
    reports
        .recv_timeout(HANG_GUARD)
        .expect("hang guard: no checkpoint report")
}

/// What a [`Probe`] saw, in order, with the name of the thread it saw it on.
pub type ProbeLog = Arc<Mutex<Vec<(String, String)>>>;

/// A pass-through operator that logs its lifecycle calls, timers, events and notices (with the
/// thread each ran on), registers a timer at `timer_at` when it opens, turns a timer into the
/// record `1_000_000 + tag` and an event `u64` into that record, and fails a notice that
/// reaches it after `close` (FLINK-16383).
pub struct Probe {
    pub log: ProbeLog,
    pub timer_at: Option<i64>,
    pub sender: Arc<Mutex<Option<streamtask_core::operator::EventSender>>>,
    closed: bool,
}

impl Probe {
    pub fn new(log: &ProbeLog) -> Self {
        Probe {
            log: Arc::clone(log),
            timer_at: None,
            sender: Arc::new(Mutex::new(None)),
            closed: false,
        }
    }

    fn note(&self, what: String) {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.log.lock().unwrap().push((what, thread));
    }
}

/// The entries of `log` whose text starts with `prefix`.
pub fn logged(log: &ProbeLog, prefix: &str) -> Vec<(String, String)> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(what, _)| what.starts_with(prefix))
        .cloned()
        .collect()
}

impl streamtask_core::operator::Operator for Probe {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "probe"
    }

    fn open(
        &mut self,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.note("open".into());
        *self.sender.lock().unwrap() = Some(ctx.event_sender());
        if let Some(at) = self.timer_at {
            ctx.register_timer(at, 7)?;
        }
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }

    fn on_processing_time(
        &mut self,
        timer: streamtask_core::time::Timer,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.note(format!("timer {}", timer.tag));
        ctx.collect(StreamRecord::new(1_000_000 + timer.tag))
    }

    fn on_event(
        &mut self,
        event: streamtask_core::operator::OperatorEvent,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        let value = *event.downcast::<u64>().expect("u64 events");
        self.note(format!("event {value}"));
        ctx.collect(StreamRecord::new(value))
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        if self.closed {
            return Err(OperatorError::user("probe", "notice after close"));
        }
        self.note(format!("complete {id}"));
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        if self.closed {
            return Err(OperatorError::user("probe", "notice after close"));
        }
        self.note(format!("aborted {id}"));
        Ok(())
    }

    fn finish(
        &mut self,
        _ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.note("finish".into());
        Ok(())
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.closed = true;
        self.note("close".into());
        Ok(())
    }
}

/// Waits (hang guard only) until `done` holds.
pub fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "hang guard: condition never held"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The port of [`Count`]: `next` is the position; `snapshot_offset` and `skip_after_restore`
/// are the deliberate bugs.
pub struct CountReader {
    pub next: u64,
    pub limit: u64,
    pub snapshot_offset: i64,
    pub skip_after_restore: bool,
}

impl CountReader {
    pub fn faithful(limit: u64) -> Self {
        CountReader {
            next: 0,
            limit,
            snapshot_offset: 0,
            skip_after_restore: false,
        }
    }
}

impl streamtask_mailbox::SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = streamtask_core::state::decode(bytes)
                .map_err(|e| OperatorError::state("count", e))?;
            if self.skip_after_restore {
                self.next += 1;
            }
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut streamtask_mailbox::ReaderOutput<'_, u64>,
    ) -> Result<streamtask_mailbox::InputStatus, OperatorError> {
        if self.next == self.limit {
            return Ok(streamtask_mailbox::InputStatus::EndOfInput);
        }
        output.collect(self.next)?;
        self.next += 1;
        Ok(streamtask_mailbox::InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        let position = self.next.saturating_add_signed(self.snapshot_offset);
        streamtask_core::state::encode(&position).map_err(|e| OperatorError::state("count", e))
    }
}
