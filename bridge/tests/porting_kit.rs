//! The porting kit: a faithful port passes; wrong ports of every kind (an off-by-one snapshot,
//! a lost watermark, a missing idle mark, a wrong legacy-state declaration, incompatible state
//! bytes) are caught, naming the first differing element and the checkpoint it follows.

mod common;

use std::task::Waker;

use common::{Count, CountReader};
use streamtask_bridge::porting::{Divergence, PortingError, PortingKit, RestoreCheck, Side};
use streamtask_bridge::{HandoffReader, LegacyStateCompat};
use streamtask_core::operator::Emitted;
use streamtask_core::state::{decode, encode};
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark};
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
        &Divergence::Element {
            index: 10,
            legacy: Some(Emitted::Record(StreamRecord::new(10))),
            reader: Some(Emitted::Record(StreamRecord::new(9))),
            after_checkpoint: Some(1),
            legacy_restored_from: Some(1),
            reader_restored_from: Some(1),
        }
    );
    let message = error.to_string();
    assert!(message.contains("element 10"), "{message}");
    assert!(message.contains("after checkpoint 1"), "{message}");
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
        Some(Divergence::Element {
            index,
            legacy,
            reader,
            after_checkpoint,
            reader_restored_from,
            ..
        }) => {
            assert_eq!(*index, 60);
            assert_eq!(legacy, &Some(Emitted::Record(StreamRecord::new(60))));
            assert_eq!(reader, &Some(Emitted::Record(StreamRecord::new(61))));
            assert_eq!(*after_checkpoint, Some(2));
            assert_eq!(*reader_restored_from, Some(2));
        }
        other => panic!("expected an element divergence, got {other:?}"),
    }
}

#[test]
fn the_same_wrong_port_is_caught_without_a_scheduled_restore() {
    // Before: it passed, since its snapshots were restored only where a failure was
    // scheduled. Now every checkpoint's snapshot is restored and what follows compared.
    let error = PortingKit::new(
        || Count::to(50),
        || CountReader {
            snapshot_offset: -1,
            ..CountReader::faithful(50)
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap_err();
    assert_eq!(
        error.divergence(),
        Some(&Divergence::Restore {
            checkpoint: 1,
            records: 10,
            restore: RestoreCheck::ReaderFromReader,
            index: 0,
            expected: Some(Emitted::Record(StreamRecord::new(10))),
            got: Some(Emitted::Record(StreamRecord::new(9))),
        })
    );
    let message = error.to_string();
    assert!(message.contains("after checkpoint 1"), "{message}");
    assert!(message.contains("snapshot_state"), "{message}");
}

#[test]
fn every_checkpoint_is_restored_and_compared() {
    let report = PortingKit::new(|| Count::to(50), || CountReader::faithful(50))
        .checkpoint_every(10)
        .run()
        .unwrap();
    let checked: Vec<(u64, RestoreCheck)> = (1..=5)
        .map(|id| (id, RestoreCheck::ReaderFromReader))
        .collect();
    assert_eq!(report.restores_checked, checked);
    // Every element is compared: the records, then the end of event time.
    assert_eq!(report.elements.len(), 51);
    assert_eq!(
        report.elements.last(),
        Some(&Emitted::Watermark(Watermark::MAX))
    );
}

/// An event-time source: record `n` at `10 n`, a watermark after every 10th record, and an
/// idle mark after record 25 (the next record marks it active again).
struct Ticks;

impl SourceFunction for Ticks {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == 60 {
                return Ok(());
            }
            locked.collect_with_timestamp(n, n as i64 * 10)?;
            if n % 10 == 9 {
                locked.emit_watermark(Watermark(n as i64 * 10))?;
            }
            if n == 25 {
                locked.mark_as_temporarily_idle()?;
            }
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// The port of `Ticks`, with the two mistakes a port of an event-time source makes.
struct TicksReader {
    next: u64,
    lose_watermarks: bool,
    skip_idle: bool,
}

impl TicksReader {
    fn faithful() -> Self {
        TicksReader {
            next: 0,
            lose_watermarks: false,
            skip_idle: false,
        }
    }
}

impl SourceReader<u64> for TicksReader {
    fn name(&self) -> &str {
        "ticks"
    }
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("ticks", e))?;
        }
        Ok(())
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        let n = self.next;
        if n == 60 {
            return Ok(InputStatus::EndOfInput);
        }
        output.collect_with_timestamp(n, n as i64 * 10)?;
        if n % 10 == 9 && !self.lose_watermarks {
            output.emit_watermark(Watermark(n as i64 * 10))?;
        }
        if n == 25 && !self.skip_idle {
            output.mark_idle()?;
        }
        self.next = n + 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("ticks", e))
    }
}

#[test]
fn a_faithful_port_of_an_event_time_source_passes_with_its_watermarks_and_idle_marks() {
    let report = PortingKit::new(|| Ticks, TicksReader::faithful)
        .checkpoint_every(10)
        .fail_after([27])
        .run()
        .unwrap();
    let idle = report
        .elements
        .iter()
        .position(|e| *e == Emitted::Status(StreamStatus::Idle))
        .expect("the idle mark is compared");
    assert_eq!(
        report.elements[idle + 1],
        Emitted::Status(StreamStatus::Active)
    );
    assert_eq!(report.records[3].timestamp, Some(30));
}

#[test]
fn a_port_that_loses_a_watermark_is_caught() {
    let error = PortingKit::new(
        || Ticks,
        || TicksReader {
            lose_watermarks: true,
            ..TicksReader::faithful()
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap_err();
    assert_eq!(
        error.divergence(),
        Some(&Divergence::Element {
            index: 10,
            legacy: Some(Emitted::Watermark(Watermark(90))),
            reader: Some(Emitted::Record(StreamRecord::with_timestamp(10, 100))),
            // Emitted with record 9, in the section before checkpoint 1.
            after_checkpoint: None,
            legacy_restored_from: None,
            reader_restored_from: None,
        })
    );
    assert!(error.to_string().contains("emit_watermark"), "{error}");
}

#[test]
fn a_port_that_misses_an_idle_mark_is_caught() {
    let error = PortingKit::new(
        || Ticks,
        || TicksReader {
            skip_idle: true,
            ..TicksReader::faithful()
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap_err();
    match error.divergence() {
        Some(Divergence::Element { legacy, reader, .. }) => {
            assert_eq!(legacy, &Some(Emitted::Status(StreamStatus::Idle)));
            assert_eq!(
                reader,
                &Some(Emitted::Record(StreamRecord::with_timestamp(26, 260)))
            );
        }
        other => panic!("expected an element divergence, got {other:?}"),
    }
    assert!(error.to_string().contains("mark_idle"), "{error}");
}

/// A port of `Count` declaring its state compatibility, with the mistakes a declaration can
/// hold.
struct PortedCount {
    reader: CountReader,
    /// Added to the legacy state when reading it.
    from_offset: u64,
    /// Added to the position when writing the legacy state.
    to_offset: u64,
    one_way: bool,
}

impl PortedCount {
    fn faithful(limit: u64) -> Self {
        PortedCount {
            reader: CountReader::faithful(limit),
            from_offset: 0,
            to_offset: 0,
            one_way: false,
        }
    }
}

impl SourceReader<u64> for PortedCount {
    fn name(&self) -> &str {
        self.reader.name()
    }
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        self.reader.restore_state(state)
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        self.reader.poll_next(output)
    }
    fn register_waker(&mut self, waker: &Waker) {
        self.reader.register_waker(waker);
    }
    fn snapshot_state(&mut self, id: u64) -> Result<Vec<u8>, OperatorError> {
        self.reader.snapshot_state(id)
    }
}

impl LegacyStateCompat<u64> for PortedCount {
    type LegacyState = u64;
    fn restore_legacy_state(&mut self, next: u64) -> Result<(), OperatorError> {
        self.reader.next = next + self.from_offset;
        Ok(())
    }
    fn to_legacy_state(&self) -> Option<u64> {
        (!self.one_way).then_some(self.reader.next + self.to_offset)
    }
}

#[test]
fn a_port_declared_both_ways_is_restored_across_at_every_checkpoint() {
    let report = PortingKit::ported(|| Count::to(40), || PortedCount::faithful(40))
        .checkpoint_every(10)
        .fail_after([15])
        .run()
        .unwrap();
    for id in 1..=4 {
        for check in [
            RestoreCheck::ReaderFromLegacy,
            RestoreCheck::LegacyFromReader,
            RestoreCheck::ReaderFromReader,
        ] {
            assert!(
                report.restores_checked.contains(&(id, check)),
                "{id} {check}"
            );
        }
    }
    // Declared one way, the legacy source is not restored from the port's snapshots.
    let report = PortingKit::ported(
        || Count::to(40),
        || PortedCount {
            one_way: true,
            ..PortedCount::faithful(40)
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap();
    assert!(
        !report
            .restores_checked
            .iter()
            .any(|(_, c)| *c == RestoreCheck::LegacyFromReader)
    );
    assert!(
        report
            .restores_checked
            .contains(&(1, RestoreCheck::ReaderFromLegacy))
    );
}

#[test]
fn a_port_that_reads_the_legacy_state_off_by_one_is_caught() {
    let error = PortingKit::ported(
        || Count::to(40),
        || PortedCount {
            from_offset: 1,
            ..PortedCount::faithful(40)
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap_err();
    assert_eq!(
        error.divergence(),
        Some(&Divergence::Restore {
            checkpoint: 1,
            records: 10,
            restore: RestoreCheck::ReaderFromLegacy,
            index: 0,
            expected: Some(Emitted::Record(StreamRecord::new(10))),
            got: Some(Emitted::Record(StreamRecord::new(11))),
        })
    );
    assert!(
        error.to_string().contains("restore_legacy_state"),
        "{error}"
    );
}

#[test]
fn a_port_that_writes_the_legacy_state_off_by_one_is_caught() {
    let error = PortingKit::ported(
        || Count::to(40),
        || PortedCount {
            to_offset: 1,
            ..PortedCount::faithful(40)
        },
    )
    .checkpoint_every(10)
    .run()
    .unwrap_err();
    match error.divergence() {
        Some(Divergence::Restore {
            checkpoint,
            restore,
            ..
        }) => {
            assert_eq!(*checkpoint, 1);
            assert_eq!(*restore, RestoreCheck::LegacyFromReader);
        }
        other => panic!("expected a restore divergence, got {other:?}"),
    }
    assert!(error.to_string().contains("to_legacy_state"), "{error}");
}

/// A port that declares the wrong legacy state: a file position, where `Count` keeps a number.
struct FilePort(CountReader);

#[derive(serde::Serialize, serde::Deserialize)]
struct FilePosition {
    file: String,
    offset: u64,
}

impl SourceReader<u64> for FilePort {
    fn name(&self) -> &str {
        "file port"
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        self.0.poll_next(output)
    }
    fn register_waker(&mut self, waker: &Waker) {
        self.0.register_waker(waker);
    }
    fn snapshot_state(&mut self, id: u64) -> Result<Vec<u8>, OperatorError> {
        self.0.snapshot_state(id)
    }
}

impl LegacyStateCompat<u64> for FilePort {
    type LegacyState = FilePosition;
    fn restore_legacy_state(&mut self, state: FilePosition) -> Result<(), OperatorError> {
        self.0.next = state.offset;
        Ok(())
    }
    fn to_legacy_state(&self) -> Option<FilePosition> {
        Some(FilePosition {
            file: "numbers".into(),
            offset: self.0.next,
        })
    }
}

#[test]
fn a_port_with_incompatible_state_bytes_is_caught() {
    let error = PortingKit::ported(|| Count::to(30), || FilePort(CountReader::faithful(30)))
        .checkpoint_every(10)
        .run()
        .unwrap_err();
    match &error {
        PortingError::IncompatibleState {
            checkpoint,
            restore,
            error: cause,
        } => {
            assert_eq!(*checkpoint, 1);
            assert_eq!(*restore, RestoreCheck::ReaderFromLegacy);
            let cause = cause.to_string();
            assert!(cause.contains("FilePosition"), "{cause}");
        }
        other => panic!("expected incompatible state, got {other}"),
    }
    assert!(error.to_string().contains("LegacyState"), "{error}");
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
