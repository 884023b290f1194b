//! The async engine in batched mode, driven by hand on a manual clock: batches close at their
//! size or their max wait, a batch has one deadline and is retried as a whole, the open batch's
//! records are in the snapshot and are batched again after a restore, and each output mode keeps
//! its order. The cross-model suite (the workspace's `tests/async_io.rs`) runs batched mode
//! through both models' tasks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use streamtask_core::async_io::{
    AsyncBatchFunction, AsyncConfig, AsyncKey, BatchConfig, BatchResultFuture,
    BatchedAsyncFunction, OutputMode, RetryPolicy,
};
use streamtask_core::function::{AsyncError, Completion, CompletionSink};
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{Context, Emitted};
use streamtask_core::testing::HarnessServices;
use streamtask_core::{OperatorError, StreamRecord, Watermark};
use streamtask_runtime::AsyncWaitEngine;

/// One call the batch function got: its inputs, its future, and whether it was the timeout hook.
struct BatchCall {
    inputs: Vec<u32>,
    result: BatchResultFuture<u32>,
    timeout: bool,
}

/// A batch function whose batches the test answers.
#[derive(Clone, Default)]
struct ManualBatches(Arc<Mutex<Vec<BatchCall>>>);

impl ManualBatches {
    /// The inputs of every call so far, with `true` for timeout calls.
    fn seen(&self) -> Vec<(Vec<u32>, bool)> {
        let calls = self.0.lock().unwrap();
        calls
            .iter()
            .map(|c| (c.inputs.clone(), c.timeout))
            .collect()
    }

    /// Answers call `index` with each input times ten.
    fn answer(&self, index: usize) {
        let calls = self.0.lock().unwrap();
        let call = &calls[index];
        call.result
            .complete(call.inputs.iter().map(|x| vec![x * 10]).collect());
    }

    fn fail(&self, index: usize) {
        self.0.lock().unwrap()[index]
            .result
            .complete_exceptionally(AsyncError::failed("service unavailable"));
    }
}

impl AsyncBatchFunction for ManualBatches {
    type In = u32;
    type Out = u32;

    fn invoke_batch(&mut self, inputs: &[u32], result: BatchResultFuture<u32>) {
        self.0.lock().unwrap().push(BatchCall {
            inputs: inputs.to_vec(),
            result,
            timeout: false,
        });
    }

    fn timeout_batch(&mut self, inputs: &[u32], result: BatchResultFuture<u32>) {
        // The fallback: each input answered with itself.
        result.complete(inputs.iter().map(|&x| vec![x]).collect());
        self.0.lock().unwrap().push(BatchCall {
            inputs: inputs.to_vec(),
            result,
            timeout: true,
        });
    }
}

/// A sink that keeps completions until the test applies them.
#[derive(Default)]
struct Keep(Mutex<Vec<Completion<u32>>>);

impl CompletionSink<u32> for Keep {
    fn deliver(&self, completion: Completion<u32>) {
        self.0.lock().unwrap().push(completion);
    }
}

struct Rig {
    engine: AsyncWaitEngine<BatchedAsyncFunction<ManualBatches>>,
    batches: ManualBatches,
    sink: Arc<Keep>,
    services: HarnessServices,
    metrics: Arc<TaskMetrics>,
    out: Vec<Emitted<u32>>,
}

fn config(mode: OutputMode, size: usize, max_wait_ms: u64) -> AsyncConfig<u32> {
    AsyncConfig::new(mode, 16)
        .with_batch(BatchConfig::new(size, Duration::from_millis(max_wait_ms)))
}

impl Rig {
    fn new(config: AsyncConfig<u32>, restored: Option<&[u8]>) -> Rig {
        let batches = ManualBatches::default();
        let function = BatchedAsyncFunction::new(batches.clone());
        let engine = match config.mode {
            // A record's key is its value's last digit.
            OutputMode::KeyOrdered => {
                let key = AsyncKey::new(128, |v: &u32| v % 10);
                AsyncWaitEngine::keyed("batched", function, config, key).unwrap()
            }
            OutputMode::Ordered | OutputMode::Unordered => {
                AsyncWaitEngine::new("batched", function, config).unwrap()
            }
        };
        let mut services = HarnessServices::new("batched");
        let metrics = Arc::new(TaskMetrics::new("batched"));
        services.services = services.services.clone().with_metrics(Arc::clone(&metrics));
        let mut rig = Rig {
            engine,
            batches,
            sink: Arc::new(Keep::default()),
            services,
            metrics,
            out: Vec::new(),
        };
        rig.engine.restore(restored).unwrap();
        let sink: Arc<dyn CompletionSink<u32>> = rig.sink.clone();
        let mut ctx = Context::new(&mut rig.out, &rig.services.services, 0);
        rig.engine.open(sink, &mut ctx).unwrap();
        rig
    }

    fn records(&mut self, values: &[u32]) {
        for &value in values {
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            let record = StreamRecord::with_timestamp(value, i64::from(value));
            self.engine.process_element(record, &mut ctx).unwrap();
        }
    }

    fn watermark(&mut self, timestamp: i64) {
        let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
        self.engine
            .process_watermark(Watermark(timestamp), &mut ctx)
            .unwrap();
    }

    /// Applies every delivered completion, then emits.
    fn apply(&mut self) -> Result<(), OperatorError> {
        let delivered: Vec<_> = self.sink.0.lock().unwrap().drain(..).collect();
        let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
        for completion in delivered {
            self.engine.on_completion(completion, &mut ctx)?;
        }
        self.engine.emit_ready(&mut ctx)
    }

    /// Moves the clock on and fires the timers due (a timer set for `at` fires once the clock
    /// passed `at`).
    fn advance(&mut self, millis: i64) {
        self.services.clock.advance(millis);
        while let Some(timer) = self.services.timers.pop_due() {
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            self.engine.on_timer(timer, &mut ctx).unwrap();
        }
    }

    fn end_input(&mut self) {
        let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
        self.engine.end_input(&mut ctx).unwrap();
    }

    /// Answers every batch call so far (timeout calls answered themselves), then applies.
    fn answer_all(&mut self) {
        let seen = self.batches.seen();
        for (index, (_, timeout)) in seen.iter().enumerate() {
            if !timeout {
                self.batches.answer(index);
            }
        }
        self.apply().unwrap();
    }

    /// The records emitted, in order.
    fn emitted(&self) -> Vec<u32> {
        self.out
            .iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect()
    }
}

fn batches_of(rig: &Rig) -> Vec<Vec<u32>> {
    rig.batches.seen().into_iter().map(|(b, _)| b).collect()
}

#[test]
fn smoke() {
    let mut rig = Rig::new(config(OutputMode::Ordered, 2, 5), None);
    rig.records(&[1, 2]);
    rig.answer_all();
    assert_eq!(rig.emitted(), vec![10, 20]);
}

#[test]
fn a_batch_closes_at_its_size_and_a_partial_one_at_its_max_wait() {
    let mut rig = Rig::new(config(OutputMode::Ordered, 3, 5), None);
    rig.records(&[1, 2, 3, 4]);
    // The first three are one call; the fourth waits for more.
    assert_eq!(batches_of(&rig), vec![vec![1, 2, 3]]);
    rig.advance(5);
    assert_eq!(batches_of(&rig), vec![vec![1, 2, 3]]);
    rig.advance(1);
    assert_eq!(batches_of(&rig), vec![vec![1, 2, 3], vec![4]]);
    rig.answer_all();
    assert_eq!(rig.emitted(), vec![10, 20, 30, 40]);
    // Two batches: sizes 3 and 1, waits 0 and 6 ms (its timer, set for 5, fired at 6).
    let sizes = rig.metrics.async_batch_size.summary();
    assert_eq!((sizes.count, sizes.max), (2, 3));
    let waits = rig.metrics.async_batch_wait.summary();
    assert_eq!(waits.count, 2);
    assert!(waits.max >= 6000 && waits.max < 6100, "{waits:?}");
}

#[test]
fn the_end_of_input_calls_the_open_batch_at_once() {
    let mut rig = Rig::new(config(OutputMode::Unordered, 10, 1000), None);
    rig.records(&[7, 8]);
    assert!(batches_of(&rig).is_empty());
    rig.end_input();
    assert_eq!(batches_of(&rig), vec![vec![7, 8]]);
    rig.answer_all();
    assert_eq!(rig.emitted(), vec![70, 80]);
    assert!(rig.engine.is_drained());
}

#[test]
fn a_batch_has_one_deadline_from_its_call_and_times_out_as_one() {
    let config = config(OutputMode::Ordered, 2, 5).with_timeout(Duration::from_millis(10));
    let mut rig = Rig::new(config, None);
    rig.records(&[1]);
    rig.advance(3);
    rig.records(&[2]); // closes the batch at t=3: the deadline is 13 for both
    assert_eq!(batches_of(&rig), vec![vec![1, 2]]);
    rig.advance(10); // t=13, the deadline: its timer fires once the clock passed it
    assert_eq!(
        rig.batches.seen().len(),
        1,
        "nothing timed out before the deadline"
    );
    rig.advance(1); // t=14
    assert_eq!(
        rig.batches.seen(),
        vec![(vec![1, 2], false), (vec![1, 2], true)],
        "one timeout call for the batch's records"
    );
    rig.apply().unwrap();
    // The fallback answers; the batch's own answer coming later is ignored.
    rig.batches.answer(0);
    rig.apply().unwrap();
    assert_eq!(rig.emitted(), vec![1, 2]);
}

#[test]
fn a_failed_batch_is_retried_as_one_batch_and_each_result_is_emitted_once() {
    let retry = RetryPolicy::fixed_delay(2, Duration::from_millis(2))
        .unwrap()
        .retry_if_error(|_| true);
    let config = config(OutputMode::Ordered, 2, 5)
        .with_timeout(Duration::from_millis(100))
        .with_retry(retry);
    let mut rig = Rig::new(config, None);
    rig.records(&[1, 2]);
    rig.batches.fail(0);
    rig.apply().unwrap();
    assert_eq!(rig.batches.seen().len(), 1, "the retry waits for its delay");
    rig.advance(3);
    assert_eq!(batches_of(&rig), vec![vec![1, 2], vec![1, 2]]);
    rig.batches.answer(1);
    rig.apply().unwrap();
    // A late answer of the failed attempt changes nothing.
    rig.batches.answer(0);
    rig.apply().unwrap();
    rig.end_input();
    assert_eq!(rig.emitted(), vec![10, 20]);
    assert!(rig.engine.is_drained());
}

#[test]
fn a_failed_batch_past_its_retries_fails_the_task_naming_an_input() {
    let mut rig = Rig::new(config(OutputMode::Unordered, 2, 5), None);
    rig.records(&[4, 5]);
    rig.batches.fail(0);
    let error = rig.apply().unwrap_err().to_string();
    assert!(error.contains("service unavailable"), "{error}");
}

#[test]
fn ordered_mode_emits_in_input_order_whichever_batch_answers_first() {
    let mut rig = Rig::new(config(OutputMode::Ordered, 2, 5), None);
    rig.records(&[1, 2, 3, 4]);
    rig.batches.answer(1);
    rig.apply().unwrap();
    assert!(rig.emitted().is_empty());
    rig.batches.answer(0);
    rig.apply().unwrap();
    assert_eq!(rig.emitted(), vec![10, 20, 30, 40]);
}

#[test]
fn unordered_mode_emits_a_batch_as_it_answers_but_never_across_a_watermark() {
    let mut rig = Rig::new(config(OutputMode::Unordered, 2, 5), None);
    rig.records(&[1, 2, 3, 4]);
    rig.watermark(50);
    rig.records(&[5, 6]);
    rig.batches.answer(1);
    rig.batches.answer(2);
    rig.apply().unwrap();
    assert_eq!(rig.emitted(), vec![30, 40]);
    rig.batches.answer(0);
    rig.apply().unwrap();
    assert_eq!(rig.emitted(), vec![30, 40, 10, 20, 50, 60]);
    let watermark_at = rig
        .out
        .iter()
        .position(|e| matches!(e, Emitted::Watermark(Watermark(50))))
        .unwrap();
    assert_eq!(
        watermark_at, 4,
        "after the records before it: {:?}",
        rig.out
    );
}

#[test]
fn key_ordered_mode_batches_at_most_one_record_of_a_key_and_keeps_each_keys_order() {
    // Keys are last digits: 11 and 21 share key 1.
    let mut rig = Rig::new(config(OutputMode::KeyOrdered, 3, 5), None);
    rig.records(&[11, 2, 21, 3]);
    // 21 waits for 11's call: the first batch is 11, 2, 3.
    assert_eq!(batches_of(&rig), vec![vec![11, 2, 3]]);
    rig.answer_all();
    // 21 started once 11 was final, in a batch of its own (closed by the max wait).
    rig.advance(6);
    assert_eq!(batches_of(&rig), vec![vec![11, 2, 3], vec![21]]);
    rig.answer_all();
    assert_eq!(rig.emitted(), vec![110, 20, 30, 210]);
}

#[test]
fn the_open_and_the_called_batches_are_in_the_snapshot_and_batched_again_after_a_restore() {
    let mut rig = Rig::new(config(OutputMode::Ordered, 2, 5), None);
    rig.records(&[1, 2, 3]);
    // [1, 2] called, 3 in the open batch; nothing answered.
    assert_eq!(batches_of(&rig), vec![vec![1, 2]]);
    let snapshot = rig.engine.snapshot().unwrap();
    rig.engine.close().unwrap();

    let mut restored = Rig::new(config(OutputMode::Ordered, 2, 5), Some(&snapshot));
    assert_eq!(batches_of(&restored), vec![vec![1, 2]]);
    restored.advance(6);
    assert_eq!(batches_of(&restored), vec![vec![1, 2], vec![3]]);
    restored.answer_all();
    restored.end_input();
    assert_eq!(restored.emitted(), vec![10, 20, 30]);
    assert!(restored.engine.is_drained());
}

#[test]
fn without_a_batch_config_every_record_is_a_batch_of_its_own() {
    let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 4), None);
    rig.records(&[1, 2]);
    assert_eq!(batches_of(&rig), vec![vec![1], vec![2]]);
    rig.answer_all();
    assert_eq!(rig.emitted(), vec![10, 20]);
}
