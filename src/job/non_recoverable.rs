//! Failures a restart cannot fix, which fail the job at once instead of using up its restarts
//! (Flink's `SuppressRestartsException`).
//!
//! A restart restores the same state into the same job over the same input and output, so a
//! failure that depends only on those comes back on every attempt: a line of the input that
//! is not a record, a transaction the restored state names that is not in the output
//! directory, an output directory that cannot be written (no permission, a read-only or full
//! file system). Retrying it only repeats the same warning and delays the error.
//!
//! An attempt's failure is non-recoverable when its cause chain (`Error::source`) holds
//!
//! - a [`NonRecoverable`]: a user function or source says so, wrapping its cause;
//! - a [`SinkError`] whose [`is_recoverable`](SinkError::is_recoverable) is false.
//!
//! The executor then ends the run with [`JobError::NonRecoverable`](crate::JobError) whatever
//! its [`RestartStrategy`](crate::RestartStrategy) allows.

use std::error::Error;

use streamtask_core::BoxError;

use crate::sink::SinkError;

/// A failure no restart can fix: wrap a cause in it (in an
/// [`OperatorError::user`](streamtask_core::OperatorError::user), say) and the job fails at
/// once, without restarts, with [`JobError::NonRecoverable`](crate::JobError).
///
/// # Examples
///
/// ```
/// use streamtask::NonRecoverable;
/// use streamtask_core::OperatorError;
///
/// let cause = "line \"x\" is not an order";
/// let error = OperatorError::user("orders", NonRecoverable::new(cause));
/// assert_eq!(error.to_string(), "orders failed: line \"x\" is not an order");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct NonRecoverable {
    #[source]
    source: BoxError,
}

impl NonRecoverable {
    /// Marks `source` as a failure a restart cannot fix.
    pub fn new(source: impl Into<BoxError>) -> Self {
        NonRecoverable {
            source: source.into(),
        }
    }

    /// The cause, handed back.
    pub fn into_inner(self) -> BoxError {
        self.source
    }
}

/// Whether `error`'s cause chain says that a restart cannot fix it (see the module doc).
pub(crate) fn restart_cannot_fix(error: &(dyn Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<NonRecoverable>() {
            return true;
        }
        if error
            .downcast_ref::<SinkError>()
            .is_some_and(|e| !e.is_recoverable())
        {
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::task::TaskError;
    use streamtask_core::{OperatorError, task::TaskFailure};

    #[test]
    fn found_through_the_task_and_operator_errors() {
        let failure = TaskFailure::new(
            "t",
            OperatorError::user("orders", NonRecoverable::new("bad line")),
        );
        assert!(restart_cannot_fix(&failure));
        let plain = TaskFailure::new("t", OperatorError::user("orders", "bad line"));
        assert!(!restart_cannot_fix(&plain));
        assert!(!restart_cannot_fix(&TaskError::Panic("boom".into())));
    }

    #[test]
    fn a_lost_transaction_or_a_full_disk_in_a_sink_cannot_be_fixed_by_a_restart() {
        let lost = SinkError::MissingTransaction {
            subtask: 0,
            txn: 42,
            pending: "a".into(),
            committed: "b".into(),
        };
        assert!(restart_cannot_fix(&TaskError::from(OperatorError::sink(
            "sink", lost
        ))));
        let full = SinkError::Io {
            action: "write",
            path: "out".into(),
            source: std::io::Error::from(std::io::ErrorKind::StorageFull),
        };
        assert!(restart_cannot_fix(&TaskError::from(OperatorError::sink(
            "sink", full
        ))));
        let interrupted = SinkError::Io {
            action: "write",
            path: "out".into(),
            source: std::io::Error::from(std::io::ErrorKind::Interrupted),
        };
        assert!(!restart_cannot_fix(&TaskError::from(OperatorError::sink(
            "sink",
            interrupted
        ))));
    }
}
