//! [`FutureAsyncFunction`]: an [`AsyncFunction`] from a closure returning a future, run on a
//! [`TokioRuntime`].
//!
//! `invoke` (on the task thread) calls the closure with a clone of the input and spawns the
//! future it returns; the future's output completes the [`ResultFuture`] on a runtime worker.
//! From there on it is any other completion: the engine applies it (ordered or unordered,
//! timeouts, retries, the in-flight inputs in the snapshot), and the models route it as they
//! route every completion (a mail; the emitter thread).
//!
//! Every spawned call carries a guard: a call whose future is dropped before it produced an
//! output (it panicked, it was aborted, the runtime shut down) completes its `ResultFuture`
//! exceptionally, so no entry waits forever. A timeout aborts the call's future (the
//! first completion, the timeout's, wins; the abort frees what the call held).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::task::AbortHandle;

use super::TokioRuntime;
use crate::sync::Mutex;
use streamtask_core::OperatorError;
use streamtask_core::function::{AsyncError, AsyncFunction, ResultFuture};

/// The in-flight calls, by (queue entry, attempt), so a timeout or `close` can abort them.
type InFlight = Arc<Mutex<HashMap<(u64, u32), AbortHandle>>>;

/// An [`AsyncFunction`] whose calls are futures on a [`TokioRuntime`]: the port of a tokio-based
/// client (a database or HTTP client) without callback glue.
///
/// `call` takes the input by value and returns a future of `Result<Vec<Out>, AsyncError>`: `Ok`
/// emits the values (each with the input's timestamp), `Err` completes exceptionally (which a
/// [`RetryPolicy`](streamtask_core::async_io::RetryPolicy) may retry). A future that panics completes
/// exceptionally naming the panic. The future must be `Send` (it runs on the runtime's
/// workers), the closure `Send` (the operator calls it on the task thread).
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, mpsc};
/// use streamtask_runtime::{FutureAsyncFunction, TokioRuntime};
/// use streamtask_core::function::{AsyncFunction, AsyncOutcome, Completion, CompletionSink, ResultFuture};
///
/// struct Channel(std::sync::Mutex<mpsc::Sender<Completion<u64>>>);
/// impl CompletionSink<u64> for Channel {
///     fn deliver(&self, c: Completion<u64>) {
///         self.0.lock().unwrap().send(c).unwrap();
///     }
/// }
///
/// let runtime = TokioRuntime::new("doc-io", 1).unwrap();
/// let mut square = FutureAsyncFunction::new(runtime.clone(), |n: u64| async move {
///     tokio::task::yield_now().await; // any .await: a client call, a sleep
///     Ok(vec![n * n])
/// });
/// let (tx, rx) = mpsc::channel();
/// square.invoke(&7, ResultFuture::new(0, 1, Arc::new(Channel(std::sync::Mutex::new(tx)))));
/// assert_eq!(rx.recv().unwrap().outcome, AsyncOutcome::Results(vec![49]));
/// runtime.shutdown();
/// ```
pub struct FutureAsyncFunction<I, O, C> {
    runtime: Arc<TokioRuntime>,
    call: C,
    in_flight: InFlight,
    _types: std::marker::PhantomData<fn(I) -> O>,
}

impl<I, O, C, Fut> FutureAsyncFunction<I, O, C>
where
    C: Fn(I) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<O>, AsyncError>> + Send + 'static,
{
    /// Calls run as `call(input)` on `runtime`.
    pub fn new(runtime: Arc<TokioRuntime>, call: C) -> Self {
        FutureAsyncFunction {
            runtime,
            call,
            in_flight: Arc::new(Mutex::new(HashMap::new())),
            _types: std::marker::PhantomData,
        }
    }

    /// The runtime the calls run on.
    pub fn runtime(&self) -> &Arc<TokioRuntime> {
        &self.runtime
    }

    /// How many calls are running now (spawned, not yet completed, aborted or dropped).
    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().len()
    }
}

impl<I, O, C, Fut> AsyncFunction for FutureAsyncFunction<I, O, C>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
    C: Fn(I) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<O>, AsyncError>> + Send + 'static,
{
    type In = I;
    type Out = O;

    fn invoke(&mut self, input: &I, result: ResultFuture<O>) {
        if self.runtime.is_shut_down() {
            result.complete_exceptionally(AsyncError::failed(FutureCallError::ShutDown));
            return;
        }
        let key = (result.entry(), result.attempt());
        let future = (self.call)(input.clone());
        let guard = CompleteOnDrop {
            result: Some(result.clone()),
            in_flight: Arc::clone(&self.in_flight),
            key,
        };
        let task = self.runtime.handle().spawn(async move {
            let mut guard = guard;
            let outcome = future.await;
            if let Some(result) = guard.result.take() {
                match outcome {
                    Ok(values) => result.complete(values),
                    Err(error) => result.complete_exceptionally(error),
                };
            }
            // The guard's drop unregisters the call, after the completion: `invoke` re-checks
            // `is_done` after it registered the call, so one of the two removes the entry
            // whichever runs first.
        });
        self.in_flight.lock().insert(key, task.abort_handle());
        if result.is_done() {
            self.in_flight.lock().remove(&key);
        }
    }

    fn timeout(&mut self, input: &I, result: ResultFuture<O>) {
        let _ = input;
        // Complete first so the aborted future's guard finds the entry done.
        result.complete_exceptionally(AsyncError::Timeout);
        // Not under the lock: the aborted call's guard takes it when it drops.
        let task = self
            .in_flight
            .lock()
            .remove(&(result.entry(), result.attempt()));
        if let Some(task) = task {
            task.abort();
        }
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // The operator is gone: nothing will apply these results; free what the calls hold.
        let calls: Vec<AbortHandle> = self.in_flight.lock().drain().map(|(_, t)| t).collect();
        for task in calls {
            task.abort();
        }
        Ok(())
    }
}

impl<I, O, C> fmt::Debug for FutureAsyncFunction<I, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FutureAsyncFunction")
            .field("runtime", &self.runtime)
            .field("in_flight", &self.in_flight.lock().len())
            .finish()
    }
}

/// Why a futures-based call did not produce an output; carried as the message of
/// [`AsyncError::Failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FutureCallError {
    /// The runtime was shut down before or while the call ran.
    #[error("the tokio runtime is shut down; shut it down only after the tasks that use it ended")]
    ShutDown,
    /// The call's future panicked.
    #[error("the async call panicked; return an AsyncError from the future instead")]
    Panicked,
}

/// Completes the call's `ResultFuture` exceptionally if its future is dropped unfinished (a
/// panic unwinds through it, an abort or a runtime shutdown drops it), and unregisters the call.
struct CompleteOnDrop<O> {
    result: Option<ResultFuture<O>>,
    in_flight: InFlight,
    key: (u64, u32),
}

impl<O> Drop for CompleteOnDrop<O> {
    fn drop(&mut self) {
        if let Some(result) = self.result.take() {
            let why = if std::thread::panicking() {
                FutureCallError::Panicked
            } else {
                FutureCallError::ShutDown
            };
            // Ignored if the call was completed already (a timeout, then an abort).
            result.complete_exceptionally(AsyncError::failed(why));
        }
        self.in_flight.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::function::{AsyncOutcome, Completion};

    use streamtask_core::testing::completion_channel as sink;

    #[test]
    fn results_errors_and_panics_complete_the_future() {
        let runtime = TokioRuntime::new("t", 1).unwrap();
        let mut f = FutureAsyncFunction::new(runtime.clone(), |x: u32| async move {
            match x {
                0 => Err(AsyncError::failed("zero")),
                1 => panic!("one"),
                n => Ok(vec![n]),
            }
        });
        let (s, rx) = sink();
        for (i, x) in [0u32, 1, 2].iter().enumerate() {
            f.invoke(x, ResultFuture::new(i as u64, 1, s.clone()));
        }
        let mut got: Vec<Completion<u32>> = (0..3).map(|_| rx.recv().unwrap()).collect();
        got.sort_by_key(|c| c.entry);
        assert_eq!(
            got[0].outcome,
            AsyncOutcome::Failed(AsyncError::failed("zero"))
        );
        assert_eq!(
            got[1].outcome,
            AsyncOutcome::Failed(AsyncError::failed(FutureCallError::Panicked))
        );
        assert_eq!(got[2].outcome, AsyncOutcome::Results(vec![2]));
        runtime.shutdown();
    }

    #[test]
    fn a_timeout_aborts_the_call_and_wins() {
        let runtime = TokioRuntime::new("t", 1).unwrap();
        let mut f = FutureAsyncFunction::new(runtime.clone(), |_: u32| async move {
            std::future::pending::<Result<Vec<u32>, AsyncError>>().await
        });
        let (s, rx) = sink();
        let result = ResultFuture::new(0, 1, s);
        f.invoke(&5, result.clone());
        assert_eq!(f.in_flight(), 1);
        f.timeout(&5, result);
        assert_eq!(f.in_flight(), 0);
        assert_eq!(
            rx.recv().unwrap().outcome,
            AsyncOutcome::Failed(AsyncError::Timeout)
        );
        runtime.shutdown();
        assert!(rx.try_recv().is_err(), "the abort completed nothing more");
    }

    #[test]
    fn a_runtime_shutdown_completes_pending_calls_and_refuses_new_ones() {
        let runtime = TokioRuntime::new("t", 1).unwrap();
        let mut f = FutureAsyncFunction::new(runtime.clone(), |_: u32| async move {
            std::future::pending::<Result<Vec<u32>, AsyncError>>().await
        });
        let (s, rx) = sink();
        f.invoke(&1, ResultFuture::new(0, 1, s.clone()));
        runtime.shutdown();
        assert_eq!(f.in_flight(), 0, "the dropped call unregistered itself");
        let shut = AsyncOutcome::Failed(AsyncError::failed(FutureCallError::ShutDown));
        assert_eq!(rx.recv().unwrap().outcome, shut);
        f.invoke(&2, ResultFuture::new(1, 1, s));
        assert_eq!(rx.recv().unwrap().outcome, shut);
        f.close().unwrap();
    }
}
