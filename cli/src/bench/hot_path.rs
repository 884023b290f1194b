//! The per-record cost of a mailbox source task against a bare loop running the same steps:
//! what the task, its mailbox check and its bookkeeping add to a record.
//!
//! The task is timed spawn to join, setup included: on this machine a spawn-to-join of an
//! empty task takes 60-90 us (thread start, the task's metrics histograms), about 1% of a run
//! of 5M records, so the ratio is the per-record cost. What a record costs the task beyond the
//! bare loop is the mailbox flag (one load after every record: a mail waits for at most the
//! record in flight) and the step's budget; the counts stay in registers (see
//! `streamtask_runtime::Burst`).

use std::hint::black_box;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use streamtask_core::operator::{ChainOutput, Map, NoEvents, TaskOutput, TaskServices};
use streamtask_core::task::TaskConfig;
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output,
    time::ManualClock,
};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};

/// A reader emitting `next, next + 1, ...` up to `end` (exclusive), one record per poll.
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// The next value.
    pub next: u64,
    /// Where it ends.
    pub end: u64,
}

impl SourceReader<u64> for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    #[inline]
    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == self.end {
            return Ok(InputStatus::EndOfInput);
        }
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

/// An output summing what it gets, so nothing is optimized away. The bare loop, the tasks of
/// every model and the tokio peer all end in this sum, so each side does the same work per record
/// (a task's sum is handed to `black_box` at its end of input, as the bare loop's and the peer's
/// are at theirs).
#[derive(Debug, Default)]
pub struct Sum(pub u64);

impl Output<u64> for Sum {
    #[inline]
    fn collect(&mut self, record: StreamRecord<u64>) -> Result<(), OperatorError> {
        self.0 = self.0.wrapping_add(record.value);
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl TaskOutput<u64> for Sum {
    fn broadcast_barrier(&mut self, _barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        black_box(self.0);
        Ok(())
    }
}

impl Drop for Sum {
    /// A cancelled task never sees its end of input: the sum is observed here instead.
    fn drop(&mut self) {
        black_box(self.0);
    }
}

/// The map every hot-path measurement runs.
pub type Triple = Map<u64, u64, fn(u64) -> u64>;

/// The map every hot-path measurement runs: `x * 3`.
pub fn triple() -> Triple {
    Map::new("triple", (|x: u64| x.wrapping_mul(3)) as fn(u64) -> u64)
}

/// What a source task's default action does per record (reader -> chain -> output), without a
/// task around it.
#[derive(Debug)]
pub struct Pipeline {
    /// The reader.
    pub reader: Counter,
    /// The chain.
    pub chain: Triple,
    /// The output.
    pub sink: Sum,
    /// The services the chain's context needs.
    pub services: TaskServices,
}

impl Pipeline {
    /// A pipeline over `records` records.
    pub fn new(records: u64) -> Self {
        let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
        Pipeline {
            reader: Counter {
                next: 0,
                end: records,
            },
            chain: triple(),
            sink: Sum::default(),
            services: TaskServices::new("bench", timers, Arc::new(NoEvents)),
        }
    }

    /// One reader step through the chain.
    ///
    /// # Panics
    ///
    /// Never: nothing in the pipeline fails.
    #[inline]
    pub fn step(&mut self) -> InputStatus {
        let mut chain = ChainOutput::new(&mut self.chain, &mut self.sink, &self.services, 0);
        let mut out = ReaderOutput::new(&mut chain);
        self.reader
            .poll_next(&mut out)
            .expect("the bench pipeline never fails")
    }
}

/// `records` records through a bare loop of [`Pipeline::step`]: the wall time.
pub fn bare_loop(records: u64) -> Duration {
    let mut pipeline = Pipeline::new(records);
    let start = Instant::now();
    while pipeline.step() == InputStatus::MoreAvailable {}
    let elapsed = start.elapsed();
    black_box(pipeline.sink.0);
    elapsed
}

/// `records` records through a whole [`SourceStreamTask`] (spawn to join): the wall time.
///
/// # Panics
///
/// If the task does not finish.
pub fn source_task(records: u64) -> Duration {
    let start = Instant::now();
    let task = SourceStreamTask::new(
        TaskConfig::new("bench-hot-path"),
        Counter {
            next: 0,
            end: records,
        },
        triple(),
        Sum::default(),
    )
    .spawn();
    let outcome = task.join();
    let elapsed = start.elapsed();
    assert!(outcome.is_finished(), "the hot-path task: {outcome}");
    elapsed
}
