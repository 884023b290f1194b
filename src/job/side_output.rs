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

use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use streamtask_core::operator::{BoxOperator, Chain, OutputTag, SideOutputs, TaskOutput};
use streamtask_core::sync::Mutex;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output};
use streamtask_runtime::channel::{Partitioner, RecordWriter};

use super::graph::{DataStream, EdgeSpec, Segment, SpawnCtx, Spawner, Tail};
use super::plan::PlannedInput;
use super::wiring::{ChannelOutput, EdgeChannels, EdgePattern};
use super::{JobError, StreamEnvironment};

type Install = Box<
    dyn Fn(&SpawnCtx<'_>, &mut SideOutputs) -> Result<Box<dyn TaskOutput<()>>, JobError>
        + Send
        + Sync,
>;

/// The side outputs read from one operator, filled while the job is built.
#[derive(Default)]
pub(crate) struct SideRegistry {
    entries: Mutex<Vec<Install>>,
}

impl SideRegistry {
    /// A registry for the operator at `index` of `vertex`'s chain.
    pub(crate) fn register(env: &StreamEnvironment, vertex: &str, index: usize) -> Arc<Self> {
        let registry = Arc::new(SideRegistry::default());
        env.graph
            .borrow_mut()
            .side_outputs
            .insert((vertex.to_string(), index), Arc::clone(&registry));
        registry
    }

    /// Installs a writer per side output into a fresh [`SideOutputs`] for subtask
    /// `ctx.subtask`, and wraps `output` so barriers and end of input reach the side channels.
    pub(crate) fn attach(
        &self,
        ctx: &SpawnCtx<'_>,
        output: Box<dyn TaskOutput<()>>,
    ) -> Result<(SideOutputs, Box<dyn TaskOutput<()>>), JobError> {
        let mut side = SideOutputs::new();
        let mut channels = Vec::new();
        for install in self.entries.lock().iter() {
            channels.push(install(ctx, &mut side)?);
        }
        if channels.is_empty() {
            return Ok((side, output));
        }
        Ok((
            side,
            Box::new(WithSideChannels {
                main: output,
                side: channels,
            }),
        ))
    }
}

impl fmt::Debug for SideRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SideRegistry")
            .field("side_outputs", &self.entries.lock().len())
            .finish()
    }
}

/// A task's output that also broadcasts barriers and end of input into side channels.
struct WithSideChannels {
    main: Box<dyn TaskOutput<()>>,
    side: Vec<Box<dyn TaskOutput<()>>>,
}

impl Output<()> for WithSideChannels {
    fn collect(&mut self, record: StreamRecord<()>) -> Result<(), OperatorError> {
        self.main.collect(record)
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.main.emit_watermark(watermark)
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.main.emit_status(status)
    }
}

impl TaskOutput<()> for WithSideChannels {
    fn broadcast_barrier(
        &mut self,
        barrier: streamtask_core::CheckpointBarrier,
    ) -> Result<(), OperatorError> {
        self.main.broadcast_barrier(barrier)?;
        self.side
            .iter_mut()
            .try_for_each(|s| s.broadcast_barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.main.end_of_input()?;
        self.side.iter_mut().try_for_each(|s| s.end_of_input())
    }
    fn is_available(&self) -> bool {
        self.main.is_available() && self.side.iter().all(|s| s.is_available())
    }
    /// Registers on every output that is full now, and wakes at once when none is: room that
    /// freed between the caller's [`is_available`](TaskOutput::is_available) and this call
    /// must not leave a suspended task without a notice. (Skipping the outputs that have room
    /// and waking nobody lost that notice: a split task slept with its input full.)
    fn register_availability_waker(&self, waker: &Waker) {
        let mut registered = false;
        let full = std::iter::once(&self.main)
            .chain(&self.side)
            .filter(|output| !output.is_available());
        for output in full {
            // Each wakes at once itself if its room freed since `is_available`.
            output.register_availability_waker(waker);
            registered = true;
        }
        if !registered {
            waker.wake_by_ref();
        }
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
        let registry = SideRegistry::register(&self.env, &self.vertex, self.plan.chain.len());
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
        registry
            .entries
            .lock()
            .push(Box::new(move |ctx, side: &mut SideOutputs| {
                let senders = ctx.wiring.take_senders::<X>(edge, ctx.subtask);
                let channels = ChannelOutput::new(senders.clone())?.with_live(&ctx.metrics);
                side.add(
                    &install_tag,
                    RecordWriter::new(senders, Partitioner::Forward)?
                        .with_metrics(std::sync::Arc::clone(&ctx.metrics)),
                );
                Ok(Box::new(channels) as Box<dyn TaskOutput<()>>)
            }));
        let input = PlannedInput {
            from: self.vertex.clone(),
            partitioning: "side output",
        };
        DataStream::input_vertex(env, tag.name(), parallelism, vec![edge], vec![input])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Wake;

    use streamtask_core::CheckpointBarrier;

    use super::*;

    /// An output that is full for its first `full_checks` availability checks, then has room.
    struct FreesAfter {
        checks: AtomicUsize,
        full_checks: usize,
    }

    impl FreesAfter {
        fn boxed(full_checks: usize) -> Box<dyn TaskOutput<()>> {
            Box::new(FreesAfter {
                checks: AtomicUsize::new(0),
                full_checks,
            })
        }
    }

    impl Output<()> for FreesAfter {
        fn collect(&mut self, _record: StreamRecord<()>) -> Result<(), OperatorError> {
            Ok(())
        }
        fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
            Ok(())
        }
        fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
            Ok(())
        }
    }

    impl TaskOutput<()> for FreesAfter {
        fn broadcast_barrier(&mut self, _barrier: CheckpointBarrier) -> Result<(), OperatorError> {
            Ok(())
        }
        fn end_of_input(&mut self) -> Result<(), OperatorError> {
            Ok(())
        }
        fn is_available(&self) -> bool {
            self.checks.fetch_add(1, Ordering::SeqCst) >= self.full_checks
        }
        fn register_availability_waker(&self, waker: &Waker) {
            // As a channel writer does: wakes at once when there is room.
            if self.is_available() {
                waker.wake_by_ref();
            }
        }
    }

    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn woken_after_suspending(output: &WithSideChannels) -> bool {
        let flag = Arc::new(Flag::default());
        // The task's check found the output full; it suspends and registers.
        assert!(!output.is_available());
        output.register_availability_waker(&Waker::from(Arc::clone(&flag)));
        flag.0.load(Ordering::SeqCst)
    }

    #[test]
    fn room_freed_between_the_check_and_the_registration_wakes_the_task() {
        // The main output was full at the task's check and has room by the registration.
        let output = WithSideChannels {
            main: FreesAfter::boxed(1),
            side: vec![FreesAfter::boxed(0)],
        };
        assert!(woken_after_suspending(&output));
        // The same for a side output.
        let output = WithSideChannels {
            main: FreesAfter::boxed(0),
            side: vec![FreesAfter::boxed(0), FreesAfter::boxed(1)],
        };
        assert!(woken_after_suspending(&output));
    }

    #[test]
    fn an_output_still_full_at_the_registration_holds_the_notice() {
        let output = WithSideChannels {
            main: FreesAfter::boxed(0),
            side: vec![FreesAfter::boxed(usize::MAX)],
        };
        assert!(!woken_after_suspending(&output));
    }
}
