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
//! mail form. See [`reader`] for both protocols and [`monitor`] for which files count as new
//! (and what happens to a file appended to after it was read).
//!
//! [`source`] is the FLIP-27 form: a split enumerator in the job layer hands splits to
//! parallel [`FileSourceReader`]s on request, for a bounded directory or one it monitors
//! ([`FileSource::monitor_continuously`], the same modification-time rule), snapshotted when
//! each checkpoint is triggered.

pub mod monitor;
pub mod reader;
pub mod source;
mod split;

pub use self::monitor::{FileMonitor, MonitorState};
pub use self::reader::{ReadMode, SplitReader};
pub use self::source::{
    Assignment, EnumeratorCheckpoint, FileReaderState, FileSource, FileSourceReader, SourceItem,
    SplitEnumerator, SplitError,
};
pub use self::split::{FileSplit, LineCursor, ReaderSnapshot, SplitProgress};
