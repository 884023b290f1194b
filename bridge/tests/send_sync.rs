//! `Send`/`Sync` of the bridge's public handles, tasks, readers and error types, checked at
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

use streamtask_bridge::porting::{
    CheckpointSummary, Divergence, PortingError, PortingReport, RestoreSummary, Side,
};
use streamtask_bridge::{
    ChainingError, CheckpointLockExecutor, HandoffReader, LegacySourceStreamTask, ReaderSource,
    ReaderSourceState, TaskHandle,
};
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_legacy::SourceFunction;
use streamtask_mailbox::SourceReader;

// The handle the executor holds, and the errors.
send_sync!(TaskHandle, ChainingError);

// The porting kit's reports travel back to the test thread.
send_sync!(
    Side,
    CheckpointSummary,
    RestoreSummary,
    PortingReport<u64>,
    Divergence<u64>,
    PortingError<u64>,
);

// The lock executor runs mails under a shared checkpoint lock.
send_sync!(CheckpointLockExecutor<Vec<u64>>);

// Builders and readers move to the threads that run them, whatever the source and chain.
#[allow(dead_code)]
fn tasks_and_readers_are_send<F, C, W, R>()
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
    R: SourceReader<F::Out>,
{
    send::<LegacySourceStreamTask<F, C, W>>();
    send::<HandoffReader<F>>();
    send::<ReaderSource<R, F::Out>>();
    send::<ReaderSourceState<R, F::Out>>();
}
