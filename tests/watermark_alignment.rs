//! Watermark alignment of a split source (Flink's FLIP-182 per source, FLIP-217 per split)
//! and the idleness clock that ignores paused and backpressured time (Flink 2.0).
//!
//! Translated from Flink:
//! - `SourceOperatorSplitWatermarkAlignmentTest` (read for this translation):
//!   `testSplitWatermarkAlignment` ->
//!   `a_fast_split_is_paused_while_the_slow_split_of_its_reader_goes_on`,
//!   `testBackpressureAndIdleness` -> `backpressured_time_does_not_make_a_split_idle`,
//!   `testSingleSplitWatermarkAlignmentAndIdleness` ->
//!   `a_single_split_paused_for_many_timeouts_is_never_idle`,
//!   `testMultiSplitWatermarkAlignmentAndIdleness` ->
//!   `a_paused_split_does_not_go_idle_while_its_sibling_runs`,
//!   `testSplitWatermarkAlignmentWithFinishedSplit` -> `a_finished_split_is_never_paused`.
//!   Flink injects the bound as a coordinator event; here the bound comes from the group's
//!   minimum, held where the Flink test holds it by a second reader ("slow") or by the
//!   reader's own slow split, so the expected pause sequences differ in steps, not in rule.
//! - `WatermarkAlignmentITCase` (from knowledge of its sources, not re-read here): `smoke`
//!   and the three `..._in_every_model` jobs (readers of one source, splits of one reader,
//!   two sources of one group): the fast side held within the drift of the slow one.
//! - `SourceOperatorAlignmentTest` and `SourceCoordinatorAlignmentTest` (from knowledge, not
//!   re-read here): `a_paused_reader_is_woken_by_the_bound_and_never_marked_idle`.
//!
//! Of our own: `a_waiting_reader_is_woken_at_its_idleness_deadline` (the reader is polled at
//! its split's idleness deadline without a record to wake it).
//!
//! The race source makes the pause certain without timing: the slow split stays at watermark
//! 0 until the fast one was told to pause, and the fast one is read first while it runs. Every
//! job assertion is on emitted event times: a fast record carries the slow split's watermark
//! at the moment it was emitted. The scripted tests use a manual clock: their paused and idle
//! milliseconds are exact, not timings.

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::source::{
    Boundedness, EnumeratorContext, Source, SourceCoordinator, SourceError, SourceSplit,
    SplitEnumerator, SplitOutput, SplitReader, WatermarkAlignment,
};
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{Emitted, MapWithContext};
use streamtask_core::task::TaskConfig;
use streamtask_core::time::{Clock, ManualClock};
use streamtask_core::{OperatorError, StreamStatus, Watermark};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// The allowed drift (event-time milliseconds).
const DRIFT: i64 = 100;
/// The fast reader's event-time step per record; the slow reader's is 1.
const FAST_STEP: i64 = 10;
/// Both splits end at this event time.
const END: i64 = 2000;

/// What the readers share with the test: the slow reader's watermark and the fast reader's
/// pauses.
#[derive(Default)]
struct Race {
    slow_watermark: AtomicI64,
    pauses: AtomicU64,
    resumes: AtomicU64,
    /// Whether the fast split is paused now.
    fast_paused: AtomicBool,
    /// Slow records emitted while the fast split was paused.
    slow_while_fast_paused: AtomicU64,
    /// The slow reader's waker while it waits for the fast reader's first pause.
    gate: Mutex<Option<Waker>>,
}

impl Race {
    fn new() -> Arc<Self> {
        let race = Race::default();
        race.slow_watermark.store(i64::MIN, Ordering::SeqCst);
        Arc::new(race)
    }

    fn fast_was_paused(&self) -> bool {
        self.pauses.load(Ordering::SeqCst) > 0
    }
}

/// A split: "fast" or "slow", with the event time of its next record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RaceSplit {
    fast: bool,
    next: i64,
}

impl SourceSplit for RaceSplit {
    fn split_id(&self) -> String {
        if self.fast { "fast" } else { "slow" }.to_string()
    }

    fn encode(&self) -> Result<Vec<u8>, SourceError> {
        Ok(format!("{}:{}", self.split_id(), self.next).into_bytes())
    }

    fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
        let text = std::str::from_utf8(bytes).map_err(SourceError::user)?;
        let (id, next) = text
            .split_once(':')
            .ok_or_else(|| SourceError::user(format!("not a race split: {text}")))?;
        Ok(RaceSplit {
            fast: id == "fast",
            next: next.parse().map_err(SourceError::user)?,
        })
    }
}

/// Assigns its splits when it starts (by default the fast split to reader 0 and the slow one
/// to reader 1), then no more.
struct RaceEnumerator {
    started: bool,
    assignments: Vec<(usize, RaceSplit)>,
    readers: usize,
}

impl SplitEnumerator for RaceEnumerator {
    type Split = RaceSplit;

    fn start(&mut self, ctx: &mut EnumeratorContext<'_, RaceSplit>) -> Result<(), SourceError> {
        if !self.started {
            self.started = true;
            for (subtask, split) in &self.assignments {
                ctx.assign_split(*subtask, split.clone())?;
            }
        }
        for subtask in 0..self.readers {
            ctx.signal_no_more_splits(subtask)?;
        }
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        _subtask: usize,
        _ctx: &mut EnumeratorContext<'_, RaceSplit>,
    ) -> Result<(), SourceError> {
        Ok(())
    }

    fn add_splits_back(&mut self, _splits: Vec<RaceSplit>, _subtask: usize) {}

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        Ok(vec![u8::from(self.started)])
    }
}

const FAST: RaceSplit = RaceSplit {
    fast: true,
    next: 0,
};
const SLOW: RaceSplit = RaceSplit {
    fast: false,
    next: 0,
};

/// Reads its splits, the fast one first while it is not paused, one record per poll, each
/// with its split's watermark.
struct RaceReader {
    race: Arc<Race>,
    splits: Vec<RaceSplit>,
    paused: BTreeSet<String>,
}

impl SplitReader<String> for RaceReader {
    type Split = RaceSplit;

    fn add_splits(&mut self, splits: Vec<RaceSplit>) {
        self.splits.extend(splits);
        self.splits.sort_by_key(|s| !s.fast);
    }

    fn pause_or_resume_splits(&mut self, pause: &[String], resume: &[String]) {
        self.paused.extend(pause.iter().cloned());
        resume.iter().for_each(|id| {
            self.paused.remove(id);
        });
        // Only the fast split's pauses count: the slow one may be paused too (against the
        // first bound, before the group's minimum is taken), which proves nothing.
        let fast = |ids: &[String]| ids.iter().any(|id| id == "fast");
        if fast(resume) {
            self.race.fast_paused.store(false, Ordering::SeqCst);
            self.race.resumes.fetch_add(1, Ordering::SeqCst);
        }
        if fast(pause) {
            let gate = self.race.gate.lock().unwrap();
            self.race.fast_paused.store(true, Ordering::SeqCst);
            self.race.pauses.fetch_add(1, Ordering::SeqCst);
            if let Some(waker) = gate.as_ref() {
                waker.wake_by_ref();
            }
        }
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, String>,
    ) -> Result<InputStatus, OperatorError> {
        let paused = &self.paused;
        let Some(index) = self
            .splits
            .iter()
            .position(|s| !paused.contains(&s.split_id()))
        else {
            return Ok(InputStatus::NothingAvailable);
        };
        let split = &mut self.splits[index];
        let id = split.split_id();
        let ts = split.next;
        if split.fast {
            let slow = self.race.slow_watermark.load(Ordering::SeqCst);
            output.collect_for(&id, format!("fast:{ts}:{slow}"), ts)?;
            split.next += FAST_STEP;
        } else {
            if ts > 0 && !self.race.fast_was_paused() {
                // Held at watermark 0 until the fast split is paused (`register_waker`).
                return Ok(InputStatus::NothingAvailable);
            }
            if self.race.fast_paused.load(Ordering::SeqCst) {
                self.race
                    .slow_while_fast_paused
                    .fetch_add(1, Ordering::SeqCst);
            }
            // Published before the watermark leaves, so a fast record never sees a lower one
            // than the coordinator used.
            self.race.slow_watermark.store(ts, Ordering::SeqCst);
            output.collect_for(&id, format!("slow:{ts}:{ts}"), ts)?;
            split.next += 1;
        }
        output.emit_watermark_for(&id, Watermark(ts))?;
        if split.next > END {
            output.finish_split(id);
            self.splits.remove(index);
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        let mut gate = self.race.gate.lock().unwrap();
        if self.race.fast_was_paused() {
            waker.wake_by_ref();
        } else {
            *gate = Some(waker.clone());
        }
    }

    fn snapshot_splits(&mut self, _checkpoint_id: u64) -> Result<Vec<RaceSplit>, OperatorError> {
        Ok(self.splits.clone())
    }
}

struct RaceSource {
    race: Arc<Race>,
    alignment: WatermarkAlignment,
    /// (reader, split) assigned at the start.
    assignments: Vec<(usize, RaceSplit)>,
}

impl RaceSource {
    /// The fast split on reader 0, the slow one on reader 1.
    fn pair(race: &Arc<Race>, alignment: WatermarkAlignment) -> Self {
        RaceSource {
            race: Arc::clone(race),
            alignment,
            assignments: vec![(0, FAST), (1, SLOW)],
        }
    }

    fn readers(&self) -> usize {
        self.assignments
            .iter()
            .map(|(r, _)| r + 1)
            .max()
            .unwrap_or(1)
    }
}

impl Source for RaceSource {
    type Output = String;
    type Split = RaceSplit;
    type Enumerator = RaceEnumerator;
    type Reader = RaceReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(&self, _parallelism: usize) -> Result<RaceEnumerator, SourceError> {
        Ok(RaceEnumerator {
            started: false,
            assignments: self.assignments.clone(),
            readers: self.readers(),
        })
    }

    fn restore_enumerator(&self, _p: usize, state: &[u8]) -> Result<RaceEnumerator, SourceError> {
        Ok(RaceEnumerator {
            started: state == [1],
            assignments: self.assignments.clone(),
            readers: self.readers(),
        })
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> RaceReader {
        RaceReader {
            race: Arc::clone(&self.race),
            splits: Vec::new(),
            paused: BTreeSet::new(),
        }
    }

    fn watermark_alignment(&self) -> Option<WatermarkAlignment> {
        Some(self.alignment.clone())
    }
}

/// Checks the drift on the emitted lines `kind:ts:slow`: every fast record after its first
/// left when the fast reader's watermark (its previous record's time) was within the drift
/// of the slow reader's watermark of that moment.
fn assert_within_drift(model: Model, lines: &[String]) {
    for line in lines {
        let mut parts = line.split(':');
        let (kind, ts, slow) = (
            parts.next().unwrap(),
            parts.next().unwrap().parse::<i64>().unwrap(),
            parts.next().unwrap().parse::<i64>().unwrap(),
        );
        if kind == "fast" && ts > 0 {
            let lead = (ts - FAST_STEP).saturating_sub(slow);
            assert!(
                lead <= DRIFT,
                "{model}: {line}: the fast reader ran {lead} ms ahead of the slow one (drift {DRIFT})"
            );
        }
    }
}

/// Where the race's two splits are read.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// One source, the fast split on reader 0, the slow one on reader 1 (FLIP-182).
    TwoReaders,
    /// One source, both splits on its only reader (FLIP-217).
    OneReader,
    /// Two sources of one reader each, the fast and the slow, in one alignment group.
    TwoSources,
}

/// Runs the race in `model`; returns the committed lines and the shared race.
fn run(model: Model, layout: Layout, dir: &Path) -> (Vec<String>, Arc<Race>) {
    let race = Race::new();
    let env = StreamEnvironment::new(model);
    let alignment = WatermarkAlignment::new(
        Duration::from_millis(DRIFT as u64),
        Duration::from_millis(1),
    );
    let mut outputs = Vec::new();
    let mut add = |name: &str, source: RaceSource| {
        let readers = source.readers();
        let output = dir.join(format!("output-{name}"));
        env.from_source(name, source, readers).two_phase_file_sink(
            &format!("sink-{name}"),
            output.clone(),
            |s: &String| s.clone(),
        );
        outputs.push(output);
    };
    match layout {
        Layout::TwoReaders => add("race", RaceSource::pair(&race, alignment)),
        Layout::OneReader => add(
            "race",
            RaceSource {
                assignments: vec![(0, FAST), (0, SLOW)],
                ..RaceSource::pair(&race, alignment)
            },
        ),
        Layout::TwoSources => {
            let grouped = alignment.with_group("race");
            for (name, split) in [("fast", FAST), ("slow", SLOW)] {
                add(
                    name,
                    RaceSource {
                        assignments: vec![(0, split)],
                        ..RaceSource::pair(&race, grouped.clone())
                    },
                );
            }
        }
    }
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let config = JobConfig::new(dir).with_checkpoints(Some(
        CheckpointConfig::new(Duration::from_millis(5))
            .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
    ));
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(result.restarts, 0, "{model}: {:?}", result.failures);
    let lines = outputs
        .iter()
        .flat_map(|o| streamtask::sink::read_committed(o).unwrap())
        .collect();
    (lines, race)
}

fn assert_race(model: Model, lines: &[String], race: &Race) {
    let fast = lines.iter().filter(|l| l.starts_with("fast:")).count();
    let slow = lines.iter().filter(|l| l.starts_with("slow:")).count();
    assert_eq!(
        fast as i64,
        END / FAST_STEP + 1,
        "{model}: every fast record once"
    );
    assert_eq!(slow as i64, END + 1, "{model}: every slow record once");
    assert_within_drift(model, lines);
    assert!(
        race.pauses.load(Ordering::SeqCst) >= 1,
        "{model}: never paused"
    );
    assert!(
        race.resumes.load(Ordering::SeqCst) >= 1,
        "{model}: never resumed"
    );
    assert!(
        race.slow_while_fast_paused.load(Ordering::SeqCst) >= 1,
        "{model}: the slow split did not go on while the fast one was paused"
    );
}

#[test]
fn smoke() {
    let work = tempfile::tempdir().unwrap();
    let (lines, race) = run(Model::Mailbox, Layout::TwoReaders, work.path());
    assert_race(Model::Mailbox, &lines, &race);
}

#[test]
fn a_fast_reader_stays_within_the_drift_in_every_model() {
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let (lines, race) = run(model, Layout::TwoReaders, work.path());
        assert_race(model, &lines, &race);
    }
}

/// FLIP-217 in a job: the fast split is paused and resumed within the drift while the slow
/// split of the same reader goes on.
#[test]
fn a_fast_split_stays_within_the_drift_of_its_readers_slow_split_in_every_model() {
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let (lines, race) = run(model, Layout::OneReader, work.path());
        assert_race(model, &lines, &race);
    }
}

/// Flink's `withWatermarkAlignment(group, ...)`: two sources in one group share its minimum.
#[test]
fn a_fast_source_stays_within_the_drift_of_a_slow_source_of_its_group_in_every_model() {
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let (lines, race) = run(model, Layout::TwoSources, work.path());
        assert_race(model, &lines, &race);
    }
}

/// Counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls once; returns the status and what was emitted.
fn poll<R: SourceReader<String>>(reader: &mut R) -> (InputStatus, Vec<Emitted<String>>) {
    let mut emitted = Vec::new();
    let status = reader
        .poll_next(&mut ReaderOutput::new(&mut emitted))
        .unwrap();
    (status, emitted)
}

fn marks_idle(emitted: &[Emitted<String>]) -> bool {
    emitted
        .iter()
        .any(|e| matches!(e, Emitted::Status(StreamStatus::Idle)))
}

#[test]
fn a_paused_reader_is_woken_by_the_bound_and_never_marked_idle() {
    let race = Race::new();
    let source = RaceSource::pair(
        &race,
        WatermarkAlignment::new(Duration::from_millis(DRIFT as u64), Duration::ZERO),
    );
    let coordinator = Arc::new(SourceCoordinator::new("race", source, 2).unwrap());
    coordinator.start_attempt(None, &[]).unwrap();
    let (mut fast, mut slow) = (coordinator.reader(0), coordinator.reader(1));
    fast.restore_state(None).unwrap();
    slow.restore_state(None).unwrap();

    // Its first record leaves before any bound: the reader had no watermark yet.
    let (status, emitted) = poll(&mut fast);
    assert_eq!(status, InputStatus::MoreAvailable);
    assert!(emitted.contains(&Emitted::Watermark(Watermark(0))));
    // No bound yet (the slow reader reported nothing): paused, not idle, the waker kept.
    let (status, emitted) = poll(&mut fast);
    assert_eq!(status, InputStatus::NothingAvailable);
    assert!(
        emitted.is_empty(),
        "a paused reader emits nothing: {emitted:?}"
    );
    assert_eq!(race.pauses.load(Ordering::SeqCst), 1);
    let counter = Arc::new(CountingWaker::default());
    fast.register_waker(&Waker::from(Arc::clone(&counter)));
    coordinator.discover();
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        1,
        "a publication wakes the paused reader to check the bound"
    );
    // The bound is still the slow reader's "nothing yet" plus the drift: still paused.
    assert_eq!(poll(&mut fast).0, InputStatus::NothingAvailable);

    // The slow reader reaches 0: the bound becomes 0 + DRIFT and the fast reader runs to it.
    assert_eq!(poll(&mut slow).0, InputStatus::MoreAvailable);
    coordinator.discover();
    let mut watermarks = Vec::new();
    loop {
        let (status, emitted) = poll(&mut fast);
        assert!(!marks_idle(&emitted), "paused or running, never idle");
        watermarks.extend(emitted.iter().filter_map(|e| match e {
            Emitted::Watermark(w) => Some(w.0),
            _ => None,
        }));
        if status == InputStatus::NothingAvailable {
            break;
        }
    }
    assert_eq!(race.resumes.load(Ordering::SeqCst), 1);
    assert_eq!(race.pauses.load(Ordering::SeqCst), 2);
    assert_eq!(
        watermarks.last(),
        Some(&(DRIFT + FAST_STEP)),
        "the fast reader stops one record past the bound {DRIFT}: {watermarks:?}"
    );

    // Registered while paused, the waker is kept until a bound reaches the reader: a
    // publication at the same minimum wakes it to re-check, and the re-check keeps it paused.
    let counter = Arc::new(CountingWaker::default());
    fast.register_waker(&Waker::from(Arc::clone(&counter)));
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        0,
        "not woken before a bound"
    );
    // The slow reader advances past the fast one's lead; the next bound resumes it.
    for _ in 0..=FAST_STEP + 1 {
        assert_eq!(poll(&mut slow).0, InputStatus::MoreAvailable);
    }
    coordinator.discover();
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        1,
        "woken by the new bound"
    );
    let (status, emitted) = poll(&mut fast);
    assert_eq!(status, InputStatus::MoreAvailable, "resumed");
    assert!(!marks_idle(&emitted));
    assert_eq!(race.resumes.load(Ordering::SeqCst), 2);

    // Both run to their ends, each kept within the drift of the other by the bounds published
    // between rounds (the slow reader is aligned too); the fast reader is never marked idle.
    let (mut fast_ended, mut slow_ended) = (false, false);
    let mut rounds = 0;
    while !(fast_ended && slow_ended) {
        coordinator.discover();
        if !slow_ended {
            slow_ended = poll(&mut slow).0 == InputStatus::EndOfInput;
        }
        if !fast_ended {
            let (status, emitted) = poll(&mut fast);
            assert!(!marks_idle(&emitted), "paused or running, never idle");
            fast_ended = status == InputStatus::EndOfInput;
        }
        rounds += 1;
        assert!(rounds < 10 * END, "the readers did not run to their ends");
    }
    coordinator.end_attempt();
}

// ---------------------------------------------------------------------------------------------
// Per-split alignment and idleness (FLIP-217, FLINK-35886), translated from Flink's
// `SourceOperatorSplitWatermarkAlignmentTest`: a scripted split source read by the engine's
// reader (`SplitSourceReader`, the same code every model runs), with a manual clock for the
// idleness timeout.
// ---------------------------------------------------------------------------------------------

/// A scripted split (Flink's `MockSourceSplit`): the event times of its records still to
/// read, and whether it ends when they are read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScriptSplit {
    id: String,
    records: VecDeque<i64>,
    finishes: bool,
}

fn split(id: &str, records: &[i64], finishes: bool) -> ScriptSplit {
    ScriptSplit {
        id: id.to_string(),
        records: records.iter().copied().collect(),
        finishes,
    }
}

impl SourceSplit for ScriptSplit {
    fn split_id(&self) -> String {
        self.id.clone()
    }

    fn encode(&self) -> Result<Vec<u8>, SourceError> {
        let records: Vec<String> = self.records.iter().map(i64::to_string).collect();
        Ok(format!("{}|{}|{}", self.id, self.finishes, records.join(",")).into_bytes())
    }

    fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
        let text = std::str::from_utf8(bytes).map_err(SourceError::user)?;
        let mut parts = text.splitn(3, '|');
        let (Some(id), Some(finishes), Some(records)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SourceError::user(format!("not a script split: {text}")));
        };
        Ok(ScriptSplit {
            id: id.to_string(),
            finishes: finishes == "true",
            records: records
                .split(',')
                .filter(|r| !r.is_empty())
                .map(|r| r.parse().map_err(SourceError::user))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Assigns each reader its scripted splits when it starts, then no more.
struct ScriptEnumerator {
    assignments: Vec<Vec<ScriptSplit>>,
}

impl SplitEnumerator for ScriptEnumerator {
    type Split = ScriptSplit;

    fn start(&mut self, ctx: &mut EnumeratorContext<'_, ScriptSplit>) -> Result<(), SourceError> {
        for (subtask, splits) in std::mem::take(&mut self.assignments)
            .into_iter()
            .enumerate()
        {
            for s in splits {
                ctx.assign_split(subtask, s)?;
            }
            ctx.signal_no_more_splits(subtask)?;
        }
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        _subtask: usize,
        _ctx: &mut EnumeratorContext<'_, ScriptSplit>,
    ) -> Result<(), SourceError> {
        Ok(())
    }

    fn add_splits_back(&mut self, _splits: Vec<ScriptSplit>, _subtask: usize) {}

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }
}

/// The pause and resume calls a reader got: (paused, resumed).
type PauseLog = Arc<Mutex<Vec<(Vec<String>, Vec<String>)>>>;

/// Flink's `MockSourceReader` with per-split outputs: one record per poll from the first split
/// that is not paused and has one, with the split's watermark at its event time (Flink's
/// `TestWatermarkGenerator`); a split that `finishes` ends once read.
struct ScriptReader {
    splits: Vec<ScriptSplit>,
    paused: BTreeSet<String>,
    log: PauseLog,
    /// Whether it emits each split's watermark itself (else a watermark strategy does).
    own_watermarks: bool,
}

impl SplitReader<i64> for ScriptReader {
    type Split = ScriptSplit;

    fn add_splits(&mut self, splits: Vec<ScriptSplit>) {
        self.splits.extend(splits);
    }

    fn pause_or_resume_splits(&mut self, pause: &[String], resume: &[String]) {
        self.paused.extend(pause.iter().cloned());
        resume.iter().for_each(|id| {
            self.paused.remove(id);
        });
        self.log
            .lock()
            .unwrap()
            .push((pause.to_vec(), resume.to_vec()));
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, i64>,
    ) -> Result<InputStatus, OperatorError> {
        let paused = &self.paused;
        let Some(index) = self
            .splits
            .iter()
            .position(|s| !paused.contains(&s.id) && (!s.records.is_empty() || s.finishes))
        else {
            return Ok(InputStatus::NothingAvailable);
        };
        let s = &mut self.splits[index];
        if let Some(ts) = s.records.pop_front() {
            output.collect_for(&s.id, ts, ts)?;
            if self.own_watermarks {
                output.emit_watermark_for(&s.id, Watermark(ts))?;
            }
        }
        if s.records.is_empty() && s.finishes {
            output.finish_split(s.id.clone());
            self.splits.remove(index);
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, _waker: &Waker) {
        // Driven by hand: the test polls again.
    }

    fn snapshot_splits(&mut self, _checkpoint_id: u64) -> Result<Vec<ScriptSplit>, OperatorError> {
        Ok(self.splits.clone())
    }
}

struct ScriptSource {
    assignments: Vec<Vec<ScriptSplit>>,
    alignment: Option<WatermarkAlignment>,
    idle_timeout: Option<Duration>,
    log: PauseLog,
    own_watermarks: bool,
}

impl Source for ScriptSource {
    type Output = i64;
    type Split = ScriptSplit;
    type Enumerator = ScriptEnumerator;
    type Reader = ScriptReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(&self, _parallelism: usize) -> Result<ScriptEnumerator, SourceError> {
        Ok(ScriptEnumerator {
            assignments: self.assignments.clone(),
        })
    }

    fn restore_enumerator(
        &self,
        parallelism: usize,
        _state: &[u8],
    ) -> Result<ScriptEnumerator, SourceError> {
        self.create_enumerator(parallelism)
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> ScriptReader {
        ScriptReader {
            splits: Vec::new(),
            paused: BTreeSet::new(),
            log: Arc::clone(&self.log),
            own_watermarks: self.own_watermarks,
        }
    }

    fn watermark_alignment(&self) -> Option<WatermarkAlignment> {
        self.alignment.clone()
    }

    fn split_idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }
}

/// The drift of the scripted tests: Flink's tests align with 1 ms.
const SCRIPT_DRIFT: Duration = Duration::from_millis(1);
/// The idleness timeout of the scripted tests (Flink's `idleTimeout`).
const IDLE_TIMEOUT: i64 = 100;

/// A scripted source's coordinator (aligned with [`SCRIPT_DRIFT`] if `aligned`), started, and
/// its readers restored and attached to tasks that share `clock`; returns them with the
/// readers' pause log and the tasks' metrics.
struct Scripted {
    coordinator: Arc<SourceCoordinator<ScriptSource>>,
    readers: Vec<streamtask::source::SplitSourceReader<ScriptSource>>,
    metrics: Vec<Arc<TaskMetrics>>,
    log: PauseLog,
}

fn scripted(
    assignments: Vec<Vec<ScriptSplit>>,
    aligned: bool,
    idle_timeout: Option<i64>,
    clock: &ManualClock,
) -> Scripted {
    scripted_with(assignments, aligned, idle_timeout, None, clock)
}

/// As [`scripted`]; with a watermark `strategy` the readers emit no watermarks themselves:
/// the strategy generates them per split.
fn scripted_with(
    assignments: Vec<Vec<ScriptSplit>>,
    aligned: bool,
    idle_timeout: Option<i64>,
    strategy: Option<WatermarkStrategy<i64>>,
    clock: &ManualClock,
) -> Scripted {
    let log = PauseLog::default();
    let parallelism = assignments.len();
    let source = ScriptSource {
        assignments,
        alignment: aligned.then(|| WatermarkAlignment::new(SCRIPT_DRIFT, Duration::ZERO)),
        idle_timeout: idle_timeout.map(|ms| Duration::from_millis(ms as u64)),
        log: Arc::clone(&log),
        own_watermarks: strategy.is_none(),
    };
    let coordinator = SourceCoordinator::new("script", source, parallelism).unwrap();
    let coordinator = Arc::new(match strategy {
        Some(strategy) => coordinator.with_watermark_strategy(strategy),
        None => coordinator,
    });
    coordinator.start_attempt(None, &[]).unwrap();
    let mut readers = Vec::new();
    let mut metrics = Vec::new();
    for subtask in 0..parallelism {
        let mut reader = coordinator.reader(subtask);
        let mut task = TaskConfig::new(format!("script#{subtask}"));
        task.clock = Clock::Manual(clock.clone());
        reader.attach(&task);
        reader.restore_state(None).unwrap();
        metrics.push(Arc::clone(&task.metrics));
        readers.push(reader);
    }
    Scripted {
        coordinator,
        readers,
        metrics,
        log,
    }
}

fn poll_i64<R: SourceReader<i64>>(reader: &mut R, into: &mut Vec<Emitted<i64>>) -> InputStatus {
    let mut emitted = Vec::new();
    let status = reader
        .poll_next(&mut ReaderOutput::new(&mut emitted))
        .unwrap();
    into.extend(emitted);
    status
}

fn watermarks(emitted: &[Emitted<i64>]) -> Vec<i64> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Watermark(w) => Some(w.0),
            _ => None,
        })
        .collect()
}

fn records(emitted: &[Emitted<i64>]) -> Vec<i64> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// `testSplitWatermarkAlignment`: the splits of one reader aligned to each other: a split whose
/// watermark runs past the bound (the reader's minimum plus the drift) is paused while the
/// other goes on, and resumed once a later bound reaches it.
#[test]
fn a_fast_split_is_paused_while_the_slow_split_of_its_reader_goes_on() {
    let clock = ManualClock::new(0);
    let mut s = scripted(
        vec![vec![
            split("0", &[5, 11], false),
            split("1", &[3, 12], false),
        ]],
        true,
        None,
        &clock,
    );
    let reader = &mut s.readers[0];
    let mut out = Vec::new();
    s.coordinator.discover();
    assert_eq!(poll_i64(reader, &mut out), InputStatus::MoreAvailable);
    assert_eq!(records(&out), [5], "split 0 emits 5");
    // Split 1 has no watermark yet: the reader's minimum is the lowest, split 0 is ahead.
    assert_eq!(reader.paused_splits(), set(&["0"]));
    assert!(watermarks(&out).is_empty(), "split 1 holds the watermark");

    s.coordinator.discover();
    poll_i64(reader, &mut out);
    assert_eq!(
        records(&out),
        [5, 3],
        "the paused split is skipped: split 1 emits 3"
    );
    assert_eq!(watermarks(&out), [3], "the minimum over the splits");
    // Split 1 is past the bound published before its first watermark: paused too. Every
    // split paused: the reader is not polled.
    assert_eq!(reader.paused_splits(), set(&["0", "1"]));
    assert_eq!(poll_i64(reader, &mut out), InputStatus::NothingAvailable);
    assert_eq!(records(&out), [5, 3]);

    // Bound 3 + 1 resumes split 1 (it emits 12, ahead again); split 0 stays paused.
    s.coordinator.discover();
    poll_i64(reader, &mut out);
    assert_eq!(records(&out), [5, 3, 12]);
    assert_eq!(watermarks(&out), [3, 5]);
    assert_eq!(reader.paused_splits(), set(&["0", "1"]));

    // Bound 5 + 1 resumes split 0 (it emits 11) and keeps split 1 paused.
    s.coordinator.discover();
    poll_i64(reader, &mut out);
    assert_eq!(records(&out), [5, 3, 12, 11]);
    assert_eq!(watermarks(&out), [3, 5, 11]);
    assert_eq!(reader.paused_splits(), set(&["0", "1"]));
    // Bound 11 + 1 resumes both.
    s.coordinator.discover();
    assert_eq!(poll_i64(reader, &mut out), InputStatus::NothingAvailable);
    assert!(reader.paused_splits().is_empty());

    let log = s.log.lock().unwrap().clone();
    let strings = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        log,
        [
            (strings(&["0"]), strings(&[])),
            (strings(&["1"]), strings(&[])),
            (strings(&[]), strings(&["1"])),
            (strings(&["1"]), strings(&[])),
            (strings(&[]), strings(&["0"])),
            (strings(&["0"]), strings(&[])),
            (strings(&[]), strings(&["0", "1"])),
        ],
        "the reader is told of every pause and resume, per split"
    );
}

/// `testBackpressureAndIdleness`: time the task is backpressured is not on the splits'
/// idleness clocks; once it is over, the silent splits go idle and the reader with them.
#[test]
fn backpressured_time_does_not_make_a_split_idle() {
    let clock = ManualClock::new(0);
    let mut s = scripted(
        vec![vec![split("0", &[42, 44], false), split("1", &[], false)]],
        false,
        Some(IDLE_TIMEOUT),
        &clock,
    );
    let reader = &mut s.readers[0];
    let metrics = Arc::clone(&s.metrics[0]);
    let mut out = Vec::new();
    poll_i64(reader, &mut out);
    for _ in 0..10 {
        clock.advance(IDLE_TIMEOUT);
        // The task spent the whole interval blocked on full output.
        metrics.backpressured_micros.add(IDLE_TIMEOUT as u64 * 1000);
        poll_i64(reader, &mut out);
    }
    assert!(
        !marks_idle_i64(&out),
        "backpressure made a split idle: {out:?}"
    );
    assert!(watermarks(&out).is_empty(), "split 1 holds the watermark");
    assert!(reader.idle_splits().is_empty());

    for _ in 0..10 {
        clock.advance(IDLE_TIMEOUT);
        poll_i64(reader, &mut out);
    }
    assert!(marks_idle_i64(&out), "both splits idle: the reader is idle");
    assert_eq!(reader.idle_splits(), set(&["0", "1"]));
    assert!(
        watermarks(&out).is_empty(),
        "both went idle together: no watermark"
    );
    // Idle from the first interval after the backpressure to the last: nine intervals.
    for id in ["0", "1"] {
        let m = reader.split_metrics(id).unwrap();
        assert_eq!(m.idle_millis.get(), 9 * IDLE_TIMEOUT as u64, "split {id}");
        assert_eq!(m.paused_millis.get(), 0, "split {id}");
    }
}

fn marks_idle_i64(emitted: &[Emitted<i64>]) -> bool {
    emitted
        .iter()
        .any(|e| matches!(e, Emitted::Status(StreamStatus::Idle)))
}

/// `testSingleSplitWatermarkAlignmentAndIdleness` (and Flink's fix that a reader with one
/// split pauses its idleness clock too): a reader's only split, paused by the bound for many
/// idleness timeouts, is never marked idle; its paused time is measured.
#[test]
fn a_single_split_paused_for_many_timeouts_is_never_idle() {
    let clock = ManualClock::new(1);
    // Reader 1 holds the group's minimum at 3: the bound stays at 3 + 1.
    let mut s = scripted(
        vec![
            vec![split("0", &[1, 1, 1, 1, 5, 105], false)],
            vec![split("slow", &[3], false)],
        ],
        true,
        Some(IDLE_TIMEOUT),
        &clock,
    );
    let mut slow_out = Vec::new();
    poll_i64(&mut s.readers[1], &mut slow_out);
    let mut out = Vec::new();
    for _ in 0..10 {
        s.coordinator.discover();
        poll_i64(&mut s.readers[0], &mut out);
        clock.advance(IDLE_TIMEOUT);
    }
    assert!(
        !marks_idle_i64(&out),
        "paused time made the split idle: {out:?}"
    );
    assert_eq!(records(&out), [1, 1, 1, 1, 5], "105 stays behind the bound");
    assert_eq!(s.readers[0].paused_splits(), set(&["0"]));
    assert!(s.readers[0].idle_splits().is_empty());
    let m = s.readers[0].split_metrics("0").unwrap();
    // Paused after its first record until the first bound (one interval), and from its
    // record 5 on (the last five intervals; the tenth is not ticked yet).
    assert_eq!(m.paused_millis.get(), 6 * IDLE_TIMEOUT as u64);
    assert_eq!(m.idle_millis.get(), 0);
    // The task's metrics hold the split's, for the `metrics` export.
    assert!(s.metrics[0].splits.lock().contains_key("0"));
    let summary = s.metrics[0].summary();
    assert_eq!(summary.splits.len(), 1);
    assert_eq!(summary.splits[0].paused_millis, m.paused_millis.get());
    // Its watermark 5 against the group's minimum 3 (reader 1), measured at its last poll.
    assert_eq!(summary.watermark_alignment_drift, Some(2));
}

/// `testMultiSplitWatermarkAlignmentAndIdleness`: a paused split does not go idle while the
/// other split of its reader keeps emitting, so the reader's watermark never passes the
/// paused split's.
#[test]
fn a_paused_split_does_not_go_idle_while_its_sibling_runs() {
    let clock = ManualClock::new(0);
    let mut s = scripted(
        vec![
            vec![
                split("0", &[5, 105], false),
                split("1", &[3, 3, 3, 3, 3, 3, 3, 105], false),
            ],
            vec![split("slow", &[3], false)],
        ],
        true,
        Some(IDLE_TIMEOUT),
        &clock,
    );
    let mut slow_out = Vec::new();
    poll_i64(&mut s.readers[1], &mut slow_out);
    let mut out = Vec::new();
    s.coordinator.discover();
    poll_i64(&mut s.readers[0], &mut out);
    assert_eq!(s.readers[0].paused_splits(), set(&["0"]));
    loop {
        // Below the timeout per step, so the running split never goes idle, while the paused
        // one would have, many times over, were its paused time counted.
        clock.advance(IDLE_TIMEOUT - 1);
        s.coordinator.discover();
        if poll_i64(&mut s.readers[0], &mut out) != InputStatus::MoreAvailable {
            break;
        }
    }
    assert_eq!(records(&out), [5, 3, 3, 3, 3, 3, 3, 3, 105]);
    assert_eq!(s.readers[0].paused_splits(), set(&["0", "1"]));
    assert!(s.readers[0].idle_splits().is_empty());
    assert!(
        watermarks(&out).iter().all(|w| *w <= 5),
        "the watermark passed the paused split's: {:?}",
        watermarks(&out)
    );
    assert!(!marks_idle_i64(&out));
}

/// `testSplitWatermarkAlignmentWithFinishedSplit`: a split read to its end is no longer held:
/// never paused, its metrics gone from the task's.
#[test]
fn a_finished_split_is_never_paused() {
    let clock = ManualClock::new(0);
    let mut s = scripted(
        vec![vec![split("0", &[5], true), split("1", &[3], false)]],
        true,
        Some(IDLE_TIMEOUT),
        &clock,
    );
    let mut out = Vec::new();
    while poll_i64(&mut s.readers[0], &mut out) == InputStatus::MoreAvailable {
        s.coordinator.discover();
    }
    assert_eq!(records(&out), [5, 3]);
    s.coordinator.discover();
    poll_i64(&mut s.readers[0], &mut out);
    assert!(s.readers[0].paused_splits().is_empty());
    assert_eq!(s.readers[0].held_splits(), set(&["1"]));
    assert!(!s.metrics[0].splits.lock().contains_key("0"));
}

/// A waiting reader (nothing to read, its waker registered) is woken by the coordinator's
/// periodic call once a split reaches its idleness timeout, and the poll marks it idle.
#[test]
fn a_waiting_reader_is_woken_at_its_idleness_deadline() {
    let clock = ManualClock::new(0);
    let mut s = scripted(
        vec![vec![split("0", &[7], false)]],
        false,
        Some(IDLE_TIMEOUT),
        &clock,
    );
    let mut out = Vec::new();
    poll_i64(&mut s.readers[0], &mut out);
    assert_eq!(
        poll_i64(&mut s.readers[0], &mut out),
        InputStatus::NothingAvailable
    );
    let counter = Arc::new(CountingWaker::default());
    s.readers[0].register_waker(&Waker::from(Arc::clone(&counter)));
    clock.advance(IDLE_TIMEOUT - 1);
    s.coordinator.discover();
    assert_eq!(counter.0.load(Ordering::SeqCst), 0, "before the deadline");
    clock.advance(1);
    s.coordinator.discover();
    assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken at the deadline");
    poll_i64(&mut s.readers[0], &mut out);
    assert_eq!(s.readers[0].idle_splits(), set(&["0"]));
    assert!(marks_idle_i64(&out));
}

// ---------------------------------------------------------------------------------------------
// Watermarks generated per split from a `WatermarkStrategy` (Flink's
// `fromSource(source, watermarkStrategy, name)`: the source operator's split-local watermark
// generators).
// ---------------------------------------------------------------------------------------------

/// A split read ahead of its sibling does not carry the reader's watermark past the records
/// the sibling has still to emit; each split's watermark is its largest event time less the
/// bound, less 1, generated once per auto-watermark interval of processing time.
#[test]
fn a_strategy_generates_each_splits_watermark_and_the_reader_forwards_their_minimum() {
    let clock = ManualClock::new(0);
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(5))
        .with_auto_watermark_interval(Duration::from_millis(200));
    let mut s = scripted_with(
        vec![vec![
            split("a", &[100, 300, 500], false),
            split("b", &[110, 120], false),
        ]],
        false,
        None,
        Some(strategy),
        &clock,
    );
    let reader = &mut s.readers[0];
    let mut out = Vec::new();
    // Split a first, an interval per record: b has emitted nothing, so it holds the reader.
    for _ in 0..3 {
        poll_i64(reader, &mut out);
        clock.advance(200);
    }
    assert_eq!(records(&out), [100, 300, 500]);
    assert_eq!(
        watermarks(&out),
        Vec::<i64>::new(),
        "b holds the reader back"
    );
    // b's first record: b at 110 - 5 - 1, the minimum.
    poll_i64(reader, &mut out);
    assert_eq!(watermarks(&out), [104]);
    // Within the interval nothing is generated.
    poll_i64(reader, &mut out);
    assert_eq!(records(&out), [100, 300, 500, 110, 120]);
    assert_eq!(watermarks(&out), [104]);
    // The interval passed: b's largest event time, 120, gives 114, while waiting for input.
    clock.advance(200);
    assert_eq!(poll_i64(reader, &mut out), InputStatus::NothingAvailable);
    assert_eq!(watermarks(&out), [104, 114]);
    // Never a record at or below a watermark emitted before it.
    let mut watermark = i64::MIN;
    for e in &out {
        match e {
            Emitted::Watermark(w) => watermark = w.0,
            Emitted::Record(r) => {
                assert!(r.value > watermark, "{} late under {watermark}", r.value)
            }
            _ => {}
        }
    }
}

/// A reader waiting for input whose records allow a watermark not generated yet is woken at
/// the end of the interval to generate it (nothing else polls it).
#[test]
fn a_waiting_reader_is_woken_to_generate_the_watermark_its_records_allow() {
    let clock = ManualClock::new(0);
    let strategy = WatermarkStrategy::for_monotonous_timestamps()
        .with_auto_watermark_interval(Duration::from_millis(200));
    let mut s = scripted_with(
        vec![vec![split("a", &[100, 150], false)]],
        false,
        None,
        Some(strategy),
        &clock,
    );
    let mut out = Vec::new();
    let reader = &mut s.readers[0];
    poll_i64(reader, &mut out); // 100, generated at once: 99
    poll_i64(reader, &mut out); // 150, within the interval
    assert_eq!(poll_i64(reader, &mut out), InputStatus::NothingAvailable);
    assert_eq!(watermarks(&out), [99]);
    let counter = Arc::new(CountingWaker::default());
    reader.register_waker(&Waker::from(Arc::clone(&counter)));
    clock.advance(199);
    s.coordinator.discover();
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        0,
        "before the interval ended"
    );
    clock.advance(1);
    s.coordinator.discover();
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        1,
        "woken at the interval's end"
    );
    poll_i64(&mut s.readers[0], &mut out);
    assert_eq!(watermarks(&out), [99, 149]);
}

/// Under every model a source read with a strategy emits no record behind a watermark that
/// went before it, though one split is read to its end before its sibling starts.
#[test]
fn per_split_watermarks_leave_no_record_late_in_every_model() {
    for model in MODELS {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        // Enough records that intervals pass while split a is read, whatever the machine.
        let a: Vec<i64> = (0..2000).map(|i| 10_000 + i).collect();
        let b: Vec<i64> = (0..2000).map(|i| 100 + i).collect();
        let source = ScriptSource {
            assignments: vec![vec![split("a", &a, true), split("b", &b, true)]],
            alignment: None,
            idle_timeout: None,
            log: PauseLog::default(),
            own_watermarks: false,
        };
        let strategy = WatermarkStrategy::for_monotonous_timestamps()
            .with_auto_watermark_interval(Duration::from_millis(1));
        env.from_source_with_watermarks("script", source, strategy, 1)
            .operator(|_| {
                MapWithContext::new("late?", |ts: i64, ctx: &RecordContext<'_>| {
                    let watermark = ctx.current_watermark().0;
                    if ts <= watermark {
                        format!("late:{ts}:{watermark}")
                    } else {
                        format!("ok:{ts}")
                    }
                })
            })
            .collect_sink("collect", &out);
        let work = tempfile::tempdir().unwrap();
        env.build()
            .unwrap()
            .run(&JobConfig::new(work.path()))
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let lines = out.committed();
        assert_eq!(lines.len(), 4000, "{model}");
        let late: Vec<&String> = lines.iter().filter(|l| !l.starts_with("ok:")).collect();
        assert!(
            late.is_empty(),
            "{model}: {} late, first {:?}",
            late.len(),
            late.first()
        );
    }
}
