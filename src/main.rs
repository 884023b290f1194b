//! `streamtask`: runs the built-in demo job under the legacy, mailbox and bridge models and
//! compares them side by side (the default), runs one model, or soaks the exactly-once
//! guarantee under many fault seeds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use streamtask::demo::data::DemoData;
use streamtask::demo::fault::FaultPlan;
use streamtask::demo::job::{DemoJob, DemoRun};
use streamtask::report::{CompareReport, ModelReport};
use streamtask::{JobConfig, Model};
use streamtask_core::trace::{TraceLog, Tracer};
use streamtask_legacy::Fairness;

#[derive(Debug, Parser)]
#[command(
    name = "streamtask",
    version,
    about = "Run a stream job under Flink's checkpoint-lock and mailbox threading models, side by side",
    long_about = "Without a subcommand, `streamtask` runs `compare`: the built-in demo job (orders \
                  file source, keyed running totals with timers, async enrichment from SQLite, \
                  exactly-once file sink) under the legacy, mailbox and bridge models, on data it \
                  generates, and prints a side-by-side table."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    options: Options,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo job under every model and compare (the default).
    Compare,
    /// Run the demo job under one model.
    Run {
        /// The model.
        #[arg(long, value_enum)]
        model: Model,
    },
    /// Run the demo job under many fault seeds per model and check exactly-once every time.
    Soak {
        /// Seeds per model.
        #[arg(long, default_value_t = 200)]
        seeds: u64,
        /// Models to soak (default: all).
        #[arg(long, value_enum)]
        model: Vec<Model>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FairnessArg {
    Unfair,
    Eventual,
    Fair,
}

#[derive(Debug, Args)]
struct Options {
    /// Orders the demo generates.
    #[arg(long, global = true, default_value_t = 100_000)]
    records: u64,
    /// Distinct customers (keys).
    #[arg(long, global = true, default_value_t = 500)]
    customers: u32,
    /// Seed of the generated data.
    #[arg(long, global = true, default_value_t = 42)]
    seed: u64,
    /// Checkpoint interval in milliseconds.
    #[arg(long, global = true, default_value_t = 50)]
    checkpoint_interval_ms: u64,
    /// Faults to inject into each model's run (panics in the source, an operator, a timer, an
    /// async call, a snapshot); each run restarts and must still commit the same output.
    #[arg(long, global = true, default_value_t = 0)]
    faults: u32,
    /// Seed choosing where the faults hit.
    #[arg(long, global = true, default_value_t = 1)]
    fault_seed: u64,
    /// Fairness of the checkpoint lock (legacy and bridge).
    #[arg(long, global = true, value_enum, default_value_t = FairnessArg::Eventual)]
    fairness: FairnessArg,
    /// Work directory for data, checkpoints and output [default: <temp>/streamtask-demo].
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,
    /// Write the report as JSON to this file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Write a Chrome trace (open in Perfetto) of which thread ran what.
    #[arg(long, global = true)]
    trace: Option<PathBuf>,
    /// Write an SVG plot of throughput and checkpoint start delay per model.
    #[arg(long, global = true)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, global = true)]
    quiet: bool,
}

impl Options {
    fn demo(&self) -> DemoJob {
        let data = DemoData {
            orders: self.records,
            customers: self.customers,
            seed: self.seed,
        };
        let dir = self
            .work_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("streamtask-demo"));
        let mut job = DemoJob::new(data, dir);
        job.checkpoint_interval = Duration::from_millis(self.checkpoint_interval_ms.max(1));
        job
    }

    fn fairness(&self) -> Fairness {
        match self.fairness {
            FairnessArg::Unfair => Fairness::Unfair,
            FairnessArg::Eventual => Fairness::Eventual,
            FairnessArg::Fair => Fairness::Fair,
        }
    }
}

fn main() -> ExitCode {
    // The executor's warnings (one line per failed attempt) are what a user wants to see; the
    // tasks' own failure logs repeat them. RUST_LOG overrides.
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("error,streamtask=warn"),
    )
    .init();
    quiet_injected_panics();
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Compare) {
        Command::Compare => compare(&cli.options, &Model::ALL),
        Command::Run { model } => compare(&cli.options, &[model]),
        Command::Soak { seeds, model } => {
            let models = if model.is_empty() {
                Model::ALL.to_vec()
            } else {
                model
            };
            soak(&cli.options, seeds, &models)
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("streamtask: {message}");
            ExitCode::from(2)
        }
    }
}

/// Injected faults are expected: report them in one line instead of a panic message with a
/// backtrace hint.
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("injected fault") {
            let thread = std::thread::current();
            log::info!("{} on thread {}", message, thread.name().unwrap_or("?"));
        } else {
            default(info);
        }
    }));
}

fn run_model(
    options: &Options,
    job: &DemoJob,
    model: Model,
    tracer: Tracer,
) -> Result<DemoRun, String> {
    let progress = if options.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(job.data.orders);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} records {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_prefix(model.name());
        bar
    };
    let on_progress = {
        let bar = progress.clone();
        let total = job.data.orders;
        Arc::new(move |records: u64| bar.set_position(records.min(total)))
    };
    let config = JobConfig::new(&job.work_dir)
        .with_fairness(options.fairness())
        .with_tracer(tracer)
        .with_progress(on_progress);
    let run = job
        .run(model, config)
        .map_err(|e| format!("{model}: {e}"))?;
    progress.finish_with_message(format!(
        "done in {:.2} s, {} restart(s)",
        run.result.elapsed.as_secs_f64(),
        run.result.restarts
    ));
    Ok(run)
}

fn report_of(job: &DemoJob, run: &DemoRun) -> ModelReport {
    let r = &run.result;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    ModelReport {
        model: run.model.name().to_string(),
        output_digest: run.digest.clone(),
        output_lines: run.committed.len() as u64,
        exactly_once: run.exactly_once,
        records_per_sec: job.data.orders as f64 / secs,
        elapsed_ms: r.elapsed.as_millis() as u64,
        checkpoint_delay_us: r.metrics.checkpoint_delay.summary(),
        timer_lateness_us: r.metrics.timer_lateness.summary(),
        lock_wait_us: r.metrics.lock_wait.summary(),
        mailbox_latency_us: r.metrics.mailbox_latency.summary(),
        checkpoints_completed: r.checkpoints_completed,
        checkpoints_aborted: r.checkpoints_aborted,
        restarts: r.restarts,
        threads: r.metrics.threads + job.helper_threads(),
        throughput_series: r.throughput_series.clone(),
        checkpoint_series: r.checkpoint_series.clone(),
    }
}

fn compare(options: &Options, models: &[Model]) -> Result<bool, String> {
    let job = options.demo();
    job.prepare().map_err(|e| e.to_string())?;
    let expected = streamtask::demo::digest(&streamtask::demo::data::expected_output(&job.data));
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
        let run = run_model(options, &job, model, tracer)?;
        reports.push(report_of(&job, &run));
        traces.push((model, log));
    }
    let report = CompareReport::new(
        expected,
        job.data.orders,
        options.checkpoint_interval_ms,
        options.faults,
        reports,
    );
    println!("{}", report.table());
    if let Some(path) = &options.json {
        report
            .write_json(path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &options.plot {
        report
            .write_plot(path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &options.trace {
        let logs: Vec<(&str, &TraceLog)> =
            traces.iter().map(|(m, l)| (m.name(), l.as_ref())).collect();
        std::fs::write(path, TraceLog::to_chrome_json_multi(&logs))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!(
            "wrote {} (open it in https://ui.perfetto.dev)",
            path.display()
        );
    }
    Ok(report.identical && report.models.iter().all(|m| m.exactly_once))
}

fn soak(options: &Options, seeds: u64, models: &[Model]) -> Result<bool, String> {
    let mut job = options.demo();
    job.prepare().map_err(|e| e.to_string())?;
    let faults = options.faults.max(1);
    let mut ok = true;
    for &model in models {
        let mut restarts = 0;
        let mut failed = Vec::new();
        for seed in 0..seeds {
            job.faults = Arc::new(FaultPlan::seeded(
                options.fault_seed.wrapping_add(seed),
                faults,
                job.data.orders,
            ));
            let config = JobConfig::new(&job.work_dir).with_fairness(options.fairness());
            match job.run(model, config) {
                Ok(run) if run.exactly_once => restarts += run.result.restarts,
                Ok(_) => failed.push(format!("seed {seed}: output differs from the reference")),
                Err(e) => failed.push(format!("seed {seed}: {e}")),
            }
        }
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
    Ok(ok)
}
