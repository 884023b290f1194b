//! The engine that drives a split source under every model: the coordinator side (the
//! enumerator, its trigger-time snapshots, the hand-off of splits to readers, the restore that
//! puts each split in one place) and the reader side (a [`SplitReader`] as the models'
//! `SourceReader`). Documented on the [`source`](crate::source) module.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use streamtask_core::keygroup::ListState;
use streamtask_core::metrics::{SplitMetrics, TaskMetrics};
use streamtask_core::operator::WatermarkStrategy;
use streamtask_core::state::TaskSnapshot;
use streamtask_core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_core::task::TaskConfig;
use streamtask_core::time::Clock;
use streamtask_core::{OperatorError, Watermark, catch_panic};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::{
    EnumeratorContext, HeldSplit, ReaderEvent, Source, SourceError, SourceEvent, SourceSplit,
    SplitEnumerator, SplitOutput, SplitReader, Splits, WatermarkAlignment,
};

/// A reader's alignment report when it does not hold its group back (idle, ended).
const LEFT_OUT: i64 = i64::MAX;

/// The coordinator's state at a checkpoint's trigger, carried in reader 0's list state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorSnapshot {
    /// The enumerator's [`snapshot_state`](SplitEnumerator::snapshot_state) bytes.
    pub enumerator: Vec<u8>,
    /// Ids of splits restored readers held or finished which the enumerator may still assign:
    /// its next assignment of each is dropped.
    pub claimed: BTreeSet<String>,
    /// Splits assigned and not yet taken by their reader: (subtask, encoded split).
    pub undelivered: Vec<(usize, Vec<u8>)>,
}

/// One item of a split source reader's list state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SplitStateItem {
    /// A split the reader holds, encoded with its position.
    Split(Vec<u8>),
    /// The id of a split the reader finished after it was assigned in this attempt, until a
    /// checkpoint triggered after that assignment completed (a restore of a checkpoint whose
    /// enumerator snapshot still lists it must not assign it again).
    Finished(String),
    /// The coordinator's snapshot of checkpoint `checkpoint` (reader 0 carries every one a
    /// restore may still need, since a legacy reader is not told which checkpoint it
    /// snapshots; any reader after a rescale).
    Coordinator {
        /// The checkpoint.
        checkpoint: u64,
        /// The coordinator's state at its trigger.
        state: CoordinatorSnapshot,
    },
}

/// An event for a reader with, for a split, its assignment's number in the attempt.
type Delivery<S> = (SourceEvent<S>, u64);

struct Attempt<S: Source> {
    /// `None` until the attempt started, and after it ended.
    enumerator: Option<S::Enumerator>,
    inbox: Vec<VecDeque<Delivery<S::Split>>>,
    waiting: Vec<Option<Waker>>,
    /// Readers waiting for input whose split reaches its idleness timeout at a time of the
    /// reader's clock: woken by the periodic call then, to mark it idle.
    idle_deadlines: Vec<Option<(Clock, i64, Waker)>>,
    /// Assignments made in this attempt.
    assigned: u64,
    claimed: BTreeSet<String>,
    /// Readers told that no more splits will come.
    ended_readers: Vec<bool>,
    /// Readers whose split request has had no answer yet (no split, no `NoMoreSplits`).
    requesting: Vec<bool>,
    /// Trigger-time snapshots a restore may still need, with the assignments made before.
    triggered: BTreeMap<u64, (CoordinatorSnapshot, u64)>,
    started: Vec<bool>,
    ended: bool,
    failure: Option<String>,
}

/// One source's part of its watermark alignment group.
#[derive(Debug)]
struct Member {
    /// Per reader: its watermark (`i64::MIN` before its first), or `LEFT_OUT`.
    reports: Vec<AtomicI64>,
    /// The source's bound: a split whose watermark is above it is paused.
    bound: AtomicI64,
    /// The group's minimum at the last publication (`LEFT_OUT` before the first).
    minimum: AtomicI64,
    max_drift_ms: i64,
}

/// Sources aligned together: their members' reports, and the wakers of their paused readers.
#[derive(Debug, Default)]
struct Group {
    state: Mutex<GroupState>,
}

#[derive(Debug, Default)]
struct GroupState {
    members: Vec<Arc<Member>>,
    /// When the group's bounds were last published.
    aligned_at: Option<Instant>,
    /// Wakers of paused readers, by (member, subtask).
    paused: HashMap<(usize, usize), Waker>,
}

/// The watermark alignment groups of a job: sources whose [`WatermarkAlignment`] names the
/// same group ([`WatermarkAlignment::with_group`]) share one minimum over all their readers.
/// [`StreamEnvironment::from_source`](crate::StreamEnvironment::from_source) keeps one per
/// job; give one to [`SourceCoordinator::in_alignment_groups`] to drive aligned sources by
/// hand. Clones share the groups.
#[derive(Debug, Clone, Default)]
pub struct AlignmentGroups {
    groups: Arc<Mutex<HashMap<String, Arc<Group>>>>,
}

impl AlignmentGroups {
    /// No group yet.
    pub fn new() -> Self {
        AlignmentGroups::default()
    }

    /// Adds `member` to the group `name` (`None`: a group of its own); returns the group and
    /// the member's index in it.
    fn join(&self, name: Option<&str>, member: Arc<Member>) -> (Arc<Group>, usize) {
        let group = match name {
            Some(name) => Arc::clone(self.groups.lock().entry(name.to_string()).or_default()),
            None => Arc::new(Group::default()),
        };
        let index = {
            let mut state = group.state.lock();
            state.members.push(member);
            state.members.len() - 1
        };
        (group, index)
    }
}

/// The coordinator side of a split source, shared by its readers: holds the enumerator and
/// drives it as the executor does (restore when an attempt starts, snapshot at a checkpoint's
/// trigger, notices, periodic discovery), and hands its events to the readers
/// ([`reader`](Self::reader)). Public so a source's own tests can drive it step by step.
pub struct SourceCoordinator<S: Source> {
    name: String,
    source: S,
    parallelism: usize,
    /// The build-time enumerator's snapshot: what a fresh attempt restores.
    initial: Vec<u8>,
    /// Set when the enumerator failed: readers check it on every poll (one load).
    failed: AtomicBool,
    /// Assignments numbered below this were made before the trigger of a completed checkpoint.
    settled: AtomicU64,
    state: Mutex<Attempt<S>>,
    /// Signalled when a reader starts or the attempt ends.
    changed: Condvar,
    alignment: Option<WatermarkAlignment>,
    /// This source's reports and bound, shared with its alignment group.
    member: Arc<Member>,
    group: Arc<Group>,
    /// The member's index in its group.
    index: usize,
    /// The watermark strategy its readers generate per-split watermarks with.
    watermarks: Option<WatermarkStrategy<S::Output>>,
}

impl<S: Source> SourceCoordinator<S> {
    /// The coordinator of `source` named `name` (its vertex) for `parallelism` readers: makes
    /// the enumerator of a fresh start ([`Source::create_enumerator`]) and keeps its snapshot.
    ///
    /// # Errors
    ///
    /// What `create_enumerator` or the snapshot fails with.
    pub fn new(name: &str, source: S, parallelism: usize) -> Result<Self, SourceError> {
        Self::in_alignment_groups(name, source, parallelism, &AlignmentGroups::new())
    }

    /// As [`new`](Self::new), the source aligned with the sources of `groups` whose
    /// alignment names the same group (what a job's
    /// [`from_source`](crate::StreamEnvironment::from_source) does).
    ///
    /// # Errors
    ///
    /// What `create_enumerator` or the snapshot fails with.
    pub fn in_alignment_groups(
        name: &str,
        source: S,
        parallelism: usize,
        groups: &AlignmentGroups,
    ) -> Result<Self, SourceError> {
        let parallelism = parallelism.max(1);
        let initial = source.create_enumerator(parallelism)?.snapshot_state(0)?;
        let alignment = source.watermark_alignment();
        let member = Arc::new(Member {
            reports: (0..parallelism).map(|_| AtomicI64::new(i64::MIN)).collect(),
            bound: AtomicI64::new(initial_bound(alignment.as_ref())),
            minimum: AtomicI64::new(LEFT_OUT),
            max_drift_ms: alignment
                .as_ref()
                .map_or(0, WatermarkAlignment::max_drift_millis),
        });
        let (group, index) = groups.join(
            alignment.as_ref().and_then(WatermarkAlignment::group),
            Arc::clone(&member),
        );
        Ok(SourceCoordinator {
            member,
            group,
            index,
            alignment,
            watermarks: None,
            name: name.to_string(),
            source,
            parallelism,
            initial,
            failed: AtomicBool::new(false),
            settled: AtomicU64::new(0),
            changed: Condvar::new(),
            state: Mutex::new(Attempt {
                enumerator: None,
                inbox: (0..parallelism).map(|_| VecDeque::new()).collect(),
                waiting: vec![None; parallelism],
                idle_deadlines: vec![None; parallelism],
                assigned: 0,
                claimed: BTreeSet::new(),
                triggered: BTreeMap::new(),
                started: vec![false; parallelism],
                ended_readers: vec![false; parallelism],
                requesting: vec![false; parallelism],
                ended: false,
                failure: None,
            }),
        })
    }

    /// Its readers generate per-split watermarks with `strategy` (see [`SplitOutput`]); the
    /// strategy's idleness timeout is the splits' unless the source sets its own
    /// ([`Source::split_idle_timeout`]).
    pub fn with_watermark_strategy(mut self, strategy: WatermarkStrategy<S::Output>) -> Self {
        self.watermarks = Some(strategy);
        self
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of readers.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Runs `f` on the enumerator of the running attempt (`None` outside an attempt).
    pub fn with_enumerator<R>(&self, f: impl FnOnce(&S::Enumerator) -> R) -> Option<R> {
        self.state.lock().enumerator.as_ref().map(f)
    }

    /// The reader of subtask `subtask`, as the models run it.
    pub fn reader(self: &Arc<Self>, subtask: usize) -> SplitSourceReader<S> {
        SplitSourceReader {
            name: format!("{}#{subtask}", self.name),
            subtask,
            coordinator: Arc::clone(self),
            reader: self.source.create_reader(subtask, self.parallelism),
            splits: Splits::default(),
            finished: Vec::new(),
            requested: false,
            no_more_splits: false,
            idle_timeout_ms: self
                .source
                .split_idle_timeout()
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
                .or_else(|| self.watermarks.as_ref()?.idleness_millis()),
            clock: Clock::System,
            task_metrics: None,
            ticked: None,
            drift: None,
            watermarks: self.watermarks.clone(),
            generated_at: None,
        }
    }

    /// Starts an attempt restored from checkpoint `checkpoint` (`None`: a fresh start), given
    /// the readers' restored source entries (`restored`, any number, any order): restores the
    /// enumerator from the coordinator's snapshot of that checkpoint among them, claims the
    /// splits the readers hold or finished, gives back the undelivered ones no reader took,
    /// and starts it. Forgets the previous attempt. Call it before any reader of the attempt
    /// runs.
    ///
    /// # Errors
    ///
    /// [`SourceError::BadState`] for bytes that do not decode, [`SourceError::HeldTwice`],
    /// [`SourceError::NoEnumeratorState`] when readers hold splits but the snapshot of the
    /// checkpoint is missing, or what the enumerator's restore or start fails with.
    pub fn start_attempt(
        &self,
        checkpoint: Option<u64>,
        restored: &[Option<&[u8]>],
    ) -> Result<(), SourceError> {
        let bad = |reason: String| SourceError::BadState {
            source_name: self.name.clone(),
            reason,
        };
        let mut snapshots = BTreeMap::new();
        let mut held = BTreeSet::new();
        let mut finished = BTreeSet::new();
        for bytes in restored.iter().flatten() {
            for item in decode_items(bytes).map_err(|e| bad(e.to_string()))? {
                match item {
                    SplitStateItem::Split(bytes) => {
                        let id = S::Split::decode(&bytes)
                            .map_err(|e| bad(e.to_string()))?
                            .split_id();
                        if !held.insert(id.clone()) {
                            return Err(SourceError::HeldTwice {
                                source_name: self.name.clone(),
                                split_id: id,
                            });
                        }
                    }
                    SplitStateItem::Finished(id) => {
                        finished.insert(id);
                    }
                    SplitStateItem::Coordinator { checkpoint, state } => {
                        snapshots.insert(checkpoint, state);
                    }
                }
            }
        }
        let snapshot = match checkpoint.and_then(|id| snapshots.remove(&id)) {
            Some(s) => s,
            None if held.is_empty() && snapshots.is_empty() => CoordinatorSnapshot {
                enumerator: self.initial.clone(),
                ..CoordinatorSnapshot::default()
            },
            None => {
                return Err(SourceError::NoEnumeratorState {
                    source_name: self.name.clone(),
                });
            }
        };
        let mut enumerator = self
            .source
            .restore_enumerator(self.parallelism, &snapshot.enumerator)?;
        let mut claimed = snapshot.claimed;
        claimed.extend(held.iter().cloned());
        claimed.extend(finished.iter().cloned());
        let mut back: BTreeMap<usize, Vec<S::Split>> = BTreeMap::new();
        for (subtask, bytes) in &snapshot.undelivered {
            let split = S::Split::decode(bytes).map_err(|e| bad(e.to_string()))?;
            let id = split.split_id();
            // Taken by its reader between the trigger and the barrier: the reader has it.
            if !claimed.remove(&id) {
                back.entry(*subtask).or_default().push(split);
            }
        }
        for (subtask, splits) in back {
            catch_panic(|| enumerator.add_splits_back(splits, subtask)).map_err(panicked)?;
        }
        let mut state = self.state.lock();
        if let Some(mut old) = state.enumerator.take() {
            close(&mut old);
        }
        state.inbox.iter_mut().for_each(VecDeque::clear);
        state.waiting.iter_mut().for_each(|w| *w = None);
        state.idle_deadlines.iter_mut().for_each(|w| *w = None);
        state.assigned = 0;
        state.claimed = claimed;
        state.triggered.clear();
        state.started.iter_mut().for_each(|s| *s = false);
        state.ended_readers.iter_mut().for_each(|e| *e = false);
        state.requesting.iter_mut().for_each(|r| *r = false);
        state.ended = false;
        state.failure = None;
        {
            let mut group = self.group.state.lock();
            group.aligned_at = None;
            group.paused.retain(|(member, _), _| *member != self.index);
        }
        // Relaxed: no reader of the new attempt runs yet; they start after this returns,
        // through the lock and the thread spawns that order them after it.
        self.member
            .reports
            .iter()
            .for_each(|r| r.store(i64::MIN, Ordering::Relaxed));
        self.member
            .bound
            .store(initial_bound(self.alignment.as_ref()), Ordering::Relaxed);
        self.member.minimum.store(LEFT_OUT, Ordering::Relaxed);
        // Release: no reader of the new attempt runs yet; those that start see it.
        self.settled.store(0, Ordering::Release);
        // Release: pairs with the readers' Acquire load; a reader that sees `false` after a
        // restart sees the cleared failure too.
        self.failed.store(false, Ordering::Release);
        let result = Self::call(&mut state, self.parallelism, &mut enumerator, |e, ctx| {
            e.start(ctx)
        });
        state.enumerator = Some(enumerator);
        result
    }

    /// Checkpoint `checkpoint` was triggered: snapshots the enumerator and the undelivered
    /// splits, for reader 0 to carry. Called before the barriers go out; waits until every
    /// reader of the attempt started (restored its state) or the attempt ended, since a legacy
    /// reader triggered before it started would snapshot the bytes it was restored with.
    pub fn checkpoint_coordinator(&self, checkpoint: u64) {
        let mut state = self.state.lock();
        while !state.ended && !state.started.iter().all(|s| *s) {
            self.changed.wait(&mut state);
        }
        let state = &mut *state;
        let Some(enumerator) = state.enumerator.as_mut() else {
            // No attempt runs: nothing can be assigned.
            return;
        };
        let snapshot = catch_panic(|| enumerator.snapshot_state(checkpoint));
        let snapshot = snapshot
            .unwrap_or_else(|p| Err(panicked(p)))
            .and_then(|bytes| {
                let undelivered = state
                    .inbox
                    .iter()
                    .enumerate()
                    .flat_map(|(subtask, q)| {
                        q.iter().filter_map(move |(e, _)| match e {
                            SourceEvent::Split(s) => Some(s.encode().map(|b| (subtask, b))),
                            _ => None,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(CoordinatorSnapshot {
                    enumerator: bytes,
                    claimed: state.claimed.clone(),
                    undelivered,
                })
            });
        match snapshot {
            Ok(s) => {
                let assigned = state.assigned;
                state.triggered.insert(checkpoint, (s, assigned));
            }
            Err(e) => self.fail(state, e.to_string()),
        }
    }

    /// Checkpoint `checkpoint` completed: no restore needs an older snapshot, nor the finished
    /// splits assigned before its trigger; the enumerator is told.
    pub fn checkpoint_completed(&self, checkpoint: u64) {
        let mut state = self.state.lock();
        if let Some((_, assigned)) = state.triggered.get(&checkpoint) {
            // AcqRel: readers load it (Acquire) on their snapshot path, outside the lock; the
            // value only grows, so a reader sees this completion or an earlier one, and keeps
            // at most some finished splits one checkpoint longer.
            self.settled.fetch_max(*assigned, Ordering::AcqRel);
        }
        state.triggered = state.triggered.split_off(&checkpoint);
        if let Some(e) = state.enumerator.as_mut()
            && let Err(panic) = catch_panic(|| e.notify_checkpoint_complete(checkpoint))
        {
            self.fail(&mut state, panicked(panic).to_string());
        }
    }

    /// The attempt is over (its tasks were joined): the enumerator is closed, a trigger
    /// waiting for readers that never started gives up.
    pub fn end_attempt(&self) {
        let mut state = self.state.lock();
        state.ended = true;
        if let Some(mut e) = state.enumerator.take() {
            close(&mut e);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// The periodic call: lets the enumerator discover splits and answer waiting requests.
    pub fn discover(&self) {
        self.align();
        let mut state = self.state.lock();
        for slot in &mut state.idle_deadlines {
            if slot
                .as_ref()
                .is_some_and(|(clock, deadline, _)| clock.now_millis() >= *deadline)
                && let Some((_, _, waker)) = slot.take()
            {
                waker.wake();
            }
        }
        if state.failure.is_some() {
            return;
        }
        let Some(mut enumerator) = state.enumerator.take() else {
            return;
        };
        let result = Self::call(&mut state, self.parallelism, &mut enumerator, |e, ctx| {
            e.discover(ctx)
        });
        state.enumerator = Some(enumerator);
        if let Err(e) = result {
            self.fail(&mut state, e.to_string());
        }
    }

    /// Reader `subtask` sends `event`; returns what the enumerator has for that reader now
    /// (taken from its inbox). A reader run by [`reader`](Self::reader) does this itself.
    ///
    /// # Errors
    ///
    /// The enumerator failed (now or before).
    pub fn reader_event(
        &self,
        subtask: usize,
        event: ReaderEvent,
    ) -> Result<Vec<SourceEvent<S::Split>>, SourceError> {
        self.send(subtask, event)?;
        Ok(self.take(subtask).into_iter().map(|(e, _)| e).collect())
    }

    fn send(&self, subtask: usize, event: ReaderEvent) -> Result<(), SourceError> {
        let mut state = self.state.lock();
        if let Some(reason) = state.failure.clone() {
            return Err(self.failure_error(reason));
        }
        let Some(mut enumerator) = state.enumerator.take() else {
            // No attempt runs: the request is lost with the attempt.
            return Ok(());
        };
        let result = match event {
            ReaderEvent::SplitRequest => {
                state.requesting[subtask] = true;
                Self::call(&mut state, self.parallelism, &mut enumerator, |e, ctx| {
                    e.handle_split_request(subtask, ctx)
                })
            }
            ReaderEvent::Custom(bytes) => {
                Self::call(&mut state, self.parallelism, &mut enumerator, |e, ctx| {
                    e.handle_reader_event(subtask, bytes, ctx)
                })
            }
        };
        state.enumerator = Some(enumerator);
        if let Err(e) = result {
            let reason = e.to_string();
            self.fail(&mut state, reason.clone());
            return Err(self.failure_error(reason));
        }
        Ok(())
    }

    /// Calls the enumerator through [`with_context`](Self::with_context), then asks again on
    /// behalf of every reader whose request was answered only with a claimed split (dropped):
    /// that answer gave the reader nothing, and an enumerator that answers requests later (at
    /// a discovery) has already counted the request as answered, so without a new request the
    /// reader would wait for ever. Each round uses up one claim, so this ends.
    fn call(
        state: &mut Attempt<S>,
        parallelism: usize,
        enumerator: &mut S::Enumerator,
        f: impl FnOnce(
            &mut S::Enumerator,
            &mut EnumeratorContext<'_, S::Split>,
        ) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let mut dropped = Vec::new();
        let mut result =
            Self::with_context(state, parallelism, &mut dropped, |ctx| f(enumerator, ctx));
        while result.is_ok() {
            let Some(subtask) = dropped.pop() else {
                break;
            };
            if state.requesting[subtask] {
                result = Self::with_context(state, parallelism, &mut dropped, |ctx| {
                    enumerator.handle_split_request(subtask, ctx)
                });
            }
        }
        result
    }

    /// Calls the enumerator with a context that delivers into the readers' inboxes and wakes
    /// the readers it addressed; the assignment of a claimed split is dropped and its reader
    /// pushed onto `dropped`. A panic in the enumerator is its error: it fails the enumerator,
    /// never the thread that called it (the executor's, or a reader's).
    fn with_context(
        state: &mut Attempt<S>,
        parallelism: usize,
        dropped: &mut Vec<usize>,
        f: impl FnOnce(&mut EnumeratorContext<'_, S::Split>) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let Attempt {
            inbox,
            waiting,
            assigned,
            claimed,
            ended_readers,
            requesting,
            ..
        } = state;
        let mut send = |subtask: usize, event: SourceEvent<S::Split>| {
            let number = *assigned;
            match &event {
                SourceEvent::Split(split) if ended_readers[subtask] => {
                    return Err(SourceError::AfterNoMoreSplits {
                        subtask,
                        split_id: split.split_id(),
                    });
                }
                SourceEvent::Split(split) => {
                    if claimed.remove(&split.split_id()) {
                        dropped.push(subtask);
                        return Ok(());
                    }
                    *assigned += 1;
                    requesting[subtask] = false;
                }
                SourceEvent::NoMoreSplits => {
                    ended_readers[subtask] = true;
                    requesting[subtask] = false;
                }
                SourceEvent::Custom(_) => {}
            }
            inbox[subtask].push_back((event, number));
            if let Some(w) = waiting[subtask].take() {
                w.wake();
            }
            Ok(())
        };
        let mut ctx = EnumeratorContext {
            parallelism,
            send: &mut send,
        };
        catch_panic(|| f(&mut ctx)).unwrap_or_else(|panic| Err(panicked(panic)))
    }

    fn take(&self, subtask: usize) -> Vec<Delivery<S::Split>> {
        self.state.lock().inbox[subtask].drain(..).collect()
    }

    fn reader_started(&self, subtask: usize) {
        self.state.lock().started[subtask] = true;
        self.changed.notify_all();
    }

    /// Wakes `waker` when reader `subtask` has an event or the enumerator failed (at once if
    /// so now).
    ///
    /// The lost-wakeup protocol: the reader polled and found no event, then registers here.
    /// The check and the registration are one section under the lock every delivery takes
    /// (`with_context` pushes to the inbox and takes the waker under it), so an event delivered
    /// after the poll is either seen here (wake at once) or delivered after the waker is stored
    /// (woken by the delivery).
    fn wake_when_ready(&self, subtask: usize, waker: &Waker) {
        let mut state = self.state.lock();
        if state.failure.is_some() || !state.inbox[subtask].is_empty() {
            waker.wake_by_ref();
        } else {
            state.waiting[subtask] = Some(waker.clone());
        }
    }

    /// Wakes `waker` through the periodic call once `clock` reads `deadline` (a split of
    /// reader `subtask` reaches its idleness timeout then).
    fn wake_at(&self, subtask: usize, clock: &Clock, deadline: i64, waker: &Waker) {
        self.state.lock().idle_deadlines[subtask] = Some((clock.clone(), deadline, waker.clone()));
    }

    /// Publishes the group's bounds if due: its minimum report plus each member's drift; wakes
    /// the group's paused readers to check them (see the lost-wakeup protocol in the module
    /// docs).
    fn align(&self) {
        let Some(alignment) = &self.alignment else {
            return;
        };
        let mut group = self.group.state.lock();
        let now = Instant::now();
        if group
            .aligned_at
            .is_some_and(|at| now.duration_since(at) < alignment.update_interval())
        {
            return;
        }
        group.aligned_at = Some(now);
        // Acquire: pairs with the readers' Release stores; a stale report is lower, so a
        // bound is never above the true minimum plus the drift.
        let minimum = group
            .members
            .iter()
            .flat_map(|m| m.reports.iter())
            .map(|r| r.load(Ordering::Acquire))
            .min()
            .unwrap_or(LEFT_OUT);
        for member in &group.members {
            // Release: a paused reader that loads it sees the reports it came from; stored
            // under the group's lock, before the wakers are taken (the lost-wakeup protocol).
            member.bound.fetch_max(
                minimum.saturating_add(member.max_drift_ms),
                Ordering::AcqRel,
            );
            // Relaxed: a statistic (the drift metric).
            member.minimum.store(minimum, Ordering::Relaxed);
        }
        group.paused.drain().for_each(|(_, w)| w.wake());
    }

    /// The alignment bound now (`None`: the source is not aligned).
    fn bound(&self) -> Option<i64> {
        // Acquire: pairs with the AcqRel publication in `align`.
        self.alignment
            .as_ref()
            .map(|_| self.member.bound.load(Ordering::Acquire))
    }

    /// Wakes `waker` once the bound reaches `watermark` (at once if it does now).
    fn wake_when_resumed(&self, subtask: usize, watermark: Option<i64>, waker: &Waker) {
        let state = self.state.lock();
        let mut group = self.group.state.lock();
        let within = self
            .bound()
            .is_none_or(|b| watermark.is_none_or(|w| w <= b));
        if state.ended || within {
            waker.wake_by_ref();
        } else {
            group.paused.insert((self.index, subtask), waker.clone());
        }
    }

    /// The group's minimum at the last publication, if the source is aligned and one was
    /// taken over readers that hold the group back.
    fn group_minimum(&self) -> Option<i64> {
        self.alignment.as_ref()?;
        // Relaxed: a statistic (the drift metric).
        let minimum = self.member.minimum.load(Ordering::Relaxed);
        (minimum != LEFT_OUT && minimum != i64::MIN).then_some(minimum)
    }

    fn report(&self, subtask: usize, value: i64) {
        // Release: pairs with the Acquire load in `align`.
        self.member.reports[subtask].store(value, Ordering::Release);
    }

    fn failure(&self) -> Option<SourceError> {
        // Acquire: pairs with the Release store in `fail`, so the reason is set.
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let reason = self.state.lock().failure.clone().unwrap_or_default();
        Some(self.failure_error(reason))
    }

    fn failure_error(&self, reason: String) -> SourceError {
        SourceError::EnumeratorFailed {
            source_name: self.name.clone(),
            reason,
        }
    }

    fn fail(&self, state: &mut Attempt<S>, reason: String) {
        log::warn!("{}: split enumerator failed: {reason}", self.name);
        state.failure = Some(reason);
        self.failed.store(true, Ordering::Release);
        state
            .waiting
            .iter_mut()
            .filter_map(Option::take)
            .for_each(Waker::wake);
    }

    /// The snapshots reader 0 carries now.
    fn carried(&self) -> Vec<SplitStateItem> {
        self.state
            .lock()
            .triggered
            .iter()
            .map(|(id, (state, _))| SplitStateItem::Coordinator {
                checkpoint: *id,
                state: state.clone(),
            })
            .collect()
    }
}

impl<S: Source> std::fmt::Debug for SourceCoordinator<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceCoordinator")
            .field("name", &self.name)
            .field("parallelism", &self.parallelism)
            .finish_non_exhaustive()
    }
}

/// The bound before the first publication: a reader pauses after its first watermark until
/// the group's minimum is taken.
fn initial_bound(alignment: Option<&WatermarkAlignment>) -> i64 {
    alignment.map_or(LEFT_OUT, |a| i64::MIN.saturating_add(a.max_drift_millis()))
}

fn panicked(panic: String) -> SourceError {
    SourceError::user(format!("the enumerator panicked: {panic}"))
}

/// Closes an enumerator whose attempt is over; a panic there is only logged (the attempt's
/// outcome is decided).
fn close<E: SplitEnumerator>(enumerator: &mut E) {
    if let Err(panic) = catch_panic(|| enumerator.close()) {
        log::warn!("a split enumerator panicked closing: {panic}");
    }
}

/// What the executor calls on every source's coordinator, whatever its type.
pub(crate) trait CoordinatorHooks: Send + Sync {
    fn name(&self) -> &str;
    fn start_attempt(
        &self,
        checkpoint: Option<u64>,
        restored: &[Option<&[u8]>],
    ) -> Result<(), SourceError>;
    fn checkpoint_coordinator(&self, checkpoint: u64);
    fn checkpoint_completed(&self, checkpoint: u64);
    fn end_attempt(&self);
    fn discover(&self);
}

impl<S: Source> CoordinatorHooks for SourceCoordinator<S> {
    fn name(&self) -> &str {
        SourceCoordinator::name(self)
    }
    fn start_attempt(
        &self,
        checkpoint: Option<u64>,
        restored: &[Option<&[u8]>],
    ) -> Result<(), SourceError> {
        SourceCoordinator::start_attempt(self, checkpoint, restored)
    }
    fn checkpoint_coordinator(&self, checkpoint: u64) {
        SourceCoordinator::checkpoint_coordinator(self, checkpoint)
    }
    fn checkpoint_completed(&self, checkpoint: u64) {
        SourceCoordinator::checkpoint_completed(self, checkpoint)
    }
    fn end_attempt(&self) {
        SourceCoordinator::end_attempt(self)
    }
    fn discover(&self) {
        SourceCoordinator::discover(self)
    }
}

/// The items of a split source reader's list state.
///
/// # Errors
///
/// [`StateError::Decode`](streamtask_core::state::StateError::Decode) for other bytes.
pub(crate) fn decode_items(
    bytes: &[u8],
) -> Result<Vec<SplitStateItem>, streamtask_core::state::StateError> {
    ListState::<SplitStateItem>::decode(bytes).map(|l| l.items)
}

/// The source entries of a restored checkpoint's readers of `vertex`, in subtask order.
pub(crate) fn restored_entries<'a>(
    tasks: impl Fn(&str) -> Option<&'a TaskSnapshot>,
    vertex: &str,
    parallelism: usize,
) -> Vec<Option<&'a [u8]>> {
    (0..parallelism)
        .map(|i| tasks(&format!("{vertex}#{i}")).and_then(|t| t.get(TaskSnapshot::SOURCE)))
        .collect()
}

/// A [`SplitReader`] as the models run a reader (a mailbox `SourceReader`): takes the
/// enumerator's events between polls, asks for a split when it holds none, ends after
/// `NoMoreSplits` once its splits are read, keeps each split's watermark, idleness and pause
/// (watermark alignment), and checkpoints its splits as list state (reader 0 also the
/// coordinator's snapshots).
pub struct SplitSourceReader<S: Source> {
    name: String,
    subtask: usize,
    coordinator: Arc<SourceCoordinator<S>>,
    reader: S::Reader,
    splits: Splits,
    /// Splits finished in this attempt with their assignment numbers, until settled.
    finished: Vec<(String, u64)>,
    requested: bool,
    no_more_splits: bool,
    /// [`Source::split_idle_timeout`] in milliseconds.
    idle_timeout_ms: Option<i64>,
    /// The task's processing-time clock.
    clock: Clock,
    /// The task's metrics, where the split metrics are kept (none outside a task).
    task_metrics: Option<Arc<TaskMetrics>>,
    /// The clock and the task's backpressured milliseconds at the last poll.
    ticked: Option<(i64, u64)>,
    /// The drift last written to the task's metrics.
    drift: Option<i64>,
    /// The strategy the splits' watermarks are generated with, if any.
    watermarks: Option<WatermarkStrategy<S::Output>>,
    /// When watermarks were last generated (processing time).
    generated_at: Option<i64>,
}

impl<S: Source> SplitSourceReader<S> {
    /// The user's reader.
    pub fn inner(&self) -> &S::Reader {
        &self.reader
    }

    /// The ids of the splits held now.
    pub fn held_splits(&self) -> BTreeSet<String> {
        self.splits.held.keys().cloned().collect()
    }

    /// The ids of the splits watermark alignment pauses now.
    pub fn paused_splits(&self) -> BTreeSet<String> {
        self.ids(|s| s.paused)
    }

    /// The ids of the splits marked idle now.
    pub fn idle_splits(&self) -> BTreeSet<String> {
        self.ids(|s| s.idle)
    }

    /// The metrics of split `split_id` while it is held.
    pub fn split_metrics(&self, split_id: &str) -> Option<Arc<SplitMetrics>> {
        self.splits
            .held
            .get(split_id)
            .map(|s| Arc::clone(&s.metrics))
    }

    fn ids(&self, f: impl Fn(&HeldSplit) -> bool) -> BTreeSet<String> {
        self.splits
            .held
            .iter()
            .filter(|(_, s)| f(s))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Starts holding `split`, its metrics in the task's.
    fn hold(&mut self, split: &S::Split, assigned: Option<u64>) {
        let id = split.split_id();
        let held = HeldSplit::new(assigned);
        if let Some(m) = &self.task_metrics {
            m.splits
                .lock()
                .insert(id.clone(), Arc::clone(&held.metrics));
        }
        self.splits.held.insert(id, held);
    }

    /// Stops holding split `id`; returns its assignment number.
    fn release(&mut self, id: &str) -> Option<Option<u64>> {
        let held = self.splits.held.remove(id)?;
        if let Some(m) = &self.task_metrics {
            m.splits.lock().remove(id);
        }
        Some(held.assigned)
    }

    /// Advances the splits' clocks by the time since the last poll, less the time the task
    /// was backpressured meanwhile: a paused split counts it as paused, an idle one as idle,
    /// an active one on its idleness clock (marked idle once that reaches the timeout). The
    /// split states are the ones of the whole interval: they change only during a poll.
    fn tick(&mut self) {
        let measured = self.coordinator.alignment.is_some()
            || self.idle_timeout_ms.is_some()
            || self.splits.held.values().any(|s| s.idle);
        if !measured {
            // Nothing to measure: no clock read on the record path.
            self.ticked = None;
            return;
        }
        let now = self.clock.now_millis();
        let backpressured = self
            .task_metrics
            .as_ref()
            .map_or(0, |m| m.backpressured_micros.get() / 1000);
        let Some((then, backpressured_then)) = self.ticked.replace((now, backpressured)) else {
            return;
        };
        let blocked =
            i64::try_from(backpressured.saturating_sub(backpressured_then)).unwrap_or(i64::MAX);
        let active = now.saturating_sub(then).saturating_sub(blocked).max(0);
        let elapsed = u64::try_from(active).unwrap_or(0);
        for split in self.splits.held.values_mut() {
            if split.paused {
                split.metrics.paused_millis.add(elapsed);
            } else if split.idle {
                split.metrics.idle_millis.add(elapsed);
            } else {
                split.inactive_ms = split.inactive_ms.saturating_add(active);
                if self.idle_timeout_ms.is_some_and(|t| split.inactive_ms >= t) {
                    split.idle = true;
                }
            }
        }
    }

    /// Pauses the splits above the alignment bound and resumes the others, telling the
    /// user's reader of every change; returns whether every split held is paused (the reader
    /// is then not polled).
    fn align_splits(&mut self) -> bool {
        let Some(bound) = self.coordinator.bound() else {
            return false;
        };
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        let reader_watermark = self.splits.reader_watermark;
        for (id, split) in &mut self.splits.held {
            let ahead = split
                .watermark
                .max(reader_watermark)
                .is_some_and(|w| w > bound);
            if ahead != split.paused {
                split.paused = ahead;
                if ahead { &mut pause } else { &mut resume }.push(id.clone());
            }
        }
        if !pause.is_empty() || !resume.is_empty() {
            pause.sort();
            resume.sort();
            self.reader.pause_or_resume_splits(&pause, &resume);
        }
        self.splits.all_paused()
    }

    /// Writes the reader's drift above its group's minimum (Flink's
    /// `watermarkAlignmentDrift`) to the task's metrics when it changed.
    fn measure_drift(&mut self, report: i64) {
        let Some(metrics) = &self.task_metrics else {
            return;
        };
        let drift = match self.coordinator.group_minimum() {
            Some(minimum) if report != LEFT_OUT && report != i64::MIN => {
                Some(report.saturating_sub(minimum))
            }
            _ => None,
        };
        if drift != self.drift {
            self.drift = drift;
            *metrics.watermark_alignment_drift.lock() = drift;
        }
    }

    fn failed(&self, e: SourceError) -> OperatorError {
        OperatorError::user(self.name.clone(), e)
    }

    /// Generates the splits' watermarks from their largest event times when the strategy's
    /// auto-watermark interval has passed since the last time (on the task's processing-time
    /// clock, as Flink's periodic emission).
    fn generate_watermarks(&mut self) {
        let Some(strategy) = &self.watermarks else {
            return;
        };
        let now = self.clock.now_millis();
        if self
            .generated_at
            .is_some_and(|then| now.saturating_sub(then) < strategy.interval_millis())
        {
            return;
        }
        self.generated_at = Some(now);
        self.splits.generate(strategy);
    }

    /// When a waiting reader must be polled again to generate the watermarks its records
    /// already allow: the end of the current interval, if one would rise.
    fn generation_deadline(&self) -> Option<i64> {
        let strategy = self.watermarks.as_ref()?;
        if !self.splits.generation_pending(strategy) {
            return None;
        }
        let then = self.generated_at.unwrap_or(i64::MIN);
        Some(then.saturating_add(strategy.interval_millis()))
    }

    /// Hands the enumerator's events to the reader.
    fn take_events(&mut self) -> Result<(), OperatorError> {
        for (event, number) in self.coordinator.take(self.subtask) {
            match event {
                SourceEvent::Split(split) => {
                    self.hold(&split, Some(number));
                    self.requested = false;
                    self.reader.add_splits(vec![split]);
                }
                SourceEvent::NoMoreSplits => {
                    self.no_more_splits = true;
                    self.reader.notify_no_more_splits();
                }
                SourceEvent::Custom(bytes) => self.reader.handle_source_event(bytes)?,
            }
        }
        Ok(())
    }
}

impl<S: Source> SourceReader<S::Output> for SplitSourceReader<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&mut self, task: &TaskConfig) {
        self.clock = task.clock.clone();
        self.task_metrics = Some(Arc::clone(&task.metrics));
        let mut table = task.metrics.splits.lock();
        for (id, split) in &self.splits.held {
            table.insert(id.clone(), Arc::clone(&split.metrics));
        }
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            let items =
                decode_items(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?;
            let mut splits = Vec::new();
            for item in items {
                if let SplitStateItem::Split(bytes) = item {
                    let split = S::Split::decode(&bytes).map_err(|e| self.failed(e))?;
                    // Assigned in an earlier attempt: no restore can find it unassigned.
                    self.hold(&split, None);
                    splits.push(split);
                }
            }
            if !splits.is_empty() {
                self.reader.add_splits(splits);
            }
        }
        self.coordinator.reader_started(self.subtask);
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, S::Output>,
    ) -> Result<InputStatus, OperatorError> {
        if let Some(e) = self.coordinator.failure() {
            return Err(self.failed(e));
        }
        self.tick();
        self.take_events()?;
        if self.splits.held.is_empty() {
            if self.no_more_splits {
                self.coordinator.report(self.subtask, LEFT_OUT);
                return Ok(InputStatus::EndOfInput);
            }
            if !self.requested {
                self.requested = true;
                self.coordinator
                    .send(self.subtask, ReaderEvent::SplitRequest)
                    .map_err(|e| self.failed(e))?;
                self.take_events()?;
            }
            if self.splits.held.is_empty() {
                if self.no_more_splits {
                    self.coordinator.report(self.subtask, LEFT_OUT);
                    return Ok(InputStatus::EndOfInput);
                }
                // No split: idle until the enumerator answers.
                output.mark_idle()?;
                self.coordinator.report(self.subtask, LEFT_OUT);
                return Ok(InputStatus::NothingAvailable);
            }
        }
        if self.align_splits() {
            // Every split paused: not polled, not marked idle; `register_waker` waits for
            // the bound.
            self.measure_drift(self.splits.combined().unwrap_or(LEFT_OUT));
            return Ok(InputStatus::NothingAvailable);
        }
        let mut finished = Vec::new();
        let mut events = Vec::new();
        let mut split_output = SplitOutput {
            out: output,
            splits: &mut self.splits,
            finished: &mut finished,
            events: &mut events,
            strategy: self.watermarks.as_ref(),
        };
        let status = self.reader.poll_next(&mut split_output)?;
        // Generated before the finished splits go: their last records count.
        self.generate_watermarks();
        for id in &finished {
            if let Some(Some(number)) = self.release(id) {
                self.finished.push((id.clone(), number));
            }
        }
        // A split that went idle or finished may let the reader's watermark advance.
        let combined = self.splits.combined();
        if let Some(watermark) = self.splits.advance(combined) {
            output.emit_watermark(Watermark(watermark))?;
        }
        let all_idle = !self.splits.held.is_empty() && combined.is_none();
        if all_idle && !output.is_idle() {
            output.mark_idle()?;
        }
        let report = if status == InputStatus::EndOfInput || output.is_idle() {
            LEFT_OUT
        } else {
            // With no split left (all finished) the reader holds nothing back.
            combined.unwrap_or(LEFT_OUT)
        };
        self.coordinator.report(self.subtask, report);
        self.measure_drift(report);
        // A split whose watermark passed the bound in this poll pauses now, before time
        // passes: its paused time is not on its idleness clock.
        self.align_splits();
        for event in events {
            self.coordinator
                .send(self.subtask, ReaderEvent::Custom(event))
                .map_err(|e| self.failed(e))?;
        }
        Ok(match status {
            // With no split left, the next poll asks for one.
            InputStatus::NothingAvailable if self.splits.held.is_empty() => {
                InputStatus::MoreAvailable
            }
            status => status,
        })
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.coordinator.wake_when_ready(self.subtask, waker);
        if self.splits.held.values().any(|s| s.paused) {
            // A paused split resumes when a bound reaches it: the bound's publication wakes.
            self.coordinator
                .wake_when_resumed(self.subtask, self.splits.lowest_paused(), waker);
        }
        if !self.splits.held.is_empty() && !self.splits.all_paused() {
            self.reader.register_waker(waker);
        }
        // The idleness clock of a waiting reader's active splits runs while it waits: poll it
        // again when the first of them reaches the timeout, to mark it idle.
        let inactive = self
            .splits
            .held
            .values()
            .filter(|s| !s.idle && !s.paused)
            .map(|s| s.inactive_ms)
            .max();
        let idle_deadline = match (self.idle_timeout_ms, inactive) {
            (Some(timeout), Some(inactive)) => {
                let since = self
                    .ticked
                    .map_or_else(|| self.clock.now_millis(), |(t, _)| t);
                Some(since.saturating_add(timeout.saturating_sub(inactive)))
            }
            _ => None,
        };
        // And at the end of the auto-watermark interval when its records allow a watermark
        // that was not generated yet (nothing else polls a reader waiting for input).
        let deadline = match (idle_deadline, self.generation_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(deadline) = deadline {
            self.coordinator
                .wake_at(self.subtask, &self.clock, deadline, waker);
        }
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        // Acquire: pairs with the AcqRel fetch_max of a completion (see `checkpoint_completed`).
        let settled = self.coordinator.settled.load(Ordering::Acquire);
        self.finished.retain(|(_, number)| *number >= settled);
        let mut items = if self.subtask == 0 {
            self.coordinator.carried()
        } else {
            Vec::new()
        };
        for split in self.reader.snapshot_splits(checkpoint_id)? {
            items.push(SplitStateItem::Split(
                split.encode().map_err(|e| self.failed(e))?,
            ));
        }
        items.extend(
            self.finished
                .iter()
                .map(|(id, _)| SplitStateItem::Finished(id.clone())),
        );
        ListState::new(items)
            .encode()
            .map_err(|e| OperatorError::state(self.name.clone(), e))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.reader.notify_checkpoint_complete(checkpoint_id)
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.reader.close()
    }
}

impl<S: Source> std::fmt::Debug for SplitSourceReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitSourceReader")
            .field("name", &self.name)
            .field("held", &self.splits.held.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
