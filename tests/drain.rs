//! Stop-with-savepoint with and without drain, the same under every model, for a new-style
//! reader and a legacy `SourceFunction` alike.
//!
//! The job: numbers `0..END` with timestamp `n` and a watermark after the last record of each
//! window of `W` -> `key_by(n % KEYS)` -> a tumbling event-time window per key (a keyed
//! function with one event-time timer per window, which emits the window's sum and clears it)
//! -> an operator that passes the windows on and emits how many it saw only in `finish`
//! (`CountAtFinish`, a count-all) -> a collecting sink. The source asks for the stop when it reaches `STOP_AT` (inside a
//! window) and emits nothing more, so the savepoint's position is `STOP_AT` whatever the
//! timing.
//!
//! - Without drain the windows that closed before the stop are committed, and no count (its
//!   `finish` does not run); the open window's partial sums and the counts are in the
//!   savepoint, and its restore finishes the job: both parts together are exactly the
//!   uninterrupted run's output.
//! - With drain the open window fires at the stop (`Watermark::MAX`) and `finish` runs: the
//!   committed output holds that window too, summed over the records before the stop, and the
//!   counts of every window before the stop. The restore of the drained
//!   savepoint starts after end of input: its source (bounded here, with records left) emits
//!   nothing, no window fires again, `finish` does not run again, and the job ends at once.
//!
//! Each run goes on a thread of its own with a hang guard (`common/bounded_run.rs`); nothing
//! is timed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::task::Waker;
use std::thread;
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::{JobError, JobResult, Restore, SavepointHandle, sink::CollectHandle};
use streamtask_core::state::{decode, encode};

#[path = "common/bounded_run.rs"]
mod bounded_run;

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
/// The window length (event time).
const W: u64 = 100;
/// Where the source asks for the stop: inside a window.
const STOP_AT: u64 = 250;
/// The end of the bounded input: the last window is cut short and fires at end of input.
const END: u64 = 520;
const KEYS: u64 = 3;
/// The windows' parallelism, and so the number of counts a finished run emits.
const PARALLELISM: usize = 2;
/// The key of a count's output, `(COUNTED, subtask, windows seen)`: no window has it.
const COUNTED: u64 = u64::MAX;
/// Hang guard for a run; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A window's output: `(key, window end, sum)`.
type Fired = (u64, i64, u64);

/// The source's flavour.
#[derive(Debug, Clone, Copy)]
enum Flavour {
    /// A new-style reader (`add_reader`).
    Reader,
    /// A legacy `SourceFunction` (`add_source`).
    Legacy,
}

/// The last timestamp of `n`'s window.
fn window_end(n: u64) -> i64 {
    i64::try_from((n / W + 1) * W - 1).unwrap()
}

/// What the windows emit for the records `records`, fired at end of input: sorted.
fn windows(records: std::ops::Range<u64>) -> Vec<Fired> {
    let mut sums: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for n in records {
        *sums.entry((n % KEYS, window_end(n))).or_default() += n;
    }
    sums.into_iter()
        .map(|((k, end), sum)| (k, end, sum))
        .collect()
}

/// A reader over `0..END`; with `stop`, it asks for the stop at `STOP_AT` and waits there.
struct Numbers {
    next: u64,
    stop: Option<SavepointHandle>,
}

impl Numbers {
    fn waits(&self) -> bool {
        self.stop.is_some() && self.next == STOP_AT
    }
}

impl SourceReader<u64> for Numbers {
    fn name(&self) -> &str {
        "numbers"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("numbers", e))?;
        }
        Ok(())
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == END {
            return Ok(InputStatus::EndOfInput);
        }
        if self.waits() {
            if let Some(stop) = &self.stop {
                stop.stop_with_savepoint();
            }
            return Ok(InputStatus::NothingAvailable);
        }
        let n = self.next;
        out.collect_with_timestamp(n, i64::try_from(n).unwrap())?;
        self.next += 1;
        if self.next.is_multiple_of(W) {
            out.emit_watermark(Watermark(i64::try_from(n).unwrap()))?;
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        // At the stop the source waits to be stopped: never woken.
        if !self.waits() {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }
}

/// The same numbers from a legacy source: one locked section per record, its position in the
/// lock's state; with `stop`, it asks for the stop at `STOP_AT` and emits nothing more.
struct LegacyNumbers {
    stop: Option<SavepointHandle>,
}

impl SourceFunction for LegacyNumbers {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "numbers"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == END {
                return Ok(());
            }
            if n == STOP_AT
                && let Some(stop) = &self.stop
            {
                // Waits to be stopped: the savepoint's barrier, then the cancel after it.
                stop.stop_with_savepoint();
                drop(locked);
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            locked.collect_with_timestamp(n, i64::try_from(n).unwrap())?;
            *locked.state_mut() = n + 1;
            if (n + 1).is_multiple_of(W) {
                locked.emit_watermark(Watermark(i64::try_from(n).unwrap()))?;
            }
        }
        Ok(())
    }
}

/// A tumbling event-time window per key: sums its records; its timer at the window's end
/// emits the sum and clears it.
struct Windows;

impl KeyedProcessFunction for Windows {
    type Key = u64;
    type In = u64;
    type Out = Fired;
    type State = u64;

    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut KeyedContext<'_, '_, u64, u64, Fired>,
    ) -> Result<(), OperatorError> {
        *ctx.state() += value;
        ctx.register_event_timer(window_end(value));
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, u64, Fired>,
    ) -> Result<(), OperatorError> {
        let out = (*ctx.key(), timestamp, *ctx.state());
        ctx.clear_state();
        ctx.collect(out)
    }
}

/// Passes the windows on and counts them (the count is its state); emits the count only in
/// `finish`, as a count-all or a batch's flush does.
struct CountAtFinish {
    subtask: usize,
    count: u64,
}

impl Operator for CountAtFinish {
    type In = Fired;
    type Out = Fired;

    fn name(&self) -> &str {
        "count"
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.count = decode(bytes).map_err(|e| OperatorError::state("count", e))?;
        }
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<Fired>,
        ctx: &mut Context<'_, Fired>,
    ) -> Result<(), OperatorError> {
        self.count += 1;
        ctx.collect(record)
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        encode(&self.count)
            .map(Some)
            .map_err(|e| OperatorError::state("count", e))
    }

    fn finish(&mut self, ctx: &mut Context<'_, Fired>) -> Result<(), OperatorError> {
        let subtask = i64::try_from(self.subtask).unwrap();
        ctx.collect(StreamRecord::new((COUNTED, subtask, self.count)))
    }
}

/// Splits committed output into the windows and the counts.
fn split(output: &[Fired]) -> (Vec<Fired>, Vec<Fired>) {
    output.iter().partition(|&&(key, _, _)| key != COUNTED)
}

/// `output` is `windows` plus one count per subtask, which together counted every window.
fn assert_counted(output: &[Fired], windows: &[Fired], what: &str) {
    let (fired, counts) = split(output);
    assert_eq!(fired, windows, "{what}: the windows");
    assert_eq!(
        counts.len(),
        PARALLELISM,
        "{what}: one count per subtask: {counts:?}"
    );
    assert_eq!(
        counts.iter().map(|&(_, _, n)| n).sum::<u64>(),
        u64::try_from(windows.len()).unwrap(),
        "{what}: the counts emitted at finish: {counts:?}"
    );
}

/// How a run of the job goes.
struct Run {
    model: Model,
    flavour: Flavour,
    /// Stop with a savepoint at `STOP_AT`, draining or not.
    stop: Option<bool>,
    restore: Option<PathBuf>,
}

/// The job as `run` says, in `dir`, into the sink behind `out` (shared by a run and its
/// restore, as an external system is: a restore commits the savepoint's pre-committed
/// transactions again, idempotently); returns what `out` holds committed (sorted) and the
/// result.
fn run(
    dir: &Path,
    out: &CollectHandle<Fired>,
    run: Run,
) -> (Vec<Fired>, Result<JobResult, JobError>) {
    let handle = run.stop.map(|_| SavepointHandle::new());
    let mut config = JobConfig::new(dir)
        .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(5))))
        .with_restart(RestartStrategy::NONE);
    if let (Some(drain), Some(handle)) = (run.stop, &handle) {
        config = config.with_stop_with_savepoint(
            StopWithSavepoint::new(dir.join("savepoints"))
                .with_handle(handle.clone())
                .with_drain(drain),
        );
    }
    if let Some(path) = run.restore {
        config = config.with_restore(Restore::Savepoint(path));
    }
    let sink = out.clone();
    let flavour = run.flavour;
    let result = bounded_run::run_bounded(run.model, config, HANG_GUARD, move |env| {
        let numbers = match flavour {
            Flavour::Reader => env.add_reader("numbers", move |_| Numbers {
                next: 0,
                stop: handle.clone(),
            }),
            Flavour::Legacy => env.add_source("numbers", move |_| LegacyNumbers {
                stop: handle.clone(),
            }),
        };
        numbers
            .key_by(|n: &u64| n % KEYS)
            .process("windows", PARALLELISM, |_| Windows)
            .operator(|subtask| CountAtFinish { subtask, count: 0 })
            .collect_sink("out", &sink);
    });
    let mut committed = out.committed();
    committed.sort_unstable();
    (committed, result)
}

/// Stops the job at `STOP_AT` (draining or not) under `model`: the committed output and the
/// savepoint.
fn stop(
    dir: &Path,
    out: &CollectHandle<Fired>,
    model: Model,
    flavour: Flavour,
    drain: bool,
) -> (Vec<Fired>, PathBuf) {
    let (output, result) = run(
        dir,
        out,
        Run {
            model,
            flavour,
            stop: Some(drain),
            restore: None,
        },
    );
    let result = result.unwrap_or_else(|e| panic!("{model:?} {flavour:?} drain={drain}: {e}"));
    let savepoint = result
        .savepoint
        .unwrap_or_else(|| panic!("{model:?} {flavour:?} drain={drain}: no savepoint"));
    (output, savepoint)
}

/// Restores `savepoint` under `model`: what `out` holds committed after the restored run.
fn resume(
    dir: &Path,
    out: &CollectHandle<Fired>,
    model: Model,
    flavour: Flavour,
    savepoint: PathBuf,
) -> Vec<Fired> {
    let (output, result) = run(
        dir,
        out,
        Run {
            model,
            flavour,
            stop: None,
            restore: Some(savepoint),
        },
    );
    let result = result.unwrap_or_else(|e| panic!("{model:?} {flavour:?} restored: {e}"));
    assert_eq!(
        result.savepoint, None,
        "{model:?} {flavour:?}: the restored run ends by itself"
    );
    output
}

/// The windows that closed before the stop: a watermark after each whole window read.
fn closed_before_stop() -> Vec<Fired> {
    let last_watermark = i64::try_from(STOP_AT / W * W).unwrap() - 1;
    windows(0..STOP_AT)
        .into_iter()
        .filter(|&(_, end, _)| end <= last_watermark)
        .collect()
}

/// The whole cycle under `model` with `flavour`: an uninterrupted run, a stop without drain
/// and its restore, a stop with drain and its restore.
fn drain_and_no_drain(model: Model, flavour: Flavour) {
    let what = format!("{model:?} {flavour:?}");
    let work = tempfile::tempdir().unwrap();
    let (whole, result) = run(
        &work.path().join("whole"),
        &CollectHandle::new(),
        Run {
            model,
            flavour,
            stop: None,
            restore: None,
        },
    );
    result.unwrap_or_else(|e| panic!("{what} uninterrupted: {e}"));
    assert_counted(&whole, &windows(0..END), &format!("{what} uninterrupted"));

    // Without drain: the open window stays in the savepoint, and the restore finishes it.
    let out = CollectHandle::new();
    let (first, savepoint) = stop(&work.path().join("no-drain"), &out, model, flavour, false);
    assert_eq!(
        first,
        closed_before_stop(),
        "{what}: no drain, before the stop: the closed windows, no count (no finish)"
    );
    let both = resume(
        &work.path().join("no-drain-restored"),
        &out,
        model,
        flavour,
        savepoint,
    );
    assert_eq!(both, whole, "{what}: no drain, both parts exactly once");

    // With drain: the open window fires at the stop, over the records before it.
    let out = CollectHandle::new();
    let (drained, savepoint) = stop(&work.path().join("drain"), &out, model, flavour, true);
    assert_counted(
        &drained,
        &windows(0..STOP_AT),
        &format!("{what}: drained output (finish ran at the drain)"),
    );
    let received = out.received().len();
    let fired_by_drain: Vec<Fired> = split(&drained)
        .0
        .iter()
        .filter(|w| !first.contains(w))
        .copied()
        .collect();
    assert!(
        !fired_by_drain.is_empty()
            && fired_by_drain
                .iter()
                .all(|&(_, end, _)| end == window_end(STOP_AT)),
        "{what}: the drain fired the open window, which the stop without drain did not: \
         {fired_by_drain:?}"
    );
    // The restore starts after end of input: the source has records left but emits none.
    let after = resume(
        &work.path().join("drain-restored"),
        &out,
        model,
        flavour,
        savepoint,
    );
    assert_eq!(
        after, drained,
        "{what}: a drained savepoint restores after end of input: no duplicates"
    );
    assert_eq!(
        out.received().len(),
        received,
        "{what}: nothing reached the sink after the restore"
    );
}

#[test]
fn smoke() {
    drain_and_no_drain(Model::Mailbox, Flavour::Reader);
}

#[test]
fn drain_and_no_drain_with_a_reader_under_every_model() {
    for model in MODELS {
        drain_and_no_drain(model, Flavour::Reader);
    }
}

#[test]
fn drain_and_no_drain_with_a_legacy_source_under_every_model() {
    for model in MODELS {
        drain_and_no_drain(model, Flavour::Legacy);
    }
}

#[test]
fn a_drained_savepoint_restores_after_end_of_input_under_another_model() {
    // Taken under each model, restored under the next: the marker is in the tasks' state,
    // which every model writes alike.
    for (i, model) in MODELS.into_iter().enumerate() {
        let next = MODELS[(i + 1) % MODELS.len()];
        let work = tempfile::tempdir().unwrap();
        let out = CollectHandle::new();
        let (drained, savepoint) = stop(
            &work.path().join("drain"),
            &out,
            model,
            Flavour::Reader,
            true,
        );
        assert_counted(
            &drained,
            &windows(0..STOP_AT),
            &format!("{model:?}: drained output"),
        );
        let received = out.received().len();
        let after = resume(
            &work.path().join("restored"),
            &out,
            next,
            Flavour::Reader,
            savepoint,
        );
        assert_eq!(after, drained, "{model:?} -> {next:?}: no duplicates");
        assert_eq!(
            out.received().len(),
            received,
            "{model:?} -> {next:?}: nothing after end of input"
        );
    }
}
