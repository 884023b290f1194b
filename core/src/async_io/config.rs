//! The async operator's configuration, validated once for every model.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::batch::BatchConfig;
use super::retry::RetryPolicy;

/// In which order results leave the async operator.
///
/// | mode | results leave | calls in flight | a watermark leaves |
/// |---|---|---|---|
/// | `Ordered` | in input order | up to the capacity | after every record before it |
/// | `Unordered` | as they complete | up to the capacity | after every record before it |
/// | `KeyOrdered` | in input order per key, as they complete across keys | one per key, up to the capacity | after every record before it |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OutputMode {
    /// Results leave in input order.
    Ordered,
    /// Results leave as they complete, but never across a watermark.
    Unordered,
    /// Results of one key leave in input order; keys proceed independently (Flink 2.1's
    /// key-ordered mode, FLINK-37874). A record whose key has a call in flight waits (it counts
    /// against the capacity) until that call is final, so the calls of one key also *run* in
    /// input order: the external system sees a key's requests one at a time, in order. Needs a
    /// key: [`AsyncKey`](super::AsyncKey), or a keyed stream's key in the job API.
    ///
    /// The capacity counts every record from its admission to its emission, waiting or called,
    /// as Flink's key-ordered operators count theirs: it bounds what the operator holds in all,
    /// so a hot key can never pile up records beyond it, and there is no second bound to size.
    /// The price is that records waiting behind busy keys take slots calls could use, so even
    /// with many more keys than the capacity the calls in flight stay somewhat below it
    /// (`streamtask bench` measures it: `async_key_ordered_littles_law`).
    KeyOrdered,
}

/// An async operator was configured wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AsyncConfigError {
    /// Capacity 0.
    #[error("the async operator's capacity is 0; allow at least 1 element in flight")]
    ZeroCapacity,
    /// A zero timeout.
    #[error("the async timeout is zero; give a positive timeout or none at all")]
    ZeroTimeout,
    /// Retries without a timeout.
    #[error(
        "retries need a timeout (it spans all attempts); set one with AsyncConfig::with_timeout"
    )]
    RetryWithoutTimeout,
    /// Key-ordered mode without a key to order by.
    #[error(
        "key-ordered async I/O needs a key; key the stream first (key_by(..).async_wait) or give \
         the operator an AsyncKey"
    )]
    KeyOrderedWithoutKey,
    /// Batches of 0 records.
    #[error("the async batch size is 0; allow at least 1 record per batch")]
    ZeroBatchSize,
}

/// How an async operator runs: output mode, capacity (watermarks count), timeout and retries.
///
/// A record's timeout spans all its attempts and starts when its first attempt does (in
/// key-ordered mode a record waiting for its key's earlier call has no timeout running yet).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, OutputMode, RetryPolicy};
///
/// let ok = AsyncConfig::<u32>::new(OutputMode::Ordered, 100).with_timeout(Duration::from_secs(1));
/// assert!(ok.validate().is_ok());
///
/// let zero = AsyncConfig::<u32>::new(OutputMode::Unordered, 0);
/// assert_eq!(zero.validate(), Err(AsyncConfigError::ZeroCapacity));
///
/// let retry = RetryPolicy::fixed_delay(3, Duration::from_millis(5)).unwrap().retry_if_error(|_| true);
/// let no_timeout = AsyncConfig::<u32>::new(OutputMode::Ordered, 10).with_retry(retry);
/// assert_eq!(no_timeout.validate(), Err(AsyncConfigError::RetryWithoutTimeout));
/// ```
pub struct AsyncConfig<O> {
    /// Ordered, unordered or key-ordered.
    pub mode: OutputMode,
    /// Elements (records and watermarks) in flight at most.
    pub capacity: usize,
    /// Per-record timeout on processing time, spanning all attempts; `None` for none.
    pub timeout: Option<Duration>,
    /// When to retry.
    pub retry: RetryPolicy<O>,
    /// Batched mode: when a batch of calls closes; `None` starts each call on its own.
    pub batch: Option<BatchConfig>,
}

impl<O> AsyncConfig<O> {
    /// `mode` with `capacity`, no timeout, no retries.
    pub fn new(mode: OutputMode, capacity: usize) -> Self {
        AsyncConfig {
            mode,
            capacity,
            timeout: None,
            retry: RetryPolicy::none(),
            batch: None,
        }
    }

    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy<O>) -> Self {
        self.retry = retry;
        self
    }

    /// Batched mode: the calls of records are started in batches closed as `batch` says (at
    /// its size, or its max wait after the first record joined), each batch with one call of
    /// the function's [`flush`](crate::function::AsyncFunction::flush), one deadline (the
    /// timeout runs from the batch's call) and its records retried together. Run an
    /// [`AsyncBatchFunction`](super::AsyncBatchFunction) through
    /// [`BatchedAsyncFunction`](super::BatchedAsyncFunction) in this mode.
    pub fn with_batch(mut self, batch: BatchConfig) -> Self {
        self.batch = Some(batch);
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] for capacity 0, a zero timeout, retries without a timeout, or a
    /// batch size of 0.
    pub fn validate(&self) -> Result<(), AsyncConfigError> {
        if self.capacity == 0 {
            return Err(AsyncConfigError::ZeroCapacity);
        }
        if self.batch.is_some_and(|b| b.size == 0) {
            return Err(AsyncConfigError::ZeroBatchSize);
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(AsyncConfigError::ZeroTimeout);
        }
        if self.retry.is_enabled() && self.timeout.is_none() {
            return Err(AsyncConfigError::RetryWithoutTimeout);
        }
        Ok(())
    }

    /// The timeout in whole milliseconds (rounded up), as timers need it.
    pub fn timeout_millis(&self) -> Option<i64> {
        self.timeout
            .map(|t| i64::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i64::MAX))
    }
}

impl<O> Clone for AsyncConfig<O> {
    fn clone(&self) -> Self {
        AsyncConfig {
            mode: self.mode,
            capacity: self.capacity,
            timeout: self.timeout,
            retry: self.retry.clone(),
            batch: self.batch,
        }
    }
}

impl<O> fmt::Debug for AsyncConfig<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncConfig")
            .field("mode", &self.mode)
            .field("capacity", &self.capacity)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("batch", &self.batch)
            .finish()
    }
}
