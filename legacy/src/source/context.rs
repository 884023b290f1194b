//! The source context and its guard: what a [`SourceFunction`](super::SourceFunction) emits
//! through.
//!
//! The context holds the checkpoint lock with the output erased to `dyn SourceOutput<T>`, so the
//! same source runs over any backend; erasing costs one virtual call per emit, and nothing is
//! allocated per record. Every emit of the context takes the lock for that emit; a
//! [`SourceGuard`] (from [`SourceContext::lock`]) holds it across several emits and state
//! updates. `lock` borrows the context mutably, so code holding a guard cannot call the
//! context's own (locking) emits and deadlock: it emits through the guard.

use std::fmt;
use std::time::Duration;

use streamtask_core::{OperatorError, Watermark};

use super::{SourceCell, SourceOutput};
use crate::cancel::{CancelHook, CancellationToken, Cancelled};
use crate::lock::{CheckpointGuard, CheckpointLock, Section};

/// The checkpoint lock as a context sees it: the source's cell with the output erased.
type ErasedCell<T, S> = SourceCell<S, dyn SourceOutput<T>>;

/// Type erasure of `CheckpointLock<SourceCell<S, O>>` over the output type `O`.
trait SourceLock<T, S>: Sync {
    fn lock_source(&self) -> CheckpointGuard<'_, ErasedCell<T, S>>;
    /// [`CheckpointLock::run_errand`] on the lock with its concrete type (the errand is
    /// written for it), not holding the lock.
    fn run_errand(&self);
}

impl<T, S, O> SourceLock<T, S> for CheckpointLock<SourceCell<S, O>>
where
    S: Send,
    O: SourceOutput<T> + 'static,
{
    #[inline]
    fn lock_source(&self) -> CheckpointGuard<'_, ErasedCell<T, S>> {
        // Both closures coerce `&Mutex<SourceCell<S, O>>` to `&Mutex<SourceCell<S, dyn ..>>`.
        self.lock_as::<ErasedCell<T, S>>(|m| m, |m| m)
    }

    fn run_errand(&self) {
        CheckpointLock::run_errand(self);
    }
}

/// What a source emits through: collect, collect with a timestamp, emit a watermark, mark the
/// stream idle, hold the lock across several of these ([`lock`](Self::lock)), and notice
/// cancellation.
///
/// What each emit does depends on the context's flavour (see [`SourceContextConfig`]).
///
/// [`SourceContextConfig`]: crate::SourceContextConfig
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use streamtask_core::operator::Emitted;
/// use streamtask_core::testing::ManualTimerService;
/// use streamtask_core::{time::ManualClock, StreamRecord, Watermark};
/// use streamtask_legacy::{
///     CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
///     SourceContextConfig,
/// };
///
/// let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
/// let cell = SourceCell::new(0u32, Emission::new(SourceContextConfig::event_time(), timers), Vec::new());
/// let lock = CheckpointLock::new(cell, Fairness::Eventual);
/// let token = CancellationToken::new();
///
/// let mut ctx = SourceContext::new(&lock, &token);
/// ctx.collect_with_timestamp("x", 3).unwrap();
/// {
///     let mut locked = ctx.lock(); // synchronized (ctx.getCheckpointLock()) { .. }
///     *locked.state_mut() += 1;
///     locked.emit_watermark(Watermark(3)).unwrap();
/// }
/// let cell = lock.into_inner();
/// assert_eq!(*cell.state(), 1);
/// assert_eq!(
///     cell.output(),
///     &vec![Emitted::Record(StreamRecord::with_timestamp("x", 3)), Emitted::Watermark(Watermark(3))]
/// );
/// ```
pub struct SourceContext<'a, T, S> {
    lock: &'a dyn SourceLock<T, S>,
    cancel: &'a CancellationToken,
}

impl<'a, T, S> SourceContext<'a, T, S> {
    /// A context emitting into the cell behind `lock`, cancelled through `cancel`.
    ///
    /// Whoever cancels `cancel` must then call `lock.notify_all()` so a context waiting for
    /// output capacity notices ([`run_source`](super::run_source) arranges this).
    pub fn new<O>(lock: &'a CheckpointLock<SourceCell<S, O>>, cancel: &'a CancellationToken) -> Self
    where
        S: Send,
        O: SourceOutput<T> + 'static,
    {
        SourceContext { lock, cancel }
    }

    /// Takes the checkpoint lock for a section of state updates and emits (the Rust form of
    /// `synchronized (ctx.getCheckpointLock())`). A checkpoint never sees half a section.
    ///
    /// If the output has no capacity ([`SourceOutput::has_capacity`]), this waits on the lock's
    /// condition, with the lock released, *before* the section starts: a section that has
    /// started never releases the lock to wait for room, so nothing (a snapshot, a thread
    /// draining the output) can see its state updated but its records not yet emitted, or the
    /// reverse. If the source is cancelled while waiting, the section's emits fail with
    /// [`OperatorError::Cancelled`].
    ///
    /// If another thread asked for the lock ([`CheckpointLock::request_handover`]: the bridge's
    /// mailbox thread with a mail, a legacy trigger with the bounded hand-over on), this first
    /// lets go of the lock until that thread has had it, so it waits for at most the section in
    /// flight when it asked, whatever the lock's fairness. If an errand is posted
    /// ([`CheckpointLock::post_errand`]: the bridge's checkpoint trigger) it runs it first, on
    /// this thread, holding the lock. One atomic load otherwise.
    #[inline]
    pub fn lock(&mut self) -> SourceGuard<'_, T, S> {
        let mut guard = self.lock.lock_source();
        while guard.before_section() == Section::Errand {
            // The errand is written for the lock's concrete type: let go of the erased view
            // and run it through the lock itself, then start over (it clears the post).
            drop(guard);
            self.lock.run_errand();
            guard = self.lock.lock_source();
        }
        let refused = !guard.output().has_capacity() && !wait_for_capacity(&mut guard, self.cancel);
        SourceGuard {
            guard,
            cancel: self.cancel,
            refused,
        }
    }

    /// Emits `value` (under the lock, for this one emit).
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with; [`OperatorError::Cancelled`] if cancelled while waiting
    /// for output capacity.
    #[inline]
    pub fn collect(&mut self, value: T) -> Result<(), OperatorError> {
        self.lock().collect(value)
    }

    /// Emits `value` with an event-time `timestamp` (kept only under event time).
    ///
    /// # Errors
    ///
    /// As [`collect`](Self::collect).
    #[inline]
    pub fn collect_with_timestamp(
        &mut self,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.lock().collect_with_timestamp(value, timestamp)
    }

    /// Emits a watermark (event time: always; ingestion time: only `Watermark::MAX`;
    /// processing time: never).
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.lock().emit_watermark(watermark)
    }

    /// Marks the stream temporarily idle until the next emit (ignored under processing time).
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn mark_as_temporarily_idle(&mut self) -> Result<(), OperatorError> {
        self.lock().mark_as_temporarily_idle()
    }

    /// Whether the task cancelled the source: return from `run` soon.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Sleeps for `duration`, returning early when cancelled.
    ///
    /// # Errors
    ///
    /// [`Cancelled`] when cancelled (converts into `OperatorError::Cancelled` with `?`).
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        self.cancel.sleep(duration)
    }

    /// Runs `hook` when the source is cancelled (to close a socket a blocking read waits on,
    /// say); dropping the registration unregisters it.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) -> CancelHook {
        self.cancel.on_cancel(hook)
    }

    /// The cancellation token itself (to hand to a helper thread).
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancel
    }
}

impl<T, S> fmt::Debug for SourceContext<'_, T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceContext")
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// The checkpoint lock held by a source: `&mut` access to the source's state and emits, all in
/// one locked section. Released when dropped.
pub struct SourceGuard<'a, T, S> {
    guard: CheckpointGuard<'a, ErasedCell<T, S>>,
    cancel: &'a CancellationToken,
    // The section started without capacity because the source was cancelled while waiting for
    // it: its records are refused rather than pushed past the output's capacity.
    refused: bool,
}

impl<T, S> SourceGuard<'_, T, S> {
    /// The source's checkpointed state.
    #[inline]
    pub fn state(&self) -> &S {
        self.guard.state()
    }

    /// The source's checkpointed state, mutably.
    #[inline]
    pub fn state_mut(&mut self) -> &mut S {
        self.guard.state_mut()
    }

    /// Emits `value`.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with; [`OperatorError::Cancelled`] if the source was cancelled
    /// while the section waited for output capacity.
    #[inline]
    pub fn collect(&mut self, value: T) -> Result<(), OperatorError> {
        self.check_refused()?;
        self.guard.collect(value)
    }

    /// Emits `value` with an event-time `timestamp` (kept only under event time).
    ///
    /// # Errors
    ///
    /// As [`collect`](Self::collect).
    #[inline]
    pub fn collect_with_timestamp(
        &mut self,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.check_refused()?;
        self.guard.collect_with_timestamp(value, timestamp)
    }

    /// Emits a watermark, if the context's flavour lets it through.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.guard.emit_watermark(watermark)
    }

    /// Marks the stream temporarily idle (ignored under processing time).
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn mark_as_temporarily_idle(&mut self) -> Result<(), OperatorError> {
        self.guard.mark_as_temporarily_idle()
    }

    /// The current processing time of the task's timer service.
    pub fn processing_time(&self) -> i64 {
        self.guard.emission().processing_time()
    }

    /// Whether the task cancelled the source.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Whether another thread asked for the lock while this section holds it (a bridge mail,
    /// a legacy trigger with the bounded hand-over on) or an errand is posted (a bridge
    /// trigger): a long section may end early to let it in; the next section lets go of the
    /// lock or runs the errand anyway (see [`SourceContext::lock`]).
    #[inline]
    pub fn handover_requested(&self) -> bool {
        self.guard.handover_requested()
    }

    /// Waits, with the lock released, until `done(state)` holds (checked under the lock) or
    /// the source is cancelled; whoever changes what `done` reads notifies the lock.
    ///
    /// # Errors
    ///
    /// [`Cancelled`] if cancelled before `done` held.
    pub fn wait_until(&mut self, mut done: impl FnMut(&mut S) -> bool) -> Result<(), Cancelled> {
        let cancel = self.cancel;
        let mut satisfied = false;
        self.guard.wait_until(|cell| {
            satisfied = done(cell.state_mut());
            satisfied || cancel.is_cancelled()
        });
        if satisfied { Ok(()) } else { Err(Cancelled) }
    }

    /// Releases the lock while `f` runs (a blocking read, say), then takes it again.
    pub fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.guard.unlocked(f)
    }

    #[inline]
    fn check_refused(&self) -> Result<(), OperatorError> {
        if self.refused {
            Err(OperatorError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Waits, with the lock released, until the output has capacity or the source is cancelled;
/// returns whether it has capacity. Only [`SourceContext::lock`] calls it, before a section
/// starts.
#[cold]
fn wait_for_capacity<T, S>(
    guard: &mut CheckpointGuard<'_, ErasedCell<T, S>>,
    cancel: &CancellationToken,
) -> bool {
    guard.wait_until(|cell| cell.output().has_capacity() || cancel.is_cancelled());
    guard.output().has_capacity()
}

impl<T, S> Drop for SourceGuard<'_, T, S> {
    /// A thread draining the backend (a handoff reader) may wait on the lock's condition for
    /// what this section emitted: notify it. One atomic load when nobody waits.
    #[inline]
    fn drop(&mut self) {
        self.guard.notify_all();
    }
}

impl<T, S> fmt::Debug for SourceGuard<'_, T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceGuard").finish_non_exhaustive()
    }
}
