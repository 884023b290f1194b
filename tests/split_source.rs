//! A user-written split source (an in-memory partitioned log, `common/memory_log.rs`: splits
//! are partitions with offsets, assigned by the enumerator when it starts) under every model:
//! committed output exactly once with faults injected in the readers, and through a rescale
//! chain of savepoints (parallelism 2 -> 3 -> 1) while the log grows.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::source::{
    Boundedness, EnumeratorContext, ReaderEvent, Source, SourceCoordinator, SourceError,
    SourceEvent, SplitEnumerator, SplitSourceReader,
};
use streamtask_core::operator::Emitted;

#[path = "common/memory_log.rs"]
mod memory_log;

use memory_log::{MemoryLog, MemoryLogSource, PartitionSplit};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// Checkpoints every 2 ms, up to 10 restarts 1 ms apart, small channels.
fn config(dir: &Path) -> JobConfig {
    JobConfig::new(dir)
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(2))
                .with_timeout(Duration::from_millis(250))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
}

fn build(
    model: Model,
    log: &MemoryLog,
    faults: &Arc<FaultPlan>,
    parallelism: usize,
    output: &Path,
) -> JobGraph {
    let env = StreamEnvironment::new(model);
    let source = MemoryLogSource {
        log: log.clone(),
        faults: Arc::clone(faults),
    };
    env.from_source("log", source, parallelism)
        .two_phase_file_sink("sink", output.to_path_buf(), |s: &String| s.clone());
    env.build().unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn committed(output: &Path) -> Vec<String> {
    let mut lines = streamtask::sink::read_committed(output).unwrap();
    lines.sort();
    lines
}

/// Runs a sealed log of `partitions` x `per_partition` records to its end with
/// `parallelism` readers; returns the sorted committed records, the expected ones and the
/// restarts.
fn run(
    model: Model,
    (partitions, per_partition): (usize, u64),
    parallelism: usize,
    faults: FaultPlan,
) -> (Vec<String>, Vec<String>, u32) {
    let work = tempfile::tempdir().unwrap();
    let log = MemoryLog::new(partitions);
    log.append(per_partition);
    log.seal();
    let faults = Arc::new(faults);
    let output = work.path().join("output");
    let job = build(model, &log, &faults, parallelism, &output);
    let result = job
        .run(&config(work.path()))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(
        faults.fired(),
        faults.planned().len(),
        "{model}: not every planned fault fired"
    );
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    (committed(&output), log.expected(), result.restarts)
}

#[test]
fn smoke() {
    // More readers than partitions: the reader without a split ends when the log is sealed.
    for model in MODELS {
        let (lines, expected, restarts) = run(model, (2, 50), 3, FaultPlan::none());
        assert_eq!(restarts, 0, "{model}");
        assert_eq!(lines.len(), 100, "{model}");
        assert_eq!(lines, expected, "{model}");
    }
}

#[test]
fn a_user_split_source_commits_exactly_once_through_reader_faults() {
    // 5 partitions of 800 records, 2 readers (2 and 3 partitions each): faults at the 700th
    // and 2500th record emitted, so restores happen mid-partition.
    let faults = [(FaultKind::Operator, 700), (FaultKind::Operator, 2500)];
    for model in MODELS {
        let (lines, expected, restarts) = run(model, (5, 800), 2, FaultPlan::at(&faults));
        assert!(restarts >= 1, "{model}: the faults did not restart the job");
        assert_eq!(lines.len(), 4000, "{model}");
        assert_eq!(lines, expected, "{model}: not exactly once");
    }
}

#[test]
fn an_enumerator_that_panics_fails_its_readers_and_the_job_restarts_exactly_once() {
    // The enumerator panics at its 5th and 15th periodic call (the executor's thread survives:
    // the coordinator turns the panic into the enumerator's failure, its readers fail with it,
    // the job restarts from the latest checkpoint). The log is sealed once both fired.
    let faults = [(FaultKind::Source, 5), (FaultKind::Source, 15)];
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let log = MemoryLog::new(3);
        log.append(500);
        let faults = Arc::new(FaultPlan::at(&faults));
        let output = work.path().join("output");
        let job = build(model, &log, &faults, 2, &output);
        let sealer = {
            let (log, faults) = (log.clone(), Arc::clone(&faults));
            std::thread::spawn(move || {
                // Hang guard only.
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while faults.fired() < 2 && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                log.seal();
            })
        };
        let result = job
            .run(&config(work.path()))
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        sealer.join().unwrap();
        assert_eq!(faults.fired(), 2, "{model}: not every planned fault fired");
        assert!(
            result.restarts >= 2,
            "{model}: the enumerator failures did not restart"
        );
        assert!(
            result
                .failures
                .iter()
                .all(|f| f.is_injected() && f.to_string().contains("the enumerator panicked")),
            "{model}: {:?}",
            result.failures
        );
        assert_eq!(
            committed(&output),
            log.expected(),
            "{model}: not exactly once"
        );
    }
}

/// One run of the rescale chain: `parallelism` readers, restored from `from`, stopping with a
/// savepoint after 3 checkpoints (`stop`) or running to the end.
fn rescale_step(
    model: Model,
    log: &MemoryLog,
    work: &Path,
    parallelism: usize,
    from: Option<PathBuf>,
    stop: bool,
) -> Option<PathBuf> {
    let faults = Arc::new(FaultPlan::none());
    let job = build(model, log, &faults, parallelism, &work.join("output"));
    let mut config = config(work).with_restart(RestartStrategy::NONE);
    if let Some(path) = from {
        config = config.with_restore(Restore::Savepoint(path));
    }
    if stop {
        config = config.with_stop_with_savepoint(
            StopWithSavepoint::new(work.join("savepoints")).after_checkpoints(3),
        );
    }
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    result.savepoint
}

#[test]
fn a_user_split_source_rescaled_2_3_1_through_savepoints_commits_exactly_once() {
    // The log stays open during the first two runs (they cannot end before their savepoints);
    // it grows between the runs and is sealed before the last one. The savepoints hold the
    // readers' partitions with offsets as list state, spread over 3 readers, then 1.
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let log = MemoryLog::new(4);
        log.append(300);
        let first = rescale_step(model, &log, work.path(), 2, None, true)
            .unwrap_or_else(|| panic!("{model}: the first run stops with a savepoint"));
        log.append(300);
        let second = rescale_step(model, &log, work.path(), 3, Some(first), true)
            .unwrap_or_else(|| panic!("{model}: the second run stops with a savepoint"));
        log.append(300);
        log.seal();
        let third = rescale_step(model, &log, work.path(), 1, Some(second), false);
        assert!(third.is_none(), "{model}: the last run runs to its end");
        let lines = committed(&work.path().join("output"));
        assert_eq!(lines.len(), 4 * 900, "{model}");
        assert_eq!(
            lines,
            log.expected(),
            "{model}: not exactly once across the rescales"
        );
    }
}

/// Polls `reader` once: the records it emitted, and its status.
fn poll_records<S: Source<Output = String>>(
    reader: &mut SplitSourceReader<S>,
) -> (Vec<String>, InputStatus) {
    let mut emitted = Vec::new();
    let status = reader
        .poll_next(&mut ReaderOutput::new(&mut emitted))
        .unwrap();
    let records = emitted
        .into_iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect();
    (records, status)
}

/// Polls `reader` until it ends, returns what it emitted.
fn drain(reader: &mut SplitSourceReader<MemoryLogSource>) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let (records, status) = poll_records(reader);
        out.extend(records);
        match status {
            InputStatus::EndOfInput => return out,
            InputStatus::MoreAvailable => {}
            InputStatus::NothingAvailable => panic!("a sealed log always has an answer"),
        }
    }
}

#[test]
fn a_split_assigned_before_the_trigger_and_not_yet_taken_goes_back_to_the_enumerator() {
    // The enumerator assigns both partitions when it starts; checkpoint 1 is triggered before
    // either reader took its split. Reader 0 then takes partition 0 and emits one record
    // before its barrier; reader 1 takes nothing. On restore, partition 0 stays with reader 0
    // (at offset 1) and partition 1 goes back to the enumerator, which assigns it again.
    let log = MemoryLog::new(2);
    log.append(3);
    log.seal();
    let source = MemoryLogSource {
        log: log.clone(),
        faults: Arc::new(FaultPlan::none()),
    };
    let coordinator = Arc::new(SourceCoordinator::new("log", source, 2).unwrap());
    coordinator.start_attempt(None, &[]).unwrap();
    let (mut r0, mut r1) = (coordinator.reader(0), coordinator.reader(1));
    r0.restore_state(None).unwrap();
    r1.restore_state(None).unwrap();
    coordinator.checkpoint_coordinator(1);
    let mut emitted = Vec::new();
    r0.poll_next(&mut ReaderOutput::new(&mut emitted)).unwrap();
    assert_eq!(
        emitted.len(),
        1,
        "reader 0 emitted one record of partition 0"
    );
    let s0 = r0.snapshot_state(1).unwrap();
    let s1 = r1.snapshot_state(1).unwrap();
    assert_eq!(r0.held_splits().len(), 1);
    assert!(
        r1.held_splits().is_empty(),
        "reader 1 took nothing before its barrier"
    );
    drop((r0, r1));
    coordinator.end_attempt();

    coordinator
        .start_attempt(Some(1), &[Some(&s0), Some(&s1)])
        .unwrap();
    let (mut r0, mut r1) = (coordinator.reader(0), coordinator.reader(1));
    r0.restore_state(Some(&s0)).unwrap();
    r1.restore_state(Some(&s1)).unwrap();
    assert_eq!(
        drain(&mut r0),
        ["p0:1", "p0:2"],
        "partition 0 from its offset"
    );
    assert_eq!(
        drain(&mut r1),
        ["p1:0", "p1:1", "p1:2"],
        "partition 1 once, from 0"
    );
    coordinator.end_attempt();
}

/// An enumerator that tells a reader no more splits will come, then assigns it one anyway.
struct AssignsAfterTheEnd(MemoryLogSource);

struct LateEnumerator;

impl SplitEnumerator for LateEnumerator {
    type Split = PartitionSplit;

    fn handle_split_request(
        &mut self,
        subtask: usize,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        ctx.signal_no_more_splits(subtask)?;
        ctx.assign_split(
            subtask,
            PartitionSplit {
                partition: 0,
                offset: 0,
            },
        )
    }

    fn add_splits_back(&mut self, _splits: Vec<PartitionSplit>, _subtask: usize) {}

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }
}

impl Source for AssignsAfterTheEnd {
    type Output = String;
    type Split = PartitionSplit;
    type Enumerator = LateEnumerator;
    type Reader = memory_log::LogReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }
    fn create_enumerator(&self, _parallelism: usize) -> Result<LateEnumerator, SourceError> {
        Ok(LateEnumerator)
    }
    fn restore_enumerator(&self, _p: usize, _state: &[u8]) -> Result<LateEnumerator, SourceError> {
        Ok(LateEnumerator)
    }
    fn create_reader(&self, subtask: usize, parallelism: usize) -> memory_log::LogReader {
        self.0.create_reader(subtask, parallelism)
    }
}

#[test]
fn a_split_assigned_after_no_more_splits_fails_the_enumerator_naming_the_fix() {
    // The split would reach a reader that may have ended: lost. The enumerator fails instead,
    // and so does the reader that asked.
    let log = MemoryLog::new(1);
    log.append(1);
    let source = AssignsAfterTheEnd(MemoryLogSource {
        log,
        faults: Arc::new(FaultPlan::none()),
    });
    let coordinator = Arc::new(SourceCoordinator::new("late", source, 1).unwrap());
    coordinator.start_attempt(None, &[]).unwrap();
    let mut reader = coordinator.reader(0);
    reader.restore_state(None).unwrap();
    let err = reader
        .poll_next(&mut ReaderOutput::new(&mut Vec::new()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("after telling it no more splits would come")
            && err.contains("assign splits before signal_no_more_splits"),
        "{err}"
    );
    coordinator.end_attempt();
}

/// Assigns the partition a reader names in a custom event; answers requests with nothing.
struct OnEvent(MemoryLogSource);

struct EventEnumerator;

impl SplitEnumerator for EventEnumerator {
    type Split = PartitionSplit;

    fn handle_split_request(
        &mut self,
        _subtask: usize,
        _ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        Ok(())
    }

    fn handle_reader_event(
        &mut self,
        subtask: usize,
        event: Vec<u8>,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        let partition = usize::from(event[0]);
        ctx.send_event(subtask, b"ack".to_vec())?;
        ctx.assign_split(
            subtask,
            PartitionSplit {
                partition,
                offset: 0,
            },
        )
    }

    fn add_splits_back(&mut self, _splits: Vec<PartitionSplit>, _subtask: usize) {}

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }
}

impl Source for OnEvent {
    type Output = String;
    type Split = PartitionSplit;
    type Enumerator = EventEnumerator;
    type Reader = memory_log::LogReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::ContinuousUnbounded
    }
    fn create_enumerator(&self, _parallelism: usize) -> Result<EventEnumerator, SourceError> {
        Ok(EventEnumerator)
    }
    fn restore_enumerator(&self, _p: usize, _state: &[u8]) -> Result<EventEnumerator, SourceError> {
        Ok(EventEnumerator)
    }
    fn create_reader(&self, subtask: usize, parallelism: usize) -> memory_log::LogReader {
        self.0.create_reader(subtask, parallelism)
    }
}

#[test]
fn custom_events_reach_the_enumerator_and_its_answers_reach_the_reader_in_order() {
    let source = OnEvent(MemoryLogSource {
        log: MemoryLog::new(3),
        faults: Arc::new(FaultPlan::none()),
    });
    let coordinator = Arc::new(SourceCoordinator::new("events", source, 2).unwrap());
    coordinator.start_attempt(None, &[]).unwrap();
    assert_eq!(
        coordinator
            .reader_event(1, ReaderEvent::Custom(vec![2]))
            .unwrap(),
        [
            SourceEvent::Custom(b"ack".to_vec()),
            SourceEvent::Split(PartitionSplit {
                partition: 2,
                offset: 0
            }),
        ]
    );
    assert!(
        coordinator
            .reader_event(0, ReaderEvent::SplitRequest)
            .unwrap()
            .is_empty(),
        "a request the enumerator keeps gets no answer yet"
    );
    coordinator.end_attempt();
}

/// Polls `reader` (calling the coordinator's periodic discovery whenever it has nothing) until
/// it ends; panics if it never does.
fn read_discovering(
    coordinator: &SourceCoordinator<streamtask::files::FileSource>,
    reader: &mut SplitSourceReader<streamtask::files::FileSource>,
    until_done: impl Fn(),
) -> Vec<String> {
    let mut out = Vec::new();
    for round in 0..2_000 {
        let (records, status) = poll_records(reader);
        out.extend(records);
        match status {
            InputStatus::EndOfInput => return out,
            InputStatus::MoreAvailable => {}
            InputStatus::NothingAvailable => {
                if round == 100 {
                    until_done();
                }
                std::thread::sleep(Duration::from_millis(2));
                coordinator.discover();
            }
        }
    }
    panic!("the reader waits for ever after reading {out:?}");
}

#[test]
fn a_request_answered_at_a_discovery_with_a_claimed_split_is_asked_again() {
    // Checkpoint 1 is triggered before the continuous file source listed anything; then the
    // reader asks for a split, the discovery answers it with a.txt, and the reader reads it to
    // the end before its barrier. After the restore, the enumerator (restored from before the
    // listing) lists a.txt and b.txt again and answers the restored reader's request with
    // a.txt, which that reader already finished: the answer is dropped, and the request must
    // be asked again so the reader gets b.txt rather than waiting for ever.
    let input = tempfile::tempdir().unwrap();
    std::fs::write(input.path().join("a.txt"), "a1\na2\n").unwrap();
    std::fs::write(input.path().join("b.txt"), "b1\n").unwrap();
    let source = streamtask::files::FileSource::for_dir(input.path())
        .monitor_continuously(Duration::from_millis(1))
        .end_marker("_done");
    let coordinator = Arc::new(SourceCoordinator::new("files", source, 1).unwrap());
    coordinator.start_attempt(None, &[]).unwrap();
    let mut reader = coordinator.reader(0);
    reader.restore_state(None).unwrap();
    coordinator.checkpoint_coordinator(1);
    let mut first = Vec::new();
    while first.len() < 2 {
        first.extend(poll_records(&mut reader).0);
        std::thread::sleep(Duration::from_millis(2));
        coordinator.discover();
    }
    assert_eq!(
        first[0].chars().next(),
        first[1].chars().next(),
        "one file first"
    );
    // Let the reader notice that its split ended.
    assert!(poll_records(&mut reader).0.is_empty());
    let state = reader.snapshot_state(1).unwrap();
    drop(reader);
    coordinator.end_attempt();

    coordinator.start_attempt(Some(1), &[Some(&state)]).unwrap();
    let mut reader = coordinator.reader(0);
    reader.restore_state(Some(&state)).unwrap();
    let marker = input.path().join("_done");
    let rest = read_discovering(&coordinator, &mut reader, || {
        std::fs::write(&marker, "").unwrap();
    });
    let mut all: Vec<String> = first.into_iter().chain(rest).collect();
    all.sort();
    assert_eq!(all, ["a1", "a2", "b1"], "each line once");
    coordinator.end_attempt();
}
