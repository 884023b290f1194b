//! The handoff reader: a legacy source as a new-style reader, exactly once across restores with
//! records in the handoff, woken (never spinning), stopped and joined on close.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use common::{Count, HANG_GUARD, SharedOutput, values, wait_until};
use streamtask_bridge::HandoffReader;
use streamtask_core::operator::{Emitted, Map};
use streamtask_core::task::{TaskConfig, TaskOutcome};
use streamtask_core::{OperatorError, Watermark, time::Clock, time::ManualClock};
use streamtask_legacy::{SourceContext, SourceContextConfig, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("count"),
        HandoffReader::new(Count::to(1000)).with_capacity(8),
        Map::new("double", |n: u64| n * 2),
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    let emitted = output.snapshot();
    assert_eq!(
        values(&emitted),
        (0..1000).map(|n| n * 2).collect::<Vec<_>>()
    );
    // One end of event time (the task's), not one from the source and one from the task.
    let maxes = emitted
        .iter()
        .filter(|e| **e == Emitted::Watermark(Watermark::MAX))
        .count();
    assert_eq!(maxes, 1);
    assert_eq!(emitted.last(), Some(&Emitted::EndOfInput));
}

/// A waker that sets a flag; the test sleeps on it.
#[derive(Default)]
struct Flag {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Flag {
    fn wait(&self) {
        let set = self.set.lock().unwrap();
        let (mut set, timeout) = self
            .changed
            .wait_timeout_while(set, HANG_GUARD, |set| !*set)
            .unwrap();
        assert!(!timeout.timed_out(), "hang guard: never woken");
        *set = false;
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.set.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

/// Polls `reader` as a mailbox task would until `want` records came or the input ended;
/// returns the records and how many times it polled.
fn poll_records<R: SourceReader<u64>>(reader: &mut R, want: usize) -> (Vec<u64>, u64, bool) {
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut emitted: Vec<Emitted<u64>> = Vec::new();
    let mut polls = 0;
    let mut ended = false;
    while values(&emitted).len() < want {
        polls += 1;
        match reader
            .poll_next(&mut ReaderOutput::new(&mut emitted))
            .unwrap()
        {
            InputStatus::MoreAvailable => {}
            InputStatus::NothingAvailable => {
                reader.register_waker(&waker);
                flag.wait();
            }
            InputStatus::EndOfInput => {
                ended = true;
                break;
            }
        }
    }
    (values(&emitted), polls, ended)
}

/// Counts from its state to `end`; when its state reaches `pause`, waits (outside the lock)
/// until cancelled.
struct Numbers {
    pause: Option<u64>,
    end: u64,
}

impl SourceFunction for Numbers {
    type Out = u64;
    type State = u64;
    fn name(&self) -> &str {
        "numbers"
    }
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            if Some(n) == self.pause {
                drop(locked);
                ctx.cancellation().wait();
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

#[test]
fn exactly_once_across_a_restore_with_records_in_the_handoff() {
    // The first run: the source emits 0..20 into a handoff of 4, the reader takes 3.
    let mut first = HandoffReader::new(Numbers {
        pause: Some(20),
        end: 100,
    })
    .with_capacity(4);
    first.restore_state(None).unwrap();
    let (taken, _, _) = poll_records(&mut first, 3);
    assert_eq!(taken, vec![0, 1, 2]);
    // The handoff is full and the source waits for room: records are in flight.
    wait_until(|| first.pending() >= 4);
    let snapshot = first.snapshot_state(1).unwrap();
    first.close().unwrap();

    // The restore replays what was in flight, then the source continues from its state.
    let mut second = HandoffReader::new(Numbers {
        pause: None,
        end: 100,
    })
    .with_capacity(4);
    second.restore_state(Some(&snapshot)).unwrap();
    // Nobody polled between the wait and the snapshot, so at least those 4 were in it.
    assert!(second.pending() >= 4);
    let (rest, _, ended) = poll_records(&mut second, usize::MAX);
    assert!(ended);
    second.close().unwrap();
    let all: Vec<u64> = taken.into_iter().chain(rest).collect();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
}

/// Two records per locked section, with the state advanced between them: a handoff of
/// capacity 1 is full after the first, but the section never waits in the middle.
struct Pairs {
    end: u64,
}

impl SourceFunction for Pairs {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
            locked.collect(n + 1)?;
            *locked.state_mut() = n + 2;
        }
        Ok(())
    }
}

/// How a cut is snapshotted and restored: the reader's own bytes (`snapshot_state`), or the
/// task-state entries a `SourceStreamTask` writes (`snapshot_task_state`).
#[derive(Clone, Copy)]
enum SnapshotPath {
    ReaderBytes,
    TaskState,
}

/// For each cut: poll `cut` records from a fresh reader made by `make`, snapshot it along
/// `path`, restore a second one from it and poll to the end: the two together emit `0..end`
/// exactly once, in order.
fn every_cut_restores_exactly_once(
    end: u64,
    cuts: &[usize],
    path: SnapshotPath,
    make: impl Fn() -> HandoffReader<Pairs>,
) {
    for &cut in cuts {
        let mut first = make();
        let mut second = make();
        let taken = match path {
            SnapshotPath::ReaderBytes => {
                first.restore_state(None).unwrap();
                let (taken, _, _) = poll_records(&mut first, cut);
                let snapshot = first.snapshot_state(1).unwrap();
                first.close().unwrap();
                second.restore_state(Some(&snapshot)).unwrap();
                taken
            }
            SnapshotPath::TaskState => {
                first.restore_task_state(None).unwrap();
                let (taken, _, _) = poll_records(&mut first, cut);
                let mut snapshot = streamtask_core::state::TaskSnapshot::new();
                first.snapshot_task_state(1, &mut snapshot).unwrap();
                first.close().unwrap();
                second.restore_task_state(Some(&snapshot)).unwrap();
                taken
            }
        };
        let (rest, _, ended) = poll_records(&mut second, usize::MAX);
        assert!(ended);
        second.close().unwrap();
        let all: Vec<u64> = taken.into_iter().chain(rest).collect();
        assert_eq!(all, (0..end).collect::<Vec<_>>(), "cut after {cut}");
    }
}

#[test]
fn snapshots_never_split_a_section_even_when_the_handoff_is_full() {
    let end = 200;
    every_cut_restores_exactly_once(
        end,
        &[1, 2, 5, 17, 50, 99],
        SnapshotPath::ReaderBytes,
        || HandoffReader::new(Pairs { end }).with_capacity(1),
    );
}

/// Chunks in flight at a snapshot: the reader's chunk, published chunks and a chunk being
/// filled (chunks of 3 in a capacity of 16, two records per section, so the chunk being filled
/// is often partial): every cut restores exactly once, in order.
#[test]
fn snapshots_with_chunks_in_flight_restore_exactly_once() {
    let end = 400;
    every_cut_restores_exactly_once(
        end,
        &[1, 2, 3, 7, 16, 40, 199],
        SnapshotPath::ReaderBytes,
        || {
            HandoffReader::new(Pairs { end })
                .with_capacity(16)
                .with_chunk(3)
        },
    );
}

/// The same cuts through the task-state path a `SourceStreamTask` takes (the source's own bytes under
/// `source`, the records in flight beside them): the published chunks are in the snapshot too.
#[test]
fn task_state_snapshots_with_chunks_in_flight_restore_exactly_once() {
    let end = 400;
    every_cut_restores_exactly_once(
        end,
        &[1, 2, 3, 7, 16, 40, 199],
        SnapshotPath::TaskState,
        || {
            HandoffReader::new(Pairs { end })
                .with_capacity(16)
                .with_chunk(3)
        },
    );
}

/// Sleeps between records: the reader finds nothing most of the time.
struct Slow {
    count: u64,
}

impl SourceFunction for Slow {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        for n in 0..self.count {
            ctx.sleep(Duration::from_millis(1))?;
            ctx.collect(n)?;
        }
        Ok(())
    }
}

#[test]
fn a_reader_with_nothing_to_emit_sleeps_until_woken() {
    let count = 30;
    let mut reader = HandoffReader::new(Slow { count });
    reader.restore_state(None).unwrap();
    let (records, polls, ended) = poll_records(&mut reader, usize::MAX);
    reader.close().unwrap();
    assert!(ended);
    assert_eq!(records, (0..count).collect::<Vec<_>>());
    // Each poll either emits, or finds nothing and then sleeps until a record (or the end)
    // wakes it: at most two polls per record, plus the end. A busy loop would poll thousands
    // of times.
    assert!(polls <= 2 * count + 2, "{polls} polls for {count} records");
}

/// Emits three records, then fails.
struct Fails;

impl SourceFunction for Fails {
    type Out = u64;
    type State = ();
    fn name(&self) -> &str {
        "fails"
    }
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        for n in 0..3 {
            ctx.collect(n)?;
        }
        Err(OperatorError::user("fails", "upstream is gone"))
    }
}

#[test]
fn a_failing_source_fails_the_task_after_its_records() {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("fails"),
        HandoffReader::new(Fails),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn();
    let outcome = task.join();
    assert!(
        outcome
            .failure()
            .is_some_and(|f| f.to_string().contains("upstream is gone")),
        "{outcome}"
    );
    assert_eq!(values(&output.snapshot()), vec![0, 1, 2]);
}

/// Counts forever; notes when its `run` returned.
struct Forever {
    returned: Arc<AtomicBool>,
}

impl SourceFunction for Forever {
    type Out = u64;
    type State = u64;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        // Set however `run` returns (a cancelled section's emit returns an error).
        let _returned = SetOnDrop(Arc::clone(&self.returned));
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn cancelling_the_task_stops_and_joins_the_source_thread() {
    let returned = Arc::new(AtomicBool::new(false));
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("forever"),
        HandoffReader::new(Forever {
            returned: Arc::clone(&returned),
        })
        .with_capacity(16),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn();
    output.wait_for(|e| e.len() > 100);
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    // The task closed the reader, which joined the source thread: `run` has returned.
    assert!(returned.load(Ordering::SeqCst));
}

/// Ignores cancellation until released.
struct Stubborn {
    released: Arc<AtomicBool>,
}

impl SourceFunction for Stubborn {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        ctx.collect(1)?;
        while !self.released.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

#[test]
fn closing_a_source_that_ignores_cancellation_reports_it_instead_of_hanging() {
    let released = Arc::new(AtomicBool::new(false));
    let mut reader = HandoffReader::new(Stubborn {
        released: Arc::clone(&released),
    })
    .with_cancel_grace(Duration::from_millis(50));
    reader.restore_state(None).unwrap();
    let (records, _, _) = poll_records(&mut reader, 1);
    assert_eq!(records, vec![1]);
    let error = reader.close().unwrap_err();
    assert!(
        error.to_string().contains("ignored cancellation for 50 ms"),
        "{error}"
    );
    released.store(true, Ordering::SeqCst);
}

/// Emits `count` records and ends; panics if run again. Notes when it is dropped (after
/// `run_source` ended its input).
struct Once {
    count: u64,
    ran: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

impl Drop for Once {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl SourceFunction for Once {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        assert!(!self.ran.swap(true, Ordering::SeqCst), "run twice");
        for n in 0..self.count {
            ctx.collect(n)?;
        }
        Ok(())
    }
}

#[test]
fn a_source_that_had_finished_is_not_run_again_after_a_restore() {
    let ran = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let mut first = HandoffReader::new(Once {
        count: 10,
        ran: Arc::clone(&ran),
        dropped: Arc::clone(&dropped),
    });
    first.restore_state(None).unwrap();
    let (taken, _, _) = poll_records(&mut first, 4);
    // Wait until the source finished (its thread drops it after ending the input), then
    // checkpoint with the rest still in flight.
    wait_until(|| dropped.load(Ordering::SeqCst));
    assert_eq!(first.pending(), 6);
    let snapshot = first.snapshot_state(1).unwrap();
    first.close().unwrap();

    let again = Arc::new(AtomicBool::new(false));
    let mut second = HandoffReader::new(Once {
        count: 10,
        ran: Arc::clone(&again),
        dropped: Arc::new(AtomicBool::new(false)),
    });
    second.restore_state(Some(&snapshot)).unwrap();
    let (rest, _, ended) = poll_records(&mut second, usize::MAX);
    second.close().unwrap();
    assert!(ended);
    assert!(
        !again.load(Ordering::SeqCst),
        "finished on restore: not run again"
    );
    let all: Vec<u64> = taken.into_iter().chain(rest).collect();
    assert_eq!(all, (0..10).collect::<Vec<_>>());
}

/// Emits one record, then waits until cancelled.
struct OneThenWait;

impl SourceFunction for OneThenWait {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        ctx.collect(1)?;
        ctx.cancellation().wait();
        Ok(())
    }
}

#[test]
fn context_timers_run_on_the_readers_clock() {
    let clock = ManualClock::new(1_000);
    let output = SharedOutput::new();
    let reader = HandoffReader::new(OneThenWait)
        .with_context(SourceContextConfig::ingestion_time(Duration::from_millis(100)).unwrap())
        .with_clock(Clock::Manual(clock.clone()));
    let task = SourceStreamTask::new(
        TaskConfig::new("ingestion"),
        reader,
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn();
    output.wait_for(|e| values(e) == vec![1]);
    clock.advance(500);
    // The automatic watermark timer fired under the reader's lock and handed off a watermark.
    output.wait_for(|e| {
        e.iter()
            .any(|x| matches!(x, Emitted::Watermark(w) if w.0 >= 1_400))
    });
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}
