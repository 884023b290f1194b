//! What starting a vertex's tasks for one attempt takes: the spawn context and the factory
//! types the builder stores (a spawner per vertex, a tail that ends a chain in its writers).

use std::sync::Arc;

use streamtask_core::operator::{BoxOperator, SideOutputs, TaskOutput};
use streamtask_core::task::TaskConfig;
use streamtask_legacy::Fairness;
use streamtask_runtime::channel::Partitioner;

use super::channel_state::Codecs;
use super::wiring::Wiring;
use super::{JobError, RunningTask};
use crate::Model;

/// What a spawner needs besides the task's configuration.
pub(crate) struct SpawnCtx<'a> {
    pub(crate) model: Model,
    pub(crate) subtask: usize,
    pub(crate) wiring: &'a Wiring,
    pub(crate) fairness: Fairness,
    /// The record types' channel-state encodings.
    pub(crate) codecs: &'a Codecs,
    /// How the job's checkpoints align.
    pub(crate) alignment: streamtask_core::Alignment,
    /// The task's metrics, whose live state its writers show a blocked send in.
    pub(crate) metrics: Arc<streamtask_core::metrics::TaskMetrics>,
}

pub(crate) type Spawner =
    Box<dyn Fn(&SpawnCtx<'_>, TaskConfig) -> Result<RunningTask, JobError> + Send + Sync>;
pub(crate) type Tail<T> = Arc<
    dyn Fn(&SpawnCtx<'_>) -> Result<(BoxOperator<T, ()>, Box<dyn TaskOutput<()>>), JobError>
        + Send
        + Sync,
>;
pub(crate) type OpFactory<I, O> = Arc<dyn Fn(&SpawnCtx<'_>) -> BoxOperator<I, O> + Send + Sync>;
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;
/// Makes the partitioner of upstream subtask `n` of an edge.
pub(crate) type PartitionerFactory<T> = Arc<dyn Fn(usize) -> Partitioner<T> + Send + Sync>;

/// Makes a two-input head for a task, with the side outputs installed for it.
pub(crate) type TwoInputHeadFactory<H> = Arc<dyn Fn(&SpawnCtx<'_>, SideOutputs) -> H + Send + Sync>;
