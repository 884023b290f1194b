//! The demo job on timely-dataflow workers (`streamtask run --engine timely`): the same
//! operators as the local job, hosted by `streamtask-timely` in one process or across
//! processes.
//!
//! ```text
//! orders file ──> orders (one split) + parse ──key group(customer)──> totals ──> snapshot probe
//!   ──> enrich (the async operator, batched, SQLite through a bounded pool) ──> exactly-once file sink
//! ```
//!
//! - **Source**: the orders file is one split ([`LineFiles`]), read by worker 0; a restore
//!   reopens it after the lines its checkpoint counted. One split, not several: a customer's
//!   running total is a sum in file order, so its orders must reach the totals in that order
//!   (one reader, and timely's channels keep each pair of workers' order). The watermark is
//!   the local source's bound (the largest event time read minus
//!   [`MAX_OUT_OF_ORDER_MS`], minus 1), computed by the engine after each batch of lines
//!   instead of after every 64th order: every order is within the bound, so no order is late
//!   either way and the window totals are the same.
//! - **Totals**: [`RunningTotals`] in a `KeyedProcessOperator` with keyed state and event-time
//!   window timers, behind an exchange by the local executor's key groups. Its processing-time
//!   housekeeping timer does not change the output; it fires on the host's real clock.
//! - **Enrichment**: the local job's async operator (`AsyncWaitOperator` over
//!   [`throttled_enrichment`] in batched mode, [`enrich_config_in`]), chained behind the
//!   totals. Its completions wake the hosting timely operator; the calls in flight at an
//!   epoch's end are in that epoch's snapshot and are called again on restore, as with the
//!   local executor. The last epoch waits for every call, so it commits everything.
//! - **Sink**: the two-phase file sink, one transaction per worker and epoch.

use std::path::PathBuf;
use std::sync::Arc;

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::{JobError, NonRecoverable};
use streamtask_core::async_io::{AsyncKey, BatchedAsyncFunction, BlockingPool, OutputMode};
use streamtask_core::keygroup::DEFAULT_MAX_PARALLELISM;
use streamtask_core::operator::{BoxOperator, Chain, Context, KeyedProcessOperator, Operator};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_runtime::AsyncWaitOperator;
use streamtask_timely::{LineFiles, TimelyConfig, TimelyJob};

use super::data::{MAX_OUT_OF_ORDER_MS, Order, TotalEvent};
use super::enrich::throttled_enrichment;
use super::job::{DemoJob, ENRICH_THREADS, enrich_config_in};
use super::probe::SnapshotFaults;
use super::totals::RunningTotals;

/// Parses each line of the orders file into its order (the record keeps the line's event
/// time); a line that is not an order fails the run, and every restart again.
#[derive(Debug)]
pub struct ParseOrders {
    faults: Arc<FaultPlan>,
}

impl ParseOrders {
    /// The parser, failing where `faults` injects a source fault.
    pub fn new(faults: Arc<FaultPlan>) -> Self {
        ParseOrders { faults }
    }
}

impl Operator for ParseOrders {
    type In = String;
    type Out = Order;

    fn name(&self) -> &str {
        "orders"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<String>,
        ctx: &mut Context<'_, Order>,
    ) -> Result<(), OperatorError> {
        let order = Order::parse(&record.value)
            .map_err(|e| OperatorError::user("orders", NonRecoverable::new(e)))?;
        self.faults.check(FaultKind::Source);
        ctx.collect(StreamRecord {
            value: order,
            timestamp: record.timestamp,
        })
    }
}

impl DemoJob {
    /// The directory of the timely runs (checkpoints and output), beside the models'.
    pub fn timely_dir(&self) -> PathBuf {
        self.work_dir.join("timely")
    }

    /// The checkpoint directory of the timely runs.
    pub fn timely_checkpoint_dir(&self) -> PathBuf {
        self.timely_dir().join("checkpoints")
    }

    /// Where the timely runs commit their output: [`output_dir`](Self::output_dir) if set,
    /// else `<timely dir>/output`.
    pub fn timely_output_dir(&self) -> PathBuf {
        self.output_dir
            .clone()
            .unwrap_or_else(|| self.timely_dir().join("output"))
    }

    /// The engine configuration of a timely run of this job with `workers` worker threads in
    /// this process: checkpoints in [`timely_checkpoint_dir`](Self::timely_checkpoint_dir),
    /// an epoch every [`checkpoint_interval`](Self::checkpoint_interval). A run across
    /// processes adds [`TimelyConfig::cluster`].
    pub fn timely_config(&self, workers: usize) -> TimelyConfig {
        TimelyConfig::new(self.timely_checkpoint_dir())
            .workers(workers)
            .checkpoint_interval(self.checkpoint_interval)
    }

    /// The arguments that start one worker process of a timely run of this job with
    /// `workers` worker threads: `streamtask timely-demo-worker` and the job options it
    /// rebuilds this job from (data, checkpoint interval, scenario, async mode, work and
    /// output directories). [`streamtask_timely::Cluster::start`] adds each process's index
    /// and the hostfile. The checkpoint interval is passed in whole milliseconds, as the
    /// command line takes it (a job for these workers has a whole number of them).
    pub fn timely_worker_args(&self, workers: usize) -> Vec<String> {
        let mut args = vec![
            "timely-demo-worker".to_string(),
            "--records".into(),
            self.data.orders.to_string(),
            "--customers".into(),
            self.data.customers.to_string(),
            "--seed".into(),
            self.data.seed.to_string(),
            "--checkpoint-interval-ms".into(),
            self.checkpoint_interval.as_millis().to_string(),
            "--scenario".into(),
            self.scenario.name().into(),
            "--async-mode".into(),
            match self.async_mode {
                OutputMode::Ordered => "ordered",
                OutputMode::Unordered => "unordered",
                OutputMode::KeyOrdered => "key-ordered",
            }
            .into(),
            "--work-dir".into(),
            self.work_dir.display().to_string(),
        ];
        if let Some(dir) = &self.output_dir {
            args.extend(["--output-dir".into(), dir.display().to_string()]);
        }
        args.extend(["--workers".into(), workers.to_string()]);
        args
    }

    /// The demo job for [`streamtask_timely::run`]: the local job's operators in the shape the
    /// [module doc](self) draws, its enrichment calls on a pool of [`ENRICH_THREADS`] threads
    /// shared by the process's workers.
    ///
    /// # Errors
    ///
    /// [`JobError::Config`] if the pool cannot start.
    pub fn timely_job(&self) -> Result<TimelyJob<String, Order>, JobError> {
        let pool = BlockingPool::new("enrich", ENRICH_THREADS, 1024)
            .map_err(|e| JobError::Config(e.to_string()))?;
        let source = LineFiles::new(vec![self.orders_file()], |line| {
            // A line that is not an order fails in the parser, which names it.
            Order::parse(line).map_or(i64::MIN, |o| o.timestamp)
        });
        let faults = Arc::clone(&self.faults);
        let parse = move || Box::new(ParseOrders::new(Arc::clone(&faults))) as BoxOperator<_, _>;
        let faults = Arc::clone(&self.faults);
        let db = self.database();
        let delay = self.scenario.enrich_delay();
        let mode = self.async_mode;
        let keyed = move || {
            let totals = KeyedProcessOperator::new(
                "totals",
                |o: &Order| o.customer,
                RunningTotals::new(Arc::clone(&faults)),
            );
            let probe = SnapshotFaults::<TotalEvent>::new(Arc::clone(&faults));
            let function = BatchedAsyncFunction::new(throttled_enrichment(
                Arc::clone(&pool),
                &db,
                Arc::clone(&faults),
                delay,
            ));
            let config = enrich_config_in(mode);
            let enrich = match mode {
                OutputMode::KeyOrdered => AsyncWaitOperator::keyed(
                    "enrich",
                    function,
                    config,
                    AsyncKey::new(DEFAULT_MAX_PARALLELISM, |e: &TotalEvent| e.customer()),
                ),
                OutputMode::Ordered | OutputMode::Unordered => {
                    AsyncWaitOperator::new("enrich", function, config)
                }
            }
            .expect("the demo's async configuration is valid");
            Box::new(Chain::new(totals, Chain::new(probe, enrich))) as BoxOperator<Order, String>
        };
        Ok(TimelyJob::new(
            "orders",
            source,
            MAX_OUT_OF_ORDER_MS,
            parse,
            |o: &Order| o.customer,
            "totals",
            keyed,
            self.timely_output_dir(),
            |line: &String| line.clone(),
        ))
    }
}
