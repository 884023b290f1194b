//! Connected streams keyed alike: [`ConnectedStreams::key_by`] and
//! [`KeyedConnectedStreams::process`] with a [`CoProcessFunction`] (Flink's
//! `connect(..).keyBy(..).process(KeyedCoProcessFunction)`).
//!
//! Both inputs are hash-partitioned by their keys into the same number of subtasks, so equal
//! keys of both inputs meet in one subtask, where the two-input task aligns barriers across
//! both inputs and the operator keeps per-key state and timers shared by both.

use std::fmt;
use std::sync::Arc;
use streamtask_core::keygroup::StableKey;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::function::CoProcessFunction;
use streamtask_core::operator::KeyedCoProcessOperator;
use streamtask_runtime::channel::Partitioner;

use super::connect::ConnectedStreams;
use super::spawn::{KeyFn, SpawnCtx};
use super::stream::DataStream;
use super::wiring::EdgePattern;

impl<A: Send + 'static, B: Send + 'static> ConnectedStreams<A, B> {
    /// Keys the first stream by `key1` and the second by `key2` (of one key type), for a
    /// [`CoProcessFunction`] with per-key state shared by both inputs; see
    /// [`KeyedConnectedStreams::process`].
    pub fn key_by<K, K1, K2>(self, key1: K1, key2: K2) -> KeyedConnectedStreams<A, B, K>
    where
        K: StableKey + 'static,
        K1: Fn(&A) -> K + Send + Sync + 'static,
        K2: Fn(&B) -> K + Send + Sync + 'static,
    {
        KeyedConnectedStreams {
            streams: self,
            key1: Arc::new(key1),
            key2: Arc::new(key2),
        }
    }
}

/// Two connected streams keyed alike; built by [`ConnectedStreams::key_by`].
#[must_use = "keyed connected streams do nothing until processed"]
pub struct KeyedConnectedStreams<A, B, K> {
    streams: ConnectedStreams<A, B>,
    key1: KeyFn<A, K>,
    key2: KeyFn<B, K>,
}

impl<A, B, K> KeyedConnectedStreams<A, B, K>
where
    A: Send + 'static,
    B: Send + 'static,
    K: StableKey + Ord + Clone + Serialize + DeserializeOwned + Send + 'static,
{
    /// Runs `function` (made by `factory(subtask)`) over both streams in a new two-input task
    /// vertex `name` of `parallelism` subtasks, both inputs hash-partitioned by key. Per-key
    /// state, processing- and event-time timers (on the combined watermark of both inputs) and
    /// the end-of-input hook are those of a keyed process; its side outputs are read with
    /// [`DataStream::side_output`] on the returned stream.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// /// Counts both inputs per key and reports the counts at end of input.
    /// struct Both;
    /// impl CoProcessFunction for Both {
    ///     type Key = u64;
    ///     type In1 = u64;
    ///     type In2 = u64;
    ///     type Out = (u64, u64);
    ///     type State = u64;
    ///     fn process_element1(&mut self, _: u64, ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, u64)>)
    ///         -> Result<(), OperatorError> { *ctx.state() += 1; Ok(()) }
    ///     fn process_element2(&mut self, _: u64, ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, u64)>)
    ///         -> Result<(), OperatorError> { *ctx.state() += 10; Ok(()) }
    ///     fn end_input(&mut self, ctx: &mut EndOfInputContext<'_, '_, u64, u64, (u64, u64)>)
    ///         -> Result<(), OperatorError> {
    ///         for (key, count) in ctx.take_states() { ctx.collect((key, count))?; }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new(Model::Legacy);
    /// let out = CollectHandle::new();
    /// env.from_sequence("a", 0..4)
    ///     .connect(env.from_sequence("b", 0..2))
    ///     .key_by(|n: &u64| n % 2, |n: &u64| n % 2)
    ///     .process("both", 2, |_| Both)
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let mut got = out.committed();
    /// got.sort();
    /// assert_eq!(got, [(0, 12), (1, 12)]);
    /// ```
    pub fn process<F, FF>(self, name: &str, parallelism: usize, factory: FF) -> DataStream<F::Out>
    where
        F: CoProcessFunction<In1 = A, In2 = B, Key = K> + 'static,
        F::Out: Send + 'static,
        FF: Fn(usize) -> F + Send + Sync + 'static,
    {
        let KeyedConnectedStreams {
            streams: ConnectedStreams { first, second },
            key1,
            key2,
        } = self;
        let env = first.env.clone();
        if !std::rc::Rc::ptr_eq(&first.env.graph, &second.env.graph) {
            env.fail(super::JobError::UnionAcrossJobs {
                vertex: name.to_string(),
            });
        }
        if parallelism == 0 {
            env.fail(super::JobError::ZeroParallelism {
                vertex: name.to_string(),
            });
        }
        let down = parallelism.max(1);
        let max_parallelism = env.checked_max_parallelism(name, down);
        let part1 = Arc::clone(&key1);
        let input1 = first.edge_into(
            name,
            EdgePattern::AllToAll,
            "hash",
            down,
            Arc::new(move |_| {
                let k = Arc::clone(&part1);
                Partitioner::by_key_with_max_parallelism(max_parallelism, move |v: &A| k(v))
            }),
        );
        let part2 = Arc::clone(&key2);
        let input2 = second.edge_into(
            name,
            EdgePattern::AllToAll,
            "hash",
            down,
            Arc::new(move |_| {
                let k = Arc::clone(&part2);
                Partitioner::by_key_with_max_parallelism(max_parallelism, move |v: &B| k(v))
            }),
        );
        let op_name = name.to_string();
        ConnectedStreams::<A, B>::two_input_vertex(
            env,
            name,
            down,
            input1,
            input2,
            Arc::new(move |ctx: &SpawnCtx<'_>, side| {
                let (k1, k2) = (Arc::clone(&key1), Arc::clone(&key2));
                KeyedCoProcessOperator::new(
                    op_name.clone(),
                    move |v: &A| k1(v),
                    move |v: &B| k2(v),
                    factory(ctx.subtask),
                )
                .with_side_outputs(side)
                .with_max_parallelism(max_parallelism)
            }),
            true,
        )
    }
}

impl<A, B, K> fmt::Debug for KeyedConnectedStreams<A, B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConnectedStreams")
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}
