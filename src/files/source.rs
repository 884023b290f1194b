//! A bounded FLIP-27 file source: a [`SplitEnumerator`] that hands out the byte-range splits of
//! a directory's files to parallel [`FileSourceReader`]s when they ask, as Flink's `FileSource`
//! with its `StaticFileSplitEnumerator` does.
//!
//! # Where the enumerator runs, and why it has no checkpoint of its own
//!
//! Flink runs the enumerator in the `SourceCoordinator` on the JobManager and checkpoints its
//! unassigned splits when checkpoint N is triggered, before the barriers are injected; on a
//! restore, the splits assigned after the readers' snapshot of N come back through
//! `addSplitsBack`. Here the enumerator is one object in the job layer, outside every task, made
//! when the job is built and shared by the readers of every attempt (a handle, called from the
//! reader's own thread when it asks for a split: the readers "ask through a shared handle").
//!
//! Its state needs no snapshot of its own: for a bounded source the set of splits is fixed when
//! the job is built (the directory is listed once), and each reader's snapshot of checkpoint N
//! holds every split it was ever assigned (the one being read with its offset, the ones not
//! started, the ones finished). In this executor a checkpoint completes only with a snapshot of
//! every reader (a finished task stops checkpointing), so "all splits minus those in the
//! readers' snapshots of N" is exactly what Flink's enumerator checkpoint plus `addSplitsBack`
//! would give: a split assigned after its reader's snapshot of N is in no snapshot, so it is
//! unassigned again. On a restart the enumerator therefore assigns nothing until every reader
//! of the new attempt registered (with its restored splits); until then, and whenever it holds
//! no split, a reader is idle (`NothingAvailable`, its stream marked idle) and is woken when
//! the enumerator can answer. When no split is left it answers `NoMoreSplits` and the reader
//! ends its input once its own splits are read.
//!
//! An enumerator that discovers splits while the job runs (Flink's continuous
//! `FileSource::monitorContinuously`) would have state no reader holds (the files seen), and
//! would need the coordinator-side snapshot Flink takes; it is not built here (see
//! [`crate::files::monitor`] for the legacy-source form of continuous reading).

use std::collections::{BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use streamtask_core::OperatorError;
use streamtask_core::state::{decode, encode};
use streamtask_core::sync::Mutex;
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::split::{FileSplit, LineCursor, SplitProgress};
use crate::demo::fault::{FaultKind, FaultPlan};

/// What went wrong making the splits or matching a restored reader's splits to them.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// The directory could not be listed.
    #[error("listing {dir}: {source} (give an existing, readable directory)")]
    List {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A restored reader holds a split the enumerator does not know: the directory changed
    /// since the checkpoint was taken.
    #[error(
        "reader {subtask} restored split {split:?}, which {dir} no longer yields (restore with the directory as it was when the job started)"
    )]
    UnknownSplit {
        /// The reader.
        subtask: usize,
        /// The split.
        split: FileSplit,
        /// The directory.
        dir: PathBuf,
    },
    /// A reader of an earlier attempt registered after a later attempt's readers did: its
    /// task should have been joined.
    #[error(
        "reader {subtask} of attempt {attempt} registered during attempt {current} (make every reader through the enumerator's `reader_made`)"
    )]
    StaleReader {
        /// The reader.
        subtask: usize,
        /// Its attempt.
        attempt: u64,
        /// The enumerator's attempt.
        current: u64,
    },
    /// Two restored readers hold the same split: the checkpoint is not one of this job.
    #[error("split {split:?} is held by two restored readers (restore a checkpoint of this job)")]
    HeldTwice {
        /// The split.
        split: FileSplit,
    },
}

/// The enumerator's answer to a reader asking for a split (Flink's `AddSplitEvent` or
/// `NoMoreSplitsEvent`, or no answer yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Read this split.
    Split(FileSplit),
    /// Not every reader of this attempt registered yet: ask again when woken.
    NotYet,
    /// No split is left to assign.
    NoMoreSplits,
}

#[derive(Debug)]
struct EnumeratorState {
    /// The attempt whose readers registered.
    attempt: u64,
    /// What each reader of the current attempt claimed when it registered.
    registered: Vec<Option<Vec<FileSplit>>>,
    /// The splits not assigned, once every reader registered.
    unassigned: Option<VecDeque<FileSplit>>,
    /// Readers waiting for an answer.
    waiting: Vec<Option<Waker>>,
}

/// The split enumerator of a bounded file source: every split of the files of a directory,
/// assigned one at a time to the reader that asks. See the [module docs](self) for where it
/// runs and how it is restored.
#[derive(Debug)]
pub struct SplitEnumerator {
    dir: PathBuf,
    splits: Vec<FileSplit>,
    parallelism: usize,
    /// Readers made so far, over every attempt.
    made: AtomicU64,
    state: Mutex<EnumeratorState>,
}

impl SplitEnumerator {
    /// Lists `dir` (files whose names do not start with `.` or `_`, in name order) and cuts each
    /// file into splits of at most `split_bytes`, for `parallelism` readers.
    ///
    /// # Errors
    ///
    /// [`SplitError::List`] if the directory or a file's metadata cannot be read.
    pub fn for_dir(dir: &Path, split_bytes: u64, parallelism: usize) -> Result<Self, SplitError> {
        let list = |source| SplitError::List {
            dir: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(list)? {
            let entry = entry.map_err(list)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata().map_err(list)?;
            if !meta.is_file() || name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            files.push((entry.path(), modified, meta.len()));
        }
        files.sort();
        let splits = files
            .into_iter()
            .flat_map(|(path, modified, len)| FileSplit::of_file(path, modified, len, split_bytes))
            .collect();
        Ok(SplitEnumerator::new(dir.to_path_buf(), splits, parallelism))
    }

    /// An enumerator over `splits` (in assignment order) for `parallelism` readers.
    pub fn new(dir: PathBuf, splits: Vec<FileSplit>, parallelism: usize) -> Self {
        SplitEnumerator {
            dir,
            splits,
            parallelism,
            made: AtomicU64::new(0),
            state: Mutex::new(EnumeratorState {
                attempt: 0,
                registered: vec![None; parallelism],
                unassigned: None,
                waiting: vec![None; parallelism],
            }),
        }
    }

    /// Every split, in assignment order.
    pub fn splits(&self) -> &[FileSplit] {
        &self.splits
    }

    /// The attempt a reader made now belongs to. The executor makes every reader of an
    /// attempt (one per subtask, on its spawning thread) before any of the next, so the
    /// `parallelism` readers made first are attempt 0, the next ones attempt 1, and so on.
    pub fn reader_made(&self) -> u64 {
        self.made.fetch_add(1, Ordering::AcqRel) / self.parallelism.max(1) as u64
    }

    /// Reader `subtask` of `attempt` registers with the splits its restored state holds
    /// (none on a fresh start). The first reader of a newer attempt starts the enumerator
    /// over (the executor joins every task of an attempt before it starts the next); once
    /// every reader of the attempt registered, the unassigned splits are those no restored
    /// reader holds.
    ///
    /// # Errors
    ///
    /// [`SplitError::StaleReader`] for a reader of an attempt before the current one;
    /// [`SplitError::UnknownSplit`] or [`SplitError::HeldTwice`] when the restored readers'
    /// splits do not fit this enumerator's.
    pub fn register(
        &self,
        attempt: u64,
        subtask: usize,
        held: Vec<FileSplit>,
    ) -> Result<(), SplitError> {
        let mut state = self.state.lock();
        if attempt < state.attempt {
            return Err(SplitError::StaleReader {
                subtask,
                attempt,
                current: state.attempt,
            });
        }
        if attempt > state.attempt {
            state.attempt = attempt;
            state.registered.iter_mut().for_each(|r| *r = None);
            state.unassigned = None;
            state.waiting.iter_mut().for_each(|w| *w = None);
        }
        state.registered[subtask] = Some(held);
        if state.registered.iter().all(Option::is_some) {
            let mut claimed = BTreeSet::new();
            for (reader, held) in state.registered.iter().enumerate() {
                for split in held.iter().flatten() {
                    if !self.splits.contains(split) {
                        return Err(SplitError::UnknownSplit {
                            subtask: reader,
                            split: split.clone(),
                            dir: self.dir.clone(),
                        });
                    }
                    if !claimed.insert(split.clone()) {
                        return Err(SplitError::HeldTwice {
                            split: split.clone(),
                        });
                    }
                }
            }
            let unassigned = self
                .splits
                .iter()
                .filter(|s| !claimed.contains(*s))
                .cloned()
                .collect();
            state.unassigned = Some(unassigned);
            state
                .waiting
                .iter_mut()
                .filter_map(Option::take)
                .for_each(Waker::wake);
        }
        Ok(())
    }

    /// Reader `subtask` asks for a split (Flink's `handleSplitRequest`).
    pub fn request(&self, _subtask: usize) -> Assignment {
        let mut state = self.state.lock();
        match state.unassigned.as_mut() {
            None => Assignment::NotYet,
            Some(unassigned) => match unassigned.pop_front() {
                Some(split) => Assignment::Split(split),
                None => Assignment::NoMoreSplits,
            },
        }
    }

    /// Wakes `waker` when the enumerator can answer reader `subtask` (at once if it can now).
    pub fn wake_when_ready(&self, subtask: usize, waker: &Waker) {
        let mut state = self.state.lock();
        if state.unassigned.is_some() {
            waker.wake_by_ref();
        } else {
            state.waiting[subtask] = Some(waker.clone());
        }
    }
}

/// A file source reader's checkpointed state: every split it was assigned, with the position of
/// the one being read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileReaderState {
    /// The split being read and the offset of its next line.
    pub current: Option<SplitProgress>,
    /// Splits assigned and not started, in order.
    pub pending: VecDeque<FileSplit>,
    /// Splits read to their end.
    pub finished: Vec<FileSplit>,
}

impl FileReaderState {
    fn held(&self) -> Vec<FileSplit> {
        self.current
            .iter()
            .map(|p| p.split.clone())
            .chain(self.pending.iter().cloned())
            .chain(self.finished.iter().cloned())
            .collect()
    }
}

/// One parallel reader of a [`FileSource`]: asks the enumerator for a split whenever it has
/// none, reads it line by line (one line per poll), checkpoints its [`FileReaderState`].
pub struct FileSourceReader {
    name: String,
    subtask: usize,
    attempt: u64,
    enumerator: Arc<SplitEnumerator>,
    state: FileReaderState,
    cursor: Option<LineCursor>,
    no_more_splits: bool,
    faults: Arc<FaultPlan>,
}

impl FileSourceReader {
    /// Reader `subtask` of `enumerator`, of the attempt
    /// [`reader_made`](SplitEnumerator::reader_made) says; `faults` count emitted lines as
    /// [`FaultKind::Operator`].
    pub fn new(
        name: String,
        subtask: usize,
        enumerator: Arc<SplitEnumerator>,
        faults: Arc<FaultPlan>,
    ) -> Self {
        FileSourceReader {
            name,
            subtask,
            attempt: enumerator.reader_made(),
            enumerator,
            state: FileReaderState::default(),
            cursor: None,
            no_more_splits: false,
            faults,
        }
    }

    fn failed(&self, e: impl Into<streamtask_core::BoxError>) -> OperatorError {
        OperatorError::user(self.name.clone(), e)
    }
}

impl SourceReader<String> for FileSourceReader {
    fn name(&self) -> &str {
        &self.name
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.state = decode(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?;
        }
        self.enumerator
            .register(self.attempt, self.subtask, self.state.held())
            .map_err(|e| self.failed(e))
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, String>,
    ) -> Result<InputStatus, OperatorError> {
        if self.state.current.is_none() {
            let next = match self.state.pending.pop_front() {
                Some(split) => Some(split),
                None if self.no_more_splits => return Ok(InputStatus::EndOfInput),
                None => match self.enumerator.request(self.subtask) {
                    Assignment::Split(split) => Some(split),
                    Assignment::NotYet => {
                        // No split: idle until the enumerator can answer.
                        output.mark_idle()?;
                        return Ok(InputStatus::NothingAvailable);
                    }
                    Assignment::NoMoreSplits => {
                        self.no_more_splits = true;
                        return Ok(InputStatus::EndOfInput);
                    }
                },
            };
            self.state.current = next.map(SplitProgress::fresh);
            self.cursor = None;
        }
        let Some(progress) = self.state.current.as_mut() else {
            return Ok(InputStatus::MoreAvailable);
        };
        if self.cursor.is_none() {
            self.cursor = Some(
                LineCursor::open(progress)
                    .map_err(|e| OperatorError::user(self.name.clone(), e))?,
            );
        }
        let cursor = self.cursor.as_mut().expect("opened above");
        match cursor
            .next_line()
            .map_err(|e| OperatorError::user(self.name.clone(), e))?
        {
            Some((line, after)) => {
                self.faults.check(FaultKind::Operator);
                progress.position = Some(after);
                output.collect(line)?;
            }
            None => {
                let done = self.state.current.take().expect("read above");
                self.state.finished.push(done.split);
                self.cursor = None;
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.enumerator.wake_when_ready(self.subtask, waker);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.state).map_err(|e| OperatorError::state(self.name.clone(), e))
    }
}

impl std::fmt::Debug for FileSourceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSourceReader")
            .field("name", &self.name)
            .field("subtask", &self.subtask)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A bounded file source: the lines of the files of a directory, read in byte-range splits by
/// parallel readers; see [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source).
#[derive(Debug, Clone)]
pub struct FileSource {
    pub(crate) dir: PathBuf,
    pub(crate) split_bytes: u64,
    pub(crate) faults: Arc<FaultPlan>,
}

impl FileSource {
    /// The files of `dir` (names starting with `.` or `_` are skipped), one split per file up
    /// to 64 MiB.
    pub fn for_dir(dir: impl Into<PathBuf>) -> Self {
        FileSource {
            dir: dir.into(),
            split_bytes: 64 << 20,
            faults: Arc::new(FaultPlan::none()),
        }
    }

    /// Cuts files into splits of at most `bytes` (at least 1).
    pub fn with_split_bytes(mut self, bytes: u64) -> Self {
        self.split_bytes = bytes.max(1);
        self
    }

    /// Injects faults: [`FaultKind::Operator`] counts the lines the readers emit.
    pub fn with_faults(mut self, faults: Arc<FaultPlan>) -> Self {
        self.faults = faults;
        self
    }
}
