//! The demo job, built for any model, run in a work directory, and judged against the reference
//! output.
//!
//! ```text
//! orders file ──> orders source ──hash(customer)──> totals (keyed, timers) ──> snapshot probe
//!   (generated)   legacy SourceFunction, or         running + window totals
//!                 its ported SourceReader
//!     ──> enrich (async, batched: a batch of events per query, SQLite through a bounded
//!         pool) ──> exactly-once file sink
//! ```
//!
//! Chaining follows the model: under the legacy model the async enrichment starts its own task
//! (FLINK-13063); under the mailbox and bridge models it chains behind the totals.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use streamtask::StallReport;
use streamtask::checkpoint::CheckpointConfig;
use streamtask_core::Alignment;
use streamtask_core::async_io::{AsyncConfig, BatchConfig, BlockingPool, OutputMode, RetryPolicy};
use streamtask_core::function::AsyncError;
use streamtask_core::sync::Mutex;

use super::checkpoints::{EndToEnd, EndToEndRecorder};
use super::data::{DemoData, Order, TotalEvent, expected_output, per_key_order_held};
use super::enrich::{create_customer_db, throttled_enrichment};
use super::probe::SnapshotFaults;
use super::source::{OrdersFileReader, OrdersFileSource, StopAt};
use super::totals::RunningTotals;
use streamtask::fault::FaultPlan;
use streamtask::{JobConfig, JobError, JobGraph, JobResult, Model, StreamEnvironment};

/// The margin [`DemoJob::bytes_to_write`] adds, in percent: line lengths are measured on a
/// sample of the orders (ids and running totals grow longer after it), and the file system's
/// blocks, the sinks' in-progress files and the database's journal come on top.
pub const SPACE_MARGIN_PERCENT: u64 = 20;

/// The customer database, estimated: a row per customer and SQLite's pages and journal.
fn database_bytes(customers: u32) -> u64 {
    u64::from(customers) * 64 + (256 << 10)
}

/// The checkpoints one model's run keeps (three retained): per customer a running total,
/// open windows and timers, and the sinks' transaction lists.
fn checkpoint_bytes(customers: u32) -> u64 {
    3 * (u64::from(customers) * 256 + (64 << 10))
}

/// Parallelism of the keyed totals and everything after them.
pub const KEYED_PARALLELISM: usize = 2;

/// Worker threads of the enrichment's blocking pool (shared by the keyed subtasks).
///
/// Two since the lookups are batched
/// ([`batched_enrichment`](super::enrich::batched_enrichment)): a worker answers a batch of
/// events per job, so two keep up with both keyed subtasks; on a two-core machine more
/// workers only add idle threads spinning in the pool queue's `recv` (`sched_yield`) and
/// context switches (the figures are in PERF-NOTES.md).
pub const ENRICH_THREADS: usize = 2;

/// The enrichment's async configuration: ordered, 100 in flight, batches of at most
/// [`ENRICH_BATCH_SIZE`] closed after [`ENRICH_BATCH_MAX_WAIT`], a generous timeout, and
/// retries only for a busy database (an injected fault must fail the task, not be retried).
pub fn enrich_config() -> AsyncConfig<String> {
    enrich_config_in(OutputMode::Ordered)
}

/// [`enrich_config`] in output mode `mode`.
pub fn enrich_config_in(mode: OutputMode) -> AsyncConfig<String> {
    let busy = RetryPolicy::fixed_delay(3, Duration::from_millis(5))
        .expect("a valid retry policy")
        .retry_if_error(|e| matches!(e, AsyncError::Failed(m) if m.contains("database is locked")));
    AsyncConfig::new(mode, 100)
        .with_batch(BatchConfig::new(ENRICH_BATCH_SIZE, ENRICH_BATCH_MAX_WAIT))
        .with_timeout(Duration::from_secs(30))
        .with_retry(busy)
}

/// Events per enrichment batch at most (one query looks up a batch's distinct customers).
pub const ENRICH_BATCH_SIZE: usize = 32;

/// How long an enrichment batch waits for more events after its first one joined.
pub const ENRICH_BATCH_MAX_WAIT: Duration = Duration::from_millis(1);

/// The load the demo job runs under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// The job as it is: every stage keeps up with the source but for short bursts.
    #[default]
    Normal,
    /// The enrichment is slower than the source ([`BACKPRESSURE_DELAY_PER_EVENT`] per event
    /// and worker), so the async operator's queue and the channels before it stay full, and a
    /// barrier aligned behind them waits for the backlog to drain.
    Backpressure,
}

impl Scenario {
    /// `normal` or `backpressure`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Normal => "normal",
            Scenario::Backpressure => "backpressure",
        }
    }

    /// How long the enrichment's database takes per event.
    pub fn enrich_delay(self) -> Duration {
        match self {
            Scenario::Normal => Duration::ZERO,
            Scenario::Backpressure => BACKPRESSURE_DELAY_PER_EVENT,
        }
    }
}

/// The backpressure scenario's enrichment time per event and worker. The [`ENRICH_THREADS`]
/// workers then answer at most 20,000 events a second, far less than the source reads, so the
/// backlog holds for the whole run: each keyed subtask's input channel and async queue stay
/// full, and an aligned barrier waits behind a channel's worth of events. Yet a batch of a few
/// thousand orders still runs in well under a second, so tests can use the scenario.
pub const BACKPRESSURE_DELAY_PER_EVENT: Duration = Duration::from_micros(100);

/// What the demo job runs on and how.
#[derive(Debug, Clone)]
pub struct DemoJob {
    /// The generated data.
    pub data: DemoData,
    /// Where data, database, checkpoints and output live (one subdirectory per model).
    pub work_dir: PathBuf,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Checkpoint failures in a row the run tolerates (0, as Flink's default).
    pub tolerable_failed_checkpoints: u32,
    /// How checkpoint barriers are aligned, under the models that can choose (see
    /// [`alignment`](Self::alignment)).
    pub checkpoint_alignment: Alignment,
    /// The load the job runs under.
    pub scenario: Scenario,
    /// The enrichment's async output mode ([`enrich_config`]'s is ordered). Key-ordered runs the
    /// enrichment behind a hash partitioning by customer, keyed by the customer.
    pub async_mode: OutputMode,
    /// Faults to inject (shared by every attempt of one run).
    pub faults: Arc<FaultPlan>,
    /// Restarts allowed.
    pub restarts: u32,
    /// Where the source stops for a savepoint, if it does.
    pub stop_at: Option<StopAt>,
    /// Where the sink writes, instead of `<model dir>/output` (a run restored from another
    /// model's savepoint continues that run's output).
    pub output_dir: Option<PathBuf>,
    /// When a pending checkpoint is reported as stalled: `None` at the library's default for
    /// the interval ([`CheckpointConfig::default_stall_report_after`]), `Some(ZERO)` never.
    pub stall_report_after: Option<Duration>,
    /// The output a correct run commits, sorted, when it is not the data's reference
    /// ([`expected_output`]): a run restored from a drained savepoint reads nothing more, so
    /// it must leave what the drained stop committed. See [`reference`](Self::reference).
    pub reference: Option<Vec<String>>,
}

/// One model's run of the demo job.
#[derive(Debug)]
pub struct DemoRun {
    /// The model.
    pub model: Model,
    /// What the executor reported.
    pub result: JobResult,
    /// The committed output, sorted.
    pub committed: Vec<String>,
    /// Its digest.
    pub digest: String,
    /// Whether it equals the reference output.
    pub exactly_once: bool,
    /// With ordered or key-ordered enrichment: whether each customer's committed lines kept
    /// its events' order ([`per_key_order_held`]); `None` with unordered enrichment, which
    /// need not keep it.
    pub per_key_order: Option<bool>,
    /// How the run's checkpoints were aligned ([`DemoJob::alignment`]).
    pub alignment: Alignment,
    /// Each completed checkpoint's end-to-end duration, every attempt.
    pub end_to_end: EndToEnd,
    /// The stalled-checkpoint reports of every attempt, the first
    /// [`MAX_STALL_REPORTS`].
    pub stalled_checkpoints: Vec<StallReport>,
}

/// Stall reports a run keeps for its report (each is also logged): enough to see what held
/// the checkpoints, bounded for a long run that stalls all along.
pub const MAX_STALL_REPORTS: usize = 100;

impl DemoJob {
    /// The demo on `data` in `work_dir`, checkpointing every 50 ms, no faults.
    pub fn new(data: DemoData, work_dir: impl Into<PathBuf>) -> Self {
        DemoJob {
            data,
            work_dir: work_dir.into(),
            checkpoint_interval: Duration::from_millis(50),
            tolerable_failed_checkpoints: 0,
            checkpoint_alignment: Alignment::Aligned,
            scenario: Scenario::Normal,
            async_mode: OutputMode::Ordered,
            faults: Arc::new(FaultPlan::none()),
            restarts: 10,
            stop_at: None,
            output_dir: None,
            stall_report_after: None,
            reference: None,
        }
    }

    /// The output a correct run commits, sorted: [`reference`](Self::reference) if set, else
    /// the data's reference output.
    pub fn reference(&self) -> Vec<String> {
        self.reference
            .clone()
            .unwrap_or_else(|| expected_output(&self.data))
    }

    /// Path of the generated orders file.
    pub fn orders_file(&self) -> PathBuf {
        self.work_dir.join("orders.csv")
    }

    /// Path of the customer database.
    pub fn database(&self) -> PathBuf {
        self.work_dir.join("customers.db")
    }

    /// Threads the job starts besides its tasks' own: the checkpoint coordinator, and the
    /// enrichment pool of every keyed subtask.
    pub fn helper_threads(&self) -> u64 {
        1 + ENRICH_THREADS as u64
    }

    /// The model's own directory (checkpoints and output).
    pub fn model_dir(&self, model: Model) -> PathBuf {
        self.work_dir.join(model.name())
    }

    /// Where `model`'s run commits its output.
    pub fn output_dir(&self, model: Model) -> PathBuf {
        self.output_dir
            .clone()
            .unwrap_or_else(|| self.model_dir(model).join("output"))
    }

    /// Generates the orders file and the customer database (once per work directory).
    ///
    /// # Errors
    ///
    /// I/O or SQLite errors, as [`JobError::Io`]; [`JobError::NotEnoughSpace`] if the data
    /// would not fit the disk.
    pub fn prepare(&self) -> Result<(), JobError> {
        self.prepare_with(&AtomicBool::new(false), || {})
    }

    /// The file that records which data the work directory's orders file and database were
    /// generated from, written after both are complete.
    fn generated_marker(&self) -> PathBuf {
        self.work_dir.join("orders.identity")
    }

    /// What the marker holds once the orders file of [`data`](Self::data) is complete.
    fn marker_text(&self, file_len: u64) -> String {
        format!("{}\n{file_len} bytes\n", self.data.identity())
    }

    /// Whether the orders file and database of [`data`](Self::data) are already generated (a
    /// resume, or a rerun in the same work directory): the marker names this data and the
    /// orders file's length.
    pub fn is_generated(&self) -> bool {
        let Ok(file) = std::fs::metadata(self.orders_file()) else {
            return false;
        };
        self.database().is_file()
            && std::fs::read_to_string(self.generated_marker())
                .is_ok_and(|text| text == self.marker_text(file.len()))
    }

    /// Bytes the runs of `models` will still write into the work directory, estimated: the
    /// orders file and the database unless [generated](Self::is_generated) already, and for
    /// each output directory the reference output not committed there yet (a resume continues
    /// it; a fresh start deletes the old output first, freeing as much) plus its retained
    /// checkpoints; then [`SPACE_MARGIN_PERCENT`] on top.
    pub fn bytes_to_write(&self, models: &[Model]) -> u64 {
        let data = if self.is_generated() {
            0
        } else {
            self.data
                .orders
                .saturating_mul(self.data.estimated_bytes_per_order())
                .saturating_add(database_bytes(self.data.customers))
        };
        let output = self.data.estimated_output_bytes();
        let mut dirs: Vec<PathBuf> = models.iter().map(|&m| self.output_dir(m)).collect();
        dirs.sort_unstable();
        dirs.dedup();
        let outputs = dirs.iter().fold(0u64, |sum, dir| {
            let committed: u64 = streamtask::sink::committed_files(dir)
                .unwrap_or_default()
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum();
            sum.saturating_add(output.saturating_sub(committed))
                .saturating_add(checkpoint_bytes(self.data.customers))
        });
        let needed = data.saturating_add(outputs);
        needed.saturating_add(needed / 100 * SPACE_MARGIN_PERCENT)
    }

    /// Refuses runs of `models` whose writes ([`bytes_to_write`](Self::bytes_to_write)) do not
    /// fit the work directory's disk.
    ///
    /// # Errors
    ///
    /// [`JobError::NotEnoughSpace`]; [`JobError::Io`] if the free space cannot be read.
    pub fn check_space(&self, models: &[Model]) -> Result<(), JobError> {
        std::fs::create_dir_all(&self.work_dir).map_err(|source| JobError::Io {
            path: self.work_dir.clone(),
            source,
        })?;
        let needed = self.bytes_to_write(models);
        let available = fs4::available_space(&self.work_dir).map_err(|source| JobError::Io {
            path: self.work_dir.clone(),
            source,
        })?;
        if needed > available {
            return Err(JobError::NotEnoughSpace {
                path: self.work_dir.clone(),
                needed,
                available,
            });
        }
        Ok(())
    }

    /// [`prepare`](Self::prepare), checking free space for the data first, stopping soon after
    /// `cancel` is set (the half-written file is removed), and calling `midway` once when half
    /// the orders are written. Data already [generated](Self::is_generated) is kept as it is.
    ///
    /// # Errors
    ///
    /// As [`prepare`](Self::prepare); an interrupted generation is a [`JobError::Io`] of kind
    /// `Interrupted`.
    pub fn prepare_with(&self, cancel: &AtomicBool, midway: impl FnMut()) -> Result<(), JobError> {
        let io = |path: &Path, source: std::io::Error| JobError::Io {
            path: path.to_path_buf(),
            source,
        };
        if self.is_generated() {
            return Ok(());
        }
        self.check_space(&[])?;
        // The marker goes first, so a generation cut short is never taken for a complete one.
        match std::fs::remove_file(self.generated_marker()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io(&self.generated_marker(), e));
            }
            _ => {}
        }
        self.data
            .write_orders_file_with(&self.orders_file(), cancel, midway)
            .map_err(|e| io(&self.orders_file(), e))?;
        create_customer_db(&self.database(), self.data.customers)
            .map_err(|e| io(&self.database(), std::io::Error::other(e)))?;
        let len = std::fs::metadata(self.orders_file())
            .map_err(|e| io(&self.orders_file(), e))?
            .len();
        let marker = self.generated_marker();
        let tmp = marker.with_extension("tmp");
        std::fs::write(&tmp, self.marker_text(len))
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &marker))
            .map_err(|e| io(&marker, e))?;
        Ok(())
    }

    /// Builds the job for `model`, writing its output under [`model_dir`](Self::model_dir).
    ///
    /// # Errors
    ///
    /// What [`StreamEnvironment::build`] reports.
    pub fn build(&self, model: Model) -> Result<JobGraph, JobError> {
        let env = StreamEnvironment::new(model);
        // The orders cross into the keyed task (and, under the legacy model, the totals into
        // the async task): unaligned checkpoints store them as channel state.
        env.register_channel_type::<Order>()
            .register_channel_type::<TotalEvent>();
        let orders = self.orders_file();
        let faults = Arc::clone(&self.faults);
        let stop_at = self.stop_at.clone();
        let identity = self.data.identity();
        let source = match model {
            Model::Legacy | Model::Bridge => env.add_source("orders", move |_| {
                OrdersFileSource::new(orders.clone(), Arc::clone(&faults))
                    .with_stop_at(stop_at.clone())
            }),
            // The port with its declared state compatibility: it resumes the legacy source's
            // checkpoints and savepoints, and they resume its.
            Model::Mailbox => env.add_reader("orders", move |_| {
                streamtask_bridge::PortedReader::new(
                    OrdersFileReader::new(orders.clone(), Arc::clone(&faults))
                        .with_stop_at(stop_at.clone()),
                )
            }),
        }
        .source_identity(identity);
        let faults = Arc::clone(&self.faults);
        let probe_faults = Arc::clone(&self.faults);
        let totals = source
            .key_by(|o: &Order| o.customer)
            .process("totals", KEYED_PARALLELISM, move |_| {
                RunningTotals::new(Arc::clone(&faults))
            })
            .operator(move |_| SnapshotFaults::<TotalEvent>::new(Arc::clone(&probe_faults)));
        let pool = BlockingPool::new("enrich", ENRICH_THREADS, 1024)
            .map_err(|e| JobError::Config(e.to_string()))?;
        let db = self.database();
        let faults = Arc::clone(&self.faults);
        let delay = self.scenario.enrich_delay();
        let enrich =
            move |_| throttled_enrichment(Arc::clone(&pool), &db, Arc::clone(&faults), delay);
        let config = enrich_config_in(self.async_mode);
        let lines = match self.async_mode {
            OutputMode::KeyOrdered => totals
                .key_by(|e: &TotalEvent| e.customer())
                .async_wait_batched("enrich", KEYED_PARALLELISM, config, enrich),
            OutputMode::Ordered | OutputMode::Unordered => {
                totals.async_wait_batched("enrich", config, enrich)
            }
        };
        lines.two_phase_file_sink("sink", self.output_dir(model), |l: &String| l.clone());
        env.build()
    }

    /// How `model`'s checkpoints are aligned: as
    /// [`checkpoint_alignment`](Self::checkpoint_alignment) says, under every model (the
    /// channels and gates are shared; what the lock model cannot do is in the report's note).
    pub fn alignment(&self, _model: Model) -> Alignment {
        self.checkpoint_alignment
    }

    /// The checkpoint directory of `model`'s runs.
    pub fn checkpoint_dir(&self, model: Model) -> PathBuf {
        self.model_dir(model).join("checkpoints")
    }

    /// Runs the job under `model` in its model directory and judges its output.
    ///
    /// Where it starts is `config.restore`: by default fresh, which starts over after a
    /// finished run and refuses an unfinished one's state (resume it with
    /// [`Restore::Latest`](streamtask::Restore::Latest) or discard it with
    /// [`Restore::DiscardState`](streamtask::Restore::DiscardState)).
    ///
    /// # Errors
    ///
    /// What the executor reports when the job cannot start or finish.
    pub fn run(&self, model: Model, config: JobConfig) -> Result<DemoRun, JobError> {
        self.run_with(model, config, || {})
    }

    /// [`run`](Self::run), calling `verifying` once the job ended, before its committed output
    /// is read and compared with the reference (which takes a while on large inputs).
    ///
    /// # Errors
    ///
    /// What the executor reports when the job cannot start or finish.
    pub fn run_with(
        &self,
        model: Model,
        config: JobConfig,
        verifying: impl FnOnce(),
    ) -> Result<DemoRun, JobError> {
        let recorder = Arc::new(EndToEndRecorder::new());
        let job = self.build(model)?;
        // The end-to-end durations are recorded first; a phase callback of the caller's runs
        // after (it may pause the coordinator, which must not count).
        let on_phase: streamtask::PhaseCallback = {
            let recorder = Arc::clone(&recorder);
            let inner = config.on_phase.clone();
            Arc::new(move |phase| {
                recorder.on_phase(phase);
                if let Some(inner) = &inner {
                    inner(phase);
                }
            })
        };
        let alignment = self.alignment(model);
        let mut checkpoint = CheckpointConfig::new(self.checkpoint_interval)
            .with_tolerable_failures(self.tolerable_failed_checkpoints);
        checkpoint.alignment = alignment;
        checkpoint = match self.stall_report_after {
            None => checkpoint,
            Some(after) if after.is_zero() => checkpoint.without_stall_reports(),
            Some(after) => checkpoint.with_stall_report_after(after),
        };
        // Every stall report is kept for the run's report; a callback of the caller's (the
        // CLI's log) runs after.
        let stalls: Arc<Mutex<Vec<StallReport>>> = Arc::default();
        let on_stall: streamtask::StallCallback = {
            let stalls = Arc::clone(&stalls);
            let inner = config.on_stall.clone();
            Arc::new(move |report| {
                {
                    let mut kept = stalls.lock();
                    if kept.len() < MAX_STALL_REPORTS {
                        kept.push(report.clone());
                    }
                }
                match &inner {
                    Some(inner) => inner(report),
                    None => log::warn!("{report}"),
                }
            })
        };
        let config = JobConfig {
            checkpoint: Some(checkpoint),
            on_phase: Some(on_phase),
            on_stall: Some(on_stall),
            checkpoint_dir: self.checkpoint_dir(model),
            restart: streamtask::RestartStrategy::fixed_delay(
                self.restarts,
                Duration::from_millis(5),
            ),
            ..config
        };
        let result = job.run(&config)?;
        verifying();
        let mut committed =
            streamtask::sink::read_committed(self.output_dir(model)).map_err(JobError::Sink)?;
        let per_key_order = match self.async_mode {
            OutputMode::Ordered | OutputMode::KeyOrdered => Some(per_key_order_held(&committed)),
            OutputMode::Unordered => None,
        };
        committed.sort_unstable();
        let digest = super::digest(&committed);
        let exactly_once = committed == self.reference();
        Ok(DemoRun {
            model,
            result,
            committed,
            digest,
            exactly_once,
            per_key_order,
            alignment,
            end_to_end: recorder.end_to_end(),
            stalled_checkpoints: std::mem::take(&mut *stalls.lock()),
        })
    }
}
