//! The exactly-once two-phase-commit file sink. The protocol, its file states and the crash
//! analysis are in the [module doc](super).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use streamtask_core::keygroup::{StateKind, UnionState, state_kind};

use super::SinkError;
use streamtask_core::OperatorError;
use streamtask_core::StreamRecord;
use streamtask_core::operator::{Context, Operator};
use streamtask_core::state;

/// An exactly-once file sink: one instance per parallel subtask, all writing one line per record
/// into the same output directory, made visible only when a checkpoint that covers them
/// completes.
///
/// See the [module doc](super) for the protocol. Lifecycle phases, checked on every call (a call
/// out of order is [`SinkError::Lifecycle`]):
///
/// | phase | meaning | next |
/// |---|---|---|
/// | created | constructed; the directory is untouched | restored |
/// | restored | `initialize_state` recommitted its state and aborted leftovers | open |
/// | open | takes records, snapshots and checkpoint notices | finished, closed |
/// | finished | `finish` pre-committed the last transaction as final; takes checkpoint notices and one more snapshot | drained, closed |
/// | drained | a draining savepoint's snapshot after `finish` took the final transaction as pending for the savepoint | closed |
/// | closed | `close` ran; nothing more happens | - |
///
/// `close` is legal in every phase; without `finish` before it (cancellation, failure) it only
/// releases the open file and leaves everything for the next attempt's restore to clean.
///
/// # Examples
///
/// ```
/// use streamtask::sink::{TwoPhaseCommitFileSink, read_committed};
/// use streamtask_core::testing::OperatorHarness;
///
/// let dir = tempfile::tempdir().unwrap();
/// let sink = TwoPhaseCommitFileSink::new("out", dir.path(), 0, |x: &u32| format!("n={x}"));
/// let mut h = OperatorHarness::new(sink);
/// h.open().unwrap();
/// h.process(1).unwrap();
/// h.process(2).unwrap();
/// h.snapshot(7).unwrap(); // pre-commit: durable, still invisible
/// assert!(read_committed(dir.path()).unwrap().is_empty());
/// h.notify_checkpoint_complete(7).unwrap(); // commit
/// assert_eq!(read_committed(dir.path()).unwrap(), vec!["n=1", "n=2"]);
/// ```
pub struct TwoPhaseCommitFileSink<T> {
    name: String,
    dir: PathBuf,
    subtask: usize,
    formatter: Box<dyn Fn(&T) -> String + Send>,
    phase: Phase,
    /// The open transaction, if a record arrived since the last pre-commit.
    current: Option<Transaction>,
    /// Pre-committed transactions awaiting their checkpoint's completion, in transaction order.
    pending: Vec<PendingTxn>,
    /// The number the next transaction gets.
    next_txn: u64,
    /// The transaction `finish` pre-committed as final, until a draining savepoint's snapshot
    /// takes it.
    final_txn: Option<u64>,
}

/// The sink's lifecycle phase (see the table on [`TwoPhaseCommitFileSink`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Constructed; the directory is untouched.
    Created,
    /// `initialize_state` ran.
    Restored,
    /// `open` ran; takes records and checkpoints.
    Open,
    /// `finish` pre-committed the last transaction.
    Finished,
    /// The one snapshot after `finish` (a draining savepoint's) took the final transaction.
    Drained,
    /// `close` ran.
    Closed,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Created => "created",
            Phase::Restored => "restored",
            Phase::Open => "open",
            Phase::Finished => "finished",
            Phase::Drained => "drained",
            Phase::Closed => "closed",
        }
    }
}

/// The open transaction: its in-progress file.
/// Bytes a transaction's writer buffers before it writes to its file. With std's default
/// (8 KiB) the demo job's sink made a `write` call about every hundred lines (its 15 MB of
/// output in 8 KiB calls). Durability does not depend on it: a transaction is flushed and synced
/// at its pre-commit, whatever was buffered.
const WRITE_BUFFER: usize = 256 * 1024;

struct Transaction {
    number: u64,
    path: PathBuf,
    writer: BufWriter<File>,
}

/// A pre-committed transaction and the checkpoint whose completion commits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct PendingTxn {
    txn: u64,
    checkpoint: u64,
}

/// What `snapshot_state` returns: enough to recommit and to continue numbering.
#[derive(Debug, Serialize, Deserialize)]
struct SinkState {
    subtask: usize,
    next_txn: u64,
    pending: Vec<PendingTxn>,
}

/// A transaction a two-phase sink had pre-committed at a checkpoint and commits when that
/// checkpoint completes (or when the job restores from it): what [`pending_transactions`]
/// reads from the sink's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PendingTransaction {
    /// The sink subtask that wrote it.
    pub subtask: usize,
    /// Its number among that subtask's transactions.
    pub txn: u64,
    /// The checkpoint whose completion commits it.
    pub checkpoint: u64,
}

/// The pending transactions in a [`TwoPhaseCommitFileSink`]'s snapshot (the bytes it stored
/// for one subtask in a checkpoint or savepoint), in the order it stored them; `None` if
/// `bytes` is not such a sink's state.
///
/// # Examples
///
/// ```
/// use streamtask::sink::pending_transactions;
///
/// let state = br#"{"format":"streamtask-union-state-v1","items":[
///     {"subtask":1,"next_txn":2,"pending":[{"txn":1,"checkpoint":2}]}]}"#;
/// let pending = pending_transactions(state).unwrap();
/// assert_eq!((pending[0].subtask, pending[0].txn, pending[0].checkpoint), (1, 1, 2));
/// assert!(pending_transactions(b"{}").is_none());
/// ```
pub fn pending_transactions(bytes: &[u8]) -> Option<Vec<PendingTransaction>> {
    // As `initialize_state` reads it: union state, or an older checkpoint's bare `SinkState`.
    let states = match state_kind(bytes) {
        StateKind::Union => UnionState::<SinkState>::decode(bytes).ok()?.items,
        _ => vec![state::decode::<SinkState>(bytes).ok()?],
    };
    Some(
        states
            .iter()
            .flat_map(|s| {
                s.pending.iter().map(|p| PendingTransaction {
                    subtask: s.subtask,
                    txn: p.txn,
                    checkpoint: p.checkpoint,
                })
            })
            .collect(),
    )
}

impl<T> TwoPhaseCommitFileSink<T> {
    /// The sink of subtask `subtask`, named `name`, writing into `dir` one line per record as
    /// `formatter` renders it. The formatter must not return line breaks (a record whose line
    /// has one fails with [`SinkError::LineBreak`]).
    ///
    /// Nothing touches the file system until `initialize_state`, which creates `dir` if needed.
    pub fn new(
        name: impl Into<String>,
        dir: impl Into<PathBuf>,
        subtask: usize,
        formatter: impl Fn(&T) -> String + Send + 'static,
    ) -> Self {
        TwoPhaseCommitFileSink {
            name: name.into(),
            dir: dir.into(),
            subtask,
            formatter: Box::new(formatter),
            phase: Phase::Created,
            current: None,
            pending: Vec::new(),
            next_txn: 0,
            final_txn: None,
        }
    }

    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index of the subtask this instance writes for.
    pub fn subtask(&self) -> usize {
        self.subtask
    }

    /// Checkpoint ids of the pre-committed transactions not yet committed, oldest first.
    pub fn pending_checkpoints(&self) -> Vec<u64> {
        self.pending.iter().map(|p| p.checkpoint).collect()
    }

    fn fail(&self, error: SinkError) -> OperatorError {
        OperatorError::sink(self.name.clone(), error)
    }

    fn expect_phase(&self, call: &'static str, allowed: &[Phase]) -> Result<(), OperatorError> {
        if allowed.contains(&self.phase) {
            Ok(())
        } else {
            Err(self.fail(SinkError::Lifecycle {
                dir: self.dir.clone(),
                call,
                phase: self.phase.as_str(),
            }))
        }
    }

    fn file(&self, txn: u64, kind: FileKind) -> TxnFile {
        TxnFile {
            subtask: self.subtask,
            txn,
            kind,
        }
    }

    /// Recommits the transactions every restored state lists (this subtask's and, after a
    /// rescale, the others'), then aborts every other uncommitted file of this subtask and
    /// continues numbering past everything this subtask committed.
    fn restore(&mut self, states: Vec<SinkState>) -> Result<(), SinkError> {
        fs::create_dir_all(&self.dir).map_err(|e| io_error("create", &self.dir, e))?;
        let (mut next_txn, rewind_from) = match states.iter().find(|s| s.subtask == self.subtask) {
            Some(s) => (s.next_txn, Some(s.next_txn)),
            None => (0, None),
        };
        // Recommit first: afterwards no file the state names is still uncommitted, so every
        // remaining uncommitted file of this subtask is a leftover of the failed attempt.
        let mut recommitted = 0;
        let mut pending = 0;
        for state in &states {
            for p in &state.pending {
                pending += 1;
                let file = TxnFile {
                    subtask: state.subtask,
                    txn: p.txn,
                    kind: FileKind::Pending(p.checkpoint),
                };
                if commit_file(&self.dir, file)? {
                    recommitted += 1;
                }
            }
        }
        let mut aborted = 0;
        let mut rewound = 0;
        for (file, path) in list(&self.dir)? {
            if file.subtask != self.subtask {
                continue; // another subtask's business, whatever its state
            }
            match file.kind {
                // Numbered at or after the restored state's counter: committed by a checkpoint
                // after the restored one (a fall back past newer checkpoints, or a restore of a
                // finished run). Its records are replayed, so it goes (see "Rewinding").
                FileKind::Committed if rewind_from.is_some_and(|from| file.txn >= from) => {
                    match fs::remove_file(&path) {
                        Ok(()) => {
                            rewound += 1;
                            log::warn!(
                                "sink {}: rewound {} (committed after the restored checkpoint; \
                                 its records are written again)",
                                self.name,
                                path.display()
                            );
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_error("rewind (delete)", &path, e)),
                    }
                }
                FileKind::Committed => next_txn = next_txn.max(file.txn + 1),
                FileKind::InProgress | FileKind::Pending(_) | FileKind::Final => {
                    match fs::remove_file(&path) {
                        Ok(()) => aborted += 1,
                        // Gone already: an abort is idempotent.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_error("abort (delete)", &path, e)),
                    }
                }
            }
        }
        if recommitted + aborted + rewound > 0 {
            sync_dir(&self.dir)?;
        }
        log::debug!(
            "sink {} subtask {}: restored {} pending, recommitted {recommitted}, aborted {aborted}, \
             rewound {rewound}",
            self.name,
            self.subtask,
            pending
        );
        self.next_txn = next_txn;
        self.pending.clear();
        Ok(())
    }

    fn write(&mut self, value: &T) -> Result<(), SinkError> {
        let line = (self.formatter)(value);
        // Two byte searches (memchr, a word at a time), not `contains(['\n', '\r'])`, which
        // matches char by char and costs a third of the sink's instructions per line. In UTF-8
        // these bytes never occur inside another char, so the byte search is exact.
        let bytes = line.as_bytes();
        if bytes.contains(&b'\n') || bytes.contains(&b'\r') {
            return Err(SinkError::LineBreak {
                dir: self.dir.clone(),
                line,
            });
        }
        if self.current.is_none() {
            self.current = Some(self.begin()?);
        }
        let txn = self.current.as_mut().expect("a transaction was just begun");
        txn.writer
            .write_all(line.as_bytes())
            .and_then(|()| txn.writer.write_all(b"\n"))
            .map_err(|e| io_error("write", &txn.path, e))
    }

    fn begin(&mut self) -> Result<Transaction, SinkError> {
        let number = self.next_txn;
        let path = self
            .dir
            .join(self.file(number, FileKind::InProgress).name());
        // `create_new`: the restore removed every leftover and numbering continues past every
        // committed file, so an existing file here would be a protocol bug; fail, never truncate.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error("create", &path, e))?;
        self.next_txn += 1;
        Ok(Transaction {
            number,
            path,
            writer: BufWriter::with_capacity(WRITE_BUFFER, file),
        })
    }

    /// Makes the open transaction durable under its pre-committed name `kind`; returns its
    /// number, or `None` if no record arrived since the last pre-commit.
    fn pre_commit(&mut self, kind: FileKind) -> Result<Option<u64>, SinkError> {
        let Some(txn) = self.current.take() else {
            return Ok(None);
        };
        let file = txn
            .writer
            .into_inner()
            .map_err(|e| io_error("flush", &txn.path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| io_error("sync", &txn.path, e))?;
        drop(file);
        let to = self.dir.join(self.file(txn.number, kind).name());
        fs::rename(&txn.path, &to).map_err(|e| io_error("pre-commit (rename)", &txn.path, e))?;
        sync_dir(&self.dir)?;
        Ok(Some(txn.number))
    }

    /// Renames the final transaction `finish` pre-committed to pending for `checkpoint_id` (a
    /// draining savepoint's snapshot after `finish`); returns its number, or `None` if `finish`
    /// had no records to pre-commit.
    fn pend_final(&mut self, checkpoint_id: u64) -> Result<Option<u64>, SinkError> {
        let Some(txn) = self.final_txn.take() else {
            return Ok(None);
        };
        let from = self.dir.join(self.file(txn, FileKind::Final).name());
        let to = self
            .dir
            .join(self.file(txn, FileKind::Pending(checkpoint_id)).name());
        fs::rename(&from, &to).map_err(|e| io_error("pre-commit (rename)", &from, e))?;
        sync_dir(&self.dir)?;
        Ok(Some(txn))
    }

    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<(), SinkError> {
        let mut committed = 0;
        // Remove each entry only once it is committed, so a failure leaves the rest pending.
        while let Some(i) = self
            .pending
            .iter()
            .position(|p| p.checkpoint <= checkpoint_id)
        {
            let p = self.pending[i];
            commit_file(&self.dir, self.file(p.txn, FileKind::Pending(p.checkpoint)))?;
            self.pending.remove(i);
            committed += 1;
        }
        if committed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

impl<T> Operator for TwoPhaseCommitFileSink<T> {
    type In = T;
    type Out = ();

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        self.expect_phase("initialize_state", &[Phase::Created])?;
        // Union state: after a rescale this subtask sees every old subtask's transactions and
        // recommits them all (a commit is idempotent), so none is lost when the subtask that
        // pre-committed it is gone; an older checkpoint holds a bare `SinkState`.
        let states = match restored {
            None => Vec::new(),
            Some(bytes) if state_kind(bytes) == StateKind::Union => {
                UnionState::<SinkState>::decode(bytes)
                    .map_err(|e| OperatorError::state(&self.name, e))?
                    .items
            }
            Some(bytes) => vec![
                state::decode::<SinkState>(bytes)
                    .map_err(|e| OperatorError::state(&self.name, e))?,
            ],
        };
        self.restore(states).map_err(|e| self.fail(e))?;
        self.phase = Phase::Restored;
        Ok(())
    }

    fn open(&mut self, _ctx: &mut Context<'_, ()>) -> Result<(), OperatorError> {
        // Opening without initialize_state would skip the restore: leftovers of a failed
        // attempt would stay, and a forgotten snapshot would lose its pending transactions.
        self.expect_phase("open", &[Phase::Restored])?;
        self.phase = Phase::Open;
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.expect_phase("process_element", &[Phase::Open])?;
        self.write(&record.value).map_err(|e| self.fail(e))
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        // After `finish` one snapshot is legal: a draining savepoint's, taken once the chain
        // finished. It takes the final transaction as pending for the savepoint, so the
        // savepoint's completion commits it; a second one has nothing to cover.
        self.expect_phase("snapshot_state", &[Phase::Open, Phase::Finished])?;
        let txn = if self.phase == Phase::Finished {
            self.phase = Phase::Drained;
            self.pend_final(checkpoint_id)
        } else {
            self.pre_commit(FileKind::Pending(checkpoint_id))
        };
        if let Some(txn) = txn.map_err(|e| self.fail(e))? {
            self.pending.push(PendingTxn {
                txn,
                checkpoint: checkpoint_id,
            });
        }
        let state = SinkState {
            subtask: self.subtask,
            next_txn: self.next_txn,
            pending: self.pending.clone(),
        };
        UnionState::new(vec![state])
            .encode()
            .map(Some)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.expect_phase(
            "notify_checkpoint_complete",
            &[
                Phase::Restored,
                Phase::Open,
                Phase::Finished,
                Phase::Drained,
            ],
        )?;
        self.commit_up_to(checkpoint_id).map_err(|e| self.fail(e))
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.expect_phase(
            "notify_checkpoint_aborted",
            &[
                Phase::Restored,
                Phase::Open,
                Phase::Finished,
                Phase::Drained,
            ],
        )?;
        // Keep the pending transaction: the next completed checkpoint covers its records and
        // commits it (see the module doc).
        log::debug!(
            "sink {} subtask {}: checkpoint {checkpoint_id} aborted; its transaction stays pending",
            self.name,
            self.subtask
        );
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut Context<'_, ()>) -> Result<(), OperatorError> {
        self.expect_phase("finish", &[Phase::Open])?;
        self.final_txn = self.pre_commit(FileKind::Final).map_err(|e| self.fail(e))?;
        self.phase = Phase::Finished;
        Ok(())
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Without `finish` this is a cancellation or failure: drop the open file as it is; the
        // next attempt's restore aborts it.
        self.current = None;
        self.phase = Phase::Closed;
        Ok(())
    }
}

impl<T> fmt::Debug for TwoPhaseCommitFileSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoPhaseCommitFileSink")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("subtask", &self.subtask)
            .field("phase", &self.phase)
            .field("open_txn", &self.current.as_ref().map(|t| t.number))
            .field("pending", &self.pending)
            .field("next_txn", &self.next_txn)
            .finish()
    }
}

/// Commits every final and every still-pending file in `dir`, of every subtask; returns how
/// many it committed.
///
/// The executor calls this once the whole job has finished successfully (see the module doc's
/// "End of input"). It is idempotent: calling it again after an interruption commits the rest.
/// In-progress files are left alone (a job that ran to its end has none; after a
/// stop-with-savepoint they hold what followed the savepoint's barrier) and counted in one
/// `info` line.
///
/// # Errors
///
/// [`SinkError::Io`] if the directory cannot be listed or a file cannot be renamed.
///
/// # Examples
///
/// ```
/// use streamtask::sink::{TwoPhaseCommitFileSink, commit_finished, read_committed};
/// use streamtask_core::testing::OperatorHarness;
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut h = OperatorHarness::new(TwoPhaseCommitFileSink::new(
///     "out", dir.path(), 0, |s: &&str| s.to_string(),
/// ));
/// h.open().unwrap();
/// h.process("last words").unwrap();
/// h.end_input().unwrap(); // finish: pre-committed as final
/// h.close().unwrap();
/// assert!(read_committed(dir.path()).unwrap().is_empty());
/// assert_eq!(commit_finished(dir.path()).unwrap(), 1);
/// assert_eq!(read_committed(dir.path()).unwrap(), vec!["last words"]);
/// ```
pub fn commit_finished(dir: impl AsRef<Path>) -> Result<usize, SinkError> {
    let dir = dir.as_ref();
    let mut committed = 0;
    let mut in_progress = 0;
    for (file, _) in list(dir)? {
        match file.kind {
            FileKind::Final | FileKind::Pending(_) => {
                if commit_file(dir, file)? {
                    committed += 1;
                }
            }
            FileKind::InProgress => in_progress += 1,
            FileKind::Committed => {}
        }
    }
    if in_progress > 0 {
        // After a stop-with-savepoint: what the tasks wrote after its barrier (results of async
        // calls in flight at the barrier, timers); after a rescale down, also what subtasks the
        // job no longer has left so. Not part of the job's output: a restore of their subtask
        // removes them, and the restored job produces those records again.
        log::info!(
            "{in_progress} in-progress transaction file(s) in {} left uncommitted (written \
             after the last checkpoint or savepoint; not part of the output)",
            dir.display()
        );
    }
    if committed > 0 {
        sync_dir(dir)?;
    }
    Ok(committed)
}

/// Deletes every transaction file in `dir` (committed or not, of every subtask) and returns
/// the paths deleted; other files are left alone. A missing `dir` has nothing to delete.
///
/// The executor calls this when a run starts over: after a finished run, or when an unfinished
/// run's state is discarded explicitly. Without it the new run's output would add to the old.
///
/// # Errors
///
/// [`SinkError::Io`] if the directory cannot be listed or a file cannot be deleted.
pub fn discard_output(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, SinkError> {
    let dir = dir.as_ref();
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    for (_, path) in list(dir)? {
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("discard (delete)", &path, e)),
        }
    }
    if !removed.is_empty() {
        sync_dir(dir)?;
    }
    Ok(removed)
}

/// The committed (visible) files in `dir`, of every subtask, sorted by name: by subtask, then
/// by transaction.
///
/// # Errors
///
/// [`SinkError::Io`] if the directory cannot be listed.
pub fn committed_files(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, SinkError> {
    Ok(list(dir.as_ref())?
        .into_iter()
        .filter(|(file, _)| file.kind == FileKind::Committed)
        .map(|(_, path)| path)
        .collect())
}

/// Every line of every committed file in `dir`, in [`committed_files`] order, then line order.
///
/// # Errors
///
/// [`SinkError::Io`] if the directory cannot be listed or a file read (or is not UTF-8).
///
/// # Examples
///
/// See [`TwoPhaseCommitFileSink`].
pub fn read_committed(dir: impl AsRef<Path>) -> Result<Vec<String>, SinkError> {
    let mut lines = Vec::new();
    for path in committed_files(dir)? {
        let text = fs::read_to_string(&path).map_err(|e| io_error("read", &path, e))?;
        lines.extend(text.split_terminator('\n').map(str::to_string));
    }
    Ok(lines)
}

// ---- file names ----

/// The state a transaction's file name encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// `.part-S-T.inprogress`: records are being appended.
    InProgress,
    /// `.part-S-T.pending-C`: pre-committed for checkpoint `C`.
    Pending(u64),
    /// `.part-S-T.final`: pre-committed by `finish`.
    Final,
    /// `part-S-T`: visible.
    Committed,
}

/// One transaction file of the output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxnFile {
    subtask: usize,
    txn: u64,
    kind: FileKind,
}

impl TxnFile {
    fn name(&self) -> String {
        // Zero-padded so that name order is subtask order, then transaction order.
        let base = format!("part-{:05}-{:08}", self.subtask, self.txn);
        match self.kind {
            FileKind::InProgress => format!(".{base}.inprogress"),
            FileKind::Pending(checkpoint) => format!(".{base}.pending-{checkpoint}"),
            FileKind::Final => format!(".{base}.final"),
            FileKind::Committed => base,
        }
    }

    fn committed(self) -> TxnFile {
        TxnFile {
            kind: FileKind::Committed,
            ..self
        }
    }

    /// Parses a name [`name`](Self::name) wrote; anything else (other tools' files) is `None`.
    fn parse(name: &str) -> Option<TxnFile> {
        let (hidden, rest) = match name.strip_prefix('.') {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        let (subtask, rest) = rest.strip_prefix("part-")?.split_once('-')?;
        let (txn, suffix) = match rest.split_once('.') {
            Some((txn, suffix)) => (txn, Some(suffix)),
            None => (rest, None),
        };
        let kind = match (hidden, suffix) {
            (false, None) => FileKind::Committed,
            (true, Some("inprogress")) => FileKind::InProgress,
            (true, Some("final")) => FileKind::Final,
            (true, Some(s)) => FileKind::Pending(digits(s.strip_prefix("pending-")?)?),
            _ => return None,
        };
        let file = TxnFile {
            subtask: usize::try_from(digits(subtask)?).ok()?,
            txn: digits(txn)?,
            kind,
        };
        // Only canonical names: `part-1-2` is not ours.
        (file.name() == name).then_some(file)
    }
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The transaction files in `dir`, sorted by name.
fn list(dir: &Path) -> Result<Vec<(TxnFile, PathBuf)>, SinkError> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error("list", dir, e))? {
        let entry = entry.map_err(|e| io_error("list", dir, e))?;
        let name = entry.file_name();
        if let Some(file) = name.to_str().and_then(TxnFile::parse) {
            files.push((file, entry.path()));
        }
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(files)
}

/// Renames the pre-committed `file` to its committed name; `Ok(false)` if it was committed
/// already (the recommit of a restore, or a second completion notice).
fn commit_file(dir: &Path, file: TxnFile) -> Result<bool, SinkError> {
    let from = dir.join(file.name());
    let to = dir.join(file.committed().name());
    match fs::rename(&from, &to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::symlink_metadata(&to) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(SinkError::MissingTransaction {
                subtask: file.subtask,
                txn: file.txn,
                pending: from,
                committed: to,
            }),
            Err(e) => Err(io_error("inspect", &to, e)),
        },
        Err(e) => Err(io_error("commit (rename)", &from, e)),
    }
}

/// Makes renames and deletions in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    // Only Unix can open and fsync a directory; elsewhere renames are as durable as the OS
    // makes them.
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync directory", dir, e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> SinkError {
    SinkError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        for kind in [
            FileKind::InProgress,
            FileKind::Pending(0),
            FileKind::Pending(12_345),
            FileKind::Final,
            FileKind::Committed,
        ] {
            let file = TxnFile {
                subtask: 3,
                txn: 42,
                kind,
            };
            assert_eq!(TxnFile::parse(&file.name()), Some(file), "{}", file.name());
        }
    }

    #[test]
    fn foreign_names_are_not_ours() {
        for name in [
            "part-1-2",
            "part-00001-00000002.txt",
            ".part-00001-00000002",
            ".part-00001-00000002.pending-",
            ".part-00001-00000002.pending-x",
            "part-00001-00000002.final",
            "_SUCCESS",
            ".part-0000a-00000002.final",
        ] {
            assert_eq!(TxnFile::parse(name), None, "{name}");
        }
    }

    #[test]
    fn committed_names_sort_by_subtask_then_transaction() {
        let name = |subtask, txn| {
            TxnFile {
                subtask,
                txn,
                kind: FileKind::Committed,
            }
            .name()
        };
        assert!(name(2, 9) < name(10, 0));
        assert!(name(2, 9) < name(2, 10));
    }
}
