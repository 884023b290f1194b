//! The synchronization facade: the only module of the workspace that names `std::sync`,
//! `parking_lot` or `std::thread` primitives.
//!
//! Every crate of the workspace takes its locks, condition variables, atomics and threads from
//! here, so that building with `RUSTFLAGS="--cfg loom"` swaps all of them for
//! [loom](https://docs.rs/loom)'s model-checked versions at once.
//!
//! | build | `Mutex` / `Condvar` | atomics, `Arc` | threads |
//! |---|---|---|---|
//! | normal | `parking_lot` (no poisoning); `BargingMutex`: `std::sync::Mutex` (no fairness, no poisoning) | `std::sync` | `std::thread` |
//! | `cfg(loom)` | `loom::sync` wrapped to the same API | `loom::sync` | `loom::thread` |
//!
//! Channels between threads (`channel`) are crossbeam's normally and a small queue on loom's
//! mutex and condition variable under loom. `std::sync::Arc` is named directly where a value is
//! coerced to `Arc<dyn Trait>` (loom's `Arc` cannot be), and nowhere else.
//!
//! The wrappers give one API in both builds: [`Mutex::lock`] returns the guard (no poisoning, so
//! no `.lock().unwrap()` anywhere), and [`Condvar::wait`] takes the guard by `&mut` like
//! parking_lot's.
//!
//! Things loom cannot model (timed waits, `parking_lot`'s fair unlocking) keep their parking_lot
//! form: under loom a timed wait is an untimed one, and a fair unlock is a plain unlock.
//!
//! # Examples
//!
//! ```
//! use streamtask_core::sync::{Arc, Condvar, Mutex, thread};
//!
//! let pair = Arc::new((Mutex::new(false), Condvar::new()));
//! let other = Arc::clone(&pair);
//! let handle = thread::spawn(move || {
//!     *other.0.lock() = true;
//!     other.1.notify_all();
//! });
//! let mut ready = pair.0.lock();
//! while !*ready {
//!     pair.1.wait(&mut ready);
//! }
//! drop(ready);
//! handle.join().unwrap();
//! ```

pub use self::imp::*;

#[cfg(not(loom))]
mod imp {
    pub use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
    pub use std::sync::Arc;
    pub use std::sync::OnceLock;
    pub use std::sync::Weak;

    /// Atomic types and orderings.
    pub mod atomic {
        pub use std::sync::atomic::{
            AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
        };
    }

    /// Threads: spawn, park, and the current thread's identity.
    pub mod thread {
        pub use std::thread::{
            Builder, JoinHandle, Thread, ThreadId, current, park, park_timeout, sleep, spawn,
            yield_now,
        };

        /// Whether the calling thread is `owner`. The calling thread's id is cached per thread
        /// (a thread-local read, not `current()`'s handle clone): owner checks run once per
        /// mail or completion.
        #[inline]
        pub fn is_current(owner: &Thread) -> bool {
            std::thread_local! {
                static CURRENT: ThreadId = current().id();
            }
            CURRENT.with(|current| *current == owner.id())
        }
    }

    /// Channels between threads (crossbeam's; a loom-modelled one under `cfg(loom)`).
    pub mod channel {
        pub use crossbeam::channel::{
            Receiver, RecvError, SendError, Sender, TryRecvError, bounded, unbounded,
        };
    }

    /// The calling OS thread's identity and name, for traces (the real thread's, in every
    /// build: a trace names OS threads).
    pub fn os_thread() -> (std::thread::ThreadId, Option<String>) {
        let current = std::thread::current();
        (current.id(), current.name().map(str::to_string))
    }

    /// Starts a thread named `name` (the name shows in panics, debuggers and traces).
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn spawn_named<F, T>(name: impl Into<String>, f: F) -> thread::JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .expect("the operating system refused to start a thread")
    }

    /// Releases `guard` handing the lock directly to the next waiter, if any (a fair hand-off).
    ///
    /// parking_lot's mutex is eventually fair on its own; this forces fairness on this release.
    pub fn unlock_fair<T: ?Sized>(guard: MutexGuard<'_, T>) {
        MutexGuard::unlock_fair(guard);
    }

    /// Temporarily releases `guard`, runs `f`, and takes the lock again (fairly if `fair`).
    pub fn unlocked<T: ?Sized, R>(
        guard: &mut MutexGuard<'_, T>,
        fair: bool,
        f: impl FnOnce() -> R,
    ) -> R {
        if fair {
            MutexGuard::unlocked_fair(guard, f)
        } else {
            MutexGuard::unlocked(guard, f)
        }
    }

    /// A mutex with no fairness at all: a thread that releases it and asks again at once usually
    /// gets it back, however long others have waited (std's futex mutex on Linux "barges").
    ///
    /// parking_lot's [`Mutex`] is *eventually* fair (it hands the lock to a waiter about every
    /// half millisecond); this one never is, which is what a Java monitor does and what the
    /// legacy model's `Fairness::Unfair` needs. Poisoning is ignored, as parking_lot does. The
    /// data may be unsized, so `&BargingMutex<Concrete>` coerces to `&BargingMutex<dyn Trait>`.
    pub struct BargingMutex<T: ?Sized> {
        inner: std::sync::Mutex<T>,
    }

    /// The guard of a [`BargingMutex`]; releases it when dropped.
    pub struct BargingMutexGuard<'a, T: ?Sized>(std::sync::MutexGuard<'a, T>);

    impl<T> BargingMutex<T> {
        /// Creates the mutex holding `value`.
        pub fn new(value: T) -> Self {
            BargingMutex {
                inner: std::sync::Mutex::new(value),
            }
        }

        /// Consumes the mutex and returns the value.
        pub fn into_inner(self) -> T {
            self.inner
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    impl<T: ?Sized> BargingMutex<T> {
        /// Takes the lock, blocking until it is free.
        pub fn lock(&self) -> BargingMutexGuard<'_, T> {
            BargingMutexGuard(
                self.inner
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
        }

        /// Takes the lock if it is free.
        pub fn try_lock(&self) -> Option<BargingMutexGuard<'_, T>> {
            match self.inner.try_lock() {
                Ok(guard) => Some(BargingMutexGuard(guard)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    Some(BargingMutexGuard(p.into_inner()))
                }
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
    }

    impl<T: ?Sized> std::ops::Deref for BargingMutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<T: ?Sized> std::ops::DerefMut for BargingMutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.0
        }
    }

    impl<T: ?Sized> std::fmt::Debug for BargingMutex<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("BargingMutex").finish_non_exhaustive()
        }
    }

    impl<T: ?Sized> std::fmt::Debug for BargingMutexGuard<'_, T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("BargingMutexGuard").finish_non_exhaustive()
        }
    }
}

#[cfg(loom)]
mod imp {
    use std::ops::{Deref, DerefMut};
    use std::time::Duration;

    pub use loom::sync::Arc;
    /// std's (loom has none): for a value set once that no modelled protocol races on.
    pub use std::sync::OnceLock;
    pub use std::sync::Weak;

    /// Atomic types and orderings (loom's).
    pub mod atomic {
        pub use loom::sync::atomic::{
            AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
        };
    }

    /// Threads (loom's). `park_timeout` and `sleep` degrade to `park` and `yield_now`.
    pub mod thread {
        pub use loom::thread::{JoinHandle, Thread, current, park, spawn, yield_now};
        pub use std::thread::ThreadId;

        /// Whether the calling thread is `owner` (loom's thread ids, so asked directly).
        pub fn is_current(owner: &Thread) -> bool {
            current().id() == owner.id()
        }

        /// Under loom a timed park is an untimed one.
        pub fn park_timeout(_timeout: std::time::Duration) {
            loom::thread::park();
        }

        /// Under loom sleeping is yielding.
        pub fn sleep(_duration: std::time::Duration) {
            loom::thread::yield_now();
        }
    }

    /// A mutex whose `lock` returns the guard directly (loom's, without poisoning).
    #[derive(Debug)]
    pub struct Mutex<T: ?Sized>(loom::sync::Mutex<T>);

    /// The guard of [`Mutex`].
    #[derive(Debug)]
    pub struct MutexGuard<'a, T: ?Sized> {
        mutex: &'a loom::sync::Mutex<T>,
        inner: Option<loom::sync::MutexGuard<'a, T>>,
    }

    impl<T> Mutex<T> {
        /// Creates a mutex holding `value`.
        pub fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        /// Consumes the mutex and returns the value.
        pub fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T: ?Sized> Mutex<T> {
        /// Takes the lock, blocking until it is free.
        pub fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard {
                mutex: &self.0,
                inner: Some(self.0.lock().unwrap_or_else(|e| e.into_inner())),
            }
        }

        /// The value, through the exclusive borrow (no lock is taken).
        pub fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(|e| e.into_inner())
        }

        /// Takes the lock if it is free.
        pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok().map(|g| MutexGuard {
                mutex: &self.0,
                inner: Some(g),
            })
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Mutex::new(T::default())
        }
    }

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.inner
                .as_ref()
                .expect("guard is present outside Condvar::wait")
        }
    }

    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.inner
                .as_mut()
                .expect("guard is present outside Condvar::wait")
        }
    }

    /// A condition variable with parking_lot's `&mut guard` API (loom's underneath).
    #[derive(Debug, Default)]
    pub struct Condvar(loom::sync::Condvar);

    /// The result of a timed wait.
    #[derive(Debug, Clone, Copy)]
    pub struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        /// Whether the wait ended because the time ran out.
        pub fn timed_out(&self) -> bool {
            self.0
        }
    }

    impl Condvar {
        /// Creates a condition variable.
        pub fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        /// Releases the lock held by `guard`, waits for a notification, and takes it again.
        pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.inner.take().expect("guard is present");
            guard.inner = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
        }

        /// Under loom a timed wait is an untimed one (loom has no time); it never times out.
        pub fn wait_for<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _timeout: Duration,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult(false)
        }

        /// Wakes one waiter.
        pub fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }

        /// Wakes every waiter.
        pub fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    /// A reader-writer lock (a plain mutex under loom).
    #[derive(Debug, Default)]
    pub struct RwLock<T>(Mutex<T>);

    impl<T> RwLock<T> {
        /// Creates the lock.
        pub fn new(value: T) -> Self {
            RwLock(Mutex::new(value))
        }
        /// Shared access (exclusive under loom).
        pub fn read(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
        /// Exclusive access.
        pub fn write(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
    }

    /// Channels between threads: a multi-producer, multi-consumer queue on loom's mutex and
    /// condition variable, with crossbeam's API (the parts the workspace uses).
    pub mod channel {
        use std::collections::VecDeque;
        use std::fmt;

        use super::{Arc, Condvar, Mutex};

        pub use crossbeam::channel::{RecvError, SendError, TryRecvError};

        struct State<T> {
            queue: VecDeque<T>,
            capacity: Option<usize>,
            senders: usize,
            receivers: usize,
        }

        struct Shared<T> {
            state: Mutex<State<T>>,
            changed: Condvar,
        }

        /// The sending side.
        pub struct Sender<T>(Arc<Shared<T>>);
        /// The receiving side.
        pub struct Receiver<T>(Arc<Shared<T>>);

        fn channel<T>(capacity: Option<usize>) -> (Sender<T>, Receiver<T>) {
            let shared = Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    capacity,
                    senders: 1,
                    receivers: 1,
                }),
                changed: Condvar::new(),
            });
            (Sender(Arc::clone(&shared)), Receiver(shared))
        }

        /// A channel without a bound.
        pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
            channel(None)
        }

        /// A channel holding at most `capacity` messages (at least one under loom).
        pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
            channel(Some(capacity.max(1)))
        }

        impl<T> Sender<T> {
            /// Sends `value`, waiting for room; hands it back once every receiver is gone.
            pub fn send(&self, value: T) -> Result<(), SendError<T>> {
                let mut state = self.0.state.lock();
                loop {
                    if state.receivers == 0 {
                        return Err(SendError(value));
                    }
                    if state.capacity.is_none_or(|c| state.queue.len() < c) {
                        state.queue.push_back(value);
                        self.0.changed.notify_all();
                        return Ok(());
                    }
                    self.0.changed.wait(&mut state);
                }
            }
        }

        impl<T> Receiver<T> {
            /// Receives a message, waiting for one; fails once it is empty and every sender is
            /// gone.
            pub fn recv(&self) -> Result<T, RecvError> {
                let mut state = self.0.state.lock();
                loop {
                    if let Some(value) = state.queue.pop_front() {
                        self.0.changed.notify_all();
                        return Ok(value);
                    }
                    if state.senders == 0 {
                        return Err(RecvError);
                    }
                    self.0.changed.wait(&mut state);
                }
            }

            /// Receives a message if one is there.
            pub fn try_recv(&self) -> Result<T, TryRecvError> {
                let mut state = self.0.state.lock();
                match state.queue.pop_front() {
                    Some(value) => {
                        self.0.changed.notify_all();
                        Ok(value)
                    }
                    None if state.senders == 0 => Err(TryRecvError::Disconnected),
                    None => Err(TryRecvError::Empty),
                }
            }

            /// Whether no message waits.
            pub fn is_empty(&self) -> bool {
                self.0.state.lock().queue.is_empty()
            }
        }

        impl<T> Clone for Sender<T> {
            fn clone(&self) -> Self {
                self.0.state.lock().senders += 1;
                Sender(Arc::clone(&self.0))
            }
        }

        impl<T> Clone for Receiver<T> {
            fn clone(&self) -> Self {
                self.0.state.lock().receivers += 1;
                Receiver(Arc::clone(&self.0))
            }
        }

        impl<T> Drop for Sender<T> {
            fn drop(&mut self) {
                self.0.state.lock().senders -= 1;
                self.0.changed.notify_all();
            }
        }

        impl<T> Drop for Receiver<T> {
            fn drop(&mut self) {
                self.0.state.lock().receivers -= 1;
                self.0.changed.notify_all();
            }
        }

        impl<T> fmt::Debug for Sender<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Sender { .. }")
            }
        }

        impl<T> fmt::Debug for Receiver<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Receiver { .. }")
            }
        }
    }

    /// The calling OS thread's identity and name, for traces (the real thread's, in every
    /// build: a trace names OS threads).
    pub fn os_thread() -> (std::thread::ThreadId, Option<String>) {
        let current = std::thread::current();
        (current.id(), current.name().map(str::to_string))
    }

    /// Starts a (loom) thread; loom threads have no names.
    pub fn spawn_named<F, T>(_name: impl Into<String>, f: F) -> thread::JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        thread::spawn(f)
    }

    /// Under loom a fair unlock is a plain unlock.
    pub fn unlock_fair<T: ?Sized>(guard: MutexGuard<'_, T>) {
        drop(guard);
    }

    /// Temporarily releases `guard`, runs `f`, and takes the lock again.
    pub fn unlocked<T: ?Sized, R>(
        guard: &mut MutexGuard<'_, T>,
        _fair: bool,
        f: impl FnOnce() -> R,
    ) -> R {
        drop(guard.inner.take());
        let result = f();
        guard.inner = Some(guard.mutex.lock().unwrap_or_else(|e| e.into_inner()));
        result
    }

    /// Under loom the barging mutex is loom's mutex (loom explores every interleaving anyway).
    #[derive(Debug)]
    pub struct BargingMutex<T: ?Sized>(Mutex<T>);

    /// The guard of a [`BargingMutex`].
    #[derive(Debug)]
    pub struct BargingMutexGuard<'a, T: ?Sized>(MutexGuard<'a, T>);

    impl<T> BargingMutex<T> {
        /// Creates the mutex holding `value`.
        pub fn new(value: T) -> Self {
            BargingMutex(Mutex::new(value))
        }

        /// Consumes the mutex and returns the value.
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    impl<T: ?Sized> BargingMutex<T> {
        /// Takes the lock, blocking until it is free.
        pub fn lock(&self) -> BargingMutexGuard<'_, T> {
            BargingMutexGuard(self.0.lock())
        }

        /// Takes the lock if it is free.
        pub fn try_lock(&self) -> Option<BargingMutexGuard<'_, T>> {
            self.0.try_lock().map(BargingMutexGuard)
        }
    }

    impl<T: ?Sized> Deref for BargingMutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<T: ?Sized> DerefMut for BargingMutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.0
        }
    }
}
