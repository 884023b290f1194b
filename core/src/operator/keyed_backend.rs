//! The keyed state and timer machinery shared by every keyed operator: one `State` value per
//! key, per-key timers in processing and event time, the current watermark, the side outputs,
//! and the snapshot of the state and timers.
//!
//! [`KeyedProcessOperator`](super::KeyedProcessOperator) (one input) and
//! [`KeyedCoProcessOperator`](super::KeyedCoProcessOperator) (two inputs sharing per-key state)
//! both keep a [`KeyedBackend`] and differ only in how records reach it: everything else an
//! operator is called for (restore, open, a watermark, a watermark status, a processing-time
//! timer, the snapshot, end of input) is one backend method, so what a keyed operator does
//! with it (fire the due timers, then forward to the main and the side outputs) is written
//! once. The snapshot format lives in one place, [`KeyedBackend::snapshot`] and
//! [`KeyedBackend::restore`], so a change of format is made once for every keyed operator.
//!
//! The snapshot is cut by key group (a [`KeyGroupedState`] of each key group's states and
//! timers, see [`crate::keygroup`]), so a restore with another parallelism gets exactly the keys
//! of its key-group range, their timers with them.
//!
//! Processing-time timers are backed by one runtime timer per distinct timestamp; event-time
//! timers fire when a watermark passes them, in time order, before the watermark is forwarded.
//! Restored processing-time timers are registered with the runtime again on `open` (those whose
//! time has passed fire at once).
//!
//! A backend made interruptible (the one-input keyed operator's) fires many due event-time
//! timers in chunks through the task's [`TimerFiring`](super::TimerFiring), as its docs
//! describe: a waiting mail cuts the firing after a chunk, an intermediate watermark goes
//! out, and a continuation event fires the rest. Restored event-time timers due at the
//! restored watermark (a checkpoint cut a firing) fire on `open`, before any record.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::side_output::{OutputTag, SideOutputs};
use super::{Context, OperatorEvent};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::function::TimeDomain;
use crate::keygroup::{DEFAULT_MAX_PARALLELISM, KeyGroupedState, StableKey, key_group_of};
use crate::time::Timer;

/// The event an interrupted firing defers to its own operator; private, so no other event is
/// ever taken for one.
struct ContinueFiring;

#[derive(Debug)]
pub(crate) struct KeyedTimers<K> {
    processing: BTreeSet<(i64, K)>,
    event: BTreeSet<(i64, K)>,
    // Runtime timers asked for, one per distinct processing-time timestamp.
    physical: BTreeSet<i64>,
    // Registrations made during a call, to hand to the runtime once the call returns.
    to_register: Vec<i64>,
}

/// Per-key state, per-key timers, the watermark and the side outputs of one keyed operator.
pub(crate) struct KeyedBackend<K, S> {
    states: BTreeMap<K, S>,
    timers: KeyedTimers<K>,
    watermark: Watermark,
    max_parallelism: u32,
    side: SideOutputs,
    /// Whether a firing may be interrupted (see the module doc).
    interruptible: bool,
    /// While a firing is deferred to its continuation: the watermark it fires up to.
    deferred: Option<Watermark>,
    /// The newest watermark forwarded (whole or intermediate).
    forwarded: Watermark,
}

/// What one key group holds in a snapshot: its keys' states and timers (the snapshot is a
/// [`KeyGroupedState`] of these, so it can be redistributed).
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

impl<K: Ord, S> KeyedBackend<K, S> {
    /// A backend whose firings of event-time timers may be interrupted if `interruptible`.
    pub(crate) fn new(interruptible: bool) -> Self {
        KeyedBackend {
            states: BTreeMap::new(),
            timers: KeyedTimers {
                processing: BTreeSet::new(),
                event: BTreeSet::new(),
                physical: BTreeSet::new(),
                to_register: Vec::new(),
            },
            watermark: Watermark::MIN,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            side: SideOutputs::new(),
            interruptible,
            deferred: None,
            forwarded: Watermark::MIN,
        }
    }

    /// Whether a firing of event-time timers waits for its continuation: the operator takes
    /// no record meanwhile, and its input may not end.
    pub(crate) fn is_firing_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Whether `event` is the continuation of a deferred firing.
    pub(crate) fn is_continuation(event: &OperatorEvent) -> bool {
        event.is::<ContinueFiring>()
    }

    /// Emits side outputs into `side` (none by default).
    pub(crate) fn set_side_outputs(&mut self, side: SideOutputs) {
        self.side = side;
    }

    /// Sets the max parallelism the state is cut into key groups by; it must equal the job's,
    /// and the key partitioner's in front.
    pub(crate) fn set_max_parallelism(&mut self, max_parallelism: u32) {
        self.max_parallelism = max_parallelism;
    }

    pub(crate) fn key_count(&self) -> usize {
        self.states.len()
    }
}

impl<K, S> KeyedBackend<K, S>
where
    K: Ord + Clone + Serialize + DeserializeOwned + StableKey,
    S: Default + Serialize + DeserializeOwned,
{
    /// The operator's `initialize_state`: restores `restored` if there is one.
    pub(crate) fn initialize_state(
        &mut self,
        operator: &str,
        restored: Option<&[u8]>,
    ) -> Result<(), OperatorError> {
        match restored {
            Some(bytes) => self.restore(operator, bytes),
            None => Ok(()),
        }
    }

    /// The state of every key and its timers, cut by key group, and the watermark, encoded: the
    /// one snapshot format of every keyed operator.
    pub(crate) fn snapshot(&self, operator: &str) -> Result<Vec<u8>, OperatorError> {
        let max = self.max_parallelism;
        let mut groups: BTreeMap<u32, KeyGroupEntries<&K, &S>> = BTreeMap::new();
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
            .map_err(|e| OperatorError::state(operator, e))
    }

    /// Restores what [`snapshot`](Self::snapshot) wrote: one entry per key group; after a
    /// rescale, those of several old subtasks (or part of one old subtask's), cut by the job
    /// layer to this subtask's key-group range.
    pub(crate) fn restore(&mut self, operator: &str, bytes: &[u8]) -> Result<(), OperatorError> {
        let snap: KeyGroupedState<KeyGroupEntries<K, S>> =
            KeyGroupedState::decode(bytes).map_err(|e| OperatorError::state(operator, e))?;
        if snap.max_parallelism != self.max_parallelism {
            return Err(OperatorError::user(
                operator,
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

    /// Registers runtime timers for the restored processing-time timers, and fires the
    /// restored event-time timers due at the restored watermark (a checkpoint taken while a
    /// firing was deferred holds them), in one go and before any record, then forwards that
    /// watermark.
    pub(crate) fn open<O>(
        &mut self,
        ctx: &mut Context<'_, O>,
        mut on_timer: impl FnMut(
            i64,
            TimeDomain,
            &mut KeyedContext<'_, '_, K, S, O>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let mut distinct: Vec<i64> = self.timers.processing.iter().map(|(t, _)| *t).collect();
        distinct.dedup();
        self.timers.to_register.extend(distinct);
        self.register_pending(ctx)?;
        let cut = self
            .timers
            .event
            .first()
            .is_some_and(|(ts, _)| *ts <= self.watermark.0);
        if cut {
            self.fire_due(self.watermark, false, ctx, &mut on_timer)?;
        }
        Ok(())
    }

    /// Runs `body` with `key`'s state and timers, then keeps the state (unless cleared) and
    /// hands new processing-time timers to the runtime.
    pub(crate) fn call<O>(
        &mut self,
        key: K,
        timestamp: Option<i64>,
        ctx: &mut Context<'_, O>,
        body: impl FnOnce(&mut KeyedContext<'_, '_, K, S, O>) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        // The state is changed in place: taking it out of the map and putting it back would
        // cost a removal and an insertion (with node rebalancing) per record. A key seen for
        // the first time gets its default state; a cleared one is removed afterwards.
        if !self.states.contains_key(&key) {
            self.states.insert(key.clone(), S::default());
        }
        let state = self
            .states
            .get_mut(&key)
            .expect("the key's state was just made if it was missing");
        let (result, clear) = {
            let mut kctx = KeyedContext {
                key: &key,
                state,
                clear: false,
                timestamp,
                watermark: self.watermark,
                timers: &mut self.timers,
                side: &mut self.side,
                out: ctx,
            };
            let result = body(&mut kctx);
            (result, kctx.clear)
        };
        if clear {
            self.states.remove(&key);
        }
        self.register_pending(ctx)?;
        result
    }

    /// The operator's `process_watermark`: advances the watermark, fires every event-time timer
    /// at or below it in time order (a timer may register another that is also due, so it looks
    /// again each round), then forwards the watermark to the main and the side outputs. An
    /// interruptible backend may defer part of the firing (see the module doc); while one is
    /// deferred, a watermark only raises what its continuation fires up to.
    pub(crate) fn process_watermark<O>(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, O>,
        mut on_timer: impl FnMut(
            i64,
            TimeDomain,
            &mut KeyedContext<'_, '_, K, S, O>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        self.watermark = self.watermark.max(watermark);
        if let Some(target) = self.deferred {
            // The continuation already queued goes on up to the newer watermark.
            self.deferred = Some(target.max(watermark));
            return Ok(());
        }
        self.fire_due(watermark, self.interruptible, ctx, &mut on_timer)
    }

    /// The continuation event of a deferred firing: fires on from where the firing stopped
    /// (and may defer again). One that finds nothing deferred does nothing.
    pub(crate) fn continue_firing<O>(
        &mut self,
        ctx: &mut Context<'_, O>,
        mut on_timer: impl FnMut(
            i64,
            TimeDomain,
            &mut KeyedContext<'_, '_, K, S, O>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        match self.deferred.take() {
            Some(target) => self.fire_due(target, self.interruptible, ctx, &mut on_timer),
            None => Ok(()),
        }
    }

    /// Fires the event-time timers at or below `target` in time order, then forwards `target`.
    /// If `interruptible`, after every chunk of the task's firing service it lets a waiting
    /// mail run: it forwards the watermark every fired timer allows, defers the rest to a
    /// continuation event, and returns.
    fn fire_due<O>(
        &mut self,
        target: Watermark,
        interruptible: bool,
        ctx: &mut Context<'_, O>,
        on_timer: &mut impl FnMut(
            i64,
            TimeDomain,
            &mut KeyedContext<'_, '_, K, S, O>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        // The services outlive the context's borrow: no clone, and `ctx` stays free to emit.
        let firing = interruptible.then(|| ctx.services().firing());
        let chunk = firing.as_ref().and_then(|f| f.chunk()).map(|c| c.get());
        // Timers left in the current chunk; `usize::MAX` never runs out.
        let mut left = chunk.unwrap_or(usize::MAX);
        while let Some((ts, _)) = self.timers.event.first() {
            let ts = *ts;
            if ts > target.0 {
                break;
            }
            if left == 0 {
                left = chunk.unwrap_or(usize::MAX);
                if let Some(firing) = &firing
                    && firing.should_interrupt()
                {
                    match firing.defer(ctx.operator_index(), Box::new(ContinueFiring)) {
                        Ok(()) => {
                            self.deferred = Some(target);
                            // Every timer before `ts` fired, so downstream may move up to just
                            // below it: its watermark advances however often mails cut the
                            // firing.
                            return self.forward_progress(Watermark(ts.saturating_sub(1)), ctx);
                        }
                        // The task takes no more mails (it is ending): fire the rest now.
                        Err(_) => left = usize::MAX,
                    }
                }
            }
            left -= 1;
            let (ts, key) = self.timers.event.pop_first().expect("checked non-empty");
            self.call(key, Some(ts), ctx, |kctx| {
                on_timer(ts, TimeDomain::EventTime, kctx)
            })?;
        }
        self.forwarded = self.forwarded.max(target);
        ctx.emit_watermark(target)?;
        self.side.emit_watermark(target)
    }

    /// Forwards an intermediate watermark of an interrupted firing, if it moves downstream on.
    fn forward_progress<O>(
        &mut self,
        progress: Watermark,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        if progress <= self.forwarded {
            return Ok(());
        }
        self.forwarded = progress;
        ctx.emit_watermark(progress)?;
        self.side.emit_watermark(progress)
    }

    /// The operator's `process_status`: forwards `status` to the main and the side outputs.
    pub(crate) fn process_status<O>(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        ctx.emit_status(status)?;
        self.side.emit_status(status)
    }

    /// The operator's `on_processing_time`: the runtime timer fired, so every processing-time
    /// timer due by then fires, in time order.
    pub(crate) fn on_processing_time<O>(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, O>,
        mut on_timer: impl FnMut(
            i64,
            TimeDomain,
            &mut KeyedContext<'_, '_, K, S, O>,
        ) -> Result<(), OperatorError>,
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
            self.call(key, None, ctx, |kctx| {
                on_timer(ts, TimeDomain::ProcessingTime, kctx)
            })?;
        }
        Ok(())
    }

    /// The context of the end-of-input hook.
    pub(crate) fn end_of_input<'a, 'b, O>(
        &'a mut self,
        ctx: &'a mut Context<'b, O>,
    ) -> EndOfInputContext<'a, 'b, K, S, O> {
        EndOfInputContext {
            states: &mut self.states,
            timers: &self.timers,
            watermark: self.watermark,
            side: &mut self.side,
            out: ctx,
        }
    }

    fn register_pending<O>(&mut self, ctx: &Context<'_, O>) -> Result<(), OperatorError> {
        if self.timers.to_register.is_empty() {
            return Ok(());
        }
        // The buffer goes back afterwards, so registering timers allocates nothing per call.
        let mut pending = std::mem::take(&mut self.timers.to_register);
        let mut result = Ok(());
        for timestamp in pending.drain(..) {
            if result.is_ok() && self.timers.physical.insert(timestamp) {
                result = ctx
                    .register_timer(timestamp, 0)
                    .map(|_| ())
                    .map_err(OperatorError::from);
            }
        }
        self.timers.to_register = pending;
        result
    }
}

impl<K, S> fmt::Debug for KeyedBackend<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBackend")
            .field("keys", &self.states.len())
            .field("watermark", &self.watermark)
            .field("side", &self.side)
            .finish_non_exhaustive()
    }
}

/// What a keyed function sees while processing a record or a timer: its key, that key's state,
/// timers, the main output and the side outputs.
pub struct KeyedContext<'a, 'b, K, S, O> {
    key: &'a K,
    state: &'a mut S,
    clear: bool,
    timestamp: Option<i64>,
    watermark: Watermark,
    timers: &'a mut KeyedTimers<K>,
    side: &'a mut SideOutputs,
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

    /// The timestamp of the record being processed, or of the event-time timer that fired
    /// (`None` for a processing-time timer).
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

    /// Emits `value` with the current timestamp to the side output `tag` (Flink's
    /// `ctx.output(tag, value)`); see [`SideOutputs::emit`] for a tag nobody reads.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with; a tag of the same name but another type.
    pub fn output<T: 'static>(
        &mut self,
        tag: &OutputTag<T>,
        value: T,
    ) -> Result<(), OperatorError> {
        let timestamp = self.timestamp;
        self.side.emit(tag, StreamRecord { value, timestamp })
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

/// What a keyed function's end-of-input hook sees: every key's state, the processing-time
/// timers still pending (they will not fire), the main output and the side outputs.
///
/// The hook runs once, after the final [`Watermark::MAX`] has fired every event-time timer and
/// has been forwarded (Flink's order: `endInput` follows the end of event time), and before the
/// operator finishes. What it emits carries no timestamp unless it sets one with
/// [`collect_record`](Self::collect_record).
pub struct EndOfInputContext<'a, 'b, K, S, O> {
    states: &'a mut BTreeMap<K, S>,
    timers: &'a KeyedTimers<K>,
    watermark: Watermark,
    side: &'a mut SideOutputs,
    out: &'a mut Context<'b, O>,
}

impl<K: Ord + Clone, S, O> EndOfInputContext<'_, '_, K, S, O> {
    /// Every key with state and its state, in key order.
    pub fn states(&self) -> impl Iterator<Item = (&K, &S)> {
        self.states.iter()
    }

    /// Removes every key's state and returns it, in key order.
    pub fn take_states(&mut self) -> Vec<(K, S)> {
        std::mem::take(self.states).into_iter().collect()
    }

    /// The processing-time timers still pending, as `(timestamp, key)` in time order. They do
    /// not fire: the task stops its timers at end of input, as Flink does; a function that
    /// must act on them does so here.
    pub fn pending_processing_timers(&self) -> Vec<(i64, K)> {
        self.timers.processing.iter().cloned().collect()
    }

    /// The operator's watermark ([`Watermark::MAX`] when the input ended normally).
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// Emits a value without a timestamp.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn collect(&mut self, value: O) -> Result<(), OperatorError> {
        self.out.collect(StreamRecord::new(value))
    }

    /// Emits a record as given.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    pub fn collect_record(&mut self, record: StreamRecord<O>) -> Result<(), OperatorError> {
        self.out.collect(record)
    }

    /// Emits `value`, without a timestamp, to the side output `tag`.
    ///
    /// # Errors
    ///
    /// As [`KeyedContext::output`].
    pub fn output<T: 'static>(
        &mut self,
        tag: &OutputTag<T>,
        value: T,
    ) -> Result<(), OperatorError> {
        self.side.emit(tag, StreamRecord::new(value))
    }
}

impl<K, S, O> fmt::Debug for EndOfInputContext<'_, '_, K, S, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndOfInputContext")
            .field("keys", &self.states.len())
            .finish_non_exhaustive()
    }
}
