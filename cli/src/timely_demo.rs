//! `streamtask run --engine timely`: the demo job on timely-dataflow workers across processes
//! on this machine (see `streamtask_cli::demo::on_timely` for how its operators are hosted),
//! judged against the data's reference output as every local run is.
//!
//! The rows printed are those of the local report that apply to a cluster: records, wall time,
//! records/s, committed lines, the output digest and the exactly-once verdict. The rest are
//! per task of the local executor (the checkpoint lock against the mailbox, checkpoint start
//! delays and alignment, stall reports) and have no counterpart on timely.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use clap::{Args, ValueEnum};
use streamtask::checkpoint::CheckpointStorage;
use streamtask::sink::read_committed;
use streamtask_cli::demo::digest;
use streamtask_timely::read_hostfile;

use crate::{CliError, JobArgs, Options, ReportArgs, SavepointArgs, StateArgs};

/// Where `run` runs the demo job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Engine {
    /// The local executor, under --model.
    #[default]
    Local,
    /// timely-dataflow workers in --processes processes on 127.0.0.1 (free ports, a hostfile
    /// in the work directory), --workers threads each.
    Timely,
}

/// `run`'s engine options.
#[derive(Debug, Args)]
pub(crate) struct EngineArgs {
    /// The engine.
    #[arg(long, value_enum, default_value_t = Engine::Local)]
    pub(crate) engine: Engine,
    /// With --engine timely: worker processes.
    #[arg(long, default_value_t = 2)]
    processes: usize,
    /// With --engine timely: worker threads per process.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// With --engine timely: SIGKILL process 1 once this many checkpoints completed (at most
    /// 3 are counted), then restart every process from the last complete one.
    #[arg(long, value_name = "N")]
    kill_after_checkpoints: Option<usize>,
}

/// `streamtask timely-demo-worker`: one worker process of `run --engine timely`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Worker threads of this process.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// This process's index in the hostfile.
    #[arg(long)]
    process: usize,
    /// One `host:port` per process.
    #[arg(long)]
    hostfile: PathBuf,
}

/// Refuses what `run --engine timely` does not do.
fn check(options: &Options, engine: &EngineArgs, model_given: bool) -> Result<(), CliError> {
    let refuse = |what: &str| {
        Err(CliError::Usage(format!(
            "{what} does not apply with --engine timely (see the README's timely section)"
        )))
    };
    options.validate(false)?;
    if model_given {
        return refuse("--model");
    }
    if options.faults > 0 {
        return refuse("--faults");
    }
    if options.resume || options.discard_state || options.from_savepoint.is_some() {
        return refuse("--resume, --discard-state and --from-savepoint");
    }
    if options.stop_with_savepoint.is_some() {
        return refuse("--stop-with-savepoint");
    }
    if options.json.is_some() || options.trace.is_some() || options.plot.is_some() {
        return refuse("--json, --trace and --plot");
    }
    if options.metrics.metrics_addr.is_some() || options.metrics.metrics_file.is_some() {
        return refuse("--metrics-addr and --metrics-file");
    }
    if options.alignment() != streamtask_core::Alignment::Aligned {
        return refuse("--checkpoint-alignment unaligned");
    }
    if engine.processes == 0 || engine.workers == 0 {
        return Err(CliError::Usage(
            "--processes and --workers must be at least 1".into(),
        ));
    }
    if engine.kill_after_checkpoints.is_some() && engine.processes < 2 {
        return Err(CliError::Usage(
            "--kill-after-checkpoints needs --processes 2 or more (one is killed, one survives)"
                .into(),
        ));
    }
    Ok(())
}

/// Runs the demo job on timely as `engine` says, from a fresh start, and prints its report.
pub(crate) fn run(
    options: &Options,
    engine: &EngineArgs,
    model_given: bool,
    cancel: &AtomicBool,
) -> Result<(), CliError> {
    check(options, engine, model_given)?;
    let failed = |what: &str, e: &dyn std::fmt::Display| CliError::Failed(format!("{what}: {e}"));
    let job = options.demo();
    let _lock = crate::lock_work_dir(&job.work_dir)?;
    crate::check_space(&job, &[])?;
    crate::prepare(options, &job, cancel)?;
    let dir = job.timely_dir();
    let checkpoints = job.timely_checkpoint_dir();
    // A fresh start: no checkpoint to restore (the engine then discards the old output).
    if checkpoints.exists() {
        std::fs::remove_dir_all(&checkpoints)
            .map_err(|e| failed("clear the timely checkpoints", &e))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| failed("create the timely directory", &e))?;
    let worker_args = job.timely_worker_args(engine.workers);
    crate::phase(
        options,
        &format!(
            "running the demo job on timely: {} process(es) x {} worker(s)",
            engine.processes, engine.workers
        ),
    );
    let started = Instant::now();
    let restarts = crate::timely_run::run_workers(
        &worker_args,
        engine.processes,
        engine.kill_after_checkpoints,
        &dir,
        &checkpoints,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let mut committed =
        read_committed(job.timely_output_dir()).map_err(|e| failed("read the output", &e))?;
    committed.sort_unstable();
    let reference = job.reference();
    let exactly_once = committed == reference;
    let last_checkpoint = CheckpointStorage::directory(&checkpoints, 3)
        .and_then(|s| s.latest())
        .map_err(|e| failed("read the checkpoints", &e))?
        .map_or(0, |c| c.id);
    let records = job.data.orders;
    println!("| row | timely {}x{} |", engine.processes, engine.workers);
    println!("|---|---|");
    println!("| records | {records} |");
    println!("| wall time (s) | {seconds:.3} |");
    println!("| records/s | {:.0} |", records as f64 / seconds.max(1e-9));
    println!("| committed lines | {} |", committed.len());
    println!("| committed output digest | {} |", digest(&committed));
    println!("| exactly-once | {exactly_once} |");
    println!("| last checkpoint | {last_checkpoint} |");
    println!("| restarts | {restarts} |");
    println!("reference digest: {}", digest(&reference));
    if exactly_once {
        println!("verdict: exactly once on timely");
        Ok(())
    } else {
        Err(CliError::Failed(
            "the committed output is not the reference".into(),
        ))
    }
}

/// One worker process: builds the demo job from the same options and runs this process's
/// workers to the end (exit 0), or fails (exit 1: the next start restores the last complete
/// checkpoint).
pub(crate) fn worker(args: WorkerArgs) -> Result<(), CliError> {
    let failed = |e: &dyn std::fmt::Display| CliError::Failed(format!("timely worker: {e}"));
    let options = Options::of(
        args.job,
        (0, 1),
        ReportArgs::default(),
        StateArgs::default(),
        SavepointArgs::default(),
    );
    let job = options.demo();
    let addresses = read_hostfile(&args.hostfile).map_err(|e| failed(&e))?;
    if args.process >= addresses.len() {
        return Err(CliError::Usage(format!(
            "--process {} is not in the hostfile's {} addresses",
            args.process,
            addresses.len()
        )));
    }
    let config = job
        .timely_config(args.workers)
        .cluster(args.process, addresses);
    let timely_job = job.timely_job().map_err(|e| failed(&e))?;
    streamtask_timely::run(timely_job, &config).map_err(|e| failed(&e))?;
    Ok(())
}
