//! What the benches share: a counting reader, a summing output, and the reader -> map -> output
//! step a source task's default action runs.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::task::Waker;

use streamtask_core::operator::{ChainOutput, Map, NoEvents, TaskServices};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{ManualClock, OperatorError, Output, StreamRecord, StreamStatus, Watermark};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// Emits `0, 1, 2, ...` up to `end`.
pub struct Counter {
    pub next: u64,
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

/// Sums what it gets, so nothing is optimized away.
#[derive(Default)]
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

pub type Triple = Map<u64, u64, fn(u64) -> u64>;

/// What a source task's default action does per step: reader -> chain -> output.
pub struct Pipeline {
    pub reader: Counter,
    pub chain: Triple,
    pub sink: Sum,
    pub services: TaskServices,
}

impl Pipeline {
    pub fn new(records: u64) -> Self {
        let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
        Pipeline {
            reader: Counter {
                next: 0,
                end: records,
            },
            chain: Map::new("triple", (|x| x.wrapping_mul(3)) as fn(u64) -> u64),
            sink: Sum::default(),
            services: TaskServices::new("bench", timers, Arc::new(NoEvents)),
        }
    }

    #[inline]
    pub fn step(&mut self) -> InputStatus {
        let mut chain = ChainOutput::new(&mut self.chain, &mut self.sink, &self.services, 0);
        let mut out = ReaderOutput::new(&mut chain);
        self.reader
            .poll_next(&mut out)
            .expect("the bench pipeline never fails")
    }
}
