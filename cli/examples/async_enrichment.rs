//! Async I/O under both threading models: a stream of order totals is enriched with customer
//! rows from an embedded SQLite database (created here, bundled with rusqlite), looked up on a
//! bounded pool of blocking workers. The async function is written once
//! (`streamtask_cli::demo::enrich::enrichment`, a `BlockingAsyncFunction`) and runs unchanged:
//!
//! - legacy: an `AsyncWaitStreamTask` headed by an `AsyncHead`; its emitter thread emits the
//!   results under the checkpoint lock, and the task waits on the lock's condition while the
//!   queue is full;
//! - mailbox: an `AsyncWaitOperator` chained into a `OneInputStreamTask`; each result comes back as a
//!   mail, and a full queue suspends the task's input (soft backpressure).
//!
//! Then the same enrichment, futures-based: a `FutureAsyncFunction` on a `TokioRuntime` the
//! example owns asks a tokio TCP customer service on 127.0.0.1 (started here, holding the same
//! rows) over pooled connections, in the same position under both models. SQLite itself stays
//! on the blocking pool (MIGRATION.md says why). All four runs must give the same lines.
//!
//! ```sh
//! cargo run --example async_enrichment
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use streamtask::Model;
use streamtask::fault::FaultPlan;
use streamtask::sink::{CollectHandle, CollectSink};
use streamtask_cli::demo::customer_service::{CustomerService, remote_enrichment};
use streamtask_cli::demo::data::TotalEvent;
use streamtask_cli::demo::enrich::{create_customer_db, enrichment};
use streamtask_core::async_io::{AsyncConfig, BlockingPool, OutputMode};
use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{Discard, OperatorExt};
use streamtask_core::task::TaskConfig;
use streamtask_core::{StreamElement, StreamRecord, task::TaskOutcome};
use streamtask_runtime::TokioRuntime;
use streamtask_runtime::channel::{InputGate, bounded};

const CUSTOMERS: u32 = 200;
const EVENTS: u64 = 2_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("customers.db");
    create_customer_db(&db, CUSTOMERS)?;
    println!("created {} with {CUSTOMERS} customers", db.display());

    let mut outputs = Vec::new();
    for model in [Model::Legacy, Model::Mailbox] {
        let started = Instant::now();
        // Four workers, each with its own read-only connection; at most 64 lookups queued.
        let pool = BlockingPool::new("sqlite", 4, 64)?;
        let function = enrichment(Arc::clone(&pool), &db, Arc::new(FaultPlan::none()));
        let (outcome, lines) = enrich(model, function)?;
        pool.shutdown(); // joins the workers
        report("sqlite", model, &outcome, &lines, started);
        outputs.push(lines);
    }
    // The futures-based form: one runtime for the run, shut down (threads joined) at its end.
    let runtime = TokioRuntime::new("enrich-io", 2)?;
    let mut service = CustomerService::start(&runtime, CUSTOMERS, Duration::ZERO)?;
    println!("customer service on {}", service.addr());
    for model in [Model::Legacy, Model::Mailbox] {
        let started = Instant::now();
        let function = remote_enrichment(Arc::clone(&runtime), service.addr());
        let (outcome, lines) = enrich(model, function)?;
        report("tokio", model, &outcome, &lines, started);
        outputs.push(lines);
    }
    service.shutdown();
    runtime.shutdown();
    // What is printed is asserted.
    for (i, lines) in outputs.iter().enumerate().skip(1) {
        assert_eq!(&outputs[0], lines, "run {i} differs from the first");
    }
    println!(
        "same enriched output, in input order, under both models, from SQLite and from the tokio \
         service: true"
    );
    Ok(())
}

fn report(client: &str, model: Model, outcome: &TaskOutcome, lines: &[String], started: Instant) {
    println!(
        "{client:<6} {model:<8} {outcome}: {} lines in {:.0?}, e.g. {:?}",
        lines.len(),
        started.elapsed(),
        lines.first().map(String::as_str).unwrap_or("-")
    );
}

/// Runs the enrichment of [`EVENTS`] order totals by `function` under `model`; returns how the
/// task ended
/// and what reached the sink.
fn enrich<F>(
    model: Model,
    function: F,
) -> Result<(TaskOutcome, Vec<String>), Box<dyn std::error::Error>>
where
    F: AsyncFunction<In = TotalEvent, Out = String>,
{
    let config = AsyncConfig::new(OutputMode::Ordered, 32).with_timeout(Duration::from_secs(10));
    let collected = CollectHandle::new();
    let sink = CollectSink::new("sink", &collected);
    let task_config = TaskConfig::new(format!("enrich-{model}"));
    let (input, rx) = bounded(256)?;
    let gate = InputGate::new(vec![rx])?;

    let task = match model {
        Model::Legacy => {
            let head = streamtask_legacy::AsyncHead::new("enrich", function, config)?;
            let task = streamtask_legacy::AsyncWaitStreamTask::chained(
                task_config,
                gate,
                head,
                sink,
                Discard,
            )?
            .spawn();
            Task::Legacy(task)
        }
        // The bridge runs tasks with inputs as the mailbox model does.
        Model::Mailbox | Model::Bridge => {
            let op = streamtask_runtime::AsyncWaitOperator::new("enrich", function, config)?;
            let chain = op.then(sink);
            Task::Mailbox(
                streamtask_mailbox::OneInputStreamTask::new(task_config, gate, chain, Discard)
                    .spawn(),
            )
        }
    };
    for order in 0..EVENTS {
        let event = TotalEvent::Running {
            order,
            customer: (order % u64::from(CUSTOMERS)) as u32 + 1,
            total_cents: (order as i64 + 1) * 250,
        };
        input.send(StreamElement::Record(StreamRecord::with_timestamp(
            event,
            order as i64,
        )))?;
    }
    input.send(StreamElement::EndOfInput)?;
    let outcome = match task {
        Task::Legacy(task) => task.join(),
        Task::Mailbox(task) => task.join(),
    };
    Ok((outcome, collected.received()))
}

enum Task {
    Legacy(streamtask_runtime::TaskHandle),
    Mailbox(streamtask_runtime::TaskHandle),
}
