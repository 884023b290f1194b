//! The bounded channel's engine: a `Mutex<VecDeque<T>>` the senders push into, a buffer of the
//! receiver's own, two condition variables for the blocking calls, and registered wakers for
//! the polling calls. The notice protocol is written out in the [channel module](super) docs;
//! the connection states are on [`bounded`].
//!
//! Every state change a waiter can wait for (a push, a disconnection) happens under the one lock
//! and takes whatever waker is stored at that moment; wakers are woken after the lock is
//! released. Condition variables are notified only when the waiter counts say someone waits,
//! and wakers only when one was registered, so a send is one lock and nothing else.
//!
//! The receiver moves every queued element into its buffer under one lock when the buffer is empty,
//! and takes the next ones without that lock: with a lock per element on both sides, the two
//! threads would contend for it and its cache line would move for every element (see PERF-NOTES.md,
//! "Channels between tasks"). What a take frees is told without the lock: the receiver counts each
//! take in a word of its own (`taken`, which senders read: the channel holds `pushed - taken`), and
//! the same word has a bit, `WANTED`, that a sender that found the channel full raises before it
//! waits or stores a waker. Both are read-modify-writes of that one word, so whichever comes second
//! sees the first: the take sees the bit and locks to tell the sender, or the sender sees the take
//! and does not wait. A sender is told one freed slot at a time; a take locks only while a sender
//! wants space.
//!
//! # The priority lane
//!
//! [`Sender::send_priority`] puts an element (an unaligned checkpoint barrier) beside the
//! queue, outside the capacity, with the count of pushes made before it: its *position*. The
//! elements pushed before it are the ones it overtakes. The receiver never hands out an
//! element pushed after a pending priority element before that element itself: while one is
//! pending, a refill moves only the elements pushed before it (the fence), and once those are
//! taken, [`Receiver::try_recv`] returns the priority element, in order. A reader that wants it
//! early takes it with [`Receiver::take_priority`], which shows it the elements it overtook
//! (to store them as channel state) and leaves them queued. Every priority send rings the
//! receiver's [`PriorityBell`] and wakes its waker, so a task that is not reading its input (its
//! output is full) still learns of it.

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::backoff::Backoff;
use crossbeam::utils::CachePadded;

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Arc, Condvar, Mutex, MutexGuard, unlocked};

/// Creates a bounded channel holding at most `capacity` elements.
///
/// Senders are cloneable (many producers); the receiver is not (one consumer). Sends block (or
/// fail with `Full`) while `capacity` elements are queued: that is backpressure. Both halves
/// offer availability notices; see the [channel module](super) for the protocol.
///
/// # Connection states
///
/// | state | `send` / `try_send` | `recv` / `try_recv` | moves to |
/// |---|---|---|---|
/// | connected | deliver, or wait / `Full` | take, or wait / `Empty` | senders gone, receiver gone |
/// | senders gone (last `Sender` dropped) | - | take what is left, then `Disconnected` | - |
/// | receiver gone (`Receiver` dropped) | `Disconnected`, payload handed back | - | - |
///
/// Dropping the receiver drops the elements still queued. Disconnection wakes every blocked
/// call and every registered waker on the other side.
///
/// # Errors
///
/// [`ChannelError::ZeroCapacity`] if `capacity` is 0.
///
/// # Examples
///
/// A consumer that polls, registers interest, polls again, then waits for the notice:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::task::{Wake, Waker};
/// use streamtask_runtime::channel::{TryRecvError, bounded};
///
/// struct Flag(AtomicBool);
/// impl Wake for Flag {
///     fn wake(self: Arc<Self>) {
///         self.0.store(true, Ordering::Release);
///     }
/// }
///
/// let (tx, rx) = bounded::<&str>(8).unwrap();
/// let flag = Arc::new(Flag(AtomicBool::new(false)));
/// let waker = Waker::from(Arc::clone(&flag));
///
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty)); // 1. try
/// rx.register_data_waker(&waker); //                          2. register interest
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty)); // 3. try again, then suspend
/// assert!(!flag.0.load(Ordering::Acquire));
///
/// tx.send("data").unwrap(); // the producer's send is the notice
/// assert!(flag.0.load(Ordering::Acquire));
/// assert_eq!(rx.try_recv(), Ok("data"));
/// ```
pub fn bounded<T>(capacity: usize) -> Result<(Sender<T>, Receiver<T>), ChannelError> {
    if capacity == 0 {
        return Err(ChannelError::ZeroCapacity);
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::with_capacity(capacity),
            senders: 1,
            receiver_alive: true,
            receiver_waiting: false,
            senders_waiting: 0,
            data_waker: None,
            space_wakers: Vec::new(),
            priority: VecDeque::new(),
            bell: None,
        }),
        data_ready: Condvar::new(),
        space_ready: Condvar::new(),
        capacity,
        pushed: AtomicUsize::new(0),
        taken: CachePadded::new(AtomicUsize::new(0)),
    });
    Ok((
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver {
            shared,
            buffer: Mutex::new(VecDeque::new()),
        },
    ))
}

/// A channel could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The capacity was 0.
    #[error(
        "a channel needs a capacity of at least 1; pass a capacity >= 1 (a zero-capacity \
         rendezvous channel is not offered)"
    )]
    ZeroCapacity,
}

/// What sender and receiver share.
struct Shared<T> {
    state: Mutex<State<T>>,
    /// The receiver blocks here in `recv` until data arrives or the senders are gone.
    data_ready: Condvar,
    /// Senders block here in `send` until space frees or the receiver is gone.
    space_ready: Condvar,
    capacity: usize,
    /// Elements pushed, ever (wrapping): written under the lock only (so a plain store), read
    /// without it by [`Sender::is_full`].
    pushed: AtomicUsize,
    /// Elements the receiver has taken, ever (wrapping, below [`WANTED`]), and the
    /// [`WANTED`] bit. The count is raised by the receiver only; the bit is raised and cleared
    /// under the lock only. The channel holds `pushed - taken`. On a line of its own: the
    /// receiver writes it per element, senders write the lock's line per element.
    taken: CachePadded<AtomicUsize>,
}

/// The bit of `Shared::taken` that says a sender waits on `space_ready`, left a space waker,
/// or is about to: the receiver's next take locks and tells it. In the same word as the count
/// of takes, so a take and a sender's "I want space" are read-modify-writes of one word, which
/// the word's modification order puts one before the other: the later one sees the earlier.
const WANTED: usize = 1 << (usize::BITS - 1);
/// The count of takes, or of pushes: everything below [`WANTED`].
const COUNT: usize = WANTED - 1;

/// Everything behind the lock.
struct State<T> {
    /// Elements sent and not yet moved to the receiver's own buffer, oldest first.
    queue: VecDeque<T>,
    /// Live `Sender`s; 0 means the senders are gone.
    senders: usize,
    /// Whether the `Receiver` is alive.
    receiver_alive: bool,
    /// Whether the receiver waits on `data_ready` (so a send knows to notify).
    receiver_waiting: bool,
    /// How many senders wait on `space_ready`.
    senders_waiting: usize,
    /// The consumer's notice: woken by the next send or the senders' disconnection.
    data_waker: Option<Waker>,
    /// Producers' notices: woken by the next receive or the receiver's drop.
    space_wakers: Vec<Waker>,
    /// Elements sent ahead of the queue, oldest first, each with its position: the count of
    /// pushes made before it (see the module docs).
    priority: VecDeque<(T, usize)>,
    /// Rung by every priority send; shared by the channels of one reader.
    bell: Option<Arc<PriorityBell>>,
}

/// Tells a reader of several channels that one of them received a priority element
/// ([`Sender::send_priority`]): a flag it can test in one load between records, and a waker
/// for a reader that is not reading (see the [channel module](super), "Unaligned
/// checkpoints").
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{PriorityBell, bounded};
///
/// let (tx, mut rx) = bounded::<u32>(4).unwrap();
/// let bell = PriorityBell::new();
/// rx.set_priority_bell(bell.clone());
/// tx.send(1).unwrap();
/// tx.send(2).unwrap();
/// tx.send_priority(99).unwrap();
/// tx.send(3).unwrap();
/// assert!(bell.take());
///
/// // Taken early, the priority element shows what it overtook, which stays queued.
/// let mut overtaken = Vec::new();
/// assert_eq!(rx.take_priority(|_| true, |e| overtaken.push(*e)), Some(99));
/// assert_eq!(overtaken, [1, 2]);
/// assert_eq!(rx.try_recv(), Ok(1));
/// assert_eq!(rx.try_recv(), Ok(2));
/// assert_eq!(rx.try_recv(), Ok(3));
///
/// // Not taken early, it comes in order: after 4, before 5.
/// tx.send(4).unwrap();
/// tx.send_priority(100).unwrap();
/// tx.send(5).unwrap();
/// assert_eq!(rx.try_recv(), Ok(4));
/// assert_eq!(rx.try_recv(), Ok(100));
/// assert_eq!(rx.try_recv(), Ok(5));
/// ```
pub struct PriorityBell {
    rung: CachePadded<AtomicBool>,
    waker: Mutex<Option<Waker>>,
}

impl PriorityBell {
    /// A bell not rung, with no waker.
    pub fn new() -> Arc<Self> {
        Arc::new(PriorityBell {
            rung: CachePadded::new(AtomicBool::new(false)),
            waker: Mutex::new(None),
        })
    }

    /// Whether a priority element arrived since the last [`take`](Self::take); one load.
    #[inline]
    pub fn is_rung(&self) -> bool {
        self.rung.load(Ordering::Acquire)
    }

    /// Whether a priority element arrived since the last call; clears the flag. Take it
    /// *before* looking at the channels: an element sent after the look rings again.
    #[inline]
    pub fn take(&self) -> bool {
        self.is_rung() && self.rung.swap(false, Ordering::AcqRel)
    }

    /// Wakes `waker` on every ring from now on (it is kept, not taken); wakes it at once if
    /// the bell is rung.
    pub fn set_waker(&self, waker: Waker) {
        *self.waker.lock() = Some(waker);
        if self.is_rung()
            && let Some(waker) = self.waker.lock().clone()
        {
            waker.wake();
        }
    }

    fn ring(&self) {
        self.rung.store(true, Ordering::Release);
        let waker = self.waker.lock().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl fmt::Debug for PriorityBell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityBell")
            .field("rung", &self.is_rung())
            .finish_non_exhaustive()
    }
}

impl<T> Shared<T> {
    /// What the channel holds (queued, and in the receiver's buffer). Exact under the lock;
    /// without it (the hint) at least what it holds: the count of takes is read first, so it
    /// can never exceed the pushes read after it.
    #[inline]
    fn held(&self) -> usize {
        let taken = self.taken.load(Ordering::Acquire);
        Self::held_with(self.pushed.load(Ordering::Acquire), taken)
    }

    #[inline]
    fn held_with(pushed: usize, taken: usize) -> usize {
        pushed.wrapping_sub(taken) & COUNT
    }

    #[inline]
    fn has_room(&self) -> bool {
        self.held() < self.capacity
    }

    /// Under the lock, before a sender waits or stores a waker: whether the channel is still
    /// full once the sender said it wants space. Raising [`WANTED`] reads the count of takes in
    /// the same step; a take raises the count and reads the bit in one step too. Whichever
    /// comes second sees the first: the receiver sees the bit and locks to tell this sender, or
    /// this sender sees the take and does not wait.
    #[inline]
    fn still_full_once_wanted(&self) -> bool {
        // AcqRel: raising the bit and reading the count of takes are one read-modify-write, which
        // the word's modification order puts before or after the receiver's `fetch_add`.
        let taken = self.taken.fetch_or(WANTED, Ordering::AcqRel);
        // Relaxed: the caller holds the lock, and only lock holders write `pushed`.
        Self::held_with(self.pushed.load(Ordering::Relaxed), taken) >= self.capacity
    }

    /// Pushes `value` (the caller checked there is room) and notifies the consumer.
    #[inline]
    fn push(&self, mut state: MutexGuard<'_, State<T>>, value: T) {
        // Under the lock: a receiver decides to wait under it too, so it either finds this element
        // or already waits when `receiver_waiting` is read below.
        state.queue.push_back(value);
        // Only lock holders write `pushed`, so a load and a store make the increment; Release pairs
        // with the lock-free Acquire in `held` (`Sender::is_full`).
        let pushed = self.pushed.load(Ordering::Relaxed).wrapping_add(1) & COUNT;
        self.pushed.store(pushed, Ordering::Release);
        // Read under the lock the receiver set it under: a waiting receiver is always notified.
        let notify = state.receiver_waiting;
        // `take`: a notice fires once; the consumer registers again before it next suspends.
        let waker = state.data_waker.take();
        drop(state);
        // Notifying after unlocking is safe: the waiter re-checks the queue under the lock.
        if notify {
            self.data_ready.notify_one();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The receiver took an element out of its buffer: counts it, and if a sender wants
    /// space, locks to tell it (see [`still_full_once_wanted`]).
    ///
    /// [`still_full_once_wanted`]: Self::still_full_once_wanted
    #[inline]
    fn count_taken(&self) {
        // AcqRel: counting the take and testing `WANTED` are one step, so either this take sees a
        // sender's raise or that sender sees this take (`still_full_once_wanted`).
        // The count wraps below the bit: a carry into it would take 2^63 takes.
        if self.taken.fetch_add(1, Ordering::AcqRel) & WANTED != 0 {
            self.space_freed();
        }
    }

    #[cold]
    fn space_freed(&self) {
        // A sender that raised `WANTED` holds the lock until it waits on `space_ready`: once this
        // has the lock, that sender waits and `senders_waiting` counts it.
        let mut state = self.state.lock();
        let notify = state.senders_waiting > 0;
        let wakers = std::mem::take(&mut state.space_wakers);
        // Still wanted while a sender waits: it is told one slot at a time, as slots free.
        if !notify {
            self.taken.fetch_and(!WANTED, Ordering::AcqRel);
        }
        drop(state);
        // One slot freed: one blocked sender can use it. A sender woken in vain (a `try_send`
        // took the slot first) waits again and the next receive notifies again.
        if notify {
            self.space_ready.notify_one();
        }
        // Every registered producer is told; the ones that lose the race find `Full` and
        // register again.
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The sending half; cloneable.
///
/// Dropping the last sender disconnects the channel: the receiver takes what is left, then gets
/// `Disconnected`.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Sends `value` if there is room, without blocking.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the channel is full, [`TrySendError::Disconnected`] when the
    /// receiver is gone; both hand `value` back.
    #[inline]
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let state = self.shared.state.lock();
        if !state.receiver_alive {
            return Err(TrySendError::Disconnected(value));
        }
        // A stale count of takes only shows less room, never more: `Full` may come early, never
        // wrongly.
        if !self.shared.has_room() {
            return Err(TrySendError::Full(value));
        }
        self.shared.push(state, value);
        Ok(())
    }

    /// Sends `value` ahead of the queued elements, outside the capacity: never blocks. The
    /// receiver gets it in order unless it takes it early with [`Receiver::take_priority`];
    /// see the [channel module](super). Rings the receiver's [`PriorityBell`] and wakes its data
    /// waker.
    ///
    /// # Errors
    ///
    /// [`SendError`] with `value` when the receiver is gone.
    pub fn send_priority(&self, value: T) -> Result<(), SendError<T>> {
        let mut state = self.shared.state.lock();
        if !state.receiver_alive {
            return Err(SendError(value));
        }
        // Only lock holders write `pushed`: the count of pushes before this element.
        let position = self.shared.pushed.load(Ordering::Relaxed);
        state.priority.push_back((value, position));
        let bell = state.bell.clone();
        let notify = state.receiver_waiting;
        let waker = state.data_waker.take();
        drop(state);
        if notify {
            self.shared.data_ready.notify_one();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
        if let Some(bell) = bell {
            bell.ring();
        }
        Ok(())
    }

    /// Sends `value`, blocking while the channel is full (backpressure).
    ///
    /// # Errors
    ///
    /// [`SendError`] with `value` when the receiver is gone (also when it drops while this call
    /// waits).
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut backoff = Backoff::new();
        let mut state = self.shared.state.lock();
        // The lost-wakeup protocol: try, back off, register interest and try again (one step),
        // then park.
        loop {
            if !state.receiver_alive {
                return Err(SendError(value));
            }
            // 1. Try: with room, push and notify (a stale count of takes only shows less room).
            if self.shared.has_room() {
                self.shared.push(state, value);
                return Ok(());
            }
            if !backoff.is_exhausted() {
                // Back off without the lock, then check again: the state may have changed
                // meanwhile, and nobody notifies a thread that does not yet wait.
                unlocked(&mut state, false, || backoff.snooze());
                continue;
            }
            // 2. Register interest (raise `WANTED`) and try again, in one read-modify-write: a take
            // before it is seen here (loop and push), a take after it sees the bit and locks to
            // notify.
            if !self.shared.still_full_once_wanted() {
                continue;
            }
            // 3. Park, counted under the lock `space_freed` takes before it reads the count; the
            // wait releases the lock atomically, so the notice cannot fall in between.
            state.senders_waiting += 1;
            self.shared.space_ready.wait(&mut state);
            state.senders_waiting -= 1;
        }
    }

    /// Sends `value`, blocking at most `timeout` while the channel is full.
    ///
    /// Under `cfg(loom)` the wait is untimed (loom has no time).
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Timeout`] when no space freed in time,
    /// [`SendTimeoutError::Disconnected`] when the receiver is gone; both hand `value` back.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        let deadline = Instant::now().checked_add(timeout);
        let mut backoff = Backoff::new();
        let mut state = self.shared.state.lock();
        // The steps of `send` (try, back off, register interest and try again, park), the park
        // bounded by the deadline.
        loop {
            if !state.receiver_alive {
                return Err(SendTimeoutError::Disconnected(value));
            }
            if self.shared.has_room() {
                self.shared.push(state, value);
                return Ok(());
            }
            let Some(remaining) = remaining(deadline) else {
                return Err(SendTimeoutError::Timeout(value));
            };
            if !backoff.is_exhausted() {
                unlocked(&mut state, false, || backoff.snooze());
                continue;
            }
            if !self.shared.still_full_once_wanted() {
                continue;
            }
            state.senders_waiting += 1;
            self.shared.space_ready.wait_for(&mut state, remaining);
            state.senders_waiting -= 1;
        }
    }

    /// Asks to be woken through `waker` when space frees or the receiver drops.
    ///
    /// Call it after [`try_send`](Self::try_send) failed with `Full`, then try again before
    /// suspending (see the [channel module](super)). If the channel already has space or the
    /// receiver is gone, `waker` is woken at once and not stored. A stored waker fires once;
    /// registering a waker that [`will_wake`](Waker::will_wake) one already stored keeps one
    /// copy.
    pub fn register_space_waker(&self, waker: &Waker) {
        let mut state = self.shared.state.lock();
        // Register interest and try again in one step: if space freed meanwhile (or the receiver is
        // gone) wake at once; else store the waker under the lock `space_freed` takes, so the take
        // that sees `WANTED` finds it.
        if !state.receiver_alive || !self.shared.still_full_once_wanted() {
            drop(state);
            waker.wake_by_ref();
            return;
        }
        if !state.space_wakers.iter().any(|w| w.will_wake(waker)) {
            state.space_wakers.push(waker.clone());
        }
    }

    /// Whether a [`try_send`](Self::try_send) would fail with `Full` right now (`false` once the
    /// receiver is gone: a send then fails without waiting).
    ///
    /// Two atomic loads, no lock: cheap enough to ask between records (a hint: whoever acts on
    /// it re-checks under the lock).
    #[inline]
    pub fn is_full(&self) -> bool {
        !self.shared.has_room()
    }

    /// Whether the receiver is gone.
    pub fn is_disconnected(&self) -> bool {
        !self.shared.state.lock().receiver_alive
    }

    /// Elements the channel holds now (sent and not yet received).
    pub fn len(&self) -> usize {
        let _state = self.shared.state.lock();
        self.shared.held()
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The channel's capacity.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        Sender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.senders -= 1;
        if state.senders > 0 {
            return;
        }
        // The last sender: the consumer waiting for data must learn that none will come.
        let notify = state.receiver_waiting;
        let waker = state.data_waker.take();
        drop(state);
        if notify {
            self.shared.data_ready.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
}

/// The receiving half; there is exactly one.
///
/// Dropping it disconnects the channel: sends fail and hand their payload back, and the elements
/// still queued are dropped.
///
/// It keeps a buffer of its own: when it finds that buffer empty it moves every queued element
/// into it under one lock of the channel, and takes the next ones from it without the lock the
/// senders take (a lock per element on both sides would make the lock's cache line bounce
/// between the two threads for every element, and they would contend for it). The channel
/// holds at most `capacity` elements, counted over both (a shared count of the elements taken).
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The oldest elements, moved out of the queue; only this receiver locks it.
    buffer: Mutex<VecDeque<T>>,
}

impl<T> Receiver<T> {
    /// The next element of the buffer, counted as taken.
    #[inline]
    fn take_from(shared: &Shared<T>, buffer: &mut VecDeque<T>) -> Option<T> {
        let value = buffer.pop_front()?;
        shared.count_taken();
        Some(value)
    }

    /// Moves what is queued into the (empty) buffer, up to a pending priority element's
    /// fence; whether anything was.
    #[inline]
    fn refill(shared: &Shared<T>, state: &mut State<T>, buffer: &mut VecDeque<T>) -> bool {
        debug_assert!(buffer.is_empty());
        if state.queue.is_empty() {
            return false;
        }
        if let Some(&(_, position)) = state.priority.front() {
            return Self::refill_fenced(shared, state, buffer, position);
        }
        // Swap, not move: the two buffers take turns, so a steady stream allocates nothing.
        std::mem::swap(&mut state.queue, buffer);
        true
    }

    /// Moves only the queued elements pushed before `position`.
    #[cold]
    fn refill_fenced(
        shared: &Shared<T>,
        state: &mut State<T>,
        buffer: &mut VecDeque<T>,
        position: usize,
    ) -> bool {
        let pushed = shared.pushed.load(Ordering::Relaxed);
        let first = pushed.wrapping_sub(state.queue.len()) & COUNT;
        // Elements before the fence; "negative" (all of them moved already) wraps to a count
        // beyond the queue's length.
        let before = position.wrapping_sub(first) & COUNT;
        if before == 0 || before > state.queue.len() {
            return false;
        }
        buffer.extend(state.queue.drain(..before));
        true
    }

    /// Under the lock with the buffer empty: the next element, from the queue (up to the
    /// fence; taken after unlocking) or the priority element whose turn it is; the lock back
    /// when there is none.
    #[inline]
    fn next_locked<'a>(
        shared: &Shared<T>,
        mut state: MutexGuard<'a, State<T>>,
        buffer: &mut VecDeque<T>,
    ) -> Result<T, MutexGuard<'a, State<T>>> {
        if Self::refill(shared, &mut state, buffer) {
            drop(state);
            return Ok(Self::take_from(shared, buffer).expect("refilled"));
        }
        match state.priority.pop_front() {
            // Everything pushed before it was taken: its turn, in order.
            Some((value, _)) => Ok(value),
            None => Err(state),
        }
    }

    /// Sets the bell every priority send rings from now on; rings it at once if a priority
    /// element is pending.
    pub fn set_priority_bell(&self, bell: Arc<PriorityBell>) {
        let mut state = self.shared.state.lock();
        let pending = !state.priority.is_empty();
        state.bell = Some(Arc::clone(&bell));
        drop(state);
        if pending {
            bell.ring();
        }
    }

    /// Whether a priority element is pending.
    pub fn has_priority(&self) -> bool {
        !self.shared.state.lock().priority.is_empty()
    }

    /// `look` at the oldest pending priority element, if any.
    pub fn peek_priority<R>(&self, look: impl FnOnce(&T) -> R) -> Option<R> {
        self.shared
            .state
            .lock()
            .priority
            .front()
            .map(|(value, _)| look(value))
    }

    /// Takes the oldest pending priority element early, ahead of the elements sent before it,
    /// if `accept` accepts it: first `overtaken` sees each element it overtakes (sent before
    /// it and not yet taken, oldest first), which stay queued. With several pending, only the
    /// oldest is looked at. `None` when none is pending or `accept` declined.
    ///
    /// Runs under the channel's lock: `overtaken` should be quick (encoding a few elements).
    pub fn take_priority(
        &mut self,
        accept: impl FnOnce(&T) -> bool,
        mut overtaken: impl FnMut(&T),
    ) -> Option<T> {
        let buffer = self.buffer.get_mut();
        let mut state = self.shared.state.lock();
        let (value, position) = state.priority.front()?;
        if !accept(value) {
            return None;
        }
        let position = *position;
        // The receiver alone raises the count of takes: exact here.
        let taken = self.shared.taken.load(Ordering::Relaxed) & COUNT;
        let ahead = position.wrapping_sub(taken) & COUNT;
        let ahead = if ahead > buffer.len() + state.queue.len() {
            0
        } else {
            ahead
        };
        buffer
            .iter()
            .chain(state.queue.iter())
            .take(ahead)
            .for_each(&mut overtaken);
        state.priority.pop_front().map(|(value, _)| value)
    }

    /// Takes the next element if there is one, without blocking.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when nothing is queued, [`TryRecvError::Disconnected`] when
    /// nothing is queued and every sender is gone.
    #[inline]
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        Self::try_recv_from(&self.shared, &mut self.buffer.lock())
    }

    /// [`try_recv`](Self::try_recv) through the exclusive borrow: the receiver's own buffer is
    /// reached without its lock, so a take from the buffer costs one atomic add (the count of
    /// takes the senders read) and nothing else. Input gates own their receivers and take this
    /// way, once per record.
    ///
    /// # Errors
    ///
    /// As [`try_recv`](Self::try_recv).
    #[inline]
    pub fn try_recv_mut(&mut self) -> Result<T, TryRecvError> {
        Self::try_recv_from(&self.shared, self.buffer.get_mut())
    }

    #[inline]
    fn try_recv_from(shared: &Shared<T>, buffer: &mut VecDeque<T>) -> Result<T, TryRecvError> {
        // The receiver's own buffer first: only the receiver touches it, so no channel lock.
        if let Some(value) = Self::take_from(shared, buffer) {
            return Ok(value);
        }
        // Empty: move everything queued under one lock, and take after unlocking.
        let state = match Self::next_locked(shared, shared.state.lock(), buffer) {
            Ok(value) => return Ok(value),
            Err(state) => state,
        };
        // Disconnected only once nothing is queued: what the senders sent is delivered first.
        if state.senders == 0 {
            Err(TryRecvError::Disconnected)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    /// Takes the next element, blocking while the channel is empty.
    ///
    /// # Errors
    ///
    /// [`RecvError`] when the channel is empty and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut buffer = self.buffer.lock();
        // 1. Try the receiver's own buffer, without the channel's lock.
        if let Some(value) = Self::take_from(&self.shared, &mut buffer) {
            return Ok(value);
        }
        let mut backoff = Backoff::new();
        let mut state = self.shared.state.lock();
        loop {
            // 2. Try again under the lock every push takes: move everything queued.
            state = match Self::next_locked(&self.shared, state, &mut buffer) {
                Ok(value) => return Ok(value),
                Err(state) => state,
            };
            // Empty, and no sender left: nothing will come.
            if state.senders == 0 {
                return Err(RecvError);
            }
            if !backoff.is_exhausted() {
                // Back off without the lock, then check again: the state may have changed
                // meanwhile, and nobody notifies a thread that does not yet wait.
                unlocked(&mut state, false, || backoff.snooze());
                continue;
            }
            // 3. Register interest and park in the same lock hold as the try above: a push after
            // that try sees `receiver_waiting` and notifies; the wait releases the lock atomically.
            state.receiver_waiting = true;
            self.shared.data_ready.wait(&mut state);
            // Woken, or spuriously: loop and try again.
            state.receiver_waiting = false;
        }
    }

    /// Takes the next element, blocking at most `timeout` while the channel is empty.
    ///
    /// Under `cfg(loom)` the wait is untimed (loom has no time).
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] when nothing arrived in time,
    /// [`RecvTimeoutError::Disconnected`] when the channel is empty and every sender is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut buffer = self.buffer.lock();
        if let Some(value) = Self::take_from(&self.shared, &mut buffer) {
            return Ok(value);
        }
        let mut backoff = Backoff::new();
        let mut state = self.shared.state.lock();
        // The steps of `recv` (try under the lock, back off, register interest, park), the park
        // bounded by the deadline.
        loop {
            state = match Self::next_locked(&self.shared, state, &mut buffer) {
                Ok(value) => return Ok(value),
                Err(state) => state,
            };
            if state.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            let Some(remaining) = remaining(deadline) else {
                return Err(RecvTimeoutError::Timeout);
            };
            if !backoff.is_exhausted() {
                unlocked(&mut state, false, || backoff.snooze());
                continue;
            }
            state.receiver_waiting = true;
            self.shared.data_ready.wait_for(&mut state, remaining);
            state.receiver_waiting = false;
        }
    }

    /// Asks to be woken through `waker` when data arrives or every sender is gone.
    ///
    /// Call it after [`try_recv`](Self::try_recv) found the channel empty, then try again before
    /// suspending (see the [channel module](super)). If data is already queued or the senders are
    /// gone, `waker` is woken at once and not stored. A stored waker fires once; a new
    /// registration replaces the previous one.
    pub fn register_data_waker(&self, waker: &Waker) {
        let buffered = !self.buffer.lock().is_empty();
        let mut state = self.shared.state.lock();
        // Try again: anything buffered or queued, or no sender left, wakes at once. Otherwise the
        // waker is stored under the lock every push takes, so the next push finds it.
        if buffered || !state.queue.is_empty() || !state.priority.is_empty() || state.senders == 0 {
            drop(state);
            waker.wake_by_ref();
            return;
        }
        match &mut state.data_waker {
            Some(stored) if stored.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    /// Whether every sender is gone (elements may still be queued).
    pub fn is_disconnected(&self) -> bool {
        self.shared.state.lock().senders == 0
    }

    /// Elements queued now (not yet received), priority elements included.
    pub fn len(&self) -> usize {
        let buffered = self.buffer.lock().len();
        let state = self.shared.state.lock();
        buffered + state.queue.len() + state.priority.len()
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The channel's capacity.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// A handle that releases the channel on this receiver's behalf (see [`Release`]).
    pub fn release_handle(&self) -> Release<T> {
        Release {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Releases a channel on its receiver's behalf, from any thread: senders fail from then on
/// (also one blocked on a full channel, which wakes), as if the receiver were dropped, and the
/// queued elements are dropped. What the receiver already moved into its own buffer stays
/// there. For cancellation: the receiver may belong to a thread stuck in user code that will
/// never drop it, and a sender blocked on its full channel must still end (Flink releases a
/// cancelled job's channels the same way). Releasing twice, or before or after the receiver
/// drops, is the same as once.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::bounded;
///
/// let (tx, rx) = bounded(1).unwrap();
/// tx.send(1).unwrap();
/// let release = rx.release_handle();
/// let blocked = std::thread::spawn(move || tx.send(2)); // full: waits for space
/// release.release();
/// assert_eq!(blocked.join().unwrap().unwrap_err().into_inner(), 2);
/// # drop(rx);
/// ```
pub struct Release<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Release<T> {
    /// Releases the channel (see the type's docs).
    pub fn release(&self) {
        let state = self.shared.state.lock();
        self.shared.disconnect_receiver(state);
    }
}

impl<T> fmt::Debug for Release<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Release").finish_non_exhaustive()
    }
}

impl<T> Shared<T> {
    /// The receiver is gone (dropped or released): sends fail from now on, nothing is held
    /// any more, and every waiting producer learns that its send will fail.
    fn disconnect_receiver(&self, mut state: MutexGuard<'_, State<T>>) {
        state.receiver_alive = false;
        // Nothing is held any more: `is_full` says false, and no take will come to tell anyone.
        let pushed = self.pushed.load(Ordering::Relaxed);
        self.taken.store(pushed, Ordering::Release);
        let queued = std::mem::take(&mut state.queue);
        let priority = std::mem::take(&mut state.priority);
        let wakers = std::mem::take(&mut state.space_wakers);
        let data_waker = state.data_waker.take();
        let notify = state.senders_waiting > 0;
        drop(state);
        if notify {
            self.space_ready.notify_all();
        }
        for waker in wakers {
            waker.wake();
        }
        // Outside the lock: dropping elements or a waker runs foreign code.
        drop(data_waker);
        drop(queued);
        drop(priority);
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let buffered = std::mem::take(&mut *self.buffer.lock());
        let state = self.shared.state.lock();
        self.shared.disconnect_receiver(state);
        drop(buffered);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
}

/// Time left until `deadline`; `None` once it passed. No deadline (overflow) waits a day at a
/// time.
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => Some(Duration::from_secs(86_400)),
        Some(deadline) => deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero()),
    }
}

/// [`Sender::try_send`] failed; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The channel is full.
    Full(T),
    /// The receiver is gone.
    Disconnected(T),
}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }

    /// Whether the channel was full.
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }

    /// Whether the receiver is gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, TrySendError::Disconnected(_))
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str(
                "the channel is full; wait for space with send, or register_space_waker and retry",
            ),
            TrySendError::Disconnected(_) => f.write_str(DISCONNECTED_SEND),
        }
    }
}

impl<T> std::error::Error for TrySendError<T> {}

const DISCONNECTED_SEND: &str =
    "the receiver is gone (the downstream task finished, failed or was cancelled); stop sending";

/// [`Sender::send`] failed because the receiver is gone; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SendError<T>(pub T);

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DISCONNECTED_SEND)
    }
}

impl<T> std::error::Error for SendError<T> {}

/// [`Sender::send_timeout`] failed; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SendTimeoutError<T> {
    /// No space freed in time.
    Timeout(T),
    /// The receiver is gone.
    Disconnected(T),
}

impl<T> SendTimeoutError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => v,
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str(
                "the channel stayed full for the whole timeout; retry, wait longer, or relieve \
                 the downstream task",
            ),
            SendTimeoutError::Disconnected(_) => f.write_str(DISCONNECTED_SEND),
        }
    }
}

impl<T> std::error::Error for SendTimeoutError<T> {}

/// [`Receiver::try_recv`] found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing is queued now.
    #[error("the channel is empty; wait with recv, or register_data_waker and retry")]
    Empty,
    /// Nothing is queued and every sender is gone.
    #[error(
        "the channel is empty and every sender is gone (the upstream task finished, failed or \
         was cancelled); stop receiving"
    )]
    Disconnected,
}

/// [`Receiver::recv`] failed: the channel is empty and every sender is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the channel is empty and every sender is gone (the upstream task finished, failed or was \
     cancelled); stop receiving"
)]
pub struct RecvError;

/// [`Receiver::recv_timeout`] found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvTimeoutError {
    /// Nothing arrived in time.
    #[error("nothing arrived within the timeout; retry or wait longer")]
    Timeout,
    /// Nothing is queued and every sender is gone.
    #[error(
        "the channel is empty and every sender is gone (the upstream task finished, failed or \
         was cancelled); stop receiving"
    )]
    Disconnected,
}
