//! Heap allocations on the mailbox hot path, counted by a global allocator: zero per record.
//!
//! `cargo bench --bench mailbox_allocations`
//!
//! Two measurements, each at two record counts so that fixed costs cancel out:
//!
//! 1. the `MailboxProcessor` loop on this thread, a reader -> map -> output step per default
//!    action and no mail: allocations inside `run_mailbox_loop`;
//! 2. a whole `SourceStreamTask` (thread start, metrics, join included): allocations of the run.
//!
//! The per-record figure is `(allocations at N2 - allocations at N1) / (N2 - N1)`; the binary
//! exits with an error if it is not zero.

use std::alloc::System;
use streamtask_cli::bench::hot_path::{Counter, Pipeline, triple};

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use streamtask_core::OperatorError;
use streamtask_core::operator::Discard;
use streamtask_core::task::TaskConfig;
use streamtask_mailbox::{
    Controller, Immediate, InputStatus, MailboxProcessor, SourceStreamTask, TaskMailbox,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const FEW: u64 = 10_000;
const MANY: u64 = 1_000_000;

/// Allocations made while the processor loop runs `records` steps.
fn processor_loop(records: u64) -> usize {
    let mut processor = MailboxProcessor::<Pipeline, OperatorError>::new(
        TaskMailbox::new(),
        Immediate::new(Pipeline::new(records)),
    );
    let mut step = |p: &mut Pipeline, c: &mut Controller<'_>| -> Result<(), OperatorError> {
        if p.step() == InputStatus::EndOfInput {
            c.all_actions_completed();
        }
        Ok(())
    };
    let region = Region::new(GLOBAL);
    processor
        .run_mailbox_loop(&mut step)
        .expect("the bench loop never fails");
    let allocations = region.change().allocations;
    assert_eq!(processor.action_executor().state().reader.next, records);
    allocations
}

/// Allocations made by a whole source task over `records` records.
fn source_task(records: u64) -> usize {
    let region = Region::new(GLOBAL);
    let task = SourceStreamTask::new(
        TaskConfig::new("alloc"),
        Counter {
            next: 0,
            end: records,
        },
        triple(),
        Discard,
    )
    .spawn();
    let metrics = std::sync::Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    let allocations = region.change().allocations;
    assert_eq!(metrics.records_in.get(), records);
    allocations
}

fn per_record(name: &str, measure: fn(u64) -> usize) -> bool {
    // Warm up once so lazily initialized statics do not count.
    measure(FEW);
    let few = measure(FEW);
    let many = measure(MANY);
    let per_record = many.saturating_sub(few) as f64 / (MANY - FEW) as f64;
    println!(
        "{name:<16} allocations: {few:>6} for {FEW:>9} records, {many:>6} for {MANY:>9} records \
         -> {per_record:.6} per record"
    );
    many <= few
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this too (no arguments),
    // which is fine: the check is quick and not a timing.
    let loop_ok = per_record("processor_loop", processor_loop);
    let task_ok = per_record("source_task", source_task);
    if !(loop_ok && task_ok) {
        eprintln!("the hot path allocates per record");
        std::process::exit(1);
    }
}
