//! Retry policies for async calls: when to call again, and after how long.
//!
//! A policy retries an attempt whose outcome matches one of its predicates (a result predicate,
//! an error predicate) while retries remain. The operator's timeout spans all attempts; when it
//! fires, a pending retry is dropped and the function's `timeout` hook decides. When no retry
//! remains, the last outcome (result or error) is final.
//!
//! Unlike Flink's exponential strategy, which keeps the last delay in a field shared by every
//! in-flight element, the delay here is a pure function of the attempt number, so concurrent
//! elements do not disturb each other's backoff.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::function::{AsyncError, AsyncOutcome};

/// How long to wait before each retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backoff {
    /// The same delay before every retry.
    Fixed(Duration),
    /// `initial`, then multiplied by `multiplier` before each further retry, capped at `max`.
    Exponential {
        /// Delay before the first retry.
        initial: Duration,
        /// The cap.
        max: Duration,
        /// Growth factor, at least 1.
        multiplier: f64,
    },
}

/// A retry policy was configured wrongly.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RetryConfigError {
    /// Zero retries.
    #[error("a retry policy needs at least one retry; use RetryPolicy::none() for no retries")]
    ZeroRetries,
    /// A zero delay.
    #[error("the retry delay must be positive; use at least 1 ms")]
    ZeroDelay,
    /// A multiplier below 1.
    #[error("the backoff multiplier is {0}; use a multiplier of at least 1.0")]
    Multiplier(f64),
    /// A cap below the initial delay.
    #[error("the maximum delay is shorter than the initial one; raise max or lower initial")]
    MaxBelowInitial,
}

type ResultPredicate<O> = Arc<dyn Fn(&[O]) -> bool + Send + Sync>;
type ErrorPredicate = Arc<dyn Fn(&AsyncError) -> bool + Send + Sync>;

/// When and how often to call an async function again.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_core::async_io::RetryPolicy;
/// use streamtask_core::function::{AsyncError, AsyncOutcome};
///
/// let policy = RetryPolicy::<u32>::fixed_delay(2, Duration::from_millis(10))
///     .unwrap()
///     .retry_if_result(|r| r.is_empty())
///     .retry_if_error(|_| true);
/// let empty = AsyncOutcome::Results(vec![]);
/// assert_eq!(policy.next_delay(1, &empty), Some(Duration::from_millis(10)));
/// assert_eq!(policy.next_delay(2, &empty), Some(Duration::from_millis(10)));
/// assert_eq!(policy.next_delay(3, &empty), None, "two retries used up: final");
/// assert_eq!(policy.next_delay(1, &AsyncOutcome::Results(vec![1])), None);
/// ```
pub struct RetryPolicy<O> {
    max_retries: u32,
    backoff: Backoff,
    on_result: Option<ResultPredicate<O>>,
    on_error: Option<ErrorPredicate>,
}

impl<O> RetryPolicy<O> {
    /// No retries: every outcome is final.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            backoff: Backoff::Fixed(Duration::ZERO),
            on_result: None,
            on_error: None,
        }
    }

    /// Up to `max_retries` retries, `delay` apart. Add predicates to say which outcomes retry.
    ///
    /// # Errors
    ///
    /// [`RetryConfigError`] for zero retries or a zero delay.
    pub fn fixed_delay(max_retries: u32, delay: Duration) -> Result<Self, RetryConfigError> {
        if max_retries == 0 {
            return Err(RetryConfigError::ZeroRetries);
        }
        if delay.is_zero() {
            return Err(RetryConfigError::ZeroDelay);
        }
        Ok(RetryPolicy {
            max_retries,
            backoff: Backoff::Fixed(delay),
            on_result: None,
            on_error: None,
        })
    }

    /// Up to `max_retries` retries with exponential backoff from `initial`, capped at `max`.
    ///
    /// # Errors
    ///
    /// [`RetryConfigError`] for zero retries, a zero delay, a multiplier below 1, or `max <
    /// initial`.
    pub fn exponential_backoff(
        max_retries: u32,
        initial: Duration,
        max: Duration,
        multiplier: f64,
    ) -> Result<Self, RetryConfigError> {
        if max_retries == 0 {
            return Err(RetryConfigError::ZeroRetries);
        }
        if initial.is_zero() {
            return Err(RetryConfigError::ZeroDelay);
        }
        if multiplier.is_nan() || multiplier < 1.0 {
            return Err(RetryConfigError::Multiplier(multiplier));
        }
        if max < initial {
            return Err(RetryConfigError::MaxBelowInitial);
        }
        Ok(RetryPolicy {
            max_retries,
            backoff: Backoff::Exponential {
                initial,
                max,
                multiplier,
            },
            on_result: None,
            on_error: None,
        })
    }

    /// Retries attempts whose results satisfy `predicate` (e.g. "empty").
    pub fn retry_if_result(
        mut self,
        predicate: impl Fn(&[O]) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.on_result = Some(Arc::new(predicate));
        self
    }

    /// Retries attempts that failed with an error satisfying `predicate`.
    pub fn retry_if_error(
        mut self,
        predicate: impl Fn(&AsyncError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Some(Arc::new(predicate));
        self
    }

    /// Whether this policy can retry anything (retries configured and a predicate set).
    pub fn is_enabled(&self) -> bool {
        self.max_retries > 0 && (self.on_result.is_some() || self.on_error.is_some())
    }

    /// Number of retries allowed (so up to `max_retries + 1` calls).
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The backoff.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// Given that `attempts` calls were made and the last one ended with `outcome`: the delay
    /// before calling again, or `None` if the outcome is final.
    pub fn next_delay(&self, attempts: u32, outcome: &AsyncOutcome<O>) -> Option<Duration> {
        if !self.is_enabled() || attempts > self.max_retries {
            return None;
        }
        let wants_retry = match outcome {
            AsyncOutcome::Results(values) => self.on_result.as_ref().is_some_and(|p| p(values)),
            AsyncOutcome::Failed(error) => self.on_error.as_ref().is_some_and(|p| p(error)),
        };
        wants_retry.then(|| self.delay_before_retry(attempts))
    }

    /// The delay before retry number `retry` (1 for the first retry).
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        match self.backoff {
            Backoff::Fixed(d) => d,
            Backoff::Exponential {
                initial,
                max,
                multiplier,
            } => {
                let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
                let factor = multiplier.powi(exponent);
                let secs = (initial.as_secs_f64() * factor).min(max.as_secs_f64());
                Duration::from_secs_f64(secs).min(max)
            }
        }
    }
}

impl<O> Clone for RetryPolicy<O> {
    fn clone(&self) -> Self {
        RetryPolicy {
            max_retries: self.max_retries,
            backoff: self.backoff,
            on_result: self.on_result.clone(),
            on_error: self.on_error.clone(),
        }
    }
}

impl<O> Default for RetryPolicy<O> {
    fn default() -> Self {
        RetryPolicy::none()
    }
}

impl<O> fmt::Debug for RetryPolicy<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("on_result", &self.on_result.is_some())
            .field("on_error", &self.on_error.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn exponential_backoff_grows_and_caps() {
        let p = RetryPolicy::<u8>::exponential_backoff(5, MS(10), MS(50), 2.0)
            .unwrap()
            .retry_if_error(|_| true);
        let delays: Vec<Duration> = (1..=5).map(|n| p.delay_before_retry(n)).collect();
        assert_eq!(delays, vec![MS(10), MS(20), MS(40), MS(50), MS(50)]);
        let err = AsyncOutcome::Failed(AsyncError::failed("x"));
        assert_eq!(p.next_delay(5, &err), Some(MS(50)));
        assert_eq!(p.next_delay(6, &err), None);
    }

    #[test]
    fn predicates_decide_what_retries() {
        let p = RetryPolicy::<u8>::fixed_delay(3, MS(1))
            .unwrap()
            .retry_if_error(|e| matches!(e, AsyncError::Failed(m) if m == "transient"));
        let transient = AsyncOutcome::Failed(AsyncError::failed("transient"));
        let fatal = AsyncOutcome::Failed(AsyncError::failed("fatal"));
        assert!(p.next_delay(1, &transient).is_some());
        assert!(p.next_delay(1, &fatal).is_none());
        assert!(
            p.next_delay(1, &AsyncOutcome::Results(vec![])).is_none(),
            "no result predicate"
        );
    }

    #[test]
    fn a_policy_without_predicates_is_disabled() {
        let p = RetryPolicy::<u8>::fixed_delay(3, MS(1)).unwrap();
        assert!(!p.is_enabled());
        assert!(!RetryPolicy::<u8>::none().is_enabled());
        assert!(
            p.next_delay(1, &AsyncOutcome::Failed(AsyncError::Timeout))
                .is_none()
        );
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        assert_eq!(
            RetryPolicy::<u8>::fixed_delay(0, MS(1)).unwrap_err(),
            RetryConfigError::ZeroRetries
        );
        assert_eq!(
            RetryPolicy::<u8>::fixed_delay(1, MS(0)).unwrap_err(),
            RetryConfigError::ZeroDelay
        );
        assert_eq!(
            RetryPolicy::<u8>::exponential_backoff(1, MS(1), MS(5), 0.5).unwrap_err(),
            RetryConfigError::Multiplier(0.5)
        );
        assert_eq!(
            RetryPolicy::<u8>::exponential_backoff(1, MS(10), MS(5), 2.0).unwrap_err(),
            RetryConfigError::MaxBelowInitial
        );
    }
}
