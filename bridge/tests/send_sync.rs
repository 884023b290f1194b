//! `Send`/`Sync` of the bridge's public handles, tasks, readers and error types, checked at
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

use streamtask_bridge::porting::{
    CheckpointSummary, Divergence, PortingError, PortingReport, RestoreCheck, RestoreSummary, Side,
};
use streamtask_bridge::{
    ChainingError, CheckpointLockExecutor, HandoffReader, LegacySourceStreamTask, PortedReader,
    ReaderSource, ReaderSourceState, StateCompatError,
};
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_legacy::SourceFunction;
use streamtask_mailbox::SourceReader;
use streamtask_runtime::TaskHandle;

// The handle the executor holds, and the errors.
assert_send_sync!(TaskHandle, ChainingError, StateCompatError);

// The porting kit's reports travel back to the test thread.
assert_send_sync!(
    Side,
    RestoreCheck,
    CheckpointSummary,
    RestoreSummary,
    PortingReport<u64>,
    Divergence<u64>,
    PortingError<u64>,
);

// The lock executor runs mails under a shared checkpoint lock.
assert_send_sync!(CheckpointLockExecutor<Vec<u64>>);

// Builders and readers move to the threads that run them, whatever the source and chain.
#[allow(dead_code)]
fn tasks_and_readers_are_send<F, C, W, R>()
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
    R: SourceReader<F::Out>,
{
    streamtask_core::testing::assert_send::<LegacySourceStreamTask<F, C, W>>();
    streamtask_core::testing::assert_send::<HandoffReader<F>>();
    streamtask_core::testing::assert_send::<ReaderSource<R, F::Out>>();
    streamtask_core::testing::assert_send::<ReaderSourceState<R, F::Out>>();
    streamtask_core::testing::assert_send::<PortedReader<R>>();
}
