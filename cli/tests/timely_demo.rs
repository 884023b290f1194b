//! `streamtask run --engine timely`: the demo job on two timely worker processes commits the
//! digest `streamtask run --model mailbox` commits on the same data, exactly once, also with
//! one process SIGKILLed mid-run and every process restarted; and the same job in one process
//! with two worker threads, through a crash and a restore; worker processes started with
//! `DemoJob::timely_worker_args` (as the bench starts them) rebuild the job they were given.

use std::path::Path;

use streamtask::sink::read_committed;
use streamtask_cli::demo::data::{DemoData, per_key_order_held};
use streamtask_cli::demo::digest;
use streamtask_cli::demo::job::{DemoJob, Scenario};
use streamtask_cli::inspect::inspect;
use streamtask_core::async_io::OutputMode;
use streamtask_timely::{Cluster, TimelyConfig, TimelyError};

mod common;

/// Orders of these runs: small, the machine has two cores.
const ORDERS: u64 = 6_000;

/// `run --engine timely --processes 2` on [`common::data`]`(ORDERS)` in `dir`, plus `extra`.
fn on_timely(dir: &Path, extra: &[&str]) -> std::process::Output {
    let data = common::data(ORDERS);
    let mut args: Vec<String> = [
        "run",
        "--engine",
        "timely",
        "--processes",
        "2",
        "--records",
        &data.orders.to_string(),
        "--customers",
        &data.customers.to_string(),
        "--seed",
        &data.seed.to_string(),
        "--quiet",
        "--work-dir",
        dir.to_str().expect("a UTF-8 temp path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    common::streamtask(&args)
}

/// The value of row `name` in a report (the local table's `name   value` or the timely
/// table's `| name | value |`).
fn row(stdout: &str, name: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.trim_start_matches(['|', ' ']).starts_with(name))
        .unwrap_or_else(|| panic!("no {name} row in {stdout}"));
    line[line.find(name).expect("found above") + name.len()..]
        .split(|c: char| c == '|' || c.is_whitespace())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("the {name} row has no value: {line}"))
        .to_string()
}

/// The digest `run --model mailbox` commits on the same data.
fn mailbox_digest(dir: &Path) -> String {
    let out = common::streamtask(&common::run_args_sized("mailbox", dir, ORDERS, &[]));
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    row(&common::stdout(&out), "committed output digest")
}

#[test]
fn two_processes_commit_the_mailbox_runs_digest() {
    let dir = tempfile::tempdir().unwrap();
    let mailbox = mailbox_digest(dir.path());
    let out = on_timely(dir.path(), &[]);
    let stdout = common::stdout(&out);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    assert_eq!(row(&stdout, "committed output digest"), mailbox);
    assert_eq!(row(&stdout, "exactly-once"), "true");
    assert_eq!(row(&stdout, "restarts"), "0");
}

#[test]
fn with_a_process_killed_mid_run_the_output_stays_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mailbox = mailbox_digest(dir.path());
    let out = on_timely(
        dir.path(),
        &[
            "--checkpoint-interval-ms",
            "2",
            "--kill-after-checkpoints",
            "2",
        ],
    );
    let stdout = common::stdout(&out);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    // The kill happened: the run was restarted from a checkpoint.
    assert_eq!(row(&stdout, "restarts"), "1", "{stdout}");
    assert_eq!(row(&stdout, "committed output digest"), mailbox);
    assert_eq!(row(&stdout, "exactly-once"), "true");
}

#[test]
fn in_one_process_the_job_restores_its_async_calls_in_flight_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = DemoData {
        orders: 4_000,
        customers: 40,
        seed: 11,
    };
    let mut job = DemoJob::new(data, dir.path());
    // A slow enrichment: its queue stays full, so every epoch's snapshot holds calls in flight.
    job.scenario = Scenario::Backpressure;
    job.prepare().unwrap();
    let config = TimelyConfig::new(job.timely_checkpoint_dir())
        .workers(2)
        .checkpoint_interval(std::time::Duration::from_millis(2))
        .max_epoch_records(500);
    // The one reader stops the run after 2,500 orders, as a crash would.
    let crashed = streamtask_timely::run(
        job.timely_job().unwrap(),
        &config.clone().crash_after(0, 2_500),
    );
    assert!(matches!(crashed, Err(TimelyError::Crashed)), "{crashed:?}");
    let last = inspect(&job.timely_checkpoint_dir()).unwrap();
    let in_flight: usize = last.async_in_flight.iter().map(|a| a.elements).sum();
    assert!(in_flight > 0, "{last:?}");
    let summary = streamtask_timely::run(job.timely_job().unwrap(), &config).unwrap();
    assert!(summary.restored_from.is_some());
    let committed = read_committed(job.timely_output_dir()).unwrap();
    let reference = job.reference();
    assert_eq!(committed.len(), reference.len());
    assert_eq!(digest(&committed), digest(&reference));
}

#[test]
fn key_ordered_enrichment_on_two_workers_commits_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = DemoJob::new(
        DemoData {
            orders: 2_000,
            customers: 30,
            seed: 3,
        },
        dir.path(),
    );
    // One call per customer at a time: the batches close by their max-wait timer, which
    // alone wakes the operator.
    job.async_mode = OutputMode::KeyOrdered;
    job.prepare().unwrap();
    let config = TimelyConfig::new(job.timely_checkpoint_dir()).workers(2);
    streamtask_timely::run(job.timely_job().unwrap(), &config).unwrap();
    let mut committed = read_committed(job.timely_output_dir()).unwrap();
    assert!(per_key_order_held(&committed));
    committed.sort_unstable();
    assert!(committed == job.reference(), "committed output differs");
}

#[test]
fn worker_processes_started_with_the_jobs_worker_args_commit_its_reference() {
    let dir = tempfile::tempdir().unwrap();
    // Not the command line's defaults, so a worker that dropped an option builds another job.
    let mut job = DemoJob::new(
        DemoData {
            orders: 3_000,
            customers: 40,
            seed: 11,
        },
        dir.path(),
    );
    job.async_mode = OutputMode::KeyOrdered;
    job.checkpoint_interval = std::time::Duration::from_millis(20);
    job.output_dir = Some(dir.path().join("elsewhere"));
    job.prepare().unwrap();
    std::fs::create_dir_all(job.timely_dir()).unwrap();
    let args = job.timely_worker_args(1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(
        env!("CARGO_BIN_EXE_streamtask"),
        &args,
        2,
        &job.timely_dir(),
    )
    .unwrap();
    let statuses = cluster.wait().unwrap();
    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    let mut committed = read_committed(dir.path().join("elsewhere")).unwrap();
    assert!(per_key_order_held(&committed));
    committed.sort_unstable();
    assert_eq!(committed.len(), job.reference().len());
    assert!(committed == job.reference(), "committed output differs");
}
