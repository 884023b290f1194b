//! [`InputEvent`]: what a task's input gate yields, for one input and for two, and what the
//! runtime kit puts through a task's chain ([`ChainBody::apply`](crate::ChainBody::apply)).
//! The gates produce it directly, so an element read from a channel becomes one event and
//! nothing converts it again on its way into the chain.

use streamtask_core::{CheckpointBarrier, StreamRecord, StreamStatus, Watermark};

use super::state::ChannelState;

/// One event of a task's input, whatever the number of inputs: `R` is
/// [`StreamRecord<T>`] for an [`InputGate`](super::InputGate) and [`TwoInputRecord`] for a
/// [`TwoInputGate`](super::TwoInputGate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputEvent<R> {
    /// A record; it enters the chain through
    /// [`InputRecord::deliver`](crate::InputRecord::deliver).
    Record(R),
    /// The combined watermark advanced.
    Watermark(Watermark),
    /// The combined stream status changed.
    Status(StreamStatus),
    /// Every channel delivered this barrier (or ended): snapshot now, then forward the barrier.
    Barrier(CheckpointBarrier),
    /// The first barrier of an unaligned checkpoint overtook the records before it: snapshot
    /// now and forward the barrier, but acknowledge only with its
    /// [`ChannelState`](InputEvent::ChannelState), which follows.
    UnalignedBarrier(CheckpointBarrier),
    /// Every channel delivered the barrier of unaligned checkpoint `id` (or ended): its
    /// channel state is complete (`Err` with the reason when an element could not be
    /// encoded: decline the checkpoint).
    ChannelState {
        /// The checkpoint.
        id: u64,
        /// What its barriers overtook, per channel (a two-input gate: input 1's channels
        /// first).
        state: Result<ChannelState, String>,
    },
    /// A newer barrier superseded checkpoint `id` during alignment: decline it.
    Superseded {
        /// The superseded checkpoint.
        id: u64,
    },
    /// Every channel of input `n` (1 or 2, of a two-input gate) ended: the head's
    /// `end_input(n)`; the other input may still deliver.
    InputEnded(u8),
    /// Nothing can be read now: register a waker, poll again, then suspend.
    Nothing,
    /// Every channel ended (a two-input gate: after both `InputEnded`); nothing will ever
    /// follow (returned on every later poll).
    EndOfInput,
}

impl<R> InputEvent<R> {
    /// Whether the event needs the chain to accept input (a record, or a watermark, which an
    /// async operator's queue counts too). The end of event time does not: it comes right
    /// before the end of input and enters the chain whether or not it has room (as Flink's
    /// `endData` advances the chain to it), so an async operator with a full queue holds it and
    /// still learns at once that its input ended (its due retries run then).
    pub fn needs_room(&self) -> bool {
        match self {
            InputEvent::Record(_) => true,
            InputEvent::Watermark(watermark) => !watermark.is_max(),
            _ => false,
        }
    }
}

/// A record of a two-input task: of input 1 or of input 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoInputRecord<A, B> {
    /// A record of input 1.
    First(StreamRecord<A>),
    /// A record of input 2.
    Second(StreamRecord<B>),
}
