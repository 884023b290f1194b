//! Async I/O: one behaviour suite, run against both models through a thin adapter per model
//! (legacy: an `AsyncWaitStreamTask` headed by an `AsyncHead`, with its emitter thread; mailbox:
//! an `AsyncWaitOperator` in a `OneInputStreamTask`).
//!
//! The behaviours are Flink's `AsyncWaitOperatorTest` and element-queue tests: ordered and
//! unordered, event and processing time, timeouts failing and ignored, user exceptions, restore
//! with more elements than the capacity, end of input, retries on results and on errors, first
//! completion wins. Calls are completed by the test through a `ManualAsyncFunction`, processing
//! time is a `ManualClock`; nothing depends on timing (waits have hang guards only).
//!
//! Completions of one operator are applied in the order they were delivered in both models (one
//! mailbox FIFO at the operator's priority; one emitter channel). Where a test must know that a
//! completion was applied before it moves the clock, it completes a second record of an
//! unordered queue afterwards (a *probe*) and waits for the probe's result.
//!
//! The last part runs the same behaviours with a `FutureAsyncFunction` on a `TokioRuntime` the
//! test owns (its futures await oneshot channels the test resolves, or complete at once), so the
//! futures-based function is shown to go through the same engine in both models.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use streamtask_core::async_io::{
    AsyncBatchFunction, AsyncConfig, AsyncConfigError, AsyncKey, BatchConfig, BatchResultFuture,
    BatchedAsyncFunction, OutputMode, RetryPolicy,
};
use streamtask_core::function::{AsyncError, AsyncFunction};
use streamtask_core::operator::Emitted;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::testing::{ManualAsyncFunction, ManualCalls};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamElement, StreamRecord, StreamStatus, Watermark,
    operator::Output, operator::TaskOutput, state::TaskSnapshot, task::TaskError,
    task::TaskOutcome, time::Clock, time::ManualClock,
};
use streamtask_runtime::channel::{InputGate, Sender, bounded};
use streamtask_runtime::{FutureAsyncFunction, TokioRuntime};

/// A guard against hangs only.
const GUARD: Duration = Duration::from_secs(60);

// ---- the adapter ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    Legacy,
    Mailbox,
}

const MODELS: [Model; 2] = [Model::Legacy, Model::Mailbox];

enum Handle {
    Legacy(streamtask_runtime::TaskHandle),
    Mailbox(streamtask_runtime::TaskHandle),
}

/// A task output the test reads while the task runs.
#[derive(Clone, Default)]
struct Collected(Arc<(Mutex<Vec<Emitted<u64>>>, Condvar)>);

impl Collected {
    fn push(&self, e: Emitted<u64>) {
        self.0.0.lock().unwrap().push(e);
        self.0.1.notify_all();
    }

    fn all(&self) -> Vec<Emitted<u64>> {
        self.0.0.lock().unwrap().clone()
    }

    fn wait_len(&self, n: usize) -> Vec<Emitted<u64>> {
        let deadline = Instant::now() + GUARD;
        let mut emitted = self.0.0.lock().unwrap();
        while emitted.len() < n {
            let now = Instant::now();
            assert!(now < deadline, "waited for {n} outputs, have {emitted:?}");
            emitted = self.0.1.wait_timeout(emitted, deadline - now).unwrap().0;
        }
        emitted.clone()
    }
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

/// An async operator running in a task of one model, fed and read by the test.
struct AsyncTask {
    input: Sender<StreamElement<u64>>,
    output: Collected,
    calls: ManualCalls<u64, u64>,
    clock: ManualClock,
    reports: Receiver<TaskReport>,
    handle: Handle,
}

fn start(model: Model, config: AsyncConfig<u64>) -> AsyncTask {
    start_with(model, config, ManualAsyncFunction::new(), None)
}

/// Emits `END_MARK` from its `end_input`, so the output shows when its input ended.
struct EndMarker;

const END_MARK: u64 = u64::MAX;

impl streamtask_core::operator::Operator for EndMarker {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "end-marker"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }

    fn end_input(
        &mut self,
        ctx: &mut streamtask_core::operator::Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(StreamRecord::new(END_MARK))
    }
}

/// An async operator followed by an [`EndMarker`] in the same task.
fn start_followed(model: Model, config: AsyncConfig<u64>) -> AsyncTask {
    let function = ManualAsyncFunction::new();
    let calls = function.calls();
    let clock = ManualClock::new(0);
    let (reports_tx, reports) = crossbeam::channel::unbounded();
    let task_config = TaskConfig::new("async")
        .with_clock(Clock::Manual(clock.clone()))
        .with_responder(CheckpointResponder::new("async", reports_tx));
    let (input, rx) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let handle = match model {
        Model::Legacy => {
            let head = streamtask_legacy::AsyncHead::new("async", function, config).unwrap();
            Handle::Legacy(
                streamtask_legacy::AsyncWaitStreamTask::chained(
                    task_config,
                    gate,
                    head,
                    EndMarker,
                    output.clone(),
                )
                .unwrap()
                .spawn(),
            )
        }
        Model::Mailbox => {
            let op = streamtask_runtime::AsyncWaitOperator::new("async", function, config).unwrap();
            Handle::Mailbox(
                streamtask_mailbox::OneInputStreamTask::new(
                    task_config,
                    gate,
                    streamtask_core::operator::Chain::new(op, EndMarker),
                    output.clone(),
                )
                .spawn(),
            )
        }
    };
    AsyncTask {
        input,
        output,
        calls,
        clock,
        reports,
        handle,
    }
}

fn start_with(
    model: Model,
    config: AsyncConfig<u64>,
    function: ManualAsyncFunction<u64, u64>,
    restore: Option<TaskSnapshot>,
) -> AsyncTask {
    let calls = function.calls();
    AsyncTask {
        calls,
        ..start_function(model, config, function, restore)
    }
}

/// An async operator running any `function` (its `calls` are unused unless the function is a
/// `ManualAsyncFunction`: see [`start_with`]).
fn start_function<F>(
    model: Model,
    config: AsyncConfig<u64>,
    function: F,
    restore: Option<TaskSnapshot>,
) -> AsyncTask
where
    F: AsyncFunction<In = u64, Out = u64>,
{
    start_function_inline(model, config, function, restore, true)
}

/// [`start_function`], with the operator's inline completions on or off (on by default: a
/// completion made inside the call is applied when it returns; off, it takes the model's
/// route, a completion mail or the legacy emitter's inbox).
fn start_function_inline<F>(
    model: Model,
    config: AsyncConfig<u64>,
    function: F,
    restore: Option<TaskSnapshot>,
    inline: bool,
) -> AsyncTask
where
    F: AsyncFunction<In = u64, Out = u64>,
{
    start_any(model, config, function, restore, inline, None)
}

/// The key of the key-ordered tests: a record's last digit.
fn last_digit() -> AsyncKey<u64> {
    AsyncKey::new(128, |v: &u64| v % 10)
}

/// A key-ordered async operator (capacity `capacity`, keys: last digits) with a manual function.
fn start_key_ordered(
    model: Model,
    config: AsyncConfig<u64>,
    function: ManualAsyncFunction<u64, u64>,
    restore: Option<TaskSnapshot>,
) -> AsyncTask {
    let calls = function.calls();
    AsyncTask {
        calls,
        ..start_any(model, config, function, restore, true, Some(last_digit()))
    }
}

/// Any async operator: `key` makes it keyed (see `AsyncWaitOperator::keyed`).
fn start_any<F>(
    model: Model,
    config: AsyncConfig<u64>,
    function: F,
    restore: Option<TaskSnapshot>,
    inline: bool,
    key: Option<AsyncKey<u64>>,
) -> AsyncTask
where
    F: AsyncFunction<In = u64, Out = u64>,
{
    let clock = ManualClock::new(0);
    let (reports_tx, reports) = crossbeam::channel::unbounded();
    let task_config = TaskConfig::new("async")
        .with_clock(Clock::Manual(clock.clone()))
        .with_responder(CheckpointResponder::new("async", reports_tx))
        .with_restore(restore);
    let (input, rx) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = Collected::default();
    let handle = match model {
        Model::Legacy => {
            let head = match key {
                Some(key) => streamtask_legacy::AsyncHead::keyed("async", function, config, key),
                None => streamtask_legacy::AsyncHead::new("async", function, config),
            }
            .unwrap()
            .with_inline_completions(inline);
            Handle::Legacy(
                streamtask_legacy::AsyncWaitStreamTask::new(
                    task_config,
                    gate,
                    head,
                    output.clone(),
                )
                .spawn(),
            )
        }
        Model::Mailbox => {
            let op = match key {
                Some(key) => {
                    streamtask_runtime::AsyncWaitOperator::keyed("async", function, config, key)
                }
                None => streamtask_runtime::AsyncWaitOperator::new("async", function, config),
            }
            .unwrap()
            .with_inline_completions(inline);
            Handle::Mailbox(
                streamtask_mailbox::OneInputStreamTask::new(task_config, gate, op, output.clone())
                    .spawn(),
            )
        }
    };
    AsyncTask {
        input,
        output,
        calls: ManualAsyncFunction::new().calls(),
        clock,
        reports,
        handle,
    }
}

impl AsyncTask {
    fn send(&self, element: StreamElement<u64>) {
        self.input.send(element).unwrap();
    }

    fn record(&self, value: u64, timestamp: i64) {
        self.send(StreamElement::Record(StreamRecord::with_timestamp(
            value, timestamp,
        )));
    }

    fn plain(&self, value: u64) {
        self.send(StreamElement::Record(StreamRecord::new(value)));
    }

    fn watermark(&self, timestamp: i64) {
        self.send(StreamElement::Watermark(Watermark(timestamp)));
    }

    fn end(&self) {
        self.send(StreamElement::EndOfInput);
    }

    /// Completes the latest call for `input`; it must win.
    fn complete(&self, input: u64, values: Vec<u64>) {
        assert!(
            self.calls.complete(&input, values),
            "the call for {input} was completed before"
        );
    }

    /// Waits until `n` calls were made; returns their inputs, in call order.
    fn invoked(&self, n: usize) -> Vec<u64> {
        self.calls
            .wait_for_invocations(n)
            .into_iter()
            .map(|c| c.input)
            .collect()
    }

    /// Advances processing time by `millis`.
    fn advance(&self, millis: i64) {
        self.clock.advance(millis);
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

    /// Waits for the task to end. The input stays open until then, so a task that fails does
    /// so for its own reason, not because its input closed.
    fn join(self) -> (TaskOutcome, Vec<Emitted<u64>>) {
        let outcome = match self.handle {
            Handle::Legacy(h) => h.join(),
            Handle::Mailbox(h) => h.join(),
        };
        drop(self.input);
        (outcome, self.output.all())
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

fn rec(value: u64, timestamp: i64) -> Emitted<u64> {
    Emitted::Record(StreamRecord::with_timestamp(value, timestamp))
}

fn plain(value: u64) -> Emitted<u64> {
    Emitted::Record(StreamRecord::new(value))
}

fn wm(timestamp: i64) -> Emitted<u64> {
    Emitted::Watermark(Watermark(timestamp))
}

/// A finished task's output without the end-of-input tail every finished task has (the
/// gate's final `Watermark::MAX`, then end of input).
fn finished(
    model: Model,
    (outcome, emitted): (TaskOutcome, Vec<Emitted<u64>>),
) -> Vec<Emitted<u64>> {
    assert!(outcome.is_finished(), "{model:?}: {outcome}");
    let n = emitted.len();
    assert!(n >= 2, "{model:?}: {emitted:?}");
    assert_eq!(
        emitted[n - 2..],
        [Emitted::Watermark(Watermark::MAX), Emitted::EndOfInput],
        "{model:?}"
    );
    emitted[..n - 2].to_vec()
}

/// The message of a task's async failure.
fn async_failure(model: Model, outcome: &TaskOutcome) -> String {
    match outcome.failure().map(|f| &f.error) {
        Some(TaskError::Operator(error @ OperatorError::Async { operator, .. })) => {
            assert_eq!(operator, "async", "{model:?}");
            error.to_string()
        }
        _ => panic!("{model:?}: expected an async failure, got {outcome}"),
    }
}

fn ordered(capacity: usize) -> AsyncConfig<u64> {
    AsyncConfig::new(OutputMode::Ordered, capacity)
}

fn unordered(capacity: usize) -> AsyncConfig<u64> {
    AsyncConfig::new(OutputMode::Unordered, capacity)
}

// ---- the suite --------------------------------------------------------------------------------

#[test]
fn smoke() {
    for model in MODELS {
        let t = start(model, ordered(4));
        t.record(1, 10);
        t.record(2, 20);
        assert_eq!(t.invoked(2), vec![1, 2]);
        t.complete(1, vec![100]);
        t.complete(2, vec![200]);
        t.end();
        assert_eq!(finished(model, t.join()), vec![rec(100, 10), rec(200, 20)]);
    }
}

/// Answers every call inside it, on the task thread: ten times its input.
struct AnswerAtOnce;

impl AsyncFunction for AnswerAtOnce {
    type In = u64;
    type Out = u64;
    fn invoke(&mut self, input: &u64, result: streamtask_core::function::ResultFuture<u64>) {
        result.complete(vec![input * 10]);
    }
}

/// With inline completions off, a completion made inside the call takes the model's route (a
/// mail; the legacy emitter's inbox, which the task thread applies itself before it waits, its
/// own completions waking no emitter). Every result still goes out, in input order: while the
/// queue is full, once the task waits for input (the five results are awaited before anything
/// else is sent: a completion left behind would hang here), and around a barrier, which finds
/// nothing in flight after them and comes out between the results before and after it.
#[test]
fn completions_made_inside_the_call_go_out_by_the_models_route_without_inline_completions() {
    for model in MODELS {
        for config in [ordered, unordered] {
            let t = start_function_inline(model, config(2), AnswerAtOnce, None, false);
            for x in 1..=5 {
                t.plain(x);
            }
            let first: Vec<_> = (1..=5).map(|x| plain(x * 10)).collect();
            assert_eq!(t.output.wait_len(5), first, "{model:?}");
            let snapshot = t.snapshot(1);
            let restored =
                start_function_inline(model, config(2), AnswerAtOnce, Some(snapshot), false);
            restored.end();
            assert_eq!(
                finished(model, restored.join()),
                vec![],
                "{model:?}: nothing in flight"
            );
            for x in 6..=8 {
                t.plain(x);
            }
            t.end();
            let mut expected = first;
            expected.push(Emitted::Barrier(CheckpointBarrier::new(1, 0)));
            expected.extend((6..=8).map(|x| plain(x * 10)));
            assert_eq!(finished(model, t.join()), expected, "{model:?}");
        }
    }
}

#[test]
fn ordered_event_time_keeps_records_and_watermarks_in_input_order() {
    // Flink's testEventTimeOrdered: completion order does not matter.
    for model in MODELS {
        let t = start(model, ordered(10));
        t.record(1, 1);
        t.record(2, 2);
        t.watermark(2);
        t.record(3, 3);
        t.watermark(3);
        assert_eq!(t.invoked(3), vec![1, 2, 3]);
        t.complete(3, vec![3]);
        t.complete(2, vec![2]);
        t.complete(1, vec![1]);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![rec(1, 1), rec(2, 2), wm(2), rec(3, 3), wm(3)]
        );
    }
}

#[test]
fn unordered_event_time_reorders_only_between_watermarks() {
    // Flink's testEventTimeUnordered and UnorderedStreamElementQueueTest#testCompletionOrder.
    for model in MODELS {
        let t = start(model, unordered(10));
        t.record(1, 1);
        t.record(2, 2);
        t.watermark(2);
        t.record(3, 3);
        t.record(4, 4);
        t.watermark(4);
        t.record(5, 5);
        assert_eq!(t.invoked(5), vec![1, 2, 3, 4, 5]);
        t.complete(2, vec![2]);
        // The first segment leaves in completion order.
        assert_eq!(t.output.wait_len(1), vec![rec(2, 2)]);
        // Later segments wait for the first one (and its watermark) ...
        t.complete(4, vec![4]);
        t.complete(3, vec![3]);
        t.complete(5, vec![5]);
        t.complete(1, vec![1]);
        t.end();
        // ... and then leave in their own completion order.
        assert_eq!(
            finished(model, t.join()),
            vec![
                rec(2, 2),
                rec(1, 1),
                wm(2),
                rec(4, 4),
                rec(3, 3),
                wm(4),
                rec(5, 5)
            ]
        );
    }
}

#[test]
fn ordered_processing_time_emits_in_input_order_without_timestamps() {
    for model in MODELS {
        let t = start(model, ordered(10));
        for x in 1..=5 {
            t.plain(x);
        }
        assert_eq!(t.invoked(5), vec![1, 2, 3, 4, 5]);
        for x in (1..=5).rev() {
            t.complete(x, vec![x * 10]);
        }
        t.end();
        assert_eq!(
            finished(model, t.join()),
            (1..=5).map(|x| plain(x * 10)).collect::<Vec<_>>()
        );
    }
}

#[test]
fn unordered_processing_time_emits_in_completion_order() {
    for model in MODELS {
        let t = start(model, unordered(10));
        for x in 1..=3 {
            t.plain(x);
        }
        t.invoked(3);
        t.complete(3, vec![30]);
        t.output.wait_len(1);
        t.complete(1, vec![10]);
        t.output.wait_len(2);
        t.complete(2, vec![20]);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![plain(30), plain(10), plain(20)]
        );
    }
}

#[test]
fn every_result_of_a_record_carries_its_timestamp_and_empty_results_emit_nothing() {
    for model in MODELS {
        let t = start(model, ordered(10));
        t.record(1, 7);
        t.record(2, 8);
        t.record(3, 9);
        t.invoked(3);
        t.complete(1, vec![10, 11, 12]);
        t.complete(2, vec![]);
        t.complete(3, vec![30]);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![rec(10, 7), rec(11, 7), rec(12, 7), rec(30, 9)]
        );
    }
}

#[test]
fn first_completion_wins() {
    for model in MODELS {
        let t = start(model, ordered(10));
        t.record(1, 1);
        let call = t.calls.wait_for_invocations(1).remove(0);
        assert!(call.result.complete(vec![1]));
        assert!(
            !call.result.complete(vec![2]),
            "a second completion is ignored"
        );
        assert!(
            !call
                .result
                .complete_exceptionally(AsyncError::failed("late")),
            "so is a late failure"
        );
        t.end();
        assert_eq!(finished(model, t.join()), vec![rec(1, 1)]);
    }
}

#[test]
fn a_user_exception_fails_the_task_naming_the_input() {
    // Flink's test(Un)OrderedWaitUserExceptionHandling.
    for model in MODELS {
        for config in [ordered(10), unordered(10)] {
            let t = start(model, config);
            t.record(42, 5);
            t.invoked(1);
            assert!(t.calls.fail(&42, AsyncError::failed("the service is down")));
            let (outcome, _) = t.join();
            let message = async_failure(model, &outcome);
            assert!(message.contains("42"), "{model:?}: {message}");
            assert!(message.contains("timestamp 5"), "{model:?}: {message}");
            assert!(
                message.contains("the service is down"),
                "{model:?}: {message}"
            );
        }
    }
}

#[test]
fn a_timeout_fails_the_task_by_default() {
    // Flink's testAsyncTimeoutFailure.
    for model in MODELS {
        let t = start(model, ordered(10).with_timeout(Duration::from_millis(10)));
        t.record(7, 1);
        t.invoked(1);
        t.advance(11);
        let (outcome, emitted) = t.join();
        let message = async_failure(model, &outcome);
        assert!(message.contains("timed out"), "{model:?}: {message}");
        assert!(message.contains('7'), "{model:?}: {message}");
        assert!(
            !emitted.iter().any(|e| matches!(e, Emitted::Record(_))),
            "{model:?}: {emitted:?}"
        );
    }
}

#[test]
fn a_timeout_hook_may_complete_with_a_fallback() {
    // Flink's testAsyncTimeoutIgnore (FLINK-7789).
    for model in MODELS {
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u64| vec![x + 1000]);
        let t = start_with(
            model,
            ordered(10).with_timeout(Duration::from_millis(10)),
            function,
            None,
        );
        t.record(1, 1);
        t.record(2, 2);
        t.invoked(2);
        t.complete(2, vec![2]);
        t.advance(11);
        // Record 1 times out and falls back; its late real result loses.
        assert_eq!(t.output.wait_len(2), vec![rec(1001, 1), rec(2, 2)]);
        assert!(!t.calls.complete(&1, vec![1]));
        assert_eq!(t.calls.timeouts().len(), 1, "{model:?}");
        t.end();
        assert_eq!(finished(model, t.join()), vec![rec(1001, 1), rec(2, 2)]);
    }
}

#[test]
fn a_timeout_for_an_emitted_element_does_nothing() {
    // FLINK-22573 (the timer is cancelled when the result arrives).
    for model in MODELS {
        let t = start(model, ordered(10).with_timeout(Duration::from_millis(10)));
        t.record(1, 1);
        t.invoked(1);
        t.complete(1, vec![1]);
        t.output.wait_len(1);
        t.advance(100);
        t.end();
        let calls = t.calls.clone();
        assert_eq!(finished(model, t.join()), vec![rec(1, 1)]);
        assert!(calls.timeouts().is_empty(), "{model:?}");
    }
}

#[test]
fn end_of_input_waits_for_in_flight_elements() {
    // Flink's testEndInput (FLINK-13491).
    for model in MODELS {
        for config in [ordered(10), unordered(10)] {
            let t = start(model, config);
            t.record(1, 1);
            t.record(2, 2);
            t.end();
            t.invoked(2);
            t.complete(2, vec![2]);
            t.complete(1, vec![1]);
            let out = finished(model, t.join());
            assert_eq!(out.len(), 2, "{model:?}: {out:?}");
            assert!(out.contains(&rec(1, 1)) && out.contains(&rec(2, 2)));
        }
    }
}

#[test]
fn operators_behind_the_async_operator_end_their_input_after_its_last_result() {
    // FLINK-13491: the async operator drains before the next operator's end_input.
    for model in MODELS {
        let t = start_followed(model, ordered(10));
        t.record(1, 1);
        t.record(2, 2);
        t.end();
        t.invoked(2);
        t.complete(1, vec![10]);
        t.complete(2, vec![20]);
        let (outcome, out) = t.join();
        assert!(outcome.is_finished(), "{model:?}: {outcome}");
        let values: Vec<u64> = out
            .iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect();
        assert_eq!(values, vec![10, 20, END_MARK], "{model:?}");
    }
}

#[test]
fn restore_re_invokes_more_elements_than_the_capacity_in_queue_order() {
    // FLINK-7949: the snapshot holds 7 records and a watermark; the restored operator has room
    // for 3 and must still replay them all.
    for model in MODELS {
        let first = start(model, ordered(10));
        for x in 1..=4 {
            first.record(x, x as i64);
        }
        first.watermark(4);
        for x in 5..=7 {
            first.record(x, x as i64);
        }
        first.invoked(7);
        first.complete(2, vec![20]); // completed but not emitted: still in the snapshot
        let snapshot = first.snapshot(1);
        first.cancel();

        let second = start_with(
            model,
            ordered(3),
            ManualAsyncFunction::new(),
            Some(snapshot),
        );
        let mut completed = 0;
        while completed < 7 {
            let inputs = second.invoked(completed + 1);
            for &x in &inputs[completed..] {
                second.complete(x, vec![x * 10]);
                completed += 1;
            }
        }
        assert_eq!(second.invoked(7), vec![1, 2, 3, 4, 5, 6, 7]);
        second.end();
        assert_eq!(
            finished(model, second.join()),
            vec![
                rec(10, 1),
                rec(20, 2),
                rec(30, 3),
                rec(40, 4),
                wm(4),
                rec(50, 5),
                rec(60, 6),
                rec(70, 7)
            ]
        );
    }
}

/// The record inputs the async operator (the task's first operator) saved in `snapshot`, in
/// queue order.
fn saved_records(snapshot: &TaskSnapshot) -> Vec<u64> {
    let bytes = snapshot
        .get(&TaskSnapshot::operator_key(0))
        .unwrap_or_else(|| panic!("no async state in {snapshot:?}"));
    let saved: streamtask_core::keygroup::ListState<streamtask_runtime::QueuedInput<u64>> =
        streamtask_core::state::decode(bytes).unwrap();
    saved
        .items
        .into_iter()
        .filter_map(|q| match q {
            streamtask_runtime::QueuedInput::Record(r) => Some(r.value),
            streamtask_runtime::QueuedInput::Watermark(_) => None,
        })
        .collect()
}

/// Soft backpressure (FLINK-39835): a full queue makes the operator unavailable before the task
/// takes the next element, so the operator never holds more than its capacity. Records 3 and 4
/// wait in the input while 1 and 2 fill the queue, and each is taken only as a completion frees
/// a slot; the barrier behind them is read once 4 was taken, and its snapshot holds exactly the
/// two calls in flight, not a third held for room. A barrier right behind the full queue is
/// snapshotted before any completion, and the restored operator replays exactly the calls in
/// flight, once.
#[test]
fn a_full_queue_takes_no_element_past_its_capacity_and_its_snapshot_holds_the_calls_in_flight() {
    for model in MODELS {
        let t = start(model, ordered(2));
        for x in 1..=4 {
            t.record(x, x as i64);
        }
        t.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0)));
        assert_eq!(t.invoked(2), vec![1, 2], "{model:?}");
        t.complete(1, vec![10]);
        assert_eq!(
            t.invoked(3),
            vec![1, 2, 3],
            "{model:?}: 3 takes the freed slot"
        );
        t.complete(2, vec![20]);
        assert_eq!(t.invoked(4), vec![1, 2, 3, 4], "{model:?}");
        let first = match t.reports.recv_timeout(GUARD).expect("a checkpoint report") {
            TaskReport::Acknowledged {
                checkpoint: 1,
                snapshot,
                ..
            } => snapshot,
            other => panic!("{model:?}: expected the ack of checkpoint 1, got {other:?}"),
        };
        assert_eq!(
            saved_records(&first),
            vec![3, 4],
            "{model:?}: exactly the capacity's calls in flight"
        );
        let out = t.output.wait_len(3);
        assert_eq!(
            out,
            vec![
                rec(10, 1),
                rec(20, 2),
                Emitted::Barrier(CheckpointBarrier::new(1, 0))
            ],
            "{model:?}: what left before the barrier"
        );
        // Full, with nothing behind: the next barrier flows at once.
        let second = t.snapshot(2);
        assert_eq!(saved_records(&second), vec![3, 4], "{model:?}");
        assert_eq!(
            t.calls.invocation_count(),
            4,
            "{model:?}: nothing completed"
        );
        t.cancel();

        // Restored from checkpoint 1: 3 and 4 are called again, once each.
        let restored = start_with(model, ordered(2), ManualAsyncFunction::new(), Some(first));
        assert_eq!(restored.invoked(2), vec![3, 4], "{model:?}");
        restored.complete(3, vec![30]);
        restored.complete(4, vec![40]);
        restored.end();
        let calls = restored.calls.clone();
        assert_eq!(
            finished(model, restored.join()),
            vec![rec(30, 3), rec(40, 4)],
            "{model:?}"
        );
        assert_eq!(calls.invocation_count(), 2, "{model:?}: each replayed once");
    }
}

fn retry_on_empty(max_retries: u32, delay_ms: u64) -> RetryPolicy<u64> {
    RetryPolicy::fixed_delay(max_retries, Duration::from_millis(delay_ms))
        .unwrap()
        .retry_if_result(|r| r.is_empty())
}

#[test]
fn retries_on_a_matching_result_until_one_does_not_match() {
    for model in MODELS {
        let config = unordered(10)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(retry_on_empty(3, 5));
        let t = start(model, config);
        t.record(1, 1);
        t.record(100, 1);
        t.invoked(2);
        t.complete(1, vec![]); // empty: retry in 5 ms
        t.complete(100, vec![100]); // the probe: once it is out, the retry is scheduled
        t.output.wait_len(1);
        t.advance(6);
        let calls = t.calls.wait_for_invocations(3);
        assert_eq!((calls[2].input, calls[2].attempt), (1, 2), "{model:?}");
        t.complete(1, vec![11]);
        t.end();
        assert_eq!(finished(model, t.join()), vec![rec(100, 1), rec(11, 1)]);
    }
}

#[test]
fn the_last_attempt_is_final_when_retries_run_out() {
    for model in MODELS {
        let config = ordered(10)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(retry_on_empty(2, 5));
        let t = start(model, config);
        t.record(1, 1);
        for attempt in 1..=3 {
            let calls = t.calls.wait_for_invocations(attempt);
            assert_eq!(calls[attempt - 1].attempt as usize, attempt, "{model:?}");
            t.complete(1, vec![]);
            if attempt < 3 {
                // Move time until the retry (scheduled once the completion is applied) fires.
                advance_until(&t, || t.calls.invocation_count() > attempt);
            }
        }
        t.record(2, 2); // behind the exhausted record, in order
        t.invoked(4);
        t.complete(2, vec![2]);
        t.end();
        let calls = t.calls.clone();
        assert_eq!(finished(model, t.join()), vec![rec(2, 2)]);
        assert_eq!(
            calls.invocation_count(),
            4,
            "{model:?}: three attempts, then record 2"
        );
    }
}

/// Advances processing time a millisecond at a time until `done` (a hang guard only).
fn advance_until(t: &AsyncTask, done: impl Fn() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !done() {
        assert!(Instant::now() < deadline, "not reached within the guard");
        t.advance(1);
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn retries_on_a_matching_error_and_fails_on_another() {
    for model in MODELS {
        let policy = RetryPolicy::fixed_delay(3, Duration::from_millis(5))
            .unwrap()
            .retry_if_error(|e| matches!(e, AsyncError::Failed(m) if m == "transient"));
        let config = ordered(10)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(policy);
        let t = start(model, config);
        t.record(1, 1);
        t.invoked(1);
        assert!(t.calls.fail(&1, AsyncError::failed("transient")));
        advance_until(&t, || t.calls.invocation_count() > 1);
        assert!(t.calls.fail(&1, AsyncError::failed("fatal")));
        let (outcome, _) = t.join();
        let message = async_failure(model, &outcome);
        assert!(message.contains("fatal"), "{model:?}: {message}");
    }
}

#[test]
fn the_timeout_spans_the_retries_and_drops_a_pending_one() {
    // FLINK-30477: a timeout while a retry is due cancels the retry; the timeout hook gets a
    // fresh attempt's future and decides.
    for model in MODELS {
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u64| vec![x + 1000]);
        let config = unordered(10)
            .with_timeout(Duration::from_millis(100))
            .with_retry(retry_on_empty(5, 1_000_000));
        let t = start_with(model, config, function, None);
        t.record(1, 1);
        t.record(2, 2);
        t.invoked(2);
        t.complete(1, vec![]); // a retry is due in 1000 s
        t.complete(2, vec![2]); // the probe
        t.output.wait_len(1);
        t.advance(101); // the timeout, long before the retry
        assert_eq!(t.output.wait_len(2), vec![rec(2, 2), rec(1001, 1)]);
        let timeouts = t.calls.timeouts();
        assert_eq!(timeouts.len(), 1, "{model:?}");
        assert_eq!(
            (timeouts[0].input, timeouts[0].attempt),
            (1, 2),
            "{model:?}"
        );
        assert_eq!(
            t.calls.invocation_count(),
            2,
            "{model:?}: the retry never ran"
        );
        t.end();
        assert_eq!(finished(model, t.join()), vec![rec(2, 2), rec(1001, 1)]);
    }
}

#[test]
fn end_of_input_runs_a_due_retry_at_once() {
    for model in MODELS {
        let config = unordered(10)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(retry_on_empty(5, 1_000_000));
        let t = start(model, config);
        t.record(1, 1);
        t.record(2, 2);
        t.invoked(2);
        t.complete(1, vec![]); // a retry is due in 1000 s
        t.complete(2, vec![2]); // the probe
        t.output.wait_len(1);
        t.end(); // no clock move: end of input runs the retry now
        let calls = t.calls.wait_for_invocations(3);
        assert_eq!((calls[2].input, calls[2].attempt), (1, 2), "{model:?}");
        t.complete(1, vec![]); // final now, however it looks
        assert_eq!(finished(model, t.join()), vec![rec(2, 2)]);
    }
}

/// While the queue is full and the task takes no input, everything else still runs: a barrier
/// right behind the full queue is snapshotted, the timeout timer fires and its fallback frees
/// the slot, and the waiting record is taken then.
#[test]
fn checkpoints_and_timers_run_while_the_queue_is_full() {
    for model in MODELS {
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u64| vec![x + 1000]);
        let t = start_with(
            model,
            ordered(1).with_timeout(Duration::from_millis(10)),
            function,
            None,
        );
        t.record(1, 1);
        assert_eq!(t.invoked(1), vec![1]);
        let snapshot = t.snapshot(1);
        assert_eq!(saved_records(&snapshot), vec![1], "{model:?}");
        t.record(2, 2);
        t.advance(11); // record 1 times out and falls back
        assert_eq!(
            t.invoked(2),
            vec![1, 2],
            "{model:?}: 2 takes the freed slot"
        );
        t.complete(2, vec![2]);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![
                Emitted::Barrier(CheckpointBarrier::new(1, 0)),
                rec(1001, 1),
                rec(2, 2)
            ],
            "{model:?}"
        );
    }
}

/// A full queue makes the operator unavailable, but not deaf to the end of its input: a due
/// retry runs at once then too, not when a slot frees.
#[test]
fn end_of_input_runs_a_due_retry_at_once_while_the_queue_is_full() {
    for model in MODELS {
        let config = unordered(3)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(retry_on_empty(5, 1_000_000));
        let t = start(model, config);
        for x in 1..=3 {
            t.record(x, x as i64);
        }
        t.invoked(3);
        t.complete(1, vec![]); // a retry is due in 1000 s
        t.complete(3, vec![3]); // the probe
        t.output.wait_len(1);
        t.record(4, 4);
        assert_eq!(t.invoked(4), vec![1, 2, 3, 4], "{model:?}: full again");
        t.end(); // no clock move, no slot freed: end of input runs the retry now
        let calls = t.calls.wait_for_invocations(5);
        assert_eq!((calls[4].input, calls[4].attempt), (1, 2), "{model:?}");
        t.complete(1, vec![]); // final now
        t.complete(2, vec![2]);
        t.complete(4, vec![4]);
        let mut out = finished(model, t.join());
        out.sort_by_key(|e| match e {
            Emitted::Record(r) => r.value,
            _ => u64::MAX,
        });
        assert_eq!(out, vec![rec(2, 2), rec(3, 3), rec(4, 4)], "{model:?}");
    }
}

#[test]
fn invalid_configurations_are_typed_errors_in_both_models() {
    let cases = [
        (ordered(0), AsyncConfigError::ZeroCapacity),
        (
            ordered(1).with_timeout(Duration::ZERO),
            AsyncConfigError::ZeroTimeout,
        ),
        (
            ordered(1).with_retry(retry_on_empty(1, 1)),
            AsyncConfigError::RetryWithoutTimeout,
        ),
    ];
    for (config, expected) in cases {
        let legacy = streamtask_legacy::AsyncHead::new(
            "async",
            ManualAsyncFunction::<u64, u64>::new(),
            config.clone(),
        );
        assert_eq!(legacy.err(), Some(expected));
        let mailbox = streamtask_runtime::AsyncWaitOperator::new(
            "async",
            ManualAsyncFunction::<u64, u64>::new(),
            config,
        );
        assert_eq!(mailbox.err(), Some(expected));
    }
}

// ---- the futures-based function on a tokio runtime ---------------------------------------------

/// Futures the test resolves: each call registers a oneshot under its input and its future
/// awaits it; `resolve` sends the values of the latest call for an input.
#[derive(Clone, Default)]
#[allow(clippy::type_complexity)]
struct Pending(
    Arc<(
        Mutex<Vec<(u64, Option<tokio::sync::oneshot::Sender<Vec<u64>>>)>>,
        Condvar,
    )>,
);

impl Pending {
    fn function(
        &self,
        runtime: &Arc<TokioRuntime>,
    ) -> impl AsyncFunction<In = u64, Out = u64> + use<> {
        let pending = self.clone();
        FutureAsyncFunction::new(Arc::clone(runtime), move |x: u64| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            pending.0.0.lock().unwrap().push((x, Some(tx)));
            pending.0.1.notify_all();
            async move {
                rx.await
                    .map_err(|_| AsyncError::failed("the test dropped the call"))
            }
        })
    }

    /// Waits until `n` calls were made; returns their inputs in call order.
    fn invoked(&self, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + GUARD;
        let mut calls = self.0.0.lock().unwrap();
        while calls.len() < n {
            let now = Instant::now();
            assert!(now < deadline, "waited for {n} calls, have {}", calls.len());
            calls = self.0.1.wait_timeout(calls, deadline - now).unwrap().0;
        }
        calls.iter().map(|(x, _)| *x).collect()
    }

    fn resolve(&self, input: u64, values: Vec<u64>) {
        let mut calls = self.0.0.lock().unwrap();
        let (_, tx) = calls
            .iter_mut()
            .rev()
            .find(|(x, _)| *x == input)
            .unwrap_or_else(|| panic!("no call for {input}"));
        let tx = tx
            .take()
            .unwrap_or_else(|| panic!("{input} resolved before"));
        tx.send(values).unwrap();
    }
}

fn io_runtime() -> Arc<TokioRuntime> {
    TokioRuntime::new("async-io-test", 2).unwrap()
}

#[test]
fn a_futures_based_function_gives_the_same_ordered_output_in_both_models() {
    let mut outputs = Vec::new();
    for model in MODELS {
        let runtime = io_runtime();
        let function = FutureAsyncFunction::new(Arc::clone(&runtime), |x: u64| async move {
            // Later inputs finish first more often than not; ordered output hides it.
            for _ in 0..(100 - x % 100) % 7 {
                tokio::task::yield_now().await;
            }
            Ok(vec![x * 10])
        });
        let t = start_function(model, ordered(8), function, None);
        for x in 0..200 {
            t.record(x, x as i64);
            if x % 50 == 49 {
                t.watermark(x as i64);
            }
        }
        t.end();
        let out = finished(model, t.join());
        runtime.shutdown();
        let mut expected = Vec::new();
        for x in 0..200u64 {
            expected.push(rec(x * 10, x as i64));
            if x % 50 == 49 {
                expected.push(wm(x as i64));
            }
        }
        assert_eq!(out, expected, "{model:?}");
        outputs.push(out);
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn a_futures_based_function_emits_unordered_results_in_completion_order() {
    for model in MODELS {
        let runtime = io_runtime();
        let pending = Pending::default();
        let t = start_function(model, unordered(4), pending.function(&runtime), None);
        t.plain(1);
        t.plain(2);
        t.plain(3);
        assert_eq!(pending.invoked(3), vec![1, 2, 3]);
        pending.resolve(3, vec![30]);
        t.output.wait_len(1);
        pending.resolve(1, vec![10]);
        t.output.wait_len(2);
        pending.resolve(2, vec![20]);
        t.end();
        let out = finished(model, t.join());
        runtime.shutdown();
        assert_eq!(out, vec![plain(30), plain(10), plain(20)], "{model:?}");
    }
}

#[test]
fn a_futures_based_call_times_out_and_fails_the_task_naming_the_input() {
    for model in MODELS {
        let runtime = io_runtime();
        let pending = Pending::default();
        let config = ordered(4).with_timeout(Duration::from_millis(10));
        let t = start_function(model, config, pending.function(&runtime), None);
        t.record(7, 1);
        pending.invoked(1);
        t.advance(11);
        let (outcome, _) = t.join();
        let message = async_failure(model, &outcome);
        assert!(message.contains("timed out"), "{model:?}: {message}");
        assert!(message.contains('7'), "{model:?}: {message}");
        runtime.shutdown();
    }
}

#[test]
fn a_futures_based_call_is_retried_by_the_policy() {
    for model in MODELS {
        let runtime = io_runtime();
        let pending = Pending::default();
        let config = ordered(4)
            .with_timeout(Duration::from_secs(3600))
            .with_retry(retry_on_empty(3, 5));
        let t = start_function(model, config, pending.function(&runtime), None);
        t.record(4, 1);
        pending.invoked(1);
        pending.resolve(4, vec![]); // empty: retried after 5 ms of processing time
        advance_until(&t, || pending.0.0.lock().unwrap().len() == 2);
        pending.resolve(4, vec![40]);
        t.end();
        let out = finished(model, t.join());
        runtime.shutdown();
        assert_eq!(out, vec![rec(40, 1)], "{model:?}");
    }
}

#[test]
fn in_flight_futures_based_calls_are_in_the_checkpoint_and_re_run_on_restore() {
    for model in MODELS {
        let runtime = io_runtime();
        let pending = Pending::default();
        let first = start_function(model, ordered(4), pending.function(&runtime), None);
        for x in 1..=3 {
            first.record(x, x as i64);
        }
        pending.invoked(3);
        pending.resolve(1, vec![10]);
        first.output.wait_len(1);
        // 2 and 3 are still awaiting their futures when the barrier comes.
        let snapshot = first.snapshot(1);
        first.cancel();

        let immediate =
            FutureAsyncFunction::new(
                Arc::clone(&runtime),
                |x: u64| async move { Ok(vec![x * 10]) },
            );
        let second = start_function(model, ordered(4), immediate, Some(snapshot));
        second.end();
        let out = finished(model, second.join());
        runtime.shutdown();
        assert_eq!(out, vec![rec(20, 2), rec(30, 3)], "{model:?}");
    }
}

// ---- key-ordered mode (FLINK-37874) -------------------------------------------------------------

fn key_ordered(capacity: usize) -> AsyncConfig<u64> {
    AsyncConfig::new(OutputMode::KeyOrdered, capacity)
}

/// Each key's results, in output order (keys are last digits).
fn per_key(out: &[Emitted<u64>], divisor: u64) -> std::collections::BTreeMap<u64, Vec<u64>> {
    let mut keys = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for e in out {
        if let Emitted::Record(r) = e {
            let input = r.value / divisor;
            keys.entry(input % 10).or_default().push(input);
        }
    }
    keys
}

#[test]
fn key_ordered_emits_each_keys_results_in_input_order_and_keys_independently() {
    for model in MODELS {
        // Keys are last digits: 1, 11 and 21 share key 1.
        let t = start_key_ordered(model, key_ordered(10), ManualAsyncFunction::new(), None);
        t.record(1, 1);
        t.record(11, 11);
        t.record(2, 2);
        t.watermark(20);
        t.record(21, 21);
        t.record(3, 3);
        assert_eq!(
            t.invoked(3),
            vec![1, 2, 3],
            "{model:?}: 11 and 21 wait for 1"
        );
        t.complete(2, vec![20]);
        assert_eq!(
            t.output.wait_len(1),
            vec![rec(20, 2)],
            "{model:?}: no head-of-line blocking across keys"
        );
        t.complete(3, vec![30]); // of the segment after W20: waits for it
        t.complete(1, vec![10]);
        assert_eq!(t.invoked(4)[3], 11, "{model:?}: 11 starts once 1 is final");
        t.complete(11, vec![110]);
        assert_eq!(t.invoked(5)[4], 21, "{model:?}");
        t.complete(21, vec![210]);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![
                rec(20, 2),
                rec(10, 1),
                rec(110, 11),
                wm(20),
                rec(30, 3),
                rec(210, 21)
            ],
            "{model:?}"
        );
    }
}

#[test]
fn key_ordered_mode_without_a_key_is_a_typed_error_in_both_models() {
    let legacy = streamtask_legacy::AsyncHead::new(
        "async",
        ManualAsyncFunction::<u64, u64>::new(),
        key_ordered(4),
    );
    assert_eq!(legacy.unwrap_err(), AsyncConfigError::KeyOrderedWithoutKey);
    let mailbox = streamtask_runtime::AsyncWaitOperator::new(
        "async",
        ManualAsyncFunction::<u64, u64>::new(),
        key_ordered(4),
    );
    assert_eq!(mailbox.unwrap_err(), AsyncConfigError::KeyOrderedWithoutKey);
}

/// A task fails (here: is cancelled) with records of several keys in flight, some of them
/// waiting behind their key's call; the restored task, with less room than the snapshot
/// holds, calls every key's records again in input order, and each key's results leave in
/// that order.
#[test]
fn key_ordered_records_in_flight_at_a_checkpoint_are_restored_in_each_keys_order() {
    for model in MODELS {
        let first = start_key_ordered(model, key_ordered(10), ManualAsyncFunction::new(), None);
        for x in [1, 11, 2, 21, 12, 3, 31, 22] {
            first.record(x, x as i64);
        }
        first.watermark(40);
        assert_eq!(first.invoked(3), vec![1, 2, 3], "{model:?}");
        first.complete(2, vec![20]); // emitted before the barrier: not in the snapshot
        assert_eq!(first.invoked(4)[3], 12, "{model:?}");
        first.complete(12, vec![120]); // completed, emitted too (unordered within keys)
        assert_eq!(first.output.wait_len(2), vec![rec(20, 2), rec(120, 12)]);
        let snapshot = first.snapshot(1);
        first.cancel();

        let second = start_key_ordered(
            model,
            key_ordered(3),
            ManualAsyncFunction::new(),
            Some(snapshot),
        );
        // Complete whatever is called, as it is called: a key's next record is called only
        // once its previous one is final.
        let mut completed = 0;
        while completed < 6 {
            let inputs = second.invoked(completed + 1);
            for &x in &inputs[completed..] {
                second.complete(x, vec![x * 10]);
                completed += 1;
            }
        }
        let calls = second.invoked(6);
        let keys = |list: &[u64]| {
            let mut by_key = std::collections::BTreeMap::<u64, Vec<u64>>::new();
            for &x in list {
                by_key.entry(x % 10).or_default().push(x);
            }
            by_key
        };
        let expected: std::collections::BTreeMap<u64, Vec<u64>> =
            [(1, vec![1, 11, 21, 31]), (2, vec![22]), (3, vec![3])]
                .into_iter()
                .collect();
        assert_eq!(keys(&calls), expected, "{model:?}: calls per key");
        second.end();
        let out = finished(model, second.join());
        assert_eq!(
            per_key(&out, 10),
            expected,
            "{model:?}: results per key: {out:?}"
        );
        assert_eq!(
            out.last(),
            Some(&wm(40)),
            "{model:?}: the watermark after the restored records"
        );
    }
}

// ---- a retry due at the instant of the timeout (FLINK-40456) -----------------------------------

/// FLINK-40456: a retry scheduled for the very instant its record times out. The timeout hook
/// answers later (an asynchronous fallback); the record's result is emitted exactly once (the
/// hook's), never dropped for a retry nobody ends, never twice.
#[test]
fn a_retry_due_at_the_instant_of_the_timeout_emits_the_result_exactly_once() {
    for model in MODELS {
        let function = ManualAsyncFunction::new().with_deferred_timeout();
        let config = unordered(10)
            .with_timeout(Duration::from_millis(100))
            .with_retry(retry_on_empty(5, 100));
        let t = start_with(model, config, function, None);
        t.record(1, 1);
        t.record(2, 2);
        t.invoked(2);
        t.complete(1, vec![]); // the retry is due at 100, the record's deadline too
        t.complete(2, vec![2]); // the probe: its result shows the retry was scheduled
        t.output.wait_len(1);
        t.advance(101); // both timers are due
        let timeouts = t.calls.wait_for_timeouts(1);
        assert!(timeouts[0].result.complete(vec![1001]), "{model:?}");
        assert_eq!(
            t.output.wait_len(2),
            vec![rec(2, 2), rec(1001, 1)],
            "{model:?}"
        );
        // Whatever attempt the function was last called with, it answers too late: the
        // hook's answer was final.
        assert!(
            !t.calls.complete(&1, vec![7]),
            "{model:?}: a later attempt was still open"
        );
        t.advance(1_000);
        t.end();
        let calls = t.calls.clone();
        assert_eq!(
            finished(model, t.join()),
            vec![rec(2, 2), rec(1001, 1)],
            "{model:?}"
        );
        assert_eq!(calls.timeouts().len(), 1, "{model:?}: one timeout");
    }
}

// ---- batched mode -------------------------------------------------------------------------------

/// One call of a batch function: its inputs, its future, and whether it is the timeout hook.
struct BatchSeen {
    inputs: Vec<u64>,
    result: BatchResultFuture<u64>,
    timeout: bool,
}

/// A batch function that hands every batch to the test; its timeout hook answers each input
/// with `input + 1000` at once.
struct ChannelBatches(crossbeam::channel::Sender<BatchSeen>);

impl AsyncBatchFunction for ChannelBatches {
    type In = u64;
    type Out = u64;

    fn invoke_batch(&mut self, inputs: &[u64], result: BatchResultFuture<u64>) {
        let _ = self.0.send(BatchSeen {
            inputs: inputs.to_vec(),
            result,
            timeout: false,
        });
    }

    fn timeout_batch(&mut self, inputs: &[u64], result: BatchResultFuture<u64>) {
        result.complete(inputs.iter().map(|x| vec![x + 1000]).collect());
        let _ = self.0.send(BatchSeen {
            inputs: inputs.to_vec(),
            result,
            timeout: true,
        });
    }
}

/// A batched async operator of `model` and the batches its function is called with.
fn start_batched(
    model: Model,
    config: AsyncConfig<u64>,
    restore: Option<TaskSnapshot>,
) -> (AsyncTask, Receiver<BatchSeen>) {
    let (tx, batches) = crossbeam::channel::unbounded();
    let key = (config.mode == OutputMode::KeyOrdered).then(last_digit);
    let function = BatchedAsyncFunction::new(ChannelBatches(tx));
    (
        start_any(model, config, function, restore, true, key),
        batches,
    )
}

/// Batches of at most `size`, closed after 5 ms otherwise.
fn batched(mode: OutputMode, size: usize) -> AsyncConfig<u64> {
    AsyncConfig::new(mode, 16).with_batch(BatchConfig::new(size, Duration::from_millis(5)))
}

/// The next batch call.
fn next_batch(batches: &Receiver<BatchSeen>) -> BatchSeen {
    batches.recv_timeout(GUARD).expect("a batch call")
}

/// Moves processing time on, a millisecond at a time, until the next batch call: a batch
/// closed by its max wait (the test does not know when the task took the batch's records, so
/// it keeps the clock moving instead of moving it once).
fn advance_until_batch(t: &AsyncTask, batches: &Receiver<BatchSeen>) -> BatchSeen {
    let start = Instant::now();
    loop {
        if let Ok(batch) = batches.recv_timeout(Duration::from_millis(5)) {
            return batch;
        }
        assert!(start.elapsed() < GUARD, "no batch call");
        t.advance(1);
    }
}

fn answer_times_ten(batch: &BatchSeen) {
    batch
        .result
        .complete(batch.inputs.iter().map(|x| vec![x * 10]).collect());
}

#[test]
fn batches_close_at_their_size_or_max_wait_and_keep_each_modes_order() {
    for model in MODELS {
        for mode in [
            OutputMode::Ordered,
            OutputMode::Unordered,
            OutputMode::KeyOrdered,
        ] {
            let (t, batches) = start_batched(model, batched(mode, 2), None);
            // Keys are last digits: 11 and 21 share key 1.
            for (value, ts) in [(11, 1), (2, 2), (21, 3), (3, 4)] {
                t.record(value, ts);
            }
            let first = next_batch(&batches);
            let second = match mode {
                // 21 waits for 11's call to be final before it starts.
                OutputMode::KeyOrdered => {
                    assert_eq!(first.inputs, vec![11, 2], "{model:?} {mode:?}");
                    let second = advance_until_batch(&t, &batches);
                    assert_eq!(second.inputs, vec![3], "{model:?} {mode:?}: max wait");
                    answer_times_ten(&second);
                    answer_times_ten(&first);
                    let third = advance_until_batch(&t, &batches);
                    assert_eq!(third.inputs, vec![21], "{model:?} {mode:?}");
                    answer_times_ten(&third);
                    third
                }
                OutputMode::Ordered | OutputMode::Unordered => {
                    assert_eq!(first.inputs, vec![11, 2], "{model:?} {mode:?}");
                    let second = next_batch(&batches);
                    assert_eq!(second.inputs, vec![21, 3], "{model:?} {mode:?}: by size");
                    // The second batch answers first.
                    answer_times_ten(&second);
                    if mode == OutputMode::Unordered {
                        t.output.wait_len(2);
                    }
                    answer_times_ten(&first);
                    second
                }
            };
            drop(second);
            t.record(5, 5);
            let last = advance_until_batch(&t, &batches);
            assert_eq!(
                last.inputs,
                vec![5],
                "{model:?} {mode:?}: closed by its max wait"
            );
            answer_times_ten(&last);
            t.end();
            let out = finished(model, t.join());
            let values: Vec<u64> = out
                .iter()
                .filter_map(|e| match e {
                    Emitted::Record(r) => Some(r.value),
                    _ => None,
                })
                .collect();
            match mode {
                OutputMode::Ordered => assert_eq!(values, vec![110, 20, 210, 30, 50]),
                OutputMode::Unordered => assert_eq!(values, vec![210, 30, 110, 20, 50]),
                OutputMode::KeyOrdered => {
                    assert_eq!(values.len(), 5, "{model:?}: {values:?}");
                    let at = |v: u64| values.iter().position(|&x| x == v).unwrap();
                    assert!(
                        at(110) < at(210),
                        "{model:?}: key 1 in input order: {values:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_batch_times_out_as_one_and_its_fallbacks_are_emitted_once() {
    for model in MODELS {
        let config = batched(OutputMode::Ordered, 2).with_timeout(Duration::from_millis(10));
        let (t, batches) = start_batched(model, config, None);
        t.record(1, 1);
        t.record(2, 2);
        let called = next_batch(&batches);
        assert_eq!(called.inputs, vec![1, 2]);
        let timed_out = advance_until_batch(&t, &batches);
        assert!(timed_out.timeout, "{model:?}");
        assert_eq!(
            timed_out.inputs,
            vec![1, 2],
            "{model:?}: one timeout call per batch"
        );
        // The batch's own answer, too late, loses.
        answer_times_ten(&called);
        t.end();
        assert_eq!(
            finished(model, t.join()),
            vec![rec(1001, 1), rec(1002, 2)],
            "{model:?}"
        );
    }
}

/// A batch function with the default timeout hook: it answers nothing, and the task fails.
struct UnansweredBatches(crossbeam::channel::Sender<Vec<u64>>);

impl AsyncBatchFunction for UnansweredBatches {
    type In = u64;
    type Out = u64;

    fn invoke_batch(&mut self, inputs: &[u64], _result: BatchResultFuture<u64>) {
        let _ = self.0.send(inputs.to_vec());
    }
}

/// Without a `timeout_batch` of its own, a batch that times out fails the task (the default
/// hook fails each record with a timeout), naming a record of the batch; nothing is emitted.
#[test]
fn a_batch_timing_out_without_a_hook_fails_the_task() {
    for model in MODELS {
        let config = batched(OutputMode::Ordered, 2).with_timeout(Duration::from_millis(10));
        let (tx, batches) = crossbeam::channel::unbounded();
        let function = BatchedAsyncFunction::new(UnansweredBatches(tx));
        let t = start_any(model, config, function, None, true, None);
        t.record(1, 1);
        t.record(2, 2);
        assert_eq!(
            batches.recv_timeout(GUARD).unwrap(),
            vec![1, 2],
            "{model:?}"
        );
        t.advance(11);
        let (outcome, emitted) = t.join();
        let message = async_failure(model, &outcome);
        assert!(message.contains("timed out"), "{model:?}: {message}");
        assert!(
            !emitted.iter().any(|e| matches!(e, Emitted::Record(_))),
            "{model:?}: {emitted:?}"
        );
    }
}

/// A batch call fails for two of its three records: those two are retried as one batch of
/// their own, as soon as the policy's delay passed (not after the max wait), and a record
/// waiting in the open batch meanwhile is never part of it.
#[test]
fn a_failed_batch_is_retried_as_one_batch_and_each_result_emitted_once() {
    for model in MODELS {
        let retry = RetryPolicy::fixed_delay(3, Duration::from_millis(2))
            .unwrap()
            .retry_if_error(|_| true);
        // A max wait no test reaches: a batch closes by its size, before a retry, or at the
        // end of input.
        let config = AsyncConfig::new(OutputMode::Unordered, 16)
            .with_batch(BatchConfig::new(3, Duration::from_secs(3600)))
            .with_timeout(Duration::from_secs(7200))
            .with_retry(retry);
        let (t, batches) = start_batched(model, config, None);
        for v in [1, 2, 3] {
            t.record(v, v as i64);
        }
        let first = next_batch(&batches);
        assert_eq!(first.inputs, vec![1, 2, 3]);
        t.record(4, 4); // waits in the open batch
        first.result.complete_each(vec![
            Err(AsyncError::failed("overloaded")),
            Err(AsyncError::failed("overloaded")),
            Ok(vec![30]),
        ]);
        // Completions apply in order: 3's result shows 1's and 2's retries were scheduled.
        assert_eq!(t.output.wait_len(1), vec![rec(30, 3)], "{model:?}");
        let mut others = Vec::new();
        let retried = loop {
            let batch = advance_until_batch(&t, &batches);
            if batch.inputs.contains(&1) || batch.inputs.contains(&2) {
                break batch;
            }
            others.push(batch);
        };
        assert_eq!(retried.inputs, vec![1, 2], "{model:?}: one retry batch");
        answer_times_ten(&retried);
        t.end();
        if others.is_empty() {
            others.push(next_batch(&batches)); // the open batch, closed by the end of input
        }
        assert_eq!(others.len(), 1, "{model:?}");
        assert_eq!(others[0].inputs, vec![4], "{model:?}: a batch of its own");
        answer_times_ten(&others[0]);
        let mut out = finished(model, t.join());
        out.sort_by_key(|e| match e {
            Emitted::Record(r) => r.value,
            _ => 0,
        });
        assert_eq!(
            out,
            vec![rec(10, 1), rec(20, 2), rec(30, 3), rec(40, 4)],
            "{model:?}"
        );
    }
}

/// FLINK-40456 for a batch: the batch's retry is due at the very instant its records time
/// out. Whichever timer the task fires first, every record gets the timeout hook's answer,
/// once; a retried batch answering later loses.
#[test]
fn a_batch_retry_due_at_the_instant_of_its_timeout_gives_each_record_the_hooks_answer_once() {
    for model in MODELS {
        let retry = RetryPolicy::fixed_delay(3, Duration::from_millis(5))
            .unwrap()
            .retry_if_error(|_| true);
        let config = AsyncConfig::new(OutputMode::Unordered, 16)
            .with_batch(BatchConfig::new(3, Duration::from_secs(3600)))
            .with_timeout(Duration::from_millis(10))
            .with_retry(retry);
        let (t, batches) = start_batched(model, config, None);
        for v in [1, 2, 3] {
            t.record(v, v as i64);
        }
        // Closed by its size at 0: the batch's deadline is 10.
        let first = next_batch(&batches);
        assert_eq!(first.inputs, vec![1, 2, 3]);
        t.advance(5);
        first.result.complete_each(vec![
            Err(AsyncError::failed("overloaded")),
            Err(AsyncError::failed("overloaded")),
            Ok(vec![30]),
        ]);
        // 3's result shows the failures were applied at 5: the retry is due at 10.
        assert_eq!(t.output.wait_len(1), vec![rec(30, 3)], "{model:?}");
        t.advance(6); // both timers are due
        let mut retried = Vec::new();
        let hooks = loop {
            let batch = next_batch(&batches);
            if batch.timeout {
                break batch;
            }
            retried.push(batch);
        };
        assert_eq!(hooks.inputs, vec![1, 2], "{model:?}: one timeout call");
        for batch in &retried {
            assert_eq!(
                batch.inputs,
                vec![1, 2],
                "{model:?}: the retry, if it ran first"
            );
            answer_times_ten(batch); // too late
        }
        t.end();
        let mut out = finished(model, t.join());
        out.sort_by_key(|e| match e {
            Emitted::Record(r) => r.value,
            _ => 0,
        });
        assert_eq!(
            out,
            vec![rec(30, 3), rec(1001, 1), rec(1002, 2)],
            "{model:?}"
        );
    }
}

/// A fault with batches in flight: the checkpoint holds the called batch's records and the
/// open batch's; the task dies (cancelled) before any answer; the restored task calls them
/// again, in batches, and each result is emitted once.
#[test]
fn batches_in_flight_at_a_checkpoint_are_called_again_after_a_restore() {
    for model in MODELS {
        for mode in [
            OutputMode::Ordered,
            OutputMode::Unordered,
            OutputMode::KeyOrdered,
        ] {
            let (t, batches) = start_batched(model, batched(mode, 2), None);
            for v in [1, 2, 3] {
                t.record(v, v as i64);
            }
            assert_eq!(
                next_batch(&batches).inputs,
                vec![1, 2],
                "{model:?} {mode:?}"
            );
            let snapshot = t.snapshot(1);
            if mode != OutputMode::KeyOrdered {
                assert_eq!(
                    saved_records(&snapshot),
                    vec![1, 2, 3],
                    "{model:?} {mode:?}"
                );
            }
            t.cancel();

            let (restored, batches) = start_batched(model, batched(mode, 2), Some(snapshot));
            let mut called = Vec::new();
            while called
                .iter()
                .map(|b: &BatchSeen| b.inputs.len())
                .sum::<usize>()
                < 3
            {
                let batch = advance_until_batch(&restored, &batches);
                answer_times_ten(&batch);
                called.push(batch);
            }
            let sizes: Vec<usize> = called.iter().map(|b| b.inputs.len()).collect();
            assert_eq!(sizes, vec![2, 1], "{model:?} {mode:?}");
            let mut inputs: Vec<u64> = called.iter().flat_map(|b| b.inputs.clone()).collect();
            if mode == OutputMode::KeyOrdered {
                // Restored by key group, not in input order (each key has one record here).
                inputs.sort_unstable();
            }
            assert_eq!(inputs, vec![1, 2, 3], "{model:?} {mode:?}");
            restored.end();
            let mut out = finished(model, restored.join());
            if mode != OutputMode::Ordered {
                out.sort_by_key(|e| match e {
                    Emitted::Record(r) => r.value,
                    _ => 0,
                });
            }
            assert_eq!(
                out,
                vec![rec(10, 1), rec(20, 2), rec(30, 3)],
                "{model:?} {mode:?}"
            );
        }
    }
}
