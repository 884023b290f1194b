//! What a user's operator and function are written against, the same under every model: stream
//! elements, operators and chains, user functions, state and key groups, what a task reports for
//! a checkpoint, processing time and the timer service, async I/O as a user configures it,
//! metrics, traces, the synchronization facade and the test harnesses.
//!
//! Nothing here knows about checkpoint locks, mailboxes, threads of a task or tokio: an operator
//! written against this crate runs unchanged under `streamtask-legacy`, `streamtask-mailbox` and
//! `streamtask-bridge`, and compiles without them. What a model builds its tasks from (the task
//! body, lifecycle and handle, channels and input gates, the async engine and its tokio runtime,
//! the timer thread) is `streamtask-runtime`; job-level machinery (the checkpoint coordinator,
//! checkpoint storage, the sinks) is the root crate `streamtask`.
//!
//! # Contents
//!
//! | part | what | Flink |
//! |---|---|---|
//! | [`StreamRecord`], [`Watermark`], [`StreamStatus`], [`CheckpointBarrier`], [`StreamElement`] | what flows between operators and tasks | `StreamElement` and its kinds |
//! | [`operator`]: [`Operator`](operator::Operator), [`Context`](operator::Context), [`Output`](operator::Output), chains, ready-made and keyed operators, side outputs | an operator's lifecycle and what it emits to | `StreamOperator`, `OperatorChain`, `KeyedProcessOperator` |
//! | [`function`] | the user functions: keyed process, co-process, async | `KeyedProcessFunction`, `CoProcessFunction`, `AsyncFunction` |
//! | [`state`], [`keygroup`] | snapshots and their encoding; key groups, key-grouped, list and union state | `KeyGroupRange`, `ListState` |
//! | [`task`] | a task's config, outcome, failure, state and checkpoint report | `Task`'s `ExecutionState`, `CheckpointResponder` |
//! | [`time`] | the clock and the timer service an operator registers with | `ProcessingTimeService` |
//! | [`async_io`] | the async operator's config, batched calls, retry policies, the blocking pool | `AsyncDataStream`'s options, `AsyncRetryStrategy`, the async batch function |
//! | [`metrics`], [`trace`] | a task's counters and latency histograms; spans of who ran what | `TaskIOMetricGroup` |
//! | [`live`] | what a task is doing right now (its thread's activity, barriers per input channel, the checkpoint lock's holder), for the stalled-checkpoint report | the thread dumps and back-pressure sampling of Flink's web UI |
//! | [`sync`] | the one place that names locks, atomics and threads (loom under `cfg(loom)`) | - |
//! | [`testing`] | operator and two-input harnesses, a manual timer service, `Send`/`Sync` checks | `OneInputStreamOperatorTestHarness` |
//!
//! # Name families
//!
//! - `x` / `try_x`: `try_` never blocks and may fail (`send` / `try_send`, `recv` / `try_recv`).
//! - Errors are small enums per operation; one that could not deliver a payload hands it back
//!   (`into_inner`).
//! - Builders are `Config` structs with `new(...)` taking what is required and `with_x` for the
//!   rest, validated by a `build()` or the constructor that uses them.
//!
//! # Examples
//!
//! A chain of ready-made operators, driven by the model-free test harness:
//!
//! ```
//! use streamtask_core::operator::{Filter, Map, OperatorExt};
//! use streamtask_core::testing::OperatorHarness;
//!
//! let chain = Map::new("square", |x: u64| x * x).then(Filter::new("odd", |x: &u64| x % 2 == 1));
//! let mut harness = OperatorHarness::new(chain);
//! harness.open().unwrap();
//! for x in 0..6 {
//!     harness.process(x).unwrap();
//! }
//! harness.end_input().unwrap();
//! assert_eq!(harness.output_values(), vec![1, 9, 25]);
//! ```

#![forbid(unsafe_code)]

mod element;
mod error;

pub mod async_io;
pub mod function;
pub mod keygroup;
pub mod live;
pub mod metrics;
pub mod operator;
pub mod state;
pub mod sync;
pub mod task;
pub mod testing;
pub mod time;
pub mod trace;

pub use crate::element::{
    Alignment, CheckpointBarrier, CheckpointKind, StreamElement, StreamRecord, StreamStatus,
    Watermark,
};
pub use crate::error::{BoxError, OperatorError, catch_panic};
