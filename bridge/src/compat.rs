//! Declared state compatibility between a legacy `SourceFunction` and its port, so a
//! checkpoint (or savepoint) taken under one model restores under another. The one place that
//! tells a port's own state bytes from its legacy source's; the protocol is on
//! [`LegacyStateCompat`].

use std::any::type_name;
use std::fmt;
use std::task::Waker;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use streamtask_core::OperatorError;
use streamtask_core::state::{StateError, decode, encode};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// A port's declaration of how it reads (and, both ways, writes) the state of the legacy
/// source it replaces.
///
/// `LegacyState` is the legacy source's [`SourceFunction::State`](streamtask_legacy::SourceFunction::State) (the same type, or one that
/// decodes from the same JSON). Run the port inside a [`PortedReader`] to use the declaration:
/// the wrapper reads the legacy bytes, hands the decoded state to
/// [`restore_legacy_state`](Self::restore_legacy_state), and writes what
/// [`to_legacy_state`](Self::to_legacy_state) returns, so checkpoints move between the legacy
/// source and its port in either direction.
///
/// # Where a source's state lives, in every model
///
/// Every model keeps a source task's state under [`TaskSnapshot::SOURCE`](streamtask_core::state::TaskSnapshot::SOURCE) in the snapshot of the
/// source's task (`<vertex>#<subtask>`; the vertex is the name the job gave the source, the same
/// under every model). What differs is the *bytes*:
///
/// | the task runs | the bytes under `source` |
/// |---|---|
/// | a legacy `SourceFunction` (legacy `SourceStreamTask`, bridge `LegacySourceStreamTask`, or a [`HandoffReader`](crate::HandoffReader) in a mailbox `SourceStreamTask`) | `encode(&State)`: the JSON of its [`SourceFunction::State`](streamtask_legacy::SourceFunction::State) (the handoff's records in flight go beside it, under `source-in-flight`) |
/// | a `SourceReader` (in a mailbox `SourceStreamTask`, or a [`ReaderSource`](crate::ReaderSource) in a legacy task) | whatever the reader's `snapshot_state` returned, verbatim |
/// | a [`PortedReader`] around a port (either way a reader runs) | `encode(&LegacyState)`, byte for byte what the legacy source writes (declared both ways), or the port's own bytes in an envelope (declared one way) |
///
/// # The same source, or a port
///
/// Two different things cross models. The *same* source run by another model (a
/// `SourceFunction` through a `HandoffReader`, a `SourceReader` through a `ReaderSource`)
/// needs nothing from its author: the adapters write the bytes of the first two rows, exactly
/// what the source's native task writes, so its checkpoints restore under every model. A
/// *port* is a different type with a different state (a reader replacing a legacy function):
/// it restores its legacy source's state only when it says how: it implements this trait and
/// runs inside a [`PortedReader`], which reads either form and names the fix when the bytes
/// are neither (never a silent fresh start). Under the legacy model a `PortedReader` runs
/// through a `ReaderSource` like any reader, which keeps its bytes as they are: the two
/// mechanisms compose.
///
/// # The format a `PortedReader` writes and reads
///
/// | declared | snapshot | restore accepts |
/// |---|---|---|
/// | both ways ([`to_legacy_state`](LegacyStateCompat::to_legacy_state) returns `Some`) | `encode(&to_legacy_state())`: a legacy source restores from it unchanged | the legacy form, and the envelope |
/// | one way (`None`) | `{"port_state": [bytes of snapshot_state]}` | the legacy form, and the envelope |
///
/// The envelope's single field `port_state` is what tells the port's own bytes from a legacy
/// state; a legacy state type with exactly that one field would be read as an envelope.
///
/// # Examples
///
/// The counting source of MIGRATION.md and its port, compatible both ways:
///
/// ```
/// use std::task::Waker;
/// use streamtask_bridge::{LegacyStateCompat, PortedReader};
/// use streamtask_core::state::encode;
/// use streamtask_core::{OperatorError, state::TaskSnapshot};
/// use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
///
/// struct CountReader { next: u64, limit: u64 }
///
/// impl SourceReader<u64> for CountReader {
///     fn name(&self) -> &str { "count" }
///     fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
///         if self.next == self.limit {
///             return Ok(InputStatus::EndOfInput);
///         }
///         out.collect(self.next)?;
///         self.next += 1;
///         Ok(InputStatus::MoreAvailable)
///     }
///     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
///     fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
///         encode(&self.next).map_err(|e| OperatorError::state("count", e))
///     }
/// }
///
/// impl LegacyStateCompat<u64> for CountReader {
///     type LegacyState = u64; // the legacy `Count`'s State: the next number
///     fn restore_legacy_state(&mut self, next: u64) -> Result<(), OperatorError> {
///         self.next = next;
///         Ok(())
///     }
///     fn to_legacy_state(&self) -> Option<u64> {
///         Some(self.next)
///     }
/// }
///
/// // What a legacy task stored for `Count` after 7 records:
/// let mut legacy = TaskSnapshot::new();
/// legacy.put_value(TaskSnapshot::SOURCE, &7u64).unwrap();
///
/// let mut port = PortedReader::new(CountReader { next: 0, limit: 10 });
/// port.restore_state(legacy.get(TaskSnapshot::SOURCE)).unwrap();
/// assert_eq!(port.inner().next, 7);
/// // ... and its snapshot is what the legacy source restores from.
/// assert_eq!(port.snapshot_state(1).unwrap(), legacy.get(TaskSnapshot::SOURCE).unwrap());
///
/// // Bytes of some other source are refused, naming the fix.
/// let mut port = PortedReader::new(CountReader { next: 0, limit: 10 });
/// let err = port.restore_state(Some(br#"{"file":"a.txt"}"#)).unwrap_err();
/// assert!(err.to_string().contains("LegacyState"), "{err}");
/// ```
pub trait LegacyStateCompat<T>: SourceReader<T> {
    /// The legacy source's checkpointed state: its [`SourceFunction::State`](streamtask_legacy::SourceFunction::State).
    type LegacyState: Serialize + DeserializeOwned + Send + 'static;

    /// Moves a fresh reader to where the legacy source stood with `state` (called once, before
    /// the first poll, instead of [`SourceReader::restore_state`]).
    ///
    /// # Errors
    ///
    /// Any failure fails the task (a state the port cannot continue from).
    fn restore_legacy_state(&mut self, state: Self::LegacyState) -> Result<(), OperatorError>;

    /// The legacy source's state for the reader's current position, so the legacy source can
    /// restore from the port's checkpoints; `None` (the default) declares the compatibility one
    /// way only, and the port's checkpoints then keep its own
    /// [`snapshot_state`](SourceReader::snapshot_state) bytes.
    fn to_legacy_state(&self) -> Option<Self::LegacyState> {
        None
    }
}

/// Restoring a [`PortedReader`] found bytes it cannot read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateCompatError {
    /// The bytes are neither the legacy state the port declared nor the port's own envelope.
    #[error(
        "the source state is neither {legacy_state} (the LegacyState {reader} declares) nor a \
         snapshot of {reader} itself ({source}); restore from a checkpoint of the legacy source \
         whose State is {legacy_state} or of this port, or declare as LegacyState the state \
         type of the source that wrote the checkpoint"
    )]
    Incompatible {
        /// The port's name.
        reader: String,
        /// The declared legacy state type.
        legacy_state: &'static str,
        /// Why the bytes did not decode as that type.
        #[source]
        source: StateError,
    },
}

/// The port's own bytes, when it declares compatibility one way only.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    port_state: Vec<u8>,
}

/// Decodes the source-state bytes a checkpoint holds for a port: the port's own envelope, or
/// the legacy state. The one place both forms are told apart ([`PortedReader`] and the porting
/// kit use it).
pub(crate) fn read_port_state<T, R: LegacyStateCompat<T>>(
    reader: &mut R,
    bytes: &[u8],
) -> Result<(), OperatorError> {
    if let Ok(envelope) = decode::<Envelope>(bytes) {
        return reader.restore_state(Some(&envelope.port_state));
    }
    match decode::<R::LegacyState>(bytes) {
        Ok(state) => reader.restore_legacy_state(state),
        Err(source) => Err(OperatorError::user(
            reader.name().to_string(),
            StateCompatError::Incompatible {
                reader: reader.name().to_string(),
                legacy_state: type_name::<R::LegacyState>(),
                source,
            },
        )),
    }
}

/// The bytes a port's checkpoint holds: the legacy form (both ways) or the envelope.
pub(crate) fn write_port_state<T, R: LegacyStateCompat<T>>(
    reader: &mut R,
    checkpoint_id: u64,
) -> Result<Vec<u8>, OperatorError> {
    let encoded = match reader.to_legacy_state() {
        Some(state) => encode(&state),
        None => {
            let port_state = reader.snapshot_state(checkpoint_id)?;
            encode(&Envelope { port_state })
        }
    };
    encoded.map_err(|e| OperatorError::state(reader.name().to_string(), e))
}

/// Whether `bytes` (a port's checkpoint) are in the legacy form, so the legacy source can
/// restore from them (the compatibility is declared both ways).
pub(crate) fn is_legacy_form(bytes: &[u8]) -> bool {
    decode::<Envelope>(bytes).is_err()
}

/// A port run with its declared [`LegacyStateCompat`]: a [`SourceReader`] whose checkpoints
/// hold the legacy source's state, and that restores from the legacy source's checkpoints.
///
/// Use it wherever the port runs (`add_reader(name, |_| PortedReader::new(port))`): under the
/// mailbox and bridge models it restores a checkpoint the legacy source took under the legacy
/// or bridge model, and (declared both ways) the legacy source restores from its checkpoints.
/// Everything else (polls, wakers, notices, close) is the port's own. See the
/// [`LegacyStateCompat`] for the bytes.
pub struct PortedReader<R> {
    inner: R,
}

impl<R> PortedReader<R> {
    /// Runs `port` with its declared compatibility.
    pub fn new(port: R) -> Self {
        PortedReader { inner: port }
    }

    /// The port.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// The port, unwrapped.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<T, R: LegacyStateCompat<T>> SourceReader<T> for PortedReader<R> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        match state {
            Some(bytes) => read_port_state(&mut self.inner, bytes),
            None => self.inner.restore_state(None),
        }
    }

    #[inline]
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, T>,
    ) -> Result<InputStatus, OperatorError> {
        self.inner.poll_next(output)
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.inner.register_waker(waker);
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        write_port_state(&mut self.inner, checkpoint_id)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.inner.notify_checkpoint_complete(checkpoint_id)
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.inner.notify_checkpoint_aborted(checkpoint_id)
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.inner.close()
    }
}

impl<R: fmt::Debug> fmt::Debug for PortedReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PortedReader").field(&self.inner).finish()
    }
}
