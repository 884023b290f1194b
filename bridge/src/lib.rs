//! Legacy sources in the mailbox model: the bridge Flink built from the checkpoint-lock model to
//! the mailbox model (a legacy source on its own thread, mails under the checkpoint lock), a
//! way across it that no Flink version offered (the handoff reader), and a kit that proves a
//! port before it ships.
//!
//! # Contents
//!
//! | item | what |
//! |---|---|
//! | [`LegacySourceStreamTask`], [`TaskHandle`](streamtask_runtime::TaskHandle), [`ChainingError`] | a legacy `SourceFunction`, unchanged, on its own thread; the task thread takes mails only, each under the checkpoint lock (Flink 1.10's `SourceStreamTask`); the chaining rule (FLINK-16219) |
//! | [`CheckpointLockExecutor`] | the mailbox processor's action executor that runs each mail under the lock (control mails bypass it) |
//! | [`HandoffReader`], [`DEFAULT_HANDOFF_CAPACITY`] | a legacy `SourceFunction` as a new-style `SourceReader`, through a bounded handoff checkpointed with the source's state |
//! | [`InFlightReplay`] | a legacy `SourceFunction` that first replays the records a `HandoffReader` had in flight in the checkpoint it restores, so the legacy and bridge models restore the mailbox model's checkpoints |
//! | [`ReaderSource`], [`ReaderSourceState`] | the other way: a `SourceReader` run as a legacy `SourceFunction` |
//! | [`LegacyStateCompat`], [`PortedReader`], [`StateCompatError`] | a port's declared state compatibility with its legacy source, so checkpoints move between the models in either direction |
//! | [`porting`] | the porting kit: a legacy source and its port on the same input and checkpoint schedule, compared record by record |
//!
//! # Which to use
//!
//! | step | runs the source | chain behind it | cost |
//! |---|---|---|---|
//! | legacy `SourceStreamTask` (`streamtask-legacy`) | on the task thread, emits under the lock | anything but async I/O | the lock per section; triggers and timers contend for it |
//! | [`LegacySourceStreamTask`] | on its own thread, emits under the lock | anything but operators that wait for their own events | the same lock, plus one mailbox thread; mails wait for the source's sections |
//! | [`HandoffReader`] in a mailbox `SourceStreamTask` | on its own thread, emits into the handoff | anything, async I/O included | one queue hop per record; in-flight records in every checkpoint |
//! | a native `SourceReader` port, proven with [`porting::PortingKit`] | on the mailbox thread | anything | none of the above |
//!
//! # State across models
//!
//! The adapters keep a source's checkpoints the source's own: a [`HandoffReader`] writes under
//! `source` exactly the `encode(&State)` a legacy task writes for the same function (the
//! records in its handoff go beside it, under `source-in-flight`, which every model replays),
//! and a [`ReaderSource`] writes exactly the reader's `snapshot_state` bytes, as a mailbox task
//! does. So a checkpoint or savepoint of a job restores under every model, whichever adapter
//! ran its source. A port (a *different* type replacing a legacy source) declares how it reads
//! the legacy state with [`LegacyStateCompat`] and runs in a [`PortedReader`].
//!
//! The threads, mails and lock protocol of each are written out on the types:
//! [`LegacySourceStreamTask`] (the source thread / mailbox thread hand-over, cancellation of a
//! source blocked on the lock, the lifecycle), [`HandoffReader`] (the handoff, its wakeups and
//! its snapshot), [`ReaderSource`] (polling under the guard).
//!
//! # Name families
//!
//! As in the rest of the workspace: builders are `new(required..)`, then `with_x(..)`, ending in
//! `spawn()` (tasks) or `run()` (the kit); every task handle offers `name`, `metrics`,
//! `trigger_checkpoint`, `notify_checkpoint_complete` / `_aborted`, `cancel`, `is_done`, `join`.
//!
//! # Examples
//!
//! One legacy source, unchanged, three ways: the legacy model, the bridge, and the handoff
//! reader in a mailbox task. All three emit the same records.
//!
//! ```
//! use streamtask_bridge::{HandoffReader, LegacySourceStreamTask};
//! use streamtask_core::operator::{Emitted, Map, Output, TaskOutput};
//! use streamtask_core::task::TaskConfig;
//! use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark};
//! use streamtask_legacy::{SourceContext, SourceFunction, SourceStreamTask};
//! use std::sync::{Arc, Mutex};
//!
//! /// The canonical checkpointed legacy source: state and emit in one locked section.
//! struct Count(u64);
//!
//! impl SourceFunction for Count {
//!     type Out = u64;
//!     type State = u64;
//!     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
//!         while !ctx.is_cancelled() {
//!             let mut locked = ctx.lock();
//!             let n = *locked.state();
//!             if n == self.0 {
//!                 return Ok(());
//!             }
//!             locked.collect(n)?;
//!             *locked.state_mut() = n + 1;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! /// Keeps the records where the test can read them.
//! #[derive(Clone, Default)]
//! struct Collect(Arc<Mutex<Vec<u64>>>);
//!
//! impl Output<u64> for Collect {
//!     fn collect(&mut self, record: StreamRecord<u64>) -> Result<(), OperatorError> {
//!         self.0.lock().unwrap().push(record.value);
//!         Ok(())
//!     }
//!     fn emit_watermark(&mut self, _: Watermark) -> Result<(), OperatorError> { Ok(()) }
//!     fn emit_status(&mut self, _: StreamStatus) -> Result<(), OperatorError> { Ok(()) }
//! }
//!
//! impl TaskOutput<u64> for Collect {
//!     fn broadcast_barrier(&mut self, _: CheckpointBarrier) -> Result<(), OperatorError> { Ok(()) }
//!     fn end_of_input(&mut self) -> Result<(), OperatorError> { Ok(()) }
//! }
//!
//! let square = || Map::new("square", |n: u64| n * n);
//! let (legacy, bridge, handoff) = (Collect::default(), Collect::default(), Collect::default());
//!
//! let task = SourceStreamTask::new(TaskConfig::new("legacy"), Count(100), square(), legacy.clone())
//!     .spawn();
//! assert!(task.join().is_finished());
//!
//! let task = LegacySourceStreamTask::new(TaskConfig::new("bridge"), Count(100), square(), bridge.clone())
//!     .spawn()
//!     .expect("no operator behind the source waits for its own events");
//! assert!(task.join().is_finished());
//!
//! let reader = HandoffReader::new(Count(100)).with_capacity(8);
//! let task = streamtask_mailbox::SourceStreamTask::new(TaskConfig::new("handoff"), reader, square(), handoff.clone()).spawn();
//! assert!(task.join().is_finished());
//!
//! let expected: Vec<u64> = (0..100).map(|n| n * n).collect();
//! assert_eq!(*legacy.0.lock().unwrap(), expected);
//! assert_eq!(*bridge.0.lock().unwrap(), expected);
//! assert_eq!(*handoff.0.lock().unwrap(), expected);
//! ```

#![forbid(unsafe_code)]

mod compat;
mod executor;
mod handoff;
pub mod porting;
mod reader_source;
mod task;

pub use crate::compat::{LegacyStateCompat, PortedReader, StateCompatError};
pub use crate::executor::CheckpointLockExecutor;
pub use crate::handoff::{
    DEFAULT_HANDOFF_CAPACITY, HandoffReader, InFlightReplay, source_in_flight,
};
pub use crate::reader_source::{ReaderSource, ReaderSourceState};
pub use crate::task::{ChainingError, LegacySourceStreamTask};

/// The source-exit latch, visible to the loom models only (`--cfg loom`): not part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub use crate::task::SourceExit;
/// The queue of checkpoint triggers waiting for the lock, visible to the loom models only.
#[cfg(loom)]
#[doc(hidden)]
pub use crate::task::{PendingTrigger, PendingTriggers};
