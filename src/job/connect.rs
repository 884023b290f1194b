//! [`ConnectedStreams`]: two streams processed by one two-input operator.

use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use streamtask_core::operator::{CoFlatMap, CoMap, TwoInputOperator};

use super::JobError;
use super::environment::StreamEnvironment;
use super::plan::{PlannedInput, PlannedTask};
use super::segment::TwoInputSegment;
use super::spawn::{SpawnCtx, TwoInputHeadFactory};
use super::stream::{DataStream, Head};
use crate::Model;

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
        let side = side_outputs.then(|| env.side_registry(name, 0));
        let plan = PlannedTask {
            name: name.to_string(),
            parallelism: down,
            runtime: match env.model {
                Model::Legacy => "legacy TwoInputStreamTask",
                Model::Mailbox | Model::Bridge => "mailbox TwoInputStreamTask",
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
