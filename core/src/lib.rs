//! The vocabulary every streamtask model shares: stream elements, operators and chains, user
//! functions, state snapshots, what a task reports for a checkpoint, channels between tasks,
//! processing time, metrics, the task-runtime kit every model's tasks are built on (`runtime`),
//! and the synchronization facade.
//!
//! Core keeps what every model runs on. Job-level machinery that no model needs (the checkpoint
//! coordinator, checkpoint storage and the sinks) lives in the root crate `streamtask`.
//!
//! Nothing here knows about checkpoint locks or mailboxes: an operator written against this crate
//! runs unchanged under `streamtask-legacy`, `streamtask-mailbox` and `streamtask-bridge`.
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
pub mod channel;
pub mod function;
pub mod keygroup;
pub mod metrics;
pub mod operator;
pub mod runtime;
pub mod state;
pub mod sync;
pub mod task;
pub mod testing;
pub mod time;
pub mod trace;

pub use crate::element::{
    CheckpointBarrier, CheckpointKind, StreamElement, StreamRecord, StreamStatus, Watermark,
};
pub use crate::error::{BoxError, OperatorError, catch_panic};
pub use crate::operator::{Context, Operator, Output, TaskOutput};
pub use crate::state::{StateError, TaskSnapshot};
pub use crate::task::{TaskConfig, TaskError, TaskFailure, TaskOutcome, TriggerError};
pub use crate::time::{
    Clock, ManualClock, Period, Rearm, Timer, TimerError, TimerHandle, TimerScheduler, TimerService,
};
