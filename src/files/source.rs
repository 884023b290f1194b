//! The FLIP-27 file source: documented on the [`files`](crate::files) module, since this module is private.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streamtask_core::OperatorError;
use streamtask_core::state::{StateError, decode, encode};
use streamtask_mailbox::InputStatus;

use super::monitor::{MonitorState, list_dir};
use super::split::{FileSplit, LineCursor, SplitProgress};
use crate::fault::{FaultKind, FaultPlan};
use crate::source::decode_items;
use crate::source::{
    Boundedness, EnumeratorContext, Source, SourceError, SourceSplit, SplitEnumerator, SplitOutput,
    SplitReader, SplitStateItem,
};

/// What went wrong listing the directory of a file source.
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
    /// An injected fault failed discovery; the job restarts from its latest checkpoint.
    #[error("discovering {dir}: {reason} (the job restarts from its latest checkpoint)")]
    Discovery {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// The file enumerator's checkpointed state: the splits not assigned and the files seen, at
/// the moment a checkpoint was triggered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnumeratorCheckpoint {
    /// Splits discovered and not assigned, in assignment order.
    pub unassigned: Vec<FileSplit>,
    /// The modification-time rule's state (continuous discovery).
    pub seen: MonitorState,
    /// Whether discovery has ended (a bounded source, or a stop condition reached).
    pub discovery_done: bool,
}

/// The continuous enumerator's settings.
#[derive(Debug, Clone)]
pub(crate) struct Continuous {
    pub(crate) interval: Duration,
    pub(crate) stop_after_files: Option<u64>,
    pub(crate) end_marker: Option<String>,
}

impl SourceSplit for SplitProgress {
    /// The file, its modification time when listed and the byte range: a file modified since
    /// is another split.
    fn split_id(&self) -> String {
        let s = &self.split;
        format!("{}@{}[{},{})", s.path.display(), s.modified, s.start, s.end)
    }

    fn encode(&self) -> Result<Vec<u8>, SourceError> {
        encode(self).map_err(SourceError::user)
    }

    fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
        decode(bytes).map_err(SourceError::user)
    }
}

/// The split enumerator of a [`FileSource`]: hands out the splits of the files there when the
/// job was built (bounded), or of the files it discovers (continuous), one per request.
#[derive(Debug)]
pub struct FileSplitEnumerator {
    dir: PathBuf,
    split_bytes: u64,
    continuous: Option<Continuous>,
    faults: Arc<FaultPlan>,
    state: EnumeratorCheckpoint,
    /// Readers that asked when no split was there, in the order they asked.
    awaiting: VecDeque<usize>,
    last_listing: Option<Instant>,
}

impl FileSplitEnumerator {
    /// The enumerator's state now.
    pub fn state(&self) -> &EnumeratorCheckpoint {
        &self.state
    }

    /// Answers the readers waiting, as far as splits are there (or discovery is done).
    fn answer_waiting(
        &mut self,
        context: &mut EnumeratorContext<'_, SplitProgress>,
    ) -> Result<(), SourceError> {
        while let Some(&subtask) = self.awaiting.front() {
            if !self.state.unassigned.is_empty() {
                let split = self.state.unassigned.remove(0);
                context.assign_split(subtask, SplitProgress::fresh(split))?;
            } else if self.state.discovery_done {
                context.signal_no_more_splits(subtask)?;
            } else {
                break;
            }
            self.awaiting.pop_front();
        }
        Ok(())
    }

    /// Lists the directory if the interval passed (continuous discovery) and adds the splits
    /// of new files.
    fn list(&mut self, settings: &Continuous) -> Result<(), SourceError> {
        if self.state.discovery_done
            || self
                .last_listing
                .is_some_and(|at| at.elapsed() < settings.interval)
        {
            return Ok(());
        }
        self.last_listing = Some(Instant::now());
        // The marker first: every file written before it is in the listing below.
        let marked = settings
            .end_marker
            .as_ref()
            .is_some_and(|m| self.dir.join(m).exists());
        let listed = list_dir(&self.dir).map_err(|source| {
            SourceError::user(SplitError::List {
                dir: self.dir.clone(),
                source,
            })
        })?;
        let done =
            |s: &EnumeratorCheckpoint| settings.stop_after_files.is_some_and(|n| s.seen.files >= n);
        for file in listed {
            if done(&self.state) {
                break;
            }
            let is_marker = settings
                .end_marker
                .as_ref()
                .is_some_and(|m| file.path.file_name().is_some_and(|n| n == m.as_str()));
            if is_marker || !self.state.seen.is_new(&file.path, file.modified) {
                continue;
            }
            let faults = &self.faults;
            std::panic::catch_unwind(|| faults.check(FaultKind::Source)).map_err(|panic| {
                SourceError::user(SplitError::Discovery {
                    dir: self.dir.clone(),
                    reason: panic_text(panic),
                })
            })?;
            // The file's splits and the seen state that says it was discovered, in one
            // section: a snapshot has both or neither.
            self.state.unassigned.extend(FileSplit::of_file(
                file.path.clone(),
                file.modified,
                file.len,
                self.split_bytes,
            ));
            self.state.seen.forwarded(file.path, file.modified);
        }
        if marked || done(&self.state) {
            self.state.discovery_done = true;
        }
        Ok(())
    }
}

impl SplitEnumerator for FileSplitEnumerator {
    type Split = SplitProgress;

    fn handle_split_request(
        &mut self,
        subtask: usize,
        context: &mut EnumeratorContext<'_, SplitProgress>,
    ) -> Result<(), SourceError> {
        self.awaiting.push_back(subtask);
        self.answer_waiting(context)
    }

    fn add_splits_back(&mut self, splits: Vec<SplitProgress>, _subtask: usize) {
        let back = splits.into_iter().map(|p| p.split);
        self.state.unassigned.splice(0..0, back);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        encode(&self.state).map_err(SourceError::user)
    }

    fn discover(
        &mut self,
        context: &mut EnumeratorContext<'_, SplitProgress>,
    ) -> Result<(), SourceError> {
        if let Some(settings) = self.continuous.clone() {
            self.list(&settings)?;
        }
        self.answer_waiting(context)
    }
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".to_string())
}

/// A file source reader's checkpointed state, as its list state's items say: the splits
/// held with their positions, in reading order (after a rescale, several may be in progress).
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
                SplitStateItem::Split(bytes) => Some(decode::<SplitProgress>(&bytes)),
                SplitStateItem::Finished(_) | SplitStateItem::Coordinator { .. } => None,
            })
            .collect::<Result<_, _>>()?;
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

/// One parallel reader of a [`FileSource`]: reads its splits in order, one line per poll.
pub struct FileSourceReader {
    name: String,
    /// The splits held, the one being read first.
    splits: VecDeque<SplitProgress>,
    cursor: Option<LineCursor>,
    faults: Arc<FaultPlan>,
}

impl FileSourceReader {
    /// A reader named `name` (for errors); `faults` count emitted lines as
    /// [`FaultKind::Operator`].
    pub fn new(name: String, faults: Arc<FaultPlan>) -> Self {
        FileSourceReader {
            name,
            splits: VecDeque::new(),
            cursor: None,
            faults,
        }
    }

    /// The reader's splits now.
    pub fn state(&self) -> FileReaderState {
        FileReaderState {
            current: None,
            pending: self.splits.clone(),
        }
    }
}

impl SplitReader<String> for FileSourceReader {
    type Split = SplitProgress;

    fn add_splits(&mut self, splits: Vec<SplitProgress>) {
        self.splits.extend(splits);
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, String>,
    ) -> Result<InputStatus, OperatorError> {
        let Some(progress) = self.splits.front_mut() else {
            return Ok(InputStatus::NothingAvailable);
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
                let done = self.splits.pop_front().expect("read above");
                output.finish_split(done.split_id());
                self.cursor = None;
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn snapshot_splits(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<SplitProgress>, OperatorError> {
        Ok(self.splits.iter().cloned().collect())
    }
}

impl std::fmt::Debug for FileSourceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSourceReader")
            .field("name", &self.name)
            .field("splits", &self.splits)
            .finish_non_exhaustive()
    }
}

impl Source for FileSource {
    type Output = String;
    type Split = SplitProgress;
    type Enumerator = FileSplitEnumerator;
    type Reader = FileSourceReader;

    fn boundedness(&self) -> Boundedness {
        match &self.continuous {
            Some(c) if c.stop_after_files.is_none() && c.end_marker.is_none() => {
                Boundedness::ContinuousUnbounded
            }
            _ => Boundedness::Bounded,
        }
    }

    /// Bounded: lists the directory now (names starting with `.` or `_` skipped, in name
    /// order), each file cut into splits. Continuous: nothing discovered yet.
    fn create_enumerator(&self, _parallelism: usize) -> Result<FileSplitEnumerator, SourceError> {
        let state = match &self.continuous {
            Some(_) => EnumeratorCheckpoint::default(),
            None => {
                let mut files = list_dir(&self.dir).map_err(|source| {
                    SourceError::user(SplitError::List {
                        dir: self.dir.clone(),
                        source,
                    })
                })?;
                files.sort_by(|a, b| a.path.cmp(&b.path));
                EnumeratorCheckpoint {
                    unassigned: files
                        .into_iter()
                        .flat_map(|f| {
                            FileSplit::of_file(f.path, f.modified, f.len, self.split_bytes)
                        })
                        .collect(),
                    seen: MonitorState::default(),
                    discovery_done: true,
                }
            }
        };
        Ok(self.enumerator_with(state))
    }

    fn restore_enumerator(
        &self,
        _parallelism: usize,
        state: &[u8],
    ) -> Result<FileSplitEnumerator, SourceError> {
        Ok(self.enumerator_with(decode(state).map_err(SourceError::user)?))
    }

    fn create_reader(&self, subtask: usize, _parallelism: usize) -> FileSourceReader {
        FileSourceReader::new(
            format!("{}#{subtask}", self.dir.display()),
            Arc::clone(&self.faults),
        )
    }
}

impl FileSource {
    fn enumerator_with(&self, state: EnumeratorCheckpoint) -> FileSplitEnumerator {
        FileSplitEnumerator {
            dir: self.dir.clone(),
            split_bytes: self.split_bytes,
            continuous: self.continuous.clone(),
            faults: Arc::clone(&self.faults),
            state,
            awaiting: VecDeque::new(),
            last_listing: None,
        }
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
