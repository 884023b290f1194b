//! The sample job on timely workers in one process commits what the local executor commits,
//! exactly once, also through a crash and a restore.

use std::path::Path;
use std::time::Duration;

use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_timely::sample::{local_job, read_round_robin, timely_job, write_input};
use streamtask_timely::{TimelyConfig, TimelyError, run};

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// The local executor's committed output (mailbox model) for the sample inputs.
fn reference(inputs: &[std::path::PathBuf], work: &Path) -> Vec<String> {
    let out = work.join("local-out");
    let job = local_job(Model::Mailbox, inputs.to_vec(), 1, &out).unwrap();
    job.run(&JobConfig::new(work.join("local"))).unwrap();
    sorted(read_committed(&out).unwrap())
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_input(&dir.path().join("in"), 3, 400).unwrap();
    let expected = reference(&inputs, dir.path());
    assert!(expected.iter().any(|l| l.starts_with("win,")));
    assert!(expected.iter().any(|l| l.starts_with("rec,")));

    let out = dir.path().join("timely-out");
    let config = TimelyConfig::new(dir.path().join("chk"))
        .workers(2)
        .checkpoint_interval(Duration::from_millis(5))
        .max_epoch_records(100);
    let summary = run(timely_job(inputs, &out), &config).unwrap();
    assert_eq!(summary.restored_from, None);
    assert!(summary.last_checkpoint.is_some());
    assert_eq!(summary.records_read, 1200);
    assert_eq!(sorted(read_committed(&out).unwrap()), expected);
}

#[test]
fn a_crash_restores_the_last_complete_epoch_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_input(&dir.path().join("in"), 4, 500).unwrap();
    let expected = reference(&inputs, dir.path());

    let out = dir.path().join("timely-out");
    let base = TimelyConfig::new(dir.path().join("chk"))
        .workers(2)
        .checkpoint_interval(Duration::from_millis(2))
        .max_epoch_records(50);
    // Worker 1 crashes the run after 600 records: several epochs completed by then (50 records
    // per epoch per source worker, at most two in flight).
    let crashed = run(
        timely_job(inputs.clone(), &out),
        &base.clone().crash_after(1, 600),
    );
    assert!(matches!(crashed, Err(TimelyError::Crashed)), "{crashed:?}");
    let committed_before = read_committed(&out).unwrap().len();
    assert!(committed_before < expected.len());

    let summary = run(timely_job(inputs, &out), &base).unwrap();
    assert!(
        summary.restored_from.is_some(),
        "the crashed run completed a checkpoint"
    );
    assert!(
        summary.records_read < 2000,
        "the restore resumed after the checkpoint's offsets"
    );
    assert_eq!(sorted(read_committed(&out).unwrap()), expected);
}

#[test]
fn a_sources_watermark_stays_behind_its_records_across_many_containers() {
    // Large epochs: one epoch of one source spans many exchanged containers, which the keyed
    // operator must apply in arrival order (a window fired early would be split in two).
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_input(&dir.path().join("in"), 4, 3_000).unwrap();
    let expected = streamtask_timely::sample::expected_output(&read_round_robin(&inputs).unwrap());
    let out = dir.path().join("timely-out");
    let config = TimelyConfig::new(dir.path().join("chk"))
        .workers(2)
        .checkpoint_interval(Duration::from_secs(60))
        .max_epoch_records(1_000_000);
    run(timely_job(inputs, &out), &config).unwrap();
    assert_eq!(sorted(read_committed(&out).unwrap()), expected);
}
