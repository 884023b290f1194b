//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam::channel::{Receiver, unbounded};
use streamtask_core::operator::{Emitted, Output, TaskOutput};
use streamtask_core::task::{CheckpointResponder, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark};

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

    pub fn take(&self) -> Vec<Emitted<T>> {
        std::mem::take(&mut *self.0.lock().unwrap())
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

/// Waits (hang guard only) until the task left `Initializing`.
pub fn wait_running(task: &streamtask_runtime::TaskHandle) {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while task.state() == streamtask_core::task::TaskState::Initializing {
        assert!(std::time::Instant::now() < deadline, "task never started");
        std::thread::sleep(Duration::from_millis(1));
    }
}
