//! The demo job end to end under every model that can run it: committed output equals the
//! reference output, with and without injected faults.

use std::sync::Arc;

use streamtask::fault::FaultPlan;
use streamtask::{JobConfig, Model};
use streamtask_cli::demo::data::DemoData;
use streamtask_cli::demo::job::DemoJob;

fn small() -> DemoData {
    DemoData {
        orders: 3_000,
        customers: 40,
        seed: 11,
    }
}

fn run(model: Model, job: &DemoJob) -> streamtask_cli::demo::job::DemoRun {
    let config = JobConfig::new(&job.work_dir);
    job.run(model, config)
        .unwrap_or_else(|e| panic!("{model}: {e}"))
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let job = DemoJob::new(small(), dir.path());
    job.prepare().unwrap();
    let legacy = run(Model::Legacy, &job);
    assert!(
        legacy.exactly_once,
        "legacy output differs from the reference"
    );
    let mailbox = run(Model::Mailbox, &job);
    assert!(
        mailbox.exactly_once,
        "mailbox output differs from the reference"
    );
    let bridge = run(Model::Bridge, &job);
    assert!(
        bridge.exactly_once,
        "bridge output differs from the reference"
    );
    assert_eq!(legacy.digest, mailbox.digest);
    assert_eq!(legacy.digest, bridge.digest);
}

#[test]
fn injected_faults_restart_the_job_without_losing_or_duplicating_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = DemoJob::new(small(), dir.path());
    job.checkpoint_interval = std::time::Duration::from_millis(10);
    job.prepare().unwrap();
    for model in Model::ALL {
        for seed in 0..5 {
            job.faults = Arc::new(FaultPlan::seeded(seed, 2, job.data.orders));
            let run = run(model, &job);
            assert!(
                run.exactly_once,
                "{model} seed {seed}: output differs after {} restarts ({:?})",
                run.result.restarts, run.result.failures
            );
            // Every failure is an injected fault (two may hit the same attempt): nothing else
            // fails, and a fault that fired caused a restart.
            assert!(
                run.result.failures.iter().all(|f| f.is_injected()),
                "{model} seed {seed}: failures {:?}",
                run.result.failures
            );
            assert!(run.result.restarts as usize <= job.faults.fired());
            assert_eq!(run.result.restarts == 0, job.faults.fired() == 0);
        }
    }
}

#[test]
fn checkpoints_completed_counts_every_checkpoint_the_run_stored() {
    // The count is read after the coordinator stopped, so a checkpoint it completes while the
    // tasks end is counted as well as stored. With retention large enough to keep
    // every checkpoint, the count equals what the storage holds.
    for model in Model::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut job = DemoJob::new(small(), dir.path());
        job.checkpoint_interval = std::time::Duration::from_millis(2);
        job.prepare().unwrap();
        let config = JobConfig {
            retained_checkpoints: 100_000,
            ..JobConfig::new(&job.work_dir)
        };
        let run = job
            .run(model, config)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let storage = streamtask::checkpoint::CheckpointStorage::directory(
            job.model_dir(model).join("checkpoints"),
            100_000,
        )
        .unwrap();
        assert_eq!(
            run.result.checkpoints_completed,
            storage.completed_ids().unwrap().len() as u64,
            "{model}"
        );
    }
}

/// The fairness set on the job reaches every legacy task, not only source tasks.
/// The demo job has every legacy task kind (source, keyed one-input, async, sink); each task
/// reports the checkpoint lock it ran under.
#[test]
fn the_fairness_set_on_the_job_reaches_every_legacy_task() {
    use streamtask_cli::demo::data::DemoData;
    use streamtask_cli::demo::job::DemoJob;
    use streamtask_legacy::Fairness;

    for fairness in [Fairness::Fair, Fairness::Unfair] {
        let dir = tempfile::tempdir().unwrap();
        let data = DemoData {
            orders: 200,
            customers: 5,
            seed: 1,
        };
        let job = DemoJob::new(data, dir.path());
        job.prepare().unwrap();
        for model in [streamtask::Model::Legacy, streamtask::Model::Bridge] {
            let config = streamtask::JobConfig::new(dir.path()).with_fairness(fairness);
            let run = job.run(model, config).unwrap();
            let locked: Vec<_> = run
                .result
                .tasks
                .iter()
                .filter_map(|t| {
                    t.metrics
                        .checkpoint_lock
                        .clone()
                        .map(|l| (t.name.clone(), l))
                })
                .collect();
            let expected = match model {
                // Every task of the legacy model lives under a checkpoint lock.
                streamtask::Model::Legacy => run.result.tasks.len(),
                // In the bridge only the legacy source's task does.
                _ => run
                    .result
                    .tasks
                    .iter()
                    .filter(|t| t.name.starts_with("orders"))
                    .count(),
            };
            assert!(expected > 0, "{model}: the job has tasks of that kind");
            assert_eq!(locked.len(), expected, "{model}: {locked:?}");
            assert!(
                locked.iter().all(|(_, l)| l == fairness.name()),
                "{model} {fairness:?}: {locked:?}"
            );
        }
    }
}

/// Bytes the files under `dir` take on the disk (allocated blocks, as `du`).
fn disk_usage(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                disk_usage(&p)
            } else {
                meta.blocks() * 512
            }
        })
        .sum()
}

#[test]
fn the_space_estimate_covers_a_finished_run_and_a_rerun_counts_only_what_it_still_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Beyond the estimate's sample of 10,000 orders: the rest is extrapolated.
    let data = DemoData {
        orders: 30_000,
        customers: 500,
        seed: 3,
    };
    let job = DemoJob::new(data, dir.path());
    let estimate = job.bytes_to_write(&[Model::Mailbox]);
    job.prepare().unwrap();
    assert!(run(Model::Mailbox, &job).exactly_once);
    let used = disk_usage(dir.path());
    assert!(
        estimate >= used,
        "estimated {estimate} bytes, the finished run uses {used}"
    );
    assert!(
        estimate <= used * 3 / 2,
        "estimated {estimate} bytes, far above the {used} the run uses"
    );
    // The data is generated and the output committed: a rerun writes little new (a fresh
    // start deletes the output it rewrites first).
    let rerun = job.bytes_to_write(&[Model::Mailbox]);
    assert!(
        rerun < estimate / 4,
        "a rerun counted {rerun} bytes of {estimate}"
    );
    assert!(job.is_generated());
}
