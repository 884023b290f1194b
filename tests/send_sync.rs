//! `Send`/`Sync` of the job layer's public types (the checkpoint coordinator, storage and the
//! sinks), checked at compile time in the shape of tokio's `tests/async_send_sync.rs`.

// The checks are core's `assert_*` macros (`streamtask_core::testing`): each line fails to
// compile if the type lost (or, for the `not` lines, gained) the property; `smoke` only makes the
// file a test target that shows up in the test list.

#[allow(unused_imports)]
use streamtask_core::{assert_not_send, assert_not_sync, assert_send_only, assert_send_sync};

#[test]
fn smoke() {}

/// The checkpoint coordinator and the sinks (the job layer's).
mod checkpoint_and_sinks {
    use streamtask::checkpoint::{
        AbortReason, CheckpointStats, CheckpointStatsSummary, ConfigError, CoordinatorAction,
        CoordinatorDriver, CoordinatorError, Corruption, DriverError, StorageError,
    };
    use streamtask::sink::{CollectHandle, CollectSink, SinkError, TwoPhaseCommitFileSink};
    use streamtask::{
        checkpoint::CheckpointConfig, checkpoint::CheckpointCoordinator,
        checkpoint::CheckpointStorage, checkpoint::CompletedCheckpoint,
    };
    use streamtask_core::{assert_not_sync, assert_send_only, assert_send_sync};

    assert_send_sync!(
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
    assert_send_sync!(CollectHandle<u64>, CollectSink<u64>, SinkError);
    // The file sink keeps its record formatter as a `Box<dyn Fn + Send>` (no `Sync` bound), so
    // the sink is `Send` but not `Sync`. Harmless (a task owns its sink), but unlike the other
    // sink, worth knowing before sharing one by reference.
    assert_send_only!(TwoPhaseCommitFileSink<u64>);
    assert_not_sync!(TwoPhaseCommitFileSink<u64>);
}

/// The job builder's streams: built on one thread (they share the environment's
/// `Rc`), so neither `Send` nor `Sync`; what runs is the built `JobGraph`.
mod job_builder {
    use streamtask::prelude::{ConnectedStreams, DataStream, KeyedConnectedStreams, KeyedStream};
    use streamtask_core::{assert_not_send, assert_not_sync};

    assert_not_send!(DataStream<u64>);
    assert_not_sync!(DataStream<u64>);
    assert_not_send!(KeyedStream<u64, u64>);
    assert_not_send!(ConnectedStreams<u64, u64>);
    assert_not_send!(KeyedConnectedStreams<u64, u64, u64>);
    assert_not_sync!(KeyedConnectedStreams<u64, u64, u64>);
}

/// Savepoints: the handle is pulled from signal handlers and other threads.
mod savepoints {
    use streamtask::checkpoint::{Savepoint, SavepointMetadata, StateEntry, VertexShape};
    use streamtask::{SavepointHandle, StopWithSavepoint};
    use streamtask_core::assert_send_sync;
    use streamtask_core::keygroup::{
        KeyGroupError, KeyGroupRange, KeyGroupedState, ListState, RedistributeError, UnionState,
    };

    assert_send_sync!(
        SavepointHandle,
        StopWithSavepoint,
        Savepoint,
        SavepointMetadata,
        StateEntry,
        VertexShape,
        KeyGroupRange,
        KeyGroupError,
        RedistributeError,
        KeyGroupedState<u64>,
        ListState<u64>,
        UnionState<u64>,
    );
}

/// A run's directory locks and its non-recoverable failures: held by and sent from any thread.
mod run_edges {
    use streamtask::{DirLock, LockError, NonRecoverable};
    use streamtask_core::assert_send_sync;

    assert_send_sync!(DirLock, LockError, NonRecoverable);
}

/// Split sources: the coordinator is shared by the executor's threads and every reader; a
/// reader moves to its task's thread; errors and state items travel between threads.
mod split_sources {
    use streamtask::files::{FileSource, FileSourceReader, FileSplitEnumerator};
    use streamtask::source::{
        CoordinatorSnapshot, ReaderEvent, SourceCoordinator, SourceError, SourceEvent,
        SplitSourceReader, SplitStateItem,
    };
    use streamtask_core::{assert_send_only, assert_send_sync};

    assert_send_sync!(
        SourceCoordinator<FileSource>,
        SourceError,
        SplitStateItem,
        CoordinatorSnapshot,
        ReaderEvent,
        SourceEvent<u64>,
        FileSource,
    );
    assert_send_only!(
        SplitSourceReader<FileSource>,
        FileSourceReader,
        FileSplitEnumerator
    );
}
