//! The handoff buffer: the [`SourceOutput`] a handoff reader's source emits into, kept inside
//! the checkpoint lock next to the source's state; the chunks it publishes to the reader, the
//! one part outside that lock; and the snapshot format of all of it together.
//!
//! Why chunks: the source and the mailbox thread meeting per record (one lock hand-over, and
//! often one thread wake-up, per record or per few) cost the handoff most of the legacy task's
//! throughput. The source now fills a chunk under the lock it holds anyway and publishes it
//! whole; the reader takes a chunk without the checkpoint lock and drains it on its own. The
//! protocol and the exactly-once argument are on `HandoffReader` (the parent module).

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize};
use streamtask_core::operator::Output;
use streamtask_core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use streamtask_core::sync::{Arc, Mutex};
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

/// Records per chunk for a handoff of `capacity` records, unless set: a quarter of the capacity
/// (so the source fills one chunk while the reader drains others), at most 256.
pub(crate) fn default_chunk(capacity: usize) -> usize {
    (capacity / 4).clamp(1, 256)
}

/// A queue of handed-over elements, as the source fills it and the reader drains it.
pub(crate) type Chunk<T> = VecDeque<HandoffItem<T>>;

/// How many times a full source spins looking for room before it yields between looks; none
/// under loom (a spin is only more interleavings there). The lock stays held meanwhile: only the reader's slow
/// path and a snapshot wait for it, for this bounded spell.
const SOURCE_SPINS: u32 = if cfg!(loom) { 0 } else { 64 };

/// How many looks at most, and for how long at most, a full source looks for room before it
/// waits on the lock's condition.
const SOURCE_SPIN_LIMIT: u32 = if cfg!(loom) { 0 } else { 4096 };
const SOURCE_WAIT: Duration = Duration::from_micros(50);

/// Empty chunks kept for reuse (each side hands its emptied queue to the other).
const SPARE_CHUNKS: usize = 4;

/// The chunks the source published: the one part of the handoff that lives outside the
/// checkpoint lock, behind a small mutex of its own that either side holds only to move one
/// chunk. See the module doc of `handoff` for the protocol.
pub(crate) struct Published<T> {
    chunks: Mutex<Chunks<T>>,
    /// Elements in `chunks` (read by the source on every section start, without the mutex).
    queued: AtomicUsize,
    /// The source found no room and may wait on the checkpoint lock's condition: the reader
    /// wakes it when it takes chunks (see [`Published::take_all_into`]).
    source_waits: AtomicBool,
}

struct Chunks<T> {
    full: VecDeque<Chunk<T>>,
    spare: Vec<Chunk<T>>,
}

impl<T> Published<T> {
    fn new() -> Self {
        Published {
            chunks: Mutex::new(Chunks {
                full: VecDeque::new(),
                spare: Vec::new(),
            }),
            queued: AtomicUsize::new(0),
            source_waits: AtomicBool::new(false),
        }
    }

    /// Whether a chunk is published (one atomic load).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.queued.load(Ordering::SeqCst) != 0
    }

    /// Elements published and not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Appends every published chunk to `batch`, in order (the first one by swapping, its
    /// queue kept for reuse). Returns `None` if nothing was published, otherwise whether the
    /// source may be waiting for the room this freed: the caller then wakes it
    /// (`CheckpointLock::wake_all` without the lock; with the lock held, `notify_all`).
    pub(crate) fn take_all_into(&self, batch: &mut Chunk<T>) -> Option<bool> {
        let mut chunks = self.chunks.lock();
        let mut taken = false;
        while let Some(mut chunk) = chunks.full.pop_front() {
            self.queued.fetch_sub(chunk.len(), Ordering::SeqCst);
            taken = true;
            if batch.is_empty() {
                std::mem::swap(batch, &mut chunk);
            } else {
                batch.append(&mut chunk);
            }
            if chunks.spare.len() < SPARE_CHUNKS && chunk.capacity() != 0 {
                chunks.spare.push(chunk);
            }
        }
        drop(chunks);
        // After the decrements (Dekker with `has_capacity`: it stores the flag, then loads
        // `queued`).
        taken.then(|| self.source_waits.swap(false, Ordering::SeqCst))
    }
}

/// The handoff between the source thread and the mailbox thread: the chunk the source fills
/// and its end, under the checkpoint lock (every method runs under it), plus the chunks it
/// published ([`Published`], shared with the reader).
pub(crate) struct Handoff<T> {
    /// The chunk the source fills, not published yet (the snapshot reads it under the lock).
    pub(crate) items: Chunk<T>,
    capacity: usize,
    chunk: usize,
    pub(crate) published: Arc<Published<T>>,
    /// The reader's waker, registered when it found nothing; taken (and woken) by the first
    /// element that arrives after that.
    waker: Option<Waker>,
    pub(crate) end: HandoffEnd,
}

impl<T> Handoff<T> {
    /// A handoff of `capacity` elements, published `chunk` at a time.
    pub(crate) fn new(capacity: usize, chunk: usize) -> Self {
        let chunk = chunk.clamp(1, capacity.max(1));
        Handoff {
            items: VecDeque::with_capacity(chunk),
            capacity,
            chunk,
            published: Arc::new(Published::new()),
            waker: None,
            end: HandoffEnd::Open,
        }
    }

    /// Whether the mailbox thread has something to do: elements, or the source's end.
    pub(crate) fn is_ready(&self) -> bool {
        !self.items.is_empty() || self.published.any() || !matches!(self.end, HandoffEnd::Open)
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

    /// Moves the chunk being filled to the published queue, and wakes a waiting reader.
    pub(crate) fn publish(&mut self) {
        if !self.items.is_empty() {
            let published = &*self.published;
            let mut chunks = published.chunks.lock();
            let next = chunks
                .spare
                .pop()
                .unwrap_or_else(|| VecDeque::with_capacity(self.chunk));
            let full = std::mem::replace(&mut self.items, next);
            published.queued.fetch_add(full.len(), Ordering::SeqCst);
            chunks.full.push_back(full);
        }
        self.wake();
    }

    /// Whether the chunk being filled ends with `Watermark::MAX` (never published by `push`).
    fn ends_with_max(&self) -> bool {
        matches!(self.items.back(), Some(HandoffItem::Watermark(w)) if w.is_max())
    }

    /// Takes the chunk being filled into `batch` (after the published ones): the reader, under
    /// the lock, when nothing was published.
    pub(crate) fn steal_into(&mut self, batch: &mut Chunk<T>) {
        if batch.is_empty() {
            std::mem::swap(&mut self.items, batch);
        } else {
            batch.append(&mut self.items);
        }
    }

    #[inline]
    fn push(&mut self, item: HandoffItem<T>, eager: bool) {
        self.items.push_back(item);
        if self.ends_with_max() {
            // The end's `Watermark::MAX`: `end_input` drops it in the same section. A waiting
            // reader is still woken: it takes the lock after this section, and the chunk then.
            self.wake();
            return;
        }
        if eager
            || self.items.len() >= self.chunk
            || self.items.len() + self.published.queued.load(Ordering::SeqCst) >= self.capacity
            || self.waker.is_some()
        {
            self.publish();
        }
    }
}

impl<T> Output<T> for Handoff<T> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.push(HandoffItem::Record(record), false);
        Ok(())
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        // Published at once: event time should not wait for a chunk to fill.
        self.push(HandoffItem::Watermark(watermark), true);
        Ok(())
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(HandoffItem::Status(status), true);
        Ok(())
    }
}

impl<T: Send> SourceOutput<T> for Handoff<T> {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        // `run_source` emitted `Watermark::MAX` just before, in the same section (so it is
        // still in the chunk being filled); the mailbox task emits its own at the end of input,
        // so drop this one rather than send it twice.
        if self.ends_with_max() {
            self.items.pop_back();
        }
        self.end = HandoffEnd::Finished;
        self.publish();
        Ok(())
    }

    /// Room for one more section: the chunk being filled plus the published chunks below the
    /// capacity. When full, the chunk being filled is empty (`push` publishes at the capacity),
    /// so only the reader frees room.
    #[inline]
    fn has_capacity(&self) -> bool {
        let published = &*self.published;
        if self.items.len() + published.queued.load(Ordering::SeqCst) < self.capacity {
            return true;
        }
        self.has_capacity_slow()
    }
}

impl<T> Handoff<T> {
    /// Full: look again for a while (the reader, on the other core, takes a chunk within a
    /// chunk's worth of records), then raise the flag the reader wakes the source by.
    #[cold]
    fn has_capacity_slow(&self) -> bool {
        let published = &*self.published;
        let room = || self.items.len() + published.queued.load(Ordering::SeqCst) < self.capacity;
        let mut since: Option<Instant> = None;
        for spin in 0..SOURCE_SPIN_LIMIT {
            if spin < SOURCE_SPINS {
                std::hint::spin_loop();
            } else {
                streamtask_core::sync::thread::yield_now();
                let started = *since.get_or_insert_with(Instant::now);
                if started.elapsed() >= SOURCE_WAIT {
                    break;
                }
            }
            if room() {
                return true;
            }
        }
        // Raise the flag, then look again: either this load sees the reader's decrement, or
        // the reader's swap (after its decrement) sees the flag and wakes the lock's waiters.
        published.source_waits.store(true, Ordering::SeqCst);
        self.items.len() + published.queued.load(Ordering::SeqCst) < self.capacity
    }
}

impl<T> fmt::Debug for Handoff<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handoff")
            .field("filling", &self.items.len())
            .field("published", &self.published.len())
            .field("capacity", &self.capacity)
            .field("chunk", &self.chunk)
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
