//! The split-source porting kit on a partitioned log (the legacy source of
//! `examples/partitioned_log.rs`, its partitions kept in memory): the correct port passes every
//! check at every checkpoint, at its parallelism and rescaled, both directions; two wrong ports
//! (a reader that skips a record on restore, an enumerator that re-assigns a finished split)
//! are caught with the first difference named.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use streamtask::source::porting::{
    SplitCheck, SplitDivergence, SplitPortingError, SplitPortingKit, SplitStateMapping,
};
use streamtask::source::{
    Boundedness, EnumeratorContext, Source, SourceError, SourceSplit, SplitEnumerator, SplitOutput,
    SplitReader,
};
use streamtask_bridge::porting::PortingKit;
use streamtask_core::state::{decode, encode};
use streamtask_core::{OperatorError, Watermark};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::InputStatus;

/// Partition `p`'s record `i` reads `p<p>:<i>`; the partitions have different lengths.
fn log() -> Arc<Vec<Vec<String>>> {
    Arc::new(
        [7, 12, 3, 9]
            .iter()
            .enumerate()
            .map(|(p, &n)| (0..n).map(|i| format!("p{p}:{i}")).collect())
            .collect(),
    )
}

fn split_of(record: &str) -> String {
    let partition = record[1..].split(':').next().unwrap_or_default();
    format!("partition-{partition}")
}

// ---- the legacy source: every partition round robin, the offset moved with the emit ----------

struct LogSource {
    log: Arc<Vec<Vec<String>>>,
}

impl SourceFunction for LogSource {
    type Out = String;
    type State = BTreeMap<usize, u64>;

    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, String, BTreeMap<usize, u64>>,
    ) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut progressed = false;
            for (p, partition) in self.log.iter().enumerate() {
                let mut locked = ctx.lock();
                let offset = locked.state().get(&p).copied().unwrap_or(0);
                if let Some(record) = partition.get(offset as usize) {
                    // A record's timestamp is its offset in its partition.
                    locked.collect_with_timestamp(record.clone(), offset as i64)?;
                    locked.state_mut().insert(p, offset + 1);
                    progressed = true;
                }
            }
            if !progressed {
                return Ok(());
            }
            // A round emitted every partition's record at one offset: event time passed it.
            let mut locked = ctx.lock();
            let round = locked.state().values().copied().max().unwrap_or(0) as i64 - 1;
            locked.emit_watermark(Watermark(round))?;
        }
        Ok(())
    }
}

// ---- the port: a split per partition with its offset -------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PartitionSplit {
    partition: usize,
    offset: u64,
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

/// What is planted in a wrong port.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plant {
    None,
    /// The reader skips a record of every split restored past its start.
    SkipOnRestore,
    /// The enumerator answers a reader's first request with a split it already read.
    ReassignFinished,
    /// The reader emits its split's timestamp as a watermark after every record, ahead of the
    /// splits other readers read.
    WatermarkPerSplit,
}

struct LogPort {
    log: Arc<Vec<Vec<String>>>,
    plant: Plant,
}

struct LogEnumerator {
    unassigned: Vec<PartitionSplit>,
    plant: Plant,
    /// Splits assigned in this attempt, per reader (what the planted bug re-assigns).
    assigned: BTreeMap<usize, Vec<PartitionSplit>>,
}

impl SplitEnumerator for LogEnumerator {
    type Split = PartitionSplit;

    fn start(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        for split in std::mem::take(&mut self.unassigned) {
            let subtask = split.partition % ctx.parallelism();
            self.assigned
                .entry(subtask)
                .or_default()
                .push(split.clone());
            ctx.assign_split(subtask, split)?;
        }
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        subtask: usize,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        // The log is complete: every partition was assigned at the start.
        if self.plant == Plant::ReassignFinished
            && let Some(split) = self.assigned.get_mut(&subtask).and_then(Vec::pop)
        {
            return ctx.assign_split(subtask, split);
        }
        ctx.signal_no_more_splits(subtask)
    }

    fn add_splits_back(&mut self, splits: Vec<PartitionSplit>, _subtask: usize) {
        self.unassigned.extend(splits);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        encode(&self.unassigned).map_err(SourceError::user)
    }
}

struct LogReader {
    log: Arc<Vec<Vec<String>>>,
    splits: Vec<PartitionSplit>,
    next: usize,
    plant: Plant,
}

impl SplitReader<String> for LogReader {
    type Split = PartitionSplit;

    fn add_splits(&mut self, splits: Vec<PartitionSplit>) {
        for mut split in splits {
            if self.plant == Plant::SkipOnRestore && split.offset > 0 {
                split.offset += 1;
            }
            self.splits.push(split);
        }
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, String>,
    ) -> Result<InputStatus, OperatorError> {
        if self.splits.is_empty() {
            return Ok(InputStatus::NothingAvailable);
        }
        let i = self.next % self.splits.len();
        self.next = i + 1;
        let split = &mut self.splits[i];
        match self.log[split.partition].get(split.offset as usize) {
            Some(record) => {
                let timestamp = split.offset as i64;
                split.offset += 1;
                output.collect_with_timestamp(record.clone(), timestamp)?;
                if self.plant == Plant::WatermarkPerSplit {
                    output.emit_watermark(Watermark(timestamp))?;
                }
            }
            None => {
                let done = self.splits.remove(i);
                output.finish_split(done.split_id());
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn snapshot_splits(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<PartitionSplit>, OperatorError> {
        Ok(self.splits.clone())
    }
}

impl Source for LogPort {
    type Output = String;
    type Split = PartitionSplit;
    type Enumerator = LogEnumerator;
    type Reader = LogReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(&self, _parallelism: usize) -> Result<LogEnumerator, SourceError> {
        let splits: Vec<PartitionSplit> = (0..self.log.len())
            .map(|partition| PartitionSplit {
                partition,
                offset: 0,
            })
            .collect();
        self.restore_enumerator(0, &encode(&splits).map_err(SourceError::user)?)
    }

    fn restore_enumerator(
        &self,
        _parallelism: usize,
        state: &[u8],
    ) -> Result<LogEnumerator, SourceError> {
        Ok(LogEnumerator {
            unassigned: decode(state).map_err(SourceError::user)?,
            plant: self.plant,
            assigned: BTreeMap::new(),
        })
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> LogReader {
        LogReader {
            log: Arc::clone(&self.log),
            splits: Vec::new(),
            next: 0,
            plant: self.plant,
        }
    }
}

/// Legacy offsets <-> split positions: a partition's offset is its split's; a split no reader
/// holds was read to its end.
struct Offsets {
    log: Arc<Vec<Vec<String>>>,
}

impl SplitStateMapping<BTreeMap<usize, u64>> for Offsets {
    type Split = PartitionSplit;

    fn splits_of(&self, state: &BTreeMap<usize, u64>) -> Vec<PartitionSplit> {
        (0..self.log.len())
            .map(|partition| PartitionSplit {
                partition,
                offset: state.get(&partition).copied().unwrap_or(0),
            })
            .collect()
    }

    fn legacy_of(&self, splits: &[PartitionSplit]) -> Option<BTreeMap<usize, u64>> {
        let mut offsets: BTreeMap<usize, u64> = self
            .log
            .iter()
            .enumerate()
            .map(|(p, records)| (p, records.len() as u64))
            .collect();
        offsets.extend(splits.iter().map(|s| (s.partition, s.offset)));
        Some(offsets)
    }
}

fn kit(
    plant: Plant,
) -> Result<streamtask::source::porting::SplitPortingReport<String>, SplitPortingError<String>> {
    let log = log();
    let legacy_log = Arc::clone(&log);
    let port_log = Arc::clone(&log);
    SplitPortingKit::new(
        PortingKit::new(
            move || LogSource {
                log: Arc::clone(&legacy_log),
            },
            (),
        )
        .checkpoint_every(5),
        move || LogPort {
            log: Arc::clone(&port_log),
            plant,
        },
        2,
        Offsets { log },
        |record: &String| split_of(record),
    )
    .rescaled_to(3)
    .run()
}

#[test]
fn the_correct_port_passes_every_check_at_every_checkpoint() {
    let report = kit(Plant::None).unwrap();
    assert_eq!(report.records.len(), 31);
    assert!(report.records.iter().all(|r| r.timestamp.is_some()));
    assert_eq!(report.checkpoints.len(), 6);
    for checkpoint in 1..=6u64 {
        for check in [
            SplitCheck::PortFromPort { parallelism: 2 },
            SplitCheck::PortFromPort { parallelism: 3 },
            SplitCheck::PortFromLegacy { parallelism: 2 },
            SplitCheck::PortFromLegacy { parallelism: 3 },
            SplitCheck::LegacyFromPort,
        ] {
            assert!(
                report.checks.contains(&(Some(checkpoint), check)),
                "{check} at checkpoint {checkpoint} was not made"
            );
        }
    }
}

#[test]
fn a_reader_that_skips_a_record_on_restore_is_caught_at_the_first_checkpoint() {
    let error = kit(Plant::SkipOnRestore).unwrap_err();
    eprintln!("skip on restore: {error}");
    let Some(SplitDivergence::Record {
        check,
        checkpoint,
        split,
        index,
        expected,
        got,
    }) = error_divergence(&error)
    else {
        panic!("expected a record divergence, got {error}");
    };
    assert_eq!(*check, SplitCheck::PortFromPort { parallelism: 2 });
    assert_eq!(checkpoint.map(|c| (c.id, c.records)), Some((1, 5)));
    assert_eq!(split, "partition-1");
    assert_eq!(*index, 1);
    assert_eq!(expected.as_ref().map(|r| r.value.as_str()), Some("p1:1"));
    assert_eq!(got.as_ref().map(|r| r.value.as_str()), Some("p1:2"));
    let text = error.to_string();
    assert!(
        text.contains("checkpoint 1") && text.contains("split partition-1"),
        "{text}"
    );
}

#[test]
fn an_enumerator_that_reassigns_a_finished_split_is_caught_in_the_run() {
    let error = kit(Plant::ReassignFinished).unwrap_err();
    eprintln!("re-assigned finished split: {error}");
    let Some(SplitDivergence::Record {
        check,
        checkpoint,
        split,
        index,
        expected,
        got,
    }) = error_divergence(&error)
    else {
        panic!("expected a record divergence, got {error}");
    };
    assert_eq!(*check, SplitCheck::Run);
    assert_eq!(*checkpoint, None);
    // Reader 0 finishes partition 2 (3 records) first and is given it again.
    assert_eq!(split, "partition-2");
    assert_eq!(*index, 3);
    assert_eq!(*expected, None);
    assert_eq!(got.as_ref().map(|r| r.value.as_str()), Some("p2:0"));
}

fn error_divergence(error: &SplitPortingError<String>) -> Option<&SplitDivergence<String>> {
    match error {
        SplitPortingError::Diverged(d) => Some(d),
        _ => None,
    }
}

#[test]
fn a_watermark_ahead_of_the_legacy_source_is_caught() {
    let error = kit(Plant::WatermarkPerSplit).unwrap_err();
    eprintln!("watermark per split: {error}");
    match error_divergence(&error) {
        Some(SplitDivergence::WatermarkAhead {
            watermark,
            allowed,
            after_records,
        }) => {
            // After p0:0 the legacy source had emitted p1:0 too before its first watermark.
            assert_eq!((*watermark, *allowed, *after_records), (0, None, 1));
        }
        _ => panic!("expected a watermark divergence, got {error}"),
    }
}
