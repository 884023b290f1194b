//! Async operators (`AsyncOperator` run by `AsyncOperatorDriver`): operators written as `async fn`s
//! that `.await` completions, processing time and yields, polled by the mailbox thread.
//!
//! Under the mailbox model: the awaited completion arrives from another thread (its waker
//! enqueues a mail at the operator's priority), a sleep is a timer mail, no input is fed while a
//! call is pending, checkpoints complete while one is, and a restore replays it exactly once.
//! Under the checkpoint-lock model the same operator is refused with a typed error naming the
//! fix (its wakes and timers arrive on other threads, where a non-`Send` future cannot be
//! polled). This answers row 9 of the audit (operators cannot yield): `yield_now().await`.
//!
//! Nothing depends on timing: processing time is a `ManualClock`, completions are oneshot
//! channels the test resolves; waits have hang guards only.

#[path = "common/slow_count.rs"]
mod slow_count;

use slow_count::SlowCount;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use streamtask_core::operator::Emitted;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamElement, StreamRecord, StreamStatus, Watermark,
    operator::Output, operator::TaskOutput, state::TaskSnapshot, task::TaskError,
    task::TaskOutcome, time::Clock, time::ManualClock,
};
use streamtask_mailbox::{AsyncContext, AsyncOperator, AsyncOperatorDriver, AsyncOperatorError};
use streamtask_runtime::channel::{InputGate, Sender, bounded};
use tokio::sync::oneshot;

/// A guard against hangs only.
const GUARD: Duration = Duration::from_secs(60);

// ---- the rig ----------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct Collected(Arc<(Mutex<Vec<Emitted<u64>>>, Condvar)>);

impl Collected {
    fn push(&self, e: Emitted<u64>) {
        self.0.0.lock().unwrap().push(e);
        self.0.1.notify_all();
    }
    fn records(&self) -> Vec<u64> {
        records(&self.0.0.lock().unwrap())
    }
    fn wait_records(&self, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + GUARD;
        let mut emitted = self.0.0.lock().unwrap();
        while records(&emitted).len() < n {
            let now = Instant::now();
            assert!(now < deadline, "waited for {n} records, have {emitted:?}");
            emitted = self.0.1.wait_timeout(emitted, deadline - now).unwrap().0;
        }
        records(&emitted)
    }
}

fn records(emitted: &[Emitted<u64>]) -> Vec<u64> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect()
}

impl Output<u64> for Collected {
    fn collect(&mut self, record: StreamRecord<u64>) -> Result<(), OperatorError> {
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

impl TaskOutput<u64> for Collected {
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
struct Calls(Arc<(Mutex<Vec<(u64, Option<oneshot::Sender<u64>>)>>, Condvar)>);

impl Calls {
    /// A call for `x`, awaited by the operator. The call is published to the test (`wait`,
    /// `resolve`) only once the operator's first poll found it pending, so a resolve always
    /// wakes the operator from the resolving thread (never completes it before it waits).
    fn register(
        &self,
        x: u64,
    ) -> impl std::future::Future<Output = Result<u64, oneshot::error::RecvError>> + use<> {
        let (tx, mut rx) = oneshot::channel();
        let calls = self.clone();
        let mut unpublished = Some(tx);
        std::future::poll_fn(move |cx| {
            let poll = std::pin::Pin::new(&mut rx).poll(cx);
            if let Some(tx) = unpublished.take() {
                calls.0.0.lock().unwrap().push((x, Some(tx)));
                calls.0.1.notify_all();
            }
            poll
        })
    }
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
    /// Resolves the latest call for `x` with `value`, from another thread (joined).
    fn resolve(&self, x: u64, value: u64) {
        let tx = {
            let mut calls = self.0.0.lock().unwrap();
            let (_, tx) = calls
                .iter_mut()
                .rev()
                .find(|(y, _)| *y == x)
                .expect("a call");
            tx.take().expect("resolved once")
        };
        std::thread::spawn(move || tx.send(value).unwrap())
            .join()
            .unwrap();
    }
}

/// Per record: awaits the test's completion for it, then sleeps 10 ms of processing time, then
/// emits `record + completion`, and counts what it emitted (its state).
struct Enrich {
    calls: Calls,
    sleep: bool,
    emitted: u64,
    /// How many calls ran at once, at most (the task must feed one at a time).
    running: Arc<Mutex<(u32, u32)>>,
}

impl Enrich {
    fn new(calls: &Calls, sleep: bool) -> Self {
        Enrich {
            calls: calls.clone(),
            sleep,
            emitted: 0,
            running: Arc::default(),
        }
    }
}

impl AsyncOperator for Enrich {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "enrich"
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.emitted = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        }
        Ok(())
    }

    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        {
            let mut running = self.running.lock().unwrap();
            running.0 += 1;
            running.1 = running.1.max(running.0);
        }
        let completion = self.calls.register(record.value).await.unwrap_or(0);
        if self.sleep {
            let due = cx.processing_time() + 10;
            cx.sleep_until(due).await?;
        }
        cx.yield_now().await; // Flink's yield(): the mails queued now run first
        self.emitted += 1;
        cx.collect(record.map(|x| x + completion));
        self.running.lock().unwrap().0 -= 1;
        Ok(())
    }

    fn snapshot_state(&mut self) -> Result<Option<Vec<u8>>, OperatorError> {
        Ok(Some(self.emitted.to_le_bytes().to_vec()))
    }
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
    output: Collected,
    clock: ManualClock,
    reports: Receiver<TaskReport>,
    handle: Handle,
}

fn start(model: Model, op: Enrich, restore: Option<TaskSnapshot>) -> Task {
    let clock = ManualClock::new(0);
    let (reports_tx, reports) = crossbeam::channel::unbounded();
    let config = TaskConfig::new("async-op")
        .with_clock(Clock::Manual(clock.clone()))
        .with_responder(CheckpointResponder::new("async-op", reports_tx))
        .with_restore(restore);
    let (input, rx) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let op = AsyncOperatorDriver::new(op);
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
        clock,
        reports,
        handle,
    }
}

impl Task {
    fn record(&self, x: u64) {
        self.input
            .send(StreamElement::Record(StreamRecord::new(x)))
            .unwrap();
    }
    fn end(&self) {
        self.input.send(StreamElement::EndOfInput).unwrap();
    }
    fn snapshot(&self, id: u64) -> TaskSnapshot {
        self.input
            .send(StreamElement::Barrier(CheckpointBarrier::new(id, 0)))
            .unwrap();
        match self
            .reports
            .recv_timeout(GUARD)
            .expect("a checkpoint report")
        {
            TaskReport::Acknowledged { snapshot, .. } => snapshot,
            declined => panic!("checkpoint {id} declined: {declined:?}"),
        }
    }
    /// Advances processing time until `n` records came out (a hang guard only).
    fn advance_until_records(&self, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + GUARD;
        loop {
            let got = self.output.records();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {n} records, have {got:?}"
            );
            self.clock.advance(1);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn join(self) -> TaskOutcome {
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
    let t = start(Model::Mailbox, Enrich::new(&calls, true), None);
    t.record(1);
    assert_eq!(calls.wait(1), vec![1]);
    calls.resolve(1, 100); // the waker, on another thread, enqueues a mail
    assert_eq!(t.advance_until_records(1), vec![101]); // then the sleep's timer mail
    t.end();
    let outcome = t.join();
    assert!(outcome.is_finished(), "{outcome}");
}

#[test]
fn a_pending_call_gets_no_new_input_and_calls_run_one_at_a_time_in_order() {
    let calls = Calls::default();
    let op = Enrich::new(&calls, false);
    let running = Arc::clone(&op.running);
    let t = start(Model::Mailbox, op, None);
    for x in 1..=5 {
        t.record(x);
    }
    for x in 1..=5 {
        // The next call is made only after this one completed.
        assert_eq!(calls.wait(x as usize), (1..=x).collect::<Vec<_>>());
        calls.resolve(x, 10);
        t.output.wait_records(x as usize);
    }
    t.end();
    assert!(t.join().is_finished());
    assert_eq!(*running.lock().unwrap(), (0, 1), "never two calls at once");
}

#[test]
fn a_checkpoint_completes_while_a_call_is_pending_and_a_restore_replays_it_exactly_once() {
    let calls = Calls::default();
    let first = start(Model::Mailbox, Enrich::new(&calls, true), None);
    first.record(1);
    first.record(2);
    calls.wait(1);
    calls.resolve(1, 10);
    first.advance_until_records(1);
    calls.wait(2); // 2 is pending: it awaits its completion
    let snapshot = first.snapshot(1); // acknowledged without waiting for it
    calls.resolve(2, 20); // completes after the barrier: not part of checkpoint 1's output
    first.advance_until_records(2);
    let before = first.output.0.0.lock().unwrap().clone();
    first.cancel();
    // Checkpoint 1's prefix of the output: what was emitted before its barrier.
    let prefix: Vec<Emitted<u64>> = before
        .iter()
        .take_while(|e| !matches!(e, Emitted::Barrier(_)))
        .cloned()
        .collect();
    assert_eq!(records(&prefix), vec![11]);

    let calls = Calls::default();
    let op = Enrich::new(&calls, true);
    let second = start(Model::Mailbox, op, Some(snapshot));
    assert_eq!(calls.wait(1), vec![2], "the pending call runs again");
    calls.resolve(2, 20);
    second.advance_until_records(1);
    second.record(3);
    calls.wait(2);
    calls.resolve(3, 30);
    let after = second.advance_until_records(2);
    second.end();
    assert!(second.join().is_finished());
    let mut all = records(&prefix);
    all.extend(after);
    assert_eq!(
        all,
        vec![11, 22, 33],
        "every record once across the restore"
    );
}

#[test]
fn under_the_checkpoint_lock_model_it_is_refused_naming_the_fix() {
    let calls = Calls::default();
    let t = start(Model::Legacy, Enrich::new(&calls, false), None);
    t.record(1);
    calls.wait(1);
    calls.resolve(1, 10); // the wake arrives on the legacy task's async-calls thread
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
            operator: "enrich".into()
        }
    );
    assert!(error.to_string().contains("mailbox model"), "{error}");
}

#[test]
fn wakes_from_other_threads_while_the_task_parks_lose_nothing() {
    // Stress: every call is completed by another thread as soon as it is made, racing the
    // mailbox thread going to sleep on an empty mailbox.
    let calls = Calls::default();
    let t = start(Model::Mailbox, Enrich::new(&calls, false), None);
    let n = 500u64;
    let feeder = {
        let input = t.input.clone();
        std::thread::spawn(move || {
            for x in 0..n {
                input
                    .send(StreamElement::Record(StreamRecord::new(x)))
                    .unwrap();
            }
        })
    };
    for x in 0..n {
        calls.wait(x as usize + 1);
        calls.resolve(x, 1);
    }
    feeder.join().unwrap();
    t.end();
    let got = t.output.wait_records(n as usize);
    assert!(t.join().is_finished());
    assert_eq!(got, (1..=n).collect::<Vec<_>>());
}

/// Keeps the waker of its first call and never completes it.
struct Stash(Arc<Mutex<Option<std::task::Waker>>>);

impl AsyncOperator for Stash {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "stash"
    }
    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let slot = Arc::clone(&self.0);
        let mut first = true;
        std::future::poll_fn(|w| {
            *slot.lock().unwrap() = Some(w.waker().clone());
            if first {
                first = false;
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await;
        cx.collect(record);
        Ok(())
    }
}

#[test]
fn a_wake_after_the_call_finished_or_after_the_task_ended_is_dropped() {
    let waker = Arc::new(Mutex::new(None));
    let clock = ManualClock::new(0);
    let config = TaskConfig::new("stash").with_clock(Clock::Manual(clock));
    let (input, rx) = bounded(8).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let task = streamtask_mailbox::OneInputStreamTask::new(
        config,
        gate,
        AsyncOperatorDriver::new(Stash(Arc::clone(&waker))),
        output.clone(),
    )
    .spawn();
    input
        .send(StreamElement::Record(StreamRecord::new(7)))
        .unwrap();
    let deadline = Instant::now() + GUARD;
    let first = loop {
        if let Some(w) = waker.lock().unwrap().clone() {
            break w;
        }
        assert!(Instant::now() < deadline, "no call");
        std::thread::sleep(Duration::from_millis(1));
    };
    first.wake_by_ref(); // completes the call
    output.wait_records(1);
    // The call finished: more wakes (twice, from another thread) find nothing to poll.
    let late = first.clone();
    std::thread::spawn(move || {
        late.wake_by_ref();
        late.wake();
    })
    .join()
    .unwrap();
    input.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    // The task ended: its mailbox refuses the wake, which is dropped.
    std::thread::spawn(move || first.wake()).join().unwrap();
    assert_eq!(output.records(), vec![7]);
}

// ---- in a job, every model ----------------------------------------------------------------------

/// Counts to `limit` (a legacy source; the mailbox model runs it through the handoff reader).
struct Count {
    limit: u64,
}

impl streamtask_legacy::SourceFunction for Count {
    type Out = u64;
    type State = u64;
    fn run(
        &mut self,
        ctx: &mut streamtask_legacy::SourceContext<'_, u64, u64>,
    ) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.limit {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Squares each record after a reply from another thread and a yield.
struct Square;

impl AsyncOperator for Square {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "square"
    }
    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let (tx, rx) = oneshot::channel();
        let x = record.value;
        let service = std::thread::spawn(move || tx.send(x * x).unwrap());
        let squared = rx.await.unwrap();
        service.join().unwrap();
        cx.yield_now().await;
        cx.collect(record.map(|_| squared));
        Ok(())
    }
}

/// Runs count -> square -> sink under `model` (with a new chain before `square` if `new_chain`).
fn square_job(model: streamtask::Model, new_chain: bool) -> Result<Vec<u64>, streamtask::JobError> {
    use streamtask::{JobConfig, Model, RestartStrategy, StreamEnvironment};
    let env = StreamEnvironment::new(model);
    let out = streamtask::sink::CollectHandle::new();
    let mut numbers = match model {
        Model::Legacy | Model::Bridge => env.add_source("count", |_| Count { limit: 50 }),
        Model::Mailbox => env.add_reader("count", |_| {
            streamtask_bridge::HandoffReader::new(Count { limit: 50 })
        }),
    };
    if new_chain {
        numbers = numbers.start_new_chain("square");
    }
    numbers
        .operator(|_| AsyncOperatorDriver::new(Square))
        .collect_sink("out", &out);
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::new(dir.path());
    config.restart = RestartStrategy::NONE;
    env.build()?.run(&config)?;
    Ok(out.committed())
}

fn error_chain(error: &dyn std::error::Error) -> String {
    std::iter::successors(Some(error), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

#[test]
fn in_a_job_it_runs_under_the_mailbox_and_bridge_models_and_is_refused_under_the_lock_model() {
    use streamtask::Model;
    let squares: Vec<u64> = (0..50).map(|x| x * x).collect();
    // Mailbox: chained behind the reader.
    assert_eq!(square_job(Model::Mailbox, false).unwrap(), squares);
    // Bridge: an operator that waits for its own events cannot run on a legacy source's
    // thread, and the bridge says so (naming start_new_chain); in a task of its own it runs,
    // as in the mailbox model.
    let refused = square_job(Model::Bridge, false).expect_err("refused behind a legacy source");
    assert!(
        error_chain(&refused).contains("start_new_chain"),
        "{}",
        error_chain(&refused)
    );
    assert_eq!(square_job(Model::Bridge, true).unwrap(), squares);
    // Legacy: wakes arrive on the task's other threads: refused, naming the mailbox model.
    for new_chain in [false, true] {
        let refused = square_job(Model::Legacy, new_chain).expect_err("refused under the lock");
        let chain = error_chain(&refused);
        assert!(chain.contains("under the mailbox model"), "{chain}");
    }
}

/// [`Square`] that fails once, while awaiting, at record 300.
struct FailingSquare(Arc<std::sync::atomic::AtomicBool>);

impl AsyncOperator for FailingSquare {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "square"
    }
    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let (tx, rx) = oneshot::channel();
        let x = record.value;
        let service = std::thread::spawn(move || tx.send(x * x).unwrap());
        let squared = rx.await.unwrap();
        service.join().unwrap();
        cx.yield_now().await;
        if x == 300 && self.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(OperatorError::User {
                operator: "square".into(),
                source: "injected failure".into(),
            });
        }
        cx.collect(record.map(|_| squared));
        Ok(())
    }
}

#[test]
fn a_job_with_an_async_operator_is_exactly_once_through_a_failure() {
    use streamtask::{
        JobConfig, Model, RestartStrategy, StreamEnvironment, checkpoint::CheckpointConfig,
    };
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = streamtask::sink::CollectHandle::new();
    let fail_once = Arc::new(std::sync::atomic::AtomicBool::new(true));
    env.add_reader("count", |_| {
        streamtask_bridge::HandoffReader::new(SlowCount { limit: 600 })
    })
    .operator(move |_| AsyncOperatorDriver::new(FailingSquare(Arc::clone(&fail_once))))
    .collect_sink("out", &out);
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::new(dir.path());
    config.checkpoint = Some(CheckpointConfig::new(Duration::from_millis(10)));
    config.restart = RestartStrategy::fixed_delay(3, Duration::from_millis(10));
    let result = env.build().unwrap().run(&config).unwrap();
    assert_eq!(result.restarts, 1, "{:?}", result.failures);
    let mut got = out.committed();
    got.sort_unstable();
    assert_eq!(got, (0..600).map(|x| x * x).collect::<Vec<u64>>());
}

// ---- the waker-to-mail path under stress --------------------------------------------------------

/// Per record: ready once `rounds` flags were raised by other threads, each raised *then*
/// woken (the lost-wakeup shape: a wake that found a mail "already queued" and was dropped
/// while no mail was queued would leave the call pending forever).
struct Flags {
    raised: Arc<std::sync::atomic::AtomicU64>,
    wakers: crossbeam::channel::Sender<std::task::Waker>,
    rounds: u64,
}

impl AsyncOperator for Flags {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "flags"
    }
    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let target = (record.value + 1) * self.rounds;
        let raised = Arc::clone(&self.raised);
        let wakers = self.wakers.clone();
        std::future::poll_fn(|w| {
            if raised.load(std::sync::atomic::Ordering::SeqCst) >= target {
                std::task::Poll::Ready(())
            } else {
                // Hand the waker to the wakers after the check: a flag raised from now on is
                // followed by a wake that must reach us.
                wakers.send(w.waker().clone()).unwrap();
                std::task::Poll::Pending
            }
        })
        .await;
        cx.collect(record);
        Ok(())
    }
}

#[test]
fn concurrent_wakes_racing_the_mailbox_thread_never_lose_the_last_one() {
    const RECORDS: u64 = 200;
    const THREADS: u64 = 4;
    let raised = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (wakers_tx, wakers_rx) = crossbeam::channel::unbounded::<std::task::Waker>();
    let config = TaskConfig::new("flags");
    let (input, rx) = bounded(256).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let task = streamtask_mailbox::OneInputStreamTask::new(
        config,
        gate,
        AsyncOperatorDriver::new(Flags {
            raised: Arc::clone(&raised),
            wakers: wakers_tx,
            rounds: THREADS,
        }),
        output.clone(),
    )
    .spawn();
    // Each record needs THREADS flags; each waker thread raises one per record it is handed a
    // waker for, then wakes every waker it holds.
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let raised = Arc::clone(&raised);
            let wakers = wakers_rx.clone();
            let output = output.clone();
            std::thread::spawn(move || {
                let mut done = 0;
                while done < RECORDS {
                    let Ok(waker) = wakers.recv_timeout(GUARD) else {
                        panic!("no waker within the guard, or the task ended early");
                    };
                    // One flag per record per thread: raise it once this record's target
                    // is not yet met by the flags raised so far.
                    let emitted = output.records().len() as u64;
                    if emitted >= RECORDS {
                        break;
                    }
                    if raised.load(std::sync::atomic::Ordering::SeqCst) < (emitted + 1) * THREADS
                        && done <= emitted
                    {
                        raised.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        done = emitted + 1;
                    }
                    waker.wake();
                }
            })
        })
        .collect();
    for x in 0..RECORDS {
        input
            .send(StreamElement::Record(StreamRecord::new(x)))
            .unwrap();
    }
    input.send(StreamElement::EndOfInput).unwrap();
    let got = output.wait_records(RECORDS as usize);
    drop(wakers_rx);
    assert!(task.join().is_finished());
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(got, (0..RECORDS).collect::<Vec<_>>());
}

#[test]
fn public_types_are_send() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<AsyncOperatorDriver<Enrich>>();
    send_sync::<AsyncOperatorError>();
    send_sync::<streamtask_runtime::TokioRuntime>();
}

// ---- awaiting a mailbox executor's submit ------------------------------------------------------

type SideExecutor = streamtask_mailbox::MailboxExecutor<u64, String>;

/// Adds each record to a running total kept by another mailbox (a side processor) and emits the
/// total: the submit's handle is `.await`ed, not waited on, so this task's mailbox thread runs
/// its other mails meanwhile.
struct AskSide(SideExecutor);

impl AsyncOperator for AskSide {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "ask-side"
    }
    async fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        cx: &mut AsyncContext<u64>,
    ) -> Result<(), OperatorError> {
        let x = record.value;
        let handle = self
            .0
            .submit("add", move |total: &mut u64| {
                *total += x;
                Ok(*total)
            })
            .unwrap_or_else(|_| panic!("the side mailbox is open"));
        let total = handle.await.expect("the side mail ran");
        cx.collect(record.map(|_| total));
        Ok(())
    }
}

#[test]
fn an_operator_awaits_a_mailbox_executors_submit() {
    use streamtask_mailbox::{Controller, Immediate, MailboxProcessor, Priority, TaskMailbox};
    let (parts_tx, parts_rx) = crossbeam::channel::bounded(1);
    let side = std::thread::spawn(move || {
        let mut processor =
            MailboxProcessor::<u64, String, _>::new(TaskMailbox::new(), Immediate::new(0));
        parts_tx
            .send((
                processor.mailbox_executor(Priority::MIN),
                processor.handle(),
            ))
            .unwrap();
        // Only mails run: the default action suspends itself.
        let mut step = |_: &mut u64, c: &mut Controller<'_>| {
            let _ = c.suspend_default_action();
            Ok(())
        };
        processor.run_mailbox_loop(&mut step)
    });
    let (executor, side_handle) = parts_rx.recv().unwrap();
    let config = TaskConfig::new("ask-side");
    let (input, rx) = bounded(16).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let task = streamtask_mailbox::OneInputStreamTask::new(
        config,
        gate,
        AsyncOperatorDriver::new(AskSide(executor)),
        output.clone(),
    )
    .spawn();
    for x in 1..=4 {
        input
            .send(StreamElement::Record(StreamRecord::new(x)))
            .unwrap();
    }
    input.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    side_handle.all_actions_completed();
    side.join().unwrap().unwrap();
    assert_eq!(output.records(), vec![1, 3, 6, 10]);
}
