//! The running tasks of a job, whatever their model: every model's task is the kit's
//! [`TaskHandle`](streamtask_runtime::TaskHandle), with one control surface and one
//! cancel/join contract, so the executor needs no per-model code.

/// A running task of any model.
pub(crate) type RunningTask = streamtask_runtime::TaskHandle;
