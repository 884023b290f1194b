//! An [`AsyncFunction`] the test completes by hand, from its own thread.

use std::fmt;
use std::time::{Duration, Instant};

use crate::function::{AsyncError, AsyncFunction, ResultFuture};
use crate::sync::{Arc, Condvar, Mutex};

/// How long [`ManualCalls::wait_for_invocations`] waits before it panics: a guard against hangs,
/// never a timing claim.
pub const MANUAL_CALL_GUARD: Duration = Duration::from_secs(60);

/// One call the operator made: its input, attempt and future.
#[derive(Debug)]
pub struct ManualCall<I, O> {
    /// The input.
    pub input: I,
    /// The attempt (1 for the first call, then one more per retry).
    pub attempt: u32,
    /// The future to complete.
    pub result: ResultFuture<O>,
}

impl<I: Clone, O> Clone for ManualCall<I, O> {
    fn clone(&self) -> Self {
        ManualCall {
            input: self.input.clone(),
            attempt: self.attempt,
            result: self.result.clone(),
        }
    }
}

struct Recorded<I, O> {
    invocations: Vec<ManualCall<I, O>>,
    timeouts: Vec<ManualCall<I, O>>,
    opened: usize,
    closed: usize,
}

// std `Arc`: a trait object needs unsized coercion, which loom's `Arc` lacks.
type Fallback<I, O> = std::sync::Arc<dyn Fn(&I) -> Vec<O> + Send + Sync>;

/// An [`AsyncFunction`] that only records its calls; the test completes them through the
/// [`ManualCalls`] handle, from any thread, in any order. Its `timeout` hook records the call
/// and completes it with [`AsyncError::Timeout`] (the default behaviour), or with a fallback
/// given by [`with_timeout_fallback`](Self::with_timeout_fallback).
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamtask_core::function::{AsyncFunction, AsyncOutcome, Completion, CompletionSink, ResultFuture};
/// use streamtask_core::testing::ManualAsyncFunction;
///
/// #[derive(Default)]
/// struct Keep(Mutex<Vec<Completion<String>>>);
/// impl CompletionSink<String> for Keep {
///     fn deliver(&self, c: Completion<String>) {
///         self.0.lock().unwrap().push(c);
///     }
/// }
///
/// let mut function = ManualAsyncFunction::<u32, String>::new();
/// let calls = function.calls();
/// let sink = Arc::new(Keep::default());
/// function.invoke(&7, ResultFuture::new(0, 1, sink.clone()));
/// assert_eq!(calls.wait_for_invocations(1)[0].input, 7);
/// assert!(calls.complete(&7, vec!["seven".to_string()]));
/// let got = sink.0.lock().unwrap();
/// assert_eq!(got[0].outcome, AsyncOutcome::Results(vec!["seven".to_string()]));
/// ```
pub struct ManualAsyncFunction<I, O> {
    calls: ManualCalls<I, O>,
    fallback: Option<Fallback<I, O>>,
    /// The timeout hook only records the call; the test completes its future.
    defer_timeout: bool,
}

/// The test's side of a [`ManualAsyncFunction`]: what was called, and the means to complete it.
/// Cloneable; every clone sees the same calls.
pub struct ManualCalls<I, O> {
    shared: Arc<(Mutex<Recorded<I, O>>, Condvar)>,
}

impl<I, O> ManualAsyncFunction<I, O> {
    /// A function that records every call.
    pub fn new() -> Self {
        ManualAsyncFunction {
            calls: ManualCalls {
                shared: Arc::new((
                    Mutex::new(Recorded {
                        invocations: Vec::new(),
                        timeouts: Vec::new(),
                        opened: 0,
                        closed: 0,
                    }),
                    Condvar::new(),
                )),
            },
            fallback: None,
            defer_timeout: false,
        }
    }

    /// Its timeout hook completes with `fallback(input)` instead of failing.
    pub fn with_timeout_fallback(
        mut self,
        fallback: impl Fn(&I) -> Vec<O> + Send + Sync + 'static,
    ) -> Self {
        self.fallback = Some(std::sync::Arc::new(fallback));
        self
    }

    /// Its timeout hook only records the call (with the future it was handed) and completes
    /// nothing: the test completes it later through [`ManualCalls::timeouts`], as a hook that
    /// starts an asynchronous fallback would.
    pub fn with_deferred_timeout(mut self) -> Self {
        self.defer_timeout = true;
        self
    }

    /// The handle to its calls.
    pub fn calls(&self) -> ManualCalls<I, O> {
        self.calls.clone()
    }
}

impl<I, O> Default for ManualAsyncFunction<I, O> {
    fn default() -> Self {
        ManualAsyncFunction::new()
    }
}

impl<I, O> AsyncFunction for ManualAsyncFunction<I, O>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    type In = I;
    type Out = O;

    fn open(&mut self) -> Result<(), crate::OperatorError> {
        self.calls.update(|r| r.opened += 1);
        Ok(())
    }

    fn invoke(&mut self, input: &I, result: ResultFuture<O>) {
        let call = ManualCall {
            input: input.clone(),
            attempt: result.attempt(),
            result,
        };
        self.calls.update(|r| r.invocations.push(call));
    }

    fn timeout(&mut self, input: &I, result: ResultFuture<O>) {
        let call = ManualCall {
            input: input.clone(),
            attempt: result.attempt(),
            result: result.clone(),
        };
        self.calls.update(|r| r.timeouts.push(call));
        if self.defer_timeout {
            return;
        }
        match &self.fallback {
            Some(fallback) => result.complete(fallback(input)),
            None => result.complete_exceptionally(AsyncError::Timeout),
        };
    }

    fn close(&mut self) -> Result<(), crate::OperatorError> {
        self.calls.update(|r| r.closed += 1);
        Ok(())
    }
}

impl<I, O> fmt::Debug for ManualAsyncFunction<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualAsyncFunction")
            .field("calls", &self.calls)
            .field("fallback", &self.fallback.is_some())
            .field("defer_timeout", &self.defer_timeout)
            .finish()
    }
}

impl<I, O> ManualCalls<I, O> {
    fn update(&self, f: impl FnOnce(&mut Recorded<I, O>)) {
        let (lock, changed) = &*self.shared;
        f(&mut lock.lock());
        changed.notify_all();
    }

    /// Number of `invoke` calls so far.
    pub fn invocation_count(&self) -> usize {
        self.shared.0.lock().invocations.len()
    }

    /// How often `open` and `close` were called.
    pub fn opened_and_closed(&self) -> (usize, usize) {
        let r = self.shared.0.lock();
        (r.opened, r.closed)
    }
}

impl<I: Clone, O> ManualCalls<I, O> {
    /// Every `invoke` call so far, in call order.
    pub fn invocations(&self) -> Vec<ManualCall<I, O>> {
        self.shared.0.lock().invocations.clone()
    }

    /// Every `timeout` call so far, in call order.
    pub fn timeouts(&self) -> Vec<ManualCall<I, O>> {
        self.shared.0.lock().timeouts.clone()
    }

    /// Waits until at least `n` `invoke` calls were made and returns them all.
    ///
    /// # Panics
    ///
    /// If they were not made within [`MANUAL_CALL_GUARD`] (a hang guard).
    pub fn wait_for_invocations(&self, n: usize) -> Vec<ManualCall<I, O>> {
        self.wait_for("async invocations", n, |r| &r.invocations)
    }

    /// Waits until the `timeout` hook was called at least `n` times and returns those calls.
    ///
    /// # Panics
    ///
    /// If it was not within [`MANUAL_CALL_GUARD`] (a hang guard).
    pub fn wait_for_timeouts(&self, n: usize) -> Vec<ManualCall<I, O>> {
        self.wait_for("timeout hook calls", n, |r| &r.timeouts)
    }

    fn wait_for(
        &self,
        what: &str,
        n: usize,
        list: impl Fn(&Recorded<I, O>) -> &Vec<ManualCall<I, O>>,
    ) -> Vec<ManualCall<I, O>> {
        let (lock, changed) = &*self.shared;
        let deadline = Instant::now() + MANUAL_CALL_GUARD;
        let mut recorded = lock.lock();
        while list(&recorded).len() < n {
            let now = Instant::now();
            assert!(
                now < deadline,
                "waited for {n} {what}, saw {}",
                list(&recorded).len()
            );
            changed.wait_for(&mut recorded, deadline - now);
        }
        list(&recorded).clone()
    }
}

impl<I: Clone + PartialEq, O> ManualCalls<I, O> {
    /// The latest call for `input`.
    pub fn latest(&self, input: &I) -> Option<ManualCall<I, O>> {
        let recorded = self.shared.0.lock();
        recorded
            .invocations
            .iter()
            .rev()
            .find(|c| c.input == *input)
            .cloned()
    }

    /// Completes the latest call for `input` with `values`; returns whether that call won
    /// (`false` if it was completed before, or there is no call for `input`).
    pub fn complete(&self, input: &I, values: Vec<O>) -> bool {
        self.latest(input)
            .is_some_and(|c| c.result.complete(values))
    }

    /// Completes the latest call for `input` with `error`; returns whether that call won.
    pub fn fail(&self, input: &I, error: AsyncError) -> bool {
        self.latest(input)
            .is_some_and(|c| c.result.complete_exceptionally(error))
    }
}

impl<I, O> Clone for ManualCalls<I, O> {
    fn clone(&self) -> Self {
        ManualCalls {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<I, O> fmt::Debug for ManualCalls<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.shared.0.lock();
        f.debug_struct("ManualCalls")
            .field("invocations", &r.invocations.len())
            .field("timeouts", &r.timeouts.len())
            .finish()
    }
}
