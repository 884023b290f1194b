//! A small job for the savepoint and rescale tests: a counting source that stops for a
//! savepoint at an exact position, keyed running totals, an exactly-once file sink.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::task::Waker;

use streamtask::prelude::*;
use streamtask::{JobError, JobResult, SavepointHandle};
use streamtask_core::state::{decode, encode};

pub const RECORDS: u64 = 3_000;
pub const KEYS: u64 = 37;

/// Emits `(key, value)` for value `0..RECORDS`; at `pause_at` it asks for the savepoint and
/// waits (it is never woken again: the job stops around it).
pub struct Numbers {
    pub next: u64,
    pub pause_at: Option<u64>,
    pub handle: SavepointHandle,
    pub paused: bool,
}

impl SourceReader<(u64, u64)> for Numbers {
    fn name(&self) -> &str {
        "numbers"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("numbers", e))?;
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, (u64, u64)>,
    ) -> Result<InputStatus, OperatorError> {
        if self.pause_at == Some(self.next) {
            if !self.paused {
                self.paused = true;
                self.handle.stop_with_savepoint();
            }
            return Ok(InputStatus::NothingAvailable);
        }
        if self.next == RECORDS {
            return Ok(InputStatus::EndOfInput);
        }
        let n = self.next;
        output.collect((n % KEYS, n))?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        if !self.paused {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }
}

/// The running total per key; emits `key,value,total` for every record.
pub struct RunningTotal;

impl KeyedProcessFunction for RunningTotal {
    type Key = u64;
    type In = (u64, u64);
    type Out = String;
    type State = u64;

    fn process_element(
        &mut self,
        (key, value): (u64, u64),
        ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
    ) -> Result<(), OperatorError> {
        *ctx.state() += value;
        let total = *ctx.state();
        ctx.collect(format!("{key},{value},{total}"))
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        _domain: TimeDomain,
        _ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }
}

pub fn reference() -> Vec<String> {
    let mut totals = vec![0u64; KEYS as usize];
    let mut out: Vec<String> = (0..RECORDS)
        .map(|n| {
            let key = n % KEYS;
            totals[key as usize] += n;
            format!("{key},{n},{}", totals[key as usize])
        })
        .collect();
    out.sort_unstable();
    out
}

impl Numbers {
    /// A source from the start that pauses at `pause_at` and pulls `handle` there.
    pub fn new(pause_at: Option<u64>, handle: SavepointHandle) -> Self {
        Numbers {
            next: 0,
            pause_at,
            handle,
            paused: false,
        }
    }
}

/// The committed output in `work/output`, sorted.
pub fn committed(work: &Path) -> Vec<String> {
    let mut lines = streamtask::sink::read_committed(work.join("output")).unwrap();
    lines.sort_unstable();
    lines
}

/// Builds the job: `numbers` -> key_by -> `totals` (`parallelism`) -> `sink` into
/// `work/output`; `totals` gets the uid `totals_uid` when given.
pub fn build(
    model: Model,
    work: &Path,
    parallelism: usize,
    pause_at: Option<u64>,
    handle: &SavepointHandle,
    totals_name: &str,
    totals_uid: Option<&str>,
) -> Result<JobGraph, JobError> {
    let source_handle = handle.clone();
    let env = StreamEnvironment::new(model);
    let totals = env
        .add_reader("numbers", move |_| {
            Numbers::new(pause_at, source_handle.clone())
        })
        .key_by(|(k, _): &(u64, u64)| *k)
        .process(totals_name, parallelism, |_| RunningTotal);
    let totals = match totals_uid {
        Some(uid) => totals.uid(uid),
        None => totals,
    };
    totals.two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    env.build()
}

/// A config checkpointing every 20 ms that stops with a savepoint into `work/savepoints` when
/// `handle` is pulled.
pub fn config(work: &Path, restore: Restore, handle: &SavepointHandle) -> JobConfig {
    JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(
            std::time::Duration::from_millis(20),
        )))
        .with_restore(restore)
        .with_stop_with_savepoint(
            StopWithSavepoint::new(work.join("savepoints")).with_handle(handle.clone()),
        )
}

/// Builds and runs the job (see [`build`] and [`config`]).
pub fn run(
    model: Model,
    work: &Path,
    parallelism: usize,
    pause_at: Option<u64>,
    restore: Restore,
) -> Result<JobResult, JobError> {
    let handle = SavepointHandle::new();
    let job = build(model, work, parallelism, pause_at, &handle, "totals", None)?;
    job.run(&config(work, restore, &handle))
}
