//! Exactly-once under faults, the CI version: the demo job under every model with 50 fault
//! seeds each (two injected panics per run: in the source, an operator, a timer, an async call
//! or a snapshot); the committed output must equal the reference output every time. The long
//! version is `streamtask soak`.

use std::sync::Arc;
use std::time::Duration;

use streamtask::fault::FaultPlan;
use streamtask::{JobConfig, Model};
use streamtask_cli::demo::data::DemoData;
use streamtask_cli::demo::job::DemoJob;

const SEEDS: u64 = 50;

fn soak(model: Model) {
    let dir = tempfile::tempdir().unwrap();
    let data = DemoData {
        orders: 1_500,
        customers: 25,
        seed: 5,
    };
    let mut job = DemoJob::new(data, dir.path());
    job.checkpoint_interval = Duration::from_millis(5);
    job.prepare().unwrap();
    let mut restarts = 0;
    for seed in 0..SEEDS {
        job.faults = Arc::new(FaultPlan::seeded(seed, 2, data.orders));
        let run = job
            .run(model, JobConfig::new(dir.path()))
            .unwrap_or_else(|e| panic!("{model} seed {seed}: {e}"));
        assert!(
            run.exactly_once,
            "{model} seed {seed}: committed output differs from the reference after {} restarts: {:?}",
            run.result.restarts, run.result.failures
        );
        assert!(
            run.result.failures.iter().all(|f| f.is_injected()),
            "{model} seed {seed}: a failure that was not injected: {:?}",
            run.result.failures
        );
        restarts += run.result.restarts;
    }
    // The seeds do inject: most runs restart at least once.
    assert!(
        restarts >= SEEDS as u32 / 2,
        "{model}: only {restarts} restarts in {SEEDS} runs"
    );
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let job = DemoJob::new(
        DemoData {
            orders: 500,
            customers: 5,
            seed: 1,
        },
        dir.path(),
    );
    job.prepare().unwrap();
    let run = job.run(Model::Mailbox, JobConfig::new(dir.path())).unwrap();
    assert!(run.exactly_once);
}

#[test]
fn legacy_model_is_exactly_once_under_50_fault_seeds() {
    soak(Model::Legacy);
}

#[test]
fn mailbox_model_is_exactly_once_under_50_fault_seeds() {
    soak(Model::Mailbox);
}

#[test]
fn bridge_model_is_exactly_once_under_50_fault_seeds() {
    soak(Model::Bridge);
}
