//! `Send`/`Sync` of the runtime's public handles and error types, checked at compile time.

// The checks are core's `assert_*` macros (`streamtask_core::testing`): each line fails to
// compile if the type lost (or, for the `not` lines, gained) the property; `smoke` only makes the
// file a test target that shows up in the test list.

use streamtask_core::{assert_send_only, assert_send_sync};

#[test]
fn smoke() {
    streamtask_core::testing::assert_send_sync::<u8>();
}

use streamtask_core::StreamRecord;
use streamtask_runtime::channel::{
    Aligned, AlignerAction, BarrierAligner, ChannelError, GateError, InputClosed, InputEvent,
    InputGate, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryRecvError, TrySendError, TwoInputGate, TwoInputRecord, ValveOutput, ValveUpdate,
    WatermarkValve, WriterError,
};
use streamtask_runtime::{QueueFull, QueueOutput, QueuedInput, TimerScheduler};

// Channels: handles move to the producing and consuming threads; the errors carry payloads.
assert_send_sync!(
    Sender<u64>,
    Receiver<u64>,
    InputGate<u64>,
    TwoInputGate<u64, String>,
    BarrierAligner,
    Aligned,
    AlignerAction,
    WatermarkValve,
    ValveOutput,
    ValveUpdate,
    InputEvent<StreamRecord<u64>>,
    InputEvent<TwoInputRecord<u64, String>>,
    InputClosed,
);
assert_send_sync!(
    ChannelError,
    GateError,
    SendError<u64>,
    TrySendError<u64>,
    SendTimeoutError<u64>,
    RecvError,
    TryRecvError,
    RecvTimeoutError,
    WriterError,
);

// The timer scheduler is shared by the timer thread and the task.
assert_send_sync!(TimerScheduler);

// Async I/O: the queue's elements move with the operator to its task thread.
assert_send_sync!(QueuedInput<u64>, QueueOutput<u64>, QueueFull<u64>);

// Iterations: the feedback edge's ends cross from the tail's task to the head's.
use streamtask_runtime::{
    FeedbackOutput, FeedbackReceiver, FeedbackSender, FeedbackWriter, IterationError,
    IterationInput,
};
assert_send_sync!(
    FeedbackSender<u64>,
    FeedbackReceiver<u64>,
    FeedbackWriter<u64>,
    FeedbackOutput<u64>,
    IterationError,
);
assert_send_only!(IterationInput<u64>);
