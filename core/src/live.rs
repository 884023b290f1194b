//! What a task is doing right now, readable from any thread: [`TaskLive`], one per task (a field
//! of its [`TaskMetrics`](crate::metrics::TaskMetrics)), which a job's stalled-checkpoint report
//! reads while a checkpoint waits for the task.
//!
//! Each part has its writers and a cost that keeps it off the per-record path:
//!
//! | part | written by | when | cost |
//! |---|---|---|---|
//! | [`Activity`] | the task's main thread (the mailbox thread, the legacy task thread) | when what it does changes: a mail, a suspension, a park for input, back to input | one relaxed store |
//! | the running mail's name | the mailbox thread | before a mail whose description differs from the last one written | a relaxed load; a lock only on a change |
//! | barriers per input channel | the input gate, on the task thread | once per barrier and channel, and at a channel's end of input | one relaxed store |
//! | output blocked | whichever thread sends (the task thread, a legacy source's own thread) | around a send that found its channel full (the writer's slow path) | two read-modify-writes |
//! | checkpoint lock | the lock (legacy and bridge), in every thread that takes it | holder: at each acquisition and release; waiters: around an acquisition that blocks | one relaxed store; two read-modify-writes when blocked |
//! | async queue | the async operator (or the keyed async-fn operator: its records held against its cap), on the thread that holds its queue | when an element enters or leaves the queue | one relaxed store |
//!
//! Every access is `Relaxed`: the values are diagnostics read at an arbitrary moment by a thread
//! that synchronizes with nothing through them. A reader may see a combination no single
//! moment had (a mail's kind with the previous mail's name); the report says what the task was
//! doing around the time it was read, never more.
//!
//! # Examples
//!
//! ```
//! use streamtask_core::live::{Activity, BarrierState, TaskLive, ThreadRole};
//!
//! let live = TaskLive::new();
//! live.set_inputs(2);
//! live.barrier_received(1, 4);
//! live.enter_mail("checkpoint trigger");
//! assert_eq!(live.activity(), Activity::Mail);
//! assert_eq!(live.mail_name(), Some("checkpoint trigger"));
//! assert_eq!(live.barriers(4), vec![BarrierState::Awaited, BarrierState::Arrived]);
//!
//! live.lock_taken(ThreadRole::Timer);
//! assert_eq!(live.lock().holder, Some(ThreadRole::Timer));
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use crate::sync::{Mutex, OnceLock};

/// What a task's main thread is doing (see [`TaskLive::activity`]).
///
/// | activity | set when |
/// |---|---|
/// | `Starting` | the task was created and has not run input yet |
/// | `Idle` | it waits for input (a legacy task parked on its gate, a mailbox task suspended idle) |
/// | `Processing` | it runs input steps: records through the chain (the operator running is the task's [`RunningOperator`](crate::operator::RunningOperator)) |
/// | `Source` | it runs a legacy source function's loop, which emits under the checkpoint lock |
/// | `Mail` | it runs a mail (its name: [`TaskLive::mail_name`]) |
/// | `Backpressured` | its default action is suspended until the output or the chain takes input again |
/// | `Suspended` | its default action is suspended for another reason; it waits for a mail |
/// | `Ended` | its main loop returned |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Activity {
    /// Created; no input step ran yet.
    Starting = 0,
    /// Waiting for input.
    Idle = 1,
    /// Running input steps through the chain.
    Processing = 2,
    /// Running a legacy source function's loop.
    Source = 3,
    /// Running a mail.
    Mail = 4,
    /// Suspended until the output or the chain takes input again.
    Backpressured = 5,
    /// Suspended, waiting for a mail.
    Suspended = 6,
    /// The main loop returned.
    Ended = 7,
}

impl Activity {
    const ALL: [Activity; 8] = [
        Activity::Starting,
        Activity::Idle,
        Activity::Processing,
        Activity::Source,
        Activity::Mail,
        Activity::Backpressured,
        Activity::Suspended,
        Activity::Ended,
    ];

    fn from_u8(value: u8) -> Activity {
        Activity::ALL
            .get(usize::from(value))
            .copied()
            .unwrap_or(Activity::Starting)
    }

    /// A short phrase for the report ("waiting for input", "running a mail").
    pub fn describe(self) -> &'static str {
        match self {
            Activity::Starting => "starting (no input step ran yet)",
            Activity::Idle => "waiting for input",
            Activity::Processing => "processing input",
            Activity::Source => "running the source function",
            Activity::Mail => "running a mail",
            Activity::Backpressured => {
                "suspended: the output or the chain takes no input (backpressure)"
            }
            Activity::Suspended => "suspended, waiting for a mail",
            Activity::Ended => "ended its main loop",
        }
    }
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Which of a task's threads a thread is, as the checkpoint lock reports its holder and its
/// waiters (see [`set_thread_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum ThreadRole {
    /// A thread that did not say ([`set_thread_role`] was not called on it).
    Other = 0,
    /// The task's main thread: the legacy task thread (which runs a legacy source task's
    /// source function too), the bridge's mailbox thread.
    Task = 1,
    /// A legacy source function's own thread (the bridge's).
    Source = 2,
    /// The processing-time timer thread.
    Timer = 3,
    /// The legacy "async calls" thread: checkpoint triggers, notices, events.
    AsyncCalls = 4,
    /// The legacy async operator's emitter thread.
    Emitter = 5,
}

impl ThreadRole {
    const ALL: [ThreadRole; 6] = [
        ThreadRole::Other,
        ThreadRole::Task,
        ThreadRole::Source,
        ThreadRole::Timer,
        ThreadRole::AsyncCalls,
        ThreadRole::Emitter,
    ];

    fn from_u8(value: u8) -> ThreadRole {
        ThreadRole::ALL
            .get(usize::from(value))
            .copied()
            .unwrap_or(ThreadRole::Other)
    }

    /// The thread's name in the report ("the task thread").
    pub fn describe(self) -> &'static str {
        match self {
            ThreadRole::Other => "another thread",
            ThreadRole::Task => "the task thread",
            ThreadRole::Source => "the source thread",
            ThreadRole::Timer => "the timer thread",
            ThreadRole::AsyncCalls => "the async-calls thread (checkpoint triggers, notices)",
            ThreadRole::Emitter => "the async emitter thread",
        }
    }
}

impl fmt::Display for ThreadRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

// A plain per-OS-thread cell, not a synchronization primitive: a thread writes only its own,
// so there is nothing for the sync facade (or loom) to model.
std::thread_local! {
    static ROLE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Says which of its task's threads the calling thread is; the checkpoint lock names its holder
/// and waiters by it. Call once, at the start of the thread.
pub fn set_thread_role(role: ThreadRole) {
    ROLE.with(|r| r.set(role as u8));
}

/// The calling thread's role ([`ThreadRole::Other`] unless [`set_thread_role`] said).
#[inline]
pub fn thread_role() -> ThreadRole {
    ThreadRole::from_u8(ROLE.with(std::cell::Cell::get))
}

/// Where the barrier of one checkpoint is on one input channel (see [`TaskLive::barriers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BarrierState {
    /// The gate read the checkpoint's barrier (or a newer one) on the channel.
    Arrived,
    /// The gate has not read it yet: it is still upstream, or queued in the channel.
    Awaited,
    /// The channel ended its input: it counts as aligned.
    Ended,
}

/// Who holds a task's checkpoint lock and who waits for it (see [`TaskLive::lock`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockView {
    /// Whether the task has a checkpoint lock (legacy and bridge models).
    pub present: bool,
    /// The thread holding it now; `None` when it is free.
    pub holder: Option<ThreadRole>,
    /// The thread that took it last (the holder, when held).
    pub last_holder: Option<ThreadRole>,
    /// The threads blocked taking it.
    pub waiting: Vec<ThreadRole>,
}

/// The fill of a task's async operator queue (see [`TaskLive::async_queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsyncQueueFill {
    /// Elements in the queue: waiting for their result, or for their turn to be emitted.
    pub in_flight: u32,
    /// The queue's capacity.
    pub capacity: u32,
}

/// A channel's barrier word: no barrier read yet.
const NO_BARRIER: u64 = 0;
/// A channel's barrier word: the channel ended.
const ENDED: u64 = u64::MAX;
/// The lock word's bit: held now (the bits below it are the last holder's role).
const HELD: u8 = 0x80;

/// What a task is doing right now (see the [module docs](self) for who writes what, and how
/// cheaply); shared by every thread of the task and read by the job's stalled-checkpoint report.
#[derive(Debug)]
#[repr(align(64))]
pub struct TaskLive {
    activity: AtomicU8,
    /// The identity (address and length) of the mail name last written into `mail`: a name is
    /// written only when a mail's differs.
    mail_tag: AtomicU64,
    mail: Mutex<&'static str>,
    /// Per input channel: the newest barrier id read on it, [`NO_BARRIER`], or [`ENDED`].
    inputs: OnceLock<Box<[AtomicU64]>>,
    /// Sends blocked on a full output channel right now.
    blocked_sends: AtomicU32,
    /// Whether the task has a checkpoint lock.
    has_lock: AtomicBool,
    /// The last holder's [`ThreadRole`], with [`HELD`] while held; 0 before the first.
    lock_word: AtomicU8,
    /// One bit per [`ThreadRole`] blocked taking the lock.
    lock_waiters: AtomicU8,
    async_in_flight: AtomicU32,
    /// 0: the task has no async operator.
    async_capacity: AtomicU32,
}

impl Default for TaskLive {
    fn default() -> Self {
        TaskLive::new()
    }
}

impl TaskLive {
    /// A task that has not started: no inputs known, no lock, no async operator.
    pub fn new() -> Self {
        TaskLive {
            activity: AtomicU8::new(Activity::Starting as u8),
            mail_tag: AtomicU64::new(0),
            mail: Mutex::new(""),
            inputs: OnceLock::new(),
            blocked_sends: AtomicU32::new(0),
            has_lock: AtomicBool::new(false),
            lock_word: AtomicU8::new(0),
            lock_waiters: AtomicU8::new(0),
            async_in_flight: AtomicU32::new(0),
            async_capacity: AtomicU32::new(0),
        }
    }

    /// The main thread now does `activity`.
    #[inline]
    pub fn enter(&self, activity: Activity) {
        self.activity.store(activity as u8, Ordering::Relaxed);
    }

    /// What the main thread does now.
    pub fn activity(&self) -> Activity {
        Activity::from_u8(self.activity.load(Ordering::Relaxed))
    }

    /// The main thread runs the mail described by `name`.
    #[inline]
    pub fn enter_mail(&self, name: &'static str) {
        // User-space addresses fit 48 bits; the length's low 16 bits tell apart two names that
        // start at one address.
        let tag = ((name.as_ptr().addr() as u64) << 16) | (name.len() as u64 & 0xffff);
        // Only the mailbox thread writes the name, so the tag it reads is its own last write:
        // a run of mails of one kind costs one load each.
        if self.mail_tag.load(Ordering::Relaxed) != tag {
            self.set_mail_slow(name, tag);
        }
        self.enter(Activity::Mail);
    }

    #[cold]
    fn set_mail_slow(&self, name: &'static str, tag: u64) {
        *self.mail.lock() = name;
        self.mail_tag.store(tag, Ordering::Relaxed);
    }

    /// The name of the mail running, while [`activity`](Self::activity) is
    /// [`Activity::Mail`].
    pub fn mail_name(&self) -> Option<&'static str> {
        (self.activity() == Activity::Mail).then(|| *self.mail.lock())
    }

    /// The task reads `channels` input channels (its gate says, once it is built).
    pub fn set_inputs(&self, channels: usize) {
        let _ = self
            .inputs
            .set((0..channels).map(|_| AtomicU64::new(NO_BARRIER)).collect());
    }

    /// The gate read the barrier of checkpoint `id` on input channel `channel`.
    #[inline]
    pub fn barrier_received(&self, channel: usize, id: u64) {
        if let Some(word) = self.inputs.get().and_then(|inputs| inputs.get(channel)) {
            // Barriers only grow on a channel (a late one of an aborted checkpoint is older).
            if word.load(Ordering::Relaxed) < id {
                word.store(id, Ordering::Relaxed);
            }
        }
    }

    /// Input channel `channel` ended.
    pub fn input_ended(&self, channel: usize) {
        if let Some(word) = self.inputs.get().and_then(|inputs| inputs.get(channel)) {
            word.store(ENDED, Ordering::Relaxed);
        }
    }

    /// Where checkpoint `id`'s barrier is on each input channel, in the gate's channel order
    /// (empty for a task without inputs).
    pub fn barriers(&self, id: u64) -> Vec<BarrierState> {
        self.inputs
            .get()
            .map(|inputs| {
                inputs
                    .iter()
                    .map(|word| match word.load(Ordering::Relaxed) {
                        ENDED => BarrierState::Ended,
                        seen if seen >= id => BarrierState::Arrived,
                        _ => BarrierState::Awaited,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A send found its output channel full and blocks: call before it blocks; the returned
    /// guard says it ended when dropped.
    pub fn send_blocked(&self) -> BlockedSend<'_> {
        self.blocked_sends.fetch_add(1, Ordering::Relaxed);
        BlockedSend(self)
    }

    /// Whether a send of the task blocks on a full output channel right now.
    pub fn output_blocked(&self) -> bool {
        self.blocked_sends.load(Ordering::Relaxed) > 0
    }

    /// The task's state lives under a checkpoint lock.
    pub fn set_has_lock(&self) {
        self.has_lock.store(true, Ordering::Relaxed);
    }

    /// A thread of role `role` took the checkpoint lock.
    #[inline]
    pub fn lock_taken(&self, role: ThreadRole) {
        self.lock_word.store(role as u8 | HELD, Ordering::Relaxed);
    }

    /// The holder let go of the checkpoint lock.
    #[inline]
    pub fn lock_released(&self) {
        let word = self.lock_word.load(Ordering::Relaxed);
        self.lock_word.store(word & !HELD, Ordering::Relaxed);
    }

    /// A thread of role `role` blocks taking the checkpoint lock: call before it blocks; the
    /// returned guard says it stopped waiting when dropped.
    pub fn lock_waiting(&self, role: ThreadRole) -> LockWait<'_> {
        let bit = 1u8 << (role as u8);
        self.lock_waiters.fetch_or(bit, Ordering::Relaxed);
        LockWait { live: self, bit }
    }

    /// Who holds the checkpoint lock, and who waits for it.
    pub fn lock(&self) -> LockView {
        let word = self.lock_word.load(Ordering::Relaxed);
        let waiters = self.lock_waiters.load(Ordering::Relaxed);
        let last = (word != 0).then(|| ThreadRole::from_u8(word & !HELD));
        LockView {
            present: self.has_lock.load(Ordering::Relaxed),
            holder: last.filter(|_| word & HELD != 0),
            last_holder: last,
            waiting: ThreadRole::ALL
                .into_iter()
                .filter(|&role| waiters & (1 << (role as u8)) != 0)
                .collect(),
        }
    }

    /// The task has an async operator whose queue holds `capacity` elements.
    pub fn set_async_capacity(&self, capacity: usize) {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        self.async_capacity.store(capacity, Ordering::Relaxed);
    }

    /// The async operator's queue holds `in_flight` elements now.
    #[inline]
    pub fn set_async_in_flight(&self, in_flight: usize) {
        let in_flight = u32::try_from(in_flight).unwrap_or(u32::MAX);
        self.async_in_flight.store(in_flight, Ordering::Relaxed);
    }

    /// The async operator's queue fill; `None` for a task without one.
    pub fn async_queue(&self) -> Option<AsyncQueueFill> {
        let capacity = self.async_capacity.load(Ordering::Relaxed);
        (capacity > 0).then(|| AsyncQueueFill {
            in_flight: self.async_in_flight.load(Ordering::Relaxed),
            capacity,
        })
    }
}

/// A send blocked on a full output channel (see [`TaskLive::send_blocked`]).
#[derive(Debug)]
#[must_use = "the send counts as blocked until the guard is dropped"]
pub struct BlockedSend<'a>(&'a TaskLive);

impl Drop for BlockedSend<'_> {
    fn drop(&mut self) {
        self.0.blocked_sends.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A thread blocked taking the checkpoint lock (see [`TaskLive::lock_waiting`]).
#[derive(Debug)]
#[must_use = "the thread counts as waiting until the guard is dropped"]
pub struct LockWait<'a> {
    live: &'a TaskLive,
    bit: u8,
}

impl Drop for LockWait<'_> {
    fn drop(&mut self) {
        self.live
            .lock_waiters
            .fetch_and(!self.bit, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn barriers_arrive_per_channel_and_ended_channels_count_as_aligned() {
        let live = TaskLive::new();
        assert!(live.barriers(1).is_empty(), "no gate, no inputs");
        live.set_inputs(3);
        live.barrier_received(0, 2);
        live.input_ended(2);
        assert_eq!(
            live.barriers(2),
            vec![
                BarrierState::Arrived,
                BarrierState::Awaited,
                BarrierState::Ended
            ]
        );
        // A late barrier of an older checkpoint does not move a channel back.
        live.barrier_received(0, 1);
        assert_eq!(live.barriers(2)[0], BarrierState::Arrived);
        assert_eq!(live.barriers(3)[0], BarrierState::Awaited);
    }

    #[test]
    fn the_lock_names_its_holder_and_waiters() {
        let live = TaskLive::new();
        assert_eq!(live.lock().last_holder, None);
        live.set_has_lock();
        live.lock_taken(ThreadRole::Source);
        let wait = live.lock_waiting(ThreadRole::AsyncCalls);
        let view = live.lock();
        assert!(view.present);
        assert_eq!(view.holder, Some(ThreadRole::Source));
        assert_eq!(view.waiting, vec![ThreadRole::AsyncCalls]);
        drop(wait);
        live.lock_released();
        let view = live.lock();
        assert_eq!(view.holder, None);
        assert_eq!(view.last_holder, Some(ThreadRole::Source));
        assert!(view.waiting.is_empty());
    }

    #[test]
    fn a_mail_name_is_kept_while_mails_of_its_kind_run() {
        let live = TaskLive::new();
        assert_eq!(live.mail_name(), None);
        live.enter_mail("timer");
        live.enter_mail("timer");
        assert_eq!(live.mail_name(), Some("timer"));
        live.enter_mail("async completion");
        assert_eq!(live.mail_name(), Some("async completion"));
        live.enter(Activity::Processing);
        assert_eq!(live.mail_name(), None);
    }

    #[test]
    fn roles_are_per_thread() {
        set_thread_role(ThreadRole::Timer);
        assert_eq!(thread_role(), ThreadRole::Timer);
        let other = std::thread::spawn(thread_role).join().unwrap();
        assert_eq!(other, ThreadRole::Other);
    }

    #[test]
    fn blocked_sends_are_counted_while_they_block() {
        let live = TaskLive::new();
        let send = live.send_blocked();
        assert!(live.output_blocked());
        drop(send);
        assert!(!live.output_blocked());
        assert_eq!(live.async_queue(), None);
        live.set_async_capacity(100);
        live.set_async_in_flight(7);
        assert_eq!(
            live.async_queue(),
            Some(AsyncQueueFill {
                in_flight: 7,
                capacity: 100
            })
        );
    }
}
