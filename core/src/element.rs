//! What flows through a stream: records, watermarks, stream status, checkpoint barriers.
//!
//! Time is in milliseconds as an `i64`, as in Flink: processing time since the Unix epoch (or
//! since a [`ManualClock`](crate::time::ManualClock)'s zero), event time as the records carry it.

use serde::{Deserialize, Serialize};

/// One record: a value and, when the stream has them, its event-time timestamp.
///
/// # Examples
///
/// ```
/// use streamtask_core::StreamRecord;
///
/// let plain = StreamRecord::new("a");
/// assert_eq!(plain.timestamp, None);
/// let stamped = StreamRecord::with_timestamp("b", 42);
/// assert_eq!(stamped.map(str::len), StreamRecord::with_timestamp(1, 42));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamRecord<T> {
    /// The record's value.
    pub value: T,
    /// Event-time timestamp in milliseconds, if the stream carries one.
    pub timestamp: Option<i64>,
}

impl<T> StreamRecord<T> {
    /// A record without a timestamp.
    #[inline]
    pub fn new(value: T) -> Self {
        StreamRecord {
            value,
            timestamp: None,
        }
    }

    /// A record with an event-time timestamp.
    #[inline]
    pub fn with_timestamp(value: T, timestamp: i64) -> Self {
        StreamRecord {
            value,
            timestamp: Some(timestamp),
        }
    }

    /// Replaces the value, keeping the timestamp (what every one-to-one operator does).
    #[inline]
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> StreamRecord<U> {
        StreamRecord {
            value: f(self.value),
            timestamp: self.timestamp,
        }
    }

    /// A record with `value` and this record's timestamp.
    #[inline]
    pub fn replace<U>(&self, value: U) -> StreamRecord<U> {
        StreamRecord {
            value,
            timestamp: self.timestamp,
        }
    }
}

/// A watermark: no record with a timestamp at or below it should follow.
///
/// # Examples
///
/// ```
/// use streamtask_core::Watermark;
///
/// assert!(Watermark::MAX > Watermark(0));
/// assert!(Watermark::MAX.is_max());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Watermark(pub i64);

impl Watermark {
    /// The end of event time: a finite source emits it once when it finishes.
    pub const MAX: Watermark = Watermark(i64::MAX);
    /// The start of event time: nothing has been promised yet.
    pub const MIN: Watermark = Watermark(i64::MIN);

    /// The watermark's timestamp.
    #[inline]
    pub fn timestamp(self) -> i64 {
        self.0
    }

    /// Whether this is the end of event time.
    #[inline]
    pub fn is_max(self) -> bool {
        self.0 == i64::MAX
    }
}

/// Whether a stream currently produces data; an idle input does not hold back watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum StreamStatus {
    /// The stream produces records and watermarks.
    #[default]
    Active,
    /// The stream is temporarily idle; downstream may advance watermarks without it.
    Idle,
}

/// What a checkpoint barrier asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum CheckpointKind {
    /// A periodic checkpoint for failure recovery.
    #[default]
    Checkpoint,
    /// A savepoint a user asked for. Savepoints are only taken to stop the job
    /// (stop-with-savepoint), so this barrier is synchronous: see
    /// [`is_synchronous`](Self::is_synchronous).
    Savepoint,
    /// A savepoint that drains the job before it is taken (Flink's `stop --drain`): each task
    /// that takes the barrier first ends its chain's input (event time advances to
    /// [`Watermark::MAX`], so windows and event-time timers fire, then every operator's end of
    /// input runs), so what that produces is before the barrier; see [`drains`](Self::drains).
    /// Synchronous, as [`Savepoint`](Self::Savepoint).
    DrainingSavepoint,
}

impl CheckpointKind {
    /// Whether the job stops at this barrier (Flink's synchronous savepoint, `SAVEPOINT_SUSPEND`):
    /// a task that took it processes no input after it, only its notices, until the savepoint
    /// completes (then it ends, without end of input) or is aborted (then it resumes).
    pub fn is_synchronous(self) -> bool {
        matches!(
            self,
            CheckpointKind::Savepoint | CheckpointKind::DrainingSavepoint
        )
    }

    /// Whether a task ends its chain's input before it takes this barrier (Flink's
    /// `stop --drain`): only [`DrainingSavepoint`](Self::DrainingSavepoint).
    pub fn drains(self) -> bool {
        matches!(self, CheckpointKind::DrainingSavepoint)
    }
}

/// A checkpoint barrier: everything before it belongs to checkpoint `id`, everything after to
/// the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CheckpointBarrier {
    /// The checkpoint's id; ids only grow.
    pub id: u64,
    /// Processing time at which the coordinator triggered the checkpoint.
    pub timestamp: i64,
    /// Checkpoint or savepoint.
    pub kind: CheckpointKind,
    /// How tasks with inputs align this barrier.
    pub alignment: Alignment,
}

impl CheckpointBarrier {
    /// An aligned barrier for checkpoint `id` triggered at `timestamp`.
    pub fn new(id: u64, timestamp: i64) -> Self {
        CheckpointBarrier {
            id,
            timestamp,
            kind: CheckpointKind::Checkpoint,
            alignment: Alignment::Aligned,
        }
    }

    /// The same barrier, aligned as `alignment` says.
    pub fn with_alignment(mut self, alignment: Alignment) -> Self {
        self.alignment = alignment;
        self
    }

    /// Whether a task takes this barrier ahead of the records queued before it (and stores
    /// those records as channel state) as soon as it arrives.
    pub fn is_unaligned(&self) -> bool {
        self.alignment == Alignment::Unaligned
    }
}

/// How a checkpoint's barriers pass a task with inputs (Flink's alignment type with its
/// `aligned-checkpoint-timeout`). Savepoints are always aligned.
///
/// | alignment | where the barrier travels | when the task snapshots | channel state |
/// |---|---|---|---|
/// | `Aligned` | behind the records sent before it | once every input delivered it; inputs that did are held back until then | none |
/// | `Unaligned` | ahead of the records queued in each channel | at its first arrival on any input | the records it overtook, and those read from inputs whose barrier is still on its way |
/// | `AlignedTimeout(t)` | as `Aligned` until `t` after the trigger, then as `Unaligned` | once aligned, or at `t` | only if it timed out |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Alignment {
    /// Exactly-once alignment behind the backlog (the default, as in Flink).
    #[default]
    Aligned,
    /// Unaligned from the start (Flink's `execution.checkpointing.unaligned.enabled`).
    Unaligned,
    /// Aligned, switching to unaligned once this long has passed since the trigger (Flink's
    /// `execution.checkpointing.aligned-checkpoint-timeout`).
    AlignedTimeout(std::time::Duration),
}

/// Everything a channel between tasks carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamElement<T> {
    /// A data record.
    Record(StreamRecord<T>),
    /// Event time advanced.
    Watermark(Watermark),
    /// The producer became idle or active again.
    Status(StreamStatus),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The producer finished: nothing follows on this channel.
    EndOfInput,
}

impl<T> StreamElement<T> {
    /// Whether this is a data record.
    pub fn is_record(&self) -> bool {
        matches!(self, StreamElement::Record(_))
    }
}

impl<T> From<StreamRecord<T>> for StreamElement<T> {
    fn from(record: StreamRecord<T>) -> Self {
        StreamElement::Record(record)
    }
}

impl<T> From<Watermark> for StreamElement<T> {
    fn from(watermark: Watermark) -> Self {
        StreamElement::Watermark(watermark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_the_timestamp() {
        let r = StreamRecord::with_timestamp(2, 7).map(|v| v * 10);
        assert_eq!(r, StreamRecord::with_timestamp(20, 7));
        let r = StreamRecord::new(2).map(|v| v + 1);
        assert_eq!(r.timestamp, None);
    }

    #[test]
    fn watermarks_order_by_time() {
        assert!(Watermark(3) < Watermark(4));
        assert!(Watermark::MIN < Watermark(0));
        assert!(!Watermark(5).is_max());
    }

    #[test]
    fn elements_round_trip_through_serde() {
        let elements: Vec<StreamElement<String>> = vec![
            StreamRecord::with_timestamp("x".to_string(), 1).into(),
            Watermark(5).into(),
            StreamElement::Status(StreamStatus::Idle),
            StreamElement::Barrier(CheckpointBarrier::new(3, 100)),
            StreamElement::EndOfInput,
        ];
        let json = serde_json::to_string(&elements).unwrap();
        let back: Vec<StreamElement<String>> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, elements);
    }
}
