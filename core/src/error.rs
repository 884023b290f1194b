//! Errors an operator, and so a task, can fail with.
//!
//! Each operation has its own small error type in its module (`StateError`, `TimerError`,
//! `StorageError`, ...); [`OperatorError`] is what the operator lifecycle returns and wraps them.

use crate::state::StateError;
use crate::time::TimerError;

/// The cause a user function or an external system reports: any error type (a `&str` or
/// `String` converts too). The one place a boxed error stands in a signature: user code decides
/// its own error types, and the task keeps the cause (`#[source]`) rather than its text.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an operator failed. The task that runs it fails with this error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// A user function reported a failure.
    #[error("{operator} failed: {source}")]
    User {
        /// The operator's name.
        operator: String,
        /// What the user function reported.
        #[source]
        source: BoxError,
    },
    /// Encoding or decoding operator state failed.
    #[error("state of {operator}: {source}")]
    State {
        /// The operator's name.
        operator: String,
        /// The state error.
        #[source]
        source: StateError,
    },
    /// Registering a timer failed.
    #[error(transparent)]
    Timer(#[from] TimerError),
    /// An event reached an operator that cannot handle it.
    #[error(
        "{operator} received an event it does not handle; send events only to operators that \
         override on_event"
    )]
    UnexpectedEvent {
        /// The operator's name.
        operator: String,
    },
    /// The downstream side of the task's output is gone (the job is being torn down).
    #[error("the output channel is closed; the downstream task is gone (cancelled or failed)")]
    OutputClosed,
    /// A sink could not write, pre-commit or commit.
    #[error("sink {operator}: {source}")]
    Sink {
        /// The sink's name.
        operator: String,
        /// What went wrong (the sink's own error type).
        #[source]
        source: BoxError,
    },
    /// An asynchronous call failed or timed out (after every retry the policy allowed).
    #[error("{operator}: the async call for input {input} failed: {source}")]
    Async {
        /// The async operator's name.
        operator: String,
        /// The input whose call failed, in its state encoding (with its timestamp).
        input: String,
        /// How the call failed.
        #[source]
        source: AsyncError,
    },
    /// The task was cancelled while the operator waited.
    #[error("cancelled")]
    Cancelled,
}

impl OperatorError {
    /// A user-function failure of `operator`, caused by `source` (an error, or a message).
    pub fn user(operator: impl Into<String>, source: impl Into<BoxError>) -> Self {
        OperatorError::User {
            operator: operator.into(),
            source: source.into(),
        }
    }

    /// A failure of the sink `operator`, caused by `source`.
    pub fn sink(operator: impl Into<String>, source: impl Into<BoxError>) -> Self {
        OperatorError::Sink {
            operator: operator.into(),
            source: source.into(),
        }
    }

    /// Whether this error only reports that another task is gone (the job is being torn down):
    /// the output channel closed under the operator, possibly wrapped by a sink or user error.
    pub fn is_output_closed(&self) -> bool {
        match self {
            OperatorError::OutputClosed => true,
            OperatorError::User { source, .. } | OperatorError::Sink { source, .. } => source
                .downcast_ref::<OperatorError>()
                .is_some_and(OperatorError::is_output_closed),
            _ => false,
        }
    }

    /// A state error of `operator`.
    pub fn state(operator: impl Into<String>, source: StateError) -> Self {
        OperatorError::State {
            operator: operator.into(),
            source,
        }
    }
}

/// Runs `f`, turning a panic into its message, so a panic in user code fails the task with the
/// panic text instead of tearing down the thread.
///
/// # Errors
///
/// The panic's message (or `"panic with a non-string payload"`).
///
/// # Examples
///
/// ```
/// use streamtask_core::catch_panic;
///
/// assert_eq!(catch_panic(|| 1 + 1), Ok(2));
/// let err = catch_panic(|| -> i32 { panic!("boom {}", 7) }).unwrap_err();
/// assert_eq!(err, "boom 7");
/// ```
pub fn catch_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&'static str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panic with a non-string payload".to_string()
        }
    })
}

/// Why an asynchronous call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsyncError {
    /// No result arrived within the operator's timeout (across all retry attempts).
    #[error(
        "async call timed out; raise the timeout, or override AsyncFunction::timeout to complete \
         with a fallback"
    )]
    Timeout,
    /// The call itself failed.
    #[error("async call failed: {0}")]
    Failed(String),
}

impl AsyncError {
    /// A failure with `message`.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        AsyncError::Failed(message.to_string())
    }
}
