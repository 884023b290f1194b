//! The handoff buffer: the [`SourceOutput`] a handoff reader's source emits into, kept inside
//! the checkpoint lock next to the source's state; the chunks it publishes to the reader, the
//! one part outside that lock; and the snapshot format of all of it together.
//!
//! Why chunks: the source and the mailbox thread meeting per record (one lock hand-over, and
//! often one thread wake-up, per record or per few) cost the handoff most of the legacy task's
//! throughput. The source now fills a chunk under the lock it holds anyway and publishes it
//! whole; the reader takes a chunk without the checkpoint lock and drains it on its own. The
//! protocol and the exactly-once argument are on `HandoffReader` (the parent module).
//!
//! Why the chunk being filled is copied out rather than handed over: the source fills one
//! buffer of its own for good, and `publish` copies it (one `memcpy`) into a spare the reader
//! gave back. A buffer handed over whole came back to the source from the reader's core, so each
//! record's store missed the cache, and the checkpoint lock's release right after it (a full
//! fence) waited for that miss: per record, not per chunk (the source's cost per record at
//! capacity 1024 about doubled). The copy takes the misses once per chunk, overlapped. For the
//! same reason the reader borrows the lock rather than cloning its `Arc` per chunk: the count
//! shares a cache line with the mutex the source takes per record.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;
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

/// Records per chunk for a handoff of `capacity` records, unless set: half the capacity, at most
/// 256 (the source fills one chunk while another is published; the chunk the reader drains is
/// apart from the capacity). A quarter met the reader twice as often at capacity 64, and each
/// meeting costs both threads a few cache misses (the chunks' mutex, the counts, the spare):
/// about 20% of the throughput there.
pub(crate) fn default_chunk(capacity: usize) -> usize {
    (capacity / 2).clamp(1, 256)
}

/// A queue of handed-over elements, as the source fills it and the reader drains it.
pub(crate) type Chunk<T> = VecDeque<HandoffItem<T>>;

/// How long a full source spins looking for room before it yields between looks, and how long
/// it yields before it waits on the lock's condition. The lock stays held meanwhile: only the
/// reader's slow path and a snapshot wait for it, for this bounded spell.
const SOURCE_SPIN: Duration = Duration::from_micros(20);
const SOURCE_WAIT: Duration = Duration::from_micros(50);

/// Looks for `ready` by spinning for `spin` (the other side, on its own core, is expected
/// within a chunk's worth of records), then by yielding between looks for `yield_for` (a
/// machine busier than its cores: let the other side run). Returns whether `ready` held; under
/// loom it looks once (a spin is only more interleavings there).
///
/// Why spin that long before the first yield: the side that waits at every chunk (the reader,
/// when it is the faster; the source, when the reader is) met the other once per chunk with a
/// `sched_yield` (64 spins were shorter than a chunk of 16 filling), a system call per 16-32
/// records that cost the handoff at capacity 64 about half its throughput, and on a loaded
/// machine gave the core away for a whole time slice each time.
pub(crate) fn spin_then_yield(
    mut ready: impl FnMut() -> bool,
    spin: Duration,
    yield_for: Duration,
) -> bool {
    if ready() {
        return true;
    }
    if cfg!(loom) {
        return false;
    }
    let start = Instant::now();
    // The clock is read once per this many looks.
    const LOOKS: u32 = 32;
    loop {
        for _ in 0..LOOKS {
            std::hint::spin_loop();
            if ready() {
                return true;
            }
        }
        if start.elapsed() >= spin {
            break;
        }
    }
    let yielding = Instant::now();
    loop {
        streamtask_core::sync::thread::yield_now();
        if ready() {
            return true;
        }
        if yielding.elapsed() >= yield_for {
            return false;
        }
    }
}

/// Empty chunks kept for reuse (each side hands its emptied queue to the other).
const SPARE_CHUNKS: usize = 4;

/// The chunks the source published: the one part of the handoff that lives outside the
/// checkpoint lock, behind a small mutex of its own that either side holds only to move one
/// chunk. See the module doc of `handoff` for the protocol.
///
/// What is queued is counted by two running totals, each written by one side only and each on
/// a cache line of its own (as an SPSC ring's head and tail): `published` by the source,
/// `taken` by whoever takes (the reader; a snapshot under the lock). Elements queued are
/// `published - taken`. The source keeps its own copy of `taken` and reloads it only when its
/// copy says the handoff is full, so between two meetings neither side touches a line the
/// other writes (one shared counter, written by both, cost a cache-line transfer each way per
/// meeting plus one on the source's next look, which at capacity 64 was most of the cost).
pub(crate) struct Published<T> {
    chunks: CachePadded<Mutex<Chunks<T>>>,
    /// Elements ever published (the source, under the chunks mutex).
    published: CachePadded<AtomicUsize>,
    /// Elements ever taken (under the chunks mutex).
    taken: CachePadded<AtomicUsize>,
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
            chunks: CachePadded::new(Mutex::new(Chunks {
                full: VecDeque::new(),
                spare: Vec::new(),
            })),
            published: CachePadded::new(AtomicUsize::new(0)),
            taken: CachePadded::new(AtomicUsize::new(0)),
            source_waits: AtomicBool::new(false),
        }
    }

    /// Whether a chunk is published (two atomic loads; `taken` is the reader's own line).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.len() != 0
    }

    /// Elements published and not taken yet. `taken` first: it never passes `published`, so
    /// reading it first never sees more taken than published.
    pub(crate) fn len(&self) -> usize {
        let taken = self.taken.load(Ordering::SeqCst);
        self.published.load(Ordering::SeqCst).wrapping_sub(taken)
    }

    /// Appends every published chunk to `batch`, in order (the first one by swapping, its
    /// queue kept for reuse). Returns `None` if nothing was published (two loads, no lock: the
    /// mutex's line stays with the source meanwhile), otherwise whether the
    /// source may be waiting for the room this freed: the caller then wakes it
    /// (`CheckpointLock::wake_all` without the lock; with the lock held, `notify_all`).
    pub(crate) fn take_all_into(&self, batch: &mut Chunk<T>) -> Option<bool> {
        if !self.any() {
            return None;
        }
        let mut chunks = self.chunks.lock();
        let mut taken = false;
        let mut count = 0;
        while let Some(mut chunk) = chunks.full.pop_front() {
            count += chunk.len();
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
        if taken {
            self.taken.fetch_add(count, Ordering::SeqCst);
        }
        drop(chunks);
        // After the count moved (Dekker with `has_capacity_slow`: it stores the flag, then loads
        // `taken`).
        taken.then(|| self.source_waits.swap(false, Ordering::SeqCst))
    }
}

/// The handoff between the source thread and the mailbox thread: the chunk the source fills
/// and its end, under the checkpoint lock (every method runs under it), plus the chunks it
/// published ([`Published`], shared with the reader).
pub(crate) struct Handoff<T> {
    /// The chunk the source fills, not published yet (the snapshot reads it under the lock).
    pub(crate) items: Chunk<T>,
    /// An empty chunk (a spare), which `publish` copies the chunk being filled into.
    next: Chunk<T>,
    capacity: usize,
    chunk: usize,
    pub(crate) published: Arc<Published<T>>,
    /// `published.published`, as only this side writes it.
    sent: usize,
    /// `published.taken` as last read: at most the real count, so the room it shows is at most
    /// the real room (reloaded when it shows none).
    taken_seen: Cell<usize>,
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
            next: VecDeque::with_capacity(chunk),
            capacity,
            chunk,
            published: Arc::new(Published::new()),
            sent: 0,
            taken_seen: Cell::new(0),
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

    /// Copies the chunk being filled to the published queue (keeping its buffer, see the
    /// module doc), and wakes a waiting reader.
    pub(crate) fn publish(&mut self) {
        if !self.items.is_empty() {
            // Copied out (one `memcpy`, no fence between its stores), not swapped out.
            let mut full = std::mem::take(&mut self.next);
            full.append(&mut self.items);
            let published = &*self.published;
            let mut chunks = published.chunks.lock();
            self.next = chunks.spare.pop().unwrap_or_default();
            self.sent = self.sent.wrapping_add(full.len());
            published.published.store(self.sent, Ordering::SeqCst);
            chunks.full.push_back(full);
        }
        self.wake();
    }

    /// Whether the chunk being filled ends with `Watermark::MAX` (never published by `push`).
    fn ends_with_max(&self) -> bool {
        matches!(self.items.back(), Some(HandoffItem::Watermark(w)) if w.is_max())
    }

    /// Moves the chunk being filled into `batch` (after the published ones; copied, so the
    /// source keeps its buffer): the reader, under the lock, when nothing was published.
    pub(crate) fn steal_into(&mut self, batch: &mut Chunk<T>) {
        batch.append(&mut self.items);
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
            || self.items.len() + self.queued_at_most() >= self.capacity
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
        // The source's own copy of `taken` first; the shared line only when that shows no room.
        if self.items.len() + self.queued_at_most() < self.capacity || self.room() {
            return true;
        }
        self.has_capacity_slow()
    }
}

impl<T> Handoff<T> {
    /// Elements published and not taken, as the source last saw `taken` (so at least the
    /// real count; exact after [`room`](Self::room)). No shared line is read.
    #[inline]
    fn queued_at_most(&self) -> usize {
        self.sent.wrapping_sub(self.taken_seen.get())
    }

    /// Whether one more section fits, reading the real `taken` (the line the taker writes).
    fn room(&self) -> bool {
        self.taken_seen
            .set(self.published.taken.load(Ordering::SeqCst));
        self.items.len() + self.queued_at_most() < self.capacity
    }

    /// Full: look again for a while (the reader, on the other core, takes a chunk within a
    /// chunk's worth of records), then raise the flag the reader wakes the source by.
    #[cold]
    fn has_capacity_slow(&self) -> bool {
        let published = &*self.published;
        if spin_then_yield(|| self.room(), SOURCE_SPIN, SOURCE_WAIT) {
            return true;
        }
        // Raise the flag, then look again: either this load sees the reader's decrement, or
        // the reader's swap (after its decrement) sees the flag and wakes the lock's waiters.
        published.source_waits.store(true, Ordering::SeqCst);
        self.room()
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn record(n: u64) -> StreamRecord<u64> {
        StreamRecord {
            value: n,
            timestamp: None,
        }
    }

    fn values(batch: &Chunk<u64>) -> Vec<u64> {
        batch
            .iter()
            .map(|item| match item {
                HandoffItem::Record(r) => r.value,
                other => panic!("not a record: {other:?}"),
            })
            .collect()
    }

    /// The address of the first slot of the chunk being filled (which must hold an element).
    fn filling_buffer(handoff: &Handoff<u64>) -> usize {
        std::ptr::from_ref(&handoff.items[0]).addr()
    }

    /// Publishing copies the chunk out: the source keeps filling the same buffer (a buffer
    /// swapped out came back from the reader's core, and every store into it missed), and the
    /// elements still reach the reader once and in order, published or stolen.
    #[test]
    fn publishing_keeps_the_buffer_being_filled_and_the_order() {
        let mut handoff = Handoff::<u64>::new(8, 3);
        let published = Arc::clone(&handoff.published);
        let mut batch = Chunk::new();
        assert_eq!(published.take_all_into(&mut batch), None);
        handoff.collect(record(0)).unwrap();
        let buffer = filling_buffer(&handoff);
        handoff.collect(record(1)).unwrap();
        handoff.collect(record(2)).unwrap(); // a full chunk: published
        assert!(handoff.items.is_empty());
        assert_eq!(published.len(), 3);
        handoff.collect(record(3)).unwrap();
        assert_eq!(filling_buffer(&handoff), buffer);
        assert_eq!(published.take_all_into(&mut batch), Some(false));
        assert_eq!(values(&batch), [0, 1, 2]);
        batch.clear();
        // As the context does: room is checked before each section.
        for n in 4..10 {
            assert!(handoff.has_capacity());
            handoff.collect(record(n)).unwrap();
        }
        assert_eq!(published.len(), 5); // [3, 4, 5], [6, 7] (at the capacity); filling [8, 9]
        assert_eq!(filling_buffer(&handoff), buffer);
        assert_eq!(published.take_all_into(&mut batch), Some(false));
        handoff.steal_into(&mut batch);
        assert_eq!(values(&batch), (3..10).collect::<Vec<_>>());
        assert!(handoff.items.is_empty());
        assert!(handoff.has_capacity());
        handoff.collect(record(10)).unwrap();
        assert_eq!(filling_buffer(&handoff), buffer);
    }
}
