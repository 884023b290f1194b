//! [`StreamEnvironment::from_source`]: a bounded FLIP-27 [`FileSource`] as a parallel new-style
//! source. The split enumerator is made here, when the job is built, and shared by the readers
//! of every attempt (see [`crate::files::source`] for where it runs and why its state needs no
//! snapshot of its own); each reader is a [`SourceReader`](streamtask_mailbox::SourceReader),
//! run by the job's existing reader adapters: on the mailbox thread (mailbox, bridge) or
//! through `ReaderSource` (legacy).

use std::sync::Arc;

use super::error::JobError;
use super::graph::{DataStream, StreamEnvironment};
use crate::files::{FileSource, FileSourceReader, SplitEnumerator};

impl StreamEnvironment {
    /// The lines of the files of the directory `source` names, read by `parallelism` readers
    /// that ask the source's split enumerator for byte-range splits, exactly once across
    /// failures. The directory is listed once, now: files added later are not read. A listing
    /// error fails [`build`](Self::build) with [`JobError::Config`].
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    /// use streamtask::files::FileSource;
    ///
    /// let input = tempfile::tempdir().unwrap();
    /// std::fs::write(input.path().join("a.txt"), "one\ntwo\n").unwrap();
    /// std::fs::write(input.path().join("b.txt"), "three\n").unwrap();
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.from_source("files", FileSource::for_dir(input.path()), 2)
    ///     .collect_sink("collect", &out);
    /// let work = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(work.path())).unwrap();
    /// let mut lines = out.committed();
    /// lines.sort();
    /// assert_eq!(lines, ["one", "three", "two"]);
    /// ```
    pub fn from_source(
        &self,
        name: &str,
        source: FileSource,
        parallelism: usize,
    ) -> DataStream<String> {
        let enumerator =
            match SplitEnumerator::for_dir(&source.dir, source.split_bytes, parallelism.max(1)) {
                Ok(e) => e,
                Err(e) => {
                    self.fail(JobError::Config(format!("{name}: {e}")));
                    SplitEnumerator::new(source.dir.clone(), Vec::new(), parallelism.max(1))
                }
            };
        let enumerator = Arc::new(enumerator);
        let reader_name = name.to_string();
        self.add_reader_parallel(name, parallelism, move |subtask| {
            FileSourceReader::new(
                format!("{reader_name}#{subtask}"),
                subtask,
                Arc::clone(&enumerator),
                Arc::clone(&source.faults),
            )
        })
    }
}
