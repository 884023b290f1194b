//! New-style sources (Flink's FLIP-27 `SourceReader`): pulled one step at a time by the mailbox
//! thread, never blocking it.
//!
#![doc = include_str!("source.md")]

use std::fmt;
use std::task::Waker;

use streamtask_core::{
    OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output, state::TaskSnapshot,
    task::TaskConfig,
};

/// What a [`SourceReader::poll_next`] call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputStatus {
    /// Call again right away (it usually emitted one record).
    MoreAvailable,
    /// Nothing now; the task suspends until the registered waker is woken.
    NothingAvailable,
    /// The input is over; `poll_next` is not called again.
    EndOfInput,
}

/// A new-style source, run on the mailbox thread: the FLIP-27 `SourceReader` shape. Object safe,
/// so readers can be boxed (`Box<dyn SourceReader<T>>` is a reader too).
///
/// Lifecycle: `restore_state` (once, `None` on a fresh start) -> `poll_next`* interleaved with
/// `snapshot_state` and checkpoint notices -> `close` (always, also after a failure).
///
#[doc = include_str!("source.md")]
///
/// # Examples
///
/// A reader over a vector that checkpoints its position:
///
/// ```
/// use std::task::Waker;
/// use streamtask_core::OperatorError;
/// use streamtask_core::state::{decode, encode};
/// use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
///
/// struct VecReader { items: Vec<u64>, next: usize }
///
/// impl SourceReader<u64> for VecReader {
///     fn name(&self) -> &str { "vec" }
///     fn poll_next(&mut self, output: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
///         match self.items.get(self.next) {
///             Some(&item) => {
///                 self.next += 1;
///                 output.collect(item)?;
///                 Ok(InputStatus::MoreAvailable)
///             }
///             None => Ok(InputStatus::EndOfInput),
///         }
///     }
///     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
///     fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
///         encode(&self.next).map_err(|e| OperatorError::state("vec", e))
///     }
///     fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
///         if let Some(bytes) = state {
///             self.next = decode(bytes).map_err(|e| OperatorError::state("vec", e))?;
///         }
///         Ok(())
///     }
/// }
///
/// let mut reader = VecReader { items: vec![1, 2], next: 0 };
/// let mut sink = Vec::new();
/// let mut output = ReaderOutput::new(&mut sink);
/// assert_eq!(reader.poll_next(&mut output).unwrap(), InputStatus::MoreAvailable);
/// assert_eq!(output.records(), 1);
/// let state = reader.snapshot_state(1).unwrap();
/// let mut restored = VecReader { items: vec![1, 2], next: 0 };
/// restored.restore_state(Some(&state)).unwrap();
/// assert_eq!(restored.next, 1);
/// ```
pub trait SourceReader<T>: Send {
    /// A short name for errors, metrics and traces.
    fn name(&self) -> &str;

    /// The task that runs the reader: its processing-time clock and its metrics. Called once
    /// by the job layer when the task is built, before [`restore_state`](Self::restore_state);
    /// a reader that measures time or keeps metrics of its own (a split source's reader does)
    /// takes them here. Nothing by default.
    fn attach(&mut self, task: &TaskConfig) {
        let _ = task;
    }

    /// Restores the position written by [`snapshot_state`](Self::snapshot_state); `None` on a
    /// fresh start. Called once, before the first `poll_next`.
    ///
    /// # Errors
    ///
    /// Any failure fails the task (typically [`OperatorError::State`]).
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        let _ = state;
        Ok(())
    }

    /// Emits what is available now (usually one record) without blocking, and says whether to
    /// call again, wait, or stop.
    ///
    /// # Errors
    ///
    /// Any failure fails the task; errors from the chain behind the reader come back through
    /// the output and should be passed on with `?`.
    fn poll_next(&mut self, output: &mut ReaderOutput<'_, T>)
    -> Result<InputStatus, OperatorError>;

    /// Asks to be woken through `waker` once `poll_next` may return something other than
    /// [`InputStatus::NothingAvailable`]; wakes at once if that is already the case. Called after
    /// every `NothingAvailable`; see the availability protocol above.
    fn register_waker(&mut self, waker: &Waker);

    /// The reader's position for checkpoint `checkpoint_id`, called between two `poll_next`s.
    ///
    /// # Errors
    ///
    /// Any failure declines the checkpoint and fails the task.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError>;

    /// Writes what the task keeps for this reader at checkpoint `checkpoint_id` into `into`:
    /// by default the [`snapshot_state`](Self::snapshot_state) bytes under
    /// [`TaskSnapshot::SOURCE`]. A reader holding elements in flight (taken from its source,
    /// not yet emitted) overrides it to write its source's own position under `SOURCE` and
    /// the elements under [`TaskSnapshot::SOURCE_IN_FLIGHT`] (see the state format above).
    ///
    /// # Errors
    ///
    /// Any failure declines the checkpoint and fails the task.
    fn snapshot_task_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        let bytes = self.snapshot_state(checkpoint_id)?;
        into.put(TaskSnapshot::SOURCE, bytes);
        Ok(())
    }

    /// Restores from what [`snapshot_task_state`](Self::snapshot_task_state) wrote (`None` on
    /// a fresh start); called once, before the first `poll_next`. By default it hands the
    /// bytes under [`TaskSnapshot::SOURCE`] to [`restore_state`](Self::restore_state) and
    /// refuses a snapshot with elements in flight, which only a reader that replays them can
    /// restore (nothing is dropped silently).
    ///
    /// # Errors
    ///
    /// What `restore_state` fails with; an [`OperatorError::User`] naming the fix for elements
    /// in flight.
    fn restore_task_state(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        if snapshot.is_some_and(|s| s.get(TaskSnapshot::SOURCE_IN_FLIGHT).is_some()) {
            return Err(OperatorError::user(
                self.name().to_string(),
                "the snapshot holds elements a HandoffReader had in flight, which this reader \
                 cannot replay; restore it with the legacy SourceFunction that wrote it (in a \
                 HandoffReader, a legacy task, or the bridge, as the job API runs it)",
            ));
        }
        self.restore_state(snapshot.and_then(|s| s.get(TaskSnapshot::SOURCE)))
    }

    /// Checkpoint `checkpoint_id` completed on every task.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Checkpoint `checkpoint_id` was aborted.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Releases resources; called on every exit path.
    ///
    /// # Errors
    ///
    /// Reported, but the task's outcome is decided by what happened before.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<T, R: SourceReader<T> + ?Sized> SourceReader<T> for Box<R> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn attach(&mut self, task: &TaskConfig) {
        (**self).attach(task)
    }
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        (**self).restore_state(state)
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, T>,
    ) -> Result<InputStatus, OperatorError> {
        (**self).poll_next(output)
    }
    fn register_waker(&mut self, waker: &Waker) {
        (**self).register_waker(waker)
    }
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        (**self).snapshot_state(checkpoint_id)
    }
    fn snapshot_task_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        (**self).snapshot_task_state(checkpoint_id, into)
    }
    fn restore_task_state(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        (**self).restore_task_state(snapshot)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        (**self).notify_checkpoint_complete(checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        (**self).notify_checkpoint_aborted(checkpoint_id)
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        (**self).close()
    }
}

/// Where a [`SourceReader`] emits: records (with or without timestamp), watermarks, and
/// idleness. Marking idle emits [`StreamStatus::Idle`] once; the next record or watermark emits
/// [`StreamStatus::Active`] first.
pub struct ReaderOutput<'a, T> {
    out: &'a mut dyn Output<T>,
    idle: bool,
    records: u64,
}

impl<'a, T> ReaderOutput<'a, T> {
    /// An output emitting to `out`, active. Tasks build one per step; tests may build their own.
    pub fn new(out: &'a mut dyn Output<T>) -> Self {
        ReaderOutput::resume(out, false)
    }

    /// An output that continues a stream whose status is idle if `idle` (what
    /// [`is_idle`](Self::is_idle) said after the previous step), so a driver that builds one
    /// output per poll (a task, the porting kit) keeps the stream status across polls: the
    /// first record or watermark after an idle mark emits [`StreamStatus::Active`].
    pub fn resume(out: &'a mut dyn Output<T>, idle: bool) -> Self {
        ReaderOutput {
            out,
            idle,
            records: 0,
        }
    }

    #[inline]
    fn activate(&mut self) -> Result<(), OperatorError> {
        if self.idle {
            self.idle = false;
            self.out.emit_status(StreamStatus::Active)?;
        }
        Ok(())
    }

    /// Emits a record without timestamp.
    ///
    /// # Errors
    ///
    /// Whatever the chain behind the reader fails with.
    #[inline]
    pub fn collect(&mut self, value: T) -> Result<(), OperatorError> {
        self.collect_record(StreamRecord::new(value))
    }

    /// Emits a record with an event-time timestamp.
    ///
    /// # Errors
    ///
    /// Whatever the chain behind the reader fails with.
    #[inline]
    pub fn collect_with_timestamp(
        &mut self,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.collect_record(StreamRecord::with_timestamp(value, timestamp))
    }

    /// Emits a record as it is.
    ///
    /// # Errors
    ///
    /// Whatever the chain behind the reader fails with.
    #[inline]
    pub fn collect_record(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.activate()?;
        self.records += 1;
        self.out.collect(record)
    }

    /// Emits a watermark.
    ///
    /// # Errors
    ///
    /// Whatever the chain behind the reader fails with.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.activate()?;
        self.out.emit_watermark(watermark)
    }

    /// Marks the source temporarily idle: downstream may advance watermarks without it until it
    /// emits again.
    ///
    /// # Errors
    ///
    /// Whatever the chain behind the reader fails with.
    pub fn mark_idle(&mut self) -> Result<(), OperatorError> {
        if !self.idle {
            self.idle = true;
            self.out.emit_status(StreamStatus::Idle)?;
        }
        Ok(())
    }

    /// Whether the stream is currently marked idle.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Records emitted through this output.
    pub fn records(&self) -> u64 {
        self.records
    }
}

impl<T> fmt::Debug for ReaderOutput<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderOutput")
            .field("idle", &self.idle)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}
