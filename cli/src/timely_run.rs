//! `streamtask timely`: the timely engine's sample job across worker processes on this machine,
//! checked against the data and against the local mailbox executor in the same run.
//!
//! The sample job is the engine's own test job: keyed state, event-time timers, a key-group
//! exchange and the two-phase file sink over many input files. The demo job itself runs on
//! timely through `streamtask run --engine timely` (`timely_demo.rs`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use streamtask::checkpoint::CheckpointStorage;
use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_cli::demo::digest;
use streamtask_timely::sample::{expected_output, local_job, read_round_robin, write_input};
use streamtask_timely::{Cluster, completed_checkpoints};

use crate::CliError;

/// `streamtask timely`'s options.
#[derive(Debug, Args)]
pub(crate) struct TimelyArgs {
    /// Worker processes on 127.0.0.1 (free ports, a hostfile in the work directory).
    #[arg(long, default_value_t = 2)]
    processes: usize,
    /// Worker threads per process.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Input records (spread over one file per worker, at least 4 files).
    #[arg(long, default_value_t = 100_000)]
    records: usize,
    /// How often the sources start an epoch (a checkpoint).
    #[arg(long, default_value_t = 50)]
    checkpoint_interval_ms: u64,
    /// SIGKILL process 1 once this many checkpoints completed, then restart every process from
    /// the last complete one (needs at least 2 processes).
    #[arg(long)]
    kill_after_checkpoints: Option<usize>,
    /// Work directory [default: <temp>/streamtask-timely]; its outputs are replaced.
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// One engine's outcome.
struct Outcome {
    lines: Vec<String>,
    seconds: f64,
}

pub(crate) fn timely(args: &TimelyArgs) -> Result<(), CliError> {
    if args.processes == 0 || args.workers == 0 || args.records == 0 {
        return Err(CliError::Usage(
            "--processes, --workers and --records must be at least 1".into(),
        ));
    }
    if args.kill_after_checkpoints.is_some() && args.processes < 2 {
        return Err(CliError::Usage(
            "--kill-after-checkpoints needs --processes 2 or more (one is killed, one survives)"
                .into(),
        ));
    }
    let work = args
        .work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("streamtask-timely"));
    let failed = |what: &str, e: &dyn std::fmt::Display| CliError::Failed(format!("{what}: {e}"));
    for sub in ["in", "out", "chk", "local", "local-out"] {
        let dir = work.join(sub);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| failed("clear the work directory", &e))?;
        }
    }
    let files = (args.processes * args.workers).max(4);
    let inputs = write_input(&work.join("in"), files, args.records.div_ceil(files))
        .map_err(|e| failed("write the input", &e))?;
    let lines = read_round_robin(&inputs).map_err(|e| failed("read the input", &e))?;
    let reference = expected_output(&lines);
    let records = lines.len();

    eprintln!("running the sample job on the local executor (mailbox model)");
    let started = Instant::now();
    let job = local_job(Model::Mailbox, inputs.clone(), 1, &work.join("local-out"))
        .map_err(|e| failed("build the local job", &e))?;
    job.run(&JobConfig::new(work.join("local")))
        .map_err(|e| failed("the local run", &e))?;
    let local = Outcome {
        lines: read_committed(work.join("local-out")).map_err(|e| failed("read output", &e))?,
        seconds: started.elapsed().as_secs_f64(),
    };

    eprintln!(
        "running it on timely: {} process(es) x {} worker(s)",
        args.processes, args.workers
    );
    let started = Instant::now();
    let restarts = run_cluster(args, &work)?;
    let on_timely = Outcome {
        lines: read_committed(work.join("out")).map_err(|e| failed("read output", &e))?,
        seconds: started.elapsed().as_secs_f64(),
    };
    let checkpoints = CheckpointStorage::directory(work.join("chk"), 3)
        .and_then(|s| s.latest())
        .map_err(|e| failed("read the checkpoints", &e))?
        .map_or(0, |c| c.id);

    let reference_digest = digest(&reference);
    let exactly_once = |o: &Outcome| {
        let mut lines = o.lines.clone();
        lines.sort();
        lines == reference
    };
    let rate = |o: &Outcome| format!("{:.0}", records as f64 / o.seconds.max(1e-9));
    let timely_name = format!("timely {}x{}", args.processes, args.workers);
    println!("| row | local mailbox | {timely_name} |");
    println!("|---|---|---|");
    println!(
        "| committed output digest | {} | {} |",
        digest(&local.lines),
        digest(&on_timely.lines)
    );
    println!(
        "| exactly-once | {} | {} |",
        exactly_once(&local),
        exactly_once(&on_timely)
    );
    println!(
        "| committed lines | {} | {} |",
        local.lines.len(),
        on_timely.lines.len()
    );
    println!("| records/s | {} | {} |", rate(&local), rate(&on_timely));
    println!("| last checkpoint | - | {checkpoints} |");
    println!("| restarts | 0 | {restarts} |");
    println!("reference digest: {reference_digest}");
    let verdict = exactly_once(&local) && exactly_once(&on_timely);
    println!(
        "verdict: {}",
        if verdict {
            "exactly once on both engines, same output"
        } else {
            "OUTPUT DIFFERS"
        }
    );
    if verdict {
        Ok(())
    } else {
        Err(CliError::Failed(
            "the committed output is not the reference".into(),
        ))
    }
}

/// Runs the worker processes to the end; with `--kill-after-checkpoints`, kills one mid-run and
/// restarts them all. Returns the restarts.
fn run_cluster(args: &TimelyArgs, work: &Path) -> Result<u32, CliError> {
    let dir = |sub: &str| work.join(sub).display().to_string();
    let worker_args = [
        "timely-worker".to_string(),
        "--inputs".into(),
        dir("in"),
        "--out".into(),
        dir("out"),
        "--checkpoints".into(),
        dir("chk"),
        "--workers".into(),
        args.workers.to_string(),
        "--interval-ms".into(),
        args.checkpoint_interval_ms.to_string(),
    ];
    run_workers(
        &worker_args,
        args.processes,
        args.kill_after_checkpoints,
        work,
        &work.join("chk"),
    )
}

/// Runs `processes` worker processes of this program with `worker_args` (a hostfile in `dir`)
/// to the end. With `kill_after`, SIGKILLs process 1 once that many checkpoints are complete in
/// `checkpoints` (at most 3, the retention), then restarts them all, which restore the last
/// complete checkpoint. Returns the restarts.
pub(crate) fn run_workers(
    worker_args: &[String],
    processes: usize,
    kill_after: Option<usize>,
    dir: &Path,
    checkpoints: &Path,
) -> Result<u32, CliError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| CliError::Failed(format!("{what}: {e}"));
    let program = std::env::current_exe().map_err(|e| failed("find this program", &e))?;
    let worker_args: Vec<&str> = worker_args.iter().map(String::as_str).collect();
    let start = || {
        Cluster::start(&program, &worker_args, processes, dir)
            .map_err(|e| failed("start the worker processes", &e))
    };
    let mut restarts = 0;
    if let Some(after) = kill_after {
        let mut cluster = start()?;
        loop {
            // Retention keeps 3: count up to that, a storage opened here would delete the
            // writer's checkpoint in progress.
            if completed_checkpoints(checkpoints) >= after.min(3) {
                break;
            }
            if !cluster
                .is_running(1)
                .map_err(|e| failed("watch the workers", &e))?
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if cluster
            .is_running(1)
            .map_err(|e| failed("watch the workers", &e))?
        {
            eprintln!("killing process 1 (SIGKILL), then restarting every process");
            cluster.kill(1).map_err(|e| failed("kill process 1", &e))?;
            restarts = 1;
        }
        // Dropping the cluster kills and reaps the survivors.
        drop(cluster);
        // Open the storage once before the restart: it removes an interrupted checkpoint.
        CheckpointStorage::directory(checkpoints, 3)
            .map_err(|e| failed("open the checkpoints", &e))?;
        if restarts == 0 {
            return Ok(0);
        }
    }
    let mut cluster = start()?;
    let statuses = cluster
        .wait()
        .map_err(|e| failed("wait for the workers", &e))?;
    if let Some((i, status)) = statuses.iter().enumerate().find(|(_, s)| !s.success()) {
        return Err(CliError::Failed(format!(
            "timely worker process {i} failed ({status}); run again to restore its last complete checkpoint"
        )));
    }
    Ok(restarts)
}
