//! Channels between tasks: bounded channels with availability notices, the input gates that read
//! them, the barrier aligner and watermark valve inside the gates, and the record writer that
//! feeds them.
//!
//! | part | what it is | used by |
//! |---|---|---|
//! | [`bounded`] | a bounded MPSC channel that tells a consumer when data arrives and a producer when space frees | everything below |
//! | [`BarrierAligner`] | the exactly-once barrier alignment state machine (pure, no I/O) | the gates |
//! | [`WatermarkValve`] | combines per-channel watermarks and stream status (pure, no I/O) | the gates |
//! | [`InputGate`], [`TwoInputGate`] | read N channels fairly, align barriers, combine watermarks | a task's input |
//! | [`RecordWriter`], [`WriterControl`] | a task's [`TaskOutput`](streamtask_core::operator::TaskOutput) into downstream channels, or the last operator of its chain with its control side | a task's output |
//! | [`ChannelState`], [`ChannelCodec`] | what an unaligned checkpoint overtook, its format and codec | the gates, the job's restore |
//!
//! # Unaligned checkpoints
//!
//! A barrier of an unaligned checkpoint ([`Alignment::Unaligned`](streamtask_core::Alignment))
//! leaves a writer through the channels' priority lane ([`Sender::send_priority`]): ahead of
//! the records queued before it, outside the capacity, so it never waits for room. A gate
//! whose channels all have a [`ChannelCodec`] takes it at once ([`Receiver::take_priority`]),
//! however many records are queued before it, and stores those records as channel state; the
//! task snapshots its operators at once and forwards the barrier the same way. Until the same
//! barrier arrived on every other channel, what the gate reads from them also goes into the
//! channel state. Then the gate hands the task the channel state, and the task acknowledges
//! the checkpoint with it. A restore puts each channel's state back in front of the channel
//! ([`InputGate::with_channel_state`]), so every record is processed once. A gate without a
//! codec takes a priority barrier in order, aligned. With
//! [`Alignment::AlignedTimeout`](streamtask_core::Alignment), a gate aligns until the
//! timeout has passed since it first saw the checkpoint's barrier, then switches.
//!
//! Both threading models use the same pieces. The legacy model's input task blocks
//! ([`InputGate::next_blocking`]) and its writer blocks on a full channel; the mailbox model polls
//! ([`InputGate::poll_next`]) and feeds input only while its writer
//! [is available](streamtask_core::operator::TaskOutput::is_available), and otherwise registers a
//! [`Waker`](std::task::Waker) whose wake enqueues a resume mail, then suspends its default
//! action.
//!
//! # Availability notices, without lost wakeups
//!
//! A consumer that polls follows four steps:
//!
//! 1. **try**: [`Receiver::try_recv`] (or [`InputGate::poll_next`]); on `Empty` (`Nothing`) go on;
//! 2. **register interest**: [`Receiver::register_data_waker`] (or [`InputGate::register_waker`],
//!    which registers on every channel it may read);
//! 3. **try again**: anything sent between 1 and 2 is found here;
//! 4. **suspend**; the waker is woken by the next send, or when every sender is gone.
//!
//! A producer that polls does the same with [`Sender::try_send`] (on `Full`),
//! [`Sender::register_space_waker`] (or [`RecordWriter`]'s
//! [`register_availability_waker`](streamtask_core::operator::TaskOutput::register_availability_waker), which
//! registers on every full channel), a second try, then suspends until a receive frees a slot or
//! the receiver is gone.
//!
//! Why no notice is lost: a waker is stored under the channel's lock, and every state change a
//! waiter can wait for (a send, a receive that frees space, a disconnection) happens under the
//! same lock and takes and wakes whatever waker is stored at that moment. (A receive takes
//! from the receiver's own buffer without the lock; a sender that found no space raises a bit
//! in the word the receive counts in, in one read-modify-write of that word, so the receive
//! that comes after it sees the bit and takes the lock to tell it; `channel/bounded.rs` has
//! the details.) A change either happens
//! before the registration, and then step 3 sees it, or after it, and then it finds the waker.
//! Registration also checks the state itself: a waker registered while what it waits for is
//! already there (data, space, disconnection) is woken at once instead of stored, so even a
//! caller that skips step 3 cannot sleep through a change. A stored waker is woken once and then
//! forgotten: register again before every suspension. Wakers are woken after the lock is
//! released, so a waker may call back into the channel. Notices may be spurious (step 3 found
//! data and the stored waker fires later anyway): a woken task simply polls again.
//!
//! The blocking calls ([`Receiver::recv`], [`Sender::send`], their timed forms, and
//! [`InputGate::next_blocking`]) first back off briefly (spin, then yield), checking again after
//! every round, because a sleep and its wake cost microseconds; then they wait: the channel's on
//! condition variables under the same lock, the gate by registering a waker that unparks its
//! thread and polling once more before parking. The protocol is model-checked with loom
//! (`runtime/tests/loom.rs`) and stress-tested (`runtime/tests/channel_stress.rs`).
//!
//! # Examples
//!
//! An upstream task writes through a [`RecordWriter`], a downstream task reads through an
//! [`InputGate`]:
//!
//! ```
//! use streamtask_runtime::channel::{InputEvent, InputGate, Partitioner, RecordWriter, bounded};
//! use streamtask_core::{CheckpointBarrier, operator::Output, StreamRecord, operator::TaskOutput, Watermark};
//!
//! let (tx, rx) = bounded(16).unwrap();
//! let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
//! writer.collect(StreamRecord::new("hello")).unwrap();
//! writer.broadcast_barrier(CheckpointBarrier::new(1, 0)).unwrap();
//! writer.end_of_input().unwrap();
//!
//! let mut gate = InputGate::new(vec![rx]).unwrap();
//! assert_eq!(gate.poll_next().unwrap(), InputEvent::Record(StreamRecord::new("hello")));
//! assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(CheckpointBarrier::new(1, 0)));
//! assert_eq!(gate.poll_next().unwrap(), InputEvent::Watermark(Watermark::MAX)); // nothing follows
//! assert_eq!(gate.poll_next().unwrap(), InputEvent::EndOfInput);
//! ```

mod aligner;
mod backoff;
mod bounded;
mod event;
mod gate;
mod state;
mod valve;
mod writer;

pub use self::aligner::{Aligned, AlignerAction, BarrierAligner};
pub use self::bounded::{
    ChannelError, PriorityBell, Receiver, RecvError, RecvTimeoutError, Release, SendError,
    SendTimeoutError, Sender, TryRecvError, TrySendError, bounded,
};
pub use self::event::{InputEvent, TwoInputRecord};
pub use self::gate::{GateError, InputClosed, InputGate, TwoInputGate};
pub use self::state::{ChannelCodec, ChannelState, ChannelStateError};
pub use self::valve::{ValveOutput, ValveUpdate, WatermarkValve};
pub use self::writer::{Partitioner, PickChannel, RecordWriter, WriterControl, WriterError};
