//! `Send`/`Sync` of the legacy model's public handles, tasks, lock and error types, checked at
//! compile time.

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

use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{Discard, Operator, TaskOutput, TwoInputOperator};
use streamtask_core::testing::ManualAsyncFunction;
use streamtask_legacy::{
    AsyncChainError, AsyncHead, AsyncWaitStreamTask, CancelHook, CancellationToken, Cancelled,
    CheckpointGuard, CheckpointLock, ContextConfigError, Emission, Fairness, NoChain,
    OneInputStreamTask, SourceCell, SourceContext, SourceContextConfig, SourceEnd, SourceFunction,
    SourceGuard, SourceStreamTask, SystemProcessingTimeService, TaskHandle, TaskState,
    TimeCharacteristic, TimerStatus, TwoInputStreamTask,
};

// Handles the executor holds and passes between threads.
send_sync!(
    TaskHandle,
    TaskState,
    CancellationToken,
    CancelHook,
    Cancelled
);

// The lock and the timer service: shared by the source, task, timer and async-calls threads.
send_sync!(
    CheckpointLock<Vec<u8>>,
    Fairness,
    SystemProcessingTimeService,
    TimerStatus,
);

// A guard is a mutex guard: it must be released on the thread that took the lock (so !Send,
// as std's and parking_lot's guards), and can be shared by reference.
not_send!(CheckpointGuard<'static, Vec<u8>>);
const _: () = sync::<CheckpointGuard<'static, Vec<u8>>>();

// Source-side types.
send_sync!(
    SourceCell<u64, Vec<u64>>,
    SourceContextConfig,
    Emission,
    SourceEnd,
    TimeCharacteristic,
);

// Errors.
send_sync!(ContextConfigError, AsyncChainError);

// The context a source runs with only borrows the lock and the token, so it is both.
send_sync!(SourceContext<'static, u64, ()>);
// The guard a source holds a section with is a checkpoint-lock guard (so !Send), over the cell
// with its output erased to a `dyn` object without a `Sync` bound (so !Sync). It lives on the
// source thread for one section; nothing should move or share it.
not_send!(SourceGuard<'static, u64, ()>);
not_sync!(SourceGuard<'static, u64, ()>);

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
    send::<SourceStreamTask<F, C, O>>();
    send::<OneInputStreamTask<C, O>>();
    send::<TwoInputStreamTask<H, T, O>>();
    send::<AsyncWaitStreamTask<A, NoChain<A::Out>, O>>();
    send::<AsyncHead<A>>();
}

send_sync!(
    OneInputStreamTask<NoChain<u64>, Discard>,
    AsyncHead<ManualAsyncFunction<u64, u64>>,
);
