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
//! | [`RecordWriter`] | a task's [`TaskOutput`](crate::TaskOutput) into downstream channels | a task's output |
//!
//! Both threading models use the same pieces. The legacy model's input task blocks
//! ([`InputGate::next_blocking`]); the mailbox model polls ([`InputGate::poll_next`]), and when
//! nothing is available registers a [`Waker`](std::task::Waker) whose wake enqueues a resume
//! mail, polls once more, then suspends its default action. The protocol that makes this free of
//! lost wakeups is written out in [`bounded`]'s documentation.
//!
//! # Examples
//!
//! An upstream task writes through a [`RecordWriter`], a downstream task reads through an
//! [`InputGate`]:
//!
//! ```
//! use streamtask_core::channel::{GateEvent, InputGate, Partitioner, RecordWriter, bounded};
//! use streamtask_core::{CheckpointBarrier, Output, StreamRecord, TaskOutput};
//!
//! let (tx, rx) = bounded(16).unwrap();
//! let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
//! writer.collect(StreamRecord::new("hello")).unwrap();
//! writer.broadcast_barrier(CheckpointBarrier::new(1, 0)).unwrap();
//! writer.end_of_input().unwrap();
//!
//! let mut gate = InputGate::new(vec![rx]).unwrap();
//! assert_eq!(gate.poll_next().unwrap(), GateEvent::Record(StreamRecord::new("hello")));
//! assert_eq!(gate.poll_next().unwrap(), GateEvent::Checkpoint(CheckpointBarrier::new(1, 0)));
//! assert_eq!(gate.poll_next().unwrap(), GateEvent::EndOfInput);
//! ```

mod aligner;
mod bounded;
mod gate;
mod valve;
mod writer;

pub use self::aligner::{Aligned, AlignerAction, BarrierAligner};
pub use self::bounded::{
    ChannelError, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryRecvError, TrySendError, bounded,
};
pub use self::gate::{GateError, GateEvent, InputClosed, InputGate, TwoInputEvent, TwoInputGate};
pub use self::valve::{ValveOutput, ValveUpdate, WatermarkValve};
pub use self::writer::{Partitioner, RecordWriter, WriterError};
