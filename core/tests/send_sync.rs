//! `Send`/`Sync` of core's public handles, services and error types, checked at compile time.

// Compile-time checks in the shape of tokio's `tests/async_send_sync.rs`: each line below fails
// to compile if the type lost (or, for the `!` lines, gained) the property. The checks are
// `const` items and never-called functions, so there is nothing to run; `smoke` only makes the
// file a test target that shows up in the test list.

#[allow(dead_code)]
const fn send<T: ?Sized + Send>() {}
#[allow(dead_code)]
const fn sync<T: ?Sized + Sync>() {}
#[allow(dead_code)]
const fn send_sync<T: ?Sized + Send + Sync>() {}

/// Compiles only if `$t` is NOT `Send` (the autoref ambiguity trick tokio uses: if `$t: Send`,
/// two impls apply and the call is ambiguous).
#[allow(unused_macros)]
macro_rules! not_send {
    ($t:ty) => {
        const _: fn() = || {
            #[allow(dead_code)]
            trait AmbiguousIfSend<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfSend<()> for T {}
            #[allow(dead_code)]
            struct Invalid;
            impl<T: ?Sized + Send> AmbiguousIfSend<Invalid> for T {}
            let _ = <$t as AmbiguousIfSend<_>>::some_item;
        };
    };
}

/// Compiles only if `$t` is NOT `Sync`.
#[allow(unused_macros)]
macro_rules! not_sync {
    ($t:ty) => {
        const _: fn() = || {
            #[allow(dead_code)]
            trait AmbiguousIfSync<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfSync<()> for T {}
            #[allow(dead_code)]
            struct Invalid;
            impl<T: ?Sized + Sync> AmbiguousIfSync<Invalid> for T {}
            let _ = <$t as AmbiguousIfSync<_>>::some_item;
        };
    };
}

/// `Send + Sync` for each type.
macro_rules! send_sync {
    ($($t:ty),* $(,)?) => { $( const _: () = send_sync::<$t>(); )* };
}

/// `Send` for each type (see the `not_sync!` line next to it).
#[allow(unused_macros)]
macro_rules! send_only {
    ($($t:ty),* $(,)?) => { $( const _: () = send::<$t>(); )* };
}

#[test]
fn smoke() {
    send_sync::<u8>();
}

use streamtask_core::async_io::{
    AsyncConfigError, Backoff, BlockingPool, OutputMode, PoolError, QueueFull, QueueOutput,
    QueuedInput, RetryConfigError,
};
use streamtask_core::channel::{
    Aligned, AlignerAction, BarrierAligner, ChannelError, GateError, GateEvent, InputClosed,
    InputGate, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryRecvError, TrySendError, TwoInputEvent, TwoInputGate, ValveOutput, ValveUpdate,
    WatermarkValve, WriterError,
};
use streamtask_core::function::{AsyncError, AsyncOutcome, Completion, ResultFuture, TimeDomain};
use streamtask_core::metrics::{
    Counter, LatencyHistogram, LatencySummary, MetricsSummary, TaskMetrics, TimedHistogram,
};
use streamtask_core::operator::{Discard, EventRejected, EventSender, NoEvents, TaskServices};
use streamtask_core::task::{CheckpointResponder, DeclineReason, TaskReport};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::trace::{TraceEvent, TraceLog, Tracer};
use streamtask_core::{
    CheckpointBarrier, CheckpointKind, Clock, ManualClock, OperatorError, StateError,
    StreamElement, StreamRecord, StreamStatus, TaskConfig, TaskError, TaskFailure, TaskOutcome,
    TaskSnapshot, Timer, TimerError, TimerHandle, TimerScheduler, TriggerError, Watermark,
};

// Elements and their vocabulary.
send_sync!(
    StreamRecord<u64>,
    StreamElement<u64>,
    Watermark,
    StreamStatus,
    CheckpointBarrier,
    CheckpointKind,
);

// Channels: handles move to the producing and consuming threads; the errors carry payloads.
send_sync!(
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
    GateEvent<u64>,
    TwoInputEvent<u64, String>,
    InputClosed,
);
send_sync!(
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

// Time: the clock and the timer scheduler are shared by the timer thread and the task.
send_sync!(
    Clock,
    ManualClock,
    Timer,
    TimerHandle,
    TimerError,
    TimerScheduler,
    ManualTimerService,
);

// Task vocabulary: configuration, outcomes, reports and their errors cross thread boundaries.
send_sync!(
    TaskConfig,
    TaskOutcome,
    TaskFailure,
    TaskError,
    TriggerError,
    DeclineReason,
    TaskReport,
    CheckpointResponder,
    TaskSnapshot,
    StateError,
    OperatorError,
);

// Operator services: every task thread and every timer thread may hold them.
send_sync!(TaskServices, EventSender, NoEvents, Discard);
// A refused event gives the event back: a `Box<dyn Any + Send>`, so `Send` but not `Sync`.
send_only!(EventRejected);
not_sync!(EventRejected);

// Async I/O: completions arrive from any thread.
send_sync!(
    ResultFuture<u64>,
    Completion<u64>,
    AsyncOutcome<u64>,
    AsyncError,
    TimeDomain,
    BlockingPool,
    PoolError,
    OutputMode,
    QueuedInput<u64>,
    QueueOutput<u64>,
    QueueFull<u64>,
    AsyncConfigError,
    RetryConfigError,
    Backoff,
);

// Metrics and tracing: shared by every thread of a task.
send_sync!(
    TaskMetrics,
    Counter,
    LatencyHistogram,
    TimedHistogram,
    LatencySummary,
    MetricsSummary,
    Tracer,
    TraceLog,
    TraceEvent,
);
