//! The job graph while it is built: vertices, edges, the state identities, the side outputs
//! and what runs when the job is built; [`StreamEnvironment`] holds it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use streamtask_core::keygroup::DEFAULT_MAX_PARALLELISM;
use streamtask_legacy::SourceContextConfig;

use super::JobError;
use super::channel_state::Codecs;
use super::plan::PlannedTask;
use super::side_channels::SideRegistry;
use super::spawn::Spawner;
use super::wiring::{EdgeChannels, EdgePattern};

pub(crate) type EdgeFactory =
    Box<dyn Fn(EdgePattern, usize, usize, usize) -> Result<EdgeChannels, JobError> + Send + Sync>;
/// One task vertex: `parallelism` tasks named `<name>#<subtask>`.
pub(crate) struct VertexSpec {
    pub(crate) name: String,
    pub(crate) parallelism: usize,
    pub(crate) is_source: bool,
    pub(crate) spawn: Spawner,
    pub(crate) plan: PlannedTask,
}

/// One edge between two vertices; `create` makes its channels for an attempt.
pub(crate) struct EdgeSpec {
    pub(crate) pattern: EdgePattern,
    pub(crate) up: usize,
    pub(crate) down: usize,
    pub(crate) create: EdgeFactory,
    /// The upstream vertex.
    pub(crate) from: String,
    /// The downstream vertex whose input gate reads the edge; empty for an iteration's
    /// feedback edge, which its head reads outside the gate. A gate reads its edges in the
    /// order they were made (see [`EdgeSpec::upstream_of`]).
    pub(crate) to: String,
}

impl EdgeSpec {
    /// The upstream tasks of downstream subtask `subtask`'s channels of this edge, in the
    /// order its gate reads them (as `EdgeChannels::create` wires them).
    pub(crate) fn upstream_of(&self, subtask: usize) -> Vec<String> {
        let task = |i: usize| format!("{}#{i}", self.from);
        match self.pattern {
            EdgePattern::Forward => (subtask < self.up.min(self.down))
                .then(|| task(subtask))
                .into_iter()
                .collect(),
            EdgePattern::Pointwise => (0..self.up)
                .filter(|&i| {
                    if self.up <= self.down {
                        subtask * self.up / self.down == i
                    } else {
                        i * self.down / self.up == subtask
                    }
                })
                .map(task)
                .collect(),
            EdgePattern::AllToAll => (0..self.up).map(task).collect(),
        }
    }
}

pub(crate) type Finalizer = Box<dyn Fn() -> Result<(), JobError> + Send + Sync>;

pub(crate) struct GraphBuilder {
    pub(crate) source_context: SourceContextConfig,
    /// Max parallelism and operator uids (see `identity.rs`).
    pub(crate) ids: StateIds,
    pub(crate) vertices: Vec<VertexSpec>,
    pub(crate) edges: Vec<EdgeSpec>,
    /// The side outputs offered by the operator at `(vertex, chain index)`.
    pub(crate) side_outputs: HashMap<(String, usize), Arc<SideRegistry>>,
    pub(crate) finalizers: Vec<Finalizer>,
    /// The FLIP-27 split enumerators (see `from_source.rs`).
    pub(crate) enumerators: Vec<Arc<dyn crate::source::CoordinatorHooks>>,
    /// The watermark alignment groups the job's split sources share.
    pub(crate) alignment_groups: crate::source::AlignmentGroups,
    pub(crate) sink_dirs: Vec<PathBuf>,
    pub(crate) names: HashSet<String>,
    pub(crate) errors: Vec<JobError>,
    /// The channel-state encodings of the record types that cross between tasks.
    pub(crate) codecs: Codecs,
    /// Whether the job has an iteration (its feedback edge has no channel state).
    pub(crate) has_iteration: bool,
}

/// What the builder records about state identity.
#[derive(Debug, Clone)]
pub(crate) struct StateIds {
    /// The number of key groups of every keyed state of the job.
    pub(crate) max_parallelism: u32,
    /// Explicit uids: `(vertex, None)` for a vertex's source, `(vertex, Some(i))` for the
    /// operator at chain index `i`.
    pub(crate) uids: BTreeMap<(String, Option<usize>), String>,
    /// The iteration heads: vertices whose snapshots hold a feedback log.
    pub(crate) feedback_logs: BTreeSet<String>,
    /// What each source vertex's source reads, as declared with
    /// [`DataStream::source_identity`]; a savepoint records it and a restore compares it.
    pub(crate) source_identities: BTreeMap<String, String>,
}

impl Default for StateIds {
    fn default() -> Self {
        StateIds {
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            uids: BTreeMap::new(),
            feedback_logs: BTreeSet::new(),
            source_identities: BTreeMap::new(),
        }
    }
}
