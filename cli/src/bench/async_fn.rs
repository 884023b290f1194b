//! The keyed async-fn operator against Little's law: a [`KeyedAsyncOperatorDriver`] whose every
//! call awaits a reply that a [`Completer`] sends 1 ms after the call (a remote service), at
//! several in-flight caps. `streamtask bench`'s `async_fn_inflight_littles_law` row.

use std::time::{Duration, Instant};

use streamtask_core::operator::Discard;
use streamtask_core::task::TaskConfig;
use streamtask_core::{OperatorError, StreamElement, StreamRecord};
use streamtask_mailbox::{AsyncContext, KeyedAsyncOperator, KeyedAsyncOperatorDriver};
use streamtask_runtime::channel::{InputGate, bounded};

use super::async_io::{Completer, Delayed, rate};

/// The caps the row measures (its JSON keys).
pub const CAPS: [usize; 3] = [1, 100, 1_000];

/// Distinct keys the records cycle through: more than the largest cap, so no record waits for
/// its key and the cap alone limits the calls in flight.
pub const KEYS: u64 = 10_000;

/// Per record: asks the service, awaits its reply, counts the key's records (its state).
struct AskService(Delayed);

impl KeyedAsyncOperator for AskService {
    type Key = u64;
    type In = u64;
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "ask-service"
    }

    async fn process_element(
        &self,
        _key: &u64,
        count: &mut Option<u64>,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let (reply, replied) = tokio::sync::oneshot::channel();
        self.0.after_latency(move || {
            let _ = reply.send(());
        });
        let _ = replied.await;
        *count.get_or_insert(0) += 1;
        cx.collect(record);
        Ok(())
    }
}

/// One run: records/s and its fraction of Little's bound.
#[derive(Debug, Clone, Copy)]
pub struct InFlightRun {
    /// Records per second achieved.
    pub achieved: f64,
    /// `achieved / (cap / latency)`.
    pub of_bound: f64,
    /// The mean time from a call to its reply (the configured latency plus the completer's
    /// lateness).
    pub mean_latency: Duration,
}

/// Runs `records` records (keys cycling through [`KEYS`]) through a mailbox task running the
/// keyed async-fn operator with in-flight cap `cap`, every call awaiting a reply `latency`
/// after it; compares the rate with Little's bound `cap / latency`.
///
/// # Panics
///
/// If the task does not finish, or does not emit one record per input.
pub fn littles_law(cap: usize, latency: Duration, records: u64) -> InFlightRun {
    let completer = Completer::start(latency);
    let config = TaskConfig::new("bench-async-fn");
    let metrics = std::sync::Arc::clone(&config.metrics);
    let (tx, rx) = bounded(4096).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let operator =
        KeyedAsyncOperatorDriver::new(AskService(completer.function()), |x: &u64| x % KEYS)
            .with_max_in_flight(cap);
    let started = Instant::now();
    let producer = std::thread::spawn(move || {
        for x in 0..records {
            tx.send(StreamElement::Record(StreamRecord::new(x)))
                .unwrap();
        }
        tx.send(StreamElement::EndOfInput).unwrap();
    });
    let outcome = streamtask_mailbox::OneInputStreamTask::new(config, gate, operator, Discard)
        .spawn()
        .join();
    let elapsed = started.elapsed();
    producer.join().unwrap();
    assert!(outcome.is_finished(), "async-fn cap {cap}: {outcome}");
    assert_eq!(metrics.records_out.get(), records, "async-fn cap {cap}");
    let mean_latency = completer.mean_latency();
    drop(completer); // joins its thread
    let achieved = rate(records, elapsed);
    InFlightRun {
        achieved,
        of_bound: achieved / (cap as f64 / latency.as_secs_f64()),
        mean_latency,
    }
}
