//! One run at a time per directory: a job's run locks its checkpoint directory and every
//! sink's output directory (an OS file lock, released when the run returns or the process
//! dies); a run that finds one held is refused, naming the holder.

use std::path::Path;

use streamtask::prelude::*;
use streamtask::{DirLock, JobError, JobResult, LockError};

fn job(checkpoints_and_output: &Path, output: &Path) -> (JobGraph, JobConfig) {
    let env = StreamEnvironment::new(Model::Mailbox);
    env.from_sequence("numbers", 0..100)
        .two_phase_file_sink("sink", output, |n: &u64| n.to_string());
    (env.build().unwrap(), JobConfig::new(checkpoints_and_output))
}

fn assert_held_by_us(result: Result<JobResult, JobError>, dir: &Path) {
    match result {
        Err(JobError::Lock(LockError::InUse { dir: held, pid })) => {
            assert_eq!(held, dir);
            assert_eq!(pid, Some(std::process::id()));
        }
        other => panic!("expected the lock to be refused, got {other:?}"),
    }
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let (job, config) = job(dir.path(), &dir.path().join("out"));
    job.run(&config).unwrap();
    // Released when the run returned: the next run takes it.
    job.run(&config).unwrap();
    assert_eq!(
        streamtask::sink::read_committed(dir.path().join("out"))
            .unwrap()
            .len(),
        100
    );
}

#[test]
fn a_run_whose_checkpoint_dir_is_held_is_refused_before_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (job, config) = job(dir.path(), &dir.path().join("out"));
    let held = DirLock::acquire(&config.checkpoint_dir).unwrap();
    assert_held_by_us(job.run(&config), &config.checkpoint_dir);
    assert!(
        !config.checkpoint_dir.join("_run").exists(),
        "nothing written"
    );
    drop(held);
    job.run(&config).unwrap();
}

#[test]
fn two_jobs_sharing_an_output_dir_do_not_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("shared-output");
    let (job, config) = job(&dir.path().join("a"), &output);
    let held = DirLock::acquire(&output).unwrap();
    assert_held_by_us(job.run(&config), &output);
    drop(held);
    job.run(&config).unwrap();
}
