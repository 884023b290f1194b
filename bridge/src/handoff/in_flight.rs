//! Elements a [`HandoffReader`](super::HandoffReader) had in flight at a checkpoint: their
//! format, and [`InFlightReplay`], which replays them under the legacy and bridge models.
//!
//! # Why they are kept apart
//!
//! A handoff reader's source runs ahead of the chain: at a barrier, the handoff may hold
//! records the source's state already counts as emitted. They cannot go downstream before the
//! barrier (the chain may be an async operator that accepts nothing now), so they are part of
//! the checkpoint. They are kept under [`TaskSnapshot::SOURCE_IN_FLIGHT`], beside the source's
//! state, so [`TaskSnapshot::SOURCE`] holds exactly `encode(&State)`, what the legacy
//! `SourceStreamTask` and the bridge write for the same function:
//!
//! | key | bytes | written |
//! |---|---|---|
//! | `source` | `encode(&F::State)` | always (as every model writes it) |
//! | `source-in-flight` | `{"pending": [elements, oldest first], "finished": bool}` | only when elements were in flight or the function had finished |
//!
//! Restoring under the mailbox model, the handoff reader replays `pending` before the
//! function restarts from its state (and does not restart it when `finished`); under the legacy
//! and bridge models the job API runs the function inside an [`InFlightReplay`], which does the
//! same under the checkpoint lock. The entry is tied to its subtask: a savepoint with elements
//! in flight restores with the parallelism it was taken with.
//!
//! [`TaskSnapshot::SOURCE`]: streamtask_core::state::TaskSnapshot::SOURCE
//! [`TaskSnapshot::SOURCE_IN_FLIGHT`]: streamtask_core::state::TaskSnapshot::SOURCE_IN_FLIGHT

use std::collections::VecDeque;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use streamtask_core::state::{StateError, decode};
use streamtask_core::{OperatorError, StreamStatus};
use streamtask_legacy::{SourceContext, SourceFunction};

use super::buffer::{HandoffItem, Pending};

/// The `source-in-flight` entry, written under the reader's lock.
#[derive(Serialize)]
pub(super) struct InFlightRef<'a, T> {
    pub(super) pending: Pending<'a, T>,
    pub(super) finished: bool,
}

/// The `source-in-flight` entry, read back.
#[derive(Deserialize)]
pub(super) struct InFlight<T> {
    pub(super) pending: VecDeque<HandoffItem<T>>,
    pub(super) finished: bool,
}

impl<T: DeserializeOwned> InFlight<T> {
    pub(super) fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        decode(bytes)
    }
}

/// How many elements a [`HandoffReader`](super::HandoffReader) had in flight in a task's
/// [`TaskSnapshot::SOURCE_IN_FLIGHT`] entry, and whether its function had finished; `None` if
/// `bytes` is not such an entry. For tools that show a checkpoint's content.
///
/// # Examples
///
/// ```
/// use streamtask_bridge::source_in_flight;
///
/// let entry = br#"{"pending":[{"Watermark":5}],"finished":false}"#;
/// assert_eq!(source_in_flight(entry), Some((1, false)));
/// assert_eq!(source_in_flight(b"[]"), None);
/// ```
///
/// [`TaskSnapshot::SOURCE_IN_FLIGHT`]: streamtask_core::state::TaskSnapshot::SOURCE_IN_FLIGHT
pub fn source_in_flight(bytes: &[u8]) -> Option<(usize, bool)> {
    let entry = InFlight::<serde_json::Value>::decode(bytes).ok()?;
    Some((entry.pending.len(), entry.finished))
}

/// A legacy [`SourceFunction`] that first replays the elements a
/// [`HandoffReader`](crate::HandoffReader) had in flight when the checkpoint it restores from was
/// taken, then runs the function from its restored state (or not at all, if it had finished).
///
/// Its state is the function's own, so the checkpoints it writes are byte for byte the
/// function's. The job API runs every legacy source in one under the legacy and bridge models,
/// with the `source-in-flight` entry it took out of the task's restored snapshot (see the
/// module docs). The elements are replayed in one locked section, through the context: with an
/// event-time context (the job API's default) they pass unchanged.
///
/// # Examples
///
/// ```
/// use streamtask_bridge::InFlightReplay;
/// use streamtask_core::OperatorError;
/// use streamtask_legacy::{SourceContext, SourceFunction};
///
/// struct Count;
///
/// impl SourceFunction for Count {
///     type Out = u64;
///     type State = u64;
///     fn run(&mut self, _ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
///         Ok(())
///     }
/// }
///
/// // Nothing in flight: it runs the function as it is.
/// let source = InFlightReplay::new(Count, None);
/// assert_eq!(source.name(), "source");
/// ```
pub struct InFlightReplay<F> {
    inner: F,
    in_flight: Option<Vec<u8>>,
}

impl<F: SourceFunction> InFlightReplay<F>
where
    F::Out: DeserializeOwned,
{
    /// Runs `function` after replaying `in_flight` (the bytes of a `source-in-flight` entry;
    /// `None` for none).
    pub fn new(function: F, in_flight: Option<Vec<u8>>) -> Self {
        InFlightReplay {
            inner: function,
            in_flight,
        }
    }
}

impl<F: SourceFunction> SourceFunction for InFlightReplay<F>
where
    F::Out: DeserializeOwned,
{
    type Out = F::Out;
    type State = F::State;

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, F::Out, F::State>) -> Result<(), OperatorError> {
        if let Some(bytes) = self.in_flight.take() {
            let in_flight = InFlight::<F::Out>::decode(&bytes)
                .map_err(|e| OperatorError::state(self.inner.name().to_string(), e))?;
            let mut locked = ctx.lock();
            for item in in_flight.pending {
                match item {
                    HandoffItem::Record(record) => match record.timestamp {
                        Some(ts) => locked.collect_with_timestamp(record.value, ts)?,
                        None => locked.collect(record.value)?,
                    },
                    HandoffItem::Watermark(watermark) => locked.emit_watermark(watermark)?,
                    HandoffItem::Status(StreamStatus::Idle) => {
                        locked.mark_as_temporarily_idle()?;
                    }
                    // The context marks the stream active on its next emit.
                    HandoffItem::Status(StreamStatus::Active) => {}
                }
            }
            if in_flight.finished {
                // The function had returned: its end follows what it emitted, nothing more.
                return Ok(());
            }
        }
        self.inner.run(ctx)
    }
}

impl<F: fmt::Debug> fmt::Debug for InFlightReplay<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightReplay")
            .field("inner", &self.inner)
            .field("in_flight", &self.in_flight.as_ref().map(Vec::len))
            .finish()
    }
}
