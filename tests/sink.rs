//! The sinks: two-phase commit to files (visibility, crash recovery, subtasks sharing a
//! directory, aborted checkpoints, end of input) and the in-memory collecting sink.

use std::fs;
use std::path::Path;

use proptest::prelude::*;
use streamtask::sink::{
    CollectHandle, CollectSink, SinkError, TwoPhaseCommitFileSink, commit_finished,
    committed_files, discard_output, read_committed,
};
use streamtask_core::operator::Operator;
use streamtask_core::operator::{Map, OperatorExt};
use streamtask_core::testing::OperatorHarness;
use streamtask_core::{OperatorError, state::TaskSnapshot};

type Sink = TwoPhaseCommitFileSink<&'static str>;

fn sink(dir: &Path, subtask: usize) -> Sink {
    TwoPhaseCommitFileSink::new("out", dir, subtask, |s: &&'static str| s.to_string())
}

fn harness(dir: &Path, subtask: usize) -> OperatorHarness<Sink> {
    let mut h = OperatorHarness::new(sink(dir, subtask));
    h.open().unwrap();
    h
}

fn restored(dir: &Path, subtask: usize, snapshot: &TaskSnapshot) -> OperatorHarness<Sink> {
    let mut h = OperatorHarness::restored(sink(dir, subtask), snapshot);
    h.open().unwrap();
    h
}

fn process_all(h: &mut OperatorHarness<Sink>, values: &[&'static str]) {
    for v in values {
        h.process(v).unwrap();
    }
}

fn committed(dir: &Path) -> Vec<String> {
    read_committed(dir).unwrap()
}

/// Names of the hidden (uncommitted) files in `dir`, sorted.
fn hidden(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    names
}

fn sink_message(err: OperatorError) -> String {
    match err {
        OperatorError::Sink { source, .. } => source.to_string(),
        other => panic!("expected a sink error, got {other:?}"),
    }
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    process_all(&mut h, &["a", "b"]);
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
    assert!(hidden(dir.path()).is_empty());
}

#[test]
fn records_become_visible_only_after_their_checkpoint_completes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    process_all(&mut h, &["a", "b"]);
    assert!(committed(dir.path()).is_empty());
    assert_eq!(hidden(dir.path()), vec![".part-00000-00000000.inprogress"]);

    h.snapshot(1).unwrap();
    assert!(
        committed(dir.path()).is_empty(),
        "pre-committed is not visible"
    );
    assert_eq!(hidden(dir.path()), vec![".part-00000-00000000.pending-1"]);
    assert_eq!(h.operator().pending_checkpoints(), vec![1]);

    h.process("c").unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
    assert_eq!(
        committed_files(dir.path()).unwrap(),
        vec![dir.path().join("part-00000-00000000")]
    );
    assert_eq!(hidden(dir.path()), vec![".part-00000-00000001.inprogress"]);
    assert!(h.operator().pending_checkpoints().is_empty());
}

#[test]
fn a_checkpoint_without_new_records_makes_no_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.snapshot(1).unwrap();
    h.process("a").unwrap();
    h.snapshot(2).unwrap();
    h.snapshot(3).unwrap();
    h.notify_checkpoint_complete(3).unwrap();
    assert_eq!(committed_files(dir.path()).unwrap().len(), 1);
    assert_eq!(committed(dir.path()), vec!["a"]);
    assert!(hidden(dir.path()).is_empty());
}

#[test]
fn crash_between_pre_commit_and_commit_neither_loses_nor_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    process_all(&mut h, &["a", "b"]);
    let checkpoint = h.snapshot(1).unwrap(); // pre-committed; checkpoint 1 completes...
    h.process("c").unwrap(); // ...the crashed attempt wrote on after the barrier...
    drop(h); // ...and died before the completion notice reached it.
    assert!(committed(dir.path()).is_empty());

    // The next attempt restores checkpoint 1: its transaction is recommitted, the in-progress
    // file with "c" is aborted, and the source replays "c".
    let mut h = restored(dir.path(), 0, &checkpoint);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
    assert!(hidden(dir.path()).is_empty(), "leftovers aborted");
    process_all(&mut h, &["c", "d"]);
    h.snapshot(2).unwrap();
    // A late notice for checkpoint 1 from the old attempt's coordinator changes nothing.
    h.notify_checkpoint_complete(1).unwrap();
    h.notify_checkpoint_complete(2).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b", "c", "d"]);
}

#[test]
fn crash_before_any_checkpoint_aborts_everything_on_a_fresh_restore() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    process_all(&mut h, &["a", "b"]);
    h.snapshot(1).unwrap(); // pre-committed, but checkpoint 1 never completes
    h.process("c").unwrap();
    h.close().unwrap(); // cancelled: close without finish commits nothing
    drop(h);
    assert_eq!(hidden(dir.path()).len(), 2);

    let mut h = harness(dir.path(), 0); // no checkpoint completed: restore from nothing
    assert!(hidden(dir.path()).is_empty());
    assert!(committed(dir.path()).is_empty());
    process_all(&mut h, &["a", "b", "c"]);
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b", "c"]);
}

#[test]
fn restore_from_an_earlier_checkpoint_aborts_later_pending_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let first = h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.snapshot(2).unwrap(); // checkpoint 2 fails to complete
    drop(h);

    let mut h = restored(dir.path(), 0, &first);
    assert!(hidden(dir.path()).is_empty());
    h.process("b").unwrap(); // replayed
    h.snapshot(3).unwrap();
    h.notify_checkpoint_complete(3).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn falling_back_to_an_older_checkpoint_rewinds_the_output_committed_after_it() {
    // The newest checkpoint is damaged and the restore falls back to an older one;
    // the output checkpoint 2 committed must go, or its records (replayed) would appear twice.
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let first = h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.snapshot(2).unwrap();
    h.notify_checkpoint_complete(2).unwrap(); // committed "b"; then checkpoint 2 is damaged
    drop(h);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);

    let mut h = restored(dir.path(), 0, &first);
    assert_eq!(
        committed(dir.path()),
        vec!["a"],
        "checkpoint 2's output rewound"
    );
    h.process("b").unwrap(); // replayed
    h.snapshot(3).unwrap();
    h.notify_checkpoint_complete(3).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn a_restore_of_a_finished_run_rewinds_its_final_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let first = h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    drop(h);
    commit_finished(dir.path()).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);

    let mut h = restored(dir.path(), 0, &first);
    assert_eq!(committed(dir.path()), vec!["a"]);
    h.process("b").unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    commit_finished(dir.path()).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn discard_output_removes_every_transaction_file_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.snapshot(2).unwrap();
    h.process("c").unwrap();
    drop(h);
    fs::write(dir.path().join("README"), "not ours").unwrap();
    let removed = discard_output(dir.path()).unwrap();
    assert_eq!(removed.len(), 3, "{removed:?}");
    assert!(committed(dir.path()).is_empty());
    assert!(hidden(dir.path()).is_empty());
    assert!(dir.path().join("README").exists());
    assert!(
        discard_output(dir.path().join("missing"))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn subtasks_sharing_a_directory_never_touch_each_others_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut s0 = harness(dir.path(), 0);
    let mut s1 = harness(dir.path(), 1);
    s0.process("0a").unwrap();
    s1.process("1a").unwrap();
    let s0_checkpoint = s0.snapshot(1).unwrap();
    s1.snapshot(1).unwrap();
    s1.process("1b").unwrap(); // subtask 1: one pending, one in progress

    // Subtask 0 fails and restores; subtask 1's files are none of its business.
    drop(s0);
    let mut s0 = restored(dir.path(), 0, &s0_checkpoint);
    assert_eq!(
        hidden(dir.path()),
        vec![
            ".part-00001-00000000.pending-1",
            ".part-00001-00000001.inprogress"
        ]
    );
    // Subtask 1 restores from nothing; subtask 0's committed file stays.
    drop(s1);
    let mut s1 = harness(dir.path(), 1);
    assert!(hidden(dir.path()).is_empty());
    assert_eq!(committed(dir.path()), vec!["0a"]);

    s1.process("1a").unwrap();
    s0.process("0b").unwrap();
    s0.snapshot(2).unwrap();
    s1.snapshot(2).unwrap();
    s0.notify_checkpoint_complete(2).unwrap();
    s1.notify_checkpoint_complete(2).unwrap();
    // Name order: subtask, then transaction.
    assert_eq!(committed(dir.path()), vec!["0a", "0b", "1a"]);
}

#[test]
fn an_aborted_checkpoints_transaction_is_committed_by_the_next_completed_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_aborted(1).unwrap();
    assert_eq!(h.operator().pending_checkpoints(), vec![1]);
    assert!(committed(dir.path()).is_empty());

    h.process("b").unwrap();
    h.snapshot(2).unwrap();
    h.notify_checkpoint_complete(2).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
    assert!(h.operator().pending_checkpoints().is_empty());
}

#[test]
fn the_state_of_a_later_checkpoint_carries_an_aborted_checkpoints_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_aborted(1).unwrap();
    h.process("b").unwrap();
    let second = h.snapshot(2).unwrap(); // completes, but the notice is lost in a crash
    drop(h);

    let _h = restored(dir.path(), 0, &second);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
    assert!(hidden(dir.path()).is_empty());
}

#[test]
fn finish_pre_commits_a_final_file_that_commit_finished_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.snapshot(2).unwrap(); // its completion notice never arrives: the task finishes first
    h.process("c").unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(committed(dir.path()), vec!["a"]);
    assert_eq!(
        hidden(dir.path()),
        vec![
            ".part-00000-00000001.pending-2",
            ".part-00000-00000002.final"
        ]
    );

    // The whole job finished successfully.
    assert_eq!(commit_finished(dir.path()).unwrap(), 2);
    assert_eq!(committed(dir.path()), vec!["a", "b", "c"]);
    assert!(hidden(dir.path()).is_empty());
    assert_eq!(commit_finished(dir.path()).unwrap(), 0, "idempotent");
    assert_eq!(committed(dir.path()), vec!["a", "b", "c"]);
}

#[test]
fn a_draining_savepoints_snapshot_after_finish_commits_the_last_records_with_the_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap(); // its notice comes with the savepoint's
    h.process("b").unwrap();
    h.end_input().unwrap(); // the drain's finish: "b" pre-committed as final
    assert_eq!(
        hidden(dir.path()),
        vec![
            ".part-00000-00000000.pending-1",
            ".part-00000-00000001.final"
        ]
    );
    let savepoint = h.snapshot(2).unwrap(); // the draining savepoint, after finish
    assert_eq!(
        hidden(dir.path()),
        vec![
            ".part-00000-00000000.pending-1",
            ".part-00000-00000001.pending-2"
        ],
        "the final transaction is pending for the savepoint"
    );
    assert!(committed(dir.path()).is_empty());
    h.notify_checkpoint_complete(2).unwrap();
    h.close().unwrap();
    assert_eq!(
        committed(dir.path()),
        vec!["a", "b"],
        "committed by the savepoint"
    );
    assert!(hidden(dir.path()).is_empty());
    assert_eq!(
        commit_finished(dir.path()).unwrap(),
        0,
        "nothing left for the end"
    );

    // The drained savepoint's restore finds everything committed: nothing twice.
    let mut h = restored(dir.path(), 0, &savepoint);
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(commit_finished(dir.path()).unwrap(), 0);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn a_failed_attempts_final_file_is_aborted_by_the_restore() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.process("b").unwrap();
    h.end_input().unwrap(); // this subtask finished...
    h.close().unwrap();
    assert_eq!(hidden(dir.path()), vec![".part-00000-00000001.final"]);

    // ...but another task failed, so the job restarts from checkpoint 1 and replays "b".
    let mut h = restored(dir.path(), 0, &checkpoint);
    assert!(hidden(dir.path()).is_empty());
    h.process("b").unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(commit_finished(dir.path()).unwrap(), 1);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn recommit_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap(); // a duplicate notice
    drop(h);
    assert_eq!(committed(dir.path()), vec!["a"]);

    // Restoring a checkpoint whose transaction is committed already: nothing to do, twice.
    drop(restored(dir.path(), 0, &checkpoint));
    let mut h = restored(dir.path(), 0, &checkpoint);
    assert_eq!(committed(dir.path()), vec!["a"]);
    h.process("b").unwrap();
    h.snapshot(2).unwrap();
    h.notify_checkpoint_complete(2).unwrap();
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn numbering_continues_past_committed_files_so_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    drop(h);

    // A fresh start in a directory with committed output (no state to restore).
    let mut h = harness(dir.path(), 0);
    h.process("b").unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(committed_files(dir.path()).unwrap().len(), 2);
    assert_eq!(committed(dir.path()), vec!["a", "b"]);
}

#[test]
fn a_lost_pending_transaction_is_a_typed_error_on_restore() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    drop(h);
    fs::remove_file(dir.path().join(".part-00000-00000000.pending-1")).unwrap();

    let mut h = OperatorHarness::restored(sink(dir.path(), 0), &checkpoint);
    let message = sink_message(h.open().unwrap_err());
    assert!(
        message.contains("transaction 0 of subtask 0 is lost"),
        "{message}"
    );
    assert!(
        message.contains("do not delete its hidden files"),
        "{message}"
    );
}

#[test]
fn a_formatter_that_returns_a_line_break_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    let message = sink_message(h.process("two\nlines").unwrap_err());
    assert!(message.contains("line break"), "{message}");
    assert!(message.contains("one line per record"), "{message}");
    let message = sink_message(h.process("carriage\rreturn").unwrap_err());
    assert!(message.contains("line break"), "{message}");
    // Nothing was written for the refused records.
    assert!(hidden(dir.path()).is_empty());
}

#[test]
fn the_line_break_error_hands_the_line_back() {
    let err = SinkError::LineBreak {
        dir: "out".into(),
        line: "a\nb".to_string(),
    };
    assert!(err.to_string().contains("\"a\\nb\""), "{err}");
    assert_eq!(err.into_line().as_deref(), Some("a\nb"));
}

/// The sink's transactions are union state: after a rescale a subtask may get the
/// state of subtasks that no longer exist, and commits what they pre-committed.
#[test]
fn another_subtasks_state_is_recommitted_as_union_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    drop(h);
    let mut h = OperatorHarness::restored(sink(dir.path(), 1), &checkpoint);
    h.open().unwrap();
    assert_eq!(read_committed(dir.path()).unwrap(), vec!["a"]);
    assert!(hidden(dir.path()).is_empty(), "{:?}", hidden(dir.path()));
    // Subtask 1 numbers its own transactions from 0: subtask 0's are not its.
    h.process("b").unwrap();
    h.snapshot(2).unwrap();
    h.notify_checkpoint_complete(2).unwrap();
    let mut got = read_committed(dir.path()).unwrap();
    got.sort_unstable();
    assert_eq!(got, vec!["a", "b"]);
}

#[test]
fn calls_out_of_lifecycle_order_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path(), 0);
    h.process("a").unwrap();
    h.end_input().unwrap();
    let message = sink_message(h.process("late").unwrap_err());
    assert!(
        message.contains("process_element called while the sink"),
        "{message}"
    );
    assert!(message.contains("is finished"), "{message}");
    // One snapshot after `finish` is a draining savepoint's; a second has nothing to cover.
    h.snapshot(1).unwrap();
    let message = sink_message(h.snapshot(2).unwrap_err());
    assert!(message.contains("snapshot_state called"), "{message}");
    assert!(message.contains("is drained"), "{message}");
    h.close().unwrap();
    assert!(h.notify_checkpoint_complete(1).is_err());
}

#[test]
fn the_sink_ends_a_chain() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Map::new("double", |x: u32| x * 2).then(TwoPhaseCommitFileSink::new(
        "out",
        dir.path(),
        0,
        |x: &u32| x.to_string(),
    ));
    let mut h = OperatorHarness::new(chain);
    h.open().unwrap();
    for x in 1..=3 {
        h.process(x).unwrap();
    }
    let checkpoint = h.snapshot(1).unwrap();
    assert!(checkpoint.get(&TaskSnapshot::operator_key(1)).is_some());
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(committed(dir.path()), vec!["2", "4", "6"]);
}

// ---- CollectSink ----

fn collect(handle: &CollectHandle<u32>, subtask: usize) -> OperatorHarness<CollectSink<u32>> {
    let mut h = OperatorHarness::new(CollectSink::new("collect", handle).with_subtask(subtask));
    h.open().unwrap();
    h
}

fn collect_restored(
    handle: &CollectHandle<u32>,
    subtask: usize,
    snapshot: &TaskSnapshot,
) -> OperatorHarness<CollectSink<u32>> {
    let sink = CollectSink::new("collect", handle).with_subtask(subtask);
    let mut h = OperatorHarness::restored(sink, snapshot);
    h.open().unwrap();
    h
}

#[test]
fn collect_sink_commits_on_checkpoint_completion() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    h.process(2).unwrap();
    assert_eq!(handle.received(), vec![1, 2]);
    assert!(handle.committed().is_empty());
    h.snapshot(1).unwrap();
    h.process(3).unwrap();
    assert!(handle.committed().is_empty());
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(handle.committed(), vec![1, 2]);
    assert_eq!(handle.received(), vec![1, 2, 3]);
}

#[test]
fn collect_sink_commits_its_last_records_with_a_draining_savepoint_after_finish() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    h.snapshot(1).unwrap(); // its notice comes with the savepoint's
    h.process(2).unwrap();
    h.end_input().unwrap(); // the drain's finish
    let savepoint = h.snapshot(2).unwrap(); // the draining savepoint, after finish
    assert!(handle.committed().is_empty());
    h.notify_checkpoint_complete(2).unwrap();
    h.close().unwrap();
    assert_eq!(handle.committed(), vec![1, 2], "committed by the savepoint");
    assert_eq!(handle.commit_finished(), 0, "nothing left for the end");

    // The drained savepoint's restore commits nothing twice.
    let mut h = collect_restored(&handle, 0, &savepoint);
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(handle.commit_finished(), 0);
    assert_eq!(handle.committed(), vec![1, 2]);
}

#[test]
fn collect_sink_received_counts_replays_committed_does_not() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    h.process(2).unwrap();
    h.snapshot(2).unwrap(); // never completes
    h.process(3).unwrap();
    drop(h); // crash; checkpoint 1 completed without its notice arriving

    let mut h = collect_restored(&handle, 0, &checkpoint);
    assert_eq!(handle.committed(), vec![1], "recommitted by the restore");
    for x in [2, 3, 4] {
        h.process(x).unwrap(); // replayed and new
    }
    h.snapshot(3).unwrap();
    h.notify_checkpoint_complete(1).unwrap(); // late, changes nothing
    h.notify_checkpoint_complete(3).unwrap();
    assert_eq!(handle.received(), vec![1, 2, 3, 2, 3, 4]);
    assert_eq!(handle.committed(), vec![1, 2, 3, 4]);

    // Restoring the same checkpoint again does not commit its transaction twice.
    drop(h);
    drop(collect_restored(&handle, 0, &checkpoint));
    assert_eq!(handle.committed(), vec![1, 2, 3, 4]);
}

#[test]
fn collect_sink_aborted_checkpoint_is_committed_by_the_next_one() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    h.snapshot(1).unwrap();
    h.notify_checkpoint_aborted(1).unwrap();
    h.process(2).unwrap();
    h.snapshot(2).unwrap();
    assert!(handle.committed().is_empty());
    h.notify_checkpoint_complete(2).unwrap();
    assert_eq!(handle.committed(), vec![1, 2]);
}

#[test]
fn collect_sink_final_records_wait_for_commit_finished_and_die_with_a_restore() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    let checkpoint = h.snapshot(1).unwrap();
    h.process(2).unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    assert!(handle.committed().is_empty());

    // The job failed elsewhere: the restore recommits checkpoint 1 and drops the final records.
    let mut h = collect_restored(&handle, 0, &checkpoint);
    assert_eq!(handle.committed(), vec![1]);
    assert_eq!(handle.commit_finished(), 0);
    h.process(2).unwrap();
    h.end_input().unwrap();
    h.close().unwrap();
    assert_eq!(handle.commit_finished(), 1);
    assert_eq!(handle.committed(), vec![1, 2]);
    assert_eq!(handle.commit_finished(), 0, "idempotent");
}

#[test]
fn collect_sink_pending_transactions_at_finish_are_committed_once() {
    let handle = CollectHandle::new();
    let mut h = collect(&handle, 0);
    h.process(1).unwrap();
    h.snapshot(1).unwrap();
    h.process(2).unwrap();
    h.end_input().unwrap();
    h.notify_checkpoint_complete(1).unwrap(); // a late notice after finish commits 1...
    h.close().unwrap();
    assert_eq!(handle.committed(), vec![1]);
    assert_eq!(handle.commit_finished(), 1); // ...so commit_finished only commits 2
    assert_eq!(handle.committed(), vec![1, 2]);
}

#[test]
fn collect_sink_subtasks_share_a_handle() {
    let handle = CollectHandle::new();
    let mut s0 = collect(&handle, 0);
    let mut s1 = collect(&handle, 1);
    s0.process(10).unwrap();
    s1.process(20).unwrap();
    s0.snapshot(1).unwrap();
    let s1_checkpoint = s1.snapshot(1).unwrap();
    s0.notify_checkpoint_complete(1).unwrap();
    s1.notify_checkpoint_complete(1).unwrap();
    s1.process(21).unwrap();
    s1.end_input().unwrap();

    // Subtask 1's restore drops only its own final records.
    drop(s1);
    let _s1 = collect_restored(&handle, 1, &s1_checkpoint);
    s0.process(11).unwrap();
    s0.end_input().unwrap();
    assert_eq!(handle.commit_finished(), 1);
    assert_eq!(handle.committed(), vec![10, 20, 11]);

    let mut other = OperatorHarness::restored(CollectSink::new("collect", &handle), &s1_checkpoint);
    assert!(
        other.open().is_err(),
        "subtask 1's state refused by subtask 0"
    );
}

#[test]
fn public_types_are_send_and_handles_are_sync() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<TwoPhaseCommitFileSink<String>>();
    send::<CollectSink<String>>();
    send::<CollectHandle<String>>();
    sync::<CollectHandle<String>>();
    send::<SinkError>();
    sync::<SinkError>();
}

// ---- exactly-once under random failures, for both sinks ----

/// One step of a simulated job: a source emitting `0..total` from a checkpointed offset, the
/// sink under test, a coordinator, and crashes that restart from the latest completed checkpoint.
#[derive(Debug, Clone)]
enum Step {
    /// The source emits up to this many records.
    Emit(u8),
    /// A checkpoint is taken (source offset and sink state).
    Snapshot,
    /// An outstanding checkpoint completes (older ones are subsumed); the sink hears of it only
    /// if `deliver`.
    Complete { pick: u8, deliver: bool },
    /// An outstanding checkpoint is aborted.
    Abort(u8),
    /// The job fails and restarts from the latest completed checkpoint.
    Crash,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => (1u8..5).prop_map(Step::Emit),
        2 => Just(Step::Snapshot),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(pick, deliver)| Step::Complete { pick, deliver }),
        1 => any::<u8>().prop_map(Step::Abort),
        1 => Just(Step::Crash),
    ];
    prop::collection::vec(step, 0..40)
}

/// Runs `steps`, then the rest of the input to the end, and returns the committed output.
fn run_job<Op: Operator<In = u32, Out = ()>>(
    steps: &[Step],
    total: u32,
    make: impl Fn() -> Op,
    commit_finished: impl Fn(),
    committed: impl Fn() -> Vec<u32>,
) -> Vec<u32> {
    struct Checkpoint {
        id: u64,
        offset: u32,
        snapshot: TaskSnapshot,
    }
    let mut offset = 0;
    let mut next_id = 1;
    let mut completed: Option<Checkpoint> = None;
    let mut outstanding: Vec<Checkpoint> = Vec::new();
    let mut h = OperatorHarness::new(make());
    h.open().unwrap();
    for step in steps {
        match *step {
            Step::Emit(n) => {
                for _ in 0..n {
                    if offset < total {
                        h.process(offset).unwrap();
                        offset += 1;
                    }
                }
            }
            Step::Snapshot => {
                let snapshot = h.snapshot(next_id).unwrap();
                outstanding.push(Checkpoint {
                    id: next_id,
                    offset,
                    snapshot,
                });
                next_id += 1;
            }
            Step::Complete { pick, deliver } if !outstanding.is_empty() => {
                let done = outstanding.remove(usize::from(pick) % outstanding.len());
                outstanding.retain(|c| c.id > done.id);
                if deliver {
                    h.notify_checkpoint_complete(done.id).unwrap();
                }
                completed = Some(done);
            }
            Step::Abort(pick) if !outstanding.is_empty() => {
                let aborted = outstanding.remove(usize::from(pick) % outstanding.len());
                h.notify_checkpoint_aborted(aborted.id).unwrap();
            }
            Step::Complete { .. } | Step::Abort(_) => {}
            Step::Crash => {
                drop(h);
                outstanding.clear();
                h = match &completed {
                    Some(c) => {
                        offset = c.offset;
                        OperatorHarness::restored(make(), &c.snapshot)
                    }
                    None => {
                        offset = 0;
                        OperatorHarness::new(make())
                    }
                };
                h.open().unwrap();
            }
        }
    }
    while offset < total {
        h.process(offset).unwrap();
        offset += 1;
    }
    h.end_input().unwrap();
    h.close().unwrap();
    commit_finished();
    committed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn file_sink_output_after_any_failures_equals_a_run_without_failures(steps in steps()) {
        let dir = tempfile::tempdir().unwrap();
        let output = run_job(
            &steps,
            30,
            || TwoPhaseCommitFileSink::new("out", dir.path(), 0, |x: &u32| x.to_string()),
            || { commit_finished(dir.path()).unwrap(); },
            || committed(dir.path()).iter().map(|l| l.parse().unwrap()).collect(),
        );
        prop_assert_eq!(output, (0..30).collect::<Vec<u32>>());
        prop_assert!(hidden(dir.path()).is_empty());
    }

    #[test]
    fn collect_sink_output_after_any_failures_equals_a_run_without_failures(steps in steps()) {
        let handle = CollectHandle::new();
        let output = run_job(
            &steps,
            30,
            || CollectSink::new("collect", &handle),
            || { handle.commit_finished(); },
            || handle.committed(),
        );
        prop_assert_eq!(output, (0..30).collect::<Vec<u32>>());
    }
}
