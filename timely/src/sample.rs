//! The sample job: the same job for the local executor and for timely, so their output can be
//! compared (the tests, the `streamtask-timely-worker` binary and the CLI's timely path use it).
//!
//! Input: text files of `key,value,event_time` lines. The job parses each line, drops values
//! divisible by 7, keys by `key`, and per key (a [`KeyedProcessFunction`] with keyed state and
//! event-time timers) writes `rec,<key>,<value>` per record and `win,<key>,<end>,<sum>` when the
//! watermark closes a 100 ms window.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use streamtask::{JobError, JobGraph, Model, StreamEnvironment};
use streamtask_core::OperatorError;
use streamtask_core::function::KeyedProcessFunction;
use streamtask_core::function::TimeDomain;
use streamtask_core::operator::{
    BoxOperator, Chain, Filter, KeyedContext, KeyedProcessOperator, Map,
};

use crate::{LineFiles, SplitReader, SplitSource, TimelyConfig, TimelyJob, run};

/// A parsed input line: key, value, event time.
pub type Event = (String, u64, i64);

/// The watermark's bound on out-of-orderness, in ms.
pub const OUT_OF_ORDERNESS_MS: i64 = 1_000;

/// The window length, in ms.
const WINDOW_MS: i64 = 100;

/// Parses `key,value,event_time`; a malformed line becomes key `?` with value 0.
pub fn parse(line: &str) -> Event {
    let mut parts = line.split(',');
    let key = parts.next().unwrap_or("?").to_string();
    let value = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let ts = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    (key, value, ts)
}

/// Sums each key's values per 100 ms event-time window; writes every record and every window.
#[derive(Debug, Default)]
pub struct WindowTotals;

impl KeyedProcessFunction for WindowTotals {
    type Key = String;
    type In = Event;
    type Out = String;
    type State = BTreeMap<i64, u64>;

    fn process_element(
        &mut self,
        (key, value, ts): Event,
        ctx: &mut KeyedContext<'_, '_, String, BTreeMap<i64, u64>, String>,
    ) -> Result<(), OperatorError> {
        let end = ts - ts.rem_euclid(WINDOW_MS) + WINDOW_MS - 1;
        *ctx.state().entry(end).or_default() += value;
        ctx.register_event_timer(end);
        ctx.collect(format!("rec,{key},{value}"))
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, String, BTreeMap<i64, u64>, String>,
    ) -> Result<(), OperatorError> {
        let key = ctx.key().clone();
        if let Some(sum) = ctx.state().remove(&timestamp) {
            ctx.collect(format!("win,{key},{timestamp},{sum}"))?;
        }
        Ok(())
    }
}

/// Writes `files` input files of `lines` lines each into `dir`: line `i` of every file has
/// event time `10 * i`, so the files advance in step.
///
/// # Errors
///
/// Whatever writing the files fails with.
pub fn write_input(dir: &Path, files: usize, lines: usize) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut paths = Vec::new();
    for f in 0..files {
        let path = dir.join(format!("input-{f}.csv"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for i in 0..lines {
            let key = (i * 7 + f * 3) % 13;
            writeln!(out, "k{key},{},{}", (i * 31 + f) % 50, 10 * i)?;
        }
        out.flush()?;
        paths.push(path);
    }
    Ok(paths)
}

fn keep(e: &Event) -> bool {
    !e.1.is_multiple_of(7)
}

/// What the sample job must commit for `lines`, computed from the data without any runtime
/// (assuming no record is later than the watermark, as [`write_input`]'s data guarantees).
pub fn expected_output(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut windows: BTreeMap<(String, i64), u64> = BTreeMap::new();
    for event in lines.iter().map(|l| parse(l)).filter(keep) {
        let (key, value, ts) = event;
        out.push(format!("rec,{key},{value}"));
        let end = ts - ts.rem_euclid(WINDOW_MS) + WINDOW_MS - 1;
        *windows.entry((key, end)).or_default() += value;
    }
    out.extend(
        windows
            .into_iter()
            .map(|((key, end), sum)| format!("win,{key},{end},{sum}")),
    );
    out.sort();
    out
}

/// The sample job's source: the lines of `inputs`, one split per file, stamped with their
/// event time.
pub fn source(inputs: Vec<PathBuf>) -> LineFiles {
    LineFiles::new(inputs, |line| parse(line).2)
}

/// The sample job for [`run`], committing into `out_dir`.
pub fn timely_job(inputs: Vec<PathBuf>, out_dir: &Path) -> TimelyJob<String, Event> {
    TimelyJob::new(
        "lines",
        source(inputs),
        OUT_OF_ORDERNESS_MS,
        || -> BoxOperator<String, Event> {
            Box::new(Chain::new(
                Map::new("parse", |line: String| parse(&line)),
                Filter::new("keep", keep),
            ))
        },
        |e: &Event| e.0.clone(),
        "totals",
        || -> BoxOperator<Event, String> {
            Box::new(KeyedProcessOperator::new(
                "totals",
                |e: &Event| e.0.clone(),
                WindowTotals,
            ))
        },
        out_dir,
        |line: &String| line.clone(),
    )
}

/// The lines of `inputs` in the order the timely source reads them with one worker: round
/// robin, a line of each file in turn.
///
/// # Errors
///
/// Whatever reading a file fails with.
pub fn read_round_robin(inputs: &[PathBuf]) -> std::io::Result<Vec<String>> {
    let mut files = Vec::new();
    for path in inputs {
        let text = std::fs::read_to_string(path)?;
        files.push(text.lines().map(str::to_string).collect::<Vec<_>>());
    }
    let longest = files.iter().map(Vec::len).max().unwrap_or(0);
    Ok((0..longest)
        .flat_map(|i| files.iter().filter_map(move |f| f.get(i).cloned()))
        .collect())
}

/// The same job for the local executor under `model`, every vertex at `parallelism`,
/// committing into `out_dir`: its source is a [`SplitReader`] over the same files, its
/// operators and their names (so their operator ids) are the timely job's, so savepoints move
/// between the two (see [`savepoint_shape`](crate::savepoint_shape)).
///
/// # Errors
///
/// Building the job.
pub fn local_job(
    model: Model,
    inputs: Vec<PathBuf>,
    parallelism: usize,
    out_dir: &Path,
) -> Result<JobGraph, JobError> {
    local_job_reading(model, Arc::new(source(inputs)), parallelism, out_dir)
}

/// [`local_job`] reading `source` (lines as [`source`] reads them; a test wraps it to stop
/// the job at a given record).
///
/// # Errors
///
/// Building the job.
pub fn local_job_reading(
    model: Model,
    source: Arc<dyn SplitSource<Out = String>>,
    parallelism: usize,
    out_dir: &Path,
) -> Result<JobGraph, JobError> {
    let env = StreamEnvironment::new(model);
    let identity = source.identity().unwrap_or_default();
    env.add_reader_parallel("lines", parallelism, move |subtask| {
        SplitReader::new(
            Arc::clone(&source),
            "lines",
            OUT_OF_ORDERNESS_MS,
            subtask,
            parallelism,
        )
    })
    .source_identity(identity)
    .map("parse", |line: String| parse(&line))
    .filter("keep", keep)
    .key_by(|e: &Event| e.0.clone())
    .process("totals", parallelism, |_| WindowTotals)
    .two_phase_file_sink("totals sink", out_dir, |line: &String| line.clone());
    env.build()
}

/// The worker program of a multi-process run of the sample job: `args` are
/// `--inputs DIR --out DIR --checkpoints DIR [--workers W] [--process I --hostfile FILE]
/// [--interval-ms N] [--max-epoch-records N] [--from-savepoint DIR]
/// [--stop-with-savepoint EPOCH --savepoint-dir DIR]`, the same on every process but
/// `--process` (see [`TimelyConfig::from_savepoint`] and
/// [`TimelyConfig::stop_with_savepoint`]; process 0 writes the savepoint).
/// Exit status 0 when the run committed everything, 1 on a failure (the next run restores the
/// last complete checkpoint), 2 on bad arguments.
pub fn worker_main(args: Vec<String>) -> ExitCode {
    match parse_args(args) {
        Ok((inputs, out, config)) => match run(timely_job(inputs, &out), &config) {
            Ok(summary) => {
                println!(
                    "read {} records, last checkpoint {:?}, restored from {:?}",
                    summary.records_read, summary.last_checkpoint, summary.restored_from
                );
                if let Some(savepoint) = summary.savepoint {
                    println!("savepoint written to {}", savepoint.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("timely worker: {e}");
                ExitCode::from(1)
            }
        },
        Err(message) => {
            eprintln!("timely worker: {message}");
            ExitCode::from(2)
        }
    }
}

fn parse_args(args: Vec<String>) -> Result<(Vec<PathBuf>, PathBuf, TimelyConfig), String> {
    let value = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let need = |v: Option<String>, name: &str| v.ok_or(format!("give {name}"));
    let number = |v: Option<String>, name: &str, default: u64| -> Result<u64, String> {
        v.map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| format!("{name} takes a number, not {s:?}"))
        })
    };
    let input_dir = PathBuf::from(need(value("--inputs"), "--inputs DIR")?);
    let out = PathBuf::from(need(value("--out"), "--out DIR")?);
    let checkpoints = PathBuf::from(need(value("--checkpoints"), "--checkpoints DIR")?);
    let workers = number(value("--workers"), "--workers", 1)? as usize;
    let process = number(value("--process"), "--process", 0)? as usize;
    let interval = number(value("--interval-ms"), "--interval-ms", 20)?;
    let max_epoch = number(value("--max-epoch-records"), "--max-epoch-records", 10_000)?;
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&input_dir)
        .map_err(|e| format!("read --inputs {}: {e}", input_dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    inputs.sort();
    let mut config = TimelyConfig::new(checkpoints)
        .workers(workers)
        .checkpoint_interval(Duration::from_millis(interval))
        .max_epoch_records(max_epoch);
    if let Some(savepoint) = value("--from-savepoint") {
        config = config.from_savepoint(savepoint);
    }
    if let Some(epoch) = value("--stop-with-savepoint") {
        let epoch = number(Some(epoch), "--stop-with-savepoint", 0)?;
        let dir = need(value("--savepoint-dir"), "--savepoint-dir DIR")?;
        config = config.stop_with_savepoint(epoch, dir);
    }
    if let Some(hostfile) = value("--hostfile") {
        let addresses = crate::read_hostfile(Path::new(&hostfile))
            .map_err(|e| format!("read --hostfile {hostfile}: {e}"))?;
        if process >= addresses.len() {
            return Err(format!(
                "--process {process} is not in the hostfile's {} addresses",
                addresses.len()
            ));
        }
        config = config.cluster(process, addresses);
    }
    Ok((inputs, out, config))
}
