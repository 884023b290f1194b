//! The job builder: a DataStream-like API that decides, per model, how operators chain into
//! tasks and how tasks connect.
//!
//! A job is built for one [`Model`], because chaining depends on it:
//!
//! | rule | legacy | mailbox | bridge |
//! |---|---|---|---|
//! | legacy `SourceFunction` | on the task thread | on its own thread through a `HandoffReader` (the plan says so) | on its own thread, mails under the lock |
//! | `SourceReader` (also `from_iter`, `from_sequence`) | polled under the lock through a `ReaderSource` (the plan says so) | on the task thread | on the task thread |
//! | async operator | always the head of a new chain (FLINK-13063) | chains anywhere | chains anywhere except behind a legacy source (FLINK-16219) |
//! | `key_by` / parallelism change | a new task behind hash-partitioned channels | same | same |
//! | [`DataStream::start_new_chain`] | a new task behind forward channels | same | same |
//!
//! Internally the stream being built is an open chain segment: a head (a source, or the input of
//! a shuffle) and the operators chained behind it so far. Ending the segment (at a shuffle or a
//! sink) turns it into a vertex: a spawner that starts one task per subtask for an attempt, with
//! the chain erased to `BoxOperator<In, ()>` and typed channels taken from that attempt's wiring.
//!
//! This module holds [`StreamEnvironment`], where a job is built, and [`JobGraph`], what
//! building it gives; the streams are in `stream.rs`, `keyed.rs` and `connect.rs`, the graph's
//! state in `builder.rs`, the segments in `segment.rs`.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use streamtask_legacy::SourceContextConfig;

use super::JobError;
use super::builder::{EdgeSpec, Finalizer, GraphBuilder, StateIds, VertexSpec};
use super::channel_state::Codecs;
use super::plan::JobPlan;
use crate::Model;

/// Where a job is built: add sources, transform the streams, end them in sinks, then
/// [`build`](Self::build).
///
/// # Examples
///
/// ```
/// use streamtask::{JobConfig, Model, StreamEnvironment};
/// use streamtask::sink::CollectHandle;
/// # use streamtask_core::OperatorError;
/// # use streamtask_legacy::{SourceContext, SourceFunction};
/// # struct Numbers(u64);
/// # impl SourceFunction for Numbers {
/// #     type Out = u64;
/// #     type State = u64;
/// #     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
/// #         while !ctx.is_cancelled() {
/// #             let mut locked = ctx.lock();
/// #             let n = *locked.state();
/// #             if n == self.0 { return Ok(()); }
/// #             locked.collect(n)?;
/// #             *locked.state_mut() = n + 1;
/// #         }
/// #         Ok(())
/// #     }
/// # }
///
/// let env = StreamEnvironment::new(Model::Legacy);
/// let out = CollectHandle::new();
/// env.add_source("numbers", |_| Numbers(100))
///     .map("square", |n: u64| n * n)
///     .key_by(|n: &u64| n % 4)
///     .map_with_parallelism("plus one", 2, |n: u64| n + 1)
///     .collect_sink("collect", &out);
/// let job = env.build().unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let result = job.run(&JobConfig::new(dir.path())).unwrap();
/// assert_eq!(result.restarts, 0);
/// let mut got = out.committed();
/// got.sort();
/// assert_eq!(got.len(), 100);
/// assert_eq!(got[1], 2);
/// ```
#[derive(Clone)]
pub struct StreamEnvironment {
    pub(crate) model: Model,
    pub(crate) graph: Rc<RefCell<GraphBuilder>>,
}

impl StreamEnvironment {
    /// An empty job for `model`. Legacy sources get event-time contexts (their own timestamps
    /// and watermarks) unless [`set_source_context`](Self::set_source_context) says otherwise.
    pub fn new(model: Model) -> Self {
        StreamEnvironment {
            model,
            graph: Rc::new(RefCell::new(GraphBuilder {
                source_context: SourceContextConfig::event_time(),
                ids: StateIds::default(),
                vertices: Vec::new(),
                edges: Vec::new(),
                side_outputs: HashMap::new(),
                finalizers: Vec::new(),
                enumerators: Vec::new(),
                alignment_groups: crate::source::AlignmentGroups::default(),
                sink_dirs: Vec::new(),
                names: HashSet::new(),
                errors: Vec::new(),
                codecs: Codecs::default(),
                has_iteration: false,
            })),
        }
    }

    /// The context flavour (processing, ingestion or event time) of legacy sources added
    /// after this call.
    pub fn set_source_context(&self, context: SourceContextConfig) {
        self.graph.borrow_mut().source_context = context;
    }

    /// The model the job is built for.
    pub fn model(&self) -> Model {
        self.model
    }

    pub(crate) fn claim_name(&self, name: &str) {
        let mut g = self.graph.borrow_mut();
        if !g.names.insert(name.to_string()) {
            g.errors.push(JobError::DuplicateName(name.to_string()));
        }
    }

    pub(crate) fn fail(&self, error: JobError) {
        self.graph.borrow_mut().errors.push(error);
    }

    /// Finishes the job. Every stream must have ended in a sink.
    ///
    /// # Errors
    ///
    /// The first problem met while building: a parallelism of 0, a duplicate name, an
    /// invalid async configuration, no sink.
    pub fn build(self) -> Result<JobGraph, JobError> {
        let graph = Rc::try_unwrap(self.graph)
            .map_err(|_| {
                JobError::Config(
                    "a stream is still open; end every stream in a sink before build()".into(),
                )
            })?
            .into_inner();
        if let Some(error) = graph.errors.into_iter().next() {
            return Err(error);
        }
        if graph.vertices.is_empty() {
            return Err(JobError::NoSink);
        }
        Ok(JobGraph {
            model: self.model,
            ids: graph.ids,
            vertices: graph.vertices,
            edges: graph.edges,
            finalizers: graph.finalizers,
            enumerators: graph.enumerators,
            sink_dirs: graph.sink_dirs,
            codecs: graph.codecs,
            has_iteration: graph.has_iteration,
        })
    }

    /// Lets records of type `T` be stored as channel state, which unaligned checkpoints need
    /// for every record type that crosses from one task into another (the job refuses to
    /// start otherwise, naming the type). Types the job API already asks serde of (a source's
    /// output, an async function's input, a collecting sink's input) are registered by it.
    pub fn register_channel_type<T>(&self) -> &Self
    where
        T: Serialize + DeserializeOwned + 'static,
    {
        self.graph.borrow().codecs.register::<T>();
        self
    }
}

impl fmt::Debug for StreamEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.graph.borrow();
        f.debug_struct("StreamEnvironment")
            .field("model", &self.model)
            .field("vertices", &g.vertices.len())
            .finish()
    }
}

/// A built job: vertices and edges for one model, runnable any number of times with
/// [`JobGraph::run`](crate::JobGraph::run).
pub struct JobGraph {
    pub(crate) model: Model,
    /// Max parallelism and operator uids (see `identity.rs`).
    pub(crate) ids: StateIds,
    pub(crate) vertices: Vec<VertexSpec>,
    pub(crate) edges: Vec<EdgeSpec>,
    pub(crate) finalizers: Vec<Finalizer>,
    /// The FLIP-27 split enumerators, driven by the executor (see `from_source.rs`).
    pub(crate) enumerators: Vec<Arc<dyn crate::source::CoordinatorHooks>>,
    /// The output directories of the two-phase file sinks (cleared when a run starts over).
    pub(crate) sink_dirs: Vec<PathBuf>,
    /// The channel-state encodings of the record types that cross between tasks.
    pub(crate) codecs: Codecs,
    /// Whether the job has an iteration (its feedback edge has no channel state).
    pub(crate) has_iteration: bool,
}

impl JobGraph {
    /// The model the job runs under.
    pub fn model(&self) -> Model {
        self.model
    }

    /// The tasks of one attempt, as `(vertex, parallelism, is_source)`.
    pub fn vertices(&self) -> Vec<(String, usize, bool)> {
        self.vertices
            .iter()
            .map(|v| (v.name.clone(), v.parallelism, v.is_source))
            .collect()
    }

    /// Number of task-to-task edges.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The job's plan: its tasks, the runtime and source adapter each uses under the job's
    /// model, their chains and the partitioning of their inputs. Print it with `{}`.
    pub fn plan(&self) -> JobPlan {
        JobPlan {
            model: self.model,
            tasks: self.vertices.iter().map(|v| v.plan.clone()).collect(),
        }
    }
}

impl fmt::Debug for JobGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobGraph")
            .field("model", &self.model)
            .field("vertices", &self.vertices())
            .field("edges", &self.edges.len())
            .finish()
    }
}
