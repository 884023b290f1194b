//! Keyed processing: per-key state and per-key timers in processing and event time.
//!
//! [`KeyedProcessOperator`] keeps one `State` value per key and the timers each key registered.
//! Processing-time timers are backed by one runtime timer per distinct timestamp; event-time
//! timers fire when a watermark passes them, before the watermark is forwarded. State and timers
//! are part of the operator's snapshot, and restored processing-time timers are registered again
//! on `open` (timers whose time has passed fire at once).
//!
//! The snapshot is cut by key group (a [`KeyGroupedState`] of each key group's states and
//! timers, see [`crate::keygroup`]), so a restore with another parallelism gets exactly the keys
//! of its key-group range, their timers with them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Context, Operator};
use crate::element::{StreamRecord, Watermark};
use crate::error::OperatorError;
use crate::function::{KeyedProcessFunction, TimeDomain};
use crate::keygroup::{DEFAULT_MAX_PARALLELISM, KeyGroupedState, StableKey, key_group_of};
use crate::time::Timer;

#[derive(Debug, Default)]
struct KeyedTimers<K> {
    processing: BTreeSet<(i64, K)>,
    event: BTreeSet<(i64, K)>,
    // Runtime timers asked for, one per distinct processing-time timestamp.
    physical: BTreeSet<i64>,
    // Registrations made during a call, to hand to the runtime once the call returns.
    to_register: Vec<i64>,
}

/// What a [`KeyedProcessFunction`] sees: its key, that key's state, timers, and the output.
pub struct KeyedContext<'a, 'b, K, S, O> {
    key: &'a K,
    state: &'a mut S,
    clear: bool,
    timestamp: Option<i64>,
    watermark: Watermark,
    timers: &'a mut KeyedTimers<K>,
    out: &'a mut Context<'b, O>,
}

impl<K: Ord + Clone, S: Default, O> KeyedContext<'_, '_, K, S, O> {
    /// The key of the record or timer being processed.
    pub fn key(&self) -> &K {
        self.key
    }

    /// This key's state.
    pub fn state(&mut self) -> &mut S {
        self.clear = false;
        self.state
    }

    /// Drops this key's state (it starts from `default()` next time).
    pub fn clear_state(&mut self) {
        *self.state = S::default();
        self.clear = true;
    }

    /// The timestamp of the record being processed, or of the timer that fired.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The current event-time watermark of this operator.
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// Current processing time in milliseconds.
    pub fn processing_time(&self) -> i64 {
        self.out.processing_time()
    }

    /// Emits a value with the current timestamp (the record's, or the event-time timer's).
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn collect(&mut self, value: O) -> Result<(), OperatorError> {
        let timestamp = self.timestamp;
        self.out.collect(StreamRecord { value, timestamp })
    }

    /// Emits a record as given.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn collect_record(&mut self, record: StreamRecord<O>) -> Result<(), OperatorError> {
        self.out.collect(record)
    }

    /// Registers a processing-time timer for this key (duplicates collapse into one).
    pub fn register_processing_timer(&mut self, timestamp: i64) {
        if self.timers.processing.insert((timestamp, self.key.clone()))
            && !self.timers.physical.contains(&timestamp)
        {
            self.timers.to_register.push(timestamp);
        }
    }

    /// Deletes a processing-time timer of this key.
    pub fn delete_processing_timer(&mut self, timestamp: i64) {
        self.timers
            .processing
            .remove(&(timestamp, self.key.clone()));
    }

    /// Registers an event-time timer for this key (duplicates collapse into one).
    pub fn register_event_timer(&mut self, timestamp: i64) {
        self.timers.event.insert((timestamp, self.key.clone()));
    }

    /// Deletes an event-time timer of this key.
    pub fn delete_event_timer(&mut self, timestamp: i64) {
        self.timers.event.remove(&(timestamp, self.key.clone()));
    }
}

impl<K: fmt::Debug, S, O> fmt::Debug for KeyedContext<'_, '_, K, S, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedContext")
            .field("key", self.key)
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// Runs a [`KeyedProcessFunction`]: groups by a key selector, keeps per-key state and timers.
pub struct KeyedProcessOperator<KS, F: KeyedProcessFunction> {
    name: String,
    key_of: KS,
    function: F,
    states: BTreeMap<F::Key, F::State>,
    timers: KeyedTimers<F::Key>,
    watermark: Watermark,
    max_parallelism: u32,
}

/// What one key group of a [`KeyedProcessOperator`] holds in a snapshot: its keys' states and
/// timers (the snapshot is a [`KeyGroupedState`] of these, so it can be redistributed).
#[derive(Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, S: Serialize",
    deserialize = "K: DeserializeOwned, S: DeserializeOwned"
))]
struct KeyGroupEntries<K, S> {
    states: Vec<(K, S)>,
    processing_timers: Vec<(i64, K)>,
    event_timers: Vec<(i64, K)>,
}

impl<K, S> Default for KeyGroupEntries<K, S> {
    fn default() -> Self {
        KeyGroupEntries {
            states: Vec::new(),
            processing_timers: Vec::new(),
            event_timers: Vec::new(),
        }
    }
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
            states: BTreeMap::new(),
            timers: KeyedTimers {
                processing: BTreeSet::new(),
                event: BTreeSet::new(),
                physical: BTreeSet::new(),
                to_register: Vec::new(),
            },
            watermark: Watermark::MIN,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
        }
    }

    /// Sets the max parallelism its state is cut into key groups by (default
    /// [`DEFAULT_MAX_PARALLELISM`]); it must equal the job's, and the partitioner's in front.
    pub fn with_max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// Number of keys with state.
    pub fn key_count(&self) -> usize {
        self.states.len()
    }

    /// The user function.
    pub fn function(&self) -> &F {
        &self.function
    }

    fn call(
        &mut self,
        key: F::Key,
        timestamp: Option<i64>,
        ctx: &mut Context<'_, F::Out>,
        body: impl FnOnce(
            &mut F,
            &mut KeyedContext<'_, '_, F::Key, F::State, F::Out>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let mut state = self.states.remove(&key).unwrap_or_default();
        let (result, clear) = {
            let mut kctx = KeyedContext {
                key: &key,
                state: &mut state,
                clear: false,
                timestamp,
                watermark: self.watermark,
                timers: &mut self.timers,
                out: ctx,
            };
            let result = body(&mut self.function, &mut kctx);
            (result, kctx.clear)
        };
        if !clear {
            self.states.insert(key, state);
        }
        self.register_pending(ctx)?;
        result
    }

    fn register_pending(&mut self, ctx: &Context<'_, F::Out>) -> Result<(), OperatorError> {
        for timestamp in std::mem::take(&mut self.timers.to_register) {
            if self.timers.physical.insert(timestamp) {
                ctx.register_timer(timestamp, 0)?;
            }
        }
        Ok(())
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
        let Some(bytes) = restored else {
            return Ok(());
        };
        // One snapshot per key group; after a rescale, those of several old subtasks (or a part
        // of one old subtask's): the job layer cut them to this subtask's key-group range.
        let snap: KeyGroupedState<KeyGroupEntries<F::Key, F::State>> =
            KeyGroupedState::decode(bytes).map_err(|e| OperatorError::state(&self.name, e))?;
        if snap.max_parallelism != self.max_parallelism {
            return Err(OperatorError::user(
                &self.name,
                format!(
                    "its state was written with max parallelism {}, the operator has {}; keep \
                     the job's max parallelism across a restore",
                    snap.max_parallelism, self.max_parallelism
                ),
            ));
        }
        self.watermark = Watermark(snap.watermark);
        for (_, group) in snap.into_groups() {
            self.states.extend(group.states);
            self.timers.processing.extend(group.processing_timers);
            self.timers.event.extend(group.event_timers);
        }
        Ok(())
    }

    fn open(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        // Restored processing-time timers need runtime timers again.
        let mut distinct: Vec<i64> = self.timers.processing.iter().map(|(t, _)| *t).collect();
        distinct.dedup();
        self.timers.to_register.extend(distinct);
        self.register_pending(ctx)
    }

    fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let key = (self.key_of)(&record.value);
        let value = record.value;
        self.call(key, record.timestamp, ctx, |f, kctx| {
            f.process_element(value, kctx)
        })
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.watermark = self.watermark.max(watermark);
        // Fire every event-time timer at or below the watermark, in time order; a timer may
        // register another one that is also due, so look again each round.
        while let Some((ts, _)) = self.timers.event.first() {
            if *ts > watermark.0 {
                break;
            }
            let (ts, key) = self.timers.event.pop_first().expect("checked non-empty");
            self.call(key, Some(ts), ctx, |f, kctx| {
                f.on_timer(ts, TimeDomain::EventTime, kctx)
            })?;
        }
        ctx.emit_watermark(watermark)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.timers.physical.remove(&timer.timestamp);
        while let Some((ts, _)) = self.timers.processing.first() {
            if *ts > timer.timestamp {
                break;
            }
            let (ts, key) = self
                .timers
                .processing
                .pop_first()
                .expect("checked non-empty");
            self.call(key, None, ctx, |f, kctx| {
                f.on_timer(ts, TimeDomain::ProcessingTime, kctx)
            })?;
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        let max = self.max_parallelism;
        let mut groups: BTreeMap<u32, KeyGroupEntries<&F::Key, &F::State>> = BTreeMap::new();
        for (key, state) in &self.states {
            let group = groups.entry(key_group_of(key, max)).or_default();
            group.states.push((key, state));
        }
        for (t, key) in &self.timers.processing {
            let group = groups.entry(key_group_of(key, max)).or_default();
            group.processing_timers.push((*t, key));
        }
        for (t, key) in &self.timers.event {
            let group = groups.entry(key_group_of(key, max)).or_default();
            group.event_timers.push((*t, key));
        }
        KeyGroupedState::new(max, self.watermark.0, groups)
            .encode()
            .map(Some)
            .map_err(|e| OperatorError::state(&self.name, e))
    }
}

impl<KS, F: KeyedProcessFunction> fmt::Debug for KeyedProcessOperator<KS, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedProcessOperator")
            .field("name", &self.name)
            .field("keys", &self.states.len())
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::{KeyedProcessFunction, TimeDomain};
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
        let bytes = snap.get(&crate::TaskSnapshot::operator_key(0)).unwrap();
        let parts = redistribute_key_groups(&[Some(bytes)], 128, 2).unwrap();
        let mut fired = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let mut restored = crate::TaskSnapshot::new();
            restored.put(crate::TaskSnapshot::operator_key(0), part.clone().unwrap());
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
}
