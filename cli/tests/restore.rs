//! Where a run starts: a fresh start never restores by itself; a finished run
//! leaves nothing to resume; an unfinished run's state is resumed or discarded only when asked;
//! a damaged newest checkpoint is a typed error unless falling back is asked for, and then the
//! sink rewinds so the committed output stays exactly-once; a checkpoint of another job shape
//! is refused.
//!
//! An unfinished run is made the way a SIGKILL leaves one (the process-crash test in
//! `tests/process_crash.rs` does it for real): the run marker says `running`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use streamtask::checkpoint::CheckpointStorage;
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::sink::read_committed;
use streamtask::{JobConfig, JobError, Model, Restore};
use streamtask_cli::demo::data::{DemoData, expected_output};
use streamtask_cli::demo::job::DemoJob;

fn data() -> DemoData {
    DemoData {
        orders: 10_000,
        customers: 20,
        seed: 3,
    }
}

fn demo(dir: &Path) -> DemoJob {
    let mut job = DemoJob::new(data(), dir);
    job.checkpoint_interval = Duration::from_millis(1);
    job.prepare().unwrap();
    job
}

fn checkpoints(job: &DemoJob, model: Model) -> PathBuf {
    job.model_dir(model).join("checkpoints")
}

fn output(job: &DemoJob, model: Model) -> Vec<String> {
    let mut lines = read_committed(job.model_dir(model).join("output")).unwrap();
    lines.sort_unstable();
    lines
}

fn expected() -> Vec<String> {
    let mut lines = expected_output(&data());
    lines.sort_unstable();
    lines
}

/// Makes the finished run in `job`'s model directory look like one killed mid-run.
fn mark_unfinished(job: &DemoJob, model: Model) {
    fs::write(checkpoints(job, model).join("_run"), "running\n").unwrap();
}

/// A fair checkpoint lock, so the legacy source does not starve checkpoint triggers.
fn config(job: &DemoJob) -> JobConfig {
    JobConfig::new(&job.work_dir).with_fairness(streamtask_legacy::Fairness::Fair)
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let run = job.run(Model::Mailbox, config(&job)).unwrap();
    assert!(run.exactly_once);
}

#[test]
fn a_second_run_of_the_same_graph_in_a_finished_runs_directory_starts_over() {
    // Before: the second run silently restored the finished run's last checkpoint and
    // committed a partial output.
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let graph = job.build(Model::Mailbox).unwrap();
    let cfg = JobConfig {
        checkpoint_dir: checkpoints(&job, Model::Mailbox),
        ..config(&job)
    };
    for round in 0..2 {
        graph.run(&cfg).unwrap();
        assert_eq!(output(&job, Model::Mailbox), expected(), "run {round}");
    }
}

#[test]
fn a_fresh_start_over_an_unfinished_run_is_refused_naming_resume_and_discard() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    job.run(Model::Legacy, config(&job)).unwrap();
    mark_unfinished(&job, Model::Legacy);
    let before = output(&job, Model::Legacy);
    let err = job.run(Model::Legacy, config(&job)).unwrap_err();
    assert!(matches!(err, JobError::UnfinishedRun { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("--resume"), "{message}");
    assert!(message.contains("--discard-state"), "{message}");
    assert_eq!(output(&job, Model::Legacy), before, "nothing touched");
}

#[test]
fn discard_state_starts_an_unfinished_run_over() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    job.run(Model::Mailbox, config(&job)).unwrap();
    mark_unfinished(&job, Model::Mailbox);
    let run = job
        .run(
            Model::Mailbox,
            config(&job).with_restore(Restore::DiscardState),
        )
        .unwrap();
    assert!(run.exactly_once);
}

#[test]
fn resume_continues_an_unfinished_run_and_stays_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = demo(dir.path());
    // The first run fails late and has no restart left: an unfinished run with checkpoints.
    job.faults = Arc::new(FaultPlan::at(&[(FaultKind::Source, 9_000)]));
    job.restarts = 0;
    let err = job.run(Model::Bridge, config(&job)).unwrap_err();
    assert!(matches!(err, JobError::Failed { .. }), "{err}");
    job.faults = Arc::new(FaultPlan::none());
    assert!(matches!(
        job.run(Model::Bridge, config(&job)).unwrap_err(),
        JobError::UnfinishedRun { .. }
    ));
    let run = job
        .run(Model::Bridge, config(&job).with_restore(Restore::Latest))
        .unwrap();
    assert!(run.exactly_once);
}

#[test]
fn resume_of_a_finished_run_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    job.run(Model::Mailbox, config(&job)).unwrap();
    let err = job
        .run(Model::Mailbox, config(&job).with_restore(Restore::Latest))
        .unwrap_err();
    assert!(matches!(err, JobError::NothingToResume { .. }), "{err}");
    assert_eq!(output(&job, Model::Mailbox), expected(), "output untouched");
}

#[test]
fn resume_in_an_empty_directory_starts_from_the_beginning() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let run = job
        .run(Model::Mailbox, config(&job).with_restore(Restore::Latest))
        .unwrap();
    assert!(run.exactly_once);
}

/// A finished run, marked unfinished, whose newest checkpoint's manifest is cut short.
///
/// How many checkpoints a run completes depends on the machine; a fall back needs two, so a
/// run that completed fewer is simply run again (counts are never asserted).
fn damaged(job: &DemoJob, model: Model) -> u64 {
    let mut ids = Vec::new();
    for _ in 0..20 {
        job.run(model, config(job).with_restore(Restore::DiscardState))
            .unwrap();
        let storage = CheckpointStorage::directory(checkpoints(job, model), 3).unwrap();
        ids = storage.completed_ids().unwrap();
        if ids.len() >= 2 {
            break;
        }
    }
    assert!(
        ids.len() >= 2,
        "{model}: 20 runs completed fewer than two checkpoints each: {ids:?}"
    );
    mark_unfinished(job, model);
    let storage = CheckpointStorage::directory(checkpoints(job, model), 3).unwrap();
    let newest = *ids.last().unwrap();
    let manifest = storage.checkpoint_path(newest).unwrap().join("_manifest");
    let len = fs::metadata(&manifest).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&manifest)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    newest
}

#[test]
fn a_damaged_newest_checkpoint_is_a_typed_error_naming_it_and_nothing_is_committed() {
    // Before: a WARN "skipping checkpoint", Ok, and duplicated committed lines.
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let newest = damaged(&job, Model::Mailbox);
    let before = output(&job, Model::Mailbox);
    let err = job
        .run(Model::Mailbox, config(&job).with_restore(Restore::Latest))
        .unwrap_err();
    match &err {
        JobError::DamagedCheckpoint { id, .. } => assert_eq!(*id, newest),
        other => panic!("expected a damaged checkpoint error, got {other}"),
    }
    let message = err.to_string();
    assert!(message.contains(&format!("{newest:020}")), "{message}");
    assert!(
        message.contains("--fallback-to-older-checkpoint"),
        "{message}"
    );
    assert_eq!(output(&job, Model::Mailbox), before, "nothing committed");
}

#[test]
fn falling_back_past_a_damaged_checkpoint_rewinds_the_sink_and_stays_exactly_once() {
    for model in Model::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut job = demo(dir.path());
        if model == Model::Legacy {
            // The legacy source holds its lock long: a longer run, at a gentler interval,
            // completes the two checkpoints a fall back needs.
            job.data.orders = 40_000;
            job.checkpoint_interval = Duration::from_millis(5);
            job.prepare().unwrap();
        }
        damaged(&job, model);
        let run = job
            .run(
                model,
                config(&job)
                    .with_restore(Restore::Latest)
                    .with_fallback_to_older(true),
            )
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        assert!(run.exactly_once, "{model}: committed output duplicated");
    }
}

/// A finished run that completed at least one checkpoint (rerun until it did); its newest id.
fn completed_run(job: &DemoJob, model: Model) -> u64 {
    for _ in 0..20 {
        job.run(model, config(job).with_restore(Restore::DiscardState))
            .unwrap();
        let storage = CheckpointStorage::directory(checkpoints(job, model), 3).unwrap();
        if let Some(&id) = storage.completed_ids().unwrap().last() {
            return id;
        }
    }
    panic!("{model}: 20 runs completed no checkpoint");
}

#[test]
fn a_checkpoint_of_another_job_shape_is_refused() {
    // Before: restore by `<vertex>#<subtask>` silently dropped the state of tasks that moved.
    // The legacy job has another task layout than the mailbox job (its async enrichment
    // starts a task of its own).
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let id = completed_run(&job, Model::Mailbox);
    let storage = CheckpointStorage::directory(checkpoints(&job, Model::Mailbox), 3).unwrap();
    let path = storage.checkpoint_path(id).unwrap();
    let err = job
        .run(
            Model::Legacy,
            config(&job).with_restore(Restore::From(path)),
        )
        .unwrap_err();
    assert!(matches!(err, JobError::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("savepoint"), "{err}");
}

#[test]
fn a_restore_from_a_path_restores_that_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    completed_run(&job, Model::Mailbox);
    let storage = CheckpointStorage::directory(checkpoints(&job, Model::Mailbox), 3).unwrap();
    let id = *storage.completed_ids().unwrap().first().unwrap();
    let path = storage.checkpoint_path(id).unwrap();
    let run = job
        .run(
            Model::Mailbox,
            config(&job).with_restore(Restore::From(path)),
        )
        .unwrap();
    assert!(run.exactly_once);
}

/// The orders through keyed totals of `parallelism` into a file sink, under the mailbox model.
fn keyed_job(job: &DemoJob, parallelism: usize) -> streamtask::JobGraph {
    use streamtask::StreamEnvironment;
    use streamtask_cli::demo::data::{Order, TotalEvent};
    use streamtask_cli::demo::source::OrdersFileReader;
    use streamtask_cli::demo::totals::RunningTotals;

    let env = StreamEnvironment::new(Model::Mailbox);
    let orders = job.orders_file();
    env.add_reader("orders", move |_| {
        OrdersFileReader::new(orders.clone(), Arc::new(FaultPlan::none()))
    })
    .key_by(|o: &Order| o.customer)
    .process("totals", parallelism, |_| {
        RunningTotals::new(Arc::new(FaultPlan::none()))
    })
    .two_phase_file_sink(
        "sink",
        job.work_dir.join("keyed-output"),
        |e: &TotalEvent| format!("{e:?}"),
    );
    env.build().unwrap()
}

#[test]
fn a_resume_with_another_keyed_parallelism_is_refused_not_a_silent_loss_of_state() {
    // Before: restore by `<vertex>#<subtask>` silently dropped the keyed state of keys that
    // moved to another subtask, and returned Ok.
    let dir = tempfile::tempdir().unwrap();
    let job = demo(dir.path());
    let cfg = JobConfig {
        checkpoint_dir: dir.path().join("keyed-checkpoints"),
        ..config(&job)
    }
    .with_checkpoints(Some(streamtask::checkpoint::CheckpointConfig::new(
        Duration::from_millis(1),
    )));
    let two = keyed_job(&job, 2);
    let mut stored = false;
    for _ in 0..20 {
        two.run(&cfg.clone().with_restore(Restore::DiscardState))
            .unwrap();
        let storage = CheckpointStorage::directory(&cfg.checkpoint_dir, 3).unwrap();
        if !storage.completed_ids().unwrap().is_empty() {
            stored = true;
            break;
        }
    }
    assert!(stored, "20 runs completed no checkpoint");
    fs::write(cfg.checkpoint_dir.join("_run"), "running\n").unwrap();
    let err = keyed_job(&job, 3)
        .run(&cfg.clone().with_restore(Restore::Latest))
        .unwrap_err();
    match &err {
        JobError::ShapeMismatch { missing, .. } => {
            assert!(missing.contains(&"totals#2".to_string()), "{err}")
        }
        other => panic!("expected a shape mismatch, got {other}"),
    }
}

/// Output no run accounts for (the checkpoint directory is gone: deleted, or the output came
/// from another work directory) is neither counted with the new run's nor deleted unasked.
/// Before: the run kept the stray file, numbered its own past it, and the committed output
/// was the stray file's lines plus the run's (`compare` then said "exactly-once FALSE").
#[test]
fn committed_output_no_run_accounts_for_is_refused_and_discard_state_clears_it() {
    for model in [Model::Legacy, Model::Mailbox, Model::Bridge] {
        let dir = tempfile::tempdir().unwrap();
        let job = demo(dir.path());
        job.run(model, config(&job)).unwrap();
        fs::remove_dir_all(checkpoints(&job, model)).unwrap();
        let before = output(&job, model);
        let err = job.run(model, config(&job)).unwrap_err();
        assert!(
            matches!(err, JobError::UnownedOutput { .. }),
            "{model}: {err}"
        );
        assert!(
            err.to_string().contains("--discard-state"),
            "{model}: {err}"
        );
        assert_eq!(output(&job, model), before, "{model}: nothing touched");
        let run = job
            .run(model, config(&job).with_restore(Restore::DiscardState))
            .unwrap();
        assert!(run.exactly_once, "{model}");
        assert_eq!(output(&job, model), expected(), "{model}");
    }
}
