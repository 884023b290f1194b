//! The split-source porting kit: proves a [`Source`] a faithful port of the legacy
//! `SourceFunction` it replaces, state included, in the user's own test suite.
//!
//! [`SplitPortingKit::run`] runs the legacy source through the bridge's
//! [`PortingKit`] (its schedule, its legacy driver: the
//! function on its own thread, checkpoints at quiet points between locked sections) and the
//! split source through a [`SourceCoordinator`] with its readers polled round robin on the
//! calling thread, checkpointing at the same record counts (the coordinator snapshotted at the
//! trigger, then every reader, as the executor does). Then it compares:
//!
//! | check ([`SplitCheck`]) | what must hold |
//! |---|---|
//! | the run | every split's records (value and timestamp) in the legacy source's order within that split; across splits order is not defined, so only each split's sequence counts; every watermark of the port at most the greatest one the legacy source emitted while it had emitted only records the port had emitted too |
//! | the port from its own checkpoint, at its parallelism and at the rescale parallelism | what the port committed at the checkpoint, then what the restored port emits, is the legacy run's output split by split |
//! | the port from the legacy source's checkpoint | the legacy state mapped to splits ([`SplitStateMapping::splits_of`]) given to the port's readers: the legacy source's committed records, then the port's, are the legacy output |
//! | the legacy source from the port's checkpoint | where the mapping goes back ([`SplitStateMapping::legacy_of`] returns a state): the port's committed records, then those of the legacy source restored from the mapped state |
//!
//! Every check runs at every checkpoint, so a port whose split positions are one record off is
//! caught where no failure is scheduled. The first difference is reported as a
//! [`SplitDivergence`]: the check, the checkpoint, the split, the record's position in the split
//! and both sides' records, written as the bridge kit writes elements
//! ([`describe_element`]).
//!
//! Idleness is not compared: a split reader without splits is idle while the legacy source
//! has no such state. Failures scheduled on the kit (`fail_after`) fail the legacy side only;
//! the port's restores are the checks above.
//!
//! See `tests/split_porting_kit.rs` for a partitioned log, its port and two wrong ports.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use streamtask_bridge::porting::{
    CheckpointSummary, LegacyRun, PortingError, PortingKit, describe_element,
};
use streamtask_core::keygroup::ListState;
use streamtask_core::operator::Emitted;
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_legacy::SourceFunction;
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::{
    CoordinatorSnapshot, Source, SourceCoordinator, SourceError, SourceSplit, SplitEnumerator,
    SplitStateItem, decode_items,
};

/// Polls in a row that emit nothing and end nothing before the kit reports the port stalled
/// (a hang guard counted in polls, not time).
pub const STALL_POLLS: u64 = 100_000;

/// The declared mapping between the legacy source's state and the port's splits.
pub trait SplitStateMapping<L>: Send {
    /// The port's split type.
    type Split: SourceSplit;

    /// The splits (with positions) a port resumes from where the legacy source had `state`:
    /// every split, finished ones at their end.
    fn splits_of(&self, state: &L) -> Vec<Self::Split>;

    /// The legacy state equivalent to the splits the port's readers hold at a checkpoint
    /// (splits not held were finished); `None` (the default) when the mapping goes one way.
    fn legacy_of(&self, splits: &[Self::Split]) -> Option<L> {
        let _ = splits;
        None
    }
}

/// A check the kit makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SplitCheck {
    /// The port's run beside the legacy source's.
    Run,
    /// The port restored from its own checkpoint at `parallelism` readers.
    PortFromPort {
        /// Readers of the restored port.
        parallelism: usize,
    },
    /// The port restored from the legacy source's checkpoint through the mapping.
    PortFromLegacy {
        /// Readers of the restored port.
        parallelism: usize,
    },
    /// The legacy source restored from the port's checkpoint through the mapping.
    LegacyFromPort,
}

impl fmt::Display for SplitCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitCheck::Run => f.write_str("the port's run"),
            SplitCheck::PortFromPort { parallelism } => write!(
                f,
                "the port restored from its own checkpoint at parallelism {parallelism}"
            ),
            SplitCheck::PortFromLegacy { parallelism } => write!(
                f,
                "the port restored from the legacy source's checkpoint at parallelism {parallelism}"
            ),
            SplitCheck::LegacyFromPort => {
                f.write_str("the legacy source restored from the port's checkpoint")
            }
        }
    }
}

impl SplitCheck {
    fn fix(self) -> &'static str {
        match self {
            SplitCheck::Run => {
                "check that the enumerator assigns every split once (never a finished one \
                 again) and that the reader emits each split's records in the legacy order"
            }
            SplitCheck::PortFromPort { .. } => {
                "make snapshot_splits return each split at the position of its next record, and \
                 add_splits continue from exactly there"
            }
            SplitCheck::PortFromLegacy { .. } => {
                "make splits_of give each split the position the legacy offsets say, and \
                 add_splits continue from exactly there"
            }
            SplitCheck::LegacyFromPort => {
                "make legacy_of give the offsets the split positions say (finished splits at \
                 their end)"
            }
        }
    }
}

/// Where the port parts from the legacy source.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SplitDivergence<T> {
    /// A split's record sequence differs first at `index` (`None` on a side with fewer).
    Record {
        /// The check that found it.
        check: SplitCheck,
        /// The checkpoint restored from (`None` for the run).
        checkpoint: Option<CheckpointSummary>,
        /// The split (as the kit's `split_of` names a record's split).
        split: String,
        /// Position of the record in its split's sequence (0: the split's first record).
        index: u64,
        /// The legacy source's record there.
        expected: Option<StreamRecord<T>>,
        /// The other side's record there.
        got: Option<StreamRecord<T>>,
    },
    /// The port emitted `watermark` when the legacy source, having emitted only records the
    /// port had emitted too, allowed at most `allowed`.
    WatermarkAhead {
        /// The port's watermark.
        watermark: i64,
        /// The greatest watermark the legacy source emitted by then (`None`: none).
        allowed: Option<i64>,
        /// Records the port had emitted when it emitted it.
        after_records: u64,
    },
}

impl<T: fmt::Debug + Clone> fmt::Display for SplitDivergence<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitDivergence::Record {
                check,
                checkpoint,
                split,
                index,
                expected,
                got,
            } => {
                let name = |r: &Option<StreamRecord<T>>| {
                    describe_element(r.clone().map(Emitted::Record).as_ref())
                };
                write!(f, "{check}")?;
                if let Some(c) = checkpoint {
                    write!(f, " (checkpoint {}, at record {})", c.id, c.records)?;
                }
                write!(
                    f,
                    " diverges in split {split} at its record {index}: the legacy source has {}, \
                     the port {}; {}",
                    name(expected),
                    name(got),
                    check.fix()
                )
            }
            SplitDivergence::WatermarkAhead {
                watermark,
                allowed,
                after_records,
            } => {
                let allowed = allowed.map_or("none".to_string(), |w| format!("watermark {w}"));
                write!(
                    f,
                    "the port emitted watermark {watermark} after {after_records} records, ahead \
                     of what the legacy source allowed with the same records ({allowed}); emit a \
                     watermark only once every split's records before it are emitted"
                )
            }
        }
    }
}

/// The kit could not confirm the port.
#[derive(Debug)]
#[non_exhaustive]
pub enum SplitPortingError<T> {
    /// The two sides differ as the divergence says.
    Diverged(Box<SplitDivergence<T>>),
    /// The legacy side failed or stalled (the bridge kit's error).
    Legacy(PortingError<T>),
    /// The port's enumerator, splits or state failed.
    Source(SourceError),
    /// A reader of the port failed.
    Port(OperatorError),
    /// The port made no progress for [`STALL_POLLS`] polls in a row.
    Stalled {
        /// Records it had emitted.
        records: u64,
    },
}

impl<T: fmt::Debug + Clone> fmt::Display for SplitPortingError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitPortingError::Diverged(d) => fmt::Display::fmt(d, f),
            SplitPortingError::Legacy(e) => fmt::Display::fmt(e, f),
            SplitPortingError::Source(e) => {
                write!(f, "the port's source failed: {e}; fix that failure first")
            }
            SplitPortingError::Port(e) => {
                write!(
                    f,
                    "a reader of the port failed: {e}; fix that failure first"
                )
            }
            SplitPortingError::Stalled { records } => write!(
                f,
                "the port made no progress after {records} records for {STALL_POLLS} polls; \
                 make its readers emit or end, and its enumerator answer split requests"
            ),
        }
    }
}

impl<T: fmt::Debug + Clone> std::error::Error for SplitPortingError<T> {}

impl<T> From<SourceError> for SplitPortingError<T> {
    fn from(e: SourceError) -> Self {
        SplitPortingError::Source(e)
    }
}

impl<T> From<PortingError<T>> for SplitPortingError<T> {
    fn from(e: PortingError<T>) -> Self {
        SplitPortingError::Legacy(e)
    }
}

/// Both sides agreed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SplitPortingReport<T> {
    /// The legacy source's committed records.
    pub records: Vec<StreamRecord<T>>,
    /// The checkpoints of the legacy run.
    pub checkpoints: Vec<CheckpointSummary>,
    /// Every check made, with the checkpoint it restored from (`None` for the run).
    pub checks: Vec<(Option<u64>, SplitCheck)>,
}

/// Runs a legacy source and its split-source port side by side and compares them. See the
/// [module docs](self).
pub struct SplitPortingKit<L, P, M, K> {
    legacy: PortingKit<L, ()>,
    port: P,
    mapping: M,
    split_of: K,
    parallelism: usize,
    rescaled: Option<usize>,
}

impl<L, P, M, K> fmt::Debug for SplitPortingKit<L, P, M, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitPortingKit")
            .field("legacy", &self.legacy)
            .field("parallelism", &self.parallelism)
            .field("rescaled", &self.rescaled)
            .finish_non_exhaustive()
    }
}

impl<F, S, L, P, M, K> SplitPortingKit<L, P, M, K>
where
    L: FnMut() -> F,
    F: SourceFunction,
    F::Out: Clone + PartialEq + fmt::Debug + Send,
    S: Source<Output = F::Out>,
    P: FnMut() -> S,
    M: SplitStateMapping<F::State, Split = S::Split>,
    K: Fn(&F::Out) -> String,
{
    /// A kit comparing the legacy side `legacy` (a bridge kit with its schedule: build it with
    /// `PortingKit::new(factory, ())` and its `checkpoint_*` methods) with the split sources
    /// `port()` makes, run at `parallelism` readers; `mapping` relates the states and
    /// `split_of` names the split a record belongs to.
    pub fn new(
        legacy: PortingKit<L, ()>,
        port: P,
        parallelism: usize,
        mapping: M,
        split_of: K,
    ) -> Self {
        SplitPortingKit {
            legacy,
            port,
            mapping,
            split_of,
            parallelism: parallelism.max(1),
            rescaled: None,
        }
    }

    /// Also restores the port from its own checkpoints at `parallelism` readers.
    pub fn rescaled_to(mut self, parallelism: usize) -> Self {
        self.rescaled = Some(parallelism.max(1));
        self
    }

    /// Runs both sides and makes every check of the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`SplitPortingError::Diverged`] with the first difference, or the failure of a side.
    pub fn run(mut self) -> Result<SplitPortingReport<F::Out>, SplitPortingError<F::Out>> {
        let legacy = self.legacy.run_legacy()?;
        let expected = records(&legacy.elements);
        let at: Vec<u64> = legacy.checkpoints.iter().map(|c| c.records).collect();
        let mut checks = Vec::new();

        let run = run_port((self.port)(), self.parallelism, None, &at)?;
        checks.push((None, SplitCheck::Run));
        self.same(SplitCheck::Run, None, &expected, &records(&run.elements))?;
        watermarks_behind(&legacy, &run.elements)?;

        let mut parallelisms = vec![self.parallelism];
        parallelisms.extend(self.rescaled.filter(|&p| p != self.parallelism));
        for (k, checkpoint) in legacy.checkpoints.iter().enumerate() {
            let Some((port_at, port_states)) = run.checkpoints.get(k) else {
                break;
            };
            let port_prefix = records(&run.elements[..run.marks[k]]);
            let legacy_prefix = &expected[..(checkpoint.records as usize).min(expected.len())];
            for &p in &parallelisms {
                let check = SplitCheck::PortFromPort { parallelism: p };
                let entries = respread(port_states, p)?;
                let got = run_port((self.port)(), p, Some((checkpoint.id, entries)), &[])?;
                let mut all = port_prefix.clone();
                all.extend(records(&got.elements));
                checks.push((Some(checkpoint.id), check));
                self.same(check, Some(*checkpoint), &expected, &all)?;
            }
            let splits = self.mapping.splits_of(&legacy.states[k]);
            for &p in &parallelisms {
                let check = SplitCheck::PortFromLegacy { parallelism: p };
                let source = (self.port)();
                let enumerator = source.create_enumerator(p)?.snapshot_state(0)?;
                let entries = spread(checkpoint.id, enumerator, &splits, p)?;
                let got = run_port(source, p, Some((checkpoint.id, entries)), &[])?;
                let mut all = legacy_prefix.to_vec();
                all.extend(records(&got.elements));
                checks.push((Some(checkpoint.id), check));
                self.same(check, Some(*checkpoint), &expected, &all)?;
            }
            let held = held_splits::<S::Split, F::Out>(port_states)?;
            if let Some(state) = self.mapping.legacy_of(&held) {
                let check = SplitCheck::LegacyFromPort;
                let from = CheckpointSummary {
                    id: checkpoint.id,
                    records: *port_at,
                };
                let got = self.legacy.run_legacy_from(from, &state)?;
                let mut all = port_prefix.clone();
                all.extend(records(&got));
                checks.push((Some(checkpoint.id), check));
                self.same(check, Some(*checkpoint), &expected, &all)?;
            }
        }
        Ok(SplitPortingReport {
            records: expected,
            checkpoints: legacy.checkpoints,
            checks,
        })
    }

    /// Compares split by split, in the legacy order: the first record of the legacy output
    /// whose split's sequence differs at its position, else the port's first extra record.
    fn same(
        &self,
        check: SplitCheck,
        checkpoint: Option<CheckpointSummary>,
        expected: &[StreamRecord<F::Out>],
        got: &[StreamRecord<F::Out>],
    ) -> Result<(), SplitPortingError<F::Out>> {
        let mut by_split: HashMap<String, Vec<&StreamRecord<F::Out>>> = HashMap::new();
        for r in got {
            by_split
                .entry((self.split_of)(&r.value))
                .or_default()
                .push(r);
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let diverged = |split: String, index: usize, expected: Option<&StreamRecord<F::Out>>| {
            let got = by_split
                .get(&split)
                .and_then(|v| v.get(index))
                .map(|r| (*r).clone());
            SplitPortingError::Diverged(Box::new(SplitDivergence::Record {
                check,
                checkpoint,
                split,
                index: index as u64,
                expected: expected.cloned(),
                got,
            }))
        };
        for r in expected {
            let split = (self.split_of)(&r.value);
            let index = seen.entry(split.clone()).or_default();
            let same = by_split
                .get(&split)
                .and_then(|v| v.get(*index))
                .is_some_and(|g| *g == r);
            if !same {
                return Err(diverged(split, *index, Some(r)));
            }
            *index += 1;
        }
        // The first extra record in the port's order.
        let mut counted: HashMap<String, usize> = HashMap::new();
        for r in got {
            let split = (self.split_of)(&r.value);
            let index = counted.entry(split.clone()).or_default();
            if *index >= seen.get(&split).copied().unwrap_or(0) {
                return Err(diverged(split, *index, None));
            }
            *index += 1;
        }
        Ok(())
    }
}

fn records<T: Clone>(elements: &[Emitted<T>]) -> Vec<StreamRecord<T>> {
    elements
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Every watermark of the port is at most the greatest one the legacy source emitted before
/// its first record the port had not emitted by then (records matched as a multiset).
fn watermarks_behind<T: Clone + PartialEq, S>(
    legacy: &LegacyRun<T, S>,
    port: &[Emitted<T>],
) -> Result<(), SplitPortingError<T>> {
    let mut emitted: Vec<&StreamRecord<T>> = Vec::new();
    for element in port {
        match element {
            Emitted::Record(r) => emitted.push(r),
            Emitted::Watermark(w) => {
                let mut left = emitted.clone();
                let mut allowed: Option<i64> = None;
                for e in &legacy.elements {
                    match e {
                        Emitted::Record(r) => match left.iter().position(|x| *x == r) {
                            Some(i) => {
                                left.swap_remove(i);
                            }
                            None => break,
                        },
                        Emitted::Watermark(lw) => {
                            allowed =
                                Some(allowed.map_or(lw.timestamp(), |a| a.max(lw.timestamp())))
                        }
                        _ => {}
                    }
                }
                if allowed.is_none_or(|a| w.timestamp() > a) {
                    return Err(SplitPortingError::Diverged(Box::new(
                        SplitDivergence::WatermarkAhead {
                            watermark: w.timestamp(),
                            allowed,
                            after_records: emitted.len() as u64,
                        },
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// What one run of the port committed.
struct PortRun<T> {
    elements: Vec<Emitted<T>>,
    /// Per checkpoint: its position in records and every reader's state.
    checkpoints: Vec<(u64, Vec<Vec<u8>>)>,
    /// Elements committed at each checkpoint.
    marks: Vec<usize>,
}

/// Runs `source` at `parallelism` readers, restored from `restore` (checkpoint id, the
/// readers' entries), checkpointing at the first poll boundary at or after each of `at`.
fn run_port<S: Source>(
    source: S,
    parallelism: usize,
    restore: Option<(u64, Vec<Vec<u8>>)>,
    at: &[u64],
) -> Result<PortRun<S::Output>, SplitPortingError<S::Output>> {
    let coordinator = Arc::new(SourceCoordinator::new("port", source, parallelism)?);
    let (checkpoint, entries) = match restore {
        Some((id, entries)) => (Some(id), entries),
        None => (None, Vec::new()),
    };
    let restored: Vec<Option<&[u8]>> = (0..parallelism)
        .map(|i| entries.get(i).map(Vec::as_slice))
        .collect();
    let first_id = checkpoint.map_or(1, |id| id + 1);
    let result = (|| {
        coordinator.start_attempt(checkpoint, &restored)?;
        let mut readers: Vec<_> = (0..parallelism).map(|i| coordinator.reader(i)).collect();
        for (reader, entry) in readers.iter_mut().zip(&restored) {
            reader
                .restore_state(*entry)
                .map_err(SplitPortingError::Port)?;
        }
        let outcome = drive(&coordinator, &mut readers, at, first_id);
        for reader in &mut readers {
            let _ = reader.close();
        }
        outcome
    })();
    coordinator.end_attempt();
    result
}

fn drive<S: Source>(
    coordinator: &SourceCoordinator<S>,
    readers: &mut [super::SplitSourceReader<S>],
    at: &[u64],
    first_id: u64,
) -> Result<PortRun<S::Output>, SplitPortingError<S::Output>> {
    let mut run = PortRun {
        elements: Vec::new(),
        checkpoints: Vec::new(),
        marks: Vec::new(),
    };
    let mut records = 0u64;
    let mut idle = vec![false; readers.len()];
    let mut ended = vec![false; readers.len()];
    let mut buffer: Vec<Emitted<S::Output>> = Vec::new();
    let mut quiet = 0u64;
    let mut next = at.iter().copied().peekable();
    while !ended.iter().all(|e| *e) {
        coordinator.discover();
        for i in 0..readers.len() {
            if ended[i] {
                continue;
            }
            let reader = &mut readers[i];
            let mut output = ReaderOutput::resume(&mut buffer, idle[i]);
            let status = reader.poll_next(&mut output);
            idle[i] = output.is_idle();
            let before = records;
            for element in buffer.drain(..) {
                if matches!(element, Emitted::Record(_)) {
                    records += 1;
                }
                run.elements.push(element);
            }
            match status.map_err(SplitPortingError::Port)? {
                InputStatus::EndOfInput => {
                    ended[i] = true;
                    quiet = 0;
                }
                InputStatus::NothingAvailable => reader.register_waker(Waker::noop()),
                InputStatus::MoreAvailable => {}
            }
            quiet = if records > before { 0 } else { quiet + 1 };
            if quiet > STALL_POLLS {
                return Err(SplitPortingError::Stalled { records });
            }
            // A poll boundary of every reader: checkpoint if one is due.
            while next.peek().is_some_and(|&p| records >= p) {
                next.next();
                let id = first_id + run.checkpoints.len() as u64;
                coordinator.checkpoint_coordinator(id);
                let states = readers_snapshot(readers, id)?;
                coordinator.checkpoint_completed(id);
                for r in readers.iter_mut() {
                    r.notify_checkpoint_complete(id)
                        .map_err(SplitPortingError::Port)?;
                }
                run.checkpoints.push((records, states));
                run.marks.push(run.elements.len());
            }
        }
    }
    Ok(run)
}

fn readers_snapshot<S: Source>(
    readers: &mut [super::SplitSourceReader<S>],
    id: u64,
) -> Result<Vec<Vec<u8>>, SplitPortingError<S::Output>> {
    readers
        .iter_mut()
        .map(|r| r.snapshot_state(id).map_err(SplitPortingError::Port))
        .collect()
}

fn encode_items<T>(items: Vec<SplitStateItem>) -> Result<Vec<u8>, SplitPortingError<T>> {
    ListState::new(items)
        .encode()
        .map_err(|e| SplitPortingError::Port(OperatorError::state("split porting kit", e)))
}

fn bad_state<T>(e: impl fmt::Display) -> SplitPortingError<T> {
    SplitPortingError::Source(SourceError::BadState {
        source_name: "port".to_string(),
        reason: e.to_string(),
    })
}

/// The readers' entries of a checkpoint spread over `parallelism` readers as list state
/// spreads on a rescale: held splits round robin, everything else to reader 0.
fn respread<T>(
    states: &[Vec<u8>],
    parallelism: usize,
) -> Result<Vec<Vec<u8>>, SplitPortingError<T>> {
    let mut spread: Vec<Vec<SplitStateItem>> = vec![Vec::new(); parallelism];
    let mut n = 0;
    for bytes in states {
        for item in decode_items(bytes).map_err(bad_state)? {
            match item {
                SplitStateItem::Split(_) => {
                    spread[n % parallelism].push(item);
                    n += 1;
                }
                other => spread[0].push(other),
            }
        }
    }
    spread.into_iter().map(encode_items).collect()
}

/// Readers' entries holding `splits` round robin, reader 0 with the enumerator's `enumerator`
/// snapshot as of checkpoint `checkpoint`.
fn spread<Sp: SourceSplit, T>(
    checkpoint: u64,
    enumerator: Vec<u8>,
    splits: &[Sp],
    parallelism: usize,
) -> Result<Vec<Vec<u8>>, SplitPortingError<T>> {
    let mut spread: Vec<Vec<SplitStateItem>> = vec![Vec::new(); parallelism];
    spread[0].push(SplitStateItem::Coordinator {
        checkpoint,
        state: CoordinatorSnapshot {
            enumerator,
            ..CoordinatorSnapshot::default()
        },
    });
    for (i, split) in splits.iter().enumerate() {
        spread[i % parallelism].push(SplitStateItem::Split(split.encode()?));
    }
    spread.into_iter().map(encode_items).collect()
}

/// The splits the readers hold in their entries.
fn held_splits<Sp: SourceSplit, T>(states: &[Vec<u8>]) -> Result<Vec<Sp>, SplitPortingError<T>> {
    let mut splits = Vec::new();
    for bytes in states {
        for item in decode_items(bytes).map_err(bad_state)? {
            if let SplitStateItem::Split(b) = item {
                splits.push(Sp::decode(&b)?);
            }
        }
    }
    Ok(splits)
}
