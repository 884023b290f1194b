//! `Send`/`Sync` of the legacy model's public handles, tasks, lock and error types, checked at
//! compile time.

// The checks are core's `assert_*` macros (`streamtask_core::testing`): each line fails to
// compile if the type lost (or, for the `not` lines, gained) the property; `smoke` only makes the
// file a test target that shows up in the test list.

#[allow(unused_imports)]
use streamtask_core::{assert_not_send, assert_not_sync, assert_send_only, assert_send_sync};

#[test]
fn smoke() {
    streamtask_core::testing::assert_send_sync::<u8>();
}

use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{Discard, Operator, TaskOutput, TwoInputOperator};
use streamtask_core::task::TaskState;
use streamtask_core::testing::ManualAsyncFunction;
use streamtask_legacy::{
    AsyncChainError, AsyncHead, AsyncWaitStreamTask, CancelHook, CancellationToken, Cancelled,
    CheckpointGuard, CheckpointLock, ContextConfigError, Emission, Fairness, NoChain,
    OneInputStreamTask, SourceCell, SourceContext, SourceContextConfig, SourceEnd, SourceFunction,
    SourceGuard, SourceStreamTask, SystemProcessingTimeService, TimeCharacteristic, TimerStatus,
    TwoInputStreamTask,
};
use streamtask_runtime::TaskHandle;

// Handles the executor holds and passes between threads.
assert_send_sync!(
    TaskHandle,
    TaskState,
    CancellationToken,
    CancelHook,
    Cancelled
);

// The lock and the timer service: shared by the source, task, timer and async-calls threads.
assert_send_sync!(
    CheckpointLock<Vec<u8>>,
    Fairness,
    SystemProcessingTimeService,
    TimerStatus,
);

// A guard is a mutex guard: it must be released on the thread that took the lock (so !Send,
// as std's and parking_lot's guards), and can be shared by reference.
assert_not_send!(CheckpointGuard<'static, Vec<u8>>);
const _: () = streamtask_core::testing::assert_sync::<CheckpointGuard<'static, Vec<u8>>>();

// Source-side types.
assert_send_sync!(
    SourceCell<u64, Vec<u64>>,
    SourceContextConfig,
    Emission,
    SourceEnd,
    TimeCharacteristic,
);

// Errors.
assert_send_sync!(ContextConfigError, AsyncChainError);

// The context a source runs with only borrows the lock and the token, so it is both.
assert_send_sync!(SourceContext<'static, u64, ()>);
// The guard a source holds a section with is a checkpoint-lock guard (so !Send), over the cell
// with its output erased to a `dyn` object without a `Sync` bound (so !Sync). It lives on the
// source thread for one section; nothing should move or share it.
assert_not_send!(SourceGuard<'static, u64, ()>);
assert_not_sync!(SourceGuard<'static, u64, ()>);

// The task builders move to the thread that spawns them, whatever their operators and output
// are (operators and sources are `Send` by their traits).
#[allow(dead_code)]
fn task_builders_are_send<F, C, O, H, T, A>()
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    O: TaskOutput<C::Out> + 'static,
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
    A: AsyncFunction,
{
    streamtask_core::testing::assert_send::<SourceStreamTask<F, C, O>>();
    streamtask_core::testing::assert_send::<OneInputStreamTask<C, O>>();
    streamtask_core::testing::assert_send::<TwoInputStreamTask<H, T, O>>();
    streamtask_core::testing::assert_send::<AsyncWaitStreamTask<A, NoChain<A::Out>, O>>();
    streamtask_core::testing::assert_send::<AsyncHead<A>>();
}

assert_send_sync!(
    OneInputStreamTask<NoChain<u64>, Discard>,
    AsyncHead<ManualAsyncFunction<u64, u64>>,
);
