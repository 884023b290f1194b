//! The job API of continuous file reading:
//! [`StreamEnvironment::read_file_continuously`] and its builder [`ContinuousFiles`].
//!
//! The job is two vertices, as in Flink: the monitoring source (parallelism 1) and, behind a
//! round-robin edge, the split reader (parallelism N). What the model changes is the reader's
//! form (see the [`files`](crate::files) module docs):
//!
//! | model | monitoring source | split reader |
//! |---|---|---|
//! | legacy | legacy source task | own reader thread, lines emitted under the checkpoint lock |
//! | mailbox | through a `HandoffReader` | self-enqueued read mails |
//! | bridge | legacy source, own thread, mails under the lock | self-enqueued read mails |

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::environment::StreamEnvironment;
use super::stream::DataStream;
use crate::Model;
use crate::fault::FaultPlan;
use crate::files::{FileMonitor, ReadMode, SplitReader};

/// Lines per read mail in the mail form, unless set.
const DEFAULT_CHUNK: usize = 1;
/// Bytes per split, unless set: one split per file up to 64 MiB.
const DEFAULT_SPLIT_BYTES: u64 = 64 << 20;

/// How to read a directory continuously; see
/// [`StreamEnvironment::read_files`].
#[derive(Debug, Clone)]
pub struct ContinuousFiles {
    name: String,
    dir: PathBuf,
    interval: Duration,
    parallelism: usize,
    split_bytes: u64,
    chunk: usize,
    mode: Option<ReadMode>,
    stop_after_files: Option<u64>,
    faults: Arc<FaultPlan>,
}

impl ContinuousFiles {
    /// Reads `dir`, listing it every `interval`, with `parallelism` split readers. The
    /// vertices are named `files-monitor` and `files-reader`.
    pub fn new(dir: impl Into<PathBuf>, interval: Duration, parallelism: usize) -> Self {
        ContinuousFiles {
            name: "files".to_string(),
            dir: dir.into(),
            interval,
            parallelism,
            split_bytes: DEFAULT_SPLIT_BYTES,
            chunk: DEFAULT_CHUNK,
            mode: None,
            stop_after_files: None,
            faults: Arc::new(FaultPlan::none()),
        }
    }

    /// Names the vertices `<name>-monitor` and `<name>-reader`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Cuts files into splits of at most `bytes` (at least 1), read in parallel.
    pub fn with_split_bytes(mut self, bytes: u64) -> Self {
        self.split_bytes = bytes.max(1);
        self
    }

    /// Lines the mail form reads per mail (at least 1).
    pub fn with_chunk(mut self, lines: usize) -> Self {
        self.chunk = lines.max(1);
        self
    }

    /// Overrides the reader form the model would pick (for comparisons: the thread form under
    /// the mailbox model delivers its lines as mails).
    pub fn with_read_mode(mut self, mode: ReadMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Ends the stream once `files` files were forwarded and read (Flink's monitoring never
    /// ends; a job that must finish, a test, says when).
    pub fn stop_after_files(mut self, files: u64) -> Self {
        self.stop_after_files = Some(files);
        self
    }

    /// Injects faults: [`FaultKind::Source`](crate::fault::FaultKind::Source) counts
    /// forwarded files in the monitoring source,
    /// [`FaultKind::Operator`](crate::fault::FaultKind::Operator) emitted lines in the
    /// readers.
    pub fn with_faults(mut self, faults: Arc<FaultPlan>) -> Self {
        self.faults = faults;
        self
    }
}

impl StreamEnvironment {
    /// The lines of the files that appear in `dir`, which is listed every `interval`, read by
    /// `parallelism` split readers; see [`read_files`](Self::read_files).
    pub fn read_file_continuously(
        &self,
        dir: impl Into<PathBuf>,
        interval: Duration,
        parallelism: usize,
    ) -> DataStream<String> {
        self.read_files(ContinuousFiles::new(dir, interval, parallelism))
    }

    /// The lines of the files that appear in the directory `files` names, exactly once across
    /// failures: the monitoring source checkpoints which files it forwarded (by modification
    /// time: see the [`files`](crate::files) module docs for files appended to after they were read), each
    /// reader the split it reads with its offset and the splits it has not started.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    /// use streamtask::ContinuousFiles;
    ///
    /// let input = tempfile::tempdir().unwrap();
    /// std::fs::write(input.path().join("a.txt"), "one\ntwo\n").unwrap();
    /// std::fs::write(input.path().join("b.txt"), "three\n").unwrap();
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.read_files(
    ///     ContinuousFiles::new(input.path(), Duration::from_millis(5), 2).stop_after_files(2),
    /// )
    /// .collect_sink("collect", &out);
    /// let work = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(work.path())).unwrap();
    /// let mut lines = out.committed();
    /// lines.sort();
    /// assert_eq!(lines, ["one", "three", "two"]);
    /// ```
    pub fn read_files(&self, files: ContinuousFiles) -> DataStream<String> {
        let mode = files.mode.unwrap_or(match self.model() {
            Model::Legacy => ReadMode::Thread,
            Model::Mailbox | Model::Bridge => ReadMode::Mails { chunk: files.chunk },
        });
        let monitor_name = format!("{}-monitor", files.name);
        let reader_name = format!("{}-reader", files.name);
        let monitor = {
            let (name, files) = (monitor_name.clone(), files.clone());
            move |_subtask: usize| {
                FileMonitor::new(
                    name.clone(),
                    files.dir.clone(),
                    files.interval,
                    files.split_bytes,
                    files.stop_after_files,
                    Arc::clone(&files.faults),
                )
            }
        };
        let faults = Arc::clone(&files.faults);
        let name = reader_name.clone();
        self.add_source(&monitor_name, monitor)
            .rebalance(&reader_name, files.parallelism)
            .operator(move |subtask| {
                SplitReader::new(format!("{name}#{subtask}"), mode, Arc::clone(&faults))
            })
    }
}
