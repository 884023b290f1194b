//! Open chain segments: how a vertex's head (a source, a gate) and the operators chained behind
//! it start as a task in each model.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{AsyncConfig, AsyncKey};
use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{BoxOperator, Chain, SideOutputs, TwoInputChain, TwoInputOperator};
use streamtask_core::task::TaskConfig;
use streamtask_legacy::{SourceContextConfig, SourceFunction};
use streamtask_mailbox::SourceReader;
use streamtask_runtime::channel::{InputGate, TwoInputGate};

use super::JobError;
use super::channel_state::{decode_range, gate_codec};
use super::side_channels::SideRegistry;
use super::spawn::{OpFactory, SpawnCtx, Spawner, Tail, TwoInputHeadFactory};
use crate::Model;

/// An open chain segment ending in `T`.
pub(crate) trait Segment<T>: Send + Sync {
    /// Closes the segment with `tail` (the rest of the chain and the task's output) and
    /// returns the vertex's spawner.
    fn finish(self: Box<Self>, tail: Tail<T>) -> Spawner;
}

pub(crate) struct ThenSegment<X, Y> {
    pub(crate) inner: Box<dyn Segment<X>>,
    pub(crate) op: OpFactory<X, Y>,
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

pub(crate) struct LegacySourceSegment<FF> {
    pub(crate) context: SourceContextConfig,
    pub(crate) factory: Arc<FF>,
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
                    Ok(
                        streamtask_mailbox::SourceStreamTask::new(config, reader, chain, output)
                            .spawn(),
                    )
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
pub(crate) fn replay_in_flight<F>(
    source: F,
    config: &mut TaskConfig,
) -> streamtask_bridge::InFlightReplay<F>
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

pub(crate) struct ReaderSegment<T, RF> {
    pub(crate) factory: Arc<RF>,
    pub(crate) _types: std::marker::PhantomData<fn() -> T>,
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
            let mut reader = factory(ctx.subtask);
            reader.attach(&config);
            match ctx.model {
                Model::Mailbox | Model::Bridge => Ok(streamtask_mailbox::SourceStreamTask::new(
                    config, reader, chain, output,
                )
                .spawn()),
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

pub(crate) struct LegacyAsyncSegment<F: AsyncFunction, FF> {
    pub(crate) edge: usize,
    pub(crate) name: String,
    pub(crate) config: AsyncConfig<F::Out>,
    pub(crate) key: Option<AsyncKey<F::In>>,
    pub(crate) factory: Arc<FF>,
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

pub(crate) struct TwoInputSegment<H: TwoInputOperator> {
    pub(crate) edges: (usize, usize),
    pub(crate) head: TwoInputHeadFactory<H>,
    pub(crate) side: Option<Arc<SideRegistry>>,
    pub(crate) _types: std::marker::PhantomData<fn() -> H>,
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
                    streamtask_mailbox::TwoInputStreamTask::new(config, gate, chain, output).spawn()
                }
            })
        })
    }
}

pub(crate) struct InputSegment<T> {
    /// The edges read, all into one gate (more than one after a union).
    pub(crate) edges: Vec<usize>,
    pub(crate) _types: std::marker::PhantomData<fn() -> T>,
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
                    streamtask_mailbox::OneInputStreamTask::new(config, gate, chain, output).spawn()
                }
            })
        })
    }
}
