//! The porting kit: a faithful port passes; wrong ports are caught, naming the first differing
//! record and the checkpoint.

mod common;

use std::task::Waker;

use common::{Count, CountReader};
use streamtask_bridge::HandoffReader;
use streamtask_bridge::porting::{Divergence, PortingError, PortingKit, Side};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

#[test]
fn smoke() {
    let report = PortingKit::new(|| Count::to(100), || CountReader::faithful(100))
        .checkpoint_every(10)
        .fail_after([15, 47])
        .run()
        .unwrap();
    let values: Vec<u64> = report.records.iter().map(|r| r.value).collect();
    assert_eq!(values, (0..100).collect::<Vec<_>>());
    assert_eq!(report.checkpoints.len(), 10); // after 10, 20, ..., 100 records
    assert_eq!(report.restores.len(), 2);
    assert_eq!(report.restores[0].from_checkpoint, Some(1));
    assert_eq!(report.restores[0].failed_at, 15);
    assert_eq!(report.restores[0].resumed_at, 10);
    assert_eq!(report.restores[1].resumed_at, 40);
}

#[test]
fn an_off_by_one_offset_in_the_snapshot_is_caught_at_the_restore() {
    let error = PortingKit::new(
        || Count::to(100),
        || CountReader {
            snapshot_offset: -1,
            ..CountReader::faithful(100)
        },
    )
    .checkpoint_every(10)
    .fail_after([15])
    .run()
    .unwrap_err();
    let divergence = error.divergence().expect("the port diverges");
    assert_eq!(
        divergence,
        &Divergence::Record {
            index: 10,
            legacy: Some(StreamRecord::new(10)),
            reader: Some(StreamRecord::new(9)),
            checkpoint: Some(2),
            legacy_restored_from: Some(1),
            reader_restored_from: Some(1),
        }
    );
    let message = error.to_string();
    assert!(message.contains("record 10"), "{message}");
    assert!(message.contains("checkpoint 2"), "{message}");
    assert!(message.contains("restored from checkpoint 1"), "{message}");
    assert!(message.contains("snapshot_state"), "{message}");
}

#[test]
fn a_reader_that_skips_a_record_after_a_restore_is_caught() {
    let error = PortingKit::new(
        || Count::to(100),
        || CountReader {
            skip_after_restore: true,
            ..CountReader::faithful(100)
        },
    )
    .checkpoint_at([30, 60])
    .fail_after([70])
    .run()
    .unwrap_err();
    match error.divergence() {
        Some(Divergence::Record {
            index,
            legacy,
            reader,
            checkpoint,
            reader_restored_from,
            ..
        }) => {
            assert_eq!(*index, 60);
            assert_eq!(legacy.as_ref().map(|r| r.value), Some(60));
            assert_eq!(reader.as_ref().map(|r| r.value), Some(61));
            // After the last checkpoint: committed at the end of the run.
            assert_eq!(*checkpoint, None);
            assert_eq!(*reader_restored_from, Some(2));
        }
        other => panic!("expected a record divergence, got {other:?}"),
    }
}

#[test]
fn the_same_wrong_port_passes_without_a_restore() {
    // The off-by-one only shows when a snapshot is restored: schedule failures.
    PortingKit::new(
        || Count::to(50),
        || CountReader {
            snapshot_offset: -1,
            ..CountReader::faithful(50)
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap();
}

/// Two records per locked section.
struct PairsSource;

impl SourceFunction for PairsSource {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == 40 {
                return Ok(());
            }
            locked.collect(n)?;
            locked.collect(n + 1)?;
            *locked.state_mut() = n + 2;
        }
        Ok(())
    }
}

#[test]
fn checkpoints_at_different_places_are_a_divergence() {
    let error = PortingKit::new(|| PairsSource, || CountReader::faithful(40))
        .checkpoint_every(5)
        .run()
        .unwrap_err();
    assert_eq!(
        error.divergence(),
        Some(&Divergence::Checkpoint {
            checkpoint: 1,
            legacy_records: Some(6),
            reader_records: Some(5),
        })
    );
    assert!(error.to_string().contains("poll_next"));
    // Scheduled where both sides stop, the same pair passes.
    PortingKit::new(|| PairsSource, || CountReader::faithful(40))
        .checkpoint_every(6)
        .fail_after([9, 25])
        .run()
        .unwrap();
}

#[test]
fn the_handoff_reader_passes_as_a_port_of_its_own_source() {
    let report = PortingKit::new(
        || Count::to(300),
        || HandoffReader::new(Count::to(300)).with_capacity(7),
    )
    .checkpoint_every(25)
    .fail_after([40, 130, 131, 260])
    .run()
    .unwrap();
    assert_eq!(report.records.len(), 300);
    assert_eq!(report.restores.len(), 4);
}

/// Fails at its 5th poll.
struct Broken {
    polls: u64,
}

impl SourceReader<u64> for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        self.polls += 1;
        if self.polls == 5 {
            return Err(OperatorError::user("broken", "bad line"));
        }
        output.collect(self.polls - 1)?;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(Vec::new())
    }
}

#[test]
fn a_failing_side_is_reported_with_its_error() {
    let error = PortingKit::new(|| Count::to(10), || Broken { polls: 0 })
        .run()
        .unwrap_err();
    match &error {
        PortingError::Failed { side, error } => {
            assert_eq!(*side, Side::Reader);
            assert!(error.to_string().contains("bad line"));
        }
        other => panic!("expected a failure, got {other}"),
    }
}

#[test]
fn sources_that_never_end_are_compared_up_to_a_limit() {
    let report = PortingKit::new(Count::forever, || CountReader::faithful(u64::MAX))
        .checkpoint_every(7)
        .fail_after([20])
        .stop_after(50)
        .run()
        .unwrap();
    let values: Vec<u64> = report.records.iter().map(|r| r.value).collect();
    assert_eq!(values, (0..50).collect::<Vec<_>>());
}

#[test]
fn a_zero_interval_is_a_typed_error() {
    let error = PortingKit::new(|| Count::to(1), || CountReader::faithful(1))
        .checkpoint_every(0)
        .run()
        .unwrap_err();
    assert!(matches!(error, PortingError::ZeroInterval));
    assert!(error.to_string().contains("at least 1"));
}
