//! One job written once, run under the legacy, mailbox and bridge models with checkpoints and
//! injected faults, using every shape of the job API: a legacy `SourceFunction` and a
//! `from_sequence` reader (each model picks its adapter), a watermark strategy after each
//! source (bounded out-of-orderness, idleness, periodic watermarks), timestamps read in
//! context-aware maps, a fan-out, connect keyed on both sides with a `CoProcessFunction` (per-key
//! state, event- and processing-time timers, the end-of-input hook), a side output, a union,
//! and the partitioners hash, rebalance, rescale, shuffle, custom, broadcast and global. The
//! committed output must be identical under the three models and equal to the output of a run
//! without faults; the example asserts it and prints each model's plan.
//!
//! The job, its source and its expected output are the ones `tests/job_shapes.rs` checks
//! (`every_shape_in_one_job_is_exactly_once_under_every_model`): both include
//! `tests/common/job_shapes.rs`, so the example runs exactly the tested job.
//!
//! Run with `cargo run --example job_shapes`.

#[path = "../tests/common/job_shapes.rs"]
mod shapes;

use streamtask::fault::{FaultKind, FaultPlan, quiet_injected_panics};

use shapes::{MODELS, every_shape, every_shape_expected, run};

fn main() {
    // The injected faults panic on purpose: keep their messages out of the output (no logger
    // is installed, so the one-line report goes nowhere).
    quiet_injected_panics();

    let mut expected = every_shape_expected();
    expected.sort_unstable();

    let mut outputs = Vec::new();
    for model in MODELS {
        let faults = FaultPlan::at(&[
            (FaultKind::Source, 400),
            (FaultKind::Operator, 700),
            (FaultKind::Timer, 30),
        ]);
        let (got, restarts, plan) = run(model, faults, every_shape);
        println!("{plan}");
        assert_eq!(
            got, expected,
            "{model}: committed output is not exactly once"
        );
        println!(
            "{model}: {} records committed exactly once after {restarts} restarts\n",
            got.len()
        );
        outputs.push(got);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    println!("identical exactly-once output under the legacy, mailbox and bridge models");
}
