//! `Send`/`Sync` of core's public handles, services and error types, checked at compile time.

// The checks are core's `assert_*` macros (`streamtask_core::testing`): each line fails to
// compile if the type lost (or, for the `not` lines, gained) the property; `smoke` only makes the
// file a test target that shows up in the test list.

#[allow(unused_imports)]
use streamtask_core::{assert_not_send, assert_not_sync, assert_send_only, assert_send_sync};

#[test]
fn smoke() {
    streamtask_core::testing::assert_send_sync::<u8>();
}

use streamtask_core::async_io::{
    AsyncConfigError, Backoff, BlockingPool, OutputMode, PoolError, RetryConfigError,
};
use streamtask_core::function::{AsyncError, AsyncOutcome, Completion, ResultFuture, TimeDomain};
use streamtask_core::metrics::{
    Counter, LatencyHistogram, LatencySummary, MetricsSummary, TaskMetrics, TimedHistogram,
};
use streamtask_core::operator::Uninterruptible;
use streamtask_core::operator::{Discard, EventRejected, EventSender, NoEvents, TaskServices};
use streamtask_core::task::{CheckpointResponder, DeclineReason, TaskReport};
use streamtask_core::testing::{ManualFiring, ManualTimerService};
use streamtask_core::time::InterruptibleTimers;
use streamtask_core::trace::{TraceEvent, TraceLog, Tracer};
use streamtask_core::{
    CheckpointBarrier, CheckpointKind, OperatorError, StreamElement, StreamRecord, StreamStatus,
    Watermark, state::StateError, state::TaskSnapshot, task::TaskConfig, task::TaskError,
    task::TaskFailure, task::TaskOutcome, task::TriggerError, time::Clock, time::ManualClock,
    time::Timer, time::TimerError, time::TimerHandle,
};

// Elements and their vocabulary.
assert_send_sync!(
    StreamRecord<u64>,
    StreamElement<u64>,
    Watermark,
    StreamStatus,
    CheckpointBarrier,
    CheckpointKind,
);

// Time: the clock is shared by the timer thread and the task.
assert_send_sync!(
    Clock,
    ManualClock,
    Timer,
    TimerHandle,
    TimerError,
    ManualTimerService,
    InterruptibleTimers,
    Uninterruptible,
    ManualFiring,
);

// Task vocabulary: configuration, outcomes, reports and their errors cross thread boundaries.
assert_send_sync!(
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
assert_send_sync!(TaskServices, EventSender, NoEvents, Discard);
// A refused event gives the event back: a `Box<dyn Any + Send>`, so `Send` but not `Sync`.
assert_send_only!(EventRejected);
assert_not_sync!(EventRejected);

// Async I/O: completions arrive from any thread.
assert_send_sync!(
    ResultFuture<u64>,
    Completion<u64>,
    AsyncOutcome<u64>,
    AsyncError,
    TimeDomain,
    BlockingPool,
    PoolError,
    OutputMode,
    AsyncConfigError,
    RetryConfigError,
    Backoff,
);

// Metrics and tracing: shared by every thread of a task.
assert_send_sync!(
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

// Side outputs, event time after the source, context-aware maps, keyed two-input operators.
// A tag and a strategy are shared by every task of a job; the side outputs of an
// operator move with it to its task thread (they hold `Send` outputs) but are never shared; a
// record's context lends the task's services for one call.
mod shapes {
    use streamtask_core::function::CoProcessFunction;
    use streamtask_core::operator::{
        KeyedCoProcessOperator, KeyedContext, MapWithContext, OutputTag, RecordContext,
        SideOutputTypeError, SideOutputs, TimestampsAndWatermarks, WatermarkStrategy,
    };
    use streamtask_core::{OperatorError, assert_not_sync, assert_send_only, assert_send_sync};

    struct Co;
    impl CoProcessFunction for Co {
        type Key = u64;
        type In1 = u64;
        type In2 = u64;
        type Out = u64;
        type State = u64;
        fn process_element1(
            &mut self,
            _: u64,
            _: &mut KeyedContext<'_, '_, u64, u64, u64>,
        ) -> Result<(), OperatorError> {
            Ok(())
        }
        fn process_element2(
            &mut self,
            _: u64,
            _: &mut KeyedContext<'_, '_, u64, u64, u64>,
        ) -> Result<(), OperatorError> {
            Ok(())
        }
    }
    type Key = fn(&u64) -> u64;
    type Stamp = fn(u64, &RecordContext<'_>) -> u64;

    assert_send_sync!(
        OutputTag<u64>,
        SideOutputTypeError,
        WatermarkStrategy<u64>,
        TimestampsAndWatermarks<u64>,
        RecordContext<'static>,
        MapWithContext<u64, u64, Stamp>,
    );
    assert_send_only!(SideOutputs, KeyedCoProcessOperator<Key, Key, Co>);
    assert_not_sync!(SideOutputs);
    assert_not_sync!(KeyedCoProcessOperator<Key, Key, Co>);
}
