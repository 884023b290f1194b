//! Keyed processing: per-key state and per-key timers in processing and event time.
//!
//! [`KeyedProcessOperator`] runs a [`KeyedProcessFunction`] over the shared keyed machinery
//! (`keyed_backend`: state, timers, watermark, side outputs and their snapshot, and what a
//! watermark, a status or a timer does); the operator only keys records and hands them in.
//!
//! # End of input
//!
//! When the input ends the source has already sent [`Watermark::MAX`], which fired every
//! event-time timer and was forwarded; then `end_input` calls the function's
//! [`end_input`](KeyedProcessFunction::end_input) hook once, with every key's state, the main
//! and side outputs. Processing-time timers still pending then do not fire (as Flink: the task
//! stops its timer service at end of input); the hook sees them through
//! [`EndOfInputContext::pending_processing_timers`](super::EndOfInputContext::pending_processing_timers)
//! and may emit what they would have.

use std::fmt;

use super::keyed_backend::KeyedBackend;
use super::side_output::SideOutputs;
use super::{Context, Operator, OperatorEvent};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::function::KeyedProcessFunction;
use crate::keygroup::StableKey;
use crate::time::Timer;

/// Runs a [`KeyedProcessFunction`]: groups by a key selector, keeps per-key state and timers.
pub struct KeyedProcessOperator<KS, F: KeyedProcessFunction> {
    name: String,
    key_of: KS,
    function: F,
    backend: KeyedBackend<F::Key, F::State>,
}

impl<KS, F> KeyedProcessOperator<KS, F>
where
    F: KeyedProcessFunction,
    KS: FnMut(&F::In) -> F::Key + Send,
{
    /// A keyed process operator named `name`, keying records with `key_of`.
    pub fn new(name: impl Into<String>, key_of: KS, function: F) -> Self {
        KeyedProcessOperator {
            name: name.into(),
            key_of,
            function,
            backend: KeyedBackend::new(true),
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

impl<KS, F> Operator for KeyedProcessOperator<KS, F>
where
    F: KeyedProcessFunction,
    F::Key: StableKey,
    KS: FnMut(&F::In) -> F::Key + Send,
{
    type In = F::In;
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

    fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let key = (self.key_of)(&record.value);
        let (value, function) = (record.value, &mut self.function);
        self.backend.call(key, record.timestamp, ctx, |kctx| {
            function.process_element(value, kctx)
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

    /// The continuation of a deferred firing of event-time timers; every other event is
    /// refused.
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        if !KeyedBackend::<F::Key, F::State>::is_continuation(&event) {
            return Err(OperatorError::UnexpectedEvent {
                operator: self.name.clone(),
            });
        }
        let function = &mut self.function;
        self.backend
            .continue_firing(ctx, |ts, domain, kctx| function.on_timer(ts, domain, kctx))
    }

    /// No record while a firing of event-time timers is deferred: a record could change the
    /// state a due timer of its key reads, and end of input waits for the firing.
    fn accepts_input(&self) -> bool {
        !self.backend.is_firing_deferred()
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

    fn end_input(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        self.function.end_input(&mut self.backend.end_of_input(ctx))
    }
}

impl<KS, F: KeyedProcessFunction> fmt::Debug for KeyedProcessOperator<KS, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedProcessOperator")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::{KeyedProcessFunction, TimeDomain};
    use crate::operator::{EndOfInputContext, KeyedContext};
    use crate::testing::OperatorHarness;

    /// Counts per key; emits the count 100 ms (processing time) after a key's first record.
    struct DelayedCount;

    impl KeyedProcessFunction for DelayedCount {
        type Key = u32;
        type In = u32;
        type Out = (u32, u64);
        type State = u64;

        fn process_element(
            &mut self,
            value: u32,
            ctx: &mut KeyedContext<'_, '_, u32, u64, (u32, u64)>,
        ) -> Result<(), OperatorError> {
            let _ = value;
            if *ctx.state() == 0 {
                let at = ctx.processing_time() + 100;
                ctx.register_processing_timer(at);
            }
            *ctx.state() += 1;
            Ok(())
        }

        fn on_timer(
            &mut self,
            _timestamp: i64,
            domain: TimeDomain,
            ctx: &mut KeyedContext<'_, '_, u32, u64, (u32, u64)>,
        ) -> Result<(), OperatorError> {
            assert_eq!(domain, TimeDomain::ProcessingTime);
            let out = (*ctx.key(), *ctx.state());
            ctx.clear_state();
            ctx.collect(out)
        }
    }

    fn op() -> KeyedProcessOperator<impl FnMut(&u32) -> u32 + Send, DelayedCount> {
        KeyedProcessOperator::new("count", |v: &u32| v % 3, DelayedCount)
    }

    #[test]
    fn processing_timers_fire_per_key_and_share_runtime_timers() {
        let mut h = OperatorHarness::new(op());
        h.open().unwrap();
        for v in [0, 1, 3, 4, 6] {
            h.process(v).unwrap();
        }
        // Keys 0 and 1 registered the same timestamp: one runtime timer.
        assert_eq!(h.pending_timers(), 1);
        h.advance_processing_time(101).unwrap();
        assert_eq!(h.output_values(), vec![(0, 3), (1, 2)]);
        assert_eq!(h.operator().key_count(), 0);
    }

    #[test]
    fn state_and_timers_survive_a_restore() {
        let mut h = OperatorHarness::new(op());
        h.open().unwrap();
        h.process(2).unwrap();
        h.process(5).unwrap();
        let snap = h.snapshot(1).unwrap();

        let mut restored = OperatorHarness::restored(op(), &snap);
        restored.open().unwrap();
        assert_eq!(restored.pending_timers(), 1);
        restored.advance_processing_time(200).unwrap();
        assert_eq!(restored.output_values(), vec![(2, 2)]);
    }

    #[test]
    fn state_and_timers_move_by_key_group_on_a_rescale() {
        use crate::keygroup::{KeyGroupRange, key_group_of, redistribute_key_groups};
        let mut h = OperatorHarness::new(KeyedProcessOperator::new(
            "count",
            |v: &u32| *v,
            DelayedCount,
        ));
        h.open().unwrap();
        for v in 0..40 {
            h.process(v).unwrap();
        }
        let snap = h.snapshot(1).unwrap();
        let bytes = snap
            .get(&crate::state::TaskSnapshot::operator_key(0))
            .unwrap();
        let parts = redistribute_key_groups(&[Some(bytes)], 128, 2).unwrap();
        let mut fired = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let mut restored = crate::state::TaskSnapshot::new();
            restored.put(
                crate::state::TaskSnapshot::operator_key(0),
                part.clone().unwrap(),
            );
            let op = KeyedProcessOperator::new("count", |v: &u32| *v, DelayedCount);
            let mut r = OperatorHarness::restored(op, &restored);
            r.open().unwrap();
            let range = KeyGroupRange::for_operator(128, 2, i as u32);
            assert!(r.operator().key_count() > 0, "both halves own keys");
            r.advance_processing_time(200).unwrap();
            for (key, count) in r.output_values() {
                assert!(
                    range.contains(key_group_of(&key, 128)),
                    "{key} moved to its owner"
                );
                assert_eq!(count, 1);
                fired.push(key);
            }
        }
        fired.sort_unstable();
        assert_eq!(
            fired,
            (0..40).collect::<Vec<_>>(),
            "every key's timer fired once"
        );
    }

    struct EventTimer;

    impl KeyedProcessFunction for EventTimer {
        type Key = u8;
        type In = u8;
        type Out = String;
        type State = Vec<u8>;

        fn process_element(
            &mut self,
            value: u8,
            ctx: &mut KeyedContext<'_, '_, u8, Vec<u8>, String>,
        ) -> Result<(), OperatorError> {
            ctx.state().push(value);
            let ts = ctx.timestamp().unwrap();
            ctx.register_event_timer(ts + 10);
            Ok(())
        }

        fn on_timer(
            &mut self,
            timestamp: i64,
            domain: TimeDomain,
            ctx: &mut KeyedContext<'_, '_, u8, Vec<u8>, String>,
        ) -> Result<(), OperatorError> {
            assert_eq!(domain, TimeDomain::EventTime);
            assert_eq!(ctx.timestamp(), Some(timestamp));
            let key = *ctx.key();
            let msg = format!("{key}@{timestamp}:{:?}", ctx.state());
            ctx.collect(msg)
        }
    }

    #[test]
    fn event_timers_fire_before_the_watermark_is_forwarded() {
        let op = KeyedProcessOperator::new("evt", |v: &u8| *v, EventTimer);
        let mut h = OperatorHarness::new(op);
        h.open().unwrap();
        h.process_with_timestamp(1, 5).unwrap();
        h.process_with_timestamp(2, 7).unwrap();
        h.process_with_timestamp(1, 20).unwrap();
        h.process_watermark(Watermark(17)).unwrap();
        let emitted = h.take_output();
        use crate::operator::Emitted;
        assert_eq!(
            emitted,
            vec![
                Emitted::Record(StreamRecord::with_timestamp("1@15:[1, 1]".to_string(), 15)),
                Emitted::Record(StreamRecord::with_timestamp("2@17:[2]".to_string(), 17)),
                Emitted::Watermark(Watermark(17)),
            ]
        );
        h.process_watermark(Watermark::MAX).unwrap();
        assert_eq!(h.output_values(), vec!["1@30:[1, 1]".to_string()]);
    }

    /// Registers a processing-time timer per key far ahead; the end-of-input hook reports
    /// the watermark it saw, the pending timers and every key's count.
    struct Flush;

    impl KeyedProcessFunction for Flush {
        type Key = u32;
        type In = u32;
        type Out = String;
        type State = u32;

        fn process_element(
            &mut self,
            value: u32,
            ctx: &mut KeyedContext<'_, '_, u32, u32, String>,
        ) -> Result<(), OperatorError> {
            *ctx.state() += 1;
            ctx.register_processing_timer(1_000_000 + i64::from(value));
            ctx.register_event_timer(10);
            Ok(())
        }

        fn on_timer(
            &mut self,
            timestamp: i64,
            domain: TimeDomain,
            ctx: &mut KeyedContext<'_, '_, u32, u32, String>,
        ) -> Result<(), OperatorError> {
            let key = *ctx.key();
            ctx.collect(format!("{domain:?} {key}@{timestamp}"))
        }

        fn end_input(
            &mut self,
            ctx: &mut EndOfInputContext<'_, '_, u32, u32, String>,
        ) -> Result<(), OperatorError> {
            let line = format!(
                "end max={} pending={:?}",
                ctx.current_watermark().is_max(),
                ctx.pending_processing_timers()
            );
            ctx.collect(line)?;
            for (key, count) in ctx.take_states() {
                ctx.collect(format!("{key}={count}"))?;
            }
            Ok(())
        }
    }

    #[test]
    fn the_end_of_input_hook_follows_the_final_watermark_and_pending_timers_do_not_fire() {
        let op = KeyedProcessOperator::new("flush", |v: &u32| *v, Flush);
        let mut h = OperatorHarness::new(op);
        h.open().unwrap();
        h.process(1).unwrap();
        h.process(2).unwrap();
        h.process(1).unwrap();
        // What a finite source does at its end: the final watermark, then end of input.
        h.process_watermark(Watermark::MAX).unwrap();
        h.end_input().unwrap();
        assert_eq!(
            h.output_values(),
            vec![
                "EventTime 1@10".to_string(),
                "EventTime 2@10".to_string(),
                "end max=true pending=[(1000001, 1), (1000002, 2)]".to_string(),
                "1=2".to_string(),
                "2=1".to_string(),
            ]
        );
        assert_eq!(h.operator().key_count(), 0);
    }

    /// The shared floor's part of an interruptible firing: cut after a chunk when a mail waits,
    /// the watermark every fired timer allows forwarded, no input taken until the continuation
    /// finished, and a checkpoint between two chunks restored by firing the rest on open.
    #[test]
    fn an_interrupted_firing_goes_on_in_its_continuation_and_survives_a_snapshot() {
        use crate::operator::Emitted;
        let record = |key: u8, ts: i64| {
            Emitted::Record(StreamRecord::with_timestamp(
                format!("{key}@{ts}:[{key}]"),
                ts,
            ))
        };
        let op = KeyedProcessOperator::new("evt", |v: &u8| *v, EventTimer);
        let mut h = OperatorHarness::new(op);
        h.services()
            .firing
            .set_chunk(std::num::NonZeroUsize::new(2).unwrap());
        h.open().unwrap();
        for key in 0..6u8 {
            h.process_with_timestamp(key, i64::from(key)).unwrap(); // a timer at key + 10
        }
        h.services().firing.set_interrupting(true);
        h.process_watermark(Watermark(100)).unwrap();
        assert_eq!(
            h.take_output(),
            vec![
                record(0, 10),
                record(1, 11),
                Emitted::Watermark(Watermark(11))
            ]
        );
        assert!(
            !h.operator().accepts_input(),
            "no record while a firing is cut"
        );
        assert_eq!(h.pending_events(), 1, "the continuation");

        // A checkpoint between two chunks; then the continuations (each cut after its chunk
        // again, and queued behind the one that ran) until the firing is done.
        let snapshot = h.snapshot(1).unwrap();
        assert_eq!(h.process_events().unwrap(), 2);
        assert_eq!(
            h.take_output(),
            vec![
                record(2, 12),
                record(3, 13),
                Emitted::Watermark(Watermark(13)),
                record(4, 14),
                record(5, 15),
                Emitted::Watermark(Watermark(100))
            ]
        );
        assert!(h.operator().accepts_input());

        // Restored from the checkpoint: the timers not fired by then fire on open.
        let op = KeyedProcessOperator::new("evt", |v: &u8| *v, EventTimer);
        let mut restored = OperatorHarness::restored(op, &snapshot);
        restored.open().unwrap();
        assert_eq!(
            restored.take_output(),
            vec![
                record(2, 12),
                record(3, 13),
                record(4, 14),
                record(5, 15),
                Emitted::Watermark(Watermark(100))
            ]
        );
    }
}
