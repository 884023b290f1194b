//! The handoff buffer: the [`SourceOutput`] a handoff reader's source emits into, kept inside
//! the checkpoint lock next to the source's state, and the snapshot format of both together.

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize};
use streamtask_core::operator::Output;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark};
use streamtask_legacy::SourceOutput;

/// One element handed from the source thread to the mailbox thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum HandoffItem<T> {
    Record(StreamRecord<T>),
    Watermark(Watermark),
    Status(StreamStatus),
}

/// How far the source function got, as the mailbox thread learns it.
///
/// | state | set by | meaning |
/// |---|---|---|
/// | `Open` | - | the function runs (or has not started) |
/// | `Finished` | `end_input` (under the lock, after the last record) | a finite source ended; nothing follows |
/// | `Failed` | the source thread, when the function failed or panicked | the reader reports the error once the items before it are emitted |
/// | `Stopped` | the source thread, after cancellation | nothing follows; only seen while closing |
#[derive(Debug)]
pub(crate) enum HandoffEnd {
    Open,
    Finished,
    Failed(Option<OperatorError>),
    Stopped,
}

/// The bounded buffer between the source thread and the mailbox thread. Every method runs under
/// the checkpoint lock.
pub(crate) struct Handoff<T> {
    pub(crate) items: VecDeque<HandoffItem<T>>,
    capacity: usize,
    /// The reader's waker, registered when it found nothing; taken (and woken) by the first
    /// element that arrives after that.
    waker: Option<Waker>,
    pub(crate) end: HandoffEnd,
}

impl<T> Handoff<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Handoff {
            items: VecDeque::with_capacity(capacity),
            capacity,
            waker: None,
            end: HandoffEnd::Open,
        }
    }

    /// Whether the mailbox thread has something to do: elements, or the source's end.
    pub(crate) fn is_ready(&self) -> bool {
        !self.items.is_empty() || !matches!(self.end, HandoffEnd::Open)
    }

    /// The reader found nothing: wake `waker` once something arrives (at once if it already
    /// has). Registration and arrival both happen under the lock, so none is missed.
    pub(crate) fn register(&mut self, waker: &Waker) {
        if self.is_ready() {
            waker.wake_by_ref();
        } else {
            self.waker = Some(waker.clone());
        }
    }

    /// Wakes the registered reader, if any (under the lock; the woken mailbox thread takes the
    /// same lock to read, so it sees the current section only once it has ended).
    pub(crate) fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn push(&mut self, item: HandoffItem<T>) {
        self.items.push_back(item);
        self.wake();
    }
}

impl<T> Output<T> for Handoff<T> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.push(HandoffItem::Record(record));
        Ok(())
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.push(HandoffItem::Watermark(watermark));
        Ok(())
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(HandoffItem::Status(status));
        Ok(())
    }
}

impl<T: Send> SourceOutput<T> for Handoff<T> {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        // `run_source` emitted `Watermark::MAX` just before; the mailbox task emits its own at
        // the end of input, so drop this one rather than send it twice.
        if matches!(self.items.back(), Some(HandoffItem::Watermark(w)) if w.is_max()) {
            self.items.pop_back();
        }
        self.end = HandoffEnd::Finished;
        self.wake();
        Ok(())
    }

    #[inline]
    fn has_capacity(&self) -> bool {
        self.items.len() < self.capacity
    }
}

impl<T> fmt::Debug for Handoff<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handoff")
            .field("items", &self.items.len())
            .field("capacity", &self.capacity)
            .field("end", &self.end)
            .finish()
    }
}

/// What a handoff reader checkpoints, written under the lock: the source's state, then every
/// element handed off but not yet emitted (the reader's own batch first, then the buffer), and
/// whether the function had finished.
#[derive(Serialize)]
pub(crate) struct SnapshotRef<'a, S, T> {
    pub(crate) state: &'a S,
    pub(crate) pending: Pending<'a, T>,
    pub(crate) finished: bool,
}

/// Two queues serialized as one sequence, without copying them.
pub(crate) struct Pending<'a, T>(
    pub(crate) &'a VecDeque<HandoffItem<T>>,
    pub(crate) &'a VecDeque<HandoffItem<T>>,
);

impl<T: Serialize> Serialize for Pending<'_, T> {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len() + self.1.len()))?;
        for item in self.0.iter().chain(self.1.iter()) {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

/// [`SnapshotRef`] read back.
#[derive(Deserialize)]
pub(crate) struct Restored<S, T> {
    pub(crate) state: S,
    pub(crate) pending: VecDeque<HandoffItem<T>>,
    pub(crate) finished: bool,
}
