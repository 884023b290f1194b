//! [`ReaderSource`]: a new-style [`SourceReader`] run as a legacy [`SourceFunction`], the
//! opposite of the [`HandoffReader`](crate::HandoffReader).
//!
//! The protocol and its limits are written out on [`ReaderSource`].

use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc as StdArc;
use std::task::{Wake, Waker};

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use streamtask_core::operator::Emitted;
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_core::{OperatorError, StreamStatus};
use streamtask_legacy::{CancellationToken, SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// A [`SourceReader`] run as a legacy [`SourceFunction`], so a ported source can run under the
/// legacy model (or the bridge).
///
/// # The protocol
///
/// The reader lives inside the checkpoint lock, in the source's state
/// ([`ReaderSourceState`]), so a snapshot taken under the lock can ask it for its position.
///
/// ```text
/// source thread                                         any thread
/// -------------                                         ----------
/// lock { restore the reader from the restored bytes }
/// loop until cancelled or EndOfInput:
///   ctx.lock() (waits for room BEFORE the section):
///     poll the reader once into a local batch
///     emit the batch through the guard
///     NothingAvailable: register the waker (still locked)
///   unlock
///   NothingAvailable: sleep until the waker or        reader's I/O: waker.wake()
///                     cancellation wakes us           task: cancel() (a token hook wakes us)
/// lock { take the reader out }; close it
/// ```
///
/// Polling, emitting and registering happen in one locked section, so a snapshot never sees the
/// reader advanced past records not yet emitted, and a wake between the poll and the
/// registration is not lost (the reader wakes at once if data arrived meanwhile, as its
/// protocol requires). The sleep is on a flag and condition variable: the waker sets the flag
/// before notifying, the sleeper checks it (and the token) under the same mutex.
///
/// # Limits
///
/// The legacy snapshot does not say which checkpoint it is for, so the reader's
/// [`snapshot_state`](SourceReader::snapshot_state) gets a sequence number of this source's
/// snapshots rather than the checkpoint id, and checkpoint notices do not reach the reader
/// (the legacy model delivers them to the chain only).
///
/// # State across models
///
/// The legacy task stores exactly the reader's own snapshot bytes (see
/// [`ReaderSourceState`]), which is what a mailbox `SourceStreamTask` stores for the same reader: a
/// checkpoint or savepoint taken with the reader under one model restores under any other. The
/// bytes must be JSON (written with `streamtask_core::state::encode`).
///
/// Run it with an event-time context (`SourceContextConfig::event_time()`, the default of the
/// job API for readers) so the reader's timestamps and watermarks pass through unchanged.
///
/// # Examples
///
/// ```
/// use std::task::Waker;
/// use streamtask_bridge::ReaderSource;
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::state::encode;
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::OperatorError;
/// use streamtask_legacy::{SourceContextConfig, SourceStreamTask};
/// use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
///
/// struct Count { next: u64, end: u64 }
///
/// impl SourceReader<u64> for Count {
///     fn name(&self) -> &str { "count" }
///     fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
///         if self.next == self.end {
///             return Ok(InputStatus::EndOfInput);
///         }
///         out.collect_with_timestamp(self.next, self.next as i64)?;
///         self.next += 1;
///         Ok(InputStatus::MoreAvailable)
///     }
///     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
///     fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
///         encode(&self.next).map_err(|e| OperatorError::state("count", e))
///     }
/// }
///
/// let task = SourceStreamTask::new(
///     TaskConfig::new("count"),
///     ReaderSource::new(Count { next: 0, end: 10 }),
///     Map::new("id", |n: u64| n),
///     Vec::<Emitted<u64>>::new(),
/// )
/// .with_context(SourceContextConfig::event_time())
/// .spawn();
/// assert!(task.join().is_finished());
/// ```
pub struct ReaderSource<R, T> {
    name: String,
    reader: Option<R>,
    batch: Vec<Emitted<T>>,
}

impl<R, T> ReaderSource<R, T>
where
    R: SourceReader<T> + 'static,
    T: Send + 'static,
{
    /// A source function that runs `reader`.
    pub fn new(reader: R) -> Self {
        ReaderSource {
            name: reader.name().to_string(),
            reader: Some(reader),
            batch: Vec::new(),
        }
    }
}

impl<R, T> SourceFunction for ReaderSource<R, T>
where
    R: SourceReader<T> + 'static,
    T: Send + 'static,
{
    type Out = T;
    type State = ReaderSourceState<R, T>;

    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, T, Self::State>) -> Result<(), OperatorError> {
        let Some(mut reader) = self.reader.take() else {
            return Err(OperatorError::user(
                self.name.clone(),
                "a ReaderSource runs once; build a new one (with a new reader) per task",
            ));
        };
        {
            let mut locked = ctx.lock();
            let restored = locked.state_mut().restored.take();
            restore_reader(&mut reader, restored.as_deref())?;
            *locked.state_mut().reader.get_mut() = Some(reader);
        }
        let signal = StdArc::new(Signal::default());
        let waker = Waker::from(StdArc::clone(&signal));
        let _wake_on_cancel = {
            let signal = StdArc::clone(&signal);
            ctx.on_cancel(move || signal.set())
        };
        let polled = self.poll_until_end(ctx, &signal, &waker);
        // The reader leaves the state and closes; its last position stays, so a snapshot taken
        // after this (before the task finished) does not rewind the source.
        let reader = {
            let mut locked = ctx.lock();
            let state = locked.state_mut();
            let reader = state.reader.get_mut().take();
            if let Some(mut reader) = reader {
                let seq = state.snapshots.get() + 1;
                state.snapshots.set(seq);
                match reader.snapshot_state(seq) {
                    Ok(bytes) => state.restored = Some(bytes),
                    Err(e) => log::warn!("{}: the reader's last position: {e}", self.name),
                }
                Some(reader)
            } else {
                None
            }
        };
        if let Some(mut reader) = reader
            && let Err(e) = reader.close()
        {
            log::warn!("{}: closing the reader failed: {e}", self.name);
        }
        polled
    }
}

impl<R, T> ReaderSource<R, T>
where
    R: SourceReader<T> + 'static,
    T: Send + 'static,
{
    fn poll_until_end(
        &mut self,
        ctx: &mut SourceContext<'_, T, ReaderSourceState<R, T>>,
        signal: &Signal,
        waker: &Waker,
    ) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let status = {
                // Waits for room before the section: the poll, its emits and the registration
                // are one section.
                let mut locked = ctx.lock();
                if locked.is_cancelled() {
                    // Cancelled while waiting for room (a stop-with-savepoint that completed,
                    // say): the section's emits would be refused, so the reader is not polled
                    // past the position its last snapshot holds.
                    break;
                }
                let polled = {
                    let reader = locked
                        .state_mut()
                        .reader
                        .get_mut()
                        .as_mut()
                        .expect("the reader is in the state while the source runs");
                    reader.poll_next(&mut ReaderOutput::new(&mut self.batch))
                };
                for element in self.batch.drain(..) {
                    match element {
                        Emitted::Record(record) => match record.timestamp {
                            Some(ts) => locked.collect_with_timestamp(record.value, ts)?,
                            None => locked.collect(record.value)?,
                        },
                        Emitted::Watermark(watermark) => locked.emit_watermark(watermark)?,
                        Emitted::Status(StreamStatus::Idle) => locked.mark_as_temporarily_idle()?,
                        // The context marks the stream active on its next emit.
                        Emitted::Status(StreamStatus::Active) => {}
                        Emitted::Barrier(_) | Emitted::EndOfInput => {
                            unreachable!("a reader output emits records, watermarks and status")
                        }
                    }
                }
                let status = polled?;
                if status == InputStatus::NothingAvailable {
                    let reader = locked.state_mut().reader.get_mut().as_mut();
                    if let Some(reader) = reader {
                        reader.register_waker(waker);
                    }
                }
                status
            };
            match status {
                InputStatus::MoreAvailable => {}
                InputStatus::NothingAvailable => signal.wait(ctx.cancellation()),
                InputStatus::EndOfInput => return Ok(()),
            }
        }
        Ok(())
    }
}

impl<R, T> fmt::Debug for ReaderSource<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderSource")
            .field("name", &self.name)
            .field("started", &self.reader.is_none())
            .finish_non_exhaustive()
    }
}

/// The legacy state of a [`ReaderSource`]: the reader itself while the source runs (its
/// position is asked for when a snapshot is taken, under the lock), or the bytes a restore
/// brought until the source starts (and the reader's last position once it ended).
///
/// # The bytes
///
/// It encodes as the reader's [`snapshot_state`](SourceReader::snapshot_state) bytes, verbatim:
/// the legacy task stores `encode(&state)` under [`TaskSnapshot::SOURCE`], and that is byte
/// for byte what a mailbox `SourceStreamTask` stores for the same reader, so a checkpoint or savepoint
/// of a job whose source is a `SourceReader` restores under every model. The reader's bytes must
/// therefore be JSON (what [`encode`](streamtask_core::state::encode) writes, as all of
/// streamtask's state is); other bytes fail the snapshot with an error naming the fix, rather
/// than being written in a form only this adapter could read.
///
/// | written | when |
/// |---|---|
/// | the reader's bytes | the reader runs, or ran (its last position), or the source was restored and has not started yet (the restored bytes) |
/// | `null` | a fresh source, snapshotted before its first locked section (the reader is not in the state yet): no position |
///
/// Restoring reads the same bytes, `null` as a fresh start. Snapshots of earlier versions held
/// the reader's bytes as a JSON array of numbers (`Option<Vec<u8>>`); such an array is still
/// read, when the reader refuses it as its own state (see [`ReaderSource`]'s restore).
///
/// [`TaskSnapshot::SOURCE`]: streamtask_core::state::TaskSnapshot::SOURCE
pub struct ReaderSourceState<R, T> {
    reader: RefCell<Option<R>>,
    restored: Option<Vec<u8>>,
    snapshots: Cell<u64>,
    _records: PhantomData<fn() -> T>,
}

impl<R, T> Default for ReaderSourceState<R, T> {
    fn default() -> Self {
        ReaderSourceState {
            reader: RefCell::new(None),
            restored: None,
            snapshots: Cell::new(0),
            _records: PhantomData,
        }
    }
}

/// The reader's bytes as a raw JSON value, or why they cannot be one.
fn raw_json(name: &str, bytes: Vec<u8>) -> Result<Box<RawValue>, String> {
    let len = bytes.len();
    let not_json = || {
        format!(
            "the state of reader {name:?} is not JSON; a ReaderSource writes a reader's bytes \
             verbatim into the legacy snapshot (the same bytes a mailbox SourceStreamTask stores), so \
             encode the reader's position with streamtask_core::state::encode"
        )
    };
    let text = String::from_utf8(bytes).map_err(|_| not_json())?;
    let raw = RawValue::from_string(text).map_err(|_| not_json())?;
    // Surrounding whitespace would not survive the round trip: only exact bytes are the same.
    if raw.get().len() != len {
        return Err(not_json());
    }
    Ok(raw)
}

impl<R: SourceReader<T>, T> Serialize for ReaderSourceState<R, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Ok(mut slot) = self.reader.try_borrow_mut() else {
            return Err(S::Error::custom(
                "the reader is in use; snapshot only under the checkpoint lock",
            ));
        };
        let (name, bytes) = match slot.as_mut() {
            Some(reader) => {
                let seq = self.snapshots.get() + 1;
                self.snapshots.set(seq);
                let bytes = reader.snapshot_state(seq).map_err(S::Error::custom)?;
                (reader.name().to_string(), Some(bytes))
            }
            None => (String::from("(not running)"), self.restored.clone()),
        };
        match bytes {
            Some(bytes) => raw_json(&name, bytes)
                .map_err(S::Error::custom)?
                .serialize(serializer),
            None => serializer.serialize_none(),
        }
    }
}

impl<'de, R, T> Deserialize<'de> for ReaderSourceState<R, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)
            .map_err(|e| D::Error::custom(format!("not a ReaderSource state: {e}")))?;
        let restored = (raw.get() != "null").then(|| raw.get().as_bytes().to_vec());
        Ok(ReaderSourceState {
            restored,
            ..ReaderSourceState::default()
        })
    }
}

/// Restores `reader` from the bytes of a snapshot: the reader's own bytes (what every model
/// writes), or, when the reader refuses them, the JSON array of numbers a ReaderSource of an
/// earlier version wrapped them in. The reader must leave itself unchanged when its
/// `restore_state` fails (decode, then assign), as the readers of this workspace do.
fn restore_reader<R: SourceReader<T>, T>(
    reader: &mut R,
    restored: Option<&[u8]>,
) -> Result<(), OperatorError> {
    let Some(bytes) = restored else {
        return reader.restore_state(None);
    };
    match reader.restore_state(Some(bytes)) {
        Ok(()) => Ok(()),
        Err(error) => match serde_json::from_slice::<Vec<u8>>(bytes) {
            Ok(inner) => {
                log::info!(
                    "{}: restoring from a ReaderSource snapshot of an earlier version (its \
                     bytes in a JSON array)",
                    reader.name()
                );
                reader.restore_state(Some(&inner))
            }
            Err(_) => Err(error),
        },
    }
}

impl<R, T> fmt::Debug for ReaderSourceState<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderSourceState")
            .field(
                "running",
                &self.reader.try_borrow().map(|r| r.is_some()).ok(),
            )
            .field("restored", &self.restored.as_ref().map(Vec::len))
            .finish()
    }
}

/// A flag the reader's waker sets, and the source thread sleeps on.
#[derive(Default)]
struct Signal {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Signal {
    fn set(&self) {
        let mut set = self.set.lock();
        *set = true;
        self.changed.notify_all();
    }

    /// Sleeps until the flag is set or `cancel` fires; clears the flag.
    fn wait(&self, cancel: &CancellationToken) {
        let mut set = self.set.lock();
        // The cancel hook sets the flag after the token's flag, so checking both here, under
        // the flag's mutex, misses neither.
        while !*set && !cancel.is_cancelled() {
            self.changed.wait(&mut set);
        }
        *set = false;
    }
}

impl Wake for Signal {
    fn wake(self: StdArc<Self>) {
        self.set();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.set();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::state::{decode, encode};

    /// A reader of one position, for the state's bytes.
    struct At(u64);

    impl SourceReader<u64> for At {
        fn name(&self) -> &str {
            "at"
        }
        fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
            if let Some(bytes) = state {
                self.0 = decode(bytes).map_err(|e| OperatorError::state("at", e))?;
            }
            Ok(())
        }
        fn poll_next(
            &mut self,
            _: &mut ReaderOutput<'_, u64>,
        ) -> Result<InputStatus, OperatorError> {
            Ok(InputStatus::EndOfInput)
        }
        fn register_waker(&mut self, waker: &Waker) {
            waker.wake_by_ref();
        }
        fn snapshot_state(&mut self, _: u64) -> Result<Vec<u8>, OperatorError> {
            Ok(self.0.to_le_bytes().to_vec())
        }
    }

    #[test]
    fn the_state_encodes_as_the_readers_bytes_verbatim() {
        for bytes in [&b"42"[..], br#"{"format":"list","items":[[1,9]]}"#, b"null"] {
            let state: ReaderSourceState<At, u64> = decode(bytes).unwrap();
            assert_eq!(encode(&state).unwrap(), bytes);
        }
    }

    #[test]
    fn an_earlier_versions_array_is_read_when_the_reader_refuses_it() {
        let old = encode(&Some(encode(&7u64).unwrap())).unwrap(); // `[55]`
        let state: ReaderSourceState<At, u64> = decode(&old).unwrap();
        let mut reader = At(0);
        restore_reader(&mut reader, state.restored.as_deref()).unwrap();
        assert_eq!(reader.0, 7);
    }

    #[test]
    fn bytes_that_are_not_json_fail_the_snapshot_naming_the_fix() {
        let state = ReaderSourceState::<At, u64>::default();
        *state.reader.borrow_mut() = Some(At(3));
        let err = encode(&state).unwrap_err().to_string();
        assert!(err.contains("streamtask_core::state::encode"), "{err}");
    }
}
