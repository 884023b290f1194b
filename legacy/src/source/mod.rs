//! Legacy sources: the [`SourceFunction`] users write, the [`SourceContext`] it emits through,
//! and the [`SourceOutput`] backend a context emits into.
//!
//! # Where a source's parts live
//!
//! A source runs on a thread of its own (the task thread in [`SourceStreamTask`]), in an
//! endless loop that emits while holding the checkpoint lock. The lock owns a [`SourceCell`]:
//!
//! | part | what | who else touches it (under the lock) |
//! |---|---|---|
//! | `state` | the source's checkpointed `State` (an offset, a count) | the snapshot, restore |
//! | `emission` | the context's bookkeeping: stream status, automatic watermarks, idleness | the context's timers |
//! | `output` | the backend: whatever the records go to | checkpoints, timers, events of what follows |
//!
//! So "update my state and emit" is one locked section ([`SourceContext::lock`], the Rust form
//! of `synchronized (ctx.getCheckpointLock())`), and a snapshot never sees half of it.
//!
//! # Backends
//!
//! The same `SourceFunction` runs unchanged wherever a [`SourceOutput`] can be put behind a
//! [`CheckpointLock`]: in this crate's [`SourceStreamTask`] the output pushes records through
//! the operator chain; a mailbox-model bridge can push them through a chain its mailbox thread
//! also drives under the same lock, or into a bounded handoff buffer another thread drains
//! (reporting [`SourceOutput::has_capacity`] `false` when full, so the context waits with the
//! lock released). A backend implements only [`SourceOutput`]; [`run_source`] does the rest.
//!
//! [`SourceStreamTask`]: crate::SourceStreamTask

mod context;
mod emission;

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::{Emitted, Output};
use streamtask_core::state::StateError;
use streamtask_core::{OperatorError, Watermark, state::TaskSnapshot, time::Timer};

use streamtask_core::sync::Arc;

use crate::cancel::CancellationToken;
use crate::lock::CheckpointLock;

pub use self::context::{SourceContext, SourceGuard};
pub use self::emission::{
    CONTEXT_TIMER_OPERATOR, ContextConfigError, Emission, SourceContextConfig, TimeCharacteristic,
};

/// A legacy source: a function that runs until its input is exhausted (a finite source) or it
/// is cancelled, emitting through its [`SourceContext`].
///
/// Its checkpointed state is not a field of the function: it is [`State`](Self::State), kept
/// inside the checkpoint lock, read and written through the context's guard, snapshotted by the
/// task under the lock, and handed back (restored) before `run` starts.
///
/// There is no `cancel` method (Flink's is called from another thread while `run` holds
/// `&mut self`): a source watches [`SourceContext::is_cancelled`], sleeps with
/// [`SourceContext::sleep`], and registers [`SourceContext::on_cancel`] hooks to unblock I/O.
///
/// # Examples
///
/// A counter that updates its state and emits in one locked section, so a checkpoint never sees
/// a count that disagrees with what was emitted:
///
/// ```
/// use streamtask_core::OperatorError;
/// use streamtask_legacy::{SourceContext, SourceFunction};
///
/// struct Count {
///     to: u64,
/// }
///
/// impl SourceFunction for Count {
///     type Out = u64;
///     type State = u64; // the next number to emit
///
///     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
///         while !ctx.is_cancelled() {
///             let mut locked = ctx.lock();
///             let next = *locked.state();
///             if next == self.to {
///                 return Ok(());
///             }
///             locked.collect(next)?;
///             *locked.state_mut() = next + 1;
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait SourceFunction: Send + 'static {
    /// What it emits.
    type Out: Send + 'static;
    /// Its checkpointed state; a fresh start begins with `State::default()`.
    type State: Serialize + DeserializeOwned + Default + Send + 'static;

    /// A short name for errors, metrics and traces.
    fn name(&self) -> &str {
        "source"
    }

    /// Emits until the input is exhausted (return `Ok`) or the context is cancelled (return
    /// anything: after cancellation the result is ignored).
    ///
    /// # Errors
    ///
    /// Any error (or panic) fails the task, unless the task was cancelled.
    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, Self::Out, Self::State>,
    ) -> Result<(), OperatorError>;
}

/// The backend a source context emits into, under the checkpoint lock: what the bridge's
/// tasks implement to run legacy sources their way.
///
/// `collect`, `emit_watermark` and `emit_status` come from core's [`Output`]. Every method is
/// called with the checkpoint lock held, so an implementation needs no synchronization of its
/// own for what the lock owns.
pub trait SourceOutput<T>: Output<T> + Send {
    /// The source finished: nothing follows. Called once, under the lock, after the
    /// `Watermark::MAX` (not called when the source was cancelled or failed).
    ///
    /// # Errors
    ///
    /// Whatever ending the downstream input fails with; it fails the task.
    fn end_input(&mut self) -> Result<(), OperatorError>;

    /// Whether a record can be taken now. It is checked when a locked section starts
    /// ([`SourceContext::lock`], and so every per-emit method of the context): while it is
    /// `false` the context waits on the checkpoint lock's condition, releasing the lock, before
    /// the section touches state or emits; whoever frees room must call
    /// `CheckpointLock::notify_all`. A section that has started never waits, so a snapshot never
    /// sees half of one; the output may therefore overrun its capacity by what one section
    /// emits. Outputs that never fill up keep the default `true`.
    ///
    /// In the other direction, the context notifies the condition at the end of every locked
    /// section, so a thread draining the output can wait on the lock's condition for data.
    fn has_capacity(&self) -> bool {
        true
    }

    /// Whether the source starts after end of input: the task was restored from a snapshot of
    /// a draining stop-with-savepoint (see `ChainBody::is_drained` in the runtime kit), so
    /// [`run_source`] does not call the function's `run` and ends the input at once. Outputs
    /// of no task keep the default `false`.
    fn starts_after_end_of_input(&self) -> bool {
        false
    }
}

impl<T: Send> SourceOutput<T> for Vec<Emitted<T>> {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        self.push(Emitted::EndOfInput);
        Ok(())
    }
}

/// What the checkpoint lock owns for a source: its checkpointed state, the context's
/// bookkeeping, and the output (last, so it can be erased to `dyn SourceOutput<T>`).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use streamtask_core::operator::Emitted;
/// use streamtask_core::testing::ManualTimerService;
/// use streamtask_core::{time::ManualClock, StreamRecord};
/// use streamtask_legacy::{Emission, SourceCell, SourceContextConfig};
///
/// let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
/// let emission = Emission::new(SourceContextConfig::event_time(), timers);
/// let mut cell = SourceCell::new(7u64, emission, Vec::<Emitted<&str>>::new());
/// cell.collect_with_timestamp("a", 5).unwrap();
/// assert_eq!(*cell.state(), 7);
/// assert_eq!(cell.output()[0], Emitted::Record(StreamRecord::with_timestamp("a", 5)));
/// ```
pub struct SourceCell<S, O: ?Sized> {
    state: S,
    emission: Emission,
    /// The source function's name, for its state's errors.
    name: String,
    output: O,
}

impl<S, O> SourceCell<S, O> {
    /// A cell with the source's (restored or default) `state`, the context's `emission`
    /// bookkeeping, and the backend `output`.
    pub fn new(state: S, emission: Emission, output: O) -> Self {
        SourceCell {
            state,
            emission,
            name: "source".to_string(),
            output,
        }
    }

    /// Names the source function (its state's errors say whose state failed).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Takes the cell apart.
    pub fn into_parts(self) -> (S, Emission, O) {
        (self.state, self.emission, self.output)
    }
}

impl<S, O: ?Sized> SourceCell<S, O> {
    /// The source's checkpointed state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The source's checkpointed state, mutably.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// The backend.
    pub fn output(&self) -> &O {
        &self.output
    }

    /// The backend, mutably.
    pub fn output_mut(&mut self) -> &mut O {
        &mut self.output
    }

    /// The source's state and the backend at once (a snapshot reads the one while the other
    /// runs the checkpoint).
    pub fn state_and_output_mut(&mut self) -> (&mut S, &mut O) {
        (&mut self.state, &mut self.output)
    }

    /// The source function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The context's bookkeeping.
    pub fn emission(&self) -> &Emission {
        &self.emission
    }

    /// Emits `value` as the context's flavour says (a timestamp under ingestion time).
    ///
    /// # Errors
    ///
    /// Whatever the output fails with.
    #[inline]
    pub fn collect<T>(&mut self, value: T) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission.collect(&mut self.output, value, None)
    }

    /// Emits `value` with `timestamp` (kept only under event time).
    ///
    /// # Errors
    ///
    /// Whatever the output fails with.
    #[inline]
    pub fn collect_with_timestamp<T>(
        &mut self,
        value: T,
        timestamp: i64,
    ) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission
            .collect(&mut self.output, value, Some(timestamp))
    }

    /// Emits `watermark` if the flavour lets it through.
    ///
    /// # Errors
    ///
    /// Whatever the output fails with.
    pub fn emit_watermark<T>(&mut self, watermark: Watermark) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission.emit_watermark(&mut self.output, watermark)
    }

    /// Marks the stream temporarily idle (ignored under processing time).
    ///
    /// # Errors
    ///
    /// Whatever the output fails with.
    pub fn mark_as_temporarily_idle<T>(&mut self) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission.mark_idle(&mut self.output)
    }

    /// Delivers a context timer (one whose operator is [`CONTEXT_TIMER_OPERATOR`]): automatic
    /// watermarks and idleness checks. Call it under the lock, as every timer fires.
    ///
    /// # Errors
    ///
    /// Whatever the output fails with, or a timer registration error.
    pub fn on_context_timer<T>(&mut self, timer: Timer) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission.on_timer(&mut self.output, timer)
    }

    /// Starts the context's timers; [`run_source`] calls it before the function runs.
    ///
    /// # Errors
    ///
    /// A timer registration error.
    pub fn start_context(&mut self) -> Result<(), OperatorError> {
        self.emission.start()
    }

    /// Cancels the context's timers; [`run_source`] calls it when the function returned.
    pub fn close_context(&mut self) {
        self.emission.close();
    }

    /// The end of a finite source: `Watermark::MAX` straight to the output (whatever the
    /// flavour), then [`SourceOutput::end_input`]. [`run_source`] calls it under the lock.
    ///
    /// # Errors
    ///
    /// Whatever the output fails with.
    pub fn finish_input<T>(&mut self) -> Result<(), OperatorError>
    where
        O: SourceOutput<T>,
    {
        self.emission.close();
        self.output.emit_watermark(Watermark::MAX)?;
        self.output.end_input()
    }

    /// Writes the source's state into `snapshot` under [`TaskSnapshot::SOURCE`].
    ///
    /// # Errors
    ///
    /// [`StateError::Encode`] if the state does not encode.
    pub fn snapshot_state(&self, snapshot: &mut TaskSnapshot) -> Result<(), StateError>
    where
        S: Serialize,
    {
        snapshot.put_value(TaskSnapshot::SOURCE, &self.state)
    }
}

impl<S: fmt::Debug, O: ?Sized> fmt::Debug for SourceCell<S, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceCell")
            .field("state", &self.state)
            .field("emission", &self.emission)
            .finish_non_exhaustive()
    }
}

/// The source state a snapshot holds under [`TaskSnapshot::SOURCE`], or `S::default()` on a
/// fresh start (or when the snapshot has none).
///
/// # Errors
///
/// [`StateError::Decode`] if the bytes do not decode to `S`.
pub fn restore_source_state<S: DeserializeOwned + Default>(
    snapshot: Option<&TaskSnapshot>,
) -> Result<S, StateError> {
    Ok(snapshot
        .map(|s| s.get_value::<S>(TaskSnapshot::SOURCE))
        .transpose()?
        .flatten()
        .unwrap_or_default())
}

/// How [`run_source`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceEnd {
    /// The function returned on its own: `Watermark::MAX` and end of input were emitted.
    Finished,
    /// The token was cancelled: nothing more was emitted (and any error was ignored).
    Cancelled,
}

/// Runs `function` as Flink's `StreamSource.run` does: starts the context's timers, runs the
/// function with a [`SourceContext`] over `lock`, then, for a finite source that was not
/// cancelled, emits `Watermark::MAX` and ends the input under the lock; finally cancels the
/// context's timers.
///
/// The caller restored the state into the cell before, and turns panics into failures
/// (`streamtask_core::catch_panic`).
///
/// # Errors
///
/// What the function, or ending the input, failed with, unless `cancel` was cancelled.
pub fn run_source<F, O>(
    function: &mut F,
    lock: &Arc<CheckpointLock<SourceCell<F::State, O>>>,
    cancel: &CancellationToken,
) -> Result<SourceEnd, OperatorError>
where
    F: SourceFunction,
    O: SourceOutput<F::Out> + 'static,
{
    // A context waiting for output capacity must notice cancellation (the condition protocol:
    // change the flag, then notify).
    let waker = Arc::clone(lock);
    let _wake_on_cancel = cancel.on_cancel(move || waker.wake_all());
    lock.lock().start_context()?;
    // A source restored after end of input reads nothing: its input ends at once.
    let after_end = lock.lock().output().starts_after_end_of_input();
    let result = if after_end {
        Ok(())
    } else {
        let mut ctx = SourceContext::new(&**lock, cancel);
        function.run(&mut ctx)
    };
    let end = match result {
        _ if cancel.is_cancelled() => {
            if let Err(e) = result {
                log::debug!("{}: error after cancellation ignored: {e}", function.name());
            }
            Ok(SourceEnd::Cancelled)
        }
        Ok(()) => {
            // The end of input is the source's last emission: like a section, it waits while
            // the output has no room (a pending stop-with-savepoint, say, which ends by
            // cancelling the source: then the input does not end, the task suspends).
            let mut cell = lock.lock();
            if !cell.output().has_capacity() {
                cell.wait_until(|c| c.output().has_capacity() || cancel.is_cancelled());
            }
            if cancel.is_cancelled() {
                Ok(SourceEnd::Cancelled)
            } else {
                cell.finish_input::<F::Out>().map(|()| SourceEnd::Finished)
            }
        }
        Err(e) => Err(e),
    };
    lock.lock().close_context();
    end
}
