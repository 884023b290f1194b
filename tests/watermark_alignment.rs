//! Watermark alignment of a split source (Flink's FLIP-182): a fast reader paused when its
//! watermark runs more than the drift ahead of the slowest reader, resumed when that one
//! catches up; a paused reader is not marked idle.
//!
//! Translated from Flink (named from knowledge of its sources, not re-read here):
//! `smoke` and `a_fast_reader_stays_within_the_drift_in_every_model` from
//! `WatermarkAlignmentITCase` (a job whose fast source is held within the drift of the slow
//! one); `a_paused_reader_is_woken_by_the_bound_and_never_marked_idle` from
//! `SourceOperatorAlignmentTest` (a reader paused when ahead of the announced bound, resumed
//! when a later announcement reaches it, polled as unavailable while paused) and
//! `SourceCoordinatorAlignmentTest` (the bound is the group's minimum plus the drift, leaving
//! out ended readers), with the idleness part from Flink 2.0's fix that paused time does not
//! make a source idle.
//!
//! The test source makes the pause certain without timing: the slow reader stays at
//! watermark 0 until the fast one was told to pause. Every assertion is on emitted event
//! times: a fast record carries the slow reader's watermark at the moment it was emitted.

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::source::{
    Boundedness, EnumeratorContext, Source, SourceCoordinator, SourceError, SourceSplit,
    SplitEnumerator, SplitOutput, SplitReader, WatermarkAlignment,
};
use streamtask_core::operator::Emitted;
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

/// Assigns the fast split to reader 0 and the slow one to reader 1 when it starts.
struct RaceEnumerator {
    started: bool,
}

impl SplitEnumerator for RaceEnumerator {
    type Split = RaceSplit;

    fn start(&mut self, ctx: &mut EnumeratorContext<'_, RaceSplit>) -> Result<(), SourceError> {
        if !self.started {
            self.started = true;
            ctx.assign_split(
                0,
                RaceSplit {
                    fast: true,
                    next: 0,
                },
            )?;
            ctx.assign_split(
                1,
                RaceSplit {
                    fast: false,
                    next: 0,
                },
            )?;
        }
        ctx.signal_no_more_splits(0)?;
        ctx.signal_no_more_splits(1)
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

struct RaceReader {
    race: Arc<Race>,
    split: Option<RaceSplit>,
}

impl SplitReader<String> for RaceReader {
    type Split = RaceSplit;

    fn add_splits(&mut self, splits: Vec<RaceSplit>) {
        self.split = splits.into_iter().next();
    }

    fn pause_or_resume_splits(&mut self, pause: &[String], resume: &[String]) {
        if !resume.is_empty() {
            self.race.resumes.fetch_add(1, Ordering::SeqCst);
        }
        if !pause.is_empty() {
            let gate = self.race.gate.lock().unwrap();
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
        let Some(split) = self.split.as_mut() else {
            return Ok(InputStatus::NothingAvailable);
        };
        let ts = split.next;
        if split.fast {
            let slow = self.race.slow_watermark.load(Ordering::SeqCst);
            output.collect_with_timestamp(format!("fast:{ts}:{slow}"), ts)?;
            split.next += FAST_STEP;
        } else {
            if ts > 0 && !self.race.fast_was_paused() {
                // Held at watermark 0 until the fast reader is paused (`register_waker`).
                return Ok(InputStatus::NothingAvailable);
            }
            // Published before the watermark leaves, so a fast record never sees a lower one
            // than the coordinator used.
            self.race.slow_watermark.store(ts, Ordering::SeqCst);
            output.collect_with_timestamp(format!("slow:{ts}:{ts}"), ts)?;
            split.next += 1;
        }
        output.emit_watermark(Watermark(ts))?;
        if split.next > END {
            output.finish_split(split.split_id());
            self.split = None;
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
        Ok(self.split.iter().cloned().collect())
    }
}

struct RaceSource {
    race: Arc<Race>,
    alignment: WatermarkAlignment,
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
        Ok(RaceEnumerator { started: false })
    }

    fn restore_enumerator(&self, _p: usize, state: &[u8]) -> Result<RaceEnumerator, SourceError> {
        Ok(RaceEnumerator {
            started: state == [1],
        })
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> RaceReader {
        RaceReader {
            race: Arc::clone(&self.race),
            split: None,
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

/// Runs the race in `model`; returns the committed lines and the shared race.
fn run(model: Model, dir: &Path) -> (Vec<String>, Arc<Race>) {
    let race = Race::new();
    let env = StreamEnvironment::new(model);
    let source = RaceSource {
        race: Arc::clone(&race),
        alignment: WatermarkAlignment::new(
            Duration::from_millis(DRIFT as u64),
            Duration::from_millis(1),
        ),
    };
    let output = dir.join("output");
    env.from_source("race", source, 2)
        .two_phase_file_sink("sink", output.clone(), |s: &String| s.clone());
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let config = JobConfig::new(dir).with_checkpoints(Some(
        CheckpointConfig::new(Duration::from_millis(5))
            .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
    ));
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(result.restarts, 0, "{model}: {:?}", result.failures);
    (streamtask::sink::read_committed(&output).unwrap(), race)
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
}

#[test]
fn smoke() {
    let work = tempfile::tempdir().unwrap();
    let (lines, race) = run(Model::Mailbox, work.path());
    assert_race(Model::Mailbox, &lines, &race);
}

#[test]
fn a_fast_reader_stays_within_the_drift_in_every_model() {
    for model in MODELS {
        let work = tempfile::tempdir().unwrap();
        let (lines, race) = run(model, work.path());
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
    let source = RaceSource {
        race: Arc::clone(&race),
        alignment: WatermarkAlignment::new(Duration::from_millis(DRIFT as u64), Duration::ZERO),
    };
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
