//! Continuous file reading (Flink's `readFile(.., PROCESS_CONTINUOUSLY, interval)`): a
//! monitoring source with parallelism 1 lists a directory every interval and emits the splits of
//! new files ([`FileMonitor`]); a split reader with parallelism N reads them into lines
//! ([`SplitReader`]). The job API puts them together
//! ([`StreamEnvironment::read_file_continuously`](crate::StreamEnvironment::read_file_continuously)).
//!
//! The reader is where the two threading models differ, and it comes in both of Flink's forms
//! with one snapshot type ([`ReaderSnapshot`]): the legacy model's reader thread whose lines are
//! emitted under the checkpoint lock (Flink 1.9), and the mailbox model's self-enqueued read
//! mails (Flink 1.11+); the bridge keeps the monitoring source a legacy source and reads in the
//! mail form. See below for both protocols and for which files count as new
//! (and what happens to a file appended to after it was read).
//!
//! The FLIP-27 form ([`FileSource`], a split [`Source`](crate::source::Source)): a split
//! enumerator in the job layer hands splits to parallel [`FileSourceReader`]s on request, for a bounded directory or one it monitors
//! ([`FileSource::monitor_continuously`], the same modification-time rule), snapshotted when
//! each checkpoint is triggered.
//!
//! # Which files are new (the monitoring source)
//!
//! The monitoring source (Flink's `ContinuousFileMonitoringFunction`): parallelism 1, lists a
//! directory every interval and emits the splits of the files it has not seen yet.
//!
//! ## Which files are new: the modification-time rule
//!
//! As Flink, the source does not remember every file: its checkpointed [`MonitorState`] is the
//! largest modification time among the files it has forwarded, plus (beyond Flink) the names of
//! the forwarded files that have exactly that time. A listed file is new if it was modified
//! later than that time, or at that time under a name not in the set (Flink skips every file
//! whose time equals the maximum, so two files written within the file system's timestamp
//! granularity lose the second one). Files are forwarded in (modification time, path) order,
//! each file's splits and the state update in one section under the checkpoint lock, so a
//! snapshot holds either all splits of a file or none.
//!
//! Known limits, as Flink's:
//! - **A file appended to after it was read** gets a newer modification time, so it is new
//!   again: *all* of it is forwarded once more and its old lines are read twice. Write files
//!   elsewhere (or under a name starting with `.` or `_`, which the source ignores) and rename
//!   them into the directory when complete.
//! - **A file that appears with an older time** than the maximum (moved in from elsewhere with
//!   its old time kept, or renamed into place after a newer file) is never read.
//!
//! ## Timing
//!
//! The listing runs on a periodic timer of the runtime's scheduler with a *fixed delay*: the next
//! listing is due `interval` after the previous one was forwarded (the run completes when the
//! source calls `Rearm::done`), which is Flink's `Thread.sleep(interval)` after each listing.
//!
//! # The split reader in each model
//!
//! The split reader operator (Flink's `ContinuousFileReaderOperator`), parallelism N, in the two
//! forms Flink had; both keep the same [`ReaderSnapshot`] and put every line through the same
//! one function (`apply_line`), so they differ only in who reads.
//!
//! | | [`ReadMode::Thread`] (Flink 1.9, the legacy model) | [`ReadMode::Mails`] (Flink 1.11+, mailbox and bridge) |
//! |---|---|---|
//! | who reads the file | the operator's own reader thread, outside the lock | the task thread, in a mail |
//! | who emits | whoever holds the checkpoint lock: each line is an event the task delivers under the lock | the same mail |
//! | a new split | queued to the thread | queued; a read mail is enqueued if none is |
//! | a checkpoint while a split is read | waits for the lock between two lines | runs between two read mails |
//! | read-ahead | at most [`READ_AHEAD`] lines read and not yet emitted | none |
//!
//! ## The thread form's protocol
//!
//! The operator's state (current split and offset, pending splits) is owned by the operator,
//! that is by the checkpoint lock. The reader thread gets every split, in the order the
//! operator queued it (after a restore: the current split at its offset, then the pending
//! ones), and reads them one after the other; for each line it sends the line and the offset
//! after it as an event, then `ThreadEvent::SplitDone` at the end of a split. Under the lock,
//! the operator makes the first pending split current when a split's first event arrives and
//! drops it at its `SplitDone`; so the snapshot's offset is always that of the last line
//! emitted, and lines read ahead but not yet emitted are simply read again after a restore.
//! A credit channel bounds the read-ahead; closing the operator drops both channels, which ends
//! the thread, and joins it.
//!
//! ## The mail form
//!
//! One `ReadMail` event at a time is outstanding: it reads up to `chunk` lines, emits them,
//! and enqueues the next one while work remains. Checkpoint barriers, timers and new splits
//! are mails or input in between, so a snapshot waits for at most one chunk.
//!
//! Both forms end their input by draining: after `end_input` the operator accepts no more
//! input until every split was read, which keeps the task from finishing before that.
//!
//! # The FLIP-27 file source
//!
//! The FLIP-27 file source, a split [`Source`](crate::source::Source) run by the engine every
//! split source runs on ([`SourceCoordinator`](crate::source::SourceCoordinator)): a
//! [`FileSplitEnumerator`] that hands out the byte-range splits of a directory's files to
//! parallel [`FileSourceReader`]s when they ask, as Flink's `FileSource` does, either for the files there when the job was built (bounded, Flink's
//! `StaticFileSplitEnumerator`) or for files discovered while the job runs
//! ([`FileSource::monitor_continuously`], Flink's `ContinuousFileSplitEnumerator`).
//!
//! ## Where the enumerator runs
//!
//! Flink runs the enumerator in the `SourceCoordinator` on the JobManager. Here it is one
//! object in the job layer, outside every task, made when the job is built and shared by the
//! readers of every attempt: the readers call it from their own threads when they ask for a
//! split, and the executor's threads drive it (its monitoring thread lists the directory every
//! `interval`, its coordinator thread snapshots it when a checkpoint is triggered).
//!
//! ## Which files are new
//!
//! The continuous enumerator applies the monitoring source's modification-time rule with the
//! same [`MonitorState`] and the same known limits (see above): a file
//! appended to after it was read is read again whole; a file that appears with a time older
//! than the newest one read is never read. It stops discovering once
//! [`stop_after_files`](FileSource::stop_after_files) files were discovered or once a listing
//! finds the [`end_marker`](FileSource::end_marker) file (looked for before the listing, so a
//! file written before the marker is in the listing that sees it); from then on, a reader that
//! asks when no split is left gets `NoMoreSplits` and ends its input.
//!
//! ## The coordinator's snapshot, taken at trigger time
//!
//! The discovered-but-unassigned splits and the files seen belong to no reader. As Flink's
//! `SourceCoordinator#checkpointCoordinator`, the enumerator is snapshotted when checkpoint N is
//! triggered, before the barriers are injected into the readers
//! ([`checkpoint_coordinator`](crate::source::SourceCoordinator::checkpoint_coordinator)), into an
//! [`EnumeratorCheckpoint`]. The restored cut must put each split in exactly one place: in the
//! enumerator's state (unassigned), or with the one reader that holds it. A split assigned
//! after the enumerator's snapshot but before the reader's barrier is in both snapshots; Flink
//! closes the event valve to the readers from the coordinator snapshot until their barriers.
//! **The equivalent here resolves the overlap on restore instead of preventing it**, so no
//! reader ever waits for a barrier (a reader that declines a checkpoint, or a legacy
//! `ReaderSource` that does not say which checkpoint it snapshots, cannot hold a gate shut):
//!
//! - a reader's snapshot lists the splits it holds (with offsets) *and* the splits it finished
//!   since their assignment, until a checkpoint whose trigger came after that assignment
//!   completed ([`checkpoint_completed`](crate::source::SourceCoordinator::checkpoint_completed); no restore
//!   can then find them unassigned);
//! - a restore claims every split a restored reader holds or finished: the coordinator drops
//!   the enumerator's next assignment of it (by split id). A split assigned after the trigger of N is thus read by the reader that
//!   had it at its barrier (from its offset) or, if it was assigned after that barrier, is in
//!   no reader's snapshot and assigned again: each split once, none lost;
//! - a split a restored reader holds or finished whose file the enumerator's snapshot has not
//!   seen (discovered after the trigger, assigned before the barrier) stays claimed, in later
//!   coordinator snapshots too, and is skipped when the file is discovered and assigned again.
//!
//! Splits discovered after the trigger are in no snapshot, and the files they came from are
//! not in the snapshot's seen state, so a restore discovers them again.
//!
//! ## Where the coordinator's snapshot is stored
//!
//! A checkpoint of this executor holds the tasks' snapshots only, so the enumerator's snapshot
//! of N travels in reader 0's snapshot, as one more item of the source's list state (the
//! readers' state is [`ListState`](streamtask_core::keygroup::ListState) of [`SplitStateItem`](crate::source::SplitStateItem)s): in checkpoints and savepoints it is
//! under the source's operator id. Reader 0 carries every trigger-time snapshot a restore may
//! still need (those not older than the latest completed checkpoint), each with its
//! checkpoint's id, since the legacy model does not tell it which checkpoint it is in. When an
//! attempt starts, before any task does, the executor gives the enumerator the restored
//! checkpoint ([`start_attempt`](crate::source::SourceCoordinator::start_attempt)): it takes its snapshot of
//! exactly that checkpoint from among the readers' items, wherever a rescale put it.
//!
//! ## Rescale
//!
//! Every item of a reader's list is movable: a split in progress (with its offset), a split
//! assigned and not started, a finished split, the enumerator's snapshots. A savepoint restored at another reader
//! parallelism concatenates the old readers' items and splits them evenly over the new readers
//! (list state, see `job/savepoint.rs`); each new reader reads the splits it got (in-progress
//! ones continue at their offsets) before it asks for more.

pub(crate) mod monitor;
pub(crate) mod reader;
pub(crate) mod source;
mod split;

pub use self::monitor::{FileMonitor, MonitorState};
pub use self::reader::{READ_AHEAD, ReadMode, SplitReader};
pub use self::source::{
    EnumeratorCheckpoint, FileReaderState, FileSource, FileSourceReader, FileSplitEnumerator,
    SplitError,
};
pub use self::split::{FileSplit, LineCursor, ReaderSnapshot, SplitProgress};
