//! Two inputs keyed alike over one keyed backend: [`KeyedCoProcessOperator`] runs a
//! [`CoProcessFunction`] whose per-key state and timers both inputs share.
//!
//! Each input has its own key selector; records of both inputs with equal keys reach the same
//! state (the job layer hash-partitions both inputs by their keys, so they also reach the same
//! subtask). The task hands the operator the combined watermark of both inputs, which fires the
//! event-time timers; the end-of-input hook runs once, when the second input ends (by then the
//! combined watermark is [`Watermark::MAX`]). State, timers and the watermark are snapshotted
//! by the shared keyed backend, in the same format as a one-input keyed operator.

use std::fmt;

use super::keyed_backend::KeyedBackend;
use super::side_output::SideOutputs;
use super::{Context, TwoInputOperator};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::function::CoProcessFunction;
use crate::keygroup::StableKey;
use crate::time::Timer;

/// Runs a [`CoProcessFunction`] over two keyed inputs (Flink's `KeyedCoProcessOperator`).
pub struct KeyedCoProcessOperator<K1, K2, F: CoProcessFunction> {
    name: String,
    key1: K1,
    key2: K2,
    function: F,
    backend: KeyedBackend<F::Key, F::State>,
    inputs_ended: u8,
}

impl<K1, K2, F> KeyedCoProcessOperator<K1, K2, F>
where
    F: CoProcessFunction,
    K1: FnMut(&F::In1) -> F::Key + Send,
    K2: FnMut(&F::In2) -> F::Key + Send,
{
    /// A keyed co-process operator named `name`, keying the first input with `key1` and the
    /// second with `key2`.
    pub fn new(name: impl Into<String>, key1: K1, key2: K2, function: F) -> Self {
        KeyedCoProcessOperator {
            name: name.into(),
            key1,
            key2,
            function,
            backend: KeyedBackend::new(false),
            inputs_ended: 0,
        }
    }

    /// The same operator, emitting side outputs into `side`.
    pub fn with_side_outputs(mut self, side: SideOutputs) -> Self {
        self.backend.set_side_outputs(side);
        self
    }

    /// Sets the max parallelism its state is cut into key groups by (default
    /// [`DEFAULT_MAX_PARALLELISM`](crate::keygroup::DEFAULT_MAX_PARALLELISM)); it must equal
    /// the job's, and the key partitioner's in front.
    pub fn with_max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.backend.set_max_parallelism(max_parallelism);
        self
    }

    /// Number of keys with state.
    pub fn key_count(&self) -> usize {
        self.backend.key_count()
    }

    /// The user function.
    pub fn function(&self) -> &F {
        &self.function
    }
}

impl<K1, K2, F> TwoInputOperator for KeyedCoProcessOperator<K1, K2, F>
where
    F: CoProcessFunction,
    F::Key: StableKey,
    K1: FnMut(&F::In1) -> F::Key + Send,
    K2: FnMut(&F::In2) -> F::Key + Send,
{
    type In1 = F::In1;
    type In2 = F::In2;
    type Out = F::Out;

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        self.backend.initialize_state(&self.name, restored)
    }

    fn open(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        let function = &mut self.function;
        self.backend
            .open(ctx, |ts, domain, kctx| function.on_timer(ts, domain, kctx))
    }

    fn process_element1(
        &mut self,
        record: StreamRecord<F::In1>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let key = (self.key1)(&record.value);
        let (value, function) = (record.value, &mut self.function);
        self.backend.call(key, record.timestamp, ctx, |kctx| {
            function.process_element1(value, kctx)
        })
    }

    fn process_element2(
        &mut self,
        record: StreamRecord<F::In2>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let key = (self.key2)(&record.value);
        let (value, function) = (record.value, &mut self.function);
        self.backend.call(key, record.timestamp, ctx, |kctx| {
            function.process_element2(value, kctx)
        })
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let function = &mut self.function;
        self.backend
            .process_watermark(watermark, ctx, |ts, domain, kctx| {
                function.on_timer(ts, domain, kctx)
            })
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.backend.process_status(status, ctx)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let function = &mut self.function;
        self.backend
            .on_processing_time(timer, ctx, |ts, domain, kctx| {
                function.on_timer(ts, domain, kctx)
            })
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.backend.snapshot(&self.name).map(Some)
    }

    /// The end-of-input hook runs once, when the second input ends.
    fn end_input(
        &mut self,
        _input: u8,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.inputs_ended += 1;
        if self.inputs_ended == 2 {
            self.function
                .end_input(&mut self.backend.end_of_input(ctx))?;
        }
        Ok(())
    }
}

impl<K1, K2, F: CoProcessFunction> fmt::Debug for KeyedCoProcessOperator<K1, K2, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCoProcessOperator")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::{CoProcessFunction, TimeDomain};
    use crate::operator::EndOfInputContext;
    use crate::operator::{KeyedContext, Map, TwoInputChain};
    use crate::testing::TwoInputHarness;

    /// Sums both inputs per key (`n % 3`); input 2 also registers a processing-time timer that
    /// reports the sum, and the end-of-input hook reports what is left.
    struct Sums;

    impl CoProcessFunction for Sums {
        type Key = u64;
        type In1 = u64;
        type In2 = u64;
        type Out = String;
        type State = u64;

        fn process_element1(
            &mut self,
            value: u64,
            ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
        ) -> Result<(), OperatorError> {
            *ctx.state() += value;
            Ok(())
        }

        fn process_element2(
            &mut self,
            value: u64,
            ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
        ) -> Result<(), OperatorError> {
            *ctx.state() += value * 100;
            let at = ctx.processing_time() + 10;
            ctx.register_processing_timer(at);
            Ok(())
        }

        fn on_timer(
            &mut self,
            _timestamp: i64,
            domain: TimeDomain,
            ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
        ) -> Result<(), OperatorError> {
            let key = *ctx.key();
            let msg = format!("timer {domain:?} {key}={}", ctx.state());
            ctx.collect(msg)
        }

        fn end_input(
            &mut self,
            ctx: &mut EndOfInputContext<'_, '_, u64, u64, String>,
        ) -> Result<(), OperatorError> {
            let pending = ctx.pending_processing_timers().len();
            for (key, sum) in ctx.take_states() {
                ctx.collect(format!("end {key}={sum} pending={pending}"))?;
            }
            Ok(())
        }
    }

    type Key = fn(&u64) -> u64;
    type Id = Map<String, String, fn(String) -> String>;

    fn harness() -> TwoInputHarness<KeyedCoProcessOperator<Key, Key, Sums>, Id> {
        let op = KeyedCoProcessOperator::new("sums", (|n| n % 3) as Key, (|n| n % 3) as Key, Sums);
        TwoInputHarness::new(TwoInputChain::new(
            op,
            Map::new("id", (|s| s) as fn(String) -> String),
        ))
    }

    #[test]
    fn both_inputs_share_the_state_of_a_key() {
        let mut h = harness();
        h.open().unwrap();
        h.process1(3).unwrap();
        h.process2(6).unwrap();
        h.process1(1).unwrap();
        h.end_both().unwrap();
        assert_eq!(
            h.output_values(),
            vec![
                "end 0=603 pending=1".to_string(),
                "end 1=1 pending=1".to_string()
            ]
        );
    }

    #[test]
    fn processing_timers_fire_with_the_shared_state_and_survive_a_restore() {
        let mut h = harness();
        h.open().unwrap();
        h.process2(3).unwrap();
        h.process1(3).unwrap();
        let snap = h.snapshot(1).unwrap();

        let mut restored = harness();
        restored.restore(&snap).unwrap();
        restored.advance_processing_time(20).unwrap();
        assert_eq!(
            restored.output_values(),
            vec!["timer ProcessingTime 0=303".to_string()]
        );
    }
}
