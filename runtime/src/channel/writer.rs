//! The record writer: a task's output into its downstream channels; see [`RecordWriter`].

use std::fmt;
use std::task::Waker;
use std::time::Instant;

// std's `Arc`: the task's metrics are shared as `std::sync::Arc<TaskMetrics>` (see `TaskConfig`).
use std::sync::Arc;

use super::bounded::{Sender, TrySendError};
use streamtask_core::OperatorError;
use streamtask_core::keygroup::{
    DEFAULT_MAX_PARALLELISM, StableKey, key_group_of, operator_index_for_key_group,
};
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{Context, Operator, Output, TaskOutput};
use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord, StreamStatus, Watermark};

/// How records are spread over the downstream channels.
pub enum Partitioner<T> {
    /// Exactly one channel gets everything (the next task runs with the same parallelism).
    Forward,
    /// Channel `hash(value) % channels`: equal hashes always meet in the same channel. For
    /// keyed state use [`Partitioner::by_key`], which routes by key group.
    Hash(Box<dyn Fn(&T) -> u64 + Send>),
    /// By key group, as Flink's `KeyGroupStreamPartitioner`: the value's key group (of
    /// `max_parallelism`) goes to the channel of the subtask whose key-group range holds it
    /// ([`operator_index_for_key_group`]). Build it with [`Partitioner::by_key`].
    KeyGroups {
        /// The max parallelism the key groups are counted in.
        max_parallelism: u32,
        /// The value's key group.
        key_group: Box<dyn Fn(&T) -> u32 + Send>,
    },
    /// Channels in turn, one record each.
    RoundRobin,
    /// Every channel gets a copy; the function makes the copies (build it with
    /// [`Partitioner::broadcast`]).
    Broadcast(fn(&T) -> T),
    /// The channel a function picks from the value and the channel count (build it with
    /// [`Partitioner::custom`]); an index past the last channel wraps around (modulo).
    Custom(PickChannel<T>),
}

/// A custom partitioner's choice: `(value, channels) -> channel`.
pub type PickChannel<T> = Box<dyn FnMut(&T, usize) -> usize + Send>;

impl<T> Partitioner<T> {
    /// Hash partitioning by `hash`.
    pub fn hash(hash: impl Fn(&T) -> u64 + Send + 'static) -> Self {
        Partitioner::Hash(Box::new(hash))
    }

    /// Partitioning by the key `key` extracts, through key groups of the default max
    /// parallelism ([`DEFAULT_MAX_PARALLELISM`]); see
    /// [`by_key_with_max_parallelism`](Self::by_key_with_max_parallelism).
    pub fn by_key<K: StableKey>(key: impl Fn(&T) -> K + Send + 'static) -> Self {
        Self::by_key_with_max_parallelism(DEFAULT_MAX_PARALLELISM, key)
    }

    /// Partitioning by the key `key` extracts: the key's stable encoding is hashed (murmur3) to
    /// one of `max_parallelism` key groups, and the key group to the subtask that owns it. The
    /// same key goes to the same subtask in every run, on every platform and in every release,
    /// and keyed state stored per key group follows it when the parallelism changes.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask_runtime::channel::Partitioner;
    ///
    /// let p = Partitioner::by_key_with_max_parallelism(128, |v: &(u64, &str)| v.0);
    /// assert_eq!(format!("{p:?}"), "KeyGroups(128)");
    /// ```
    pub fn by_key_with_max_parallelism<K: StableKey>(
        max_parallelism: u32,
        key: impl Fn(&T) -> K + Send + 'static,
    ) -> Self {
        Partitioner::KeyGroups {
            max_parallelism,
            key_group: Box::new(move |value| key_group_of(&key(value), max_parallelism)),
        }
    }

    /// Custom partitioning: `pick(value, channels)` names the channel of `value`, as Flink's
    /// `partitionCustom`. It may keep state (a shuffle's random generator).
    pub fn custom(pick: impl FnMut(&T, usize) -> usize + Send + 'static) -> Self {
        Partitioner::Custom(Box::new(pick))
    }

    /// Every record to the first channel, as Flink's `global()`.
    pub fn global() -> Self {
        Partitioner::custom(|_, _| 0)
    }

    /// A channel drawn uniformly at random per record, as Flink's `shuffle()`, from a generator
    /// seeded with `seed` (so a run is reproducible; give each upstream subtask its own).
    pub fn shuffle(seed: u64) -> Self {
        let mut state = seed;
        Partitioner::custom(move |_, channels| {
            // SplitMix64: one step per record.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // The remainder is below the channel count, so it fits a usize.
            (z % channels as u64) as usize
        })
    }

    /// Broadcast: every channel gets a clone of every record.
    pub fn broadcast() -> Self
    where
        T: Clone,
    {
        Partitioner::Broadcast(T::clone)
    }
}

impl<T> fmt::Debug for Partitioner<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Partitioner::KeyGroups {
            max_parallelism, ..
        } = self
        {
            return write!(f, "KeyGroups({max_parallelism})");
        }
        f.write_str(match self {
            Partitioner::Forward => "Forward",
            Partitioner::Hash(_) => "Hash(..)",
            Partitioner::RoundRobin => "RoundRobin",
            Partitioner::Broadcast(_) => "Broadcast(..)",
            Partitioner::Custom(_) => "Custom(..)",
            Partitioner::KeyGroups { .. } => "KeyGroups(..)",
        })
    }
}

/// A record writer could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriterError {
    /// No downstream channel was given.
    #[error("a record writer needs at least one channel; pass the senders to the downstream tasks")]
    NoChannels,
    /// Forward partitioning got more than one channel.
    #[error(
        "forward partitioning needs exactly one channel, got {channels}; use round robin, hash \
         or broadcast partitioning for several"
    )]
    ForwardNeedsOneChannel {
        /// How many channels it got.
        channels: usize,
    },
}

/// A task's output into its downstream channels; implements [`TaskOutput`].
///
/// Records go to one channel (or all, when broadcasting) chosen by a [`Partitioner`];
/// watermarks, status changes, barriers and end of input go to every channel. A send into a full
/// channel blocks until space frees: that is backpressure, and in the legacy model it blocks
/// while holding the checkpoint lock, as Flink's did. The mailbox model avoids blocking by
/// feeding input only while [`TaskOutput::is_available`] holds, and otherwise suspends until the
/// waker registered with [`TaskOutput::register_availability_waker`] fires.
///
/// A channel whose receiver is gone makes every call fail with [`OperatorError::OutputClosed`].
/// To unblock a writer stuck on a full channel (cancellation), drop that channel's receiver.
///
/// With [`with_metrics`](Self::with_metrics) it counts `records_out` (once per record, also when
/// broadcast) and adds the time spent blocked on full channels to `backpressured_micros`; with
/// [`with_live`](Self::with_live) (or `with_metrics`) a send blocked on a full channel shows in
/// the task's live state while it blocks.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{Partitioner, RecordWriter, bounded};
/// use streamtask_core::{operator::Output, StreamElement, StreamRecord, operator::TaskOutput, Watermark};
///
/// let (tx0, rx0) = bounded(8).unwrap();
/// let (tx1, rx1) = bounded(8).unwrap();
/// let mut writer = RecordWriter::new(vec![tx0, tx1], Partitioner::RoundRobin).unwrap();
/// writer.collect(StreamRecord::new('a')).unwrap();
/// writer.collect(StreamRecord::new('b')).unwrap();
/// writer.emit_watermark(Watermark(3)).unwrap(); // to every channel
/// assert!(writer.is_available());
///
/// assert_eq!(rx0.try_recv(), Ok(StreamElement::Record(StreamRecord::new('a'))));
/// assert_eq!(rx1.try_recv(), Ok(StreamElement::Record(StreamRecord::new('b'))));
/// assert_eq!(rx0.try_recv(), Ok(StreamElement::Watermark(Watermark(3))));
/// assert_eq!(rx1.try_recv(), Ok(StreamElement::Watermark(Watermark(3))));
/// ```
pub struct RecordWriter<T> {
    channels: Vec<Sender<StreamElement<T>>>,
    partitioner: Partitioner<T>,
    /// The next channel of round-robin partitioning.
    next: usize,
    metrics: Option<Arc<TaskMetrics>>,
    /// Whose live state shows a blocked send (see
    /// [`TaskLive::send_blocked`](streamtask_core::live::TaskLive::send_blocked)).
    live: Option<Arc<TaskMetrics>>,
    /// Its name as the last operator of a chain ([`named`](Self::named)).
    name: String,
}

impl<T> RecordWriter<T> {
    /// A writer into `channels`, spreading records with `partitioner`.
    ///
    /// # Errors
    ///
    /// [`WriterError::NoChannels`] if `channels` is empty;
    /// [`WriterError::ForwardNeedsOneChannel`] for [`Partitioner::Forward`] over several.
    pub fn new(
        channels: Vec<Sender<StreamElement<T>>>,
        partitioner: Partitioner<T>,
    ) -> Result<Self, WriterError> {
        if channels.is_empty() {
            return Err(WriterError::NoChannels);
        }
        if matches!(partitioner, Partitioner::Forward) && channels.len() != 1 {
            return Err(WriterError::ForwardNeedsOneChannel {
                channels: channels.len(),
            });
        }
        Ok(RecordWriter {
            channels,
            partitioner,
            next: 0,
            metrics: None,
            live: None,
            name: String::from("record writer"),
        })
    }

    /// Names the writer as the last operator of a task's chain (see the
    /// [`Operator`] implementation): the name operator errors and reports show.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The task output of a chain that ends in this writer: barriers, end of input and
    /// availability, over the same channels (see [`WriterControl`]).
    pub fn control(&self) -> WriterControl<T> {
        WriterControl {
            writer: RecordWriter {
                channels: self.channels.clone(),
                // Records never pass the control side: the partitioner is never asked.
                partitioner: Partitioner::RoundRobin,
                next: 0,
                metrics: None,
                live: self.live.clone(),
                name: self.name.clone(),
            },
        }
    }

    /// Counts `records_out` and backpressured time into `metrics`, and shows a blocked send in
    /// its live state.
    pub fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.live = Some(Arc::clone(&metrics));
        self.metrics = Some(metrics);
        self
    }

    /// Shows a send blocked on a full channel in `metrics.live` while it blocks, counting
    /// nothing (for a writer whose task counts its records elsewhere).
    pub fn with_live(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.live = Some(metrics);
        self
    }

    /// Number of downstream channels.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// The partitioner.
    pub fn partitioner(&self) -> &Partitioner<T> {
        &self.partitioner
    }

    /// Sends the element `make` builds (one without a record, so `T` need not be `Clone`) to
    /// every channel, blocking on full ones.
    fn send_to_all(&mut self, make: impl Fn() -> StreamElement<T>) -> Result<(), OperatorError> {
        let watch = Watch {
            metrics: self.metrics.as_deref(),
            live: self.live.as_deref(),
        };
        for channel in &self.channels {
            send(channel, make(), watch)?;
        }
        Ok(())
    }
}

/// Who watches a writer's sends: the metrics it counts into, the live state a blocked send
/// shows in.
#[derive(Clone, Copy)]
struct Watch<'a> {
    metrics: Option<&'a TaskMetrics>,
    live: Option<&'a TaskMetrics>,
}

/// Sends `element`, blocking while the channel is full.
#[inline]
fn send<T>(
    channel: &Sender<StreamElement<T>>,
    element: StreamElement<T>,
    watch: Watch<'_>,
) -> Result<(), OperatorError> {
    match channel.try_send(element) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(element)) => send_blocking_slow(channel, element, watch),
        Err(TrySendError::Disconnected(_)) => Err(OperatorError::OutputClosed),
    }
}

#[cold]
fn send_blocking_slow<T>(
    channel: &Sender<StreamElement<T>>,
    element: StreamElement<T>,
    watch: Watch<'_>,
) -> Result<(), OperatorError> {
    let metrics = watch.metrics;
    let started = metrics.map(|_| Instant::now());
    // Shown while the send blocks: a stalled checkpoint's report names the full output.
    let blocked = watch.live.map(|m| m.live.send_blocked());
    let sent = channel
        .send(element)
        .map_err(|_| OperatorError::OutputClosed);
    drop(blocked);
    if let (Some(metrics), Some(started)) = (metrics, started) {
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        metrics.backpressured_micros.add(micros);
    }
    sent
}

impl<T> Output<T> for RecordWriter<T> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        let metrics = self.metrics.as_deref();
        let watch = Watch {
            metrics,
            live: self.live.as_deref(),
        };
        match &mut self.partitioner {
            Partitioner::Forward => send(&self.channels[0], StreamElement::Record(record), watch)?,
            Partitioner::Hash(hash) => {
                let n = self.channels.len() as u64;
                // The remainder is below the channel count, so it fits a usize.
                let ch = (hash(&record.value) % n) as usize;
                send(&self.channels[ch], StreamElement::Record(record), watch)?;
            }
            Partitioner::KeyGroups {
                max_parallelism,
                key_group,
            } => {
                let n = self.channels.len() as u32;
                let group = key_group(&record.value);
                // The owner index is below the channel count, so it fits a usize.
                let ch = operator_index_for_key_group(*max_parallelism, n, group) as usize;
                send(&self.channels[ch], StreamElement::Record(record), watch)?;
            }
            Partitioner::RoundRobin => {
                let ch = self.next;
                self.next = if ch + 1 == self.channels.len() {
                    0
                } else {
                    ch + 1
                };
                send(&self.channels[ch], StreamElement::Record(record), watch)?;
            }
            Partitioner::Custom(pick) => {
                let n = self.channels.len();
                let ch = pick(&record.value, n) % n;
                send(&self.channels[ch], StreamElement::Record(record), watch)?;
            }
            Partitioner::Broadcast(copy) => {
                let (last, rest) = self.channels.split_last().expect("at least one channel");
                for channel in rest {
                    let copy = record.replace(copy(&record.value));
                    send(channel, StreamElement::Record(copy), watch)?;
                }
                send(last, StreamElement::Record(record), watch)?;
            }
        }
        if let Some(metrics) = metrics {
            metrics.records_out.inc();
        }
        Ok(())
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.send_to_all(|| StreamElement::Watermark(watermark))
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.send_to_all(|| StreamElement::Status(status))
    }
}

impl<T: Send> TaskOutput<T> for RecordWriter<T> {
    /// An aligned barrier goes behind the records queued before it; any other one through
    /// the priority lane, ahead of them and never waiting for room (a gate takes it early or,
    /// without a codec, in order; see the [module docs](super)).
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        if barrier.alignment == streamtask_core::Alignment::Aligned {
            return self.send_to_all(|| StreamElement::Barrier(barrier));
        }
        for channel in &self.channels {
            channel
                .send_priority(StreamElement::Barrier(barrier))
                .map_err(|_| OperatorError::OutputClosed)?;
        }
        Ok(())
    }

    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.send_to_all(|| StreamElement::EndOfInput)
    }

    /// Whether every channel has space (or is disconnected, so a send fails without blocking).
    fn is_available(&self) -> bool {
        self.channels.iter().all(|c| !c.is_full())
    }

    /// Registers `waker` on every full channel; it fires when one of them frees space (or
    /// disconnects). A channel that frees space between the check and the registration wakes
    /// it at once, so no notice is lost; with several full channels the task may be woken
    /// while another is still full, and simply checks again.
    fn register_availability_waker(&self, waker: &Waker) {
        let mut any_full = false;
        for channel in &self.channels {
            if channel.is_full() {
                any_full = true;
                channel.register_space_waker(waker);
            }
        }
        if !any_full {
            waker.wake_by_ref();
        }
    }
}

/// A writer as the last operator of a task's chain: the chain's records, watermarks and
/// status changes leave through it into the channels, and its output type is `()`. The task's
/// own output for what is not a record (barriers, end of input, availability) is the writer's
/// [`control`](RecordWriter::control) side over the same channels. Both run on the thread that
/// holds the chain, one after the other, so a barrier never overtakes a record emitted before it.
///
/// A chain ending in the writer keeps a job builder's chains one type, `BoxOperator<In, ()>`,
/// whatever the edge's element type, while the task still sees a real output whose
/// availability drives the mailbox model's soft backpressure.
impl<T: Send> Operator for RecordWriter<T> {
    type In = T;
    type Out = ();

    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.collect(record)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.emit_watermark(watermark)
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.emit_status(status)
    }
}

/// The task output of a chain that ends in a [`RecordWriter`]: barriers and end of input go
/// into the writer's channels, and the task reads their availability; records never reach it
/// (the chain's last operator, the writer, has output type `()`). Made by
/// [`RecordWriter::control`].
pub struct WriterControl<T> {
    writer: RecordWriter<T>,
}

impl<T: Send> Output<()> for WriterControl<T> {
    fn collect(&mut self, _record: StreamRecord<()>) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<T: Send> TaskOutput<()> for WriterControl<T> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.writer.broadcast_barrier(barrier)
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.writer.end_of_input()
    }
    fn is_available(&self) -> bool {
        self.writer.is_available()
    }
    fn register_availability_waker(&self, waker: &Waker) {
        self.writer.register_availability_waker(waker);
    }
}

impl<T> fmt::Debug for WriterControl<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterControl")
            .field("name", &self.writer.name)
            .field("channels", &self.writer.channels.len())
            .finish()
    }
}

impl<T> fmt::Debug for RecordWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordWriter")
            .field("name", &self.name)
            .field("channels", &self.channels.len())
            .field("partitioner", &self.partitioner)
            .finish_non_exhaustive()
    }
}
