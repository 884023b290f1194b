//! Sinks: the exactly-once [`TwoPhaseCommitFileSink`] and the in-memory [`CollectSink`] for
//! tests.
//!
//! A sink is an [`Operator`](streamtask_core::operator::Operator) with `Out = ()` at the end of a chain
//! whose task output is [`Discard`](streamtask_core::operator::Discard). Like every operator it runs
//! unchanged under every model: the runtime calls one of its methods at a time.
//!
//! # Exactly-once by two-phase commit
//!
//! Both sinks follow Flink's `TwoPhaseCommitSinkFunction`. Records go into the current
//! *transaction*. When checkpoint `c` snapshots the sink, the transaction is *pre-committed*
//! (made durable but invisible) and recorded in the sink's state as pending for `c`; a new
//! transaction starts lazily with the next record, so a checkpoint with no new records makes no
//! empty transaction. When the coordinator reports `c` complete, every pending transaction with
//! a checkpoint `<= c` is *committed* (made visible). A restore recommits the pending
//! transactions recorded in the state it restores (their checkpoint completed, or the job would
//! not restore from it) and *aborts* every other transaction of the same subtask: those are the
//! leftovers of the failed attempt, whose records the sources replay.
//!
//! For the [`TwoPhaseCommitFileSink`] a transaction is a file, and its state is the file's name:
//!
//! | state | file name (subtask `S`, transaction `T`) | visible |
//! |---|---|---|
//! | in progress | `.part-SSSSS-TTTTTTTT.inprogress` | no |
//! | pending for checkpoint `C` | `.part-SSSSS-TTTTTTTT.pending-C` | no |
//! | final (pre-committed by `finish`) | `.part-SSSSS-TTTTTTTT.final` | no |
//! | committed | `part-SSSSS-TTTTTTTT` | yes |
//! | aborted | (deleted) | - |
//!
//! Legal transitions, each one atomic (a `rename` or an `unlink`, followed by an fsync of the
//! directory; file contents are fsynced before their first rename):
//!
//! | from | to | by |
//! |---|---|---|
//! | (none) | in progress | the first record of a transaction |
//! | in progress | pending for `C` | `snapshot_state(C)` (pre-commit) |
//! | in progress | final | `finish()` (pre-commit at end of input) |
//! | final | pending for `C` | `snapshot_state(C)` after `finish()` (a draining savepoint, below) |
//! | pending for `C` | committed | `notify_checkpoint_complete(C')` with `C <= C'`; a restore whose state lists it; [`commit_finished`] |
//! | final | committed | [`commit_finished`], once the whole job finished |
//! | in progress, pending, final | aborted | a restore of the same subtask whose state does not list it |
//!
//! An *aborted* checkpoint changes nothing: its pending transaction stays pending and is
//! committed by the next completed checkpoint, whose state covers the same records (Flink's
//! semantics; rolling it back is impossible, the records were consumed past the barrier). If the
//! job fails before that, the restore aborts it, and the sources replay its records.
//!
//! ## Why a crash neither loses nor duplicates output
//!
//! Records of a transaction are replayed by the sources exactly when the transaction is not in
//! the restored state, and the restore commits exactly the transactions in its state:
//!
//! - crash before the pre-commit, or after it but before checkpoint `C` completed: the job
//!   restores an earlier checkpoint, whose state does not list the transaction: it is aborted
//!   and its records are replayed;
//! - crash after `C` completed, before or during the commits of `notify_checkpoint_complete`:
//!   the job restores `C`, whose state lists the transaction: the restore commits it (if the
//!   pending file is gone and the committed one exists, it was committed already: nothing to do)
//!   and the sources resume after its records;
//! - crash after `finish` but before [`commit_finished`]: the job restores the latest checkpoint;
//!   the final files are not in any state, so they are aborted, and their records replayed.
//!
//! Every committed file name is used once: a restore continues the transaction counter past the
//! highest committed transaction of its subtask, so an attempt never overwrites committed output.
//!
//! ## Rewinding
//!
//! A restore commits what its state lists and continues numbering from the state's counter;
//! a committed file of the subtask numbered at or after that counter was committed by a
//! checkpoint *after* the restored one. That happens only when a restore deliberately falls
//! back past newer checkpoints (the executor's `fallback_to_older` setting, taken when the newest
//! checkpoint is damaged) or restores a finished run's checkpoint. Such files are *rewound*:
//! deleted, each logged at warn level, before the sink takes a record; the sources replay their
//! records, so the committed output stays exactly-once.
//!
//! The trade-off: a reader may already have seen a rewound file. Exactly-once holds for the
//! directory's final contents, not for what a reader saw in between; a consumer that must never
//! see output withdrawn should refuse the fall back (the default) and repair or discard the
//! damaged checkpoint instead.
//!
//! ## End of input
//!
//! A finished task takes no further checkpoints, so `finish()` pre-commits the last transaction
//! as a *final* file that no checkpoint commits. Once the whole job has finished successfully the
//! executor calls [`commit_finished`], which commits every final and every still-pending file in
//! the directory (the pending ones belong to checkpoints whose completion notice came too late or
//! not at all; with the job done, all pre-committed output is final).
//!
//! ## Drain
//!
//! A draining stop-with-savepoint runs `finish()` at the savepoint's barrier, before the
//! snapshot. The rule for both sinks: after `finish()` a sink takes one more snapshot, the
//! drain's, which turns the final transaction into one pending for the savepoint; the
//! savepoint's completion commits it, a restore of the savepoint finds it committed (nothing
//! twice), and a failure before the savepoint completed aborts it (its records are replayed).
//! The file sink refuses a second snapshot after `finish()` with [`SinkError::Lifecycle`].
//!
//! ## Rules for the output directory
//!
//! - One directory per sink, shared by all its parallel subtasks; each subtask only ever
//!   touches files carrying its own index, so subtasks never interfere.
//! - Readers read the visible `part-*` files ([`read_committed`], [`committed_files`]) and
//!   ignore hidden ones.
//! - A restore must use the same directory and the same parallelism (each subtask restores its
//!   own state; changing parallelism is not supported).
//!
//! # Examples
//!
//! ```
//! use streamtask::sink::{CollectHandle, CollectSink};
//! use streamtask_core::testing::OperatorHarness;
//!
//! let handle = CollectHandle::new();
//! let mut h = OperatorHarness::new(CollectSink::new("collect", &handle));
//! h.open().unwrap();
//! h.process(1u32).unwrap();
//! h.snapshot(1).unwrap();
//! h.process(2).unwrap();
//! h.notify_checkpoint_complete(1).unwrap();
//! assert_eq!(handle.received(), vec![1, 2]);
//! assert_eq!(handle.committed(), vec![1]);
//! ```

mod collect;
mod two_phase;

use std::io;
use std::path::PathBuf;

pub use self::collect::{CollectHandle, CollectSink};
pub use self::two_phase::{
    PendingTransaction, TwoPhaseCommitFileSink, commit_finished, committed_files, discard_output,
    pending_transactions, read_committed,
};

/// Why a sink could not write, pre-commit, commit or restore.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// A file system operation failed.
    #[error(
        "cannot {action} {path}: {source}; check that the output directory exists, is writable \
         and has free space"
    )]
    Io {
        /// What the sink tried to do ("create", "write", "sync", "pre-commit", ...).
        action: &'static str,
        /// The file or directory it was doing it to.
        path: PathBuf,
        /// The error of the operating system.
        #[source]
        source: io::Error,
    },
    /// A transaction the restored state calls pending is neither pending nor committed.
    #[error(
        "transaction {txn} of subtask {subtask} is lost: neither {pending} nor {committed} \
         exists; restore with the output directory the checkpoint was taken with, and do not \
         delete its hidden files"
    )]
    MissingTransaction {
        /// The subtask that wrote it.
        subtask: usize,
        /// Its transaction number.
        txn: u64,
        /// Where its pending file should be.
        pending: PathBuf,
        /// Where its committed file would be.
        committed: PathBuf,
    },
    /// The formatter returned a line containing a line break, which would split one record
    /// into several lines. The line is handed back.
    #[error(
        "the formatter of the sink writing to {dir} returned a line with a line break ({:?}); \
         make it return one line per record, escaping or replacing '\\n' and '\\r'",
        preview(line)
    )]
    LineBreak {
        /// The sink's output directory.
        dir: PathBuf,
        /// The offending line.
        line: String,
    },
    /// The restored state was written by another subtask (the collecting sink; the two-phase
    /// file sink's state is union state, which every subtask may restore).
    #[error(
        "the state of subtask {found} was restored into subtask {expected}; restore each \
         subtask from its own state (the collecting sink cannot change its parallelism)"
    )]
    SubtaskMismatch {
        /// The subtask being restored.
        expected: usize,
        /// The subtask whose state it got.
        found: usize,
    },
    /// A lifecycle method was called out of order.
    #[error(
        "{call} called while the sink writing to {dir} is {phase}; drive it in lifecycle order: \
         initialize_state, open, records and checkpoints, finish, at most the snapshot of a \
         draining savepoint, close"
    )]
    Lifecycle {
        /// The sink's output directory.
        dir: PathBuf,
        /// The method called.
        call: &'static str,
        /// The sink's lifecycle phase at the call.
        phase: &'static str,
    },
}

impl SinkError {
    /// Whether a restart may fix this. A restart restores the same state into the same
    /// directory, so a lost transaction, a formatter's line break, another subtask's state and
    /// a directory that cannot be written (no permission, a read-only or full file system, a
    /// file in its place) fail the same way again; other I/O errors may be passing.
    pub fn is_recoverable(&self) -> bool {
        use io::ErrorKind::{
            NotADirectory, PermissionDenied, QuotaExceeded, ReadOnlyFilesystem, StorageFull,
        };
        match self {
            SinkError::Io { source, .. } => !matches!(
                source.kind(),
                NotADirectory | PermissionDenied | QuotaExceeded | ReadOnlyFilesystem | StorageFull
            ),
            SinkError::MissingTransaction { .. }
            | SinkError::LineBreak { .. }
            | SinkError::SubtaskMismatch { .. } => false,
            SinkError::Lifecycle { .. } => true,
        }
    }

    /// The offending line of a [`SinkError::LineBreak`], handed back.
    pub fn into_line(self) -> Option<String> {
        match self {
            SinkError::LineBreak { line, .. } => Some(line),
            _ => None,
        }
    }
}

/// The first characters of `line`, for error messages.
fn preview(line: &str) -> String {
    const MAX: usize = 60;
    match line.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &line[..end]),
        None => line.to_string(),
    }
}
