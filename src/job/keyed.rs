//! [`KeyedStream`]: a stream partitioned by key, and [`DataStream::key_by`] that makes it.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{AsyncBatchFunction, AsyncConfig, AsyncKey, BatchedAsyncFunction};
use streamtask_core::function::{AsyncFunction, KeyedProcessFunction};
use streamtask_core::keygroup::StableKey;
use streamtask_core::operator::KeyedProcessOperator;
use streamtask_runtime::channel::Partitioner;

use super::JobError;
use super::spawn::KeyFn;
use super::stream::DataStream;
use super::wiring::EdgePattern;
use crate::Model;

impl<T: Send + 'static> DataStream<T> {
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
    /// [`DataStream::async_wait`]. With [`OutputMode::KeyOrdered`](streamtask_core::async_io::OutputMode::KeyOrdered) the results of one key leave
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
    /// is [`DataStream::async_wait`]. With [`OutputMode::KeyOrdered`](streamtask_core::async_io::OutputMode::KeyOrdered) a batch holds at most one
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
    /// [`KeyedAsyncOperatorDriver`](streamtask_mailbox::KeyedAsyncOperatorDriver));
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
                    streamtask_mailbox::KeyedAsyncOperatorDriver::new(
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
