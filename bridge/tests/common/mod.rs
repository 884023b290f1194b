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
