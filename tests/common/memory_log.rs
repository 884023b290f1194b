//! A user-written split source that is not the file source: an in-memory partitioned log
//! (`partitions` partitions of numbered records, appended to while the job runs and sealed to
//! end it). A split is a partition with the offset of its next record; the enumerator assigns
//! every partition when it starts (reader `p % parallelism`), gives back splits that come back,
//! and ends a reader that asks for more once the log is sealed. Records read as `p<p>:<n>`.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::Waker;

use serde::{Deserialize, Serialize};
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::source::{
    Boundedness, EnumeratorContext, Source, SourceError, SourceSplit, SplitEnumerator, SplitOutput,
    SplitReader,
};
use streamtask_core::OperatorError;
use streamtask_core::state::{decode, encode};
use streamtask_mailbox::InputStatus;

#[derive(Default)]
struct LogState {
    /// Records per partition (record `n` of partition `p` is `p<p>:<n>`).
    lengths: Vec<u64>,
    sealed: bool,
    wakers: Vec<Waker>,
}

/// The log: shared by the test (which appends and seals) and the source's readers.
#[derive(Clone, Default)]
pub struct MemoryLog(Arc<Mutex<LogState>>);

impl MemoryLog {
    /// A log of `partitions` empty partitions.
    pub fn new(partitions: usize) -> Self {
        let log = MemoryLog::default();
        log.0.lock().unwrap().lengths = vec![0; partitions];
        log
    }

    /// Appends `n` records to every partition and wakes the readers.
    pub fn append(&self, n: u64) {
        let mut s = self.0.lock().unwrap();
        s.lengths.iter_mut().for_each(|l| *l += n);
        s.wakers.drain(..).for_each(Waker::wake);
    }

    /// No record will be appended any more: readers end at the end of their partitions.
    pub fn seal(&self) {
        let mut s = self.0.lock().unwrap();
        s.sealed = true;
        s.wakers.drain(..).for_each(Waker::wake);
    }

    /// Every record of the log, sorted as strings.
    pub fn expected(&self) -> Vec<String> {
        let s = self.0.lock().unwrap();
        let mut all: Vec<String> = s
            .lengths
            .iter()
            .enumerate()
            .flat_map(|(p, &len)| (0..len).map(move |n| format!("p{p}:{n}")))
            .collect();
        all.sort();
        all
    }

    fn partitions(&self) -> usize {
        self.0.lock().unwrap().lengths.len()
    }

    fn sealed(&self) -> bool {
        self.0.lock().unwrap().sealed
    }
}

/// A partition and the offset of its next record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSplit {
    pub partition: usize,
    pub offset: u64,
}

impl SourceSplit for PartitionSplit {
    fn split_id(&self) -> String {
        format!("partition-{}", self.partition)
    }
    fn encode(&self) -> Result<Vec<u8>, SourceError> {
        encode(self).map_err(SourceError::user)
    }
    fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
        decode(bytes).map_err(SourceError::user)
    }
}

/// The source; `faults` count the records the readers emit ([`FaultKind::Operator`]) and the
/// enumerator's periodic calls ([`FaultKind::Source`]: a fault there panics in the enumerator).
pub struct MemoryLogSource {
    pub log: MemoryLog,
    pub faults: Arc<FaultPlan>,
}

pub struct LogEnumerator {
    log: MemoryLog,
    faults: Arc<FaultPlan>,
    /// Splits not assigned.
    pending: Vec<PartitionSplit>,
    /// Readers that asked while nothing was pending and the log was open.
    awaiting: VecDeque<usize>,
}

impl LogEnumerator {
    fn answer(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        // Splits given back go to the readers that ask, else round robin.
        let parallelism = ctx.parallelism();
        for split in std::mem::take(&mut self.pending) {
            let subtask = self
                .awaiting
                .pop_front()
                .unwrap_or(split.partition % parallelism);
            ctx.assign_split(subtask, split)?;
        }
        if self.log.sealed() {
            for subtask in self.awaiting.drain(..) {
                ctx.signal_no_more_splits(subtask)?;
            }
        }
        Ok(())
    }
}

impl SplitEnumerator for LogEnumerator {
    type Split = PartitionSplit;

    fn start(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        self.answer(ctx)
    }

    fn handle_split_request(
        &mut self,
        subtask: usize,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        self.awaiting.push_back(subtask);
        self.answer(ctx)
    }

    fn add_splits_back(&mut self, splits: Vec<PartitionSplit>, _subtask: usize) {
        self.pending.extend(splits);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        encode(&self.pending).map_err(SourceError::user)
    }

    fn discover(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        self.faults.check(FaultKind::Source);
        self.answer(ctx)
    }
}

pub struct LogReader {
    log: MemoryLog,
    splits: Vec<PartitionSplit>,
    /// The split polled next (round robin over the splits held).
    next: usize,
    faults: Arc<FaultPlan>,
}

impl SplitReader<String> for LogReader {
    type Split = PartitionSplit;

    fn add_splits(&mut self, splits: Vec<PartitionSplit>) {
        self.splits.extend(splits);
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, String>,
    ) -> Result<InputStatus, OperatorError> {
        let (lengths, sealed) = {
            let s = self.log.0.lock().unwrap();
            (s.lengths.clone(), s.sealed)
        };
        for _ in 0..self.splits.len() {
            let i = self.next % self.splits.len();
            self.next = i + 1;
            let split = &mut self.splits[i];
            if split.offset < lengths[split.partition] {
                self.faults.check(FaultKind::Operator);
                let record = format!("p{}:{}", split.partition, split.offset);
                split.offset += 1;
                output.collect(record)?;
                return Ok(InputStatus::MoreAvailable);
            }
            if sealed {
                let done = self.splits.remove(i);
                output.finish_split(done.split_id());
                return Ok(InputStatus::MoreAvailable);
            }
        }
        Ok(InputStatus::NothingAvailable)
    }

    fn snapshot_splits(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<PartitionSplit>, OperatorError> {
        Ok(self.splits.clone())
    }

    fn register_waker(&mut self, waker: &Waker) {
        let mut s = self.log.0.lock().unwrap();
        let ready = s.sealed
            || self
                .splits
                .iter()
                .any(|split| split.offset < s.lengths[split.partition]);
        if ready {
            waker.wake_by_ref();
        } else {
            s.wakers.push(waker.clone());
        }
    }
}

impl Source for MemoryLogSource {
    type Output = String;
    type Split = PartitionSplit;
    type Enumerator = LogEnumerator;
    type Reader = LogReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::ContinuousUnbounded
    }

    fn create_enumerator(&self, _parallelism: usize) -> Result<LogEnumerator, SourceError> {
        let pending = (0..self.log.partitions())
            .map(|partition| PartitionSplit {
                partition,
                offset: 0,
            })
            .collect();
        Ok(LogEnumerator {
            log: self.log.clone(),
            faults: Arc::clone(&self.faults),
            pending,
            awaiting: VecDeque::new(),
        })
    }

    fn restore_enumerator(
        &self,
        _parallelism: usize,
        state: &[u8],
    ) -> Result<LogEnumerator, SourceError> {
        Ok(LogEnumerator {
            log: self.log.clone(),
            faults: Arc::clone(&self.faults),
            pending: decode(state).map_err(SourceError::user)?,
            awaiting: VecDeque::new(),
        })
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> LogReader {
        LogReader {
            log: self.log.clone(),
            splits: Vec::new(),
            next: 0,
            faults: Arc::clone(&self.faults),
        }
    }
}
