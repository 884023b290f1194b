//! [`TaskMailbox`]: the priority mailbox of one task thread (Flink's `TaskMailboxImpl`).
//!
#![doc = include_str!("mailbox.md")]

use std::collections::VecDeque;
use std::fmt;

use crossbeam::utils::CachePadded;

use streamtask_core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use streamtask_core::sync::{Condvar, Mutex, MutexGuard, thread};

use crate::mail::{Mail, Priority};
use crate::trigger_slot::TriggerSlot;

/// The lifecycle state of a [`TaskMailbox`]; see its docs for the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MailboxState {
    /// Accepts mails; mails can be taken.
    Open = 0,
    /// Refuses new mails; what is left can still be taken.
    Quiesced = 1,
    /// Refuses everything; the mails left were handed to whoever closed it.
    Closed = 2,
}

impl MailboxState {
    /// Whether `put` is accepted (only in [`Open`](Self::Open)).
    #[inline]
    pub fn is_accepting_mails(self) -> bool {
        self == MailboxState::Open
    }

    #[inline]
    fn from_u8(value: u8) -> Self {
        match value {
            0 => MailboxState::Open,
            1 => MailboxState::Quiesced,
            2 => MailboxState::Closed,
            // Only `MailboxState as u8` is ever stored.
            other => panic!("impossible mailbox state byte {other}"),
        }
    }
}

impl fmt::Display for MailboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MailboxState::Open => "open",
            MailboxState::Quiesced => "quiesced",
            MailboxState::Closed => "closed",
        })
    }
}

/// An owner-only method was called from another thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("called off the mailbox thread; only the thread that owns the mailbox may do this")]
pub struct WrongThread;

/// A mail was refused because the mailbox is not [`Open`](MailboxState::Open); the mail is
/// handed back.
pub struct PutError<T> {
    state: MailboxState,
    mail: Mail<T>,
}

impl<T> PutError<T> {
    /// The state that refused the mail.
    pub fn state(&self) -> MailboxState {
        self.state
    }

    /// The mail that was not delivered.
    pub fn into_inner(self) -> Mail<T> {
        self.mail
    }
}

impl<T> fmt::Debug for PutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PutError")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for PutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the mailbox is {} and accepts no mail; put mails only while the task runs",
            self.state
        )
    }
}

impl<T> std::error::Error for PutError<T> {}

/// Taking a mail failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// Called from a thread other than the owner.
    #[error("take called off the mailbox thread; only the thread that owns the mailbox may take")]
    WrongThread,
    /// The mailbox is closed.
    #[error("the mailbox is closed; take mails only before closing it")]
    Closed,
    /// The mailbox is quiesced and holds no mail of the requested priority. No mail can arrive
    /// any more, so a blocking take would wait forever (Flink's would).
    #[error(
        "the mailbox is quiesced and holds no mail of this priority; none can arrive, so stop \
         taking (drain it instead)"
    )]
    Exhausted,
}

impl From<WrongThread> for TakeError {
    fn from(_: WrongThread) -> Self {
        TakeError::WrongThread
    }
}

/// Spin steps of a blocking take before it parks; step `i` pauses `2^i` spin hints (about 1 us
/// in total on current hardware).
#[cfg(not(loom))]
const SPIN_STEPS: u32 = 7;
/// Yields of a blocking take after its spin and before it parks (crossbeam's backoff does the
/// same): with more runnable threads than cores, a producer that was preempted mid-`put` gets
/// the core, and a take that finds its mail then costs neither side a futex call.
#[cfg(not(loom))]
const YIELD_STEPS: u32 = 4;

// Bits of `TaskMailbox::flags`.
/// The queue holds at least one mail. Changed only under the queue lock.
const NEW_MAIL: u8 = 1;
/// The owner's batch holds at least one mail. Changed only under the owner's lock.
const BATCH: u8 = 2;
/// The owner's copy of the queue's head holds at least one mail ([`Owned::head`]). Changed
/// only under the owner's lock.
const HEAD: u8 = 8;
/// The doorbell rang: work waits outside the queue (a task's checkpoint-trigger slot). Set by
/// any thread without a lock, cleared by the owner; it counts as mail for the one-load checks,
/// so the loop looks before its next record.
const DOORBELL: u8 = 4;
/// The queue's urgent mails ([`Queue::urgent`]) are not empty. Changed only under the queue
/// lock; kept apart from `NEW_MAIL` so that the owner's fast paths see an urgent mail in the
/// load they make anyway, and take a lock for it only when one waits.
const URGENT: u8 = 16;

/// Whether a mailbox holds mail: its flag word, without the mailbox's type parameter. Exact on
/// the owner thread (as [`TaskMailbox::has_mail`]); a hint elsewhere.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MailHint<'a>(&'a AtomicU8);

impl MailHint<'_> {
    /// One atomic load, as [`TaskMailbox::has_mail`], but `Relaxed`: a default action only
    /// returns when it sees the flag, and the loop reads the mail after its own `Acquire` load
    /// ([`TaskMailbox::has_mail_hint`]). Relaxed, the load orders nothing else, so a reader's
    /// loop keeps its state in registers across it (an `Acquire` load makes every later load
    /// read memory again).
    #[inline]
    pub(crate) fn is_set(self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }
}

/// The words a trigger call touches (fills the trigger slot, rings the doorbell, reads the
/// state and whether the owner waits) on cache lines of their own (128 bytes, as crossbeam's
/// `CachePadded`: x86 prefetches lines in pairs): producers' lock traffic on the queue's mutex
/// does not invalidate the line the owner polls, and a trigger call moves this one line of the
/// mailbox and nothing else (the slot's words and the flags together are under 64 bytes).
// `repr(C)`: the slot first, the three bytes right after it, all in the first 64 bytes.
#[repr(C, align(128))]
struct Hot {
    /// A source task's checkpoint-trigger slot (`trigger_slot.rs`); unused elsewhere (it sits
    /// in bytes the alignment pads anyway). The mailbox thread writes it and the flags in the
    /// same places (it takes the trigger as it answers the doorbell), so the two share a line.
    trigger: TriggerSlot,
    /// `NEW_MAIL`, `URGENT`, `BATCH`, `HEAD` and `DOORBELL`.
    flags: AtomicU8,
    /// A [`MailboxState`] as `u8`; changed only under the queue lock.
    state: AtomicU8,
    /// The owner is about to block or blocks for mail (`SeqCst`, see
    /// [`announce_wait`](TaskMailbox::announce_wait)).
    owner_waiting: AtomicBool,
}

// The slot and the three flag bytes fit in one 64-byte line (checked when compiling; loom's
// atomics are larger).
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<TriggerSlot>() + 3 <= 64);

/// The queue, under its lock, with what `put` needs to know of the hot line: a producer
/// holding the lock reads it from the line it just locked, not from the line the owner writes.
/// `NEW_MAIL` is set exactly while `mails` is not empty, `URGENT` exactly while `urgent` is not
/// empty (each changes only under this lock).
struct Queue<T> {
    mails: VecDeque<Mail<T>>,
    /// The urgent mails ([`Priority::URGENT`]), oldest first; never in `mails`.
    urgent: VecDeque<Mail<T>>,
    /// The state, as in `Hot::state` (both change only under this lock).
    state: MailboxState,
}

/// What the owner's lock guards: the batch, the urgent round and the queue's head.
struct Owned<T> {
    /// The batch ([`TaskMailbox::create_batch`]).
    batch: VecDeque<Mail<T>>,
    /// The urgent round: the urgent mails the owner moved out of the queue at once, oldest
    /// first, taken before anything else (see "Urgent mails" in [`TaskMailbox`]). Part of the
    /// batch for the flag word (`BATCH`).
    round: VecDeque<Mail<T>>,
    /// Whether the owner's last mail came from an urgent round: then the next round waits until
    /// a non-urgent mail was taken (the fairness rule).
    last_urgent: bool,
    /// The oldest queued mails, which a `take` moved out of the queue all at once (one lock of
    /// the queue for all of them, not one per mail); logically still queued, ahead of
    /// `Queue::mails`. An off-thread `put_first` goes to its front.
    head: VecDeque<Mail<T>>,
}

impl<T> Owned<T> {
    /// The flag bits that describe these containers.
    fn bits(&self) -> u8 {
        let mut bits = 0;
        if !self.batch.is_empty() || !self.round.is_empty() {
            bits |= BATCH;
        }
        if !self.head.is_empty() {
            bits |= HEAD;
        }
        bits
    }

    /// Moves the head behind the batch (the head's mails are newer than the batch's).
    fn head_into_batch(&mut self) {
        let Owned { batch, head, .. } = self;
        if batch.is_empty() {
            std::mem::swap(head, batch);
        } else {
            batch.append(head);
        }
    }

    /// Whether the batch (its urgent round included) holds a mail.
    fn holds_batch(&self) -> bool {
        !self.batch.is_empty() || !self.round.is_empty()
    }

    /// Starts an urgent round: every urgent mail queued moves behind the round's (older) mails,
    /// all at once under the queue lock the caller holds.
    fn start_round(&mut self, urgent: &mut VecDeque<Mail<T>>) {
        if self.round.is_empty() {
            std::mem::swap(&mut self.round, urgent);
        } else {
            self.round.append(urgent);
        }
    }

    /// The fairness rule for the batch being run: queued urgent mails start a round only while
    /// no round is running, the owner's last mail was not urgent, and the batch still holds a
    /// mail (urgent mails jump a batch, they do not prolong it).
    fn may_jump_batch(&self) -> bool {
        self.round.is_empty() && !self.last_urgent && !self.batch.is_empty()
    }

    /// The next mail of the batch: the urgent round's first, else the batch's.
    #[inline]
    fn pop_batch(&mut self) -> Option<Mail<T>> {
        if let Some(mail) = self.round.pop_front() {
            self.last_urgent = true;
            return Some(mail);
        }
        let mail = self.batch.pop_front();
        if mail.is_some() {
            self.last_urgent = false;
        }
        mail
    }

    /// The first mail of `priority` (every urgent mail is visible): the urgent round's first,
    /// then the batch's, then the head's.
    fn take_first(&mut self, priority: Priority) -> Option<Mail<T>> {
        if let Some(mail) = self.round.pop_front() {
            self.last_urgent = true;
            return Some(mail);
        }
        let mail =
            take_first(&mut self.batch, priority).or_else(|| take_first(&mut self.head, priority));
        if mail.is_some() {
            self.last_urgent = false;
        }
        mail
    }
}

/// A priority mailbox bound to one owner thread.
///
#[doc = include_str!("mailbox.md")]
///
/// # Examples
///
/// ```
/// use streamtask_mailbox::{Mail, MailboxState, Priority, TaskMailbox};
///
/// let mailbox = TaskMailbox::new(); // owned by this thread
/// std::thread::scope(|s| {
///     s.spawn(|| mailbox.put(Mail::new(Priority::MIN, "checkpoint")).unwrap());
/// });
/// mailbox.put(Mail::new(Priority::operator(1), "timer")).unwrap();
///
/// // Priority is visibility: a take at operator 0's priority skips the task-level mail.
/// assert_eq!(mailbox.take(Priority::operator(0)).unwrap().into_body(), "timer");
/// assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), "checkpoint");
///
/// mailbox.quiesce().unwrap();
/// let refused = mailbox.put(Mail::new(Priority::MAX, "late")).unwrap_err();
/// assert_eq!(refused.state(), MailboxState::Quiesced);
/// assert_eq!(refused.into_inner().into_body(), "late");
/// assert!(mailbox.close().unwrap().is_empty());
/// ```
pub struct TaskMailbox<T> {
    hot: Hot,
    owner: thread::Thread,
    /// The queue and its condition variable, which producers write, on cache lines of their own.
    queue: CachePadded<Mutex<Queue<T>>>,
    not_empty: Condvar,
    /// The owner's batch and its copy of the queue's head, on lines of their own: the
    /// producers' locking of the queue does not invalidate the line the owner locks for every
    /// mail it takes.
    owned: CachePadded<Mutex<Owned<T>>>,
    /// Whether a blocking take spins and yields before it parks (see
    /// [`with_spin_before_park`](Self::with_spin_before_park)); read by the owner only.
    spin_before_park: bool,
}

impl<T> TaskMailbox<T> {
    /// An open mailbox owned by the calling thread.
    pub fn new() -> Self {
        TaskMailbox::with_owner(thread::current())
    }

    /// An open mailbox owned by `owner` (typically `join_handle.thread().clone()` of a task
    /// thread that is about to receive it).
    pub fn with_owner(owner: thread::Thread) -> Self {
        TaskMailbox {
            hot: Hot {
                trigger: TriggerSlot::new(),
                flags: AtomicU8::new(0),
                state: AtomicU8::new(MailboxState::Open as u8),
                owner_waiting: AtomicBool::new(false),
            },
            owner,
            queue: CachePadded::new(Mutex::new(Queue {
                mails: VecDeque::new(),
                urgent: VecDeque::new(),
                state: MailboxState::Open,
            })),
            not_empty: Condvar::new(),
            owned: CachePadded::new(Mutex::new(Owned {
                batch: VecDeque::new(),
                round: VecDeque::new(),
                last_urgent: false,
                head: VecDeque::new(),
            })),
            spin_before_park: true,
        }
    }

    /// Whether a blocking take that finds nothing spins (about a microsecond) and yields a few
    /// times before it parks (the default, `true`), or parks at once (`false`).
    ///
    /// The spin saves both sides a futex round trip when mails come close together. Turn it
    /// off for a mailbox thread whose mails come rarely and whose task has another thread that
    /// runs flat out: the bridge's mailbox thread, woken for a checkpoint trigger that the
    /// legacy source's errand has usually run already, would spin and yield on a two-core
    /// machine for nothing, taking the core from the source or from the triggering thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask_mailbox::{Mail, Priority, TaskMailbox};
    ///
    /// let mailbox = TaskMailbox::new().with_spin_before_park(false);
    /// mailbox.put(Mail::new(Priority::MIN, "mail")).unwrap();
    /// assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), "mail");
    /// ```
    pub fn with_spin_before_park(mut self, spin: bool) -> Self {
        self.spin_before_park = spin;
        self
    }

    /// The checkpoint-trigger slot, on the same cache line as the flag word the doorbell rings.
    #[inline]
    pub(crate) fn trigger_slot(&self) -> &TriggerSlot {
        &self.hot.trigger
    }

    /// Whether the calling thread owns the mailbox.
    #[inline]
    pub fn is_owner_thread(&self) -> bool {
        thread::is_current(&self.owner)
    }

    /// The owner thread.
    pub fn owner(&self) -> &thread::Thread {
        &self.owner
    }

    fn check_owner(&self) -> Result<(), WrongThread> {
        if self.is_owner_thread() {
            Ok(())
        } else {
            Err(WrongThread)
        }
    }

    /// The current state; from any thread, without locking.
    #[inline]
    pub fn state(&self) -> MailboxState {
        // Acquire pairs with the Release store in `set_state` (made under the queue lock): a
        // thread that sees the new state also sees the queue as it was when it changed.
        MailboxState::from_u8(self.hot.state.load(Ordering::Acquire))
    }

    fn set_state(&self, queue: &mut Queue<T>, state: MailboxState) {
        queue.state = state;
        self.hot.state.store(state as u8, Ordering::Release);
    }

    /// Appends `mail` to the queue; from any thread. On the owner thread, while nothing is
    /// queued, it goes to the tail of the queue's head instead, without the queue's lock: the
    /// same place in the order (see "The batch and the fast path" in [`TaskMailbox`]).
    ///
    /// # Errors
    ///
    /// [`PutError`] with the mail when the mailbox is not [`Open`](MailboxState::Open).
    pub fn put(&self, mail: Mail<T>) -> Result<(), PutError<T>> {
        if self.is_owner_thread() {
            return self.put_from_owner(mail);
        }
        let mut queue = self.queue.lock();
        self.put_locked(&mut queue, mail, false)
    }

    /// The owner's `put` (a mail the task thread puts for itself: an async completion made
    /// inside the operator's call, a yield's wake): while the queue is empty, the mail goes to
    /// the tail of the head, which is logically the queue's front part, under the owner's lock
    /// only. No producer waits on that lock, nobody needs a notification (only the owner
    /// waits), and the next `create_batch` finds it without the queue's lock.
    ///
    /// The order is `put`'s: the head is older than the queue, so the mail may join it only
    /// while the queue is empty (`NEW_MAIL` clear, set exactly while the queue holds mail). A
    /// put on another thread that happened before this one raised `NEW_MAIL` first, or its
    /// mail already left the queue (for the head or the batch, ahead of this one); a put that
    /// races this one is concurrent, and this one goes first. The state is exact here: only
    /// the owner changes it.
    #[inline]
    fn put_from_owner(&self, mail: Mail<T>) -> Result<(), PutError<T>> {
        let state = self.state();
        if !state.is_accepting_mails() {
            return Err(PutError { state, mail });
        }
        // Acquire: pairs with the Release raise of a put that happened before this one. An
        // urgent mail goes to the queue's urgent mails, as from any thread.
        if self.hot.flags.load(Ordering::Acquire) & NEW_MAIL != 0 || mail.priority().is_urgent() {
            let mut queue = self.queue.lock();
            return self.put_locked(&mut queue, mail, false);
        }
        let mut owned = self.owned.lock();
        let was_empty = owned.head.is_empty();
        owned.head.push_back(mail);
        if was_empty {
            // Release, as every flag change: the mail is published by the owner's lock.
            self.hot.flags.fetch_or(HEAD, Ordering::Release);
        }
        Ok(())
    }

    /// Puts `mail` ahead of everything else; from any thread. On the owner thread it goes to the
    /// head of the batch (it runs next, before the rest of the batch, behind only an urgent
    /// round the owner already took out of the queue); from another thread, to
    /// the head of the queue (it runs first in the next batch). An urgent mail goes to the head
    /// of the urgent mails, from any thread (so the fairness rule applies to it as to every
    /// urgent mail).
    ///
    /// # Errors
    ///
    /// [`PutError`] with the mail when the mailbox is not [`Open`](MailboxState::Open).
    pub fn put_first(&self, mail: Mail<T>) -> Result<(), PutError<T>> {
        if self.is_owner_thread() && !mail.priority().is_urgent() {
            // Only the owner changes the state, so reading it without the queue lock is exact.
            let state = self.state();
            if !state.is_accepting_mails() {
                return Err(PutError { state, mail });
            }
            self.push_batch_front(mail);
            Ok(())
        } else {
            let mut queue = self.queue.lock();
            self.put_locked(&mut queue, mail, true)
        }
    }

    #[inline]
    fn put_locked(
        &self,
        queue: &mut Queue<T>,
        mail: Mail<T>,
        first: bool,
    ) -> Result<(), PutError<T>> {
        // The lock's copy of the state: exact, and on the line just locked.
        let state = queue.state;
        if !state.is_accepting_mails() {
            return Err(PutError { state, mail });
        }
        if mail.priority().is_urgent() {
            self.put_urgent(queue, mail, first);
        } else if first {
            self.put_first_queued(mail);
        } else {
            let was_empty = queue.mails.is_empty();
            queue.mails.push_back(mail);
            // NEW_MAIL is set exactly while the queue is not empty (see `Queue`): on a queue
            // that held mail, putting is a push and touches neither the flag word the owner
            // polls nor its line (with several producers, that line was the contended one).
            // Release: the owner's fast path that sees the bit then takes the queue lock, which
            // is what actually publishes the mail; the ordering keeps the hint no later than the
            // push.
            if was_empty {
                self.hot.flags.fetch_or(NEW_MAIL, Ordering::Release);
            }
        }
        // Notified under the lock: the owner cannot be between its check and its wait (it
        // checks the queue and the head under this lock).
        self.not_empty.notify_one();
        Ok(())
    }

    /// An urgent mail, under the queue lock: to the tail of the urgent mails (the head for a
    /// `put_first`). `URGENT` is set exactly while they are not empty; Release, as every flag
    /// change (the lock publishes the mail).
    #[cold]
    fn put_urgent(&self, queue: &mut Queue<T>, mail: Mail<T>, first: bool) {
        let was_empty = queue.urgent.is_empty();
        if first {
            queue.urgent.push_front(mail);
        } else {
            queue.urgent.push_back(mail);
        }
        if was_empty {
            self.hot.flags.fetch_or(URGENT, Ordering::Release);
        }
    }

    /// An off-thread `put_first`, under the queue lock: ahead of every queued mail, so at the
    /// front of the queue's head, which the owner may hold (lock order: the queue, then the
    /// owner's lock). Rare: control mails.
    #[cold]
    fn put_first_queued(&self, mail: Mail<T>) {
        let mut owned = self.owned.lock();
        let was_empty = owned.head.is_empty();
        owned.head.push_front(mail);
        if was_empty {
            self.hot.flags.fetch_or(HEAD, Ordering::Release);
        }
    }

    /// Owner only: puts `mail` at the head of the batch whatever the state. The processor uses
    /// it for its own control signals, which must reach the loop even while quiesced.
    pub(crate) fn push_batch_front(&self, mail: Mail<T>) {
        let mut owned = self.owned.lock();
        owned.batch.push_front(mail);
        self.hot.flags.fetch_or(BATCH, Ordering::Release);
    }

    /// Owner only: drops mails at the head of the batch while `discard` says so.
    pub(crate) fn discard_batch_head_while(&self, discard: impl Fn(&T) -> bool) {
        if self.hot.flags.load(Ordering::Acquire) & BATCH == 0 {
            return;
        }
        let mut owned = self.owned.lock();
        let before = owned.bits();
        while owned.batch.front().is_some_and(|m| discard(m.body())) {
            owned.batch.pop_front();
        }
        self.update_bits(before, owned.bits());
    }

    /// Whether a mail is waiting (in the batch or the queue), or the processor's doorbell rang
    /// (a checkpoint trigger waiting in its task's slot). One atomic load; owner only.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the owner thread.
    #[inline]
    pub fn has_mail(&self) -> Result<bool, WrongThread> {
        self.check_owner()?;
        Ok(self.has_mail_hint())
    }

    /// [`has_mail`](Self::has_mail) without the owner check: exactly one atomic load. Exact on
    /// the owner thread; a hint elsewhere.
    #[inline]
    pub(crate) fn has_mail_hint(&self) -> bool {
        // Acquire pairs with the Release `fetch_or` of `put`/`push_batch_front`; the mail itself
        // is read under the lock of its container.
        self.hot.flags.load(Ordering::Acquire) != 0
    }

    /// The flag word [`has_mail_hint`](Self::has_mail_hint) loads, for a default action that
    /// checks it between records (one load each) without a reference to the typed mailbox.
    #[inline]
    pub(crate) fn mail_hint(&self) -> MailHint<'_> {
        MailHint(&self.hot.flags)
    }

    /// Rings the doorbell; from any thread, no lock. `SeqCst`: a ringer that then finds the
    /// owner not waiting knows the owner will see the bell before it waits (see the
    /// processor's `ring`).
    #[inline]
    pub(crate) fn ring_doorbell(&self) {
        self.hot.flags.fetch_or(DOORBELL, Ordering::SeqCst);
    }

    /// Whether the doorbell rang (`SeqCst`, pairing with [`ring_doorbell`](Self::ring_doorbell)).
    #[inline]
    pub(crate) fn doorbell_rung(&self) -> bool {
        self.hot.flags.load(Ordering::SeqCst) & DOORBELL != 0
    }

    /// Owner: announces that it is about to block for mail. `SeqCst`, as the ring: a ringer
    /// then finds it waiting ([`owner_waiting`](Self::owner_waiting)) and wakes it, or the owner
    /// sees the bell ([`doorbell_rung`](Self::doorbell_rung)) when it looks after this.
    #[inline]
    pub(crate) fn announce_wait(&self) {
        self.hot.owner_waiting.store(true, Ordering::SeqCst);
    }

    /// Owner: no longer blocking. Relaxed: only the owner's own later announce matters.
    #[inline]
    pub(crate) fn end_wait(&self) {
        self.hot.owner_waiting.store(false, Ordering::Relaxed);
    }

    /// Whether the owner announced a wait (`SeqCst`, pairing with
    /// [`announce_wait`](Self::announce_wait)); from any thread.
    #[inline]
    pub(crate) fn owner_waiting(&self) -> bool {
        self.hot.owner_waiting.load(Ordering::SeqCst)
    }

    /// Owner: clears the doorbell; returns whether it had rung.
    #[inline]
    pub(crate) fn answer_doorbell(&self) -> bool {
        self.hot.flags.load(Ordering::Acquire) & DOORBELL != 0
            && self.hot.flags.fetch_and(!DOORBELL, Ordering::AcqRel) & DOORBELL != 0
    }

    /// Takes the first mail with priority `>= priority`, from the batch first, then the queue,
    /// without blocking; owner only.
    ///
    /// # Errors
    ///
    /// [`TakeError::WrongThread`] off the owner thread, [`TakeError::Closed`] once closed.
    pub fn try_take(&self, priority: Priority) -> Result<Option<Mail<T>>, TakeError> {
        self.check_owner()?;
        self.try_take_unchecked(priority)
    }

    pub(crate) fn try_take_unchecked(
        &self,
        priority: Priority,
    ) -> Result<Option<Mail<T>>, TakeError> {
        self.check_not_closed()?;
        // One load decides: without an urgent mail, the batch and the head first (no queue
        // lock); with one, everything under the queue lock (the fairness rule).
        let flags = self.hot.flags.load(Ordering::Acquire);
        if flags & URGENT == 0 {
            if let Some(mail) = self.take_owned(flags, priority) {
                return Ok(Some(mail));
            }
            if self.hot.flags.load(Ordering::Acquire) & (NEW_MAIL | URGENT) == 0 {
                return Ok(None);
            }
        }
        let mut queue = self.queue.lock();
        Ok(self.take_from_queue(&mut queue, priority))
    }

    /// Takes the first mail with priority `>= priority`, from the batch first, then the queue,
    /// blocking until one arrives; owner only.
    ///
    /// # Errors
    ///
    /// [`TakeError::WrongThread`] off the owner thread, [`TakeError::Closed`] once closed, and
    /// [`TakeError::Exhausted`] when the mailbox is quiesced and holds no such mail (where
    /// Flink's `take` would block forever).
    pub fn take(&self, priority: Priority) -> Result<Mail<T>, TakeError> {
        self.check_owner()?;
        self.take_unchecked(priority)
    }

    pub(crate) fn take_unchecked(&self, priority: Priority) -> Result<Mail<T>, TakeError> {
        self.check_not_closed()?;
        // As `try_take`: an urgent mail sends the take to the queue lock at once.
        let flags = self.hot.flags.load(Ordering::Acquire);
        if flags & URGENT == 0
            && let Some(mail) = self.take_owned(flags, priority)
        {
            return Ok(mail);
        }
        // Nothing queued: wait for a put on the flag word first (bounded), not on the queue's
        // lock, whose line the producers write. Relaxed: only a hint, the lock decides.
        if self.spin_before_park
            && self.hot.flags.load(Ordering::Relaxed) & (NEW_MAIL | URGENT) == 0
            && self.state() == MailboxState::Open
        {
            // Parking costs a futex round trip on both sides; a producer that is putting right
            // now is usually done within the spin.
            self.spin_for_mail();
        }
        self.take_queued(priority)
    }

    /// The blocking part of [`take`](Self::take): the queue, its urgent mails (and the head,
    /// which an off-thread `put_first` writes) under the queue lock, then wait on it. Every
    /// `put` and `put_first`, urgent or not, pushes and notifies under that same lock, so
    /// nothing slips in between the check and the wait. The batch cannot grow meanwhile: only
    /// the owner (this thread) adds to it.
    fn take_queued(&self, priority: Priority) -> Result<Mail<T>, TakeError> {
        let mut queue = self.queue.lock();
        loop {
            if let Some(mail) = self.take_from_queue(&mut queue, priority) {
                return Ok(mail);
            }
            match self.state() {
                MailboxState::Open => {}
                MailboxState::Quiesced => return Err(TakeError::Exhausted),
                MailboxState::Closed => return Err(TakeError::Closed),
            }
            self.not_empty.wait(&mut queue);
        }
    }

    /// Spins briefly (with growing pauses), then yields a few times, until a mail may be
    /// queued.
    #[cfg(not(loom))]
    fn spin_for_mail(&self) {
        let queued = || self.hot.flags.load(Ordering::Relaxed) & (NEW_MAIL | URGENT | HEAD) != 0;
        for step in 0..SPIN_STEPS {
            if queued() {
                return;
            }
            for _ in 0..(1u32 << step) {
                std::hint::spin_loop();
            }
        }
        for _ in 0..YIELD_STEPS {
            if queued() {
                return;
            }
            thread::yield_now();
        }
    }

    /// Under loom a spin is only a yield: loom explores the interleavings instead.
    #[cfg(loom)]
    fn spin_for_mail(&self) {
        thread::yield_now();
    }

    fn check_not_closed(&self) -> Result<(), TakeError> {
        if self.state() == MailboxState::Closed {
            Err(TakeError::Closed)
        } else {
            Ok(())
        }
    }

    /// The first mail of `priority` in the urgent round, the batch, then the queue's head;
    /// never looks at the queue. `flags` is the caller's load: no lock when all are empty.
    #[inline]
    fn take_owned(&self, flags: u8, priority: Priority) -> Option<Mail<T>> {
        if flags & (BATCH | HEAD) == 0 {
            return None;
        }
        let mut owned = self.owned.lock();
        let before = owned.bits();
        let mail = owned.take_first(priority);
        self.update_bits(before, owned.bits());
        mail
    }

    /// Under the queue lock: moves every queued mail to the tail of the head (one lock of the
    /// queue for all of them; the next takes find them without it), then takes the first mail
    /// of `priority`, urgent mails first within the fairness rule. The head is older than the
    /// queue, so the order is kept.
    fn take_from_queue(&self, queue: &mut Queue<T>, priority: Priority) -> Option<Mail<T>> {
        // Exact under the queue lock: an off-thread `put_first` raises HEAD under it too, and
        // the owner (this thread) makes every other change to the head. (Without an urgent
        // mail, the caller looked at the batch and the head already.)
        if queue.mails.is_empty()
            && queue.urgent.is_empty()
            && self.hot.flags.load(Ordering::Relaxed) & HEAD == 0
        {
            return None;
        }
        let mut owned = self.owned.lock();
        let before = owned.bits() | queued_bits(queue);
        if owned.head.is_empty() {
            // Swap the buffers instead of moving every mail (see `create_batch`).
            std::mem::swap(&mut queue.mails, &mut owned.head);
        } else {
            owned.head.append(&mut queue.mails);
        }
        // The fairness rule for takes: queued urgent mails start a round unless the owner's
        // last mail was urgent and a non-urgent mail visible at `priority` waits (that one goes
        // first); a round already running goes on first either way (`take_first`).
        let jump = !queue.urgent.is_empty() && owned.round.is_empty() && !owned.last_urgent;
        if jump {
            owned.start_round(&mut queue.urgent);
        }
        let mut mail = owned.take_first(priority);
        if mail.is_none() && !queue.urgent.is_empty() {
            // Nothing else is visible: the urgent mails wait for nobody.
            owned.start_round(&mut queue.urgent);
            mail = owned.take_first(priority);
        }
        // The queue is empty now: NEW_MAIL goes with it (URGENT too, if a round started).
        self.update_bits(before, owned.bits() | queued_bits(queue));
        mail
    }

    /// Moves the container bits of the flag word from `before` to `after`, in one
    /// read-modify-write (none if nothing changed). The caller holds the lock of every container
    /// whose bit differs, so it knows those bits exactly; the others (the doorbell) are kept.
    /// Release, as every flag change.
    #[inline]
    fn update_bits(&self, before: u8, after: u8) {
        let changed = before ^ after;
        if changed != 0 {
            self.hot.flags.fetch_xor(changed, Ordering::Release);
        }
    }

    /// Moves every queued mail to the tail of the owner's batch (behind what is left of the
    /// previous batch), the urgent mails waiting to its front (an urgent round); returns
    /// whether the batch holds anything. Without queued mail this is one atomic load and no
    /// lock. Owner only.
    ///
    /// Only the processor's main loop should create batches: a batch must not grow while it is
    /// being run (inside a yield, say), or the loop loses its bounded-work guarantee.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the owner thread.
    pub fn create_batch(&self) -> Result<bool, WrongThread> {
        self.check_owner()?;
        Ok(self.create_batch_unchecked())
    }

    pub(crate) fn create_batch_unchecked(&self) -> bool {
        let flags = self.hot.flags.load(Ordering::Acquire);
        if flags & (NEW_MAIL | URGENT | HEAD) == 0 {
            return flags & BATCH != 0;
        }
        if flags & (NEW_MAIL | URGENT) == 0 {
            return self.create_batch_from_head();
        }
        let mut queue = self.queue.lock();
        let mut owned = self.owned.lock();
        let before = owned.bits() | queued_bits(&queue);
        // The fairness rule: a new batch takes every queued mail, non-urgent ones included, so
        // urgent mails arriving back to back cannot keep a queued mail out of the batches.
        // The urgent mails waiting run first, as a round.
        owned.start_round(&mut queue.urgent);
        let Owned { batch, head, .. } = &mut *owned;
        // The head is older than the queue: it goes first. Where the batch ran out (the usual
        // case), swap the buffers instead of moving every mail: O(1) under the lock producers
        // wait for, and the buffers take turns, so a steady stream of mails allocates (and
        // faults in) nothing new.
        for older in [head, &mut queue.mails] {
            if batch.is_empty() {
                std::mem::swap(older, batch);
            } else {
                batch.append(older);
            }
        }
        // Both locks are held, so every container bit is known: one read-modify-write moves
        // them (the queue and the head are empty now; a `drain` on another thread may have
        // emptied everything meanwhile).
        self.update_bits(before, owned.bits());
        owned.holds_batch()
    }

    /// [`create_batch`](Self::create_batch) when only the head holds mail (the owner's own
    /// puts, see [`put_from_owner`](Self::put_from_owner)): the owner's lock alone. The queue
    /// was empty at the caller's load; a mail put there since is newer than the head and waits
    /// for the next batch, as one put just after the batch was made would. `NEW_MAIL` is not
    /// touched (it is the queue's, changed under the queue's lock).
    fn create_batch_from_head(&self) -> bool {
        let mut owned = self.owned.lock();
        let before = owned.bits();
        owned.head_into_batch();
        self.update_bits(before, owned.bits());
        owned.holds_batch()
    }

    /// [`create_batch`](Self::create_batch), then [`try_take_from_batch`](Self::try_take_from_batch):
    /// the batch's first mail. When only the head held mail (the owner's own puts), one lock of
    /// the owner's and one flag update do both, not two of each. Owner only.
    pub(crate) fn create_batch_and_take_unchecked(&self) -> Result<Option<Mail<T>>, TakeError> {
        let flags = self.hot.flags.load(Ordering::Acquire);
        if flags & (NEW_MAIL | URGENT | HEAD) != HEAD {
            self.create_batch_unchecked();
            return self.try_take_from_batch_unchecked();
        }
        self.check_not_closed()?;
        // As `create_batch_from_head`, taking the first mail under the same lock.
        let mut owned = self.owned.lock();
        let before = owned.bits();
        owned.head_into_batch();
        let mail = owned.pop_batch();
        self.update_bits(before, owned.bits());
        Ok(mail)
    }

    /// Takes the head of the batch, whatever its priority; never looks at the queue's
    /// non-urgent mails. Urgent mails put since the batch was made come first, within the
    /// fairness rule: they start a round only while the batch still holds a mail and the last
    /// mail taken was not urgent, so they jump the batch being run but never prolong it (see
    /// "Urgent mails" above). Owner only.
    ///
    /// # Errors
    ///
    /// [`TakeError::WrongThread`] off the owner thread, [`TakeError::Closed`] once closed.
    pub fn try_take_from_batch(&self) -> Result<Option<Mail<T>>, TakeError> {
        self.check_owner()?;
        self.try_take_from_batch_unchecked()
    }

    pub(crate) fn try_take_from_batch_unchecked(&self) -> Result<Option<Mail<T>>, TakeError> {
        self.check_not_closed()?;
        // One load: an urgent mail waiting sends the take to the slow path.
        let flags = self.hot.flags.load(Ordering::Acquire);
        if flags & URGENT != 0 {
            return Ok(self.take_from_batch_urgent());
        }
        if flags & BATCH == 0 {
            return Ok(None);
        }
        let mut owned = self.owned.lock();
        let mail = owned.pop_batch();
        if !owned.holds_batch() {
            self.hot.flags.fetch_and(!BATCH, Ordering::Release);
        }
        Ok(mail)
    }

    /// [`try_take_from_batch`](Self::try_take_from_batch) while urgent mails wait: under the
    /// queue lock, they start a round ahead of the batch's rest if the fairness rule lets them
    /// (`Owned::may_jump_batch`); otherwise the batch's next mail, or nothing once the batch is
    /// exhausted (the urgent mails then wait for the next `create_batch`, with every queued
    /// mail).
    #[cold]
    fn take_from_batch_urgent(&self) -> Option<Mail<T>> {
        let mut queue = self.queue.lock();
        let mut owned = self.owned.lock();
        let before = owned.bits() | queued_bits(&queue);
        if owned.may_jump_batch() {
            owned.start_round(&mut queue.urgent);
        }
        let mail = owned.pop_batch();
        self.update_bits(before, owned.bits() | queued_bits(&queue));
        mail
    }

    /// Removes and returns every mail: the urgent ones first (the owner's round, then the
    /// queue's), then the batch's, then the queue's, in order. Does not change the state. From
    /// any thread (Flink does not check either).
    pub fn drain(&self) -> Vec<Mail<T>> {
        let mut queue = self.queue.lock();
        self.drain_locked(&mut queue)
    }

    fn drain_locked(&self, queue: &mut Queue<T>) -> Vec<Mail<T>> {
        let mut owned = self.owned.lock();
        let mut mails: Vec<Mail<T>> = owned.round.drain(..).collect();
        mails.extend(queue.urgent.drain(..));
        mails.extend(owned.batch.drain(..));
        mails.extend(owned.head.drain(..));
        mails.extend(queue.mails.drain(..));
        // Every container is empty and locked; the doorbell is cleared too.
        self.hot.flags.store(0, Ordering::Release);
        mails
    }

    /// `Open -> Quiesced`: refuse new mails, keep the ones queued. Does nothing in any other
    /// state. Owner only.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the owner thread.
    pub fn quiesce(&self) -> Result<(), WrongThread> {
        self.check_owner()?;
        let mut queue = self.queue.lock();
        if self.state() == MailboxState::Open {
            self.set_state(&mut queue, MailboxState::Quiesced);
        }
        Ok(())
    }

    /// Closes the mailbox and returns the mails it held (in [`drain`](Self::drain)'s order);
    /// a second close returns none. Owner only.
    ///
    /// # Errors
    ///
    /// [`WrongThread`] off the owner thread.
    pub fn close(&self) -> Result<Vec<Mail<T>>, WrongThread> {
        self.check_owner()?;
        let mut queue = self.queue.lock();
        if self.state() == MailboxState::Closed {
            return Ok(Vec::new());
        }
        let mails = self.drain_locked(&mut queue);
        self.set_state(&mut queue, MailboxState::Closed);
        self.not_empty.notify_all();
        Ok(mails)
    }

    /// Runs `f` while holding the mailbox's lock, so that checking the state and putting a mail
    /// happen atomically (Flink's "put the poison mail only while open", FLINK-14544). From any
    /// thread. `f` must not call the mailbox's own methods (the lock is not reentrant); it gets
    /// an [`Exclusive`] view instead.
    pub fn run_exclusively<R>(&self, f: impl FnOnce(&mut Exclusive<'_, T>) -> R) -> R {
        let queue = self.queue.lock();
        f(&mut Exclusive {
            mailbox: self,
            queue,
        })
    }

    /// Number of mails held (batch and queue, urgent or not); from any thread.
    pub fn len(&self) -> usize {
        let queue = self.queue.lock();
        let owned = self.owned.lock();
        queue.mails.len()
            + queue.urgent.len()
            + owned.head.len()
            + owned.batch.len()
            + owned.round.len()
    }

    /// Whether no mail is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Default for TaskMailbox<T> {
    fn default() -> Self {
        TaskMailbox::new()
    }
}

impl<T> fmt::Debug for TaskMailbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskMailbox")
            .field("owner", &self.owner.id())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// The mailbox while [`TaskMailbox::run_exclusively`] holds its lock.
pub struct Exclusive<'a, T> {
    mailbox: &'a TaskMailbox<T>,
    queue: MutexGuard<'a, Queue<T>>,
}

impl<T> Exclusive<'_, T> {
    /// The state; it cannot change while this view exists.
    pub fn state(&self) -> MailboxState {
        self.mailbox.state()
    }

    /// As [`TaskMailbox::put`].
    ///
    /// # Errors
    ///
    /// [`PutError`] with the mail when the mailbox is not open.
    pub fn put(&mut self, mail: Mail<T>) -> Result<(), PutError<T>> {
        self.mailbox.put_locked(&mut self.queue, mail, false)
    }

    /// As [`TaskMailbox::put_first`] (to the batch head on the owner thread).
    ///
    /// # Errors
    ///
    /// [`PutError`] with the mail when the mailbox is not open.
    pub fn put_first(&mut self, mail: Mail<T>) -> Result<(), PutError<T>> {
        if self.mailbox.is_owner_thread() && !mail.priority().is_urgent() {
            let state = self.state();
            if !state.is_accepting_mails() {
                return Err(PutError { state, mail });
            }
            // Lock order: the queue, then the owner's lock, as everywhere.
            self.mailbox.push_batch_front(mail);
            Ok(())
        } else {
            self.mailbox.put_locked(&mut self.queue, mail, true)
        }
    }

    /// Number of queued mails (the batch not counted: it belongs to the owner).
    pub fn queued(&self) -> usize {
        self.queue.mails.len() + self.queue.urgent.len() + self.mailbox.owned.lock().head.len()
    }
}

impl<T> fmt::Debug for Exclusive<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exclusive")
            .field("state", &self.state())
            .field("queued", &self.queued())
            .finish()
    }
}

/// `NEW_MAIL` and `URGENT` of the queue (under its lock): the bits as they are.
fn queued_bits<T>(queue: &Queue<T>) -> u8 {
    let mut bits = 0;
    if !queue.mails.is_empty() {
        bits |= NEW_MAIL;
    }
    if !queue.urgent.is_empty() {
        bits |= URGENT;
    }
    bits
}

/// Removes the first mail whose priority is `>= priority`; the others keep their places.
fn take_first<T>(mails: &mut VecDeque<Mail<T>>, priority: Priority) -> Option<Mail<T>> {
    let index = mails.iter().position(|m| m.priority() >= priority)?;
    mails.remove(index)
}
