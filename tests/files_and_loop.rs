//! The files-and-loop job under every model: a monitoring source lists a directory that files are
//! added to while the job runs, three split readers read the splits in parallel, the values are
//! halved in an iteration until they fall below a bound (the rest fed back to the head), and the
//! results go to the exactly-once two-phase file sink. The committed output must equal a
//! reference computed without the runtime, identical under the three models, with a fault
//! injected in the monitoring source, in a reader, or inside the loop. The job is in
//! `common/files_and_loop.rs` (shared with `examples/files_and_loop.rs`).

#[path = "common/files_and_loop.rs"]
mod job;

use streamtask::fault::{FaultKind, FaultPlan};

use job::{MODELS, reference, run};

/// Where the fault fires.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// The monitoring source, at the 3rd file it forwards.
    Monitor,
    /// A split reader, at the 250th line emitted.
    Reader,
    /// The loop's requeue task, at its 1500th record after the first committed checkpoint.
    Loop,
}

impl Place {
    /// The file faults and the loop faults of a run with a fault at `place` (none for `None`).
    fn plans(place: Option<Place>) -> (FaultPlan, FaultPlan) {
        match place {
            None => (FaultPlan::none(), FaultPlan::none()),
            Some(Place::Monitor) => (FaultPlan::at(&[(FaultKind::Source, 3)]), FaultPlan::none()),
            Some(Place::Reader) => (
                FaultPlan::at(&[(FaultKind::Operator, 250)]),
                FaultPlan::none(),
            ),
            Some(Place::Loop) => (
                FaultPlan::none(),
                FaultPlan::at(&[(FaultKind::Operator, 1_500)]),
            ),
        }
    }
}

/// Every model commits the reference; a fault restarts the job.
fn every_model(place: Option<Place>) {
    let expected = reference();
    let mut outputs = Vec::new();
    for model in MODELS {
        let (file_faults, loop_faults) = Place::plans(place);
        let ran = run(model, file_faults, loop_faults);
        match place {
            Some(place) => assert!(
                ran.restarts >= 1,
                "{model}: the fault at {place:?} restarted"
            ),
            None => assert_eq!(ran.restarts, 0, "{model}: restarted without faults"),
        }
        assert_eq!(
            ran.output, expected,
            "{model} ({place:?}): not exactly the reference"
        );
        outputs.push(ran.output);
    }
    assert!(
        outputs.windows(2).all(|w| w[0] == w[1]),
        "identical under the three models"
    );
}

#[test]
fn smoke() {
    every_model(None);
}

#[test]
fn a_fault_in_the_monitoring_source_commits_the_reference_under_every_model() {
    every_model(Some(Place::Monitor));
}

#[test]
fn a_fault_in_a_reader_commits_the_reference_under_every_model() {
    every_model(Some(Place::Reader));
}

#[test]
fn a_fault_inside_the_loop_commits_the_reference_under_every_model() {
    every_model(Some(Place::Loop));
}
