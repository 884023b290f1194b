//! [`StreamEnvironment::from_source`]: a FLIP-27 split [`Source`] (the [`FileSource`](crate::files::FileSource), or one of
//! the user's) as a parallel new-style source, and the executor's three hooks that drive every
//! source's [`SourceCoordinator`] as Flink's `SourceCoordinator` would (see the
//! [`source`](crate::source) module docs):
//!
//! - when an attempt starts, before any task: the enumerator is restored from its snapshot
//!   among the readers' restored state (`start_enumerators`);
//! - when a checkpoint is triggered, before the barriers go out: the enumerator is snapshotted
//!   (`enumerators_on_action`); when one completes, the readers may forget the finished
//!   splits it covers;
//! - while the job runs, every few milliseconds on the executor's thread: continuous discovery
//!   (`discover_splits`).
//!
//! Each reader is a [`SplitSourceReader`], a [`SourceReader`](streamtask_mailbox::SourceReader) run by the job's
//! existing reader adapters: on the mailbox thread (mailbox, bridge) or through `ReaderSource`
//! (legacy).

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::WatermarkStrategy;

use super::environment::{JobGraph, StreamEnvironment};
use super::error::JobError;
use super::stream::DataStream;
use crate::checkpoint::{CompletedCheckpoint, CoordinatorAction};
use crate::source::{
    CoordinatorHooks, Source, SourceCoordinator, SplitSourceReader, restored_entries,
};

impl StreamEnvironment {
    /// The records of a split [`Source`], read by `parallelism` readers that get their splits
    /// from the source's enumerator, exactly once across failures and rescales (see the
    /// [`source`](crate::source) module docs). The enumerator is made now
    /// ([`Source::create_enumerator`]; an error fails [`build`](Self::build) with
    /// [`JobError::Config`]).
    ///
    /// For a [`FileSource`](crate::files::FileSource): the lines of the files of its directory, in byte-range splits. A
    /// bounded one lists the directory once, now; one made with
    /// [`FileSource::monitor_continuously`](crate::files::FileSource::monitor_continuously) discovers files while the job runs.
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
    ///
    /// Discovering files while the job runs, until an end marker appears:
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    /// use streamtask::files::FileSource;
    ///
    /// let input = tempfile::tempdir().unwrap();
    /// std::fs::write(input.path().join("a.txt"), "one\n").unwrap();
    /// std::fs::write(input.path().join("_done"), "").unwrap();
    /// let env = StreamEnvironment::new(Model::Legacy);
    /// let out = CollectHandle::new();
    /// let source = FileSource::for_dir(input.path())
    ///     .monitor_continuously(Duration::from_millis(5))
    ///     .end_marker("_done");
    /// env.from_source("files", source, 2).collect_sink("collect", &out);
    /// let work = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(work.path())).unwrap();
    /// assert_eq!(out.committed(), ["one"]);
    /// ```
    pub fn from_source<S>(&self, name: &str, source: S, parallelism: usize) -> DataStream<S::Output>
    where
        S: Source,
        S::Output: Serialize + DeserializeOwned,
    {
        self.add_split_source(name, source, None, parallelism)
    }

    /// As [`from_source`](Self::from_source), each reader generating its watermarks per split
    /// with `strategy` (Flink's `fromSource(source, watermarkStrategy, name)`): event times
    /// from the strategy's timestamp assigner, and every auto-watermark interval each split's
    /// watermark at the largest event time of the records its reader addressed to it
    /// ([`SplitOutput::collect_for`](crate::source::SplitOutput::collect_for); unaddressed
    /// records move the whole reader's) less the out-of-orderness bound, less 1; the reader
    /// forwards the minimum over its splits that are not idle (the strategy's idleness timeout
    /// is the splits' unless the source sets [`Source::split_idle_timeout`]). Records of a
    /// split that lags behind its siblings, no further out of order than the bound, are
    /// therefore never late downstream, which a strategy applied after the source
    /// ([`assign_timestamps_and_watermarks`](DataStream::assign_timestamps_and_watermarks))
    /// cannot promise: it sees the splits interleaved. See [`SplitOutput`](crate::source::SplitOutput).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    /// use streamtask::files::FileSource;
    ///
    /// let input = tempfile::tempdir().unwrap();
    /// std::fs::write(input.path().join("a.txt"), "100\n300\n").unwrap();
    /// std::fs::write(input.path().join("b.txt"), "200\n").unwrap();
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(10))
    ///     .with_timestamp_assigner(|line: &String, _| line.parse().unwrap());
    /// env.from_source_with_watermarks("files", FileSource::for_dir(input.path()), strategy, 2)
    ///     .collect_sink("collect", &out);
    /// let work = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(work.path())).unwrap();
    /// let mut lines = out.committed();
    /// lines.sort();
    /// assert_eq!(lines, ["100", "200", "300"]);
    /// ```
    pub fn from_source_with_watermarks<S>(
        &self,
        name: &str,
        source: S,
        strategy: WatermarkStrategy<S::Output>,
        parallelism: usize,
    ) -> DataStream<S::Output>
    where
        S: Source,
        S::Output: Serialize + DeserializeOwned,
    {
        self.add_split_source(name, source, Some(strategy), parallelism)
    }

    fn add_split_source<S>(
        &self,
        name: &str,
        source: S,
        strategy: Option<WatermarkStrategy<S::Output>>,
        parallelism: usize,
    ) -> DataStream<S::Output>
    where
        S: Source,
        S::Output: Serialize + DeserializeOwned,
    {
        let parallelism = parallelism.max(1);
        self.register_channel_type::<S::Output>();
        let groups = self.graph.borrow().alignment_groups.clone();
        let coordinator =
            match SourceCoordinator::in_alignment_groups(name, source, parallelism, &groups) {
                Ok(c) => Arc::new(match strategy {
                    Some(strategy) => c.with_watermark_strategy(strategy),
                    None => c,
                }),
                Err(e) => {
                    self.fail(JobError::Config(format!("{name}: {e}")));
                    return self.add_reader_parallel(name, parallelism, |_| {
                        SourceNotBuilt::<S::Output>(std::marker::PhantomData)
                    });
                }
            };
        self.graph
            .borrow_mut()
            .enumerators
            .push(Arc::clone(&coordinator) as Arc<dyn CoordinatorHooks>);
        self.add_reader_parallel(name, parallelism, move |subtask| -> SplitSourceReader<S> {
            coordinator.reader(subtask)
        })
    }
}

/// The reader of a source whose enumerator could not be made: the build fails before it runs.
struct SourceNotBuilt<T>(std::marker::PhantomData<fn() -> T>);

impl<T> streamtask_mailbox::SourceReader<T> for SourceNotBuilt<T> {
    fn name(&self) -> &str {
        "source-not-built"
    }
    fn poll_next(
        &mut self,
        _output: &mut streamtask_mailbox::ReaderOutput<'_, T>,
    ) -> Result<streamtask_mailbox::InputStatus, streamtask_core::OperatorError> {
        Ok(streamtask_mailbox::InputStatus::EndOfInput)
    }
    fn register_waker(&mut self, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<u8>, streamtask_core::OperatorError> {
        Ok(Vec::new())
    }
}

impl JobGraph {
    /// Restores every split enumerator from `restored` (fresh when `None`), before the
    /// attempt's tasks start.
    ///
    /// # Errors
    ///
    /// [`JobError::Config`] when the restored state does not fit an enumerator.
    pub(crate) fn start_enumerators(
        &self,
        restored: Option<&CompletedCheckpoint>,
    ) -> Result<(), JobError> {
        for e in &self.enumerators {
            let parallelism = self
                .vertices
                .iter()
                .find(|v| v.name == e.name())
                .map_or(1, |v| v.parallelism);
            let entries = match restored {
                Some(c) => restored_entries(|t| c.task(t), e.name(), parallelism),
                None => Vec::new(),
            };
            e.start_attempt(restored.map(|c| c.id), &entries)
                .map_err(|err| JobError::Config(format!("{}: {err}", e.name())))?;
        }
        Ok(())
    }

    /// The enumerators of the job, for the coordinator's thread.
    pub(crate) fn enumerator_hooks(&self) -> Vec<Arc<dyn CoordinatorHooks>> {
        self.enumerators.clone()
    }

    /// Ends the attempt of every enumerator (its tasks were joined).
    pub(crate) fn end_enumerators(&self) {
        self.enumerators.iter().for_each(|e| e.end_attempt());
    }

    /// Lets every continuous enumerator list its directory if it is due.
    pub(crate) fn discover_splits(&self) {
        self.enumerators.iter().for_each(|e| e.discover());
    }
}

/// The coordinator-side hooks: a checkpoint is triggered (before its barriers go out), or
/// completed.
pub(crate) fn enumerators_on_action(
    enumerators: &[Arc<dyn CoordinatorHooks>],
    action: &CoordinatorAction,
) {
    match action {
        CoordinatorAction::Trigger(barrier) => enumerators
            .iter()
            .for_each(|e| e.checkpoint_coordinator(barrier.id)),
        CoordinatorAction::Complete { id } => {
            enumerators.iter().for_each(|e| e.checkpoint_completed(*id));
        }
        CoordinatorAction::Abort { .. } | CoordinatorAction::FailJob(_) => {}
    }
}
