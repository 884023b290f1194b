//! The single-threaded element queues of the async operator: ordered, unordered and key-ordered.
//!
//! Both hold records (waiting for their results) and watermarks (always complete), count both
//! against the capacity, and hand out completed elements in the order their mode allows:
//!
//! - **ordered**: strictly in insertion order; a completed record waits for every older element.
//! - **unordered**: watermarks split the queue into segments. Records leave in completion order
//!   within the first segment; a watermark leaves after every record before it and before every
//!   record after it; a record of a later segment that completed early waits until its segment
//!   becomes the first (and then leaves in completion order too).
//! - **key-ordered**: the unordered queue. The engine starts one call per key at a time, in
//!   input order, so a key's records complete in input order, and completion order within a
//!   segment is then input order per key; across keys nothing waits (no head-of-line blocking),
//!   and a watermark still leaves after every record before it.
//!
//! The queues are owned by one thread (the task thread, or under the legacy model's checkpoint
//! lock); completions reach them through that thread. [`ElementQueue::values`] lists the inputs of
//! every element not yet emitted, in queue order: that is the async operator's snapshot.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

use streamtask_core::async_io::OutputMode;
use streamtask_core::{StreamRecord, Watermark};

/// An element waiting in the queue: a record's input or a watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueuedInput<I> {
    /// A record whose call is in flight (or completed, not yet emitted).
    Record(StreamRecord<I>),
    /// A watermark.
    Watermark(Watermark),
}

/// What the queue hands out when an element leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueOutput<O> {
    /// The results of one record, all to be emitted with the record's timestamp.
    Results {
        /// The results (possibly none).
        values: Vec<O>,
        /// The input record's timestamp.
        timestamp: Option<i64>,
    },
    /// A watermark to forward.
    Watermark(Watermark),
}

/// The queue is full; the element is handed back.
#[derive(Clone, PartialEq, Eq)]
pub struct QueueFull<I>(pub QueuedInput<I>);

impl<I> QueueFull<I> {
    /// The element that was not admitted.
    pub fn into_inner(self) -> QueuedInput<I> {
        self.0
    }
}

impl<I> fmt::Debug for QueueFull<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueueFull(..)")
    }
}

impl<I> fmt::Display for QueueFull<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the async queue is full; wait for a completion to free a slot")
    }
}

impl<I> std::error::Error for QueueFull<I> {}

struct Entry<I, O> {
    id: u64,
    input: QueuedInput<I>,
    // `None` while the call is in flight; watermarks are created complete.
    result: Option<Vec<O>>,
}

impl<I, O> Entry<I, O> {
    fn into_output(self) -> QueueOutput<O> {
        match self.input {
            QueuedInput::Watermark(w) => QueueOutput::Watermark(w),
            QueuedInput::Record(r) => QueueOutput::Results {
                values: self.result.unwrap_or_default(),
                timestamp: r.timestamp,
            },
        }
    }
}

/// Results in insertion order.
struct OrderedQueue<I, O> {
    entries: VecDeque<Entry<I, O>>,
    capacity: usize,
}

impl<I, O> OrderedQueue<I, O> {
    fn new(capacity: usize) -> Self {
        OrderedQueue {
            entries: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    fn push(&mut self, id: u64, input: QueuedInput<I>) {
        let result = matches!(input, QueuedInput::Watermark(_)).then(Vec::new);
        self.entries.push_back(Entry { id, input, result });
    }

    fn complete(&mut self, id: u64, values: Vec<O>) -> bool {
        // Ids grow with insertion, so the deque is sorted by id.
        match self.entries.binary_search_by_key(&id, |e| e.id) {
            Ok(i) if self.entries[i].result.is_none() => {
                self.entries[i].result = Some(values);
                true
            }
            _ => false,
        }
    }

    fn has_completed(&self) -> bool {
        self.entries.front().is_some_and(|e| e.result.is_some())
    }

    fn pop_completed(&mut self) -> Option<QueueOutput<O>> {
        if self.has_completed() {
            self.entries.pop_front().map(Entry::into_output)
        } else {
            None
        }
    }

    fn values(&self) -> Vec<&QueuedInput<I>> {
        self.entries.iter().map(|e| &e.input).collect()
    }

    fn is_pending(&self, id: u64) -> bool {
        self.entries
            .binary_search_by_key(&id, |e| e.id)
            .is_ok_and(|i| self.entries[i].result.is_none())
    }
}

struct Segment<I, O> {
    // In flight, by id: slot `i` holds id `first + i`. A segment's records were admitted one
    // after another (a watermark starts a new segment), so their ids are consecutive and a
    // completion finds its record by a subtraction. A completed record leaves `None` behind
    // until every slot before it is gone too, so the front is always in flight and the deque is
    // empty exactly when no record of the segment is.
    incomplete: VecDeque<Option<Entry<I, O>>>,
    first: u64,
    // Completed, in completion order.
    completed: VecDeque<Entry<I, O>>,
}

impl<I, O> Segment<I, O> {
    fn new() -> Self {
        Segment {
            incomplete: VecDeque::new(),
            first: 0,
            completed: VecDeque::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.incomplete.is_empty() && self.completed.is_empty()
    }

    fn push_in_flight(&mut self, entry: Entry<I, O>) {
        if self.incomplete.is_empty() {
            self.first = entry.id;
        }
        debug_assert_eq!(
            self.first + self.incomplete.len() as u64,
            entry.id,
            "a segment's records have consecutive ids"
        );
        self.incomplete.push_back(Some(entry));
    }

    /// The slot of in-flight record `id`, if it is one.
    fn slot(&self, id: u64) -> Option<usize> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.incomplete
            .get(index)?
            .as_ref()
            .is_some_and(|e| e.id == id)
            .then_some(index)
    }

    /// Takes in-flight record `id` out, if it is one.
    fn take_in_flight(&mut self, id: u64) -> Option<Entry<I, O>> {
        let index = self.slot(id)?;
        let entry = self.incomplete[index].take();
        while self.incomplete.front().is_some_and(Option::is_none) {
            self.incomplete.pop_front();
            self.first += 1;
        }
        entry
    }
}

/// Results in completion order, never across a watermark.
struct UnorderedQueue<I, O> {
    segments: VecDeque<Segment<I, O>>,
    len: usize,
    capacity: usize,
}

impl<I, O> UnorderedQueue<I, O> {
    fn new(capacity: usize) -> Self {
        UnorderedQueue {
            segments: VecDeque::new(),
            len: 0,
            capacity,
        }
    }

    fn push(&mut self, id: u64, input: QueuedInput<I>) {
        match input {
            QueuedInput::Record(_) => {
                if self.segments.is_empty() {
                    self.segments.push_back(Segment::new());
                }
                let last = self.segments.back_mut().expect("a segment exists");
                last.push_in_flight(Entry {
                    id,
                    input,
                    result: None,
                });
            }
            QueuedInput::Watermark(_) => {
                // The watermark gets a segment of its own (reusing an empty last one), already
                // complete, and records after it start a new segment.
                if !self.segments.back().is_some_and(Segment::is_empty) {
                    self.segments.push_back(Segment::new());
                }
                let last = self.segments.back_mut().expect("a segment exists");
                last.completed.push_back(Entry {
                    id,
                    input,
                    result: Some(Vec::new()),
                });
                self.segments.push_back(Segment::new());
            }
        }
        self.len += 1;
    }

    fn complete(&mut self, id: u64, values: Vec<O>) -> bool {
        // Few segments (one per watermark in flight); search from the newest, where most calls
        // complete.
        for segment in self.segments.iter_mut().rev() {
            if let Some(mut entry) = segment.take_in_flight(id) {
                entry.result = Some(values);
                segment.completed.push_back(entry);
                return true;
            }
        }
        false
    }

    fn has_completed(&self) -> bool {
        self.segments
            .front()
            .is_some_and(|s| !s.completed.is_empty())
    }

    fn pop_completed(&mut self) -> Option<QueueOutput<O>> {
        let first = self.segments.front_mut()?;
        let entry = first.completed.pop_front()?;
        self.len -= 1;
        // Drop the drained first segment, but always keep the last one (records go there).
        if first.is_empty() && self.segments.len() > 1 {
            self.segments.pop_front();
        }
        Some(entry.into_output())
    }

    fn values(&self) -> Vec<&QueuedInput<I>> {
        self.segments
            .iter()
            .flat_map(|s| {
                s.completed
                    .iter()
                    .map(|e| &e.input)
                    .chain(s.incomplete.iter().flatten().map(|e| &e.input))
            })
            .collect()
    }

    fn is_pending(&self, id: u64) -> bool {
        self.segments.iter().any(|s| s.slot(id).is_some())
    }
}

/// The async operator's queue, ordered or unordered (key-ordered mode uses the unordered queue).
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::OutputMode;
/// use streamtask_core::{StreamRecord, Watermark};
/// use streamtask_runtime::{ElementQueue, QueueOutput};
///
/// let mut q: ElementQueue<&str, usize> = ElementQueue::new(OutputMode::Unordered, 4);
/// let a = q.try_put_record(StreamRecord::with_timestamp("a", 1)).unwrap();
/// let b = q.try_put_record(StreamRecord::with_timestamp("bb", 2)).unwrap();
/// q.try_put_watermark(Watermark(2)).unwrap();
/// q.complete(b, vec![2]);
/// // Unordered: b completed first and leaves first ...
/// assert_eq!(q.pop_completed(), Some(QueueOutput::Results { values: vec![2], timestamp: Some(2) }));
/// // ... but the watermark waits for a.
/// assert_eq!(q.pop_completed(), None);
/// q.complete(a, vec![1]);
/// assert!(matches!(q.pop_completed(), Some(QueueOutput::Results { .. })));
/// assert_eq!(q.pop_completed(), Some(QueueOutput::Watermark(Watermark(2))));
/// assert!(q.is_empty());
/// ```
pub struct ElementQueue<I, O> {
    flavor: Flavor<I, O>,
    mode: OutputMode,
    next_id: u64,
}

enum Flavor<I, O> {
    Ordered(OrderedQueue<I, O>),
    Unordered(UnorderedQueue<I, O>),
}

impl<I, O> ElementQueue<I, O> {
    /// An empty queue of `capacity` elements (watermarks count).
    ///
    /// # Panics
    ///
    /// If `capacity` is 0; operators validate their configuration first
    /// ([`AsyncConfig::validate`](streamtask_core::async_io::AsyncConfig::validate)).
    pub fn new(mode: OutputMode, capacity: usize) -> Self {
        assert!(
            capacity > 0,
            "an async queue needs a capacity of at least 1"
        );
        let flavor = match mode {
            OutputMode::Ordered => Flavor::Ordered(OrderedQueue::new(capacity)),
            // Per-key order comes from the engine starting a key's calls one at a time.
            OutputMode::Unordered | OutputMode::KeyOrdered => {
                Flavor::Unordered(UnorderedQueue::new(capacity))
            }
        };
        ElementQueue {
            flavor,
            mode,
            next_id: 0,
        }
    }

    /// Ordered, unordered or key-ordered.
    pub fn mode(&self) -> OutputMode {
        self.mode
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        match &self.flavor {
            Flavor::Ordered(q) => q.capacity,
            Flavor::Unordered(q) => q.capacity,
        }
    }

    /// Elements in the queue (watermarks included).
    pub fn len(&self) -> usize {
        match &self.flavor {
            Flavor::Ordered(q) => q.entries.len(),
            Flavor::Unordered(q) => q.len,
        }
    }

    /// Whether the queue holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether another element would be refused.
    pub fn is_full(&self) -> bool {
        self.len() >= self.capacity()
    }

    /// Admits `input`, returning its entry id (the id a completion names).
    ///
    /// # Errors
    ///
    /// [`QueueFull`] with the element when the queue is full.
    pub fn try_put(&mut self, input: QueuedInput<I>) -> Result<u64, QueueFull<I>> {
        if self.is_full() {
            return Err(QueueFull(input));
        }
        let id = self.next_id;
        self.next_id += 1;
        match &mut self.flavor {
            Flavor::Ordered(q) => q.push(id, input),
            Flavor::Unordered(q) => q.push(id, input),
        }
        Ok(id)
    }

    /// Admits a record.
    ///
    /// # Errors
    ///
    /// [`QueueFull`] with the element when the queue is full.
    pub fn try_put_record(&mut self, record: StreamRecord<I>) -> Result<u64, QueueFull<I>> {
        self.try_put(QueuedInput::Record(record))
    }

    /// Admits a watermark (already complete).
    ///
    /// # Errors
    ///
    /// [`QueueFull`] with the element when the queue is full.
    pub fn try_put_watermark(&mut self, watermark: Watermark) -> Result<u64, QueueFull<I>> {
        self.try_put(QueuedInput::Watermark(watermark))
    }

    /// Sets the results of entry `id`. Returns `false` (and changes nothing) if the entry is
    /// unknown, already emitted or already completed: the first completion wins.
    pub fn complete(&mut self, id: u64, values: Vec<O>) -> bool {
        match &mut self.flavor {
            Flavor::Ordered(q) => q.complete(id, values),
            Flavor::Unordered(q) => q.complete(id, values),
        }
    }

    /// Whether entry `id` is in the queue and still waiting for its result.
    pub fn is_pending(&self, id: u64) -> bool {
        match &self.flavor {
            Flavor::Ordered(q) => q.is_pending(id),
            Flavor::Unordered(q) => q.is_pending(id),
        }
    }

    /// Whether an element can leave now.
    pub fn has_completed(&self) -> bool {
        match &self.flavor {
            Flavor::Ordered(q) => q.has_completed(),
            Flavor::Unordered(q) => q.has_completed(),
        }
    }

    /// Removes and returns the next element that may leave, if any.
    pub fn pop_completed(&mut self) -> Option<QueueOutput<O>> {
        match &mut self.flavor {
            Flavor::Ordered(q) => q.pop_completed(),
            Flavor::Unordered(q) => q.pop_completed(),
        }
    }

    /// The inputs of every element not yet emitted, in queue order (the operator's snapshot).
    pub fn values(&self) -> Vec<&QueuedInput<I>> {
        match &self.flavor {
            Flavor::Ordered(q) => q.values(),
            Flavor::Unordered(q) => q.values(),
        }
    }
}

impl<I, O> fmt::Debug for ElementQueue<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElementQueue")
            .field("mode", &self.mode())
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: u32) -> StreamRecord<u32> {
        StreamRecord::with_timestamp(v, i64::from(v))
    }

    fn drain(q: &mut ElementQueue<u32, u32>) -> Vec<String> {
        std::iter::from_fn(|| q.pop_completed())
            .map(|o| match o {
                QueueOutput::Results { values, .. } => format!("{values:?}"),
                QueueOutput::Watermark(w) => format!("W{}", w.0),
            })
            .collect()
    }

    #[test]
    fn ordered_emits_in_insertion_order_whatever_the_completion_order() {
        let mut q = ElementQueue::new(OutputMode::Ordered, 10);
        let a = q.try_put_record(rec(1)).unwrap();
        let b = q.try_put_record(rec(2)).unwrap();
        q.try_put_watermark(Watermark(2)).unwrap();
        let c = q.try_put_record(rec(3)).unwrap();
        assert!(q.complete(c, vec![30]));
        assert!(q.complete(b, vec![20]));
        assert!(drain(&mut q).is_empty());
        assert!(q.complete(a, vec![10]));
        assert_eq!(drain(&mut q), vec!["[10]", "[20]", "W2", "[30]"]);
    }

    #[test]
    fn unordered_reorders_only_within_a_segment() {
        // Mirrors Flink's UnorderedStreamElementQueueTest#testCompletionOrder.
        let mut q = ElementQueue::new(OutputMode::Unordered, 8);
        let r1 = q.try_put_record(rec(1)).unwrap();
        let r2 = q.try_put_record(rec(2)).unwrap();
        q.try_put_watermark(Watermark(2)).unwrap();
        let r3 = q.try_put_record(rec(3)).unwrap();
        let r4 = q.try_put_record(rec(4)).unwrap();
        q.try_put_watermark(Watermark(4)).unwrap();
        let r5 = q.try_put_record(rec(5)).unwrap();
        assert_eq!(q.len(), 7);

        q.complete(r2, vec![2]);
        assert_eq!(drain(&mut q), vec!["[2]"]);
        q.complete(r4, vec![4]);
        q.complete(r3, vec![3]);
        q.complete(r5, vec![5]);
        assert!(
            drain(&mut q).is_empty(),
            "r1 holds back W2 and everything after it"
        );
        q.complete(r1, vec![1]);
        // Later segments leave in their completion order (r4 before r3).
        assert_eq!(drain(&mut q), vec!["[1]", "W2", "[4]", "[3]", "W4", "[5]"]);
        assert!(q.is_empty());
    }

    #[test]
    fn has_completed_is_true_exactly_while_an_element_may_leave() {
        for mode in [OutputMode::Ordered, OutputMode::Unordered] {
            let mut q: ElementQueue<u32, u32> = ElementQueue::new(mode, 4);
            assert!(!q.has_completed(), "{mode:?}: empty");
            let a = q.try_put_record(rec(1)).unwrap();
            assert!(!q.has_completed(), "{mode:?}: only an incomplete element");
            assert!(q.complete(a, vec![10]));
            assert!(q.has_completed(), "{mode:?}: a completed element");
            assert_eq!(drain(&mut q), vec!["[10]"]);
            assert!(!q.has_completed(), "{mode:?}: drained");
        }
    }

    #[test]
    fn an_unordered_queue_drained_to_empty_still_takes_records() {
        // Drained to empty (its only segment emptied), it takes records again.
        let mut q: ElementQueue<u32, u32> = ElementQueue::new(OutputMode::Unordered, 2);
        let a = q.try_put_record(rec(1)).unwrap();
        q.complete(a, vec![1]);
        assert_eq!(drain(&mut q), vec!["[1]"]);
        let b = q.try_put_record(rec(2)).unwrap();
        assert!(q.complete(b, vec![2]));
        assert_eq!(drain(&mut q), vec!["[2]"]);
        assert!(q.is_empty());
    }

    #[test]
    fn debug_and_display_name_what_they_show() {
        let mut q: ElementQueue<u32, u32> = ElementQueue::new(OutputMode::Unordered, 2);
        let full = loop {
            match q.try_put_record(rec(1)) {
                Ok(_) => {}
                Err(full) => break full,
            }
        };
        assert_eq!(format!("{full:?}"), "QueueFull(..)");
        assert_eq!(
            full.to_string(),
            "the async queue is full; wait for a completion to free a slot"
        );
        let debug = format!("{q:?}");
        assert!(
            debug.contains("ElementQueue")
                && debug.contains("len: 2")
                && debug.contains("capacity: 2"),
            "{debug}"
        );
    }

    #[test]
    fn watermarks_count_against_capacity() {
        let mut q: ElementQueue<u32, u32> = ElementQueue::new(OutputMode::Unordered, 2);
        q.try_put_record(rec(1)).unwrap();
        q.try_put_watermark(Watermark(1)).unwrap();
        assert!(q.is_full());
        let refused = q.try_put_record(rec(2)).unwrap_err();
        assert_eq!(refused.into_inner(), QueuedInput::Record(rec(2)));
    }

    #[test]
    fn a_lone_watermark_leaves_at_once() {
        for mode in [OutputMode::Ordered, OutputMode::Unordered] {
            let mut q: ElementQueue<u32, u32> = ElementQueue::new(mode, 2);
            q.try_put_watermark(Watermark(5)).unwrap();
            assert_eq!(drain(&mut q), vec!["W5"]);
        }
    }

    #[test]
    fn first_completion_wins() {
        for mode in [OutputMode::Ordered, OutputMode::Unordered] {
            let mut q = ElementQueue::new(mode, 2);
            let a = q.try_put_record(rec(1)).unwrap();
            assert!(q.is_pending(a));
            assert!(q.complete(a, vec![1]));
            assert!(!q.complete(a, vec![2]));
            assert!(!q.complete(99, vec![3]));
            assert!(!q.is_pending(a));
            assert_eq!(drain(&mut q), vec!["[1]"]);
            assert!(
                !q.complete(a, vec![4]),
                "emitted entries cannot complete again"
            );
        }
    }

    #[test]
    fn values_list_every_unemitted_input_in_queue_order() {
        let mut q: ElementQueue<u32, u32> = ElementQueue::new(OutputMode::Unordered, 8);
        let a = q.try_put_record(rec(1)).unwrap();
        let b = q.try_put_record(rec(2)).unwrap();
        q.try_put_watermark(Watermark(2)).unwrap();
        q.try_put_record(rec(3)).unwrap();
        q.complete(b, vec![]);
        let values: Vec<String> = q
            .values()
            .into_iter()
            .map(|v| match v {
                QueuedInput::Record(r) => format!("R{}", r.value),
                QueuedInput::Watermark(w) => format!("W{}", w.0),
            })
            .collect();
        // Completed-but-unemitted first within a segment, then in flight, then later segments.
        assert_eq!(values, vec!["R2", "R1", "W2", "R3"]);
        let _ = a;
    }

    #[test]
    fn empty_results_emit_nothing_but_keep_the_timestamp_slot() {
        let mut q: ElementQueue<u32, u32> = ElementQueue::new(OutputMode::Ordered, 2);
        let a = q.try_put_record(rec(7)).unwrap();
        q.complete(a, Vec::new());
        assert_eq!(
            q.pop_completed(),
            Some(QueueOutput::Results {
                values: vec![],
                timestamp: Some(7)
            })
        );
    }
}
