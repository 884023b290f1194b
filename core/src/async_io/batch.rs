//! Batched async calls: a function that answers a batch of inputs per call
//! ([`AsyncBatchFunction`]), the future a batch is answered through ([`BatchResultFuture`]),
//! and the adapter the async operator runs it as ([`BatchedAsyncFunction`]).
//!
//! The operator forms the batches ([`AsyncConfig::with_batch`](super::AsyncConfig::with_batch)):
//! the records whose calls start go to the open batch, which is called when it holds `size`
//! records or `max_wait` after its first record joined, whichever comes first (and at the end
//! of input). Everything else is the operator's as for single calls: the output mode, the
//! capacity (a batch's records each hold a slot), the snapshot (a batch's records are in it
//! until their results are emitted, and are batched again after a restore).

use std::fmt;
use std::time::Duration;

use crate::OperatorError;
use crate::function::{AsyncError, AsyncFunction, ResultFuture};

/// When the async operator closes a batch: at `size` records, or `max_wait` after the
/// batch's first record joined.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, BatchConfig, OutputMode};
///
/// let batched = AsyncConfig::<u32>::new(OutputMode::Ordered, 100)
///     .with_batch(BatchConfig::new(16, Duration::from_millis(5)));
/// assert!(batched.validate().is_ok());
/// let empty = AsyncConfig::<u32>::new(OutputMode::Ordered, 100)
///     .with_batch(BatchConfig::new(0, Duration::from_millis(5)));
/// assert_eq!(empty.validate(), Err(AsyncConfigError::ZeroBatchSize));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Records per batch at most: a batch is called as soon as it holds this many.
    pub size: usize,
    /// How long a batch waits for more records after its first joined (processing time,
    /// whole milliseconds rounded up; zero calls every batch at once).
    pub max_wait: Duration,
}

impl BatchConfig {
    /// Batches of at most `size` records, each called at most `max_wait` after its first
    /// record joined.
    pub fn new(size: usize, max_wait: Duration) -> Self {
        BatchConfig { size, max_wait }
    }

    /// `max_wait` in whole milliseconds (rounded up), as timers need it.
    pub fn max_wait_millis(&self) -> i64 {
        i64::try_from(self.max_wait.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
    }
}

/// A function called with a batch of inputs at a time (model inference, a lookup with one
/// `WHERE id IN (...)` query): the batched form of
/// [`AsyncFunction`](crate::function::AsyncFunction). Run it with the async operator in
/// batched mode (the job API's `async_wait_batched`, or [`BatchedAsyncFunction`] with
/// [`AsyncConfig::with_batch`](super::AsyncConfig::with_batch)).
///
/// The operator's timeout and retry policy apply to a batch as a whole: the batch's records
/// get one deadline (the timeout from the moment the batch is called); the records of a batch
/// that the retry policy retries (all of a failed batch, or those of a batch answered in part
/// that it judges worth a retry) are called again together, as one batch of their own, once
/// the policy's delay has passed; and when the deadline passes
/// [`timeout_batch`](Self::timeout_batch) gets the records still unanswered, a retry pending
/// for them included.
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::{AsyncBatchFunction, BatchResultFuture};
///
/// struct Square;
/// impl AsyncBatchFunction for Square {
///     type In = u32;
///     type Out = u32;
///     fn invoke_batch(&mut self, inputs: &[u32], result: BatchResultFuture<u32>) {
///         result.complete(inputs.iter().map(|x| vec![x * x]).collect());
///     }
/// }
/// ```
pub trait AsyncBatchFunction: Send + 'static {
    /// One input of a batch.
    type In: Clone + Send + 'static;
    /// What a call produces per input (zero or more).
    type Out: Send + 'static;

    /// Called once before the first batch (after a restore too).
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn open(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Starts the call for the batch `inputs` (in the order they arrived); completes `result`
    /// now or later, from any thread.
    fn invoke_batch(&mut self, inputs: &[Self::In], result: BatchResultFuture<Self::Out>);

    /// The operator's timeout passed for `inputs` (records of a batch not yet answered). The
    /// default fails them with [`AsyncError::Timeout`], which fails the task; override it to
    /// answer with fallbacks instead (and do answer: a record never answered blocks the queue).
    fn timeout_batch(&mut self, inputs: &[Self::In], result: BatchResultFuture<Self::Out>) {
        let _ = inputs;
        result.complete_exceptionally(AsyncError::Timeout);
    }

    /// Called once when the operator closes.
    ///
    /// # Errors
    ///
    /// Reported only.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Answers one batch: one outcome per input, in the inputs' order. Cloneable and `Send`, so a
/// client thread can answer; the first answer of each input counts.
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::BatchResultFuture;
/// use streamtask_core::function::{AsyncError, AsyncOutcome, ResultFuture};
/// use streamtask_core::testing::completion_channel;
///
/// let (sink, completions) = completion_channel();
/// let batch = BatchResultFuture::new((0..2).map(|e| ResultFuture::new(e, 1, sink.clone())).collect());
/// batch.complete_each(vec![Ok(vec!["a"]), Err(AsyncError::failed("no row"))]);
/// assert_eq!(completions.recv().unwrap().outcome, AsyncOutcome::Results(vec!["a"]));
/// assert!(matches!(completions.recv().unwrap().outcome, AsyncOutcome::Failed(_)));
/// ```
pub struct BatchResultFuture<O> {
    members: Vec<ResultFuture<O>>,
}

impl<O> BatchResultFuture<O> {
    /// The future of a batch whose inputs' calls are `members`, in input order.
    pub fn new(members: Vec<ResultFuture<O>>) -> Self {
        BatchResultFuture { members }
    }

    /// Inputs in the batch.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the batch has no input.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Answers every input with its results (`results[i]` for input `i`); inputs left without
    /// results (fewer than the batch's inputs) fail, naming how many were answered.
    pub fn complete(&self, results: Vec<Vec<O>>) {
        self.complete_each(results.into_iter().map(Ok).collect());
    }

    /// Answers every input with its own outcome (`outcomes[i]` for input `i`); an error fails
    /// that input only, and inputs left without an outcome fail.
    pub fn complete_each(&self, outcomes: Vec<Result<Vec<O>, AsyncError>>) {
        let answered = outcomes.len();
        let mut outcomes = outcomes.into_iter();
        for member in &self.members {
            match outcomes.next() {
                Some(Ok(values)) => member.complete(values),
                Some(Err(error)) => member.complete_exceptionally(error),
                None => member.complete_exceptionally(AsyncError::failed(format!(
                    "the batch call answered {answered} of {} inputs",
                    self.members.len()
                ))),
            };
        }
    }

    /// Fails every input of the batch with `error` (the retry policy then sees it for each).
    pub fn complete_exceptionally(&self, error: AsyncError) {
        for member in &self.members {
            member.complete_exceptionally(error.clone());
        }
    }

    /// Whether every input was answered.
    pub fn is_done(&self) -> bool {
        self.members.iter().all(ResultFuture::is_done)
    }
}

impl<O> Clone for BatchResultFuture<O> {
    fn clone(&self) -> Self {
        BatchResultFuture {
            members: self.members.clone(),
        }
    }
}

impl<O> fmt::Debug for BatchResultFuture<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchResultFuture")
            .field("len", &self.members.len())
            .field("done", &self.is_done())
            .finish()
    }
}

/// Runs an [`AsyncBatchFunction`] as the async operator's function: each call the operator
/// starts (or times out) joins the open batch, and the operator's
/// [`flush`](AsyncFunction::flush) (when the batch it formed closes) calls the function once
/// for the batch: [`timeout_batch`](AsyncBatchFunction::timeout_batch) for the timed-out
/// records, then [`invoke_batch`](AsyncBatchFunction::invoke_batch) for the others.
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::{AsyncBatchFunction, BatchResultFuture, BatchedAsyncFunction};
/// use streamtask_core::function::{AsyncFunction, AsyncOutcome, ResultFuture};
/// use streamtask_core::testing::completion_channel;
///
/// struct Sizes;
/// impl AsyncBatchFunction for Sizes {
///     type In = u32;
///     type Out = usize;
///     fn invoke_batch(&mut self, inputs: &[u32], result: BatchResultFuture<usize>) {
///         result.complete(inputs.iter().map(|_| vec![inputs.len()]).collect());
///     }
/// }
///
/// let mut f = BatchedAsyncFunction::new(Sizes);
/// let (sink, completions) = completion_channel();
/// f.invoke(&1, ResultFuture::new(0, 1, sink.clone()));
/// f.invoke(&2, ResultFuture::new(1, 1, sink));
/// assert!(completions.try_recv().is_err()); // nothing called until the batch closes
/// f.flush();
/// assert_eq!(completions.recv().unwrap().outcome, AsyncOutcome::Results(vec![2]));
/// ```
pub struct BatchedAsyncFunction<B: AsyncBatchFunction> {
    function: B,
    calls: Vec<(B::In, ResultFuture<B::Out>)>,
    timeouts: Vec<(B::In, ResultFuture<B::Out>)>,
}

impl<B: AsyncBatchFunction> BatchedAsyncFunction<B> {
    /// Runs `function` in batches.
    pub fn new(function: B) -> Self {
        BatchedAsyncFunction {
            function,
            calls: Vec::new(),
            timeouts: Vec::new(),
        }
    }

    /// The batch function.
    pub fn inner(&self) -> &B {
        &self.function
    }

    /// Calls waiting for their batch to close.
    pub fn pending(&self) -> usize {
        self.calls.len()
    }
}

/// Calls `call` once with the inputs and futures of `batch` (emptied), if any.
fn call_batch<I, O>(
    batch: &mut Vec<(I, ResultFuture<O>)>,
    call: impl FnOnce(&[I], BatchResultFuture<O>),
) {
    if batch.is_empty() {
        return;
    }
    let (inputs, members): (Vec<I>, Vec<ResultFuture<O>>) = batch.drain(..).unzip();
    call(&inputs, BatchResultFuture::new(members));
}

impl<B: AsyncBatchFunction> AsyncFunction for BatchedAsyncFunction<B> {
    type In = B::In;
    type Out = B::Out;

    fn open(&mut self) -> Result<(), OperatorError> {
        self.function.open()
    }

    fn invoke(&mut self, input: &B::In, result: ResultFuture<B::Out>) {
        self.calls.push((input.clone(), result));
    }

    fn timeout(&mut self, input: &B::In, result: ResultFuture<B::Out>) {
        self.timeouts.push((input.clone(), result));
    }

    fn flush(&mut self) {
        let function = &mut self.function;
        call_batch(&mut self.timeouts, |inputs, result| {
            function.timeout_batch(inputs, result);
        });
        call_batch(&mut self.calls, |inputs, result| {
            function.invoke_batch(inputs, result);
        });
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Calls of a batch never called are dropped with their futures: their records are in
        // the operator's snapshot and are called again after a restore.
        self.calls.clear();
        self.timeouts.clear();
        self.function.close()
    }
}

impl<B: AsyncBatchFunction> fmt::Debug for BatchedAsyncFunction<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchedAsyncFunction")
            .field("pending", &self.calls.len())
            .field("pending_timeouts", &self.timeouts.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::function::AsyncOutcome;
    use crate::testing::completion_channel;

    struct Record(Vec<Vec<u32>>, Vec<Vec<u32>>);
    impl AsyncBatchFunction for Record {
        type In = u32;
        type Out = u32;
        fn invoke_batch(&mut self, inputs: &[u32], result: BatchResultFuture<u32>) {
            self.0.push(inputs.to_vec());
            result.complete(inputs.iter().take(1).map(|x| vec![*x]).collect());
        }
        fn timeout_batch(&mut self, inputs: &[u32], result: BatchResultFuture<u32>) {
            self.1.push(inputs.to_vec());
            result.complete(inputs.iter().map(|_| Vec::new()).collect());
        }
    }

    #[test]
    fn a_flush_calls_timeouts_then_calls_each_as_one_batch_and_fails_unanswered_inputs() {
        let mut f = BatchedAsyncFunction::new(Record(Vec::new(), Vec::new()));
        let (sink, completions) = completion_channel();
        f.invoke(&1, ResultFuture::new(0, 1, sink.clone()));
        f.invoke(&2, ResultFuture::new(1, 1, sink.clone()));
        f.timeout(&9, ResultFuture::new(2, 1, sink));
        assert_eq!(f.pending(), 2);
        f.flush();
        f.flush(); // nothing left: no empty batch
        assert_eq!(f.inner().0, vec![vec![1, 2]]);
        assert_eq!(f.inner().1, vec![vec![9]]);
        let mut got: Vec<_> = (0..3).map(|_| completions.recv().unwrap()).collect();
        got.sort_by_key(|c| c.entry);
        assert_eq!(got[0].outcome, AsyncOutcome::Results(vec![1]));
        assert!(
            matches!(&got[1].outcome, AsyncOutcome::Failed(e) if e.to_string().contains("answered 1 of 2"))
        );
        assert_eq!(got[2].outcome, AsyncOutcome::Results(Vec::new()));
    }
}
