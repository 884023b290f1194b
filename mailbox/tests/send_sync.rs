//! `Send`/`Sync` of the mailbox model's public handles, mailbox, processor parts and error
//! types, checked at compile time.

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

use streamtask_core::testing::ManualAsyncFunction;
use streamtask_mailbox::{
    AsyncWaitOperator, Controller, Exclusive, Immediate, Letter, LoopError, Mail, MailboxEvents,
    MailboxExecutor, MailboxProcessor, MailboxState, MailboxTimerService, OneInputTask, Priority,
    ProcessorBuilder, ProcessorHandle, PutError, ReaderOutput, Rejected, SourceTask, SubmitError,
    SubmitHandle, SuspendCause, Suspension, TakeError, TaskHandle, TaskMailbox, TwoInputTask,
    WrongThread, YieldError,
};

/// A task state as the model's tasks have: owned by the mailbox thread, `Send`.
type State = Vec<u64>;
type Error = String;

// Handles other threads hold: the task handle, the mailbox, the processor's handle, executors
// (to put mails), suspensions (to resume), submit handles (to wait), the services.
send_sync!(
    TaskHandle,
    TaskMailbox<Letter<State, Error>>,
    TaskMailbox<u64>,
    ProcessorHandle<State, Error>,
    MailboxExecutor<State, Error>,
    Suspension,
    SubmitHandle<u64, Error>,
    MailboxTimerService<State, Error>,
    MailboxEvents<State, Error>,
);

// Mails and their vocabulary.
send_sync!(Mail<u64>, Priority, MailboxState, SuspendCause);

// Errors (the ones that carry a payload give it back).
send_sync!(
    PutError<u64>,
    TakeError,
    WrongThread,
    Rejected<u64>,
    SubmitError<Error>,
    YieldError<Error>,
    LoopError<Error>,
);

// Task builders (unit structs with `spawn` functions).
send_sync!(OneInputTask, SourceTask, TwoInputTask);

// Owner-side parts: the processor and the operator move to the mailbox thread once.
send_sync!(
    Immediate<State>,
    AsyncWaitOperator<ManualAsyncFunction<u64, u64>>,
);
send_only!(MailboxProcessor<State, Error>, ProcessorBuilder<State, Error>);

// A letter holds a boxed action that only needs `Send` (it runs on the mailbox thread).
send_only!(Letter<State, Error>);
not_sync!(Letter<State, Error>);

// Borrowed views that exist only on the mailbox thread during one call: the controller, the
// exclusive view of the mailbox (it holds the queue's lock guard, which must be released on the
// thread that took it), and a reader's output (a `&mut dyn Output` with no `Send` bound).
not_send!(Controller<'static>);
not_sync!(Controller<'static>);
not_send!(Exclusive<'static, u64>);
const _: () = sync::<Exclusive<'static, u64>>();
not_send!(ReaderOutput<'static, u64>);
not_sync!(ReaderOutput<'static, u64>);
