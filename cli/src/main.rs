//! `streamtask`: runs the built-in demo job under the legacy, mailbox and bridge models and
//! compares them side by side (the default), runs one model, or soaks the exactly-once
//! guarantee under many fault seeds.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use streamtask::fault::{FaultPlan, quiet_injected_panics};
use streamtask::{
    DirLock, JobConfig, JobError, JobPhase, MetricsRegistry, Model, Restore, SavepointHandle,
};
use streamtask_cli::demo::data::DemoData;
use streamtask_cli::demo::job::{DemoJob, DemoRun, Scenario};
use streamtask_cli::exporter::{ExporterConfig, MetricsExporter};
use streamtask_cli::report::{CompareReport, ModelReport, alignment_keys};
use streamtask_core::Alignment;
use streamtask_core::async_io::OutputMode;
use streamtask_core::trace::{TraceLog, Tracer};
use streamtask_legacy::Fairness;

mod timely_demo;
mod timely_run;

#[derive(Debug, Parser)]
#[command(
    name = "streamtask",
    version,
    about = "Run a stream job under Flink's checkpoint-lock and mailbox threading models, side by side",
    long_about = "Without a subcommand, `streamtask` runs `compare`: the built-in demo job (orders \
                  file source, keyed running totals with timers, async enrichment from SQLite, \
                  exactly-once file sink) under the legacy, mailbox and bridge models, on data it \
                  generates, and prints a side-by-side table. The options below are compare's; \
                  each subcommand's --help lists its own.",
    // `streamtask --records 10` is `compare --records 10`; after a subcommand, only its options.
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    compare: CompareArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo job under every model and compare (the default).
    Compare(CompareArgs),
    /// Run the demo job under one model, or with --engine timely across worker processes.
    Run(RunArgs),
    /// Run the demo job under many fault seeds per model and check exactly-once every time.
    Soak(SoakArgs),
    /// Measure the models against each other and their peers in one run (interleaved rounds,
    /// medians) and print the table of ratios; `--json FILE` writes them.
    Bench(BenchArgs),
    /// Show what a checkpoint or savepoint holds: format, CRC status, vertices, operators,
    /// state per operator and key group, source positions, async elements in flight, pending
    /// sink transactions, channel state. Exits 3 if a file is damaged.
    Inspect(InspectArgs),
    /// Run the timely engine's sample job across worker processes on 127.0.0.1 and check it
    /// against the data and the local mailbox executor (the demo job itself: `run --engine
    /// timely`).
    Timely(timely_run::TimelyArgs),
    /// One worker process of `timely` (started by it).
    #[command(hide = true)]
    TimelyWorker {
        /// The worker's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// One worker process of `run --engine timely` (started by it).
    #[command(hide = true)]
    TimelyDemoWorker(timely_demo::WorkerArgs),
}

/// `compare`'s options (`run` has them too).
#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Faults to inject into each model's run (panics in the source, an operator, a timer, an
    /// async call, a snapshot); each run restarts and must still commit the same output.
    #[arg(long, default_value_t = 0)]
    faults: u32,
    /// Seed choosing where the faults hit.
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    state: StateArgs,
}

impl CompareArgs {
    fn into_options(self, savepoint: SavepointArgs) -> Options {
        Options::of(
            self.job,
            (self.faults, self.fault_seed),
            self.report,
            self.state,
            savepoint,
        )
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The model (with --engine local, required).
    #[arg(long, value_parser = model_parser())]
    model: Option<Model>,
    #[command(flatten)]
    engine: timely_demo::EngineArgs,
    #[command(flatten)]
    compare: CompareArgs,
    #[command(flatten)]
    savepoint: SavepointArgs,
}

#[derive(Debug, Args)]
struct SoakArgs {
    /// Seeds per model.
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// Models to soak (default: all).
    #[arg(long, value_parser = model_parser())]
    model: Vec<Model>,
    /// Faults injected into each seed's run (at least 1: soak checks exactly-once under
    /// faults).
    #[arg(long, default_value_t = 1)]
    faults: u32,
    /// Seed of the first seed's faults; seed N adds N.
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
    #[command(flatten)]
    job: JobArgs,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// One round on tiny inputs (for CI: checks that it runs; the figures mean little).
    #[arg(long)]
    quick: bool,
    /// Interleaved rounds [default: 5, or 1 with --quick].
    #[arg(long)]
    rounds: Option<usize>,
    /// Write the ratios as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No line per round.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// A `chk-<id>` directory, a checkpoint directory (its newest checkpoint is read), or a
    /// savepoint directory (what --stop-with-savepoint printed).
    path: PathBuf,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Parses `--model`, listing the models in `--help` and in the error for an unknown one.
fn model_parser() -> impl TypedValueParser<Value = Model> {
    PossibleValuesParser::new(Model::ALL.map(Model::name)).map(|name| {
        name.parse::<Model>()
            .expect("a possible value names a model")
    })
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FairnessArg {
    Unfair,
    Eventual,
    Fair,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScenarioArg {
    /// The demo job as it is.
    Normal,
    /// The enrichment slower than the source: channels and the async queue stay full.
    Backpressure,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AsyncModeArg {
    /// Results in input order (the default).
    Ordered,
    /// Results as they complete, never across a watermark.
    Unordered,
    /// A customer's results in input order, customers independently (Flink 2.1's key-ordered
    /// mode): the enrichment runs behind a hash partitioning by customer.
    KeyOrdered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AlignmentArg {
    /// Barriers travel behind the records queued before them (Flink's default).
    Aligned,
    /// Barriers overtake the queued records, which are stored as channel state.
    Unaligned,
}

/// The demo job's options, shared by `compare`, `run` and `soak`.
#[derive(Debug, Args)]
struct JobArgs {
    /// Orders the demo generates.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Distinct customers (keys).
    #[arg(long, default_value_t = 500)]
    customers: u32,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 50)]
    checkpoint_interval_ms: u64,
    /// Checkpoint failures in a row (expired, declined, not stored) a run tolerates; one more
    /// fails it and it restarts (Flink's execution.checkpointing.tolerable-failed-checkpoints,
    /// 0 by default as there).
    #[arg(long, default_value_t = 0)]
    tolerable_failed_checkpoints: u32,
    /// Fairness of the checkpoint lock (legacy and bridge).
    #[arg(long, value_enum, default_value_t = FairnessArg::Eventual)]
    fairness: FairnessArg,
    /// The load: `backpressure` makes the enrichment slower than the source (100 us per event
    /// and worker: at most 20,000 orders/s), so the channels and the async queue stay full;
    /// the committed output is the same.
    #[arg(long, value_enum, default_value_t = ScenarioArg::Normal)]
    scenario: ScenarioArg,
    /// The enrichment's async output mode. The committed output is the same in every mode
    /// (compared as a multiset); `key-ordered` also keeps each customer's lines in order.
    #[arg(long, value_enum, default_value_t = AsyncModeArg::Ordered)]
    async_mode: AsyncModeArg,
    /// How checkpoint barriers pass the queued records, under every model (the legacy model's
    /// source triggers still wait for its checkpoint lock). Flink's
    /// execution.checkpointing.unaligned.enabled.
    #[arg(long, value_enum, default_value_t = AlignmentArg::Aligned)]
    checkpoint_alignment: AlignmentArg,
    /// With --checkpoint-alignment unaligned: start each checkpoint aligned and let its
    /// barriers overtake only after this many milliseconds (0: unaligned from the start).
    /// Flink's execution.checkpointing.aligned-checkpoint-timeout.
    #[arg(long, value_name = "MS")]
    aligned_timeout: Option<u64>,
    /// Report a checkpoint still pending after this many milliseconds as stalled, and again
    /// every such period while it stays pending: a block logged as a warning (which tasks
    /// await its barrier on which inputs, what their threads do) and, where the subcommand
    /// writes a JSON report, an entry of its `stalled_checkpoints` [default: 3 checkpoint
    /// intervals, at least 1000; 0: no reports].
    #[arg(long, value_name = "MS")]
    stall_report_ms: Option<u64>,
    /// Work directory for data, checkpoints and output [default: <temp>/streamtask-demo].
    #[arg(long, env = "STREAMTASK_WORK_DIR")]
    work_dir: Option<PathBuf>,
    /// Where the sink commits its output [default: <work-dir>/<model>/output]; give the same
    /// directory to the run that stops with a savepoint and to the one restoring it.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// No progress bar and no phase lines.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// Where the metrics of the runs go (nowhere unless asked), shared by `compare`, `run` and
/// `soak`.
#[derive(Debug, Clone, Default, Args)]
struct MetricsArgs {
    /// Serve the metrics (OpenMetrics text, Flink's names) at http://ADDR/metrics while the
    /// command runs; port 0 picks a free port (the address is printed). Only a loopback
    /// address unless --metrics-allow-remote.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Let --metrics-addr be a non-loopback address: anyone who reaches it reads the job's
    /// metrics (task names, record counts, timings, checkpoint sizes; no record contents).
    #[arg(long, requires = "metrics_addr")]
    metrics_allow_remote: bool,
    /// Write the metrics (OpenMetrics text) to this file every --metrics-interval-ms and once
    /// at the end (atomically: a reader never sees half of it).
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
    /// How often --metrics-file is rewritten, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 1000,
        requires = "metrics_file"
    )]
    metrics_interval_ms: u64,
}

impl MetricsArgs {
    /// Starts the endpoint and the file writer asked for; `None` if neither was.
    fn start(&self) -> Result<Option<MetricsExporter>, CliError> {
        if self.metrics_addr.is_none() && self.metrics_file.is_none() {
            return Ok(None);
        }
        let config = ExporterConfig {
            addr: self.metrics_addr,
            allow_remote: self.metrics_allow_remote,
            file: self.metrics_file.clone(),
            interval: Duration::from_millis(self.metrics_interval_ms),
        };
        let exporter = MetricsExporter::start(MetricsRegistry::new(), &config)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if let Some(addr) = exporter.local_addr() {
            // Printed even with --quiet: a scraper needs the port 0 chose.
            eprintln!("streamtask: serving metrics at http://{addr}/metrics");
        }
        Ok(Some(exporter))
    }
}

/// The reports of `compare` and `run`.
#[derive(Debug, Default, Args)]
struct ReportArgs {
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Chrome trace (open in Perfetto) of which thread ran what.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write an SVG plot of throughput and checkpoint start delay per model.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Where `compare` and `run` start from.
#[derive(Debug, Default, Args)]
struct StateArgs {
    /// Resume each model from the latest completed checkpoint of an earlier, unfinished run in
    /// the work directory (a model whose run finished is run again from the start).
    #[arg(long, conflicts_with = "discard_state")]
    resume: bool,
    /// Delete an earlier run's checkpoints and output in the work directory and start over.
    #[arg(long)]
    discard_state: bool,
    /// With --resume: if the newest checkpoint is damaged, restore the newest intact older one;
    /// the sink then removes (rewinds) the output committed after it, and lists the files.
    #[arg(long, requires = "resume")]
    fallback_to_older_checkpoint: bool,
    /// Restore from a savepoint directory (what --stop-with-savepoint printed), taken under
    /// any model; the job's operators find their state by id.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["resume", "discard_state"]
    )]
    from_savepoint: Option<PathBuf>,
    /// With --from-savepoint: drop the savepoint's state of operators the job no longer has
    /// (by default that is refused).
    #[arg(long, requires = "from_savepoint")]
    allow_non_restored_state: bool,
}

/// `run` only: stopping with a savepoint.
#[derive(Debug, Default, Args)]
struct SavepointArgs {
    /// On Ctrl-C or SIGTERM, stop with a savepoint in this directory (Flink's
    /// stop-with-savepoint: the sources stop, the savepoint barrier flows, the sinks commit),
    /// print its path and exit 0. A second signal cancels at once.
    #[arg(long, value_name = "DIR")]
    stop_with_savepoint: Option<PathBuf>,
    /// With --stop-with-savepoint: stop by itself once the source read this many orders
    /// (counted from where the run started), so the savepoint holds exactly that position.
    #[arg(long, value_name = "N", requires = "stop_with_savepoint")]
    stop_with_savepoint_after_records: Option<u64>,
    /// With --stop-with-savepoint: drain first (Flink's `stop --drain`): event time advances
    /// to its end and every operator's input ends, so the open windows fire and are committed
    /// with the savepoint. The job is over then: a run restored from the savepoint reads
    /// nothing more and commits nothing new. Without it (the default) the open windows stay in
    /// the savepoint and the restored run continues the input.
    #[arg(long, requires = "stop_with_savepoint")]
    drain: bool,
}

/// Every option of a job run, whichever subcommand gave it (those it has not are unset).
#[derive(Debug)]
struct Options {
    records: u64,
    customers: u32,
    seed: u64,
    checkpoint_interval_ms: u64,
    tolerable_failed_checkpoints: u32,
    fairness: FairnessArg,
    scenario: ScenarioArg,
    async_mode: AsyncModeArg,
    checkpoint_alignment: AlignmentArg,
    aligned_timeout: Option<u64>,
    stall_report_ms: Option<u64>,
    work_dir: Option<PathBuf>,
    output_dir: Option<PathBuf>,
    quiet: bool,
    metrics: MetricsArgs,
    faults: u32,
    fault_seed: u64,
    json: Option<PathBuf>,
    trace: Option<PathBuf>,
    plot: Option<PathBuf>,
    resume: bool,
    discard_state: bool,
    fallback_to_older_checkpoint: bool,
    from_savepoint: Option<PathBuf>,
    allow_non_restored_state: bool,
    stop_with_savepoint: Option<PathBuf>,
    stop_with_savepoint_after_records: Option<u64>,
    drain: bool,
}

impl Options {
    fn of(
        job: JobArgs,
        (faults, fault_seed): (u32, u64),
        report: ReportArgs,
        state: StateArgs,
        savepoint: SavepointArgs,
    ) -> Options {
        Options {
            records: job.records,
            customers: job.customers,
            seed: job.seed,
            checkpoint_interval_ms: job.checkpoint_interval_ms,
            tolerable_failed_checkpoints: job.tolerable_failed_checkpoints,
            fairness: job.fairness,
            scenario: job.scenario,
            async_mode: job.async_mode,
            checkpoint_alignment: job.checkpoint_alignment,
            aligned_timeout: job.aligned_timeout,
            stall_report_ms: job.stall_report_ms,
            work_dir: job.work_dir,
            output_dir: job.output_dir,
            quiet: job.quiet,
            metrics: job.metrics,
            faults,
            fault_seed,
            json: report.json,
            trace: report.trace,
            plot: report.plot,
            resume: state.resume,
            discard_state: state.discard_state,
            fallback_to_older_checkpoint: state.fallback_to_older_checkpoint,
            from_savepoint: state.from_savepoint,
            allow_non_restored_state: state.allow_non_restored_state,
            stop_with_savepoint: savepoint.stop_with_savepoint,
            stop_with_savepoint_after_records: savepoint.stop_with_savepoint_after_records,
            drain: savepoint.drain,
        }
    }
}

/// Every progress bar, so that log lines and phase lines print above them instead of
/// breaking them.
static BARS: std::sync::LazyLock<MultiProgress> = std::sync::LazyLock::new(MultiProgress::new);

/// The log, written above the progress bars: a line written while a bar is drawn would
/// leave a broken copy of the bar in the terminal.
#[derive(Debug)]
struct AboveTheBars(env_logger::Logger);

impl log::Log for AboveTheBars {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.0.matches(record) {
            BARS.suspend(|| self.0.log(record));
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// The demo job's `job` label in the metrics.
const DEMO_JOB_NAME: &str = "demo";

/// Restarts a run may use when `--faults` does not ask for more.
const DEFAULT_RESTARTS: u32 = 10;

/// Why the command did not succeed, and so its exit code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// The command line or the work directory needs a change before anything runs: exit 2.
    #[error("{0}")]
    Usage(String),
    /// The job failed, was interrupted, or its verdict is false: exit 1.
    #[error("{0}")]
    Failed(String),
    /// `inspect` found a damaged checkpoint or savepoint file: exit 3.
    #[error("{0}")]
    Damaged(String),
}

impl CliError {
    fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Usage(_) => ExitCode::from(2),
            CliError::Failed(_) => ExitCode::from(1),
            CliError::Damaged(_) => ExitCode::from(3),
        }
    }

    /// Refusals that a changed command line fixes are usage errors; the rest are failures.
    fn of_job(model: Model, error: JobError) -> CliError {
        let text = format!("{model}: {error}");
        match error {
            JobError::UnfinishedRun { .. }
            | JobError::UnownedOutput { .. }
            | JobError::NothingToResume { .. }
            | JobError::ShapeMismatch { .. }
            | JobError::NonRestoredState { .. }
            | JobError::SourceMismatch { .. }
            | JobError::MaxParallelismChanged { .. }
            | JobError::MaxParallelism { .. }
            | JobError::Rescale { .. }
            | JobError::Storage(
                streamtask::checkpoint::StorageError::NotASavepoint { .. }
                | streamtask::checkpoint::StorageError::SavepointIsAFile { .. },
            )
            | JobError::SavepointDirectory { .. }
            | JobError::NotEnoughSpace { .. }
            | JobError::Lock(_) => CliError::Usage(text),
            JobError::Cancelled { ref left_behind } if left_behind.is_empty() => {
                CliError::Failed(format!(
                    "{model}: stopped by a signal; its state is kept: rerun with --resume to \
                     continue, or with --discard-state to start over"
                ))
            }
            JobError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::Interrupted => {
                CliError::Failed(
                    "stopped by a signal while generating data; the partial file \
                                  was removed"
                        .to_string(),
                )
            }
            _ => CliError::Failed(text),
        }
    }
}

/// What `validate` checked and derived.
#[derive(Debug)]
struct Plan {
    restarts: u32,
}

impl Options {
    fn demo(&self) -> DemoJob {
        let data = DemoData {
            orders: self.records,
            customers: self.customers,
            seed: self.seed,
        };
        let mut job = DemoJob::new(data, self.work_dir());
        job.output_dir.clone_from(&self.output_dir);
        // `validate` refused 0, so the interval printed is the interval used.
        job.checkpoint_interval = Duration::from_millis(self.checkpoint_interval_ms);
        job.tolerable_failed_checkpoints = self.tolerable_failed_checkpoints;
        job.checkpoint_alignment = self.alignment();
        // 0 turns the reports off: the demo's `Some(ZERO)`.
        job.stall_report_after = self.stall_report_ms.map(Duration::from_millis);
        job.scenario = match self.scenario {
            ScenarioArg::Normal => Scenario::Normal,
            ScenarioArg::Backpressure => Scenario::Backpressure,
        };
        job.async_mode = match self.async_mode {
            AsyncModeArg::Ordered => OutputMode::Ordered,
            AsyncModeArg::Unordered => OutputMode::Unordered,
            AsyncModeArg::KeyOrdered => OutputMode::KeyOrdered,
        };
        job
    }

    /// The alignment asked for (`validate` refused a timeout without unaligned checkpoints).
    fn alignment(&self) -> Alignment {
        match (self.checkpoint_alignment, self.aligned_timeout) {
            (AlignmentArg::Aligned, _) => Alignment::Aligned,
            (AlignmentArg::Unaligned, None) => Alignment::Unaligned,
            // As `CheckpointConfig::with_aligned_timeout`: no time aligned is unaligned.
            (AlignmentArg::Unaligned, Some(0)) => Alignment::Unaligned,
            (AlignmentArg::Unaligned, Some(ms)) => {
                Alignment::AlignedTimeout(Duration::from_millis(ms))
            }
        }
    }

    fn work_dir(&self) -> PathBuf {
        self.work_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("streamtask-demo"))
    }

    fn restore(&self) -> Restore {
        if let Some(path) = &self.from_savepoint {
            Restore::Savepoint(path.clone())
        } else if self.resume {
            Restore::Latest
        } else if self.discard_state {
            Restore::DiscardState
        } else {
            Restore::Fresh
        }
    }

    /// Checks every option before anything runs, so a bad one costs no run.
    fn validate(&self, soak: bool) -> Result<Plan, CliError> {
        let usage = |m: String| Err(CliError::Usage(m));
        if self.records == 0 {
            return usage("--records must be at least 1".into());
        }
        if self.customers == 0 {
            return usage("--customers must be at least 1 (every order needs a customer)".into());
        }
        if self.checkpoint_interval_ms == 0 {
            return usage("--checkpoint-interval-ms must be at least 1".into());
        }
        if self.aligned_timeout.is_some() && self.checkpoint_alignment == AlignmentArg::Aligned {
            return usage(
                "--aligned-timeout is when an aligned checkpoint turns unaligned: give it with \
                 --checkpoint-alignment unaligned"
                    .into(),
            );
        }
        check_dir("--work-dir", &self.work_dir())?;
        if let Some(dir) = &self.output_dir {
            check_dir("--output-dir", dir)?;
        }
        if let Some(dir) = &self.stop_with_savepoint {
            streamtask::StopWithSavepoint::new(dir)
                .check_dir()
                .map_err(|e| CliError::Usage(e.to_string()))?;
        }
        check_output(self.plot.as_deref(), "--plot", "svg")?;
        check_output(self.json.as_deref(), "--json", "json")?;
        check_output(self.trace.as_deref(), "--trace", "json")?;
        let restarts = DEFAULT_RESTARTS.max(self.faults.max(u32::from(soak)));
        if restarts > DEFAULT_RESTARTS {
            eprintln!(
                "streamtask: note: {} injected faults need as many restarts; the restart \
                 budget is raised from {DEFAULT_RESTARTS} to {restarts}",
                self.faults
            );
        }
        Ok(Plan { restarts })
    }

    fn fairness(&self) -> Fairness {
        match self.fairness {
            FairnessArg::Unfair => Fairness::Unfair,
            FairnessArg::Eventual => Fairness::Eventual,
            FairnessArg::Fair => Fairness::Fair,
        }
    }
}

/// An output file must have the right extension and a writable parent directory.
fn check_output(path: Option<&Path>, flag: &str, extension: &str) -> Result<(), CliError> {
    let Some(path) = path else {
        return Ok(());
    };
    if path.extension().and_then(|e| e.to_str()) != Some(extension) {
        return Err(CliError::Usage(format!(
            "{flag} {} must end in .{extension}",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(CliError::Usage(format!(
            "{flag} {}: directory {} does not exist; create it or choose another path",
            path.display(),
            parent.display()
        )));
    }
    let probe = parent.join(format!(".streamtask-write-check-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(CliError::Usage(format!(
            "{flag} {}: cannot write into {}: {e}",
            path.display(),
            parent.display()
        ))),
    }
}

/// A directory option must name a directory this process can write into (it is created if
/// missing): a file in its place or in the place of a parent is refused, naming that file.
fn check_dir(flag: &str, dir: &Path) -> Result<(), CliError> {
    let usage = |what: String| Err(CliError::Usage(format!("{flag} {}{what}", dir.display())));
    // The nearest part of the path that exists decides: it must be a directory.
    let existing = dir
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.metadata().is_ok());
    if let Some(existing) = existing.filter(|e| !e.is_dir()) {
        return if existing == dir {
            let fix = "it is created if missing";
            usage(format!(
                " is a file, not a directory; give a directory ({fix})"
            ))
        } else {
            usage(format!(
                ": {} is a file, not a directory; give a path under a directory",
                existing.display()
            ))
        };
    }
    if let Err(e) = std::fs::create_dir_all(dir) {
        return usage(format!(
            ": cannot create it ({e}); choose another directory"
        ));
    }
    let probe = dir.join(format!(".streamtask-write-check-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => usage(format!(
            ": cannot write into it ({e}); choose a writable directory"
        )),
    }
}

/// Holds the work directory for this process until dropped, before anything in it is read or
/// written: a second run in it is refused (exit 2) naming this one's process id.
fn lock_work_dir(dir: &Path) -> Result<DirLock, CliError> {
    DirLock::acquire(dir).map_err(|e| CliError::Usage(format!("--work-dir: {e}")))
}

/// Set by Ctrl-C or SIGTERM: the job stops cleanly and keeps its state. With `savepoint`, the
/// first signal stops the job with a savepoint instead, and only a second one cancels.
fn install_signal_handler(savepoint: Option<SavepointHandle>) -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let on_signal = Arc::clone(&flag);
    let handler = move || match &savepoint {
        Some(handle) if !handle.is_requested() => {
            eprintln!("streamtask: stopping with a savepoint (signal again to cancel)");
            handle.stop_with_savepoint();
        }
        _ => on_signal.store(true, Ordering::Release),
    };
    if let Err(e) = ctrlc::set_handler(handler) {
        log::warn!("cannot handle Ctrl-C/SIGTERM ({e}); a signal ends the process at once");
    }
    flag
}

/// A hidden hook for the process-crash test (`tests/process_crash.rs`): with
/// `STREAMTASK_PAUSE_AT_PHASES=1`, each phase is announced on stderr as
/// `streamtask-phase <name>` and the process waits for a line on stdin before going on, so the
/// test can SIGKILL it at exactly that moment.
fn pause_at_phases() -> bool {
    std::env::var_os("STREAMTASK_PAUSE_AT_PHASES").is_some_and(|v| v == "1")
}

/// `streamtask bench` in a `--cfg loom` build (the model-checking build of the tests): the
/// measurements need real threads and clocks, which that build does not have.
#[cfg(loom)]
fn bench(_args: &BenchArgs) -> Result<(), CliError> {
    Err(CliError::Usage(
        "this binary was built with --cfg loom (for the model checks); build it without \
         RUSTFLAGS=\"--cfg loom\" to run the bench"
            .into(),
    ))
}

/// `streamtask bench`: the measurements, the table, and the JSON if asked for.
#[cfg(not(loom))]
fn bench(args: &BenchArgs) -> Result<(), CliError> {
    use streamtask_cli::bench::{BenchConfig, run};
    let mut config = if args.quick {
        BenchConfig::quick()
    } else {
        BenchConfig::full()
    };
    if let Some(rounds) = args.rounds {
        if rounds == 0 {
            return Err(CliError::Usage(
                "--rounds 0 measures nothing: give at least 1".into(),
            ));
        }
        config.rounds = rounds;
    }
    let quiet = args.quiet;
    let report = run(config, |round, what| {
        if !quiet {
            eprintln!("round {}/{}: {what}", round + 1, config.rounds);
        }
    });
    print!("{report}");
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("the bench report as JSON: {e}")))?;
        std::fs::write(path, json + "\n").map_err(|e| {
            CliError::Usage(format!(
                "cannot write the JSON report to {}: {e}; give --json a writable path",
                path.display()
            ))
        })?;
    }
    Ok(())
}

/// `streamtask inspect PATH`: the table on stdout, the JSON if asked for; exit 3 if a file is
/// damaged (the table and the JSON name it), 2 if the path holds no checkpoint or savepoint.
fn inspect(args: &InspectArgs) -> Result<(), CliError> {
    use streamtask_cli::inspect::InspectError;
    check_output(args.json.as_deref(), "--json", "json")?;
    let inspection = streamtask_cli::inspect::inspect(&args.path).map_err(|e| match e {
        InspectError::NotFound(_) => CliError::Usage(e.to_string()),
        InspectError::Storage(_) => CliError::Failed(e.to_string()),
    })?;
    print!("{}", inspection.table());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&inspection)
            .map_err(|e| CliError::Failed(format!("the inspection as JSON: {e}")))?;
        std::fs::write(path, json + "\n")
            .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    match &inspection.damage {
        None => Ok(()),
        Some(damage) => Err(CliError::Damaged(format!(
            "{} failed its {} check: it cannot be restored",
            damage.file.display(),
            damage.check
        ))),
    }
}

fn announce(phase: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "streamtask-phase {phase}");
    let _ = err.flush();
    drop(err);
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

/// The log on stderr, above the progress bars. The executor's warnings (one line per failed
/// attempt, the root cause) and its restore decisions are what a user wants to see; the model
/// crates' task logs repeat the causes (`streamtask` alone would match `streamtask_core` etc.
/// too). `soak` starts every seed over on purpose, so its restore decisions stay below the
/// filter. RUST_LOG overrides.
fn init_log(soak: bool) {
    let restore = if soak { "warn" } else { "info" };
    let logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(format!(
            "error,streamtask=warn,streamtask_cli=warn,streamtask::job::restore={restore},\
             streamtask_core=error,streamtask_legacy=error,streamtask_mailbox=error,\
             streamtask_bridge=error"
        )))
        .build();
    log::set_max_level(logger.filter());
    log::set_boxed_logger(Box::new(AboveTheBars(logger)))
        .expect("the only logger, set once at start");
}

fn main() -> ExitCode {
    quiet_injected_panics();
    // Usage errors from clap exit with 2 already.
    let cli = Cli::parse();
    init_log(matches!(cli.command, Some(Command::Soak(_))));
    let result = match cli.command.unwrap_or(Command::Compare(cli.compare)) {
        Command::Compare(args) => {
            let options = args.into_options(SavepointArgs::default());
            let cancel = install_signal_handler(None);
            compare(&options, &Model::ALL, &cancel)
        }
        Command::Run(args) => {
            let options = args.compare.into_options(args.savepoint);
            let savepoint = options
                .stop_with_savepoint
                .as_ref()
                .map(|_| SavepointHandle::new());
            let cancel = install_signal_handler(savepoint.clone());
            match (args.engine.engine, args.model, savepoint) {
                (timely_demo::Engine::Timely, model, _) => {
                    timely_demo::run(&options, &args.engine, model.is_some(), &cancel)
                }
                (timely_demo::Engine::Local, None, _) => Err(CliError::Usage(
                    "run needs --model (or --engine timely)".into(),
                )),
                (timely_demo::Engine::Local, Some(model), Some(handle)) => {
                    run_to_savepoint(&options, model, handle, &cancel)
                }
                (timely_demo::Engine::Local, Some(model), None) => {
                    compare(&options, &[model], &cancel)
                }
            }
        }
        Command::Soak(args) => {
            let models = if args.model.is_empty() {
                Model::ALL.to_vec()
            } else {
                args.model
            };
            let options = Options::of(
                args.job,
                (args.faults, args.fault_seed),
                ReportArgs::default(),
                StateArgs::default(),
                SavepointArgs::default(),
            );
            let cancel = install_signal_handler(None);
            soak(&options, args.seeds, &models, &cancel)
        }
        Command::Bench(args) => bench(&args),
        Command::Inspect(args) => inspect(&args),
        Command::Timely(args) => timely_run::timely(&args),
        Command::TimelyWorker { args } => return streamtask_timely::sample::worker_main(args),
        Command::TimelyDemoWorker(args) => timely_demo::worker(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("streamtask: {error}");
            error.exit_code()
        }
    }
}

fn run_model(
    options: &Options,
    job: &DemoJob,
    model: Model,
    tracer: Tracer,
    cancel: &Arc<AtomicBool>,
    metrics: Option<&MetricsRegistry>,
) -> Result<DemoRun, CliError> {
    let progress = if options.quiet {
        ProgressBar::hidden()
    } else {
        let bar = BARS.add(ProgressBar::new(job.data.orders));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>8} {spinner} [{bar:40}] {pos}/{len} records {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar.set_prefix(model.name());
        bar.set_message("running");
        // The spinner turns while the pipeline drains after the source read everything.
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    };
    let on_progress = {
        let bar = progress.clone();
        let total = job.data.orders;
        Arc::new(move |records: u64| {
            bar.set_position(records.min(total));
            if records >= total {
                bar.set_message("all read; draining the pipeline and committing");
            }
        })
    };
    let mut config = JobConfig::new(&job.work_dir)
        .with_fairness(options.fairness())
        .with_tracer(tracer)
        .with_progress(on_progress)
        .with_cancel(Arc::clone(cancel))
        .with_restore(options.restore())
        .with_fallback_to_older(options.fallback_to_older_checkpoint)
        .with_allow_non_restored_state(options.allow_non_restored_state)
        .with_job_name(DEMO_JOB_NAME);
    if let Some(registry) = metrics {
        config = config.with_metrics(registry.clone());
    }
    if let (Some(dir), Some(stop)) = (&options.stop_with_savepoint, &job.stop_at) {
        config = config.with_stop_with_savepoint(
            streamtask::StopWithSavepoint::new(dir)
                .with_handle(stop.handle.clone())
                .with_drain(options.drain),
        );
    }
    if pause_at_phases() {
        config = config.with_phases(Arc::new(|phase| match phase {
            JobPhase::CheckpointTriggered { id } => announce(&format!("trigger {id}")),
            JobPhase::CheckpointCommitting { id } => announce(&format!("commit {id}")),
            _ => {}
        }));
    }
    let verifying = {
        let bar = progress.clone();
        move || bar.set_message("verifying the committed output against the reference")
    };
    let run = match job.run_with(model, config.clone(), verifying.clone()) {
        // `compare --resume` after a crash in a later model: the earlier models finished.
        Err(JobError::NothingToResume { .. }) if options.resume => {
            // Not through the progress bar: it is hidden with --quiet.
            eprintln!(
                "streamtask: {model}: its earlier run finished; running it again from the start"
            );
            job.run_with(model, config.with_restore(Restore::Fresh), verifying)
        }
        other => other,
    };
    let run = match run {
        Ok(run) => run,
        Err(e) => {
            progress.abandon();
            return Err(CliError::of_job(model, e));
        }
    };
    let resumed = run
        .result
        .restored_from
        .map(|id| format!(", resumed from checkpoint {id}"))
        .unwrap_or_default();
    progress.finish_with_message(format!(
        "done in {:.2} s, {} restart(s){resumed}",
        run.result.elapsed.as_secs_f64(),
        run.result.restarts
    ));
    Ok(run)
}

fn report_of(job: &DemoJob, run: &DemoRun) -> ModelReport {
    let r = &run.result;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let (checkpoint_alignment, aligned_timeout_ms) = alignment_keys(run.alignment);
    let tasks = || r.tasks.iter().map(|t| &t.metrics);
    let channel_state_records: u64 = tasks().map(|m| m.channel_state_records).sum();
    let channel_state_bytes: u64 = tasks().map(|m| m.channel_state_bytes).sum();
    let per_checkpoint = |total: u64| total as f64 / r.checkpoints_completed.max(1) as f64;
    ModelReport {
        model: run.model.name().to_string(),
        output_digest: run.digest.clone(),
        output_lines: run.committed.len() as u64,
        exactly_once: run.exactly_once,
        per_key_order: run.per_key_order,
        // A resumed run read only the orders after its checkpoint: count what it read.
        records_per_sec: match r.restored_from {
            Some(_) => r.metrics.source_records as f64 / secs,
            None => job.data.orders as f64 / secs,
        },
        elapsed_ms: r.elapsed.as_millis() as u64,
        checkpoint_delay_us: r.metrics.checkpoint_delay.summary(),
        checkpoint_alignment,
        aligned_timeout_ms,
        checkpoint_end_to_end_us: run.end_to_end.summary,
        alignment_p99_us: tasks().map(|m| m.alignment_us.p99).max().unwrap_or(0),
        alignment_max_us: tasks().map(|m| m.alignment_us.max).max().unwrap_or(0),
        unaligned_checkpoints: tasks().map(|m| m.unaligned_checkpoints).max().unwrap_or(0),
        channel_state_records,
        channel_state_bytes,
        channel_state_records_per_checkpoint: per_checkpoint(channel_state_records),
        channel_state_bytes_per_checkpoint: per_checkpoint(channel_state_bytes),
        timer_lateness_us: r.metrics.timer_lateness.summary(),
        lock_wait_us: r.metrics.lock_wait.summary(),
        mailbox_latency_us: r.metrics.mailbox_latency.summary(),
        idle_ms: r.metrics.idle.as_millis() as u64,
        backpressured_ms: r.metrics.backpressured.as_millis() as u64,
        checkpoints_completed: r.checkpoints_completed,
        checkpoints_aborted: r.checkpoints_aborted,
        restarts: r.restarts,
        faults_fired: u32::try_from(job.faults.fired()).unwrap_or(u32::MAX),
        threads: r.metrics.threads + job.helper_threads(),
        throughput_series: r.throughput_series.clone(),
        checkpoint_series: r.checkpoint_series.clone(),
        checkpoint_end_to_end_series: run
            .end_to_end
            .series
            .iter()
            .map(|c| (c.id, c.triggered_secs, c.duration_us))
            .collect(),
        stalled_checkpoints: run.stalled_checkpoints.clone(),
    }
}

fn compare(options: &Options, models: &[Model], cancel: &Arc<AtomicBool>) -> Result<(), CliError> {
    let plan = options.validate(false)?;
    let mut job = options.demo();
    job.restarts = plan.restarts;
    let _lock = lock_work_dir(&job.work_dir)?;
    // Refuse a work directory that needs --resume or --discard-state before generating data.
    for &model in models {
        let config = JobConfig {
            checkpoint_dir: job.checkpoint_dir(model),
            ..JobConfig::new(&job.work_dir)
                .with_restore(options.restore())
                .with_fallback_to_older(options.fallback_to_older_checkpoint)
        };
        // The job itself: a resume must read the input its state was taken over.
        match job
            .build(model)
            .and_then(|graph| graph.check_restore(&config))
        {
            Ok(()) | Err(JobError::NothingToResume { .. }) => {}
            Err(e) => return Err(CliError::of_job(model, e)),
        }
    }
    check_space(&job, models)?;
    let exporter = options.metrics.start()?;
    let metrics = exporter.as_ref().map(MetricsExporter::registry);
    prepare(options, &job, cancel)?;
    // A drained savepoint's job is over: its restore reads nothing, so the output must stay
    // what the drained stop committed (no duplicates, nothing new).
    let drained = options
        .from_savepoint
        .as_deref()
        .and_then(|path| streamtask::checkpoint::Savepoint::load(path).ok())
        .is_some_and(|savepoint| savepoint.is_drained());
    if drained && let Some(&model) = models.first() {
        phase(
            options,
            "the savepoint was drained: the job restores after end of input and reads nothing \
             more; the reference is the output committed before",
        );
        let mut before = streamtask::sink::read_committed(job.output_dir(model))
            .map_err(|e| CliError::Failed(e.to_string()))?;
        before.sort_unstable();
        job.reference = Some(before);
    } else {
        phase(
            options,
            "computing the reference output (from the data, without any runtime)",
        );
    }
    let expected = streamtask_cli::demo::digest(&job.reference());
    let mut reports = Vec::new();
    let mut traces: Vec<(Model, Arc<TraceLog>)> = Vec::new();
    for &model in models {
        let mut job = job.clone();
        job.faults = Arc::new(FaultPlan::seeded(
            options.fault_seed,
            options.faults,
            job.data.orders,
        ));
        let log = TraceLog::new();
        let tracer = if options.trace.is_some() {
            Tracer::to(&log)
        } else {
            Tracer::off()
        };
        let run = run_model(options, &job, model, tracer, cancel, metrics)?;
        reports.push(report_of(&job, &run));
        traces.push((model, log));
    }
    let report = CompareReport::new(
        expected,
        job.data.orders,
        options.checkpoint_interval_ms,
        options.faults,
        reports,
    )
    .with_setup(job.scenario.name(), job.checkpoint_alignment);
    println!("{}", report.table());
    let write_error = |path: &Path, e: &dyn std::fmt::Display| {
        CliError::Failed(format!("cannot write {}: {e}", path.display()))
    };
    if let Some(path) = &options.json {
        report.write_json(path).map_err(|e| write_error(path, &e))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &options.plot {
        streamtask_cli::plot::draw(&report, path).map_err(|e| write_error(path, &e))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &options.trace {
        let logs: Vec<(&str, &TraceLog)> =
            traces.iter().map(|(m, l)| (m.name(), l.as_ref())).collect();
        std::fs::write(path, TraceLog::to_chrome_json_multi(&logs))
            .map_err(|e| write_error(path, &e))?;
        eprintln!(
            "wrote {} (open it in https://ui.perfetto.dev)",
            path.display()
        );
    }
    if report.identical
        && report
            .models
            .iter()
            .all(|m| m.exactly_once && m.per_key_order != Some(false))
    {
        Ok(())
    } else {
        Err(CliError::Failed(
            "the verdict is false: committed output differs or left its order (see the table)"
                .to_string(),
        ))
    }
}

/// `run --stop-with-savepoint DIR`: one model's run that stops with a savepoint (on a signal,
/// or after `--stop-with-savepoint-after-records`), prints its path and succeeds. If the job
/// ends first, its verdict is reported as a run without the option would.
fn run_to_savepoint(
    options: &Options,
    model: Model,
    handle: SavepointHandle,
    cancel: &Arc<AtomicBool>,
) -> Result<(), CliError> {
    let plan = options.validate(false)?;
    let mut job = options.demo();
    job.restarts = plan.restarts;
    let _lock = lock_work_dir(&job.work_dir)?;
    job.faults = Arc::new(FaultPlan::seeded(
        options.fault_seed,
        options.faults,
        job.data.orders,
    ));
    job.stop_at = Some(streamtask_cli::demo::source::StopAt {
        records: options
            .stop_with_savepoint_after_records
            .unwrap_or(u64::MAX),
        handle,
    });
    let config = JobConfig {
        checkpoint_dir: job.checkpoint_dir(model),
        ..JobConfig::new(&job.work_dir)
            .with_restore(options.restore())
            .with_fallback_to_older(options.fallback_to_older_checkpoint)
    };
    // The job itself: a resume must read the input its state was taken over.
    match job
        .build(model)
        .and_then(|graph| graph.check_restore(&config))
    {
        Ok(()) | Err(JobError::NothingToResume { .. }) => {}
        Err(e) => return Err(CliError::of_job(model, e)),
    }
    check_space(&job, &[model])?;
    let exporter = options.metrics.start()?;
    let metrics = exporter.as_ref().map(MetricsExporter::registry);
    prepare(options, &job, cancel)?;
    let run = run_model(options, &job, model, Tracer::off(), cancel, metrics)?;
    match &run.result.savepoint {
        Some(path) => {
            if options.drain {
                eprintln!(
                    "streamtask: {model}: stopped with a drained savepoint (the open windows \
                     fired) after committing {} of {} output lines; the job is over: a run \
                     restored from {} reads nothing more",
                    run.committed.len(),
                    streamtask_cli::demo::data::expected_output(&job.data).len(),
                    path.display()
                );
            } else {
                eprintln!(
                    "streamtask: {model}: stopped with a savepoint after committing {} of {} \
                     output lines; continue with `run --model M --from-savepoint {}` (same \
                     --output-dir)",
                    run.committed.len(),
                    streamtask_cli::demo::data::expected_output(&job.data).len(),
                    path.display()
                );
            }
            println!("savepoint: {}", path.display());
            println!("drained: {}", options.drain);
            if let Some(json) = &options.json {
                let report = serde_json::json!({
                    "model": model.name(),
                    "savepoint": path,
                    "drained": options.drain,
                    "output_lines": run.committed.len(),
                });
                let text = serde_json::to_string_pretty(&report)
                    .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
                std::fs::write(json, text).map_err(|e| {
                    CliError::Failed(format!("cannot write {}: {e}", json.display()))
                })?;
                eprintln!("wrote {}", json.display());
            }
            Ok(())
        }
        None => {
            eprintln!("streamtask: {model}: the job finished before the savepoint was taken");
            let expected = streamtask_cli::demo::digest(
                &streamtask_cli::demo::data::expected_output(&job.data),
            );
            let report = CompareReport::new(
                expected,
                job.data.orders,
                options.checkpoint_interval_ms,
                options.faults,
                vec![report_of(&job, &run)],
            )
            .with_setup(job.scenario.name(), job.checkpoint_alignment);
            println!("{}", report.table());
            if run.exactly_once && run.per_key_order != Some(false) {
                Ok(())
            } else {
                Err(CliError::Failed(
                    "the verdict is false: committed output differs or left its order (see the table)"
                    .to_string(),
                ))
            }
        }
    }
}

/// Refuses runs of `models` whose writes do not fit the disk (exit 2: fewer --records or
/// another --work-dir fixes it).
fn check_space(job: &DemoJob, models: &[Model]) -> Result<(), CliError> {
    job.check_space(models).map_err(|e| match e {
        JobError::NotEnoughSpace { .. } => CliError::Usage(e.to_string()),
        other => CliError::Failed(other.to_string()),
    })
}

/// Says which phase starts, on stderr, unless `--quiet`: the phases before and after the
/// progress bar take long enough on large inputs to look like a hang otherwise.
fn phase(options: &Options, text: &str) {
    if options.quiet {
        return;
    }
    // Bars are hidden when stderr is no terminal, and so is what they print.
    if BARS.is_hidden() {
        eprintln!("streamtask: {text}");
    } else {
        let _ = BARS.println(format!("streamtask: {text}"));
    }
}

/// Generates the data, announcing the midpoint to the crash test when asked.
fn prepare(options: &Options, job: &DemoJob, cancel: &AtomicBool) -> Result<(), CliError> {
    if !job.is_generated() {
        phase(
            options,
            &format!(
                "generating data: {} orders, {} customers in {}",
                job.data.orders,
                job.data.customers,
                job.work_dir.display()
            ),
        );
    }
    let pause = pause_at_phases();
    let result = job.prepare_with(cancel, || {
        if pause {
            announce("generate");
        }
    });
    result.map_err(|e| match e {
        JobError::NotEnoughSpace { .. } => CliError::Usage(e.to_string()),
        JobError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::Interrupted => {
            CliError::Failed(
                "stopped by a signal while generating data; the partial file was removed"
                    .to_string(),
            )
        }
        other => CliError::Failed(other.to_string()),
    })
}

fn soak(
    options: &Options,
    seeds: u64,
    models: &[Model],
    cancel: &Arc<AtomicBool>,
) -> Result<(), CliError> {
    let plan = options.validate(true)?;
    let mut job = options.demo();
    job.restarts = plan.restarts;
    let _lock = lock_work_dir(&job.work_dir)?;
    check_space(&job, models)?;
    let exporter = options.metrics.start()?;
    let metrics = exporter.as_ref().map(MetricsExporter::registry);
    prepare(options, &job, cancel)?;
    let faults = options.faults.max(1);
    if options.faults == 0 {
        eprintln!(
            "streamtask: note: soak injects faults; --faults 0 raised to 1 per run (give \
             --faults N for more)"
        );
    }
    let mut ok = true;
    for &model in models {
        let progress = if options.quiet {
            ProgressBar::hidden()
        } else {
            let bar = BARS.add(ProgressBar::new(seeds));
            bar.set_style(
                ProgressStyle::with_template("{prefix:>8} [{bar:40}] seed {pos}/{len} {msg}")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(model.name());
            bar
        };
        let mut restarts = 0;
        let mut failed = Vec::new();
        for seed in 0..seeds {
            job.faults = Arc::new(FaultPlan::seeded(
                options.fault_seed.wrapping_add(seed),
                faults,
                job.data.orders,
            ));
            // Every seed starts over: an earlier seed that failed leaves its state behind.
            let mut config = JobConfig::new(&job.work_dir)
                .with_fairness(options.fairness())
                .with_cancel(Arc::clone(cancel))
                .with_restore(Restore::DiscardState)
                .with_job_name(DEMO_JOB_NAME);
            if let Some(registry) = metrics {
                config = config.with_metrics(registry.clone());
            }
            match job.run(model, config) {
                Ok(run) if run.exactly_once => restarts += run.result.restarts,
                Ok(_) => failed.push(format!("seed {seed}: output differs from the reference")),
                Err(e @ JobError::Cancelled { .. }) => {
                    progress.abandon();
                    if let JobError::Cancelled { left_behind } = &e
                        && !left_behind.is_empty()
                    {
                        return Err(CliError::of_job(model, e));
                    }
                    // Not `of_job`'s advice: soak starts every seed over and refuses --resume.
                    return Err(CliError::Failed(format!(
                        "{model}: soak stopped by a signal at seed {seed} of {seeds}; run soak \
                         again to start over"
                    )));
                }
                Err(e) => failed.push(format!("seed {seed}: {e}")),
            }
            progress.inc(1);
            progress.set_message(format!("{} failure(s)", failed.len()));
        }
        progress.finish_and_clear();
        println!(
            "{model:>8}: {} seed(s), {} fault(s) each, {restarts} restart(s), {} failure(s)",
            seeds,
            faults,
            failed.len()
        );
        for f in &failed {
            println!("          {f}");
        }
        ok &= failed.is_empty();
    }
    if ok {
        Ok(())
    } else {
        Err(CliError::Failed(
            "exactly-once did not hold for every seed (see above)".to_string(),
        ))
    }
}
