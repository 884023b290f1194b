//! The source context's flavours (Flink's `StreamSourceContexts`), idleness detection, the
//! locked section, and backends that fill up.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread;

use std::time::Duration;
use streamtask_core::operator::{Emitted, Output};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark, time::ManualClock};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
    SourceContextConfig, SourceEnd, SourceFunction, SourceOutput, run_source,
};

type Cell<T> = SourceCell<(), Vec<Emitted<T>>>;

fn cell(
    config: SourceContextConfig,
    clock: &ManualClock,
) -> (Cell<&'static str>, Arc<ManualTimerService>) {
    let timers = Arc::new(ManualTimerService::new(clock.clone()));
    let emission = Emission::new(config, timers.clone());
    (SourceCell::new((), emission, Vec::new()), timers)
}

/// Fires every context timer due now, under "the lock" (the test owns the cell).
fn fire_due(cell: &mut Cell<&'static str>, timers: &ManualTimerService) {
    while let Some(timer) = timers.pop_due() {
        cell.on_context_timer::<&'static str>(timer).unwrap();
    }
}

fn take(cell: &mut Cell<&'static str>) -> Vec<Emitted<&'static str>> {
    std::mem::take(cell.output_mut())
}

fn watermarks(emitted: &[Emitted<&'static str>]) -> Vec<i64> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Watermark(w) => Some(w.0),
            _ => None,
        })
        .collect()
}

fn start(cell: &mut Cell<&'static str>) {
    cell.start_context().unwrap();
}

#[test]
fn smoke() {
    // Processing time: no timestamps, watermarks and idleness ignored, no timers.
    let clock = ManualClock::new(100);
    let (mut cell, timers) = cell(SourceContextConfig::processing_time(), &clock);
    start(&mut cell);
    cell.collect("a").unwrap();
    cell.collect_with_timestamp("b", 7).unwrap();
    cell.emit_watermark::<&str>(Watermark(5)).unwrap();
    cell.mark_as_temporarily_idle::<&str>().unwrap();
    assert_eq!(
        take(&mut cell),
        vec![
            Emitted::Record(StreamRecord::new("a")),
            Emitted::Record(StreamRecord::new("b"))
        ]
    );
    assert_eq!(timers.pending(), 0);
}

#[test]
fn event_time_passes_the_sources_timestamps_and_watermarks() {
    let clock = ManualClock::new(0);
    let (mut cell, _timers) = cell(SourceContextConfig::event_time(), &clock);
    start(&mut cell);
    cell.collect_with_timestamp("a", 42).unwrap();
    cell.collect("untimed").unwrap();
    cell.emit_watermark::<&str>(Watermark(40)).unwrap();
    assert_eq!(
        take(&mut cell),
        vec![
            Emitted::Record(StreamRecord::with_timestamp("a", 42)),
            Emitted::Record(StreamRecord::new("untimed")),
            Emitted::Watermark(Watermark(40)),
        ]
    );
}

#[test]
fn an_idle_mark_lasts_until_the_next_emit() {
    let clock = ManualClock::new(0);
    let (mut cell, _timers) = cell(SourceContextConfig::event_time(), &clock);
    start(&mut cell);
    cell.mark_as_temporarily_idle::<&str>().unwrap();
    cell.mark_as_temporarily_idle::<&str>().unwrap(); // no second status change
    cell.collect_with_timestamp("a", 1).unwrap();
    assert_eq!(
        take(&mut cell),
        vec![
            Emitted::Status(StreamStatus::Idle),
            Emitted::Status(StreamStatus::Active),
            Emitted::Record(StreamRecord::with_timestamp("a", 1)),
        ]
    );
}

/// Flink's `StreamSourceOperatorWatermarksTest#testAutomaticWatermarkContext`: even starting
/// off the grid, automatic watermarks are multiples of the interval, one per interval.
#[test]
fn ingestion_time_emits_watermarks_aligned_to_the_interval() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::ingestion_time(Duration::from_millis(10)).unwrap();
    let (mut cell, timers) = cell(config, &clock);
    start(&mut cell);
    for _ in 1..100 {
        clock.advance(1);
        fire_due(&mut cell, &timers);
    }
    assert_eq!(
        watermarks(&take(&mut cell)),
        vec![10, 20, 30, 40, 50, 60, 70, 80, 90]
    );
}

#[test]
fn ingestion_time_stamps_records_and_emits_a_due_watermark_on_collect() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::ingestion_time(Duration::from_millis(10)).unwrap();
    let (mut cell, _timers) = cell(config, &clock);
    start(&mut cell);
    clock.set(15);
    cell.collect_with_timestamp("a", 999).unwrap(); // the source's timestamp is replaced
    clock.set(17);
    cell.collect("b").unwrap(); // 17 is before the next watermark time (20)
    clock.set(23);
    cell.collect("c").unwrap();
    assert_eq!(
        take(&mut cell),
        vec![
            Emitted::Record(StreamRecord::with_timestamp("a", 15)),
            Emitted::Watermark(Watermark(10)),
            Emitted::Record(StreamRecord::with_timestamp("b", 17)),
            Emitted::Record(StreamRecord::with_timestamp("c", 23)),
            Emitted::Watermark(Watermark(20)),
        ]
    );
}

#[test]
fn ingestion_time_lets_only_the_max_watermark_through_and_then_stops() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::ingestion_time(Duration::from_millis(10)).unwrap();
    let (mut cell, timers) = cell(config, &clock);
    start(&mut cell);
    cell.emit_watermark::<&str>(Watermark(5)).unwrap();
    cell.emit_watermark::<&str>(Watermark::MAX).unwrap();
    cell.emit_watermark::<&str>(Watermark::MAX).unwrap(); // only once
    assert_eq!(timers.pending(), 0, "the watermark timer is cancelled");
    for _ in 0..50 {
        clock.advance(1);
        fire_due(&mut cell, &timers);
    }
    assert_eq!(take(&mut cell), vec![Emitted::Watermark(Watermark::MAX)]);
}

/// Idleness detection as `StreamSourceContextIdleDetectionTests`: a check `timeout` after the
/// last activity marks the stream idle if nothing was emitted meanwhile.
#[test]
fn a_source_silent_for_the_idle_timeout_becomes_idle() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::event_time()
        .with_idle_timeout(Duration::from_millis(10))
        .unwrap();
    let (mut cell, timers) = cell(config, &clock);
    start(&mut cell);
    clock.set(11);
    fire_due(&mut cell, &timers); // the first check: nothing emitted since the start
    assert_eq!(take(&mut cell), vec![Emitted::Status(StreamStatus::Idle)]);

    clock.set(12);
    cell.collect_with_timestamp("a", 1).unwrap(); // active again; next check at 22
    clock.set(15);
    cell.collect_with_timestamp("b", 2).unwrap();
    clock.set(23);
    fire_due(&mut cell, &timers); // activity since: re-scheduled for 33
    clock.set(30);
    fire_due(&mut cell, &timers);
    assert_eq!(
        take(&mut cell),
        vec![
            Emitted::Status(StreamStatus::Active),
            Emitted::Record(StreamRecord::with_timestamp("a", 1)),
            Emitted::Record(StreamRecord::with_timestamp("b", 2)),
        ]
    );
    clock.set(34);
    fire_due(&mut cell, &timers);
    assert_eq!(take(&mut cell), vec![Emitted::Status(StreamStatus::Idle)]);
}

#[test]
fn ingestion_time_detects_idleness_on_the_watermark_timer() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::ingestion_time(Duration::from_millis(10))
        .unwrap()
        .with_idle_timeout(Duration::from_millis(25))
        .unwrap();
    let (mut cell, timers) = cell(config, &clock);
    start(&mut cell);
    clock.set(1);
    cell.collect("a").unwrap();
    let mut seen = Vec::new();
    for _ in 0..40 {
        clock.advance(1);
        fire_due(&mut cell, &timers);
        seen.extend(take(&mut cell));
    }
    let statuses: Vec<_> = seen
        .iter()
        .filter(|e| matches!(e, Emitted::Status(_)))
        .collect();
    assert_eq!(statuses, vec![&Emitted::Status(StreamStatus::Idle)]);
    // While idle, no automatic watermark is emitted.
    let idle_at = seen
        .iter()
        .position(|e| matches!(e, Emitted::Status(StreamStatus::Idle)))
        .unwrap();
    assert!(watermarks(&seen[idle_at..]).is_empty());
}

#[test]
fn closing_the_context_cancels_its_timers() {
    let clock = ManualClock::new(0);
    let config = SourceContextConfig::ingestion_time(Duration::from_millis(10))
        .unwrap()
        .with_idle_timeout(Duration::from_millis(10))
        .unwrap();
    let (mut cell, timers) = cell(config, &clock);
    start(&mut cell);
    assert_eq!(timers.pending(), 2);
    cell.close_context();
    assert_eq!(timers.pending(), 0);
    clock.set(100);
    fire_due(&mut cell, &timers);
    assert!(take(&mut cell).is_empty());
}

#[test]
fn the_end_of_a_finite_source_is_the_max_watermark_then_end_of_input() {
    let clock = ManualClock::new(0);
    let (mut cell, _timers) = cell(SourceContextConfig::processing_time(), &clock);
    cell.finish_input::<&str>().unwrap();
    assert_eq!(
        take(&mut cell),
        vec![Emitted::Watermark(Watermark::MAX), Emitted::EndOfInput]
    );
}

#[test]
fn a_guard_holds_the_lock_across_state_updates_and_emits() {
    let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
    let cell = SourceCell::new(
        0u64,
        Emission::new(SourceContextConfig::processing_time(), timers),
        Vec::<Emitted<u64>>::new(),
    );
    let lock = CheckpointLock::new(cell, Fairness::Eventual);
    let token = CancellationToken::new();
    let mut ctx = SourceContext::new(&lock, &token);
    {
        let mut locked = ctx.lock();
        let n = *locked.state();
        locked.collect(n).unwrap();
        *locked.state_mut() = n + 1;
        assert!(lock.try_lock().is_none(), "held for the whole section");
    }
    assert!(lock.try_lock().is_some());
    ctx.collect(10).unwrap();
    let cell = lock.into_inner();
    assert_eq!(*cell.state(), 1);
    assert_eq!(common::values(cell.output()), vec![0, 10]);
}

/// A bounded handoff: the backend of a source whose records another thread drains.
struct Handoff {
    items: VecDeque<u32>,
    capacity: usize,
    ended: bool,
}

impl Output<u32> for Handoff {
    fn collect(&mut self, record: StreamRecord<u32>) -> Result<(), OperatorError> {
        assert!(
            self.items.len() < self.capacity,
            "the context waits for room"
        );
        self.items.push_back(record.value);
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl SourceOutput<u32> for Handoff {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        self.ended = true;
        Ok(())
    }
    fn has_capacity(&self) -> bool {
        self.items.len() < self.capacity
    }
}

struct Upto(u32);

impl SourceFunction for Upto {
    type Out = u32;
    type State = u32;
    fn run(&mut self, ctx: &mut SourceContext<'_, u32, u32>) -> Result<(), OperatorError> {
        loop {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.0 {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
    }
}

fn handoff_lock(capacity: usize) -> Arc<CheckpointLock<SourceCell<u32, Handoff>>> {
    let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
    let handoff = Handoff {
        items: VecDeque::new(),
        capacity,
        ended: false,
    };
    let cell = SourceCell::new(
        0,
        Emission::new(SourceContextConfig::processing_time(), timers),
        handoff,
    );
    Arc::new(CheckpointLock::new(cell, Fairness::Eventual))
}

#[test]
fn a_full_backend_makes_the_source_wait_with_the_lock_released() {
    let lock = handoff_lock(2);
    let token = CancellationToken::new();
    let source = {
        let (lock, token) = (Arc::clone(&lock), token.clone());
        thread::spawn(move || run_source(&mut Upto(50), &lock, &token))
    };
    let mut drained = Vec::new();
    loop {
        let mut cell = lock.lock();
        cell.wait_until(|c| !c.output().items.is_empty() || c.output().ended);
        drained.extend(cell.output_mut().items.drain(..));
        let ended = cell.output().ended;
        drop(cell);
        lock.notify_all(); // room was freed
        if ended {
            break;
        }
    }
    assert_eq!(source.join().unwrap().unwrap(), SourceEnd::Finished);
    assert_eq!(drained, (0..50).collect::<Vec<_>>());
}

#[test]
fn cancellation_reaches_a_source_waiting_for_room() {
    let lock = handoff_lock(1);
    let token = CancellationToken::new();
    let source = {
        let (lock, token) = (Arc::clone(&lock), token.clone());
        thread::spawn(move || run_source(&mut Upto(u32::MAX), &lock, &token))
    };
    // Wait until the source filled the handoff and blocks waiting for room.
    {
        let mut cell = lock.lock();
        cell.wait_until_for(common::HANG_GUARD, |c| !c.output().items.is_empty());
    }
    token.cancel();
    assert_eq!(source.join().unwrap().unwrap(), SourceEnd::Cancelled);
    let cell = lock.lock();
    assert!(
        !cell.output().ended,
        "a cancelled source does not end its output"
    );
    assert_eq!(*cell.state(), 1);
}
