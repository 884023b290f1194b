//! `Send`/`Sync` of the job layer's public types (the checkpoint coordinator, storage and the
//! sinks), checked at compile time in the shape of tokio's `tests/async_send_sync.rs`.

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
fn smoke() {}

/// The checkpoint coordinator and the sinks (the job layer's).
mod checkpoint_and_sinks {
    use super::{send, send_sync};
    use streamtask::checkpoint::{
        AbortReason, CheckpointStats, CheckpointStatsSummary, ConfigError, CoordinatorAction,
        CoordinatorDriver, CoordinatorError, Corruption, DriverError, StorageError,
    };
    use streamtask::sink::{CollectHandle, CollectSink, SinkError, TwoPhaseCommitFileSink};
    use streamtask::{
        CheckpointConfig, CheckpointCoordinator, CheckpointStorage, CompletedCheckpoint,
    };

    send_sync!(
        CheckpointConfig,
        CheckpointCoordinator,
        CheckpointStorage,
        CompletedCheckpoint,
        CheckpointStats,
        CheckpointStatsSummary,
        CoordinatorAction,
        CoordinatorDriver,
        AbortReason,
        ConfigError,
        CoordinatorError,
        DriverError,
        StorageError,
        Corruption,
    );
    send_sync!(CollectHandle<u64>, CollectSink<u64>, SinkError);
    // The file sink keeps its record formatter as a `Box<dyn Fn + Send>` (no `Sync` bound), so
    // the sink is `Send` but not `Sync`. Harmless (a task owns its sink), but unlike the other
    // sink, worth knowing before sharing one by reference.
    send_only!(TwoPhaseCommitFileSink<u64>);
    not_sync!(TwoPhaseCommitFileSink<u64>);
}
