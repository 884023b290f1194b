//! An iteration, written once and run under the legacy, mailbox and bridge models with
//! checkpoints and a fault injected inside the loop: values are halved until they fall below a
//! bound, the rest fed back to the head (`DataStream::iterate` / `IterativeStream::close_with`).
//!
//! The committed output must equal a reference computed without the runtime, under every model:
//! the records circulating in the loop at a checkpoint are in the head's snapshot (its feedback
//! log, Carbone et al. 2015) and are replayed on restore, where Flink's iterations lose them.
//! The example asserts it and prints the plan and how many records the retained checkpoints
//! hold in their feedback logs.
//!
//! Run with `cargo run --example iteration`.

use std::sync::Arc;
use std::time::Duration;

use streamtask::checkpoint::CheckpointStorage;
use streamtask::fault::{FaultKind, FaultPlan, quiet_injected_panics};
use streamtask::prelude::*;
use streamtask_runtime::feedback_log;

const RECORDS: u64 = 2_000;
const BOUND: u64 = 10;

fn value(id: u64) -> u64 {
    (id * 7_919) % 65_536 + 1
}

/// The loop without the runtime.
fn reference() -> Vec<(u64, u64)> {
    (0..RECORDS)
        .map(|id| {
            let mut v = value(id) / 2;
            while v >= BOUND {
                v /= 2;
            }
            (id, v)
        })
        .collect()
}

/// The job, written once for every model.
fn build(model: Model, faults: &Arc<FaultPlan>, out: &CollectHandle<(u64, u64)>) -> JobGraph {
    let env = StreamEnvironment::new(model);
    let (iteration, head) = env
        .from_sequence("ids", 0..RECORDS)
        .map("value", |id: u64| (id, value(id)))
        .rebalance("spread", 2)
        .iterate("halve loop", Duration::from_secs(1));
    let mut branches = head
        .map("halve", |(id, v): (u64, u64)| (id, v / 2))
        .fan_out(&["again", "done"]);
    let done = branches.pop().expect("two branches");
    let again = branches.pop().expect("two branches");
    let loop_faults = Arc::clone(faults);
    iteration.close_with(
        again
            .filter("big", |&(_, v): &(u64, u64)| v >= BOUND)
            .key_by(|&(id, _): &(u64, u64)| id % 7)
            .map_with_parallelism("requeue", 2, move |record: (u64, u64)| {
                loop_faults.check(FaultKind::Operator);
                record
            }),
    );
    done.filter("small", |&(_, v): &(u64, u64)| v < BOUND)
        .collect_sink("collect", out);
    env.build().expect("the job is well formed")
}

/// Records held in the heads' feedback logs by the checkpoints retained in `dir`.
fn logged(dir: &std::path::Path) -> usize {
    let storage = CheckpointStorage::directory(dir.join("checkpoints"), 3).expect("storage");
    let mut logged = 0;
    for id in storage.completed_ids().expect("ids") {
        let checkpoint = storage.load(id).expect("a completed checkpoint");
        for (task, snapshot) in &checkpoint.tasks {
            if task.starts_with("halve loop#") {
                let log: Vec<StreamRecord<(u64, u64)>> =
                    feedback_log(snapshot).expect("a readable log");
                logged += log.len();
            }
        }
    }
    logged
}

fn main() {
    // The injected faults panic on purpose: keep their messages out of the output (no logger
    // is installed, so the one-line report goes nowhere).
    quiet_injected_panics();
    let expected = reference();
    let mut outputs = Vec::new();
    for model in [Model::Legacy, Model::Mailbox, Model::Bridge] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let faults = Arc::new(FaultPlan::at(&[(FaultKind::Operator, 9_000)]));
        let out = CollectHandle::new();
        let job = build(model, &faults, &out);
        if model == Model::Legacy {
            println!("{}", job.plan());
        }
        let config = JobConfig::new(dir.path())
            .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(10))))
            .with_restart(RestartStrategy::fixed_delay(3, Duration::from_millis(1)))
            .with_channel_capacity(16);
        let result = job.run(&config).expect("the job completes");
        let mut got = out.committed();
        got.sort();
        assert_eq!(
            faults.fired(),
            1,
            "{model}: the fault inside the loop fired"
        );
        assert_eq!(got, expected, "{model}: exactly once through the fault");
        println!(
            "{model:>8}: {} records committed, {} restart(s), {} checkpoints, {} loop records in the retained feedback logs",
            got.len(),
            result.restarts,
            result.checkpoints_completed,
            logged(dir.path())
        );
        outputs.push(got);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    println!("identical exactly-once output under the three models");
}
