//! Split sources (Flink's FLIP-27 `Source`): write a source of your own as a [`Source`] whose
//! [`SplitEnumerator`] discovers and assigns [`SourceSplit`]s and whose parallel
//! [`SplitReader`]s read them, and run it with
//! [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source) under every model.
//! The [`FileSource`](crate::files::FileSource) is one such source.
//!
//! | part | runs where | items |
//! |---|---|---|
//! | the source | when the job is built | [`Source`], [`Boundedness`] |
//! | the enumerator | on the coordinator side: one per source, outside every task | [`SplitEnumerator`], [`EnumeratorContext`], [`ReaderEvent`] |
//! | a reader | in every subtask: on the task thread (mailbox, bridge), under the checkpoint lock (legacy) | [`SplitReader`], [`SplitOutput`], [`SourceEvent`] |
//! | a split | in the readers' list state and the enumerator's snapshot | [`SourceSplit`] |
//! | the engine that drives both | the executor (and tests of a source) | [`SourceCoordinator`], [`SplitSourceReader`], [`SplitStateItem`], [`CoordinatorSnapshot`] |
//! | watermark alignment | the source's readers, its group's sources | [`WatermarkAlignment`], [`AlignmentGroups`] |
//! | proving a port of a legacy `SourceFunction` | the user's tests | [`porting::SplitPortingKit`] |
//!
//! # The protocol
//!
//! A reader that holds no split sends one [`ReaderEvent::SplitRequest`] and is idle until the
//! enumerator answers. The enumerator answers through its [`EnumeratorContext`], at once or
//! later (when it discovers splits): it assigns splits ([`SourceEvent::Split`]), tells a reader
//! that none will come ([`SourceEvent::NoMoreSplits`]: the reader ends once its splits are
//! read), or sends custom bytes ([`SourceEvent::Custom`]); it may also assign splits no reader
//! asked for (a log source assigning its partitions when it starts). Readers send custom bytes
//! back ([`SplitOutput::send_event`]). Events reach a reader on its own thread, between two
//! polls, so a reader is never called concurrently.
//!
//! A reader reports progress through its splits: a split it returns from
//! [`SplitReader::snapshot_splits`] carries the position of its next record, so every record
//! emitted before the snapshot is behind that position and none after it; it says when a split
//! is done with [`SplitOutput::finish_split`].
//!
//! # State
//!
//! As in the file source (see the [`files`](crate::files) module docs for the full
//! argument), the enumerator is snapshotted when a checkpoint is *triggered*, before the
//! barriers go out, and its snapshot travels in reader 0's state; each reader's state is list
//! state ([`SplitStateItem`]s: the splits it holds with their positions, the splits it finished
//! lately), so a savepoint restored at another parallelism spreads the splits over the new
//! readers. A split assigned after the enumerator's snapshot and before its reader's barrier is
//! in both snapshots; a restore resolves it by split id: the reader keeps it and the
//! coordinator drops the enumerator's next assignment of that id. A split assigned before the
//! trigger but not yet taken by its reader is in the coordinator's snapshot and goes back to the
//! enumerator ([`SplitEnumerator::add_splits_back`]) on restore unless a reader took it.
//!
//! # Watermarks per split
//!
//! A reader emits watermarks for the whole reader ([`SplitOutput::emit_watermark`]: every
//! split it holds is at least there) or per split ([`SplitOutput::emit_watermark_for`],
//! Flink's per-split outputs of FLIP-217). The engine keeps each split's watermark; the
//! reader's watermark is the minimum over its splits that are not idle (a split without a
//! watermark yet holds it at the lowest), forwarded downstream whenever it advances. A split
//! is idle when its reader says so ([`SplitOutput::mark_split_idle`]) or when it had no
//! activity (its own records and watermarks, [`SplitOutput::collect_for`], or unaddressed ones)
//! for [`Source::split_idle_timeout`] of *active* time; the reader is marked idle when every
//! split it holds is. A reader waiting for input is woken by the coordinator's periodic call
//! when a split reaches its timeout, so it goes idle without a record to wake it.
//!
//! Active time is the task's processing time (its clock, a manual one in tests) less the time
//! the split was paused by alignment and the time the task was blocked on full output
//! (backpressure, from the task's metrics): neither pauses nor backpressure make a split idle
//! (as in Flink 2.0). The clock is read once per poll, and only for a source that
//! is aligned, has an idleness timeout, holds an idle split, or generates its watermarks.
//!
//! The watermarks can also be generated: a source read with a [`WatermarkStrategy`]
//! ([`from_source_with_watermarks`](crate::StreamEnvironment::from_source_with_watermarks),
//! [`SourceCoordinator::with_watermark_strategy`]) runs it per split, as Flink's source
//! operator runs a split-local generator per split: see [`SplitOutput`]. Its idleness timeout
//! is the splits' unless the source sets one. A waiting reader is woken at the end of the
//! auto-watermark interval when its records allow a watermark not generated yet.
//!
//! # Watermark alignment
//!
//! A source whose [`Source::watermark_alignment`] returns a [`WatermarkAlignment`] keeps its
//! splits within `max_drift` of the slowest reader of its *group* in event time (FLIP-182 per
//! source, FLIP-217 per split): every reader reports its watermark (the minimum over its
//! splits, above); on every `update_interval` (at most as often as the executor's periodic
//! call, every 2 ms) the coordinator takes the minimum over the readers of every source of the
//! group that hold it back and publishes `minimum + max_drift` (each source's own drift) as
//! the source's bound. A split whose watermark is above the
//! bound is *paused*, at once after the poll that took it there: the user's reader is told
//! through [`SplitReader::pause_or_resume_splits`] and must not read it (the engine cannot
//! tell which split a record came from); the reader's other splits go on being polled. A
//! reader whose splits are all paused is not polled (its poll returns `NothingAvailable`, so
//! the task thread keeps taking mail and checkpoint barriers pass it in every model). A split
//! resumes once a later bound reaches its watermark. A group is the source's own unless
//! [`WatermarkAlignment::with_group`] names one: every source of the job whose alignment
//! names it shares the group's minimum ([`AlignmentGroups`]).
//!
//! Which readers hold the group back: a reader that has not emitted a watermark yet counts as
//! the lowest watermark (the group waits for it: readers of an aligned source must emit
//! watermarks); a reader marked idle (by itself, by the engine while it holds no split, or
//! because all its splits are idle) and a reader that ended are left out until they emit
//! again. A fast split runs at most one record past the bound: the published bound never
//! exceeds the true minimum plus the drift, since watermarks only grow.
//!
//! The lost-wakeup protocol of a paused reader: it checks the bound and, when still paused,
//! stores its waker, both under its group's lock; the coordinator publishes the group's bounds
//! and takes the stored wakers under the same lock. So a bound published after the reader's
//! check is either seen by its re-check (woken at once) or finds the waker stored (woken by
//! the publication). `tests/loom.rs` checks it.
//!
//! # Metrics
//!
//! A reader run in a task keeps its splits' metrics in the task's
//! [`TaskMetrics::splits`](streamtask_core::metrics::TaskMetrics::splits) (paused and idle
//! milliseconds, exported per split as `streamtask_split_paused_time_ms_per_second` and
//! `streamtask_split_idle_time_ms_per_second`, Flink 2.1's split `pausedTimePerSecond` and
//! `idleTimePerSecond`, with accumulated counters), and an aligned reader its drift above its
//! group's minimum
//! ([`TaskMetrics::watermark_alignment_drift`](streamtask_core::metrics::TaskMetrics::watermark_alignment_drift),
//! Flink's `watermarkAlignmentDrift`).
//!
//! Not built: the idleness of a downstream [`WatermarkStrategy`]
//! (`assign_timestamps_and_watermarks`) still counts processing time, paused and backpressured
//! time included: it is another operator that cannot see the source's pauses; set the
//! timeout on the source ([`Source::split_idle_timeout`]) or on the strategy the source is
//! read with (above) to get Flink 2.0's accounting. Flink's option to let a reader that cannot pause
//! splits run unaligned (`allow-unaligned-source-splits`) is not offered: the default
//! [`SplitReader::pause_or_resume_splits`] does nothing, so such a reader pauses only when
//! all its splits are paused.

mod coordinator;
pub mod porting;

pub use self::coordinator::{
    AlignmentGroups, CoordinatorSnapshot, SourceCoordinator, SplitSourceReader, SplitStateItem,
};
pub(crate) use self::coordinator::{CoordinatorHooks, decode_items, restored_entries};

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use streamtask_core::metrics::SplitMetrics;
use streamtask_core::operator::WatermarkStrategy;
use streamtask_core::{BoxError, OperatorError, Watermark};
use streamtask_mailbox::{InputStatus, ReaderOutput};

/// Whether a source ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Boundedness {
    /// The source has a last split: its readers end once the enumerator says no more splits
    /// will come and they read theirs.
    Bounded,
    /// The source runs until the job is stopped or cancelled (its enumerator may still end it
    /// with [`SourceEvent::NoMoreSplits`]).
    ContinuousUnbounded,
}

/// Keeps the splits of a source (and of the other sources of its group) within `max_drift` of
/// each other in event time: a split whose watermark runs more than `max_drift` ahead of the
/// group's slowest reader is paused until that one catches up (see the module docs). Given by
/// [`Source::watermark_alignment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkAlignment {
    group: Option<String>,
    max_drift_ms: i64,
    update_interval: Duration,
}

impl WatermarkAlignment {
    /// Splits at most `max_drift` apart in event time (milliseconds), the slowest reader's
    /// watermark taken every `update_interval` (Flink's default interval is one second). The
    /// group is the source's own until [`with_group`](Self::with_group).
    pub fn new(max_drift: Duration, update_interval: Duration) -> Self {
        WatermarkAlignment {
            group: None,
            max_drift_ms: i64::try_from(max_drift.as_millis()).unwrap_or(i64::MAX),
            update_interval,
        }
    }

    /// Aligns the source with every other source of the job whose alignment names `group`
    /// (Flink's `withWatermarkAlignment(group, maxDrift, updateInterval)`): their readers
    /// share one minimum, and each source keeps its own drift above it.
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The group named by [`with_group`](Self::with_group); `None`: the source's own.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The allowed drift in event-time milliseconds.
    pub fn max_drift_millis(&self) -> i64 {
        self.max_drift_ms
    }

    /// How often the group's minimum is taken.
    pub fn update_interval(&self) -> Duration {
        self.update_interval
    }
}

/// What went wrong in a split source; the job restarts from its latest checkpoint unless the
/// error is in the restored state.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source's own code failed (a listing, a connection, a decode of its bytes).
    #[error("{0}")]
    User(BoxError),
    /// A split or enumerator snapshot did not decode.
    #[error(
        "the restored state of {source_name} does not decode: {reason} (restore a checkpoint or savepoint this source wrote)"
    )]
    BadState {
        /// The source.
        source_name: String,
        /// What did not decode.
        reason: String,
    },
    /// A split is held by two restored readers.
    #[error(
        "split {split_id} is held twice in the restored state of {source_name} (restore a checkpoint of this job)"
    )]
    HeldTwice {
        /// The source.
        source_name: String,
        /// The split's id.
        split_id: String,
    },
    /// The restored readers hold splits but no enumerator snapshot of the checkpoint is
    /// among their state.
    #[error(
        "the restored state of {source_name} holds splits but no enumerator snapshot of its checkpoint (restore a checkpoint or savepoint this source wrote)"
    )]
    NoEnumeratorState {
        /// The source.
        source_name: String,
    },
    /// The enumerator assigned a split or sent an event to a reader that does not exist.
    #[error(
        "the enumerator addressed reader {subtask}, but the source has {parallelism} readers (address readers 0..parallelism)"
    )]
    NoSuchReader {
        /// The reader addressed.
        subtask: usize,
        /// The source's parallelism.
        parallelism: usize,
    },
    /// The enumerator assigned a split to a reader it had told that no more would come (the
    /// reader may have ended: the split would be lost).
    #[error(
        "the enumerator assigned split {split_id} to reader {subtask} after telling it no more splits would come (assign splits before signal_no_more_splits)"
    )]
    AfterNoMoreSplits {
        /// The reader.
        subtask: usize,
        /// The split's id.
        split_id: String,
    },
    /// The enumerator failed; its readers fail with this and the job restarts.
    #[error(
        "the split enumerator of {source_name} failed: {reason} (the job restarts from its latest checkpoint)"
    )]
    EnumeratorFailed {
        /// The source.
        source_name: String,
        /// What failed.
        reason: String,
    },
}

impl SourceError {
    /// Wraps an error of the source's own code.
    pub fn user(error: impl Into<BoxError>) -> Self {
        SourceError::User(error.into())
    }
}

/// A split: a unit of input one reader reads (a file range, a log partition), together with
/// how far it was read. The id names the unit and stays the same as the position advances;
/// the encoding carries both.
pub trait SourceSplit: Clone + Send + fmt::Debug + 'static {
    /// The split's stable id (unique within its source).
    fn split_id(&self) -> String;

    /// The split as bytes, position included (what a checkpoint keeps).
    ///
    /// # Errors
    ///
    /// [`SourceError::User`] when the split cannot be encoded.
    fn encode(&self) -> Result<Vec<u8>, SourceError>;

    /// The split [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    ///
    /// [`SourceError::User`] when `bytes` are not such a split.
    fn decode(bytes: &[u8]) -> Result<Self, SourceError>;
}

/// An event from the enumerator to one reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEvent<S> {
    /// Read this split too.
    Split(S),
    /// No split will be assigned to this reader any more.
    NoMoreSplits,
    /// The source's own message.
    Custom(Vec<u8>),
}

/// An event from one reader to the enumerator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderEvent {
    /// The reader holds no split and asks for one (sent once until a split arrives).
    SplitRequest,
    /// The source's own message.
    Custom(Vec<u8>),
}

/// A split source: what [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source)
/// runs. It makes the enumerator (once when the job is built, and from a snapshot on every
/// attempt) and one reader per subtask.
///
/// # Examples
///
/// See `tests/split_source.rs` and `examples/partitioned_log.rs` for complete sources; the
/// [`files`](crate::files) module's `FileSource` is built on this trait.
pub trait Source: Send + Sync + 'static {
    /// The records the readers emit.
    type Output: Send + 'static;
    /// The split type.
    type Split: SourceSplit;
    /// The enumerator.
    type Enumerator: SplitEnumerator<Split = Self::Split>;
    /// The reader of one subtask.
    type Reader: SplitReader<Self::Output, Split = Self::Split>;

    /// Whether the source ends.
    fn boundedness(&self) -> Boundedness;

    /// The enumerator of a fresh start for `parallelism` readers; called once, when the job
    /// is built (a bounded source lists its input here, so every attempt of the job sees the
    /// same splits: a fresh attempt restores this enumerator's snapshot).
    ///
    /// # Errors
    ///
    /// Fails the build with [`JobError::Config`](crate::JobError::Config).
    fn create_enumerator(&self, parallelism: usize) -> Result<Self::Enumerator, SourceError>;

    /// The enumerator [`SplitEnumerator::snapshot_state`] wrote.
    ///
    /// # Errors
    ///
    /// Fails the attempt's start (the restore) with the error.
    fn restore_enumerator(
        &self,
        parallelism: usize,
        state: &[u8],
    ) -> Result<Self::Enumerator, SourceError>;

    /// The reader of subtask `subtask` of `parallelism`; it gets its restored splits through
    /// [`SplitReader::add_splits`].
    fn create_reader(&self, subtask: usize, parallelism: usize) -> Self::Reader;

    /// Whether the readers keep within a drift of each other in event time (see the module
    /// docs); `None` (the default): they do not.
    fn watermark_alignment(&self) -> Option<WatermarkAlignment> {
        None
    }

    /// The idleness timeout of a split (Flink's `WatermarkStrategy::withIdleness`, applied per
    /// split as Flink's source operator does): a split with no activity (a record or watermark
    /// of its own, or one emitted for the whole reader) for this long of its *active* time is
    /// marked idle: left out of its reader's watermark and of watermark alignment until it is
    /// active again, and the reader is marked idle when all its splits are. Active time is
    /// processing time of the task's clock during which the split was neither paused by
    /// alignment nor its task blocked on full output (backpressure), so pauses and
    /// backpressure never make a split idle. `None` (the default): splits go idle only when
    /// the reader says so ([`SplitOutput::mark_split_idle`]).
    fn split_idle_timeout(&self) -> Option<Duration> {
        None
    }
}

/// What an enumerator may do: assign splits, end readers, send events. Given to every
/// [`SplitEnumerator`] call that may answer a reader.
pub struct EnumeratorContext<'a, S> {
    pub(crate) parallelism: usize,
    pub(crate) send: &'a mut dyn FnMut(usize, SourceEvent<S>) -> Result<(), SourceError>,
}

impl<S> EnumeratorContext<'_, S> {
    /// The number of readers (subtasks `0..parallelism`).
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Assigns `split` to reader `subtask`.
    ///
    /// # Errors
    ///
    /// [`SourceError::NoSuchReader`] for a subtask outside `0..parallelism`,
    /// [`SourceError::AfterNoMoreSplits`] for a reader told no more splits would come.
    pub fn assign_split(&mut self, subtask: usize, split: S) -> Result<(), SourceError> {
        self.to(subtask, SourceEvent::Split(split))
    }

    /// Tells reader `subtask` that no split will come any more.
    ///
    /// # Errors
    ///
    /// [`SourceError::NoSuchReader`] for a subtask outside `0..parallelism`.
    pub fn signal_no_more_splits(&mut self, subtask: usize) -> Result<(), SourceError> {
        self.to(subtask, SourceEvent::NoMoreSplits)
    }

    /// Sends the source's own bytes to reader `subtask`.
    ///
    /// # Errors
    ///
    /// [`SourceError::NoSuchReader`] for a subtask outside `0..parallelism`.
    pub fn send_event(&mut self, subtask: usize, event: Vec<u8>) -> Result<(), SourceError> {
        self.to(subtask, SourceEvent::Custom(event))
    }

    fn to(&mut self, subtask: usize, event: SourceEvent<S>) -> Result<(), SourceError> {
        if subtask >= self.parallelism {
            return Err(SourceError::NoSuchReader {
                subtask,
                parallelism: self.parallelism,
            });
        }
        (self.send)(subtask, event)
    }
}

impl<S> fmt::Debug for EnumeratorContext<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnumeratorContext")
            .field("parallelism", &self.parallelism)
            .finish_non_exhaustive()
    }
}

/// The coordinator side of a split source: one per source, called by one thread at a time
/// (the coordinator serializes its calls under its lock), possibly from a reader's thread when
/// it asks for a split. Keep every call short and non-blocking: a reader asking for a split and
/// a checkpoint's trigger wait for it.
///
/// Lifecycle per attempt: made by [`Source::restore_enumerator`] -> [`start`](Self::start) ->
/// requests, events, [`discover`](Self::discover) calls, snapshots and checkpoint notices ->
/// [`close`](Self::close) when the attempt ends.
pub trait SplitEnumerator: Send + 'static {
    /// The split type.
    type Split: SourceSplit;

    /// The attempt starts (readers may not run yet); assign splits proactively here if the
    /// source does so.
    ///
    /// # Errors
    ///
    /// Fails the enumerator: its readers fail and the job restarts.
    fn start(
        &mut self,
        context: &mut EnumeratorContext<'_, Self::Split>,
    ) -> Result<(), SourceError> {
        let _ = context;
        Ok(())
    }

    /// Reader `subtask` holds no split and asks for one: assign one, say no more will come, or
    /// remember the request and answer later (from [`discover`](Self::discover)).
    ///
    /// # Errors
    ///
    /// Fails the enumerator: its readers fail and the job restarts.
    fn handle_split_request(
        &mut self,
        subtask: usize,
        context: &mut EnumeratorContext<'_, Self::Split>,
    ) -> Result<(), SourceError>;

    /// Reader `subtask` sent the source's own bytes.
    ///
    /// # Errors
    ///
    /// Fails the enumerator: its readers fail and the job restarts.
    fn handle_reader_event(
        &mut self,
        subtask: usize,
        event: Vec<u8>,
        context: &mut EnumeratorContext<'_, Self::Split>,
    ) -> Result<(), SourceError> {
        let _ = (subtask, event, context);
        Ok(())
    }

    /// Splits assigned to reader `subtask` come back unread: they were assigned before the
    /// checkpoint being restored was triggered and no restored reader took them. After a
    /// rescale `subtask` may no longer exist. Assign them again when asked.
    fn add_splits_back(&mut self, splits: Vec<Self::Split>, subtask: usize);

    /// The enumerator's state when checkpoint `checkpoint_id` is triggered (before its
    /// barriers go out): the splits not assigned yet and whatever discovery needs, as bytes
    /// [`Source::restore_enumerator`] reads.
    ///
    /// # Errors
    ///
    /// Fails the enumerator: its readers fail and the job restarts.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, SourceError>;

    /// Checkpoint `checkpoint_id` completed.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) {
        let _ = checkpoint_id;
    }

    /// Called every few milliseconds while the job runs, on the executor's thread: discover
    /// splits if due (keep your own interval) and answer the requests waiting. Nothing by
    /// default.
    ///
    /// # Errors
    ///
    /// Fails the enumerator: its readers fail and the job restarts.
    fn discover(
        &mut self,
        context: &mut EnumeratorContext<'_, Self::Split>,
    ) -> Result<(), SourceError> {
        let _ = context;
        Ok(())
    }

    /// The attempt ended (its tasks were joined).
    fn close(&mut self) {}
}

/// The reader of one subtask: reads the splits assigned to it, one step per poll, on the task
/// thread (mailbox, bridge) or under the checkpoint lock (legacy); never called concurrently.
pub trait SplitReader<T>: Send + 'static {
    /// The split type.
    type Split: SourceSplit;

    /// Splits to read: assigned by the enumerator, or restored (with their positions).
    fn add_splits(&mut self, splits: Vec<Self::Split>);

    /// No split will be assigned any more.
    fn notify_no_more_splits(&mut self) {}

    /// Watermark alignment paused the splits `pause` and resumed the splits `resume` (ids of
    /// splits held, sorted). Read no record of a paused split until it is resumed: the reader
    /// is still polled for its other splits, and not polled at all while every split it holds
    /// is paused. Release what the paused splits hold upstream (a fetch in flight, a
    /// connection) here if that matters. Nothing by default: a reader that keeps this default
    /// is aligned only when all its splits are paused (one split per reader, or watermarks
    /// emitted for the whole reader).
    fn pause_or_resume_splits(&mut self, pause: &[String], resume: &[String]) {
        let _ = (pause, resume);
    }

    /// The enumerator sent the source's own bytes.
    ///
    /// # Errors
    ///
    /// Fails the task.
    fn handle_source_event(&mut self, event: Vec<u8>) -> Result<(), OperatorError> {
        let _ = event;
        Ok(())
    }

    /// Emits what is available now (usually one record) without blocking, moving the split it
    /// came from past it, and reports finished splits through
    /// [`SplitOutput::finish_split`]. `NothingAvailable` with splits held waits for the waker
    /// ([`register_waker`](Self::register_waker)); with none held the engine asks for one.
    ///
    /// # Errors
    ///
    /// Fails the task.
    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, T>,
    ) -> Result<InputStatus, OperatorError>;

    /// The splits held, each with the position of its next record, for checkpoint
    /// `checkpoint_id` (called between two polls).
    ///
    /// # Errors
    ///
    /// Declines the checkpoint and fails the task.
    fn snapshot_splits(&mut self, checkpoint_id: u64) -> Result<Vec<Self::Split>, OperatorError>;

    /// Wake `waker` once `poll_next` may find something (called after a `NothingAvailable`
    /// while splits are held). By default at once: the reader is polled again.
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }

    /// Checkpoint `checkpoint_id` completed (commit offsets upstream here).
    ///
    /// # Errors
    ///
    /// Fails the task.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Releases resources; called on every exit path.
    ///
    /// # Errors
    ///
    /// Reported; the task's outcome is decided by what happened before.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Where a [`SplitReader`] emits: records (with timestamps), watermarks, idleness, finished
/// splits and events to the enumerator.
///
/// Watermarks come per reader ([`emit_watermark`](Self::emit_watermark): every split held is
/// at least there, and it is forwarded as it is) or per split
/// ([`emit_watermark_for`](Self::emit_watermark_for), Flink's split outputs): the reader's
/// watermark is then the minimum over its splits that are not idle (a split without a
/// watermark yet holds it at the lowest), forwarded whenever it advances, and watermark
/// alignment pauses each split on its own watermark. Records and watermarks addressed to a
/// split count as that split's activity for its idleness timeout
/// ([`Source::split_idle_timeout`]); unaddressed ones as activity of every split held.
///
/// A source read with a [`WatermarkStrategy`]
/// ([`from_source_with_watermarks`](crate::StreamEnvironment::from_source_with_watermarks),
/// Flink's `fromSource(source, watermarkStrategy, name)`) also has its watermarks generated
/// per split: each record's event time comes from the strategy's timestamp assigner (or is
/// the one given), a record addressed to a split ([`collect_for`](Self::collect_for)) moves
/// that split's largest timestamp, an unaddressed one the reader's, and every
/// auto-watermark interval each split's watermark becomes its largest timestamp less the
/// out-of-orderness bound, less 1. A split's watermark is then never ahead of a record it has
/// still to emit within the bound, whatever the other splits read.
pub struct SplitOutput<'o, 'a, T> {
    pub(crate) out: &'o mut ReaderOutput<'a, T>,
    pub(crate) splits: &'o mut Splits,
    pub(crate) finished: &'o mut Vec<String>,
    pub(crate) events: &'o mut Vec<Vec<u8>>,
    /// The source's watermark strategy, if it is read with one.
    pub(crate) strategy: Option<&'o WatermarkStrategy<T>>,
}

impl<T> SplitOutput<'_, '_, T> {
    /// Emits a record without a timestamp.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn collect(&mut self, value: T) -> Result<(), OperatorError> {
        self.splits.activity(None);
        match self.timestamp_of(&value, None, None) {
            Some(timestamp) => self.out.collect_with_timestamp(value, timestamp),
            None => self.out.collect(value),
        }
    }

    /// Emits a record with event time `timestamp`.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn collect_with_timestamp(
        &mut self,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.splits.activity(None);
        let timestamp = self
            .timestamp_of(&value, Some(timestamp), None)
            .unwrap_or(timestamp);
        self.out.collect_with_timestamp(value, timestamp)
    }

    /// Emits a record of split `split_id` with event time `timestamp` (the split's activity).
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn collect_for(
        &mut self,
        split_id: &str,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.splits.activity(Some(split_id));
        let timestamp = self
            .timestamp_of(&value, Some(timestamp), Some(split_id))
            .unwrap_or(timestamp);
        self.out.collect_with_timestamp(value, timestamp)
    }

    /// The event time of `value` (which carries `timestamp`) under the source's watermark
    /// strategy, recorded as seen by `split_id` (or by the reader); `timestamp` without a
    /// strategy.
    fn timestamp_of(
        &mut self,
        value: &T,
        timestamp: Option<i64>,
        split_id: Option<&str>,
    ) -> Option<i64> {
        let Some(strategy) = self.strategy else {
            return timestamp;
        };
        let timestamp = strategy.extract_timestamp(value, timestamp);
        if let Some(timestamp) = timestamp {
            self.splits.saw(split_id, timestamp);
        }
        timestamp
    }

    /// Emits a watermark for the whole reader: every split held is at least there.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.splits.activity(None);
        self.splits.reader_watermark = self.splits.reader_watermark.max(Some(watermark.0));
        self.splits.forwarded = self.splits.forwarded.max(Some(watermark.0));
        self.out.emit_watermark(watermark)
    }

    /// Split `split_id` reached `watermark` (the split's activity); the reader's watermark,
    /// the minimum over its active splits, is forwarded if it advanced. A split not held is
    /// ignored.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn emit_watermark_for(
        &mut self,
        split_id: &str,
        watermark: Watermark,
    ) -> Result<(), OperatorError> {
        if let Some(split) = self.splits.held.get_mut(split_id) {
            split.watermark = split.watermark.max(Some(watermark.0));
            split.active();
        }
        self.forward_watermark()
    }

    /// Marks split `split_id` idle until it is active again: it no longer holds the reader's
    /// watermark back.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn mark_split_idle(&mut self, split_id: &str) -> Result<(), OperatorError> {
        if let Some(split) = self.splits.held.get_mut(split_id) {
            split.idle = true;
        }
        self.forward_watermark()
    }

    /// Marks the reader idle until it emits again.
    ///
    /// # Errors
    ///
    /// The chain behind the reader failed: pass it on with `?`.
    pub fn mark_idle(&mut self) -> Result<(), OperatorError> {
        self.out.mark_idle()
    }

    /// The split `split_id` is read to its end: the reader no longer holds it.
    pub fn finish_split(&mut self, split_id: impl Into<String>) {
        self.finished.push(split_id.into());
    }

    /// Sends the source's own bytes to the enumerator (after this poll).
    pub fn send_event(&mut self, event: Vec<u8>) {
        self.events.push(event);
    }

    /// Forwards the reader's watermark if it advanced past the last one forwarded.
    pub(crate) fn forward_watermark(&mut self) -> Result<(), OperatorError> {
        let combined = self.splits.combined();
        match self.splits.advance(combined) {
            Some(watermark) => self.out.emit_watermark(Watermark(watermark)),
            None => Ok(()),
        }
    }
}

impl<T> fmt::Debug for SplitOutput<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitOutput")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// The splits a reader holds, with their watermarks, idleness and pauses.
#[derive(Debug, Default)]
pub(crate) struct Splits {
    pub(crate) held: HashMap<String, HeldSplit>,
    /// The highest watermark emitted for the whole reader.
    pub(crate) reader_watermark: Option<i64>,
    /// The highest watermark forwarded downstream.
    pub(crate) forwarded: Option<i64>,
    /// The largest event time of the records not addressed to a split (with a watermark
    /// strategy).
    pub(crate) reader_max_timestamp: Option<i64>,
}

/// The watermark `strategy` generates from the largest event time `max` seen: `max` less the
/// out-of-orderness bound, less 1 (Flink's bounded out-of-orderness generator).
fn generated<T>(strategy: &WatermarkStrategy<T>, max: Option<i64>) -> Option<i64> {
    max.map(|m| {
        m.saturating_sub(strategy.out_of_orderness_millis())
            .saturating_sub(1)
    })
}

/// One split a reader holds.
#[derive(Debug)]
pub(crate) struct HeldSplit {
    /// The assignment's number if assigned in this attempt.
    pub(crate) assigned: Option<u64>,
    /// The split's own watermark.
    pub(crate) watermark: Option<i64>,
    /// The largest event time of its records (with a watermark strategy).
    pub(crate) max_timestamp: Option<i64>,
    pub(crate) idle: bool,
    /// Paused by watermark alignment.
    pub(crate) paused: bool,
    /// Active time (milliseconds) since the split's last activity: its idleness clock.
    pub(crate) inactive_ms: i64,
    pub(crate) metrics: Arc<SplitMetrics>,
}

impl HeldSplit {
    /// The split's activity: its idleness clock restarts.
    fn active(&mut self) {
        self.idle = false;
        self.inactive_ms = 0;
    }

    pub(crate) fn new(assigned: Option<u64>) -> Self {
        HeldSplit {
            assigned,
            watermark: None,
            max_timestamp: None,
            idle: false,
            paused: false,
            inactive_ms: 0,
            metrics: Arc::new(SplitMetrics::default()),
        }
    }
}

impl Splits {
    /// The watermark of `split`: its own, raised to the reader's.
    pub(crate) fn watermark_of(&self, split: &HeldSplit) -> Option<i64> {
        split.watermark.max(self.reader_watermark)
    }

    /// The reader's watermark: the minimum over the splits that are not idle (`i64::MIN` while
    /// one has none yet); `None` when every split held is idle, or none is held.
    pub(crate) fn combined(&self) -> Option<i64> {
        self.held
            .values()
            .filter(|s| !s.idle)
            .map(|s| self.watermark_of(s).unwrap_or(i64::MIN))
            .min()
    }

    /// The reader's watermark `combined` ([`combined`](Self::combined)) if it advanced past
    /// the last one forwarded (now forwarded).
    pub(crate) fn advance(&mut self, combined: Option<i64>) -> Option<i64> {
        let combined = combined.filter(|w| *w > i64::MIN)?;
        if self.forwarded.is_some_and(|f| f >= combined) {
            return None;
        }
        self.forwarded = Some(combined);
        Some(combined)
    }

    /// Activity of split `split_id`, or of every split held: their idleness clocks restart.
    pub(crate) fn activity(&mut self, split_id: Option<&str>) {
        match split_id {
            Some(id) => self
                .held
                .get_mut(id)
                .into_iter()
                .for_each(HeldSplit::active),
            None => self.held.values_mut().for_each(HeldSplit::active),
        }
    }

    /// Split `split_id` (or, with `None`, the reader) emitted a record of event time
    /// `timestamp`.
    pub(crate) fn saw(&mut self, split_id: Option<&str>, timestamp: i64) {
        let max = match split_id.and_then(|id| self.held.get_mut(id)) {
            Some(split) => &mut split.max_timestamp,
            None => &mut self.reader_max_timestamp,
        };
        *max = (*max).max(Some(timestamp));
    }

    /// Raises each split's watermark, and the reader's, to what `strategy` generates from
    /// the largest event time seen ([`generated`]).
    pub(crate) fn generate<T>(&mut self, strategy: &WatermarkStrategy<T>) {
        for split in self.held.values_mut() {
            split.watermark = split
                .watermark
                .max(generated(strategy, split.max_timestamp));
        }
        self.reader_watermark = self
            .reader_watermark
            .max(generated(strategy, self.reader_max_timestamp));
    }

    /// Whether [`generate`](Self::generate) would raise a watermark now.
    pub(crate) fn generation_pending<T>(&self, strategy: &WatermarkStrategy<T>) -> bool {
        generated(strategy, self.reader_max_timestamp) > self.reader_watermark
            || self
                .held
                .values()
                .any(|s| generated(strategy, s.max_timestamp) > s.watermark)
    }

    /// Whether splits are held and every one is paused.
    pub(crate) fn all_paused(&self) -> bool {
        !self.held.is_empty() && self.held.values().all(|s| s.paused)
    }

    /// The lowest watermark of a paused split: the first a new bound resumes.
    pub(crate) fn lowest_paused(&self) -> Option<i64> {
        self.held
            .values()
            .filter(|s| s.paused)
            .filter_map(|s| self.watermark_of(s))
            .min()
    }
}
