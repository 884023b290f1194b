//! The mailbox threading model (Flink 1.10+): one task thread owns all task state; it runs a
//! priority mailbox of actions ("mails": checkpoints, timers, events, control) and, whenever no
//! mail is waiting, one step of its default action (process one input). Other threads only
//! enqueue mails or wake wakers.
//!
//! # Contents
//!
//! | part | what | Flink |
//! |---|---|---|
//! | [`TaskMailbox`], [`Mail`], [`Priority`] | the priority mailbox of one owner thread: states OPEN -> QUIESCED -> CLOSED, private batch, one-load "no mail" check | `TaskMailboxImpl` |
//! | [`MailboxProcessor`], [`Controller`], [`Suspension`], [`ProcessorHandle`] | the loop; default-action suspension and resume; poison and suspend; failure reports | `MailboxProcessor` |
//! | [`ActionExecutor`], [`Immediate`] | how mails reach the task state: the seam the bridge plugs its checkpoint lock into | `StreamTaskActionExecutor` |
//! | [`MailboxExecutor`], [`SubmitHandle`] | execute and submit from any thread; yield on the owner | `MailboxExecutorImpl` |
//! | [`MailboxTimerService`], [`MailboxEvents`], [`OperatorMails`] | timers and operator events as mails at the operator's priority | `ProcessingTimeServiceImpl` |
//! | [`MailboxFiring`] | interruptible firing of event-time timers: chunks, a deferrable continuation mail | `MailboxWatermarkProcessor` |
//! | [`SourceReader`], [`ReaderOutput`], [`InputStatus`] | new-style sources polled by the mailbox thread | FLIP-27 `SourceReader` |
//! | [`SourceStreamTask`], [`OneInputStreamTask`], [`TwoInputStreamTask`] ([`InputStreamTask`]), [`IterationHeadStreamTask`], [`TaskHandle`](streamtask_runtime::TaskHandle) | whole tasks on the kit (`streamtask_runtime`), built as in every model (`Kind::new(config, input, chain, output)`, then `spawn()`), behind the one handle every model shares | `SourceStreamTask`, `OneInputStreamTask`, `TwoInputStreamTask`, `StreamIterationHead` |
//! | [`AsyncOperator`], [`AsyncOperatorDriver`] | an operator of `async fn`s, one call at a time | `MailboxExecutor.yield()` |
//! | [`KeyedAsyncOperator`], [`KeyedAsyncOperatorDriver`] | a keyed operator of `async fn`s: many calls in flight, one per key, a cap, watermarks held by epoch | `AsyncExecutionController` (FLIP-425) |
//!
//! Protocols are written out where they live: the mailbox states and the lost-wakeup argument in
//! [`TaskMailbox`]'s module, the loop, suspension and poison protocols in
//! [`MailboxProcessor`]'s, the reader's availability protocol in [`SourceReader`]'s, and the
//! task lifecycle (soft backpressure, end of input, outcome) in [`SourceStreamTask`]'s.
//!
//! # Rust ownership and the mailbox
//!
//! Every action is a function of `&mut S`, the task state, run on the task thread. This crate's
//! tasks own `S` outright ([`Immediate`]), so no lock exists on their side. An operator that
//! holds `&mut self` cannot run mails from inside itself (every mail needs the state it is part
//! of), so Flink's re-entrant `yield` has no Rust counterpart inside operators: an operator that
//! waits for its own completions reports [`accepts_input`](streamtask_core::operator::Operator::accepts_input)
//! `== false`, the task suspends its default action, and the completion mail resumes it (soft
//! backpressure). Checkpoints keep flowing meanwhile.
//!
//! # For the bridge: the two seams
//!
//! - **[`ActionExecutor`]**: build a processor with
//!   [`ProcessorBuilder::build`]`(executor)` where `executor.run(f)` takes the checkpoint lock
//!   around `f(&mut state)`. Every action mail and default-action step then runs under the lock;
//!   control mails (poison, resume, failure reports) never do. Use [`ProcessorHandle`] from the
//!   legacy source thread: `all_actions_completed` when the source finishes, `report_failure`
//!   when it fails. Give operators [`MailboxTimerService`] and [`MailboxEvents`] by implementing
//!   [`OperatorMails`] on the state.
//! - **[`SourceReader`]**: the handoff reader implements it (object safe); the task calls
//!   `register_waker` after every [`InputStatus::NothingAvailable`] and the reader must wake it
//!   once data may be available, at once if it already is.
//!
//! # Name families
//!
//! `put` / `put_first`; `take` / `try_take` (`try_` never blocks); `yield_now` / `try_yield`;
//! `execute` (fire and forget) / `submit` (with a handle). Tasks carry the legacy model's names
//! and shape: `Kind::new(required..)`, then `spawn()`. Errors are small enums per operation;
//! a refused mail or action is handed back ([`PutError::into_inner`], [`Rejected::into_inner`]).
//!
//! # Examples
//!
//! A mail and a poison mail from another thread: the poison goes first and ends the loop; the
//! mail left behind runs when the processor drains.
//!
//! ```
//! use streamtask_mailbox::{Controller, Immediate, MailboxProcessor, Priority, TaskMailbox};
//!
//! let mut processor: MailboxProcessor<Vec<&str>, String> =
//!     MailboxProcessor::new(TaskMailbox::new(), Immediate::new(Vec::new()));
//! let executor = processor.mailbox_executor(Priority::MIN);
//! let handle = processor.handle();
//! std::thread::spawn(move || {
//!     executor
//!         .execute("greet", |log: &mut Vec<&str>| {
//!             log.push("mail");
//!             Ok(())
//!         })
//!         .unwrap();
//!     handle.all_actions_completed(); // put first: ahead of the mail
//! })
//! .join()
//! .unwrap();
//!
//! let mut step = |log: &mut Vec<&str>, _: &mut Controller<'_>| -> Result<(), String> {
//!     log.push("step");
//!     Ok(())
//! };
//! processor.run_mailbox_loop(&mut step).unwrap();
//! assert!(processor.action_executor().state().is_empty());
//!
//! processor.prepare_close().unwrap(); // quiesce: no new mails
//! processor.drain().unwrap(); // run what is left
//! assert_eq!(processor.action_executor().state(), &vec!["mail"]);
//! ```
//!
//! A whole source task is shown at [`SourceStreamTask`].
#![doc = "\n"]
#![doc = include_str!("task/task.md")]
#![doc = "\n# The async operator under this model\n\n"]
#![doc = include_str!("async_wait.md")]
#![forbid(unsafe_code)]
#![deny(unreachable_pub)]

mod action;
// Its thread-local parking and static key counter have no loom model; not in loom builds.
#[cfg(not(loom))]
mod async_operator;
mod call_waker;
#[cfg(loom)]
#[doc(hidden)]
pub mod call_waker_model;
mod executor;
mod firing;
// As `async_operator`: thread-local parking, no loom model (its wakers' protocol has one).
#[cfg(not(loom))]
mod keyed_async;
mod letter;
mod mail;
mod mailbox;
mod processor;
mod rejected;
mod services;
mod shared;
mod source;
mod task;
mod trigger_slot;
#[cfg(loom)]
#[doc(hidden)]
pub mod trigger_slot_model;

pub use crate::action::{ActionExecutor, Immediate};
#[cfg(not(loom))]
pub use crate::async_operator::{
    AsyncContext, AsyncOperator, AsyncOperatorDriver, AsyncOperatorError,
};
pub use crate::executor::{MailboxExecutor, Rejected, SubmitError, SubmitHandle, YieldError};
pub use crate::firing::MailboxFiring;
#[cfg(not(loom))]
pub use crate::keyed_async::{DEFAULT_MAX_IN_FLIGHT, KeyedAsyncOperator, KeyedAsyncOperatorDriver};
pub use crate::letter::{Letter, MAILBOX_LATENCY_SAMPLE};
pub use crate::mail::{Mail, Priority};
pub use crate::mailbox::{Exclusive, MailboxState, PutError, TakeError, TaskMailbox, WrongThread};
pub use crate::processor::{
    Controller, DefaultAction, LoopError, MailboxProcessor, ProcessorBuilder, ProcessorHandle,
    SuspendCause, Suspension,
};
pub use crate::services::{MailboxEvents, MailboxTimerService, OperatorMails};
pub use crate::source::{InputStatus, ReaderOutput, SourceReader};
pub use crate::task::{
    InputStreamTask, IterationHeadStreamTask, OneInputStreamTask, SourceStreamTask,
    TwoInputStreamTask,
};
