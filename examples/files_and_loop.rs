//! The files-and-loop job, written once and run under the legacy, mailbox and bridge models: a
//! monitoring source lists a directory that files are added to while the job runs, three split
//! readers read the splits in parallel, an iteration halves the values until they fall below a
//! bound (the rest fed back to the head), and the two-phase file sink commits exactly once.
//! Three faults are injected in every run: in the monitoring source, in a reader and inside the
//! loop. The committed output must equal a reference computed without the runtime, under every
//! model; the example asserts it.
//!
//! The job ends because the monitoring source stops after the last file (`stop_after_files`);
//! the readers then end, and the iteration head ends when no feedback came for its wait timeout.
//! The job is the one `tests/files_and_loop.rs` checks: both include
//! `tests/common/files_and_loop.rs`.
//!
//! Run with `cargo run --example files_and_loop`.

#[path = "../tests/common/files_and_loop.rs"]
mod job;

use streamtask::fault::{FaultKind, FaultPlan, quiet_injected_panics};

use job::{FILES, MODELS, reference, run};

fn main() {
    // The injected faults panic on purpose: keep their messages out of the output (no logger
    // is installed, so the one-line report goes nowhere).
    quiet_injected_panics();
    let expected = reference();
    let mut outputs = Vec::new();
    for model in MODELS {
        // The monitor fails at the 3rd file it forwards, a reader at the 250th line emitted, the
        // loop's requeue task at its 1500th record after the first committed checkpoint.
        let file_faults = FaultPlan::at(&[(FaultKind::Source, 3), (FaultKind::Operator, 250)]);
        let loop_faults = FaultPlan::at(&[(FaultKind::Operator, 1_500)]);
        let ran = run(model, file_faults, loop_faults);
        assert!(ran.restarts >= 1, "{model}: the faults restarted the job");
        assert_eq!(ran.output, expected, "{model}: exactly the reference, once");
        println!(
            "{model:<8} {} results from {FILES} files committed exactly once through {} restart(s)",
            ran.output.len(),
            ran.restarts
        );
        outputs.push(ran.output);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    println!("identical output under the three models");
}
