//! FLIP-27 splits under every model: a bounded `FileSource` whose split
//! enumerator hands byte-range splits to parallel readers on request, the readers' snapshots
//! holding their splits with positions, and the committed output holding every line exactly
//! once, also with faults injected in the readers. A split assigned after its reader's snapshot
//! goes back to the enumerator on restore; a reader with no split is idle until the
//! enumerator can answer.

use std::path::Path;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::files::{
    EnumeratorCheckpoint, FileReaderState, FileSource, FileSplit, MonitorState, SplitProgress,
};
use streamtask::prelude::*;
use streamtask::source::{
    CoordinatorSnapshot, ReaderEvent, SourceCoordinator, SourceEvent, SourceSplit,
    SplitSourceReader, SplitStateItem,
};
use streamtask_core::keygroup::ListState;
use streamtask_core::operator::Emitted;
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

#[path = "common/split_files.rs"]
mod split_files;

use split_files::{expected, lines_of};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

fn write_files(dir: &Path, files: usize, per_file: usize) {
    for f in 0..files {
        let mut text = lines_of(f, per_file).join("\n");
        text.push('\n');
        std::fs::write(dir.join(format!("f{f:02}.txt")), text).unwrap();
    }
}

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

/// Runs `from_source` under `model` with `parallelism` readers; returns the sorted committed
/// lines and the restarts.
fn run(
    model: Model,
    (files, per_file): (usize, usize),
    split_bytes: u64,
    parallelism: usize,
    faults: FaultPlan,
) -> (Vec<String>, u32) {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_files(input.path(), files, per_file);
    let faults = Arc::new(faults);
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    env.from_source(
        "files",
        FileSource::for_dir(input.path())
            .with_split_bytes(split_bytes)
            .with_faults(Arc::clone(&faults)),
        parallelism,
    )
    .collect_sink("collect", &out);
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
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
    eprintln!(
        "{model}: {} checkpoints completed, {} restarts",
        result.checkpoints_completed, result.restarts
    );
    let mut lines = out.committed();
    lines.sort();
    (lines, result.restarts)
}

#[test]
fn smoke() {
    // More readers than splits: the readers left without one get NoMoreSplits and end.
    for model in MODELS {
        let (lines, restarts) = run(model, (2, 5), 1 << 20, 3, FaultPlan::none());
        assert_eq!(restarts, 0, "{model}");
        assert_eq!(lines, expected(2, 5), "{model}");
    }
}

#[test]
fn every_line_is_committed_exactly_once_through_reader_faults() {
    // 4 files of 3000 lines, splits of 4 KiB (about 12 a file), 3 readers: faults at the
    // 1500th and 7000th line emitted, so restores happen mid-split with splits assigned.
    let faults = [(FaultKind::Operator, 1500), (FaultKind::Operator, 7000)];
    for model in MODELS {
        let (clean, restarts) = run(model, (4, 3000), 4096, 3, FaultPlan::none());
        assert_eq!(restarts, 0, "{model}: restarted without faults");
        assert_eq!(clean, expected(4, 3000), "{model}: output without faults");
        let (faulty, restarts) = run(model, (4, 3000), 4096, 3, FaultPlan::at(&faults));
        assert!(restarts >= 1, "{model}: the faults did not restart the job");
        assert_eq!(
            faulty,
            expected(4, 3000),
            "{model}: output with faults is not exactly once"
        );
    }
}

fn poll(reader: &mut SplitSourceReader<FileSource>, sink: &mut Vec<String>) -> InputStatus {
    let mut out = Vec::new();
    let status = {
        let mut output = ReaderOutput::new(&mut out);
        reader.poll_next(&mut output).unwrap()
    };
    sink.extend(out.into_iter().filter_map(|e| match e {
        Emitted::Record(r) => Some(r.value),
        _ => None,
    }));
    status
}

/// Polls until the reader holds no split and would ask the enumerator for one.
fn read_current_split(reader: &mut SplitSourceReader<FileSource>, sink: &mut Vec<String>) {
    loop {
        let before = sink.len();
        assert_eq!(poll(reader, sink), InputStatus::MoreAvailable);
        if sink.len() == before {
            return; // the split ended
        }
    }
}

#[test]
fn a_split_assigned_after_the_snapshot_goes_back_to_the_enumerator_on_restore() {
    let input = tempfile::tempdir().unwrap();
    write_files(input.path(), 3, 4);
    let enumerator = coordinator(input.path());
    let reader = |subtask| enumerator.reader(subtask);

    // First attempt.
    enumerator.start_attempt(None, &[]).unwrap();
    assert_eq!(splits(&enumerator).len(), 3);
    let mut r0 = reader(0);
    let mut r1 = reader(1);
    r0.restore_state(None).unwrap();
    r1.restore_state(None).unwrap();
    // Reader 0 gets split 0, reads one line; reader 1 gets split 1, reads it all.
    let mut out0 = Vec::new();
    assert_eq!(poll(&mut r0, &mut out0), InputStatus::MoreAvailable);
    assert_eq!(out0, lines_of(0, 4)[..1]);
    let mut out1 = Vec::new();
    read_current_split(&mut r1, &mut out1);
    assert_eq!(out1, lines_of(1, 4));
    // Checkpoint N, triggered: the enumerator's snapshot (split 2 unassigned) is taken.
    enumerator.checkpoint_coordinator(1);
    let s0 = r0.snapshot_state(1).unwrap();
    let s1 = r1.snapshot_state(1).unwrap();
    assert!(
        FileReaderState::decode(&s1).unwrap().pending.is_empty(),
        "reader 1 finished split 1: it holds nothing"
    );
    // After N: reader 1 is assigned split 2 and reads a line; then the attempt fails.
    assert_eq!(poll(&mut r1, &mut out1), InputStatus::MoreAvailable);
    assert_eq!(out1.last().unwrap(), &lines_of(2, 4)[0]);
    drop((r0, r1));

    // Restore from N: split 2 is unassigned in the enumerator's snapshot, which reader 0
    // carried; reader 0 continues split 0 after its first line.
    enumerator
        .start_attempt(Some(1), &[Some(&s0), Some(&s1)])
        .unwrap();
    let mut r0 = reader(0);
    let mut r1 = reader(1);
    r0.restore_state(Some(&s0)).unwrap();
    r1.restore_state(Some(&s1)).unwrap();
    let mut again0 = Vec::new();
    read_current_split(&mut r0, &mut again0);
    assert_eq!(again0, lines_of(0, 4)[1..]);
    let mut again1 = Vec::new();
    read_current_split(&mut r1, &mut again1);
    assert_eq!(again1, lines_of(2, 4), "split 2 was assigned again");
    let waker = Waker::noop();
    r0.register_waker(waker);
    assert_eq!(poll(&mut r0, &mut Vec::new()), InputStatus::EndOfInput);
    assert_eq!(poll(&mut r1, &mut Vec::new()), InputStatus::EndOfInput);
}

#[test]
fn a_split_assigned_between_the_trigger_and_the_barrier_is_read_once() {
    // Splits 0 and 1 are unassigned in the enumerator's snapshot of checkpoint 1, then, before
    // the readers' barriers, reader 1 reads split 0 to its end and split 1 partly: the
    // readers' snapshots win on restore, neither split is assigned again.
    let input = tempfile::tempdir().unwrap();
    write_files(input.path(), 3, 4);
    let enumerator = coordinator(input.path());
    let reader = |subtask| enumerator.reader(subtask);
    enumerator.start_attempt(None, &[]).unwrap();
    let (mut r0, mut r1) = (reader(0), reader(1));
    r0.restore_state(None).unwrap();
    r1.restore_state(None).unwrap();
    enumerator.checkpoint_coordinator(1);
    // After the trigger, before the barriers: reader 1 reads all of split 0, and one line of
    // split 1.
    let mut out1 = Vec::new();
    read_current_split(&mut r1, &mut out1);
    assert_eq!(poll(&mut r1, &mut out1), InputStatus::MoreAvailable);
    assert_eq!(out1.len(), 5);
    let s0 = r0.snapshot_state(1).unwrap();
    let s1 = r1.snapshot_state(1).unwrap();
    drop((r0, r1));
    enumerator
        .start_attempt(Some(1), &[Some(&s0), Some(&s1)])
        .unwrap();
    let (mut r0, mut r1) = (reader(0), reader(1));
    r0.restore_state(Some(&s0)).unwrap();
    r1.restore_state(Some(&s1)).unwrap();
    let mut again = Vec::new();
    read_current_split(&mut r1, &mut again);
    assert_eq!(again, lines_of(1, 4)[1..], "reader 1 continues split 1");
    read_current_split(&mut r0, &mut again);
    assert_eq!(again[3..], lines_of(2, 4), "only split 2 is assigned again");
    assert_eq!(poll(&mut r0, &mut Vec::new()), InputStatus::EndOfInput);
    assert_eq!(poll(&mut r1, &mut Vec::new()), InputStatus::EndOfInput);
}

#[test]
fn a_restore_without_the_enumerator_snapshot_of_its_checkpoint_is_refused() {
    let input = tempfile::tempdir().unwrap();
    write_files(input.path(), 2, 2);
    let enumerator = coordinator(input.path());
    enumerator.start_attempt(None, &[]).unwrap();
    let all = splits(&enumerator);
    let snapshot = EnumeratorCheckpoint {
        unassigned: all[1..].to_vec(),
        seen: MonitorState::default(),
        discovery_done: true,
    };
    let coordinator_state = ListState::new(vec![SplitStateItem::Coordinator {
        checkpoint: 4,
        state: CoordinatorSnapshot {
            enumerator: streamtask_core::state::encode(&snapshot).unwrap(),
            ..CoordinatorSnapshot::default()
        },
    }])
    .encode()
    .unwrap();
    let reader = ListState::new(vec![SplitStateItem::Split(
        SplitProgress::fresh(all[0].clone()).encode().unwrap(),
    )])
    .encode()
    .unwrap();
    let err = enumerator
        .start_attempt(Some(5), &[Some(&coordinator_state), Some(&reader)])
        .unwrap_err();
    assert!(err.to_string().contains("no enumerator snapshot"), "{err}");
    enumerator
        .start_attempt(Some(4), &[Some(&coordinator_state), Some(&reader)])
        .unwrap();
    assert_eq!(
        enumerator
            .reader_event(1, ReaderEvent::SplitRequest)
            .unwrap(),
        [SourceEvent::Split(SplitProgress::fresh(all[1].clone()))]
    );
    assert_eq!(
        enumerator
            .reader_event(1, ReaderEvent::SplitRequest)
            .unwrap(),
        [SourceEvent::NoMoreSplits]
    );
}

/// The coordinator of a bounded file source over `dir` (one split per file) for 2 readers.
fn coordinator(dir: &Path) -> Arc<SourceCoordinator<FileSource>> {
    Arc::new(SourceCoordinator::new("files", FileSource::for_dir(dir), 2).unwrap())
}

/// The splits the running attempt's enumerator has not assigned, in order.
fn splits(coordinator: &SourceCoordinator<FileSource>) -> Vec<FileSplit> {
    coordinator
        .with_enumerator(|e| e.state().unassigned.clone())
        .expect("an attempt runs")
}

#[test]
fn a_missing_directory_fails_the_build_with_the_fix() {
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = CollectHandle::new();
    env.from_source("files", FileSource::for_dir("/nonexistent/streamtask-k"), 2)
        .collect_sink("collect", &out);
    let err = env.build().unwrap_err().to_string();
    assert!(
        err.contains("give an existing, readable directory"),
        "{err}"
    );
}
