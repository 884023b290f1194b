//! streamtask: run stream-processing tasks under Flink's checkpoint-lock and mailbox threading
//! models side by side. (The job API and executor arrive with issue 7.)

#![forbid(unsafe_code)]

pub mod demo;
mod plot;
pub mod report;
