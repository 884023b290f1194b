//! The FLIP-27 file source: documented on the [`files`](crate::files) module, since this module is private.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streamtask_core::keygroup::ListState;
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_core::{OperatorError, state::StateError, state::TaskSnapshot};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::monitor::{MonitorState, list_dir};
use super::split::{FileSplit, LineCursor, SplitProgress};
use crate::fault::{FaultKind, FaultPlan};

/// What went wrong listing the directory or matching a restored checkpoint to the enumerator.
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
    /// A restored reader holds a split the bounded enumerator does not know: the directory
    /// changed since the checkpoint was taken.
    #[error(
        "a restored reader holds split {split:?}, which {dir} no longer yields (restore with the directory as it was when the job started)"
    )]
    UnknownSplit {
        /// The split.
        split: FileSplit,
        /// The directory.
        dir: PathBuf,
    },
    /// A split is held by two restored readers, or by a reader and the enumerator.
    #[error(
        "split {split:?} is held twice in the restored state (restore a checkpoint of this job)"
    )]
    HeldTwice {
        /// The split.
        split: FileSplit,
    },
    /// The restored readers hold splits but no enumerator snapshot is among their state.
    #[error(
        "the restored state of {source_name} holds splits but no enumerator snapshot (restore a checkpoint or savepoint this file source wrote)"
    )]
    NoEnumeratorState {
        /// The source.
        source_name: String,
    },
    /// A restored reader's state is not a file source reader's.
    #[error(
        "the restored state of {source_name} is not a file source's: {reason} (restore a checkpoint of this job)"
    )]
    BadState {
        /// The source.
        source_name: String,
        /// What did not decode.
        reason: String,
    },
    /// The enumerator's discovery failed; the job restarts from its latest checkpoint.
    #[error("the split enumerator failed: {reason} (the job restarts from its latest checkpoint)")]
    EnumeratorFailed {
        /// What failed.
        reason: String,
    },
}

/// The enumerator's answer to a reader asking for a split (Flink's `AddSplitEvent` or
/// `NoMoreSplitsEvent`, or no answer yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Read this split.
    Split(FileSplit),
    /// No split now (none discovered yet, or the attempt has not started): idle and ask
    /// again when woken.
    NotYet,
    /// No split is left to assign, and none will be discovered.
    NoMoreSplits,
}

/// The enumerator's checkpointed state: the splits not assigned and the files seen, at the
/// moment a checkpoint was triggered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnumeratorCheckpoint {
    /// Splits discovered and not assigned, in assignment order.
    pub unassigned: Vec<FileSplit>,
    /// The modification-time rule's state (continuous discovery).
    pub seen: MonitorState,
    /// Whether discovery has ended (a bounded source, or a stop condition reached).
    pub discovery_done: bool,
    /// Splits of files not seen yet that restored readers already held or finished (the file
    /// was discovered after the trigger and its split assigned before the reader's barrier):
    /// skipped when the file is discovered.
    #[serde(default)]
    pub claimed: BTreeSet<FileSplit>,
}

/// One item of a file source reader's list state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceItem {
    /// A split the reader holds: in progress (with the offset of its next line) or not started.
    Split(SplitProgress),
    /// A split the reader finished after it was assigned in this attempt, until a completed
    /// checkpoint's trigger came after the assignment (a restore of a checkpoint whose
    /// enumerator snapshot still lists it unassigned must not assign it again).
    Finished(FileSplit),
    /// The enumerator's snapshot taken when checkpoint `checkpoint` was triggered (in reader
    /// 0's state, anywhere after a rescale). Reader 0 carries every snapshot a restore may
    /// still need, because a legacy `ReaderSource` does not tell it which checkpoint it
    /// snapshots; a restore picks the one of its checkpoint.
    Enumerator {
        /// The checkpoint.
        checkpoint: u64,
        /// The enumerator's state at its trigger.
        state: EnumeratorCheckpoint,
    },
}

/// How the enumerator finds splits.
#[derive(Debug, Clone)]
enum Discovery {
    /// The splits listed when the job was built.
    Static(Vec<FileSplit>),
    /// Lists the directory every `interval` while the job runs.
    Continuous(Continuous),
}

/// The continuous enumerator's settings.
#[derive(Debug, Clone)]
pub(crate) struct Continuous {
    pub(crate) interval: Duration,
    pub(crate) stop_after_files: Option<u64>,
    pub(crate) end_marker: Option<String>,
}

#[derive(Debug)]
struct EnumeratorState {
    /// `None` until the attempt's restored state was given to `start_attempt`.
    current: Option<EnumeratorCheckpoint>,
    /// The snapshots taken at trigger time that a restore may still need (none older than the
    /// latest completed checkpoint), by checkpoint id, with the number of assignments made
    /// before the trigger.
    triggered: BTreeMap<u64, (EnumeratorCheckpoint, u64)>,
    /// Assignments made in this attempt.
    assigned: u64,
    /// Readers waiting for an answer.
    waiting: Vec<Option<Waker>>,
    /// Which readers of the attempt restored their state (started).
    started: Vec<bool>,
    /// The attempt is over (its tasks were joined).
    ended: bool,
    /// When the directory was last listed (continuous discovery).
    last_listing: Option<Instant>,
    /// Why discovery failed, for the readers to report.
    failure: Option<String>,
}

/// The split enumerator of a file source. See the [module docs](crate::files) for where it runs, how
/// it is snapshotted at trigger time and how it is restored.
#[derive(Debug)]
pub struct SplitEnumerator {
    name: String,
    dir: PathBuf,
    split_bytes: u64,
    discovery: Discovery,
    faults: Arc<FaultPlan>,
    /// Set when discovery failed: the readers check it on every poll (one load) and fail.
    failed: AtomicBool,
    /// Assignments numbered below this were made before the trigger of a completed
    /// checkpoint: no restore can find them unassigned any more.
    settled: AtomicU64,
    state: Mutex<EnumeratorState>,
    /// Signalled when a reader starts or the attempt ends.
    changed: Condvar,
}

impl SplitEnumerator {
    /// A bounded enumerator: lists `dir` now (files whose names do not start with `.` or `_`,
    /// in name order) and cuts each file into splits of at most `split_bytes`, for
    /// `parallelism` readers.
    ///
    /// # Errors
    ///
    /// [`SplitError::List`] if the directory cannot be listed.
    pub fn for_dir(dir: &Path, split_bytes: u64, parallelism: usize) -> Result<Self, SplitError> {
        let mut files = list_dir(dir).map_err(|source| SplitError::List {
            dir: dir.to_path_buf(),
            source,
        })?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let splits = files
            .into_iter()
            .flat_map(|f| FileSplit::of_file(f.path, f.modified, f.len, split_bytes))
            .collect();
        Ok(SplitEnumerator::new(dir.to_path_buf(), splits, parallelism))
    }

    /// The enumerator of `source` for `parallelism` readers, named `name`, as
    /// [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source) makes it:
    /// continuous if the source monitors its directory, else bounded ([`for_dir`](Self::for_dir)).
    ///
    /// # Errors
    ///
    /// [`SplitError::List`] if a bounded source's directory cannot be listed.
    pub fn of_source(
        name: &str,
        source: &FileSource,
        parallelism: usize,
    ) -> Result<Self, SplitError> {
        let mut enumerator = match &source.continuous {
            Some(settings) => SplitEnumerator::continuous(
                name.to_string(),
                source.dir.clone(),
                source.split_bytes,
                parallelism,
                settings.clone(),
                Arc::clone(&source.faults),
            ),
            None => SplitEnumerator::for_dir(&source.dir, source.split_bytes, parallelism)?,
        };
        enumerator.set_name(name);
        Ok(enumerator)
    }

    /// A bounded enumerator over `splits` (in assignment order) for `parallelism` readers.
    pub fn new(dir: PathBuf, splits: Vec<FileSplit>, parallelism: usize) -> Self {
        SplitEnumerator::with_discovery(
            "files".to_string(),
            dir,
            1,
            parallelism,
            Discovery::Static(splits),
            Arc::new(FaultPlan::none()),
        )
    }

    /// A continuous enumerator of `dir` for `parallelism` readers, discovering files as
    /// `settings` say; `faults` are checked (as [`FaultKind::Source`]) before each file is
    /// discovered, and a fault fails the enumerator (its readers fail, the job restarts).
    pub(crate) fn continuous(
        name: String,
        dir: PathBuf,
        split_bytes: u64,
        parallelism: usize,
        settings: Continuous,
        faults: Arc<FaultPlan>,
    ) -> Self {
        SplitEnumerator::with_discovery(
            name,
            dir,
            split_bytes,
            parallelism,
            Discovery::Continuous(settings),
            faults,
        )
    }

    fn with_discovery(
        name: String,
        dir: PathBuf,
        split_bytes: u64,
        parallelism: usize,
        discovery: Discovery,
        faults: Arc<FaultPlan>,
    ) -> Self {
        let parallelism = parallelism.max(1);
        SplitEnumerator {
            name,
            dir,
            split_bytes,
            discovery,
            faults,
            failed: AtomicBool::new(false),
            settled: AtomicU64::new(0),
            changed: Condvar::new(),
            state: Mutex::new(EnumeratorState {
                current: None,
                triggered: BTreeMap::new(),
                assigned: 0,
                waiting: vec![None; parallelism],
                started: vec![false; parallelism],
                ended: false,
                last_listing: None,
                failure: None,
            }),
        }
    }

    /// The source's name (its vertex in the job).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn set_name(&mut self, name: &str) {
        self.name = name.to_string();
    }

    /// The splits a bounded enumerator starts with, in assignment order (none for a
    /// continuous one).
    pub fn splits(&self) -> &[FileSplit] {
        match &self.discovery {
            Discovery::Static(splits) => splits,
            Discovery::Continuous(_) => &[],
        }
    }

    fn initial(&self) -> EnumeratorCheckpoint {
        match &self.discovery {
            Discovery::Static(splits) => EnumeratorCheckpoint {
                unassigned: splits.clone(),
                seen: MonitorState::default(),
                discovery_done: true,
                claimed: BTreeSet::new(),
            },
            Discovery::Continuous(_) => EnumeratorCheckpoint::default(),
        }
    }

    /// Starts an attempt restored from checkpoint `checkpoint` (`None`: a fresh start): the
    /// enumerator's state is its snapshot of that checkpoint among the readers' restored states
    /// (`restored`: each reader's source entry), less the splits the readers hold or finished
    /// after the trigger. Forgets every snapshot and failure of the previous attempt. Call it
    /// before any reader of the attempt runs.
    ///
    /// # Errors
    ///
    /// [`SplitError::BadState`] if an entry is not a file source reader's,
    /// [`SplitError::NoEnumeratorState`] if readers hold splits but the enumerator's snapshot
    /// of the checkpoint is not among them, [`SplitError::HeldTwice`] if two readers hold one
    /// split, [`SplitError::UnknownSplit`] if a bounded enumerator does not know a held split.
    pub fn start_attempt(
        &self,
        checkpoint: Option<u64>,
        restored: &[Option<&[u8]>],
    ) -> Result<(), SplitError> {
        let mut snapshots = BTreeMap::new();
        let mut held = BTreeSet::new();
        let mut finished = BTreeSet::new();
        for bytes in restored.iter().flatten() {
            let items = decode_items(bytes).map_err(|e| SplitError::BadState {
                source_name: self.name.clone(),
                reason: e.to_string(),
            })?;
            for item in items {
                match item {
                    SourceItem::Split(p) => {
                        if !held.insert(p.split.clone()) {
                            return Err(SplitError::HeldTwice { split: p.split });
                        }
                    }
                    SourceItem::Finished(split) => {
                        finished.insert(split);
                    }
                    SourceItem::Enumerator { checkpoint, state } => {
                        snapshots.insert(checkpoint, state);
                    }
                }
            }
        }
        let mut current = match checkpoint.and_then(|id| snapshots.remove(&id)) {
            Some(e) => e,
            None if held.is_empty() && snapshots.is_empty() => self.initial(),
            None => {
                return Err(SplitError::NoEnumeratorState {
                    source_name: self.name.clone(),
                });
            }
        };
        // Assigned between the trigger and the reader's barrier: the reader's snapshot wins.
        current
            .unassigned
            .retain(|s| !held.contains(s) && !finished.contains(s));
        // Discovered after the trigger, assigned before the barrier: not again when the file
        // is discovered again.
        for split in held.iter().chain(&finished) {
            if current.seen.is_new(&split.path, split.modified) {
                current.claimed.insert(split.clone());
            }
        }
        if let Discovery::Static(splits) = &self.discovery
            && let Some(split) = held.iter().find(|s| !splits.contains(s))
        {
            return Err(SplitError::UnknownSplit {
                split: split.clone(),
                dir: self.dir.clone(),
            });
        }
        let mut state = self.state.lock();
        state.current = Some(current);
        state.triggered.clear();
        state.assigned = 0;
        state.waiting.iter_mut().for_each(|w| *w = None);
        state.started.iter_mut().for_each(|s| *s = false);
        state.ended = false;
        state.last_listing = None;
        state.failure = None;
        self.settled.store(0, Ordering::Release);
        // Release: pairs with the readers' Acquire load; a reader that sees `false` after a
        // restart sees the cleared failure too.
        self.failed.store(false, Ordering::Release);
        Ok(())
    }

    /// Checkpoint `checkpoint` was triggered: snapshots the enumerator, for reader 0 to carry
    /// (see the [module docs](crate::files)). Called on the coordinator's thread before the barriers
    /// go out.
    ///
    /// Waits until every reader of the attempt started (restored its state) or the attempt
    /// ended: a legacy `ReaderSource` triggered before its reader started snapshots the bytes
    /// it was restored with, which would carry no snapshot of this checkpoint.
    pub fn checkpoint_coordinator(&self, checkpoint: u64) {
        let mut state = self.state.lock();
        while !state.ended && !state.started.iter().all(|s| *s) {
            self.changed.wait(&mut state);
        }
        let Some(current) = state.current.clone() else {
            // No attempt started: no reader runs, nothing can be assigned.
            return;
        };
        let assigned = state.assigned;
        state.triggered.insert(checkpoint, (current, assigned));
    }

    /// Reader `subtask` restored its state and runs.
    fn reader_started(&self, subtask: usize) {
        self.state.lock().started[subtask] = true;
        self.changed.notify_all();
    }

    /// The attempt is over: its tasks were joined (a trigger waiting for readers that never
    /// started gives up).
    pub fn end_attempt(&self) {
        self.state.lock().ended = true;
        self.changed.notify_all();
    }

    /// Checkpoint `checkpoint` completed: no restore needs an older snapshot, nor the
    /// finished splits assigned before its trigger.
    pub fn checkpoint_completed(&self, checkpoint: u64) {
        let mut state = self.state.lock();
        if let Some((_, assigned)) = state.triggered.get(&checkpoint) {
            self.settled.fetch_max(*assigned, Ordering::AcqRel);
        }
        state.triggered = state.triggered.split_off(&checkpoint);
    }

    /// The snapshots reader 0 carries in its snapshot now.
    fn carried(&self) -> Vec<SourceItem> {
        self.state
            .lock()
            .triggered
            .iter()
            .map(|(id, (state, _))| SourceItem::Enumerator {
                checkpoint: *id,
                state: state.clone(),
            })
            .collect()
    }

    /// Reader `subtask` asks for a split (Flink's `handleSplitRequest`).
    pub fn request(&self, subtask: usize) -> Assignment {
        self.assign(subtask).0
    }

    /// [`request`](Self::request), with the assignment's number in this attempt.
    fn assign(&self, _subtask: usize) -> (Assignment, u64) {
        let mut state = self.state.lock();
        let number = state.assigned;
        let Some(current) = state.current.as_mut() else {
            return (Assignment::NotYet, number);
        };
        if current.unassigned.is_empty() {
            let answer = if current.discovery_done {
                Assignment::NoMoreSplits
            } else {
                Assignment::NotYet
            };
            return (answer, number);
        }
        let split = current.unassigned.remove(0);
        state.assigned += 1;
        (Assignment::Split(split), number)
    }

    /// Wakes `waker` when the enumerator may answer reader `subtask` with something other
    /// than [`Assignment::NotYet`] (at once if it may now).
    pub fn wake_when_ready(&self, subtask: usize, waker: &Waker) {
        let mut state = self.state.lock();
        let ready = state.failure.is_some()
            || state
                .current
                .as_ref()
                .is_some_and(|c| !c.unassigned.is_empty() || c.discovery_done);
        if ready {
            waker.wake_by_ref();
        } else {
            state.waiting[subtask] = Some(waker.clone());
        }
    }

    /// Why discovery failed, if it did (checked by the readers on every poll).
    fn failure(&self) -> Option<SplitError> {
        // Acquire: pairs with the Release store in `fail`, so the reason is set.
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let reason = self.state.lock().failure.clone().unwrap_or_default();
        Some(SplitError::EnumeratorFailed { reason })
    }

    fn fail(&self, state: &mut EnumeratorState, reason: String) {
        log::warn!("{}: split enumerator failed: {reason}", self.name);
        state.failure = Some(reason);
        self.failed.store(true, Ordering::Release);
        state
            .waiting
            .iter_mut()
            .filter_map(Option::take)
            .for_each(Waker::wake);
    }

    /// Lists the directory if the interval passed since the last listing (continuous
    /// discovery; nothing for a bounded enumerator or before an attempt started), adds the
    /// splits of new files and wakes the readers waiting. Called by the executor's thread
    /// every few milliseconds while the job runs. A listing error or an injected fault fails
    /// the enumerator: the readers fail with it and the job restarts.
    pub fn discover(&self) {
        let Discovery::Continuous(settings) = &self.discovery else {
            return;
        };
        let mut state = self.state.lock();
        if state.failure.is_some()
            || state.current.as_ref().is_none_or(|c| c.discovery_done)
            || state
                .last_listing
                .is_some_and(|at| at.elapsed() < settings.interval)
        {
            return;
        }
        state.last_listing = Some(Instant::now());
        // The marker first: every file written before it is in the listing below.
        let marked = settings
            .end_marker
            .as_ref()
            .is_some_and(|m| self.dir.join(m).exists());
        let listed = match list_dir(&self.dir) {
            Ok(listed) => listed,
            Err(e) => {
                let reason = format!("listing {}: {e}", self.dir.display());
                self.fail(&mut state, reason);
                return;
            }
        };
        let mut added = false;
        for file in listed {
            let current = state.current.as_mut().expect("checked above");
            let done = settings
                .stop_after_files
                .is_some_and(|n| current.seen.files >= n);
            if done {
                break;
            }
            let is_marker = settings
                .end_marker
                .as_ref()
                .is_some_and(|m| file.path.file_name().is_some_and(|n| n == m.as_str()));
            if is_marker || !current.seen.is_new(&file.path, file.modified) {
                continue;
            }
            let faults = &self.faults;
            if let Err(panic) =
                std::panic::catch_unwind(|| faults.check(FaultKind::Source)).map_err(panic_text)
            {
                self.fail(&mut state, panic);
                return;
            }
            // The file's splits and the seen state that says it was discovered, in one
            // section: a snapshot has both or neither.
            let current = state.current.as_mut().expect("checked above");
            let splits =
                FileSplit::of_file(file.path.clone(), file.modified, file.len, self.split_bytes);
            for split in splits {
                if !current.claimed.remove(&split) {
                    current.unassigned.push(split);
                }
            }
            current.seen.forwarded(file.path, file.modified);
            added = true;
        }
        let current = state.current.as_mut().expect("checked above");
        if marked
            || settings
                .stop_after_files
                .is_some_and(|n| current.seen.files >= n)
        {
            current.discovery_done = true;
            added = true;
        }
        if added {
            state
                .waiting
                .iter_mut()
                .filter_map(Option::take)
                .for_each(Waker::wake);
        }
    }
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".to_string())
}

fn decode_items(bytes: &[u8]) -> Result<Vec<SourceItem>, StateError> {
    match ListState::<SourceItem>::decode(bytes) {
        Ok(list) => Ok(list.items),
        // Snapshots a legacy `ReaderSource` wrote before it kept the reader's own bytes wrap
        // them in an option of bytes: still read.
        Err(e) => match streamtask_core::state::decode::<Option<Vec<u8>>>(bytes) {
            Ok(Some(inner)) => ListState::<SourceItem>::decode(&inner).map(|s| s.items),
            Ok(None) => Ok(Vec::new()),
            Err(_) => Err(e),
        },
    }
}

/// The source entries of a restored checkpoint's readers of `vertex`, in subtask order.
pub(crate) fn restored_entries<'a>(
    tasks: impl Fn(&str) -> Option<&'a TaskSnapshot>,
    vertex: &str,
    parallelism: usize,
) -> Vec<Option<&'a [u8]>> {
    (0..parallelism)
        .map(|i| tasks(&format!("{vertex}#{i}")).and_then(|t| t.get(TaskSnapshot::SOURCE)))
        .collect()
}

/// A file source reader's checkpointed state, as its list state's items say: the split being
/// read with its position, and the splits assigned and not finished, in order (after a rescale,
/// several may be in progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileReaderState {
    /// The split being read and the offset of its next line.
    pub current: Option<SplitProgress>,
    /// Splits assigned and not finished, in reading order (in progress ones keep their
    /// offsets).
    pub pending: VecDeque<SplitProgress>,
}

impl FileReaderState {
    /// The state in a reader's snapshot (its list state's split items).
    ///
    /// # Errors
    ///
    /// [`StateError::Decode`] if `bytes` are not a file source reader's snapshot.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        let pending = decode_items(bytes)?
            .into_iter()
            .filter_map(|item| match item {
                SourceItem::Split(p) => Some(p),
                SourceItem::Finished(_) | SourceItem::Enumerator { .. } => None,
            })
            .collect();
        Ok(FileReaderState {
            current: None,
            pending,
        })
    }

    /// Every split held, in reading order.
    pub fn splits(&self) -> impl Iterator<Item = &SplitProgress> {
        self.current.iter().chain(self.pending.iter())
    }
}

/// One parallel reader of a [`FileSource`]: asks the enumerator for a split whenever it has
/// none, reads it line by line (one line per poll), checkpoints its splits as list state.
pub struct FileSourceReader {
    name: String,
    subtask: usize,
    enumerator: Arc<SplitEnumerator>,
    state: FileReaderState,
    /// The assignment number of the current split, if it was assigned in this attempt.
    current_number: Option<u64>,
    /// Splits finished in this attempt with their assignment numbers, until settled.
    finished: Vec<(FileSplit, u64)>,
    cursor: Option<LineCursor>,
    no_more_splits: bool,
    faults: Arc<FaultPlan>,
}

impl FileSourceReader {
    /// Reader `subtask` of `enumerator`; `faults` count emitted lines as
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
            enumerator,
            state: FileReaderState::default(),
            current_number: None,
            finished: Vec::new(),
            cursor: None,
            no_more_splits: false,
            faults,
        }
    }

    /// The reader's splits now.
    pub fn state(&self) -> &FileReaderState {
        &self.state
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
            self.state = FileReaderState::decode(bytes)
                .map_err(|e| OperatorError::state(self.name.clone(), e))?;
        }
        self.enumerator.reader_started(self.subtask);
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, String>,
    ) -> Result<InputStatus, OperatorError> {
        if let Some(e) = self.enumerator.failure() {
            return Err(self.failed(e));
        }
        if self.state.current.is_none() {
            let (next, number) = match self.state.pending.pop_front() {
                // Restored: assigned in an earlier attempt, no restore can find it unassigned.
                Some(progress) => (progress, None),
                None if self.no_more_splits => return Ok(InputStatus::EndOfInput),
                None => match self.enumerator.assign(self.subtask) {
                    (Assignment::Split(split), number) => {
                        (SplitProgress::fresh(split), Some(number))
                    }
                    (Assignment::NotYet, _) => {
                        // No split: idle until the enumerator can answer.
                        output.mark_idle()?;
                        return Ok(InputStatus::NothingAvailable);
                    }
                    (Assignment::NoMoreSplits, _) => {
                        self.no_more_splits = true;
                        return Ok(InputStatus::EndOfInput);
                    }
                },
            };
            self.state.current = Some(next);
            self.current_number = number;
            self.cursor = None;
        }
        let progress = self.state.current.as_mut().expect("set above");
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
                if let Some(number) = self.current_number.take() {
                    self.finished.push((done.split, number));
                }
                self.cursor = None;
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.enumerator.wake_when_ready(self.subtask, waker);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        let settled = self.enumerator.settled.load(Ordering::Acquire);
        self.finished.retain(|(_, number)| *number >= settled);
        let carried = if self.subtask == 0 {
            self.enumerator.carried()
        } else {
            Vec::new()
        };
        let items: Vec<SourceItem> = carried
            .into_iter()
            .chain(self.state.splits().cloned().map(SourceItem::Split))
            .chain(
                self.finished
                    .iter()
                    .map(|(split, _)| SourceItem::Finished(split.clone())),
            )
            .collect();
        ListState::new(items)
            .encode()
            .map_err(|e| OperatorError::state(self.name.clone(), e))
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

/// A file source: the lines of the files of a directory, read in byte-range splits by
/// parallel readers; see [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source).
#[derive(Debug, Clone)]
pub struct FileSource {
    pub(crate) dir: PathBuf,
    pub(crate) split_bytes: u64,
    pub(crate) faults: Arc<FaultPlan>,
    pub(crate) continuous: Option<Continuous>,
}

impl FileSource {
    /// The files of `dir` (names starting with `.` or `_` are skipped), one split per file up
    /// to 64 MiB; bounded (the files there when the job is built) unless
    /// [`monitor_continuously`](Self::monitor_continuously).
    pub fn for_dir(dir: impl Into<PathBuf>) -> Self {
        FileSource {
            dir: dir.into(),
            split_bytes: 64 << 20,
            faults: Arc::new(FaultPlan::none()),
            continuous: None,
        }
    }

    /// Cuts files into splits of at most `bytes` (at least 1).
    pub fn with_split_bytes(mut self, bytes: u64) -> Self {
        self.split_bytes = bytes.max(1);
        self
    }

    /// Injects faults: [`FaultKind::Operator`] counts the lines the readers emit,
    /// [`FaultKind::Source`] the files a continuous enumerator discovers (a fault there fails
    /// the enumerator, and the job restarts with it restored).
    pub fn with_faults(mut self, faults: Arc<FaultPlan>) -> Self {
        self.faults = faults;
        self
    }

    /// Discovers files while the job runs: lists the directory every `interval` (at least
    /// 1 ms) and assigns the splits of new files (by the monitoring source's modification-time
    /// rule, see the [`files`](crate::files) module docs) to the readers that ask. Unbounded unless
    /// [`stop_after_files`](Self::stop_after_files) or [`end_marker`](Self::end_marker) is set.
    pub fn monitor_continuously(mut self, interval: Duration) -> Self {
        self.continuous = Some(Continuous {
            interval: interval.max(Duration::from_millis(1)),
            stop_after_files: None,
            end_marker: None,
        });
        self
    }

    /// Stops discovering after `n` files (continuous discovery only): the readers end once
    /// their splits are read.
    pub fn stop_after_files(mut self, n: u64) -> Self {
        if let Some(c) = self.continuous.as_mut() {
            c.stop_after_files = Some(n);
        }
        self
    }

    /// Stops discovering once a listing finds a file named `name` in the directory
    /// (continuous discovery only); the marker itself is not read. Give it a name starting
    /// with `_` or `.` (or write it last): files written before it are read.
    pub fn end_marker(mut self, name: &str) -> Self {
        if let Some(c) = self.continuous.as_mut() {
            c.end_marker = Some(name.to_string());
        }
        self
    }
}
