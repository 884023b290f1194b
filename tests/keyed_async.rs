//! Keyed async operators (`KeyedAsyncOperator` run by `KeyedAsyncOperatorDriver`, or
//! `KeyedStream::process_async` in a job): many calls in flight on the mailbox thread, one at a
//! time per key, at most the cap held, watermarks held until the records before them completed,
//! and checkpoints that never wait for a call (the calls' inputs are snapshotted and run again).
//!
//! Nothing depends on timing: completions are oneshot channels resolved by the test or by a
//! service thread in a seeded random order; waits have hang guards only.

#[path = "common/slow_count.rs"]
mod slow_count;

use slow_count::SlowCount;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use proptest::prelude::*;
use streamtask_core::operator::Emitted;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamElement, StreamRecord, StreamStatus, Watermark,
    operator::Output, operator::TaskOutput, state::TaskSnapshot, task::TaskError, time::Clock,
    time::ManualClock,
};
use streamtask_mailbox::{
    AsyncContext, AsyncOperatorError, KeyedAsyncOperator, KeyedAsyncOperatorDriver,
};
use streamtask_runtime::channel::{InputGate, Sender, bounded};
use tokio::sync::oneshot;

/// A guard against hangs only.
const GUARD: Duration = Duration::from_secs(60);

// ---- the rig ----------------------------------------------------------------------------------

#[derive(Clone)]
struct Collected<T>(Arc<(Mutex<Vec<Emitted<T>>>, Condvar)>);

impl<T> Default for Collected<T> {
    fn default() -> Self {
        Collected(Arc::default())
    }
}

impl<T: Clone> Collected<T> {
    fn push(&self, e: Emitted<T>) {
        self.0.0.lock().unwrap().push(e);
        self.0.1.notify_all();
    }
    fn all(&self) -> Vec<Emitted<T>> {
        self.0.0.lock().unwrap().clone()
    }
    fn wait_records(&self, n: usize) -> Vec<T> {
        let deadline = Instant::now() + GUARD;
        let mut emitted = self.0.0.lock().unwrap();
        while records(&emitted).len() < n {
            let now = Instant::now();
            assert!(now < deadline, "waited for {n} records");
            emitted = self.0.1.wait_timeout(emitted, deadline - now).unwrap().0;
        }
        records(&emitted)
    }
}

fn records<T: Clone>(emitted: &[Emitted<T>]) -> Vec<T> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value.clone()),
            _ => None,
        })
        .collect()
}

impl<T: Clone + Send> Output<T> for Collected<T> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.push(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.push(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(Emitted::Status(status));
        Ok(())
    }
}

impl<T: Clone + Send> TaskOutput<T> for Collected<T> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.push(Emitted::Barrier(barrier));
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.push(Emitted::EndOfInput);
        Ok(())
    }
}

/// The calls an operator made, each waiting on a oneshot the test resolves.
#[derive(Clone, Default)]
#[allow(clippy::type_complexity)]
struct Calls(Arc<(Mutex<Vec<(u64, Option<oneshot::Sender<()>>)>>, Condvar)>);

impl Calls {
    fn register(&self, x: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.0.0.lock().unwrap().push((x, Some(tx)));
        self.0.1.notify_all();
        rx
    }
    /// Waits until `n` calls were made; their inputs, in call order.
    fn wait(&self, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + GUARD;
        let mut calls = self.0.0.lock().unwrap();
        while calls.len() < n {
            let now = Instant::now();
            assert!(now < deadline, "waited for {n} calls, have {}", calls.len());
            calls = self.0.1.wait_timeout(calls, deadline - now).unwrap().0;
        }
        calls.iter().map(|(x, _)| *x).collect()
    }
    /// Completes the latest call for `x`, from another thread (joined).
    fn resolve(&self, x: u64) {
        let tx = {
            let mut calls = self.0.0.lock().unwrap();
            let (_, tx) = calls
                .iter_mut()
                .rev()
                .find(|(y, _)| *y == x)
                .expect("a call");
            tx.take().expect("resolved once")
        };
        std::thread::spawn(move || tx.send(()).unwrap())
            .join()
            .unwrap();
    }
}

/// How many calls run at once now, and at most so far.
#[derive(Clone, Default)]
struct Concurrency(Arc<(AtomicUsize, AtomicUsize)>);

impl Concurrency {
    fn enter(&self) {
        let now = self.0.0.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.1.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.0.0.fetch_sub(1, Ordering::SeqCst);
    }
    fn max(&self) -> usize {
        self.0.1.load(Ordering::SeqCst)
    }
}

/// Keyed by `x / 100`; per record counts the key's records (its state, written *before* the
/// awaits, so a write of a call in flight would show in a snapshot that took it), yields,
/// awaits the test's completion, emits `x * 1000 + count`.
struct Counting {
    calls: Calls,
    running: Concurrency,
}

impl KeyedAsyncOperator for Counting {
    type Key = u64;
    type In = u64;
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "counting"
    }

    async fn process_element(
        &self,
        _key: &u64,
        state: &mut Option<u64>,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let count = state.unwrap_or(0) + 1;
        *state = Some(count);
        // Every call is pending at least once (its wake is a mail, whatever the test does).
        cx.yield_now().await;
        self.running.enter();
        let _ = self.calls.register(record.value).await;
        self.running.leave();
        cx.collect(record.map(|x| x * 1000 + count));
        Ok(())
    }
}

fn key_of(x: &u64) -> u64 {
    x / 100
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    Legacy,
    Mailbox,
}

enum Handle {
    Legacy(streamtask_runtime::TaskHandle),
    Mailbox(streamtask_runtime::TaskHandle),
}

struct Task {
    input: Sender<StreamElement<u64>>,
    output: Collected<u64>,
    reports: Receiver<TaskReport>,
    handle: Handle,
    metrics: Arc<streamtask_core::metrics::TaskMetrics>,
}

fn start(model: Model, op: Counting, cap: usize, restore: Option<TaskSnapshot>) -> Task {
    let (reports_tx, reports) = crossbeam::channel::unbounded();
    let config = TaskConfig::new("keyed-async")
        .with_clock(Clock::Manual(ManualClock::new(0)))
        .with_responder(CheckpointResponder::new("keyed-async", reports_tx))
        .with_restore(restore);
    let metrics = Arc::clone(&config.metrics);
    let (input, rx) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let op = KeyedAsyncOperatorDriver::new(op, key_of).with_max_in_flight(cap);
    let handle = match model {
        Model::Legacy => Handle::Legacy(
            streamtask_legacy::OneInputStreamTask::new(config, gate, op, output.clone()).spawn(),
        ),
        Model::Mailbox => Handle::Mailbox(
            streamtask_mailbox::OneInputStreamTask::new(config, gate, op, output.clone()).spawn(),
        ),
    };
    Task {
        input,
        output,
        reports,
        handle,
        metrics,
    }
}

impl Task {
    fn send(&self, e: StreamElement<u64>) {
        self.input.send(e).unwrap();
    }
    fn record(&self, x: u64) {
        self.send(StreamElement::Record(StreamRecord::new(x)));
    }
    fn snapshot(&self, id: u64) -> TaskSnapshot {
        self.send(StreamElement::Barrier(CheckpointBarrier::new(id, 0)));
        match self
            .reports
            .recv_timeout(GUARD)
            .expect("a checkpoint report")
        {
            TaskReport::Acknowledged { snapshot, .. } => snapshot,
            declined => panic!("checkpoint {id} declined: {declined:?}"),
        }
    }
    fn finish(self) -> streamtask_core::task::TaskOutcome {
        self.send(StreamElement::EndOfInput);
        self.join()
    }
    fn join(self) -> streamtask_core::task::TaskOutcome {
        let outcome = match self.handle {
            Handle::Legacy(h) => h.join(),
            Handle::Mailbox(h) => h.join(),
        };
        drop(self.input);
        outcome
    }
    fn cancel(self) {
        match self.handle {
            Handle::Legacy(h) => {
                h.cancel();
                h.join();
            }
            Handle::Mailbox(h) => {
                h.cancel();
                h.join();
            }
        }
    }
}

// ---- the suite --------------------------------------------------------------------------------

#[test]
fn smoke() {
    let calls = Calls::default();
    let t = start(
        Model::Mailbox,
        Counting {
            calls: calls.clone(),
            running: Concurrency::default(),
        },
        10,
        None,
    );
    t.record(1);
    t.record(101);
    // Two keys: both calls run at once.
    let mut made = calls.wait(2);
    made.sort_unstable();
    assert_eq!(made, vec![1, 101]);
    calls.resolve(101);
    calls.resolve(1);
    assert_eq!(t.output.wait_records(2), vec![101_001, 1_001]);
    assert!(t.finish().is_finished());
}

#[test]
fn a_record_of_a_busy_key_waits_for_the_call_before_it_and_sees_its_state() {
    let calls = Calls::default();
    let t = start(
        Model::Mailbox,
        Counting {
            calls: calls.clone(),
            running: Concurrency::default(),
        },
        10,
        None,
    );
    t.record(1);
    t.record(2); // key 0 too: waits
    t.record(101); // key 1: runs
    let made = calls.wait(2);
    assert_eq!(made, vec![1, 101], "2 waits behind 1");
    calls.resolve(1);
    assert_eq!(calls.wait(3), vec![1, 101, 2], "2 starts once 1 completed");
    calls.resolve(2);
    calls.resolve(101);
    let mut got = t.output.wait_records(3);
    got.sort_unstable();
    assert_eq!(got, vec![1_001, 2_002, 101_001], "2 saw 1's count");
    assert!(t.finish().is_finished());
}

#[test]
fn the_in_flight_cap_is_never_exceeded_and_is_reached() {
    const CAP: usize = 4;
    let calls = Calls::default();
    let running = Concurrency::default();
    let t = start(
        Model::Mailbox,
        Counting {
            calls: calls.clone(),
            running: running.clone(),
        },
        CAP,
        None,
    );
    // Twenty keys, one record each: only the cap stops them all running at once.
    for k in 0..20 {
        t.record(k * 100);
    }
    for n in 0..20 {
        // Wait until the cap is reached (or the rest of the input is in), then complete the
        // oldest call; the operator counts the calls running at once itself.
        let made = calls.wait((n + CAP).min(20));
        calls.resolve(made[n]);
    }
    t.output.wait_records(20);
    assert!(t.finish().is_finished());
    assert_eq!(
        running.max(),
        CAP,
        "at most the cap, and the cap was reached"
    );
}

#[test]
fn the_records_held_show_in_the_tasks_live_state_against_the_cap() {
    // The stalled-checkpoint report reads this as the task's async queue.
    let calls = Calls::default();
    let t = start(
        Model::Mailbox,
        Counting {
            calls: calls.clone(),
            running: Concurrency::default(),
        },
        3,
        None,
    );
    let held_reaches = |n: u32| {
        let deadline = Instant::now() + GUARD;
        loop {
            let fill = t
                .metrics
                .live
                .async_queue()
                .expect("a task with a keyed async operator");
            assert_eq!(fill.capacity, 3, "the cap");
            if fill.in_flight == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {n} records held, saw {fill:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // Key 0's second record waits behind its first; key 1's runs: three held, the cap.
    for x in [1, 2, 101] {
        t.record(x);
    }
    calls.wait(2);
    held_reaches(3);
    calls.resolve(101);
    held_reaches(2);
    calls.resolve(1);
    calls.wait(3);
    calls.resolve(2);
    t.output.wait_records(3);
    held_reaches(0);
    assert!(t.finish().is_finished());
}

#[test]
fn a_watermark_waits_for_the_records_before_it() {
    let calls = Calls::default();
    let t = start(
        Model::Mailbox,
        Counting {
            calls: calls.clone(),
            running: Concurrency::default(),
        },
        10,
        None,
    );
    t.record(1);
    t.send(StreamElement::Watermark(Watermark(10)));
    t.record(101); // after the watermark
    calls.wait(2);
    calls.resolve(101);
    t.output.wait_records(1);
    // 101 came after the watermark in the input, so the watermark was read: it waits for 1.
    assert!(
        !t.output
            .all()
            .iter()
            .any(|e| matches!(e, Emitted::Watermark(_))),
        "held while 1 runs"
    );
    calls.resolve(1);
    t.output.wait_records(2);
    let output = t.output.clone();
    assert!(t.finish().is_finished());
    let order: Vec<String> = output
        .all()
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(format!("record {}", r.value)),
            Emitted::Watermark(w) => Some(format!("watermark {}", w.0)),
            _ => None,
        })
        .collect();
    assert_eq!(
        order[..3], // then end of input's final watermark
        ["record 101001", "record 1001", "watermark 10"],
        "a record after the watermark may leave before it; one before it never after it"
    );
}

#[test]
fn a_checkpoint_completes_while_calls_are_pending_and_a_restore_reruns_them_exactly_once() {
    let calls = Calls::default();
    let op = |calls: &Calls| Counting {
        calls: calls.clone(),
        running: Concurrency::default(),
    };
    let first = start(Model::Mailbox, op(&calls), 10, None);
    first.record(1);
    first.record(101);
    first.record(2); // waits behind 1
    calls.wait(2);
    calls.resolve(1);
    first.output.wait_records(1);
    calls.wait(3); // 101 and 2 run; each wrote its key's count before awaiting
    let snapshot = first.snapshot(1); // acknowledged while both are pending
    calls.resolve(101);
    calls.resolve(2);
    first.output.wait_records(3);
    let before = first.output.all();
    first.cancel();
    // Checkpoint 1's prefix of the output: what left before its barrier.
    let prefix: Vec<Emitted<u64>> = before
        .iter()
        .take_while(|e| !matches!(e, Emitted::Barrier(_)))
        .cloned()
        .collect();
    assert_eq!(records(&prefix), vec![1_001]);

    let calls = Calls::default();
    let second = start(Model::Mailbox, op(&calls), 10, Some(snapshot));
    let mut rerun = calls.wait(2);
    rerun.sort_unstable();
    assert_eq!(rerun, vec![2, 101], "the calls in flight run again");
    calls.resolve(2);
    calls.resolve(101);
    second.output.wait_records(2);
    second.record(3);
    calls.wait(3);
    calls.resolve(3);
    let mut after = second.output.wait_records(3);
    assert!(second.finish().is_finished());
    let mut all = records(&prefix);
    all.append(&mut after);
    all.sort_unstable();
    // Key 0 counted 1, 2, 3 exactly once: the in-flight write of 2 never reached the snapshot.
    assert_eq!(all, vec![1_001, 2_002, 3_003, 101_001]);
}

#[test]
fn under_the_checkpoint_lock_model_it_is_refused_naming_the_fix() {
    let calls = Calls::default();
    let t = start(
        Model::Legacy,
        Counting {
            calls: calls.clone(),
            running: Concurrency::default(),
        },
        10,
        None,
    );
    // The call's first wake (its yield) arrives on the legacy task's async-calls thread.
    t.record(1);
    let outcome = t.join();
    let error = match outcome.failure().map(|f| &f.error) {
        Some(TaskError::Operator(OperatorError::User { source, .. })) => source
            .downcast_ref::<AsyncOperatorError>()
            .cloned()
            .unwrap_or_else(|| panic!("not an AsyncOperatorError: {source}")),
        _ => panic!("expected a typed refusal, got {outcome}"),
    };
    assert_eq!(
        error,
        AsyncOperatorError::ForeignThread {
            operator: "counting".into()
        }
    );
    assert!(error.to_string().contains("mailbox model"), "{error}");
}

// ---- per-key order under random completion order ----------------------------------------------

/// Completes every call it is handed in a seeded random order, from its own thread: it waits
/// for a few calls to gather (a bounded wait, so the schedule varies but never the result),
/// then completes a random one.
/// The calls waiting for a reply, and whether the service is told to stop.
type Pending = Mutex<(Vec<oneshot::Sender<()>>, bool)>;

struct RandomService {
    shared: Arc<(Pending, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RandomService {
    fn start(seed: u64) -> Self {
        let shared: Arc<(Pending, Condvar)> = Arc::default();
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut rng = seed | 1;
                let (lock, changed) = &*shared;
                let mut state = lock.lock().unwrap();
                loop {
                    if state.0.is_empty() {
                        if state.1 {
                            return;
                        }
                        state = changed.wait(state).unwrap();
                        continue;
                    }
                    if state.0.len() < 8 && !state.1 {
                        state = changed
                            .wait_timeout(state, Duration::from_micros(200))
                            .unwrap()
                            .0;
                    }
                    // xorshift64
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let n = state.0.len();
                    let tx = state.0.swap_remove((rng % n as u64) as usize);
                    drop(state);
                    let _ = tx.send(());
                    state = lock.lock().unwrap();
                }
            })
        };
        RandomService {
            shared,
            thread: Some(thread),
        }
    }

    fn call(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.shared.0.lock().unwrap().0.push(tx);
        self.shared.1.notify_all();
        rx
    }
}

impl Drop for RandomService {
    fn drop(&mut self) {
        self.shared.0.lock().unwrap().1 = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Input `(key, seq)`; the key's state is the last `seq` it saw; emits `(key, seq, previous)`.
struct Sequenced {
    service: Arc<RandomService>,
    running: Concurrency,
}

impl KeyedAsyncOperator for Sequenced {
    type Key = u64;
    type In = (u64, u64);
    type Out = (u64, u64, Option<u64>);
    type State = u64;

    fn name(&self) -> &str {
        "sequenced"
    }

    async fn process_element(
        &self,
        _key: &u64,
        state: &mut Option<u64>,
        record: StreamRecord<(u64, u64)>,
        cx: &mut AsyncContext<(u64, u64, Option<u64>)>,
    ) -> Result<(), OperatorError> {
        self.running.enter();
        let previous = *state; // read before the await
        let _ = self.service.call().await;
        let (key, seq) = record.value;
        *state = Some(seq); // written after it
        self.running.leave();
        cx.collect(record.map(|_| (key, seq, previous)));
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn per_key_order_holds_with_many_calls_in_flight_completing_in_random_order(
        seed in any::<u64>(),
        cap in 1usize..64,
        keys in 1u64..40,
    ) {
        const RECORDS: u64 = 1_000;
        let service = Arc::new(RandomService::start(seed));
        let running = Concurrency::default();
        let op = Sequenced { service: Arc::clone(&service), running: running.clone() };
        let (input, rx) = bounded(64).unwrap();
        let output = Collected::<(u64, u64, Option<u64>)>::default();
        let task = streamtask_mailbox::OneInputStreamTask::new(
            TaskConfig::new("sequenced"),
            InputGate::new(vec![rx]).unwrap(),
            KeyedAsyncOperatorDriver::new(op, |r: &(u64, u64)| r.0).with_max_in_flight(cap),
            output.clone(),
        ).spawn();
        // Keys in a scrambled but seeded order; seq counts each key's records.
        let mut next_seq = vec![0u64; keys as usize];
        let mut rng = seed | 1;
        for _ in 0..RECORDS {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = rng % keys;
            let seq = next_seq[key as usize];
            next_seq[key as usize] += 1;
            input.send(StreamElement::Record(StreamRecord::new((key, seq)))).unwrap();
        }
        input.send(StreamElement::EndOfInput).unwrap();
        prop_assert!(task.join().is_finished());
        drop(service);
        let got = records(&output.all());
        prop_assert_eq!(got.len() as u64, RECORDS);
        let mut per_key: BTreeMap<u64, Vec<(u64, Option<u64>)>> = BTreeMap::new();
        for (key, seq, previous) in got {
            per_key.entry(key).or_default().push((seq, previous));
        }
        for (key, seen) in per_key {
            for (i, (seq, previous)) in seen.into_iter().enumerate() {
                prop_assert_eq!(seq, i as u64, "key {} out of order", key);
                prop_assert_eq!(previous, i.checked_sub(1).map(|p| p as u64),
                    "key {} read a state its previous record had not written", key);
            }
        }
        prop_assert!(running.max() <= cap, "{} calls at once, cap {}", running.max(), cap);
        if cap > 1 && keys > 1 {
            prop_assert!(running.max() > 1, "never more than one call in flight");
        }
    }
}

// ---- in a job, every model ----------------------------------------------------------------------

/// Per record: asks a "service" thread for `x * x` and awaits it, then counts the key's
/// records (its state) and emits `(x * x, count)`; fails once, while in flight, at record 300.
struct CountSquares(Arc<std::sync::atomic::AtomicBool>);

impl KeyedAsyncOperator for CountSquares {
    type Key = u64;
    type In = u64;
    type Out = (u64, u64);
    type State = u64;

    fn name(&self) -> &str {
        "count-squares"
    }

    async fn process_element(
        &self,
        _key: &u64,
        state: &mut Option<u64>,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<(u64, u64)>,
    ) -> Result<(), OperatorError> {
        let (tx, rx) = oneshot::channel();
        let x = record.value;
        let service = std::thread::spawn(move || tx.send(x * x).unwrap());
        let squared = rx.await.unwrap();
        service.join().unwrap();
        if x == 300 && self.0.swap(false, Ordering::SeqCst) {
            return Err(OperatorError::User {
                operator: "count-squares".into(),
                source: "injected failure".into(),
            });
        }
        let count = state.unwrap_or(0) + 1;
        *state = Some(count);
        cx.collect(record.map(|_| (squared, count)));
        Ok(())
    }
}

const JOB_RECORDS: u64 = 600;
const JOB_KEYS: u64 = 7;

/// count -> key_by(x % 7) -> process_async (2 tasks, cap 16) -> sink, checkpoints every
/// 10 ms, one injected failure.
fn count_squares_job(
    model: streamtask::Model,
) -> Result<streamtask::JobResult, streamtask::JobError> {
    use streamtask::{
        JobConfig, Model, RestartStrategy, StreamEnvironment, checkpoint::CheckpointConfig,
    };
    let env = StreamEnvironment::new(model);
    let out = streamtask::sink::CollectHandle::new();
    let fail_once = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let numbers = match model {
        Model::Legacy | Model::Bridge => {
            env.add_source("count", |_| SlowCount { limit: JOB_RECORDS })
        }
        Model::Mailbox => env.add_reader("count", |_| {
            streamtask_bridge::HandoffReader::new(SlowCount { limit: JOB_RECORDS })
        }),
    };
    numbers
        .key_by(|x: &u64| x % JOB_KEYS)
        .process_async("count-squares", 2, 16, move |_| {
            CountSquares(Arc::clone(&fail_once))
        })
        .collect_sink("out", &out);
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::new(dir.path());
    config.checkpoint = Some(CheckpointConfig::new(Duration::from_millis(10)));
    config.restart = RestartStrategy::fixed_delay(3, Duration::from_millis(10));
    let result = env.build()?.run(&config)?;
    // Exactly once, and per key in input order: each key's squares, ascending, counted 1, 2, ...
    let mut got = out.committed();
    got.sort_unstable();
    let mut expected: Vec<(u64, u64)> = (0..JOB_RECORDS)
        .map(|x| (x * x, x / JOB_KEYS + 1))
        .collect();
    expected.sort_unstable();
    assert_eq!(got, expected, "{model}");
    Ok(result)
}

#[test]
fn in_a_job_it_is_exactly_once_and_in_key_order_through_a_failure_under_mailbox_and_bridge() {
    for model in [streamtask::Model::Mailbox, streamtask::Model::Bridge] {
        let result = count_squares_job(model).unwrap();
        assert_eq!(result.restarts, 1, "{model}: {:?}", result.failures);
    }
}

#[test]
fn in_a_job_under_the_lock_model_it_is_refused_when_built_naming_the_fix() {
    let refused = count_squares_job(streamtask::Model::Legacy).expect_err("refused");
    assert!(
        matches!(refused, streamtask::JobError::Unsupported { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("mailbox"), "{refused}");
}

#[test]
fn public_types_are_send() {
    fn send<T: Send>() {}
    send::<KeyedAsyncOperatorDriver<Counting, fn(&u64) -> u64>>();
}

// ---- a restore at another parallelism -----------------------------------------------------------

/// `process_async` stopped with a savepoint while calls are in flight and restored at another
/// parallelism (2 -> 3 -> 1): the keys' states and the records in flight are keyed state, so
/// each lands, by key group, on the subtask that owns its key now, and runs there before the
/// key's next records. The operator fails the job if a key's numbers arrive out of order; the
/// committed output is exactly the reference (every number once, counted in its key's order).
mod rescale {
    use std::collections::{HashMap, VecDeque};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use streamtask::prelude::*;
    use streamtask::{JobResult, SavepointHandle};
    use streamtask_core::sync::Mutex;
    use streamtask_mailbox::{AsyncContext, KeyedAsyncOperator};
    use tokio::sync::oneshot;

    /// Numbers read by the (one) sequence source, so each key's input order is ascending.
    const NUMBERS: u64 = 20_000;
    /// Keys: a number's key is `number % KEYS`.
    const KEYS: u64 = 41;
    /// Calls of every subtask held unanswered until `LAG` later calls of it were made, so at
    /// every barrier each subtask has calls in flight.
    const LAG: usize = 3;
    /// Records held per subtask at most (in flight and waiting for their key).
    const CAP: usize = 16;
    /// A hang guard only.
    const GUARD: Duration = Duration::from_secs(120);

    /// The "service": answers a subtask's call once `LAG` later calls of that subtask came
    /// (all at once when open), and asks for the savepoint at the `pull_at`-th call.
    #[derive(Default)]
    struct Service {
        open: AtomicBool,
        calls: AtomicU64,
        pull_at: Option<u64>,
        handle: SavepointHandle,
        held: Mutex<HashMap<usize, VecDeque<oneshot::Sender<()>>>>,
    }

    impl Service {
        fn call(&self, subtask: usize) -> oneshot::Receiver<()> {
            let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
            if self.pull_at == Some(calls) {
                self.handle.stop_with_savepoint();
            }
            if self.handle.is_requested() && !self.open.load(Ordering::Acquire) {
                // Slows the run down between the request and the barrier so the source cannot
                // read to its end first (a throttle; nothing is asserted on time).
                std::thread::sleep(Duration::from_millis(1));
            }
            let (tx, rx) = oneshot::channel();
            let due: Vec<oneshot::Sender<()>> = {
                let mut held = self.held.lock();
                if self.open.load(Ordering::Acquire) {
                    vec![tx]
                } else {
                    let mine = held.entry(subtask).or_default();
                    mine.push_back(tx);
                    let over = mine.len().saturating_sub(LAG);
                    mine.drain(..over).collect()
                }
            };
            for tx in due {
                let _ = tx.send(());
            }
            rx
        }

        /// Answers every held call and holds no more.
        fn release(&self) {
            self.open.store(true, Ordering::Release);
            let held: Vec<_> = self.held.lock().drain().flat_map(|(_, q)| q).collect();
            for tx in held {
                let _ = tx.send(());
            }
        }
    }

    /// Awaits the service, then counts its key's numbers: `key,count`. Its state is
    /// `(count, next)`: a number below `next` came after a larger one of its key.
    struct CountInOrder {
        subtask: usize,
        service: Arc<Service>,
    }

    impl KeyedAsyncOperator for CountInOrder {
        type Key = u64;
        type In = u64;
        type Out = String;
        type State = (u64, u64);

        fn name(&self) -> &str {
            "count-in-order"
        }

        async fn process_element(
            &self,
            key: &u64,
            state: &mut Option<(u64, u64)>,
            record: StreamRecord<u64>,
            cx: &mut AsyncContext<String>,
        ) -> Result<(), OperatorError> {
            // An answer lost with a run that ended is as good as one given: that run's output
            // after its savepoint is not committed.
            let _ = self.service.call(self.subtask).await;
            let (count, next) = state.unwrap_or((0, 0));
            let value = record.value;
            if value < next {
                return Err(OperatorError::user(
                    "count-in-order",
                    format!("key {key} got {value} after {}", next - 1),
                ));
            }
            *state = Some((count + 1, value + 1));
            cx.collect(record.map(|_| format!("{key},{}", count + 1)));
            Ok(())
        }
    }

    /// What an uninterrupted run commits, sorted.
    fn reference() -> Vec<String> {
        let mut out: Vec<String> = (0..KEYS)
            .flat_map(|key| {
                let n = (0..NUMBERS).filter(|v| v % KEYS == key).count() as u64;
                (1..=n).map(move |count| format!("{key},{count}"))
            })
            .collect();
        out.sort_unstable();
        out
    }

    fn committed(work: &Path) -> Vec<String> {
        let mut lines = streamtask::sink::read_committed(work.join("output")).unwrap();
        lines.sort_unstable();
        lines
    }

    /// numbers (1 source) -> key_by(% KEYS) -> process_async at `parallelism` -> sink; with
    /// `pull_at`, stops with a savepoint at that call, calls in flight (released once the
    /// savepoint is written).
    fn run(
        model: Model,
        work: &Path,
        parallelism: usize,
        pull_at: Option<u64>,
        restore: Restore,
    ) -> JobResult {
        let handle = SavepointHandle::new();
        let service = Arc::new(Service {
            pull_at,
            handle: handle.clone(),
            ..Service::default()
        });
        if pull_at.is_none() {
            service.release();
        }
        let env = StreamEnvironment::new(model);
        let for_calls = Arc::clone(&service);
        env.from_sequence_parallel("numbers", 0..NUMBERS, 1)
            .key_by(|v: &u64| *v % KEYS)
            .process_async("counts", parallelism, CAP, move |subtask| CountInOrder {
                subtask,
                service: Arc::clone(&for_calls),
            })
            .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
        let job = env.build().unwrap();
        let config = JobConfig::new(work)
            .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(20))))
            .with_restore(restore)
            .with_stop_with_savepoint(
                StopWithSavepoint::new(work.join("savepoints")).with_handle(handle.clone()),
            );
        let opener = pull_at.map(|_| {
            let service = Arc::clone(&service);
            let handle = handle.clone();
            std::thread::spawn(move || {
                let written = handle.wait_written(GUARD);
                service.release();
                written
            })
        });
        let result = job.run(&config).unwrap();
        if let Some(opener) = opener {
            assert_eq!(opener.join().unwrap(), result.savepoint);
        }
        service.release();
        result
    }

    fn rescale(model: Model) {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path();
        let first = run(model, work, 2, Some(3_000), Restore::Fresh);
        let first_savepoint: PathBuf = first.savepoint.expect("the first run stops");
        let after_first = committed(work).len();
        assert!(
            after_first < NUMBERS as usize,
            "{model}: stopped before the end"
        );
        let second = run(
            model,
            work,
            3,
            Some(6_000),
            Restore::Savepoint(first_savepoint),
        );
        let second_savepoint = second.savepoint.expect("the second run stops");
        assert!(committed(work).len() >= after_first, "{model}");
        let third = run(model, work, 1, None, Restore::Savepoint(second_savepoint));
        assert!(
            third.savepoint.is_none(),
            "{model}: the last run runs to its end"
        );
        assert_eq!(committed(work), reference(), "{model}");
    }

    #[test]
    fn a_restore_at_another_parallelism_keeps_each_keys_order_and_is_exactly_once() {
        for model in [Model::Mailbox, Model::Bridge] {
            rescale(model);
        }
    }
}
