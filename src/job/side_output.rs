//! Side outputs in the job API: [`DataStream::side_output`] reads what a process function
//! emitted with `ctx.output(&tag, value)`.
//!
//! A process operator that offers side outputs registers a [`SideRegistry`] under its place in
//! the graph (vertex and chain index). Each `side_output(&tag)` adds a forward edge from that
//! vertex into a new task vertex named after the tag, and an entry saying how to install the
//! edge's writer. When a task is spawned, the registry installs one channel writer per tag into
//! the operator's [`SideOutputs`] and wraps the task's output so that barriers and end of input
//! also reach the side channels: records, watermarks and barriers then travel every side
//! channel in the same order as the main output, so a side output is exactly-once like it.
//!
//! The side output's stream always starts a new task (Flink may chain it); the plan shows the
//! edge as `side output`.

use std::sync::Arc;

use streamtask_core::operator::{BoxOperator, Chain, OutputTag, SideOutputs, TaskOutput};
use streamtask_runtime::channel::{Partitioner, RecordWriter};

use super::JobError;
use super::builder::EdgeSpec;
use super::environment::StreamEnvironment;
use super::plan::PlannedInput;
use super::segment::Segment;
use super::side_channels::SideRegistry;
use super::spawn::{SpawnCtx, Spawner, Tail};
use super::stream::DataStream;
use super::wiring::{EdgeChannels, EdgePattern};

impl StreamEnvironment {
    /// A side-output registry for the operator at `index` of `vertex`'s chain, kept in the graph
    /// so the vertex's spawner finds it.
    pub(crate) fn side_registry(&self, vertex: &str, index: usize) -> Arc<SideRegistry> {
        let registry = Arc::new(SideRegistry::default());
        self.graph
            .borrow_mut()
            .side_outputs
            .insert((vertex.to_string(), index), Arc::clone(&registry));
        registry
    }
}

/// Makes an operator with the side outputs installed for its task.
pub(crate) type SideOpFactory<I, O> =
    Arc<dyn Fn(&SpawnCtx<'_>, SideOutputs) -> BoxOperator<I, O> + Send + Sync>;

struct SideSegment<X, Y> {
    inner: Box<dyn Segment<X>>,
    op: SideOpFactory<X, Y>,
    registry: Arc<SideRegistry>,
}

impl<X: Send + 'static, Y: Send + 'static> Segment<Y> for SideSegment<X, Y> {
    fn finish(self: Box<Self>, tail: Tail<Y>) -> Spawner {
        let SideSegment {
            inner,
            op,
            registry,
        } = *self;
        let composed: Tail<X> = Arc::new(move |ctx| {
            let (rest, output) = tail(ctx)?;
            let (side, output) = registry.attach(ctx, output)?;
            let chain: BoxOperator<X, ()> = Box::new(Chain::new(op(ctx, side), rest));
            Ok((chain, output))
        });
        inner.finish(composed)
    }
}

impl<T: Send + 'static> DataStream<T> {
    /// Chains an operator that offers side outputs, readable with
    /// [`side_output`](DataStream::side_output) on the returned stream.
    pub(crate) fn then_with_side_outputs<U: Send + 'static>(
        self,
        name: &str,
        op: SideOpFactory<T, U>,
    ) -> DataStream<U> {
        let registry = self.env.side_registry(&self.vertex, self.plan.chain.len());
        self.then_segment(name, |inner| {
            Box::new(SideSegment {
                inner,
                op,
                registry,
            })
        })
    }
}

impl<T> DataStream<T> {
    /// The side output `tag` of the process function that ends this stream (a keyed
    /// [`process`](crate::KeyedStream::process) or a keyed connected
    /// [`process`](crate::KeyedConnectedStreams::process)), as a stream of its own: a new task
    /// vertex named after the tag, with this stream's parallelism, behind forward channels.
    /// Its records carry the timestamps they were emitted with and see the same watermarks
    /// and barriers as the main output, so it is exactly-once like it.
    ///
    /// A building error (reported by [`build`](StreamEnvironment::build)) when this stream
    /// does not end in such a function, or when the tag's name is taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// struct Split;
    /// impl KeyedProcessFunction for Split {
    ///     type Key = u64;
    ///     type In = u64;
    ///     type Out = u64;
    ///     type State = ();
    ///     fn process_element(
    ///         &mut self,
    ///         n: u64,
    ///         ctx: &mut KeyedContext<'_, '_, u64, (), u64>,
    ///     ) -> Result<(), OperatorError> {
    ///         if n % 2 == 0 { ctx.collect(n) } else { ctx.output(&OutputTag::new("odd"), n) }
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let (evens, odds) = (CollectHandle::new(), CollectHandle::new());
    /// let main = env.from_sequence("numbers", 0..6).key_by(|n: &u64| *n).process("split", 1, |_| Split);
    /// main.side_output(&OutputTag::<u64>::new("odd")).collect_sink("odds", &odds);
    /// main.collect_sink("evens", &evens);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let (mut e, mut o) = (evens.committed(), odds.committed());
    /// e.sort();
    /// o.sort();
    /// assert_eq!((e, o), (vec![0, 2, 4], vec![1, 3, 5]));
    /// ```
    pub fn side_output<X: Send + 'static>(&self, tag: &OutputTag<X>) -> DataStream<X> {
        let env = self.env.clone();
        let index = self.plan.chain.len().saturating_sub(1);
        let registry = env
            .graph
            .borrow()
            .side_outputs
            .get(&(self.vertex.clone(), index))
            .cloned();
        let parallelism = self.parallelism;
        let Some(registry) = registry else {
            env.fail(JobError::NoSideOutputs {
                stream: self.plan.chain.last().cloned().unwrap_or_default(),
                tag: tag.name().to_string(),
            });
            return DataStream::input_vertex(env, tag.name(), parallelism, Vec::new(), Vec::new());
        };
        let edge = {
            let mut g = env.graph.borrow_mut();
            g.edges.push(EdgeSpec {
                pattern: EdgePattern::Forward,
                up: parallelism,
                down: parallelism,
                create: Box::new(|pattern, up, down, capacity| {
                    EdgeChannels::create::<X>(pattern, up, down, capacity)
                }),
                from: self.vertex.clone(),
                to: tag.name().to_string(),
            });
            g.edges.len() - 1
        };
        let install_tag = tag.clone();
        registry.add(Box::new(move |ctx, side: &mut SideOutputs| {
            let senders = ctx.wiring.take_senders::<X>(edge, ctx.subtask);
            let writer = RecordWriter::new(senders, Partitioner::Forward)?
                .with_metrics(std::sync::Arc::clone(&ctx.metrics));
            let channels = writer.control();
            side.add(&install_tag, writer);
            Ok(Box::new(channels) as Box<dyn TaskOutput<()>>)
        }));
        let input = PlannedInput {
            from: self.vertex.clone(),
            partitioning: "side output",
        };
        DataStream::input_vertex(env, tag.name(), parallelism, vec![edge], vec![input])
    }
}
