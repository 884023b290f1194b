//! User functions: the logic users write once and every model runs.
//!
//! Simple transformations are closures ([`Map`](crate::operator::Map),
//! [`Filter`](crate::operator::Filter), [`FlatMap`](crate::operator::FlatMap)); logic with
//! per-key state and timers implements [`KeyedProcessFunction`] (or, over two connected inputs
//! sharing per-key state, [`CoProcessFunction`]); calls to external systems
//! implement [`AsyncFunction`] and complete a [`ResultFuture`] from any thread (first completion
//! wins).

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::error::AsyncError;
use crate::error::OperatorError;
use crate::operator::{EndOfInputContext, KeyedContext};
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when processing time passes the timestamp.
    ProcessingTime,
    /// Fires when a watermark reaches the timestamp.
    EventTime,
}

/// User logic of a keyed process operator.
///
/// # Examples
///
/// A running total per key that reports each key once its event-time window of 10 closes:
///
/// ```
/// use streamtask_core::OperatorError;
/// use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
/// use streamtask_core::operator::{KeyedContext, KeyedProcessOperator};
/// use streamtask_core::testing::OperatorHarness;
/// use streamtask_core::Watermark;
///
/// struct Totals;
///
/// impl KeyedProcessFunction for Totals {
///     type Key = String;
///     type In = (String, u64);
///     type Out = (String, u64);
///     type State = u64;
///
///     fn process_element(
///         &mut self,
///         value: (String, u64),
///         ctx: &mut KeyedContext<'_, '_, String, u64, (String, u64)>,
///     ) -> Result<(), OperatorError> {
///         *ctx.state() += value.1;
///         let end = ctx.timestamp().unwrap_or(0) / 10 * 10 + 9;
///         ctx.register_event_timer(end);
///         Ok(())
///     }
///
///     fn on_timer(
///         &mut self,
///         _timestamp: i64,
///         _domain: TimeDomain,
///         ctx: &mut KeyedContext<'_, '_, String, u64, (String, u64)>,
///     ) -> Result<(), OperatorError> {
///         let total = *ctx.state();
///         let key = ctx.key().clone();
///         ctx.clear_state();
///         ctx.collect((key, total))
///     }
/// }
///
/// let op = KeyedProcessOperator::new("totals", |v: &(String, u64)| v.0.clone(), Totals);
/// let mut h = OperatorHarness::new(op);
/// h.open().unwrap();
/// h.process_with_timestamp(("a".to_string(), 2), 1).unwrap();
/// h.process_with_timestamp(("a".to_string(), 3), 5).unwrap();
/// h.process_watermark(Watermark(9)).unwrap();
/// assert_eq!(h.output_values(), vec![("a".to_string(), 5)]);
/// ```
pub trait KeyedProcessFunction: Send {
    /// The key records are grouped by.
    type Key: Ord + Clone + Serialize + DeserializeOwned + Send;
    /// What it consumes.
    type In;
    /// What it emits.
    type Out;
    /// The state kept per key; a new key starts with `State::default()`.
    type State: Default + Serialize + DeserializeOwned + Send;

    /// Processes one record of the context's key.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element(
        &mut self,
        value: Self::In,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// A timer of the context's key fired at `timestamp`.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (timestamp, domain, ctx);
        Ok(())
    }

    /// The input ended: called once, after [`Watermark::MAX`](crate::Watermark::MAX) fired
    /// every event-time timer and was forwarded, and before the operator finishes (Flink's
    /// `endInput`). Processing-time timers still pending do not fire; `ctx` lists them, with
    /// every key's state, so the function can emit what they would have. The default does
    /// nothing.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn end_input(
        &mut self,
        ctx: &mut EndOfInputContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }
}

/// User logic over two connected inputs keyed alike, sharing per-key state and timers (Flink's
/// `KeyedCoProcessFunction`): a record of either input with key `k` sees the same state, and a
/// timer of key `k` fires [`on_timer`](Self::on_timer) with that state, whichever input
/// registered it.
///
/// # Examples
///
/// A join that remembers the latest price per key (input 2) and prices each order (input 1):
///
/// ```
/// use streamtask_core::OperatorError;
/// use streamtask_core::function::CoProcessFunction;
/// use streamtask_core::operator::{KeyedCoProcessOperator, KeyedContext, Map, TwoInputChain};
/// use streamtask_core::testing::TwoInputHarness;
///
/// struct Price;
///
/// impl CoProcessFunction for Price {
///     type Key = String;
///     type In1 = (String, u64);
///     type In2 = (String, u64);
///     type Out = u64;
///     type State = u64;
///
///     fn process_element1(
///         &mut self,
///         order: (String, u64),
///         ctx: &mut KeyedContext<'_, '_, String, u64, u64>,
///     ) -> Result<(), OperatorError> {
///         let price = *ctx.state();
///         ctx.collect(order.1 * price)
///     }
///
///     fn process_element2(
///         &mut self,
///         price: (String, u64),
///         ctx: &mut KeyedContext<'_, '_, String, u64, u64>,
///     ) -> Result<(), OperatorError> {
///         *ctx.state() = price.1;
///         Ok(())
///     }
/// }
///
/// let op = KeyedCoProcessOperator::new(
///     "price",
///     |o: &(String, u64)| o.0.clone(),
///     |p: &(String, u64)| p.0.clone(),
///     Price,
/// );
/// let mut h = TwoInputHarness::new(TwoInputChain::new(op, Map::new("id", |n: u64| n)));
/// h.open().unwrap();
/// h.process2(("apple".to_string(), 3)).unwrap();
/// h.process1(("apple".to_string(), 2)).unwrap();
/// assert_eq!(h.output_values(), vec![6]);
/// ```
pub trait CoProcessFunction: Send {
    /// The key both inputs are grouped by.
    type Key: Ord + Clone + Serialize + DeserializeOwned + Send;
    /// What the first input carries.
    type In1;
    /// What the second input carries.
    type In2;
    /// What it emits.
    type Out;
    /// The state kept per key, shared by both inputs; a new key starts with `default()`.
    type State: Default + Serialize + DeserializeOwned + Send;

    /// Processes one record of the first input.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element1(
        &mut self,
        value: Self::In1,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// Processes one record of the second input.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element2(
        &mut self,
        value: Self::In2,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// A timer of the context's key fired at `timestamp`.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (timestamp, domain, ctx);
        Ok(())
    }

    /// Both inputs ended: called once, after the combined watermark reached
    /// [`Watermark::MAX`](crate::Watermark::MAX), as [`KeyedProcessFunction::end_input`].
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn end_input(
        &mut self,
        ctx: &mut EndOfInputContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }
}

/// How an asynchronous call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsyncOutcome<O> {
    /// Results to emit (possibly none), each with the input's timestamp.
    Results(Vec<O>),
    /// The call failed; unless a retry policy retries it, the task fails.
    Failed(AsyncError),
}

/// One completion travelling from whatever thread completed a [`ResultFuture`] to the async
/// operator: which call (the operator's id for it), which attempt, and the outcome.
#[derive(Debug)]
pub struct Completion<O> {
    /// The operator's id for the call: an opaque key that the operator maps back to its queue
    /// entry (the async engine's is a slot and a generation, not the entry's position).
    pub entry: u64,
    /// The attempt (1 for the first call, then one more per retry).
    pub attempt: u32,
    /// The outcome.
    pub outcome: AsyncOutcome<O>,
}

/// Where a model's async operator receives completions: the mailbox model turns each into a mail
/// at the operator's priority; the legacy model hands it to the operator's emitter thread.
pub trait CompletionSink<O>: Send + Sync {
    /// Delivers a completion. A sink whose operator is gone drops it (the element is replayed
    /// from the last checkpoint on restore).
    fn deliver(&self, completion: Completion<O>);
}

/// The handle an [`AsyncFunction`] completes, from any thread. Cloneable; the first completion
/// wins and every later one is ignored.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamtask_core::function::{AsyncOutcome, Completion, CompletionSink, ResultFuture};
///
/// #[derive(Default)]
/// struct Keep(Mutex<Vec<Completion<u32>>>);
/// impl CompletionSink<u32> for Keep {
///     fn deliver(&self, c: Completion<u32>) {
///         self.0.lock().unwrap().push(c);
///     }
/// }
///
/// let sink = Arc::new(Keep::default());
/// let future = ResultFuture::new(7, 1, sink.clone());
/// let clone = future.clone();
/// assert!(std::thread::spawn(move || clone.complete(vec![42])).join().unwrap());
/// assert!(!future.complete(vec![0])); // too late: ignored
/// let got = sink.0.lock().unwrap();
/// assert_eq!(got.len(), 1);
/// assert_eq!((got[0].entry, &got[0].outcome), (7, &AsyncOutcome::Results(vec![42])));
/// ```
pub struct ResultFuture<O> {
    // The sync facade's `Arc`, so the loom model of `renew` sees the handles' count.
    shared: crate::sync::Arc<FutureShared<O>>,
}

/// What a future's handles share. `entry` and `attempt` are atomics only so that
/// [`ResultFuture::renew`] can rewrite them through the shared pointer once its handle is the
/// only one left (no `Weak` of it is ever made); nobody else reads them then, so `Relaxed`.
struct FutureShared<O> {
    done: AtomicBool,
    entry: AtomicU64,
    attempt: AtomicU32,
    sink: std::sync::Arc<dyn CompletionSink<O>>,
}

impl<O> ResultFuture<O> {
    /// A future for the operator's call `entry` (its id for the call), attempt `attempt`,
    /// delivering to `sink`.
    pub fn new(entry: u64, attempt: u32, sink: std::sync::Arc<dyn CompletionSink<O>>) -> Self {
        ResultFuture {
            shared: crate::sync::Arc::new(FutureShared {
                done: AtomicBool::new(false),
                entry: AtomicU64::new(entry),
                attempt: AtomicU32::new(attempt),
                sink,
            }),
        }
    }

    /// Makes this future a new one for `entry` and `attempt`, not done, reusing its allocation
    /// (the async engine keeps the futures of calls that ended, so a call costs no allocation);
    /// only if no clone of it is left anywhere, so no holder ever sees one change. Returns
    /// whether it did.
    ///
    /// One load and a fence rather than `Arc::get_mut`'s compare-and-swap (a call's largest
    /// single cost in the async engine after the function's own): no `Weak` of the shared part
    /// is ever made, so a strong count of one means every other handle was dropped, and none
    /// can appear but by cloning this one (borrowed mutably here). The `Acquire` fence pairs
    /// with the `Release` decrement of the last other handle's drop: what that holder did
    /// (its completion's reads of the fields) happens before the writes below.
    ///
    /// For the async engine of the runtime crate (`streamtask-runtime`); a function never
    /// needs it.
    pub fn renew(&mut self, entry: u64, attempt: u32) -> bool {
        if crate::sync::Arc::strong_count(&self.shared) != 1 {
            return false;
        }
        fence(Ordering::Acquire);
        let shared = &*self.shared;
        shared.done.store(false, Ordering::Relaxed);
        shared.entry.store(entry, Ordering::Relaxed);
        shared.attempt.store(attempt, Ordering::Relaxed);
        true
    }

    /// Completes with `results` (an empty `Vec` emits nothing). Returns whether this call won.
    pub fn complete(&self, results: Vec<O>) -> bool {
        self.finish(AsyncOutcome::Results(results))
    }

    /// Completes with an error. Returns whether this call won.
    pub fn complete_exceptionally(&self, error: AsyncError) -> bool {
        self.finish(AsyncOutcome::Failed(error))
    }

    /// Whether some call already completed it.
    pub fn is_done(&self) -> bool {
        self.shared.done.load(Ordering::Acquire)
    }

    /// The operator's id for the call it completes (see [`Completion::entry`]).
    pub fn entry(&self) -> u64 {
        // Relaxed: written only by `renew`, before this handle existed (see `FutureShared`).
        self.shared.entry.load(Ordering::Relaxed)
    }

    /// The attempt it belongs to.
    pub fn attempt(&self) -> u32 {
        self.shared.attempt.load(Ordering::Relaxed)
    }

    fn finish(&self, outcome: AsyncOutcome<O>) -> bool {
        // AcqRel: exactly one caller wins the flag; the winner's outcome is what gets delivered.
        let won = self
            .shared
            .done
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.shared.sink.deliver(Completion {
                entry: self.entry(),
                attempt: self.attempt(),
                outcome,
            });
        }
        won
    }
}

impl<O> Clone for ResultFuture<O> {
    fn clone(&self) -> Self {
        ResultFuture {
            shared: crate::sync::Arc::clone(&self.shared),
        }
    }
}

impl<O> std::fmt::Debug for ResultFuture<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultFuture")
            .field("entry", &self.entry())
            .field("attempt", &self.attempt())
            .field("done", &self.is_done())
            .finish()
    }
}

/// An asynchronous function: starts a request per input and completes its [`ResultFuture`]
/// later, from any thread. The same implementation runs under every model's async operator.
///
/// `invoke` runs on the task's thread (holding the checkpoint lock in the legacy model), so it
/// must not block: hand blocking clients to a [`BlockingPool`](crate::async_io::BlockingPool)
/// (see [`BlockingAsyncFunction`](crate::async_io::BlockingAsyncFunction)).
///
/// # Examples
///
/// ```
/// use streamtask_core::function::{AsyncFunction, ResultFuture};
///
/// /// Completes at once with the input doubled.
/// struct Double;
///
/// impl AsyncFunction for Double {
///     type In = u64;
///     type Out = u64;
///     fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
///         result.complete(vec![input * 2]);
///     }
/// }
/// ```
pub trait AsyncFunction: Send + 'static {
    /// The input; kept by the operator until its result is emitted (for snapshots and retries).
    type In: Clone + Send + 'static;
    /// What a call produces (zero or more per input).
    type Out: Send + 'static;

    /// Called once before the first `invoke` (after a restore too).
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn open(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Starts the call for `input`; completes `result` now or later, from any thread.
    fn invoke(&mut self, input: &Self::In, result: ResultFuture<Self::Out>);

    /// The operator's timeout for `input` passed before `result` was completed. The default
    /// completes it with [`AsyncError::Timeout`], which fails the task; override it to complete
    /// with a fallback instead (and do complete it: an element never completed blocks the queue).
    fn timeout(&mut self, input: &Self::In, result: ResultFuture<Self::Out>) {
        let _ = input;
        result.complete_exceptionally(AsyncError::Timeout);
    }

    /// Starts what [`invoke`](Self::invoke) and [`timeout`](Self::timeout) kept back since the
    /// last flush. The operator calls it once a batch of calls closes (after every call
    /// without [`AsyncConfig::with_batch`](crate::async_io::AsyncConfig::with_batch)); only a
    /// function that keeps calls back to run them as one batch needs it
    /// ([`BatchedAsyncFunction`](crate::async_io::BatchedAsyncFunction)). The default does
    /// nothing.
    #[inline]
    fn flush(&mut self) {}

    /// Called once when the operator closes.
    ///
    /// # Errors
    ///
    /// Reported only.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<F: AsyncFunction + ?Sized> AsyncFunction for Box<F> {
    type In = F::In;
    type Out = F::Out;
    fn open(&mut self) -> Result<(), OperatorError> {
        (**self).open()
    }
    fn invoke(&mut self, input: &Self::In, result: ResultFuture<Self::Out>) {
        (**self).invoke(input, result);
    }
    fn timeout(&mut self, input: &Self::In, result: ResultFuture<Self::Out>) {
        (**self).timeout(input, result);
    }
    fn flush(&mut self) {
        (**self).flush();
    }
    fn close(&mut self) -> Result<(), OperatorError> {
        (**self).close()
    }
}
