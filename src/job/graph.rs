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

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use crate::sink::{CollectHandle, CollectSink, TwoPhaseCommitFileSink};
use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{
    AsyncBatchFunction, AsyncConfig, AsyncConfigError, AsyncKey, BatchedAsyncFunction, OutputMode,
};
use streamtask_core::function::{AsyncFunction, KeyedProcessFunction};
use streamtask_core::keygroup::StableKey;
use streamtask_core::operator::{
    BoxOperator, Chain, CoFlatMap, CoMap, Discard, Filter, FlatMap, KeyedProcessOperator, Map,
    Operator, SideOutputs, TaskOutput, TwoInputChain, TwoInputOperator,
};
use streamtask_core::task::TaskConfig;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output};
use streamtask_legacy::{Fairness, SourceContextConfig, SourceFunction};
use streamtask_mailbox::SourceReader;
use streamtask_runtime::channel::{InputGate, Partitioner, RecordWriter, TwoInputGate};

use super::channel_state::{Codecs, decode_range, gate_codec};
use super::identity::StateIds;
use super::plan::{JobPlan, PlannedInput, PlannedTask, SourceAdapter};
use super::side_output::SideRegistry;
use super::sources::IterReader;
use super::wiring::{ChannelOutput, ChannelWriter, EdgeChannels, EdgePattern, Wiring};
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
type EdgeFactory =
    Box<dyn Fn(EdgePattern, usize, usize, usize) -> Result<EdgeChannels, JobError> + Send + Sync>;
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;
/// Makes the partitioner of upstream subtask `n` of an edge.
pub(crate) type PartitionerFactory<T> = Arc<dyn Fn(usize) -> Partitioner<T> + Send + Sync>;

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
    source_context: SourceContextConfig,
    /// Max parallelism and operator uids (see `identity.rs`).
    pub(crate) ids: StateIds,
    vertices: Vec<VertexSpec>,
    pub(crate) edges: Vec<EdgeSpec>,
    /// The side outputs offered by the operator at `(vertex, chain index)`.
    pub(crate) side_outputs: HashMap<(String, usize), Arc<SideRegistry>>,
    finalizers: Vec<Finalizer>,
    /// The FLIP-27 split enumerators (see `from_source.rs`).
    pub(crate) enumerators: Vec<Arc<crate::files::SplitEnumerator>>,
    sink_dirs: Vec<PathBuf>,
    names: HashSet<String>,
    pub(crate) errors: Vec<JobError>,
    /// The channel-state encodings of the record types that cross between tasks.
    pub(crate) codecs: Codecs,
    /// Whether the job has an iteration (its feedback edge has no channel state).
    pub(crate) has_iteration: bool,
}

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
    model: Model,
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

    /// Adds a legacy source with parallelism 1; `factory(subtask)` makes the function (again
    /// for every attempt). It runs under every model: on the task thread (legacy), on its own
    /// thread with mails under the lock (bridge), or through a
    /// [`HandoffReader`](streamtask_bridge::HandoffReader) (mailbox), which the
    /// [plan](JobGraph::plan) names.
    pub fn add_source<F, FF>(&self, name: &str, factory: FF) -> DataStream<F::Out>
    where
        F: SourceFunction,
        F::Out: Serialize + DeserializeOwned,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        self.add_source_parallel(name, 1, factory)
    }

    /// Adds a legacy source with `parallelism` subtasks; see [`add_source`](Self::add_source).
    pub fn add_source_parallel<F, FF>(
        &self,
        name: &str,
        parallelism: usize,
        factory: FF,
    ) -> DataStream<F::Out>
    where
        F: SourceFunction,
        F::Out: Serialize + DeserializeOwned,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        self.claim_name(name);
        self.graph.borrow().codecs.register::<F::Out>();
        let (runtime, adapter) = match self.model {
            Model::Legacy => ("legacy SourceStreamTask", None),
            Model::Bridge => ("bridge LegacySourceStreamTask", None),
            Model::Mailbox => ("mailbox SourceTask", Some(SourceAdapter::HandoffReader)),
        };
        self.stream(
            name,
            parallelism,
            Head::LegacySource,
            source_plan(name, runtime, adapter),
            Box::new(LegacySourceSegment {
                context: self.graph.borrow().source_context,
                factory: Arc::new(factory),
            }),
        )
    }

    /// Adds a new-style source with parallelism 1; `factory(subtask)` makes the reader. It runs
    /// under every model: on the task thread (mailbox, bridge), or through a
    /// [`ReaderSource`](streamtask_bridge::ReaderSource) with an event-time context (legacy),
    /// which the [plan](JobGraph::plan) names.
    pub fn add_reader<T, R, RF>(&self, name: &str, factory: RF) -> DataStream<T>
    where
        T: Send + 'static,
        R: SourceReader<T> + 'static,
        RF: Fn(usize) -> R + Send + Sync + 'static,
    {
        self.add_reader_parallel(name, 1, factory)
    }

    /// Adds a new-style source with `parallelism` subtasks; see [`add_reader`](Self::add_reader).
    pub fn add_reader_parallel<T, R, RF>(
        &self,
        name: &str,
        parallelism: usize,
        factory: RF,
    ) -> DataStream<T>
    where
        T: Send + 'static,
        R: SourceReader<T> + 'static,
        RF: Fn(usize) -> R + Send + Sync + 'static,
    {
        self.claim_name(name);
        let (runtime, adapter) = match self.model {
            Model::Legacy => ("legacy SourceStreamTask", Some(SourceAdapter::ReaderSource)),
            Model::Mailbox | Model::Bridge => ("mailbox SourceTask", None),
        };
        self.stream(
            name,
            parallelism,
            Head::Reader,
            source_plan(name, runtime, adapter),
            Box::new(ReaderSegment {
                factory: Arc::new(factory),
                _types: std::marker::PhantomData,
            }),
        )
    }

    /// A bounded source of the items of `items`, with parallelism 1, for small jobs and
    /// tests. Checkpointed: its position (items emitted) is in every snapshot, and a restore
    /// skips that many items of a fresh `items.into_iter()`, so `items` must yield the same
    /// items in the same order every time. The records carry no timestamps. It is a
    /// new-style reader (through `ReaderSource` under the legacy model).
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.from_iter("words", vec!["a", "b", "c"])
    ///     .map("upper", |w: &str| w.to_uppercase())
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// assert_eq!(out.committed(), ["A", "B", "C"]);
    /// ```
    pub fn from_iter<I>(&self, name: &str, items: I) -> DataStream<I::Item>
    where
        I: IntoIterator + Clone + Send + Sync + 'static,
        I::IntoIter: Send + 'static,
        I::Item: Send + 'static,
    {
        let reader_name = name.to_string();
        self.add_reader(name, move |_| {
            IterReader::new(reader_name.clone(), items.clone().into_iter())
        })
    }

    /// The numbers of `range`, in order, with parallelism 1: [`from_iter`](Self::from_iter)
    /// over a range, checkpointed the same way.
    pub fn from_sequence(&self, name: &str, range: std::ops::Range<u64>) -> DataStream<u64> {
        self.from_sequence_parallel(name, range, 1)
    }

    fn stream<T: Send + 'static>(
        &self,
        name: &str,
        parallelism: usize,
        head: Head,
        mut plan: PlannedTask,
        segment: Box<dyn Segment<T>>,
    ) -> DataStream<T> {
        if parallelism == 0 {
            self.fail(JobError::ZeroParallelism {
                vertex: name.to_string(),
            });
        }
        plan.parallelism = parallelism.max(1);
        DataStream {
            env: self.clone(),
            segment: Some(segment),
            vertex: name.to_string(),
            parallelism: parallelism.max(1),
            head,
            is_source: matches!(head, Head::LegacySource | Head::Reader),
            bare_input: None,
            plan,
        }
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
    pub(crate) enumerators: Vec<Arc<crate::files::SplitEnumerator>>,
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

/// What heads the open segment; decides the chaining rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    LegacySource,
    Reader,
    Input,
}

/// A stream of `T` being built.
#[must_use = "a stream does nothing until it ends in a sink"]
pub struct DataStream<T> {
    pub(crate) env: StreamEnvironment,
    pub(crate) segment: Option<Box<dyn Segment<T>>>,
    pub(crate) vertex: String,
    pub(crate) parallelism: usize,
    pub(crate) head: Head,
    pub(crate) is_source: bool,
    /// The edge feeding the segment, while nothing is chained behind its input yet.
    pub(crate) bare_input: Option<usize>,
    /// What the plan says about the vertex being built.
    pub(crate) plan: PlannedTask,
}

impl<T: Send + 'static> DataStream<T> {
    /// The parallelism of the stream's current tasks.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    pub(crate) fn then<U: Send + 'static>(self, name: &str, op: OpFactory<T, U>) -> DataStream<U> {
        self.then_segment(name, |inner| Box::new(ThenSegment { inner, op }))
    }

    /// Chains what `segment` makes of the open segment behind it.
    pub(crate) fn then_segment<U: Send + 'static>(
        mut self,
        name: &str,
        segment: impl FnOnce(Box<dyn Segment<T>>) -> Box<dyn Segment<U>>,
    ) -> DataStream<U> {
        let inner = self.segment.take().expect("an open stream has a segment");
        let mut plan = self.plan.clone();
        plan.chain.push(name.to_string());
        DataStream {
            env: self.env.clone(),
            segment: Some(segment(inner)),
            vertex: std::mem::take(&mut self.vertex),
            parallelism: self.parallelism,
            head: self.head,
            is_source: self.is_source,
            bare_input: None,
            plan,
        }
    }

    /// Applies `f` to every value.
    pub fn map<U, F>(self, name: &str, f: F) -> DataStream<U>
    where
        U: Send + 'static,
        F: Fn(T) -> U + Clone + Send + Sync + 'static,
    {
        let name_owned = name.to_string();
        self.then(
            name,
            Arc::new(move |_| Box::new(Map::new(name_owned.clone(), f.clone()))),
        )
    }

    /// Keeps the values `predicate` accepts.
    pub fn filter<F>(self, name: &str, predicate: F) -> DataStream<T>
    where
        F: Fn(&T) -> bool + Clone + Send + Sync + 'static,
    {
        let name_owned = name.to_string();
        self.then(
            name,
            Arc::new(move |_| Box::new(Filter::new(name_owned.clone(), predicate.clone()))),
        )
    }

    /// Turns every value into zero or more.
    pub fn flat_map<U, F>(self, name: &str, f: F) -> DataStream<U>
    where
        U: Send + 'static,
        F: Fn(T, &mut Vec<U>) + Clone + Send + Sync + 'static,
    {
        let name_owned = name.to_string();
        self.then(
            name,
            Arc::new(move |_| Box::new(FlatMap::new(name_owned.clone(), f.clone()))),
        )
    }

    /// Chains any operator; `factory(subtask)` makes it for every task and attempt.
    pub fn operator<O, OF>(self, factory: OF) -> DataStream<O::Out>
    where
        O: Operator<In = T> + 'static,
        O::Out: Send + 'static,
        OF: Fn(usize) -> O + Send + Sync + 'static,
    {
        self.then(
            short_type_name::<O>(),
            Arc::new(move |ctx| Box::new(factory(ctx.subtask))),
        )
    }

    /// Calls `function` asynchronously for every value, with at most `config.capacity` calls
    /// (and watermarks) in flight, ordered or unordered, with the timeout and retries of
    /// `config`; `factory(subtask)` makes the function for every task and attempt.
    ///
    /// Key-ordered mode needs a key: use [`KeyedStream::async_wait`] (here it fails the job
    /// with [`AsyncConfigError::KeyOrderedWithoutKey`]).
    ///
    /// Chaining follows the model: under the legacy model the async operator always heads a
    /// task of its own, with an emitter thread (FLINK-13063); under the bridge model it is not
    /// chained behind a legacy source (FLINK-16219); under the mailbox model it chains
    /// anywhere.
    pub fn async_wait<F, FF>(
        self,
        name: &str,
        config: AsyncConfig<F::Out>,
        factory: FF,
    ) -> DataStream<F::Out>
    where
        F: AsyncFunction<In = T>,
        T: Clone + Serialize + DeserializeOwned,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        if config.mode == OutputMode::KeyOrdered {
            self.env.fail(AsyncConfigError::KeyOrderedWithoutKey.into());
        }
        self.async_wait_keyed(name, config, factory, None)
    }

    /// Calls the batch function `function` asynchronously, a batch of values per call: the
    /// async operator in batched mode ([`AsyncConfig::with_batch`]: a batch closes at its size
    /// or its max wait; without it every value is a batch of its own), each batch with one
    /// deadline (the timeout runs from the batch's call) and retried as a whole; otherwise as
    /// [`async_wait`](Self::async_wait) (modes, capacity, snapshot, chaining).
    /// `factory(subtask)` makes the function for every task and attempt.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    /// use streamtask_core::async_io::{
    ///     AsyncBatchFunction, AsyncConfig, BatchConfig, BatchResultFuture, OutputMode,
    /// };
    ///
    /// /// One "query" per batch: every value is answered with the size of its batch.
    /// struct Lookup;
    /// impl AsyncBatchFunction for Lookup {
    ///     type In = u64;
    ///     type Out = (u64, usize);
    ///     fn invoke_batch(&mut self, inputs: &[u64], result: BatchResultFuture<(u64, usize)>) {
    ///         result.complete(inputs.iter().map(|&v| vec![(v, inputs.len())]).collect());
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// let config = AsyncConfig::new(OutputMode::Ordered, 64)
    ///     .with_batch(BatchConfig::new(8, Duration::from_millis(5)));
    /// env.from_iter("values", 0..100u64)
    ///     .async_wait_batched("lookup", config, |_| Lookup)
    ///     .map("show", |(v, size)| format!("{v}:{size}"))
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let lines = out.committed();
    /// assert_eq!(lines.len(), 100);
    /// // In input order (ordered mode), from batches of at most 8.
    /// let parsed: Vec<(u64, usize)> = lines.iter().map(|l| {
    ///     let (v, size) = l.split_once(':').unwrap();
    ///     (v.parse().unwrap(), size.parse().unwrap())
    /// }).collect();
    /// assert!(parsed.iter().enumerate().all(|(i, &(v, size))| v == i as u64 && (1..=8).contains(&size)));
    /// ```
    pub fn async_wait_batched<B, FF>(
        self,
        name: &str,
        config: AsyncConfig<B::Out>,
        factory: FF,
    ) -> DataStream<B::Out>
    where
        B: AsyncBatchFunction<In = T>,
        T: Clone + Serialize + DeserializeOwned,
        FF: Fn(usize) -> B + Send + Sync + 'static,
    {
        self.async_wait(name, config, move |subtask| {
            BatchedAsyncFunction::new(factory(subtask))
        })
    }

    /// [`async_wait`](Self::async_wait) whose records have `key` (a keyed stream's).
    fn async_wait_keyed<F, FF>(
        mut self,
        name: &str,
        config: AsyncConfig<F::Out>,
        factory: FF,
        key: Option<AsyncKey<T>>,
    ) -> DataStream<F::Out>
    where
        F: AsyncFunction<In = T>,
        T: Clone + Serialize + DeserializeOwned,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        if let Err(e) = config.validate() {
            self.env.fail(e.into());
        }
        self.env.graph.borrow().codecs.register::<T>();
        let name_owned = name.to_string();
        match self.env.model {
            Model::Legacy => {
                let edge = match self.bare_input {
                    Some(edge) => edge,
                    None => {
                        let parallelism = self.parallelism;
                        self = self.shuffle(
                            name,
                            EdgePattern::Forward,
                            "forward",
                            parallelism,
                            Arc::new(|_| Partitioner::Forward),
                        );
                        self.bare_input.expect("a shuffle starts a bare input")
                    }
                };
                // The bare input segment is replaced by the async head's.
                let _ = self.segment.take();
                let mut plan = self.plan.clone();
                plan.runtime = "legacy AsyncWaitStreamTask";
                plan.chain.push(name_owned.clone());
                DataStream {
                    env: self.env.clone(),
                    segment: Some(Box::new(LegacyAsyncSegment {
                        edge,
                        name: name_owned,
                        config,
                        key,
                        factory: Arc::new(factory),
                    })),
                    vertex: std::mem::take(&mut self.vertex),
                    parallelism: self.parallelism,
                    head: Head::Input,
                    is_source: false,
                    bare_input: None,
                    plan,
                }
            }
            Model::Mailbox | Model::Bridge => {
                if self.env.model == Model::Bridge && self.head == Head::LegacySource {
                    self = self.start_new_chain(name);
                }
                self.then(
                    name,
                    Arc::new(move |ctx| {
                        let function = factory(ctx.subtask);
                        let operator = match &key {
                            Some(key) => streamtask_runtime::AsyncWaitOperator::keyed(
                                name_owned.clone(),
                                function,
                                config.clone(),
                                key.clone(),
                            ),
                            None => streamtask_runtime::AsyncWaitOperator::new(
                                name_owned.clone(),
                                function,
                                config.clone(),
                            ),
                        };
                        Box::new(
                            operator.expect(
                                "the async configuration was validated when the job was built",
                            ),
                        )
                    }),
                )
            }
        }
    }

    /// Ends the current task here: what follows runs in a new task with the same parallelism,
    /// behind forward channels.
    pub fn start_new_chain(self, name: &str) -> DataStream<T> {
        let parallelism = self.parallelism;
        self.shuffle(
            name,
            EdgePattern::Forward,
            "forward",
            parallelism,
            Arc::new(|_| Partitioner::Forward),
        )
    }

    /// Partitions the stream by `key`: equal keys go to the same task of what follows.
    pub fn key_by<K, KF>(self, key: KF) -> KeyedStream<T, K>
    where
        K: StableKey + 'static,
        KF: Fn(&T) -> K + Clone + Send + Sync + 'static,
    {
        KeyedStream {
            stream: self,
            key: Arc::new(key),
            _key: std::marker::PhantomData,
        }
    }

    /// Ends the vertex being built in the channels of a new edge into `next_vertex`
    /// (`down` subtasks), and says how the plan shows that input.
    pub(crate) fn edge_into(
        mut self,
        next_vertex: &str,
        pattern: EdgePattern,
        partitioning: &'static str,
        down: usize,
        partitioner: PartitionerFactory<T>,
    ) -> (usize, PlannedInput) {
        let edge = self.env.graph.borrow().edges.len();
        let writer_name = format!("{} -> {next_vertex}", self.vertex);
        let tail: Tail<T> = Arc::new(move |ctx| {
            let senders = ctx.wiring.take_senders::<T>(edge, ctx.subtask);
            let output = ChannelOutput::new(senders.clone())?.with_live(&ctx.metrics);
            let writer = RecordWriter::new(senders, partitioner(ctx.subtask))?
                .with_metrics(Arc::clone(&ctx.metrics));
            let op: BoxOperator<T, ()> = Box::new(ChannelWriter::new(writer_name.clone(), writer));
            Ok((op, Box::new(output) as Box<dyn TaskOutput<()>>))
        });
        let up = self.parallelism;
        let from = self.vertex.clone();
        self.finish_vertex(tail);
        self.env.graph.borrow_mut().edges.push(EdgeSpec {
            pattern,
            up,
            down,
            create: Box::new(|pattern, up, down, capacity| {
                EdgeChannels::create::<T>(pattern, up, down, capacity)
            }),
            from,
            to: next_vertex.to_string(),
        });
        let input = PlannedInput {
            from: self.vertex.clone(),
            partitioning,
        };
        (edge, input)
    }

    /// [`edge_into`](Self::edge_into) with forward channels when the parallelism matches,
    /// round robin otherwise.
    fn edge_into_matching(self, next_vertex: &str, down: usize) -> (usize, PlannedInput) {
        if self.parallelism == down {
            self.edge_into(
                next_vertex,
                EdgePattern::Forward,
                "forward",
                down,
                Arc::new(|_| Partitioner::Forward),
            )
        } else {
            self.edge_into(
                next_vertex,
                EdgePattern::AllToAll,
                "rebalance",
                down,
                Arc::new(|_| Partitioner::RoundRobin),
            )
        }
    }

    /// A new task vertex `next_vertex` of `parallelism` subtasks reading `inputs`.
    pub(crate) fn input_vertex(
        env: StreamEnvironment,
        next_vertex: &str,
        parallelism: usize,
        edges: Vec<usize>,
        inputs: Vec<PlannedInput>,
    ) -> DataStream<T> {
        env.claim_name(next_vertex);
        let plan = PlannedTask {
            name: next_vertex.to_string(),
            parallelism,
            runtime: match env.model {
                Model::Legacy => "legacy OneInputStreamTask",
                Model::Mailbox | Model::Bridge => "mailbox OneInputTask",
            },
            adapter: None,
            inputs,
            chain: Vec::new(),
        };
        // Only a single input may become a legacy async head's input (it reads one edge).
        let bare_input = match edges[..] {
            [edge] => Some(edge),
            _ => None,
        };
        DataStream {
            env,
            segment: Some(Box::new(InputSegment::<T> {
                edges,
                _types: std::marker::PhantomData,
            })),
            vertex: next_vertex.to_string(),
            parallelism,
            head: Head::Input,
            is_source: false,
            bare_input,
            plan,
        }
    }

    fn shuffle(
        self,
        next_vertex: &str,
        pattern: EdgePattern,
        partitioning: &'static str,
        parallelism: usize,
        partitioner: PartitionerFactory<T>,
    ) -> DataStream<T> {
        if parallelism == 0 {
            self.env.fail(JobError::ZeroParallelism {
                vertex: next_vertex.to_string(),
            });
        }
        let down = parallelism.max(1);
        let env = self.env.clone();
        let (edge, input) = self.edge_into(next_vertex, pattern, partitioning, down, partitioner);
        Self::input_vertex(env, next_vertex, down, vec![edge], vec![input])
    }

    /// Merges this stream and `others` (streams of the same type from the same job) into one,
    /// read by a new task vertex `name` with this stream's parallelism, as Flink's `union`.
    /// An input with the same parallelism feeds it through forward channels, any other through
    /// round robin (the plan shows which). Barriers are aligned across all inputs.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Bridge);
    /// let out = CollectHandle::new();
    /// let evens = env.from_iter("evens", vec![0u64, 2, 4]);
    /// let odds = env.from_iter("odds", vec![1u64, 3]);
    /// evens.union("all", [odds]).collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let mut got = out.committed();
    /// got.sort();
    /// assert_eq!(got, [0, 1, 2, 3, 4]);
    /// ```
    pub fn union(
        self,
        name: &str,
        others: impl IntoIterator<Item = DataStream<T>>,
    ) -> DataStream<T> {
        let env = self.env.clone();
        let down = self.parallelism;
        let mut edges = Vec::new();
        let mut inputs = Vec::new();
        for stream in std::iter::once(self).chain(others) {
            if !Rc::ptr_eq(&stream.env.graph, &env.graph) {
                env.fail(JobError::UnionAcrossJobs {
                    vertex: name.to_string(),
                });
            }
            let (pattern, partitioning, partitioner): (_, _, PartitionerFactory<T>) =
                if stream.parallelism == down {
                    (
                        EdgePattern::Forward,
                        "forward",
                        Arc::new(|_| Partitioner::Forward),
                    )
                } else {
                    (
                        EdgePattern::AllToAll,
                        "rebalance",
                        Arc::new(|_| Partitioner::RoundRobin),
                    )
                };
            let (edge, input) = stream.edge_into(name, pattern, partitioning, down, partitioner);
            edges.push(edge);
            inputs.push(input);
        }
        Self::input_vertex(env, name, down, edges, inputs)
    }

    /// Redistributes the records round robin over a new task vertex `name` of `parallelism`
    /// subtasks, as Flink's `rebalance`.
    pub fn rebalance(self, name: &str, parallelism: usize) -> DataStream<T> {
        self.shuffle(
            name,
            EdgePattern::AllToAll,
            "rebalance",
            parallelism,
            Arc::new(|_| Partitioner::RoundRobin),
        )
    }

    /// Round robin within local groups, as Flink's `rescale`: each subtask writes only to the
    /// subtasks of `name` it is grouped with (fewer channels than [`rebalance`](Self::rebalance)).
    pub fn rescale(self, name: &str, parallelism: usize) -> DataStream<T> {
        self.shuffle(
            name,
            EdgePattern::Pointwise,
            "rescale",
            parallelism,
            Arc::new(|_| Partitioner::RoundRobin),
        )
    }

    /// Sends every record to a random subtask of `name`, as Flink's `shuffle`; each upstream
    /// subtask draws from its own generator, seeded with its index, so runs are reproducible.
    pub fn shuffle_random(self, name: &str, parallelism: usize) -> DataStream<T> {
        self.shuffle(
            name,
            EdgePattern::AllToAll,
            "shuffle",
            parallelism,
            Arc::new(|subtask| Partitioner::shuffle(subtask as u64)),
        )
    }

    /// Sends every record to one task `name` (parallelism 1), as Flink's `global`.
    pub fn global(self, name: &str) -> DataStream<T> {
        self.shuffle(
            name,
            EdgePattern::AllToAll,
            "global",
            1,
            Arc::new(|_| Partitioner::global()),
        )
    }

    /// Sends every record to the subtask of `name` that `pick(value, parallelism)` names (an
    /// index past the last wraps around), as Flink's `partitionCustom`.
    pub fn partition_custom<P>(self, name: &str, parallelism: usize, pick: P) -> DataStream<T>
    where
        P: Fn(&T, usize) -> usize + Clone + Send + Sync + 'static,
    {
        self.shuffle(
            name,
            EdgePattern::AllToAll,
            "custom",
            parallelism,
            Arc::new(move |_| Partitioner::custom(pick.clone())),
        )
    }

    pub(crate) fn finish_vertex(&mut self, tail: Tail<T>) {
        let segment = self.segment.take().expect("an open stream has a segment");
        let spawn = segment.finish(tail);
        let mut plan = self.plan.clone();
        plan.parallelism = self.parallelism;
        self.env.graph.borrow_mut().vertices.push(VertexSpec {
            name: self.vertex.clone(),
            parallelism: self.parallelism,
            is_source: self.is_source,
            spawn,
            plan,
        });
    }

    /// Ends the stream in a sink operator; `factory(subtask)` makes it for every task and
    /// attempt.
    pub fn sink<O, OF>(mut self, name: &str, factory: OF)
    where
        O: Operator<In = T, Out = ()> + 'static,
        OF: Fn(usize) -> O + Send + Sync + 'static,
    {
        self.env.claim_name(name);
        self.plan.chain.push(name.to_string());
        let tail: Tail<T> = Arc::new(move |ctx| {
            let op: BoxOperator<T, ()> = Box::new(factory(ctx.subtask));
            Ok((op, Box::new(Discard) as Box<dyn TaskOutput<()>>))
        });
        self.finish_vertex(tail);
    }

    /// Ends the stream in the exactly-once file sink: every subtask writes transactions into
    /// `dir`, committed when a checkpoint completes; when the whole job has finished, the last
    /// transactions are committed too.
    pub fn two_phase_file_sink<F>(self, name: &str, dir: impl Into<PathBuf>, formatter: F)
    where
        F: Fn(&T) -> String + Clone + Send + Sync + 'static,
    {
        let dir = dir.into();
        let finalize_dir = dir.clone();
        self.env.graph.borrow_mut().sink_dirs.push(dir.clone());
        self.env
            .graph
            .borrow_mut()
            .finalizers
            .push(Box::new(move || {
                crate::sink::commit_finished(&finalize_dir)?;
                Ok(())
            }));
        let sink_name = name.to_string();
        self.sink(name, move |subtask| {
            TwoPhaseCommitFileSink::new(sink_name.clone(), dir.clone(), subtask, formatter.clone())
        });
    }
}

impl<T> DataStream<T>
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
{
    /// Ends the stream in the in-memory collecting sink behind `handle`: records become
    /// [committed](CollectHandle::committed) when a checkpoint completes, and the rest when
    /// the whole job has finished.
    pub fn collect_sink(self, name: &str, handle: &CollectHandle<T>) {
        self.env.graph.borrow().codecs.register::<T>();
        let finalize = handle.clone();
        self.env
            .graph
            .borrow_mut()
            .finalizers
            .push(Box::new(move || {
                finalize.commit_finished();
                Ok(())
            }));
        let handle = handle.clone();
        let sink_name = name.to_string();
        self.sink(name, move |subtask| {
            CollectSink::new(sink_name.clone(), &handle).with_subtask(subtask)
        });
    }
}

impl<A: Send + 'static> DataStream<A> {
    /// Connects this stream with `other` (of another type, from the same job) for a two-input
    /// operator, as Flink's `connect`: see [`ConnectedStreams::map`]. The two-input task aligns
    /// barriers across both inputs.
    pub fn connect<B: Send + 'static>(self, other: DataStream<B>) -> ConnectedStreams<A, B> {
        ConnectedStreams {
            first: self,
            second: other,
        }
    }
}

/// Two streams connected for a two-input operator; built by [`DataStream::connect`].
#[must_use = "connected streams do nothing until processed"]
pub struct ConnectedStreams<A, B> {
    pub(crate) first: DataStream<A>,
    pub(crate) second: DataStream<B>,
}

impl<A: Send + 'static, B: Send + 'static> ConnectedStreams<A, B> {
    /// Applies `f1` to the first stream's values and `f2` to the second's (Flink's `CoMap`),
    /// in a new two-input task vertex `name` with the first stream's parallelism; each input
    /// arrives through forward channels when its parallelism matches, round robin otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Legacy);
    /// let out = CollectHandle::new();
    /// let numbers = env.from_iter("numbers", vec![1u32, 2]);
    /// let words = env.from_iter("words", vec!["abc".to_string()]);
    /// numbers
    ///     .connect(words)
    ///     .map("either", |n: u32| n as usize, |w: String| w.len())
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let mut got = out.committed();
    /// got.sort();
    /// assert_eq!(got, [1, 2, 3]);
    /// ```
    pub fn map<O, F1, F2>(self, name: &str, f1: F1, f2: F2) -> DataStream<O>
    where
        O: Send + 'static,
        F1: Fn(A) -> O + Clone + Send + Sync + 'static,
        F2: Fn(B) -> O + Clone + Send + Sync + 'static,
    {
        let op_name = name.to_string();
        self.two_input(
            name,
            Arc::new(move |_: &SpawnCtx<'_>, _| {
                CoMap::new(op_name.clone(), f1.clone(), f2.clone())
            }),
        )
    }

    /// Turns each value of the first stream with `f1` and of the second with `f2` into zero
    /// or more values (Flink's `CoFlatMap`), in a new two-input task vertex `name`, as
    /// [`map`](Self::map).
    pub fn flat_map<O, F1, F2>(self, name: &str, f1: F1, f2: F2) -> DataStream<O>
    where
        O: Send + 'static,
        F1: Fn(A, &mut Vec<O>) + Clone + Send + Sync + 'static,
        F2: Fn(B, &mut Vec<O>) + Clone + Send + Sync + 'static,
    {
        let op_name = name.to_string();
        self.two_input(
            name,
            Arc::new(move |_: &SpawnCtx<'_>, _| {
                CoFlatMap::new(op_name.clone(), f1.clone(), f2.clone())
            }),
        )
    }

    fn two_input<H>(self, name: &str, head: TwoInputHeadFactory<H>) -> DataStream<H::Out>
    where
        H: TwoInputOperator<In1 = A, In2 = B> + 'static,
        H::Out: Send + 'static,
    {
        let ConnectedStreams { first, second } = self;
        let env = first.env.clone();
        if !Rc::ptr_eq(&first.env.graph, &second.env.graph) {
            env.fail(JobError::UnionAcrossJobs {
                vertex: name.to_string(),
            });
        }
        let down = first.parallelism;
        let input1 = first.edge_into_matching(name, down);
        let input2 = second.edge_into_matching(name, down);
        Self::two_input_vertex(env, name, down, input1, input2, head, false)
    }

    /// A new two-input task vertex `name` of `down` subtasks reading the two edges, headed by
    /// what `head` makes; with `side_outputs`, [`DataStream::side_output`] can read the
    /// head's side outputs.
    pub(crate) fn two_input_vertex<H>(
        env: StreamEnvironment,
        name: &str,
        down: usize,
        (edge1, input1): (usize, PlannedInput),
        (edge2, input2): (usize, PlannedInput),
        head: TwoInputHeadFactory<H>,
        side_outputs: bool,
    ) -> DataStream<H::Out>
    where
        H: TwoInputOperator<In1 = A, In2 = B> + 'static,
        H::Out: Send + 'static,
    {
        env.claim_name(name);
        let side = side_outputs.then(|| SideRegistry::register(&env, name, 0));
        let plan = PlannedTask {
            name: name.to_string(),
            parallelism: down,
            runtime: match env.model {
                Model::Legacy => "legacy TwoInputStreamTask",
                Model::Mailbox | Model::Bridge => "mailbox TwoInputTask",
            },
            adapter: None,
            inputs: vec![input1, input2],
            chain: vec![name.to_string()],
        };
        DataStream {
            env,
            segment: Some(Box::new(TwoInputSegment {
                edges: (edge1, edge2),
                head,
                side,
                _types: std::marker::PhantomData,
            })),
            vertex: name.to_string(),
            parallelism: down,
            head: Head::Input,
            is_source: false,
            bare_input: None,
            plan,
        }
    }
}

impl<A, B> fmt::Debug for ConnectedStreams<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectedStreams")
            .field("first", &self.first)
            .field("second", &self.second)
            .finish()
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    /// Fan-out: every record of this stream goes to each of `names.len()` new task vertices,
    /// one per name, with this stream's parallelism and forward channels, so several
    /// downstream pipelines consume one stream (each ending in its own sink).
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Legacy);
    /// let (doubled, negated) = (CollectHandle::new(), CollectHandle::new());
    /// let mut branches = env.from_sequence("numbers", 0..3).fan_out(&["double", "negate"]);
    /// let second = branches.pop().unwrap();
    /// let first = branches.pop().unwrap();
    /// first.map("x2", |n: u64| n * 2).collect_sink("doubled", &doubled);
    /// second.map("neg", |n: u64| -(n as i64)).collect_sink("negated", &negated);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// assert_eq!(doubled.committed(), [0, 2, 4]);
    /// assert_eq!(negated.committed(), [0, -1, -2]);
    /// ```
    pub fn fan_out(mut self, names: &[&str]) -> Vec<DataStream<T>> {
        if names.is_empty() {
            self.env.fail(JobError::NoSink);
            let _ = self.segment.take();
            return Vec::new();
        }
        let first_edge = self.env.graph.borrow().edges.len();
        let edges: Vec<usize> = (first_edge..first_edge + names.len()).collect();
        let writer_name = format!("{} -> fan-out", self.vertex);
        let tail_edges = edges.clone();
        let tail: Tail<T> = Arc::new(move |ctx| {
            let mut writers = Vec::new();
            let mut all = Vec::new();
            for &edge in &tail_edges {
                let senders = ctx.wiring.take_senders::<T>(edge, ctx.subtask);
                all.extend(senders.iter().cloned());
                writers.push(
                    RecordWriter::new(senders, Partitioner::Forward)?
                        .with_metrics(Arc::clone(&ctx.metrics)),
                );
            }
            let output = ChannelOutput::new(all)?.with_live(&ctx.metrics);
            let op: BoxOperator<T, ()> = Box::new(FanOutWriter {
                name: writer_name.clone(),
                writers,
            });
            Ok((op, Box::new(output) as Box<dyn TaskOutput<()>>))
        });
        let parallelism = self.parallelism;
        let from = self.vertex.clone();
        let env = self.env.clone();
        self.finish_vertex(tail);
        names
            .iter()
            .zip(edges)
            .map(|(name, edge)| {
                env.graph.borrow_mut().edges.push(EdgeSpec {
                    pattern: EdgePattern::Forward,
                    up: parallelism,
                    down: parallelism,
                    create: Box::new(|pattern, up, down, capacity| {
                        EdgeChannels::create::<T>(pattern, up, down, capacity)
                    }),
                    from: from.clone(),
                    to: name.to_string(),
                });
                let input = PlannedInput {
                    from: from.clone(),
                    partitioning: "forward (fan-out)",
                };
                Self::input_vertex(env.clone(), name, parallelism, vec![edge], vec![input])
            })
            .collect()
    }

    /// Sends a copy of every record to every subtask of a new task vertex `name`, as Flink's
    /// `broadcast()` partitioning.
    pub fn broadcast(self, name: &str, parallelism: usize) -> DataStream<T> {
        self.shuffle(
            name,
            EdgePattern::AllToAll,
            "broadcast",
            parallelism,
            Arc::new(|_| Partitioner::broadcast()),
        )
    }
}

impl<T> fmt::Debug for DataStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataStream")
            .field("vertex", &self.vertex)
            .field("parallelism", &self.parallelism)
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for DataStream<T> {
    fn drop(&mut self) {
        if self.segment.is_some() {
            // Dropped without a sink: the job would silently lose this branch.
            if let Ok(mut g) = self.env.graph.try_borrow_mut() {
                g.errors.push(JobError::NoSink);
            }
        }
    }
}

/// A stream partitioned by key; what follows it runs in new tasks behind hash-partitioned
/// channels.
#[must_use = "a keyed stream does nothing until processed"]
pub struct KeyedStream<T, K> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key: KeyFn<T, K>,
    _key: std::marker::PhantomData<fn() -> K>,
}

impl<T: Send + 'static, K: StableKey + 'static> KeyedStream<T, K> {
    fn partitioned(self, next_vertex: &str, parallelism: usize) -> (DataStream<T>, KeyFn<T, K>) {
        let key = Arc::clone(&self.key);
        let part_key = Arc::clone(&self.key);
        let max_parallelism = self
            .stream
            .env
            .checked_max_parallelism(next_vertex, parallelism);
        let stream = self.stream.shuffle(
            next_vertex,
            EdgePattern::AllToAll,
            "hash",
            parallelism,
            Arc::new(move |_| {
                let k = Arc::clone(&part_key);
                Partitioner::by_key_with_max_parallelism(max_parallelism, move |v: &T| k(v))
            }),
        );
        (stream, key)
    }

    /// Runs `function` per key with keyed state and timers, in `parallelism` tasks;
    /// `factory(subtask)` makes the function. Its side outputs are read with
    /// [`DataStream::side_output`] on the returned stream.
    pub fn process<F, FF>(self, name: &str, parallelism: usize, factory: FF) -> DataStream<F::Out>
    where
        F: KeyedProcessFunction<In = T, Key = K> + 'static,
        F::Out: Send + 'static,
        K: Ord + Clone + Serialize + DeserializeOwned + Send,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        let (stream, key) = self.partitioned(name, parallelism);
        let name_owned = name.to_string();
        let max_parallelism = stream.env.graph.borrow().ids.max_parallelism;
        stream.then_with_side_outputs(
            name,
            Arc::new(move |ctx, side| {
                let key = Arc::clone(&key);
                Box::new(
                    KeyedProcessOperator::new(
                        name_owned.clone(),
                        move |v: &T| key(v),
                        factory(ctx.subtask),
                    )
                    .with_side_outputs(side)
                    .with_max_parallelism(max_parallelism),
                )
            }),
        )
    }

    /// Calls `function` asynchronously for every value, in `parallelism` tasks behind the hash
    /// partitioning, with the stream's key as the async operator's key; otherwise as
    /// [`DataStream::async_wait`]. With [`OutputMode::KeyOrdered`] the results of one key leave
    /// in input order (its calls run one at a time), keys proceed independently, and the
    /// in-flight records are snapshotted by key group, so a restore at another parallelism
    /// re-submits each where its key now lives, in its key's order.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    /// use streamtask_core::async_io::{AsyncConfig, OutputMode};
    ///
    /// /// Tags an event with its account's tier (a real client would answer from its I/O thread).
    /// struct Tier;
    /// impl AsyncFunction for Tier {
    ///     type In = (u32, u64); // (account, event)
    ///     type Out = String;
    ///     fn invoke(&mut self, input: &(u32, u64), result: ResultFuture<String>) {
    ///         result.complete(vec![format!("{}:{}:gold", input.0, input.1)]);
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let events: Vec<(u32, u64)> = (0..60).map(|i| (i % 3, u64::from(i))).collect();
    /// let out = CollectHandle::new();
    /// env.from_iter("events", events)
    ///     .key_by(|e: &(u32, u64)| e.0)
    ///     .async_wait("tier", 2, AsyncConfig::new(OutputMode::KeyOrdered, 10), |_| Tier)
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let lines = out.committed();
    /// assert_eq!(lines.len(), 60);
    /// // Each account's events in input order.
    /// let account_1: Vec<&String> = lines.iter().filter(|l| l.starts_with("1:")).collect();
    /// assert!(account_1.windows(2).all(|w| {
    ///     let n = |l: &str| l.split(':').nth(1).unwrap().parse::<u64>().unwrap();
    ///     n(w[0]) < n(w[1])
    /// }));
    /// ```
    pub fn async_wait<F, FF>(
        self,
        name: &str,
        parallelism: usize,
        config: AsyncConfig<F::Out>,
        factory: FF,
    ) -> DataStream<F::Out>
    where
        F: AsyncFunction<In = T>,
        T: Clone + Serialize + DeserializeOwned,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        let (stream, key) = self.partitioned(name, parallelism);
        let max_parallelism = stream.env.graph.borrow().ids.max_parallelism;
        let key = AsyncKey::new(max_parallelism, move |v: &T| key(v));
        stream.async_wait_keyed(name, config, factory, Some(key))
    }

    /// Calls the batch function `function` asynchronously, a batch of values per call, in
    /// `parallelism` tasks behind the hash partitioning with the stream's key as the async
    /// operator's key: [`DataStream::async_wait_batched`] as [`async_wait`](Self::async_wait)
    /// is [`DataStream::async_wait`]. With [`OutputMode::KeyOrdered`] a batch holds at most one
    /// record of a key (a key's next record starts once its earlier one is final), so a key's
    /// results leave in input order.
    pub fn async_wait_batched<B, FF>(
        self,
        name: &str,
        parallelism: usize,
        config: AsyncConfig<B::Out>,
        factory: FF,
    ) -> DataStream<B::Out>
    where
        B: AsyncBatchFunction<In = T>,
        T: Clone + Serialize + DeserializeOwned,
        FF: Fn(usize) -> B + Send + Sync + 'static,
    {
        self.async_wait(name, parallelism, config, move |subtask| {
            BatchedAsyncFunction::new(factory(subtask))
        })
    }

    // Not under loom: the mailbox crate's async operators need a real executor.
    #[cfg(not(loom))]
    /// Runs a [`KeyedAsyncOperator`](streamtask_mailbox::KeyedAsyncOperator) per key in
    /// `parallelism` tasks: many calls in flight per task, one at a time per key, at most
    /// `max_in_flight` records held per task
    /// ([`DEFAULT_MAX_IN_FLIGHT`](streamtask_mailbox::DEFAULT_MAX_IN_FLIGHT) is the
    /// operator's default), watermarks held until the records before them completed, and the
    /// records in flight snapshotted with the keys' states (see
    /// [`KeyedAsyncOperatorTask`](streamtask_mailbox::KeyedAsyncOperatorTask));
    /// `factory(subtask)` makes the operator for every task and attempt.
    ///
    /// Under the mailbox and bridge models it runs on the task thread. Under the legacy model
    /// the job is refused when built ([`JobError::Unsupported`]): that model delivers an
    /// operator's wakes and timers on its own threads, where a call's future (not `Send`)
    /// cannot be polled; the error names the fix.
    ///
    /// # Panics
    ///
    /// If `max_in_flight` is 0.
    pub fn process_async<A, FF>(
        self,
        name: &str,
        parallelism: usize,
        max_in_flight: usize,
        factory: FF,
    ) -> DataStream<A::Out>
    where
        A: streamtask_mailbox::KeyedAsyncOperator<In = T, Key = K>,
        T: Serialize + DeserializeOwned,
        FF: Fn(usize) -> A + Send + Sync + 'static,
    {
        assert!(max_in_flight > 0, "the in-flight cap must be at least 1");
        if self.stream.env.model == Model::Legacy {
            self.stream.env.fail(JobError::Unsupported {
                what: format!("keyed async operator {name:?}"),
                model: Model::Legacy,
                fix: "run the job under the mailbox or bridge model, or move the waiting into an \
                      AsyncFunction behind async_wait, which every model runs",
            });
        }
        self.stream.env.graph.borrow().codecs.register::<T>();
        let (stream, key) = self.partitioned(name, parallelism);
        let max_parallelism = stream.env.graph.borrow().ids.max_parallelism;
        stream.then(
            name,
            Arc::new(move |ctx| {
                let key = Arc::clone(&key);
                Box::new(
                    streamtask_mailbox::KeyedAsyncOperatorTask::new(
                        factory(ctx.subtask),
                        move |v: &T| key(v),
                    )
                    .with_max_in_flight(max_in_flight)
                    .with_max_parallelism(max_parallelism),
                )
            }),
        )
    }

    /// Applies `f` in `parallelism` tasks behind the hash partitioning (no keyed state).
    pub fn map_with_parallelism<U, F>(self, name: &str, parallelism: usize, f: F) -> DataStream<U>
    where
        U: Send + 'static,
        F: Fn(T) -> U + Clone + Send + Sync + 'static,
    {
        let (stream, _key) = self.partitioned(name, parallelism);
        stream.map(name, f)
    }
}

impl<T, K> fmt::Debug for KeyedStream<T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// An open chain segment ending in `T`.
pub(crate) trait Segment<T>: Send + Sync {
    /// Closes the segment with `tail` (the rest of the chain and the task's output) and
    /// returns the vertex's spawner.
    fn finish(self: Box<Self>, tail: Tail<T>) -> Spawner;
}

struct ThenSegment<X, Y> {
    inner: Box<dyn Segment<X>>,
    op: OpFactory<X, Y>,
}

impl<X: Send + 'static, Y: Send + 'static> Segment<Y> for ThenSegment<X, Y> {
    fn finish(self: Box<Self>, tail: Tail<Y>) -> Spawner {
        let op = self.op;
        let composed: Tail<X> = Arc::new(move |ctx| {
            let head = op(ctx);
            let (rest, output) = tail(ctx)?;
            let chain: BoxOperator<X, ()> = Box::new(Chain::new(head, rest));
            Ok((chain, output))
        });
        self.inner.finish(composed)
    }
}

struct LegacySourceSegment<FF> {
    context: SourceContextConfig,
    factory: Arc<FF>,
}

impl<F, FF> Segment<F::Out> for LegacySourceSegment<FF>
where
    F: SourceFunction,
    F::Out: Serialize + DeserializeOwned,
    FF: Fn(usize) -> F + Send + Sync + 'static,
{
    fn finish(self: Box<Self>, tail: Tail<F::Out>) -> Spawner {
        let factory = self.factory;
        let context = self.context;
        Box::new(move |ctx, config| {
            let (chain, output) = tail(ctx)?;
            let mut config = config;
            let source = factory(ctx.subtask);
            match ctx.model {
                Model::Legacy => {
                    let source = replay_in_flight(source, &mut config);
                    Ok(
                        streamtask_legacy::SourceStreamTask::new(config, source, chain, output)
                            .with_context(context)
                            .with_fairness(ctx.fairness)
                            .spawn(),
                    )
                }
                Model::Mailbox => {
                    // The function keeps its loop on a thread of its own; its records reach
                    // the task thread through the handoff, which every checkpoint holds.
                    let reader = streamtask_bridge::HandoffReader::new(source)
                        .with_context(context)
                        .with_clock(config.clock.clone())
                        .with_metrics(Arc::clone(&config.metrics))
                        .with_tracer(config.tracer.clone())
                        .with_cancel_grace(config.cancel_grace);
                    Ok(streamtask_mailbox::SourceTask::spawn(
                        config, reader, chain, output,
                    ))
                }
                Model::Bridge => {
                    let source = replay_in_flight(source, &mut config);
                    Ok(streamtask_bridge::LegacySourceStreamTask::new(
                        config, source, chain, output,
                    )
                    .with_context(context)
                    .with_fairness(ctx.fairness)
                    .spawn()?)
                }
            }
        })
    }
}

/// `source` inside an `InFlightReplay` with the elements a `HandoffReader` had in flight in
/// the snapshot `config` restores (a checkpoint of the mailbox model), taken out of it: they
/// are replayed before the function continues from its state, which is the function's own.
fn replay_in_flight<F>(source: F, config: &mut TaskConfig) -> streamtask_bridge::InFlightReplay<F>
where
    F: SourceFunction,
    F::Out: DeserializeOwned,
{
    let in_flight = config
        .restore
        .as_mut()
        .and_then(|s| s.remove(streamtask_core::state::TaskSnapshot::SOURCE_IN_FLIGHT));
    streamtask_bridge::InFlightReplay::new(source, in_flight)
}

struct ReaderSegment<T, RF> {
    factory: Arc<RF>,
    _types: std::marker::PhantomData<fn() -> T>,
}

impl<T, R, RF> Segment<T> for ReaderSegment<T, RF>
where
    T: Send + 'static,
    R: SourceReader<T> + 'static,
    RF: Fn(usize) -> R + Send + Sync + 'static,
{
    fn finish(self: Box<Self>, tail: Tail<T>) -> Spawner {
        let factory = self.factory;
        Box::new(move |ctx, config| {
            let (chain, output) = tail(ctx)?;
            let reader = factory(ctx.subtask);
            match ctx.model {
                Model::Mailbox | Model::Bridge => Ok(streamtask_mailbox::SourceTask::spawn(
                    config, reader, chain, output,
                )),
                // Polled under the checkpoint lock; an event-time context passes the reader's
                // own timestamps and watermarks through unchanged.
                Model::Legacy => Ok(streamtask_legacy::SourceStreamTask::new(
                    config,
                    streamtask_bridge::ReaderSource::new(reader),
                    chain,
                    output,
                )
                .with_context(SourceContextConfig::event_time())
                .with_fairness(ctx.fairness)
                .spawn()),
            }
        })
    }
}

/// The input gate of subtask `ctx.subtask` over edge `edge`, recording into the task's metrics.
pub(crate) fn input_gate<T: Send + 'static>(
    ctx: &SpawnCtx<'_>,
    edges: &[usize],
    config: &TaskConfig,
) -> Result<InputGate<T>, JobError> {
    let receivers: Vec<_> = edges
        .iter()
        .flat_map(|&edge| ctx.wiring.take_receivers::<T>(edge, ctx.subtask))
        .collect();
    let channels = receivers.len();
    let mut gate = InputGate::new(receivers)?.with_metrics(Arc::clone(&config.metrics));
    let (codec, state) = gate_codec::<T>(ctx.codecs, ctx.alignment, config)?;
    if let Some(codec) = codec {
        if let Some(state) = &state {
            gate = gate.with_channel_state(decode_range(state, &codec, 0..channels, &config.name)?);
        }
        gate = gate.with_codec(codec);
    }
    Ok(gate)
}

struct LegacyAsyncSegment<F: AsyncFunction, FF> {
    edge: usize,
    name: String,
    config: AsyncConfig<F::Out>,
    key: Option<AsyncKey<F::In>>,
    factory: Arc<FF>,
}

impl<F, FF> Segment<F::Out> for LegacyAsyncSegment<F, FF>
where
    F: AsyncFunction,
    F::In: Clone + Serialize + DeserializeOwned,
    FF: Fn(usize) -> F + Send + Sync + 'static,
{
    fn finish(self: Box<Self>, tail: Tail<F::Out>) -> Spawner {
        let LegacyAsyncSegment {
            edge,
            name,
            config,
            key,
            factory,
        } = *self;
        Box::new(move |ctx, task_config| {
            let (chain, output) = tail(ctx)?;
            let gate = input_gate::<F::In>(ctx, &[edge], &task_config)?;
            let function = factory(ctx.subtask);
            let head = match &key {
                Some(key) => streamtask_legacy::AsyncHead::keyed(
                    name.clone(),
                    function,
                    config.clone(),
                    key.clone(),
                )?,
                None => streamtask_legacy::AsyncHead::new(name.clone(), function, config.clone())?,
            };
            let task = streamtask_legacy::AsyncWaitStreamTask::chained(
                task_config,
                gate,
                head,
                chain,
                output,
            )
            .map_err(|e| JobError::Unsupported {
                what: e.to_string(),
                model: Model::Legacy,
                fix: "start a new chain before the second async operator",
            })?;
            Ok(task.with_fairness(ctx.fairness).spawn())
        })
    }
}

/// Makes a two-input head for a task, with the side outputs installed for it.
pub(crate) type TwoInputHeadFactory<H> = Arc<dyn Fn(&SpawnCtx<'_>, SideOutputs) -> H + Send + Sync>;

struct TwoInputSegment<H: TwoInputOperator> {
    edges: (usize, usize),
    head: TwoInputHeadFactory<H>,
    side: Option<Arc<SideRegistry>>,
    _types: std::marker::PhantomData<fn() -> H>,
}

impl<H> Segment<H::Out> for TwoInputSegment<H>
where
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    H::Out: Send + 'static,
{
    fn finish(self: Box<Self>, tail: Tail<H::Out>) -> Spawner {
        let (edge1, edge2) = self.edges;
        let head = self.head;
        let side = self.side;
        Box::new(move |ctx, config| {
            let (rest, output) = tail(ctx)?;
            let (side_outputs, output) = match &side {
                Some(registry) => registry.attach(ctx, output)?,
                None => (SideOutputs::new(), output),
            };
            let chain = TwoInputChain::new(head(ctx, side_outputs), rest);
            let first = ctx.wiring.take_receivers::<H::In1>(edge1, ctx.subtask);
            let second = ctx.wiring.take_receivers::<H::In2>(edge2, ctx.subtask);
            let n1 = first.len();
            let total = n1 + second.len();
            let mut gate =
                TwoInputGate::new(first, second)?.with_metrics(Arc::clone(&config.metrics));
            let (codec1, state) = gate_codec::<H::In1>(ctx.codecs, ctx.alignment, &config)?;
            let (codec2, _) = gate_codec::<H::In2>(ctx.codecs, ctx.alignment, &config)?;
            if let (Some(codec1), Some(codec2)) = (codec1, codec2) {
                if let Some(state) = &state {
                    gate = gate.with_channel_state(
                        decode_range(state, &codec1, 0..n1, &config.name)?,
                        decode_range(state, &codec2, n1..total, &config.name)?,
                    );
                }
                gate = gate.with_codecs(codec1, codec2);
            }
            Ok(match ctx.model {
                Model::Legacy => {
                    streamtask_legacy::TwoInputStreamTask::new(config, gate, chain, output)
                        .with_fairness(ctx.fairness)
                        .spawn()
                }
                Model::Mailbox | Model::Bridge => {
                    streamtask_mailbox::TwoInputTask::spawn(config, gate, chain, output)
                }
            })
        })
    }
}

struct InputSegment<T> {
    /// The edges read, all into one gate (more than one after a union).
    edges: Vec<usize>,
    _types: std::marker::PhantomData<fn() -> T>,
}

impl<T: Send + 'static> Segment<T> for InputSegment<T> {
    fn finish(self: Box<Self>, tail: Tail<T>) -> Spawner {
        let edges = self.edges;
        Box::new(move |ctx, config| {
            let (chain, output) = tail(ctx)?;
            let gate = input_gate::<T>(ctx, &edges, &config)?;
            Ok(match ctx.model {
                Model::Legacy => {
                    streamtask_legacy::OneInputStreamTask::new(config, gate, chain, output)
                        .with_fairness(ctx.fairness)
                        .spawn()
                }
                Model::Mailbox | Model::Bridge => {
                    streamtask_mailbox::OneInputTask::spawn(config, gate, chain, output)
                }
            })
        })
    }
}

/// The last operator of a chain that fans out: a copy of every record (and every watermark and
/// status) into each branch's writer.
struct FanOutWriter<T> {
    name: String,
    writers: Vec<RecordWriter<T>>,
}

impl<T: Clone + Send> Operator for FanOutWriter<T> {
    type In = T;
    type Out = ();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        _ctx: &mut streamtask_core::operator::Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        let (last, rest) = self.writers.split_last_mut().expect("at least one branch");
        for writer in rest {
            writer.collect(record.clone())?;
        }
        last.collect(record)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        _ctx: &mut streamtask_core::operator::Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.writers
            .iter_mut()
            .try_for_each(|w| w.emit_watermark(watermark))
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        _ctx: &mut streamtask_core::operator::Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.writers
            .iter_mut()
            .try_for_each(|w| w.emit_status(status))
    }
}

impl<T> fmt::Debug for FanOutWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOutWriter")
            .field("name", &self.name)
            .field("branches", &self.writers.len())
            .finish()
    }
}

/// The last path segment of `O`'s type name, without generics: a plan's label for an operator
/// added with [`DataStream::operator`].
fn short_type_name<O>() -> &'static str {
    let full = std::any::type_name::<O>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

/// The plan of a source vertex before anything is chained behind the source.
fn source_plan(name: &str, runtime: &'static str, adapter: Option<SourceAdapter>) -> PlannedTask {
    PlannedTask {
        name: name.to_string(),
        parallelism: 1,
        runtime,
        adapter,
        inputs: Vec::new(),
        chain: vec![name.to_string()],
    }
}
