//! [`DataStream`]: a stream being built, its sources, transformations, shuffles and sinks.

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
use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{BoxOperator, Discard, Filter, FlatMap, Map, Operator, TaskOutput};
use streamtask_legacy::SourceFunction;
use streamtask_mailbox::SourceReader;
use streamtask_runtime::channel::{Partitioner, RecordWriter};

use super::JobError;
use super::builder::{EdgeSpec, VertexSpec};
use super::environment::StreamEnvironment;
use super::plan::{PlannedInput, PlannedTask, SourceAdapter};
use super::segment::{
    InputSegment, LegacyAsyncSegment, LegacySourceSegment, ReaderSegment, Segment, ThenSegment,
};
use super::sources::IterReader;
use super::spawn::{OpFactory, PartitionerFactory, Tail};
use super::wiring::{EdgeChannels, EdgePattern};
use crate::Model;

impl StreamEnvironment {
    /// Adds a legacy source with parallelism 1; `factory(subtask)` makes the function (again
    /// for every attempt). It runs under every model: on the task thread (legacy), on its own
    /// thread with mails under the lock (bridge), or through a
    /// [`HandoffReader`](streamtask_bridge::HandoffReader) (mailbox), which the
    /// [plan](crate::JobGraph::plan) names.
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
            Model::Mailbox => (
                "mailbox SourceStreamTask",
                Some(SourceAdapter::HandoffReader),
            ),
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
    /// which the [plan](crate::JobGraph::plan) names.
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
            Model::Mailbox | Model::Bridge => ("mailbox SourceStreamTask", None),
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

    pub(crate) fn stream<T: Send + 'static>(
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
    /// Key-ordered mode needs a key: use [`KeyedStream::async_wait`](crate::KeyedStream::async_wait) (here it fails the job
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
    pub(crate) fn async_wait_keyed<F, FF>(
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
            let writer = RecordWriter::new(senders, partitioner(ctx.subtask))?
                .with_metrics(Arc::clone(&ctx.metrics))
                .named(writer_name.clone());
            let output = writer.control();
            let op: BoxOperator<T, ()> = Box::new(writer);
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
    pub(crate) fn edge_into_matching(
        self,
        next_vertex: &str,
        down: usize,
    ) -> (usize, PlannedInput) {
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
                Model::Mailbox | Model::Bridge => "mailbox OneInputStreamTask",
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

    pub(crate) fn shuffle(
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
            // Every branch is a forward edge of the same parallelism: this subtask has one
            // channel into each, and a broadcast over them copies every record into each branch.
            let mut all = Vec::new();
            for &edge in &tail_edges {
                all.extend(ctx.wiring.take_senders::<T>(edge, ctx.subtask));
            }
            let writer = RecordWriter::new(all, Partitioner::broadcast())?
                .with_metrics(Arc::clone(&ctx.metrics))
                .named(writer_name.clone());
            let output = writer.control();
            let op: BoxOperator<T, ()> = Box::new(writer);
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
