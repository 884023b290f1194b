//! streamtask-mailbox (in progress).
#![forbid(unsafe_code)]

mod action;
mod async_wait;
mod executor;
mod letter;
mod mail;
mod mailbox;
mod processor;
mod services;
mod source;
mod task;

pub use crate::action::{ActionExecutor, Immediate};
pub use crate::async_wait::AsyncWaitOperator;
pub use crate::executor::{MailboxExecutor, Rejected, SubmitError, SubmitHandle, YieldError};
pub use crate::letter::Letter;
pub use crate::mail::{Mail, Priority};
pub use crate::mailbox::{Exclusive, MailboxState, PutError, TakeError, TaskMailbox, WrongThread};
pub use crate::processor::{
    Controller, DefaultAction, LoopError, MailboxProcessor, ProcessorBuilder, ProcessorHandle,
    SuspendCause, Suspension,
};
pub use crate::services::{MailboxEvents, MailboxTimerService, OperatorMails};
pub use crate::source::{InputStatus, ReaderOutput, SourceReader};
pub use crate::task::{OneInputTask, SourceTask, TaskHandle, TwoInputTask};
