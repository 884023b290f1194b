//! `Send`/`Sync` of the mailbox model's public handles, mailbox, processor parts and error
//! types, checked at compile time.

// The checks are core's `assert_*` macros (`streamtask_core::testing`): each line fails to
// compile if the type lost (or, for the `not` lines, gained) the property; `smoke` only makes the
// file a test target that shows up in the test list.

#[allow(unused_imports)]
use streamtask_core::{assert_not_send, assert_not_sync, assert_send_only, assert_send_sync};

#[test]
fn smoke() {
    streamtask_core::testing::assert_send_sync::<u8>();
}

use streamtask_core::operator::{Operator, TaskOutput, TwoInputOperator};
use streamtask_core::testing::ManualAsyncFunction;
use streamtask_mailbox::{
    Controller, Exclusive, Immediate, Letter, LoopError, Mail, MailboxEvents, MailboxExecutor,
    MailboxFiring, MailboxProcessor, MailboxState, MailboxTimerService, OneInputStreamTask,
    Priority, ProcessorBuilder, ProcessorHandle, PutError, ReaderOutput, Rejected, SourceReader,
    SourceStreamTask, SubmitError, SubmitHandle, SuspendCause, Suspension, TakeError, TaskMailbox,
    TwoInputStreamTask, WrongThread, YieldError,
};
use streamtask_runtime::AsyncWaitOperator;
use streamtask_runtime::TaskHandle;

/// A task state as the model's tasks have: owned by the mailbox thread, `Send`.
type State = Vec<u64>;
type Error = String;

// Handles other threads hold: the task handle, the mailbox, the processor's handle, executors
// (to put mails), suspensions (to resume), submit handles (to wait), the services.
assert_send_sync!(
    TaskHandle,
    TaskMailbox<Letter<State, Error>>,
    TaskMailbox<u64>,
    ProcessorHandle<State, Error>,
    MailboxExecutor<State, Error>,
    Suspension,
    SubmitHandle<u64, Error>,
    MailboxTimerService<State, Error>,
    MailboxEvents<State, Error>,
    MailboxFiring<State, Error>,
);

// Mails and their vocabulary.
assert_send_sync!(Mail<u64>, Priority, MailboxState, SuspendCause);

// Errors (the ones that carry a payload give it back).
assert_send_sync!(
    PutError<u64>,
    TakeError,
    WrongThread,
    Rejected<u64>,
    SubmitError<Error>,
    YieldError<Error>,
    LoopError<Error>,
);

// Task builders: they move to the thread that spawns the task.
/// Compiles only if every task builder is `Send` whenever its parts are.
#[allow(dead_code)]
fn task_builders_are_send<R, C, W, H, T>()
where
    R: SourceReader<C::In> + 'static,
    C: Operator + 'static,
    C::In: Send,
    W: TaskOutput<C::Out> + TaskOutput<T::Out> + 'static,
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
{
    streamtask_core::testing::assert_send::<SourceStreamTask<R, C, W>>();
    streamtask_core::testing::assert_send::<OneInputStreamTask<C, W>>();
    streamtask_core::testing::assert_send::<TwoInputStreamTask<H, T, W>>();
}

// Owner-side parts: the processor and the operator move to the mailbox thread once.
assert_send_sync!(
    Immediate<State>,
    AsyncWaitOperator<ManualAsyncFunction<u64, u64>>,
);
assert_send_only!(MailboxProcessor<State, Error>, ProcessorBuilder<State, Error>);

// A letter holds a boxed action that only needs `Send` (it runs on the mailbox thread).
assert_send_only!(Letter<State, Error>);
assert_not_sync!(Letter<State, Error>);

// Borrowed views that exist only on the mailbox thread during one call: the controller, the
// exclusive view of the mailbox (it holds the queue's lock guard, which must be released on the
// thread that took it), and a reader's output (a `&mut dyn Output` with no `Send` bound).
assert_not_send!(Controller<'static>);
assert_not_sync!(Controller<'static>);
assert_not_send!(Exclusive<'static, u64>);
const _: () = streamtask_core::testing::assert_sync::<Exclusive<'static, u64>>();
assert_not_send!(ReaderOutput<'static, u64>);
assert_not_sync!(ReaderOutput<'static, u64>);
