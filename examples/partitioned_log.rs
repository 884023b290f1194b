//! Porting a lock-based legacy source to a split source (MIGRATION.md, "Flink 2.0 removed
//! SourceFunction: porting to a split source"): a partitioned log on disk (one file per
//! partition, growing while jobs run, sealed by a `_sealed` marker), read
//!
//! - BEFORE by a legacy `SourceFunction`: one subtask loops over every partition, reads a line
//!   outside the checkpoint lock and emits it and moves the partition's offset under the lock;
//! - AFTER by its split-source port: a split is a partition with its byte offset, the
//!   enumerator assigns the partitions to the parallel readers when it starts and tells them
//!   when the log grew or was sealed, each reader reads one line per poll.
//!
//! Both run to the end with the same output; then the port runs while the log grows, stopped
//! with a savepoint at parallelism 2 (mailbox model), resumed from it at parallelism 3 (legacy
//! model) and stopped again, resumed at parallelism 1 (bridge model) once the log is sealed:
//! every record committed exactly once.
//!
//! ```sh
//! cargo run --example partitioned_log
//! ```

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streamtask::checkpoint::CheckpointConfig;
use streamtask::source::{
    Boundedness, EnumeratorContext, Source, SourceError, SourceSplit, SplitEnumerator, SplitOutput,
    SplitReader,
};
use streamtask::{JobConfig, Model, Restore, StopWithSavepoint, StreamEnvironment};
use streamtask_core::OperatorError;
use streamtask_core::state::{decode, encode};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::InputStatus;

const PARTITIONS: usize = 4;
const SEALED: &str = "_sealed";

fn partition_file(dir: &Path, partition: usize) -> PathBuf {
    dir.join(format!("partition-{partition}.log"))
}

/// Appends `n` records to every partition (record `i` of partition `p` reads `p<p>:<i>`).
fn append(dir: &Path, n: usize) -> std::io::Result<()> {
    for p in 0..PARTITIONS {
        let path = partition_file(dir, p);
        let have = std::fs::read_to_string(&path).map_or(0, |t| t.lines().count());
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        let text: String = (have..have + n).map(|i| format!("p{p}:{i}\n")).collect();
        file.write_all(text.as_bytes())?;
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> OperatorError {
    OperatorError::user("partitioned-log", format!("{}: {e}", path.display()))
}

/// The next whole line of `path` at byte `offset` (`None` at the end of what was written).
fn line_at(path: &Path, offset: u64) -> Result<Option<(String, u64)>, OperatorError> {
    let mut file = File::open(path).map_err(|e| io(path, e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io(path, e))?;
    let mut line = String::new();
    let read = BufReader::new(file)
        .read_line(&mut line)
        .map_err(|e| io(path, e))?;
    // A line still being written (no newline yet) is read once it is whole.
    if read == 0 || !line.ends_with('\n') {
        return Ok(None);
    }
    Ok(Some((line.trim_end().to_string(), offset + read as u64)))
}

// ---- BEFORE: the lock-based legacy source ------------------------------------------------------

/// Reads every partition; its state is each partition's byte offset.
struct LogSource {
    dir: PathBuf,
}

impl SourceFunction for LogSource {
    type Out = String;
    type State = BTreeMap<usize, u64>;

    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, String, BTreeMap<usize, u64>>,
    ) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let sealed = self.dir.join(SEALED).exists();
            let mut progressed = false;
            for p in 0..PARTITIONS {
                let offset = ctx.lock().state().get(&p).copied().unwrap_or(0);
                // I/O outside the lock; the emit and the offset in one locked section.
                if let Some((record, next)) = line_at(&partition_file(&self.dir, p), offset)? {
                    let mut locked = ctx.lock();
                    locked.collect(record)?;
                    locked.state_mut().insert(p, next);
                    progressed = true;
                }
            }
            if !progressed {
                if sealed {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
}

// ---- AFTER: the split source -------------------------------------------------------------------

/// A partition and the byte offset of its next record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PartitionSplit {
    partition: usize,
    offset: u64,
}

impl SourceSplit for PartitionSplit {
    fn split_id(&self) -> String {
        format!("partition-{}", self.partition)
    }
    fn encode(&self) -> Result<Vec<u8>, SourceError> {
        encode(self).map_err(SourceError::user)
    }
    fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
        decode(bytes).map_err(SourceError::user)
    }
}

struct LogFileSource {
    dir: PathBuf,
}

/// Assigns the partitions when it starts; checks the files on the executor's periodic call
/// and tells the readers when the log grew or was sealed (so they wait without polling).
struct LogEnumerator {
    dir: PathBuf,
    unassigned: Vec<PartitionSplit>,
    /// Readers that asked for more: ended once the log is sealed.
    asked: Vec<usize>,
    sizes: Vec<u64>,
    /// Whether the readers were told of the seal.
    told_sealed: bool,
    last_check: Option<Instant>,
}

impl LogEnumerator {
    fn assign(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        for split in std::mem::take(&mut self.unassigned) {
            let subtask = split.partition % ctx.parallelism();
            ctx.assign_split(subtask, split)?;
        }
        Ok(())
    }
}

impl SplitEnumerator for LogEnumerator {
    type Split = PartitionSplit;

    fn start(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        self.assign(ctx)
    }

    fn handle_split_request(
        &mut self,
        subtask: usize,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        // Every partition is assigned: a reader that asks is done once the log is sealed.
        if self.dir.join(SEALED).exists() {
            ctx.signal_no_more_splits(subtask)
        } else {
            self.asked.push(subtask);
            Ok(())
        }
    }

    fn add_splits_back(&mut self, splits: Vec<PartitionSplit>, _subtask: usize) {
        self.unassigned.extend(splits);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
        encode(&self.unassigned).map_err(SourceError::user)
    }

    fn discover(
        &mut self,
        ctx: &mut EnumeratorContext<'_, PartitionSplit>,
    ) -> Result<(), SourceError> {
        if self
            .last_check
            .is_some_and(|at| at.elapsed() < Duration::from_millis(2))
        {
            return Ok(());
        }
        self.last_check = Some(Instant::now());
        self.assign(ctx)?;
        let sizes: Vec<u64> = (0..PARTITIONS)
            .map(|p| std::fs::metadata(partition_file(&self.dir, p)).map_or(0, |m| m.len()))
            .collect();
        let sealed = self.dir.join(SEALED).exists();
        if sizes != self.sizes || (sealed && !self.told_sealed) {
            self.sizes = sizes;
            self.told_sealed = sealed;
            for subtask in 0..ctx.parallelism() {
                ctx.send_event(subtask, b"grown".to_vec())?;
            }
        }
        if sealed {
            for subtask in std::mem::take(&mut self.asked) {
                ctx.signal_no_more_splits(subtask)?;
            }
        }
        Ok(())
    }
}

/// Reads its partitions round robin, one line per poll; the offsets are the splits'.
struct LogReader {
    dir: PathBuf,
    splits: Vec<PartitionSplit>,
    next: usize,
}

impl SplitReader<String> for LogReader {
    type Split = PartitionSplit;

    fn add_splits(&mut self, splits: Vec<PartitionSplit>) {
        self.splits.extend(splits);
    }

    fn poll_next(
        &mut self,
        output: &mut SplitOutput<'_, '_, String>,
    ) -> Result<InputStatus, OperatorError> {
        let sealed = self.dir.join(SEALED).exists();
        for _ in 0..self.splits.len() {
            let i = self.next % self.splits.len();
            self.next = i + 1;
            let split = &mut self.splits[i];
            let path = partition_file(&self.dir, split.partition);
            if let Some((record, next)) = line_at(&path, split.offset)? {
                split.offset = next;
                output.collect(record)?;
                return Ok(InputStatus::MoreAvailable);
            }
            if sealed {
                let done = self.splits.remove(i);
                output.finish_split(done.split_id());
                return Ok(InputStatus::MoreAvailable);
            }
        }
        // Caught up: the enumerator's "grown" event wakes the reader.
        Ok(InputStatus::NothingAvailable)
    }

    fn snapshot_splits(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<PartitionSplit>, OperatorError> {
        Ok(self.splits.clone())
    }

    fn register_waker(&mut self, _waker: &std::task::Waker) {
        // Woken by the enumerator's events, not by the reader.
    }
}

impl Source for LogFileSource {
    type Output = String;
    type Split = PartitionSplit;
    type Enumerator = LogEnumerator;
    type Reader = LogReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::ContinuousUnbounded
    }

    fn create_enumerator(&self, _parallelism: usize) -> Result<LogEnumerator, SourceError> {
        let splits: Vec<PartitionSplit> = (0..PARTITIONS)
            .map(|partition| PartitionSplit {
                partition,
                offset: 0,
            })
            .collect();
        self.restore_enumerator(0, &encode(&splits).map_err(SourceError::user)?)
    }

    fn restore_enumerator(
        &self,
        _parallelism: usize,
        state: &[u8],
    ) -> Result<LogEnumerator, SourceError> {
        Ok(LogEnumerator {
            dir: self.dir.clone(),
            unassigned: decode(state).map_err(SourceError::user)?,
            asked: Vec::new(),
            sizes: Vec::new(),
            told_sealed: false,
            last_check: None,
        })
    }

    fn create_reader(&self, _subtask: usize, _parallelism: usize) -> LogReader {
        LogReader {
            dir: self.dir.clone(),
            splits: Vec::new(),
            next: 0,
        }
    }
}

// ---- running both ------------------------------------------------------------------------------

fn expected(dir: &Path) -> Vec<String> {
    let mut all: Vec<String> = (0..PARTITIONS)
        .flat_map(|p| {
            std::fs::read_to_string(partition_file(dir, p))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all
}

fn committed(output: &Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut lines = streamtask::sink::read_committed(output)?;
    lines.sort();
    Ok(lines)
}

fn config(work: &Path) -> JobConfig {
    JobConfig::new(work).with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(10))))
}

/// The port under `model` at `parallelism`, restored from `from`, stopping with a savepoint
/// after 2 checkpoints when `stop`; returns the savepoint.
fn run_port(
    model: Model,
    (input, work): (&Path, &Path),
    parallelism: usize,
    from: Option<PathBuf>,
    stop: bool,
) -> Result<Option<PathBuf>, Box<dyn std::error::Error>> {
    let env = StreamEnvironment::new(model);
    env.from_source(
        "log",
        LogFileSource {
            dir: input.to_path_buf(),
        },
        parallelism,
    )
    .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    let mut config = config(work);
    if let Some(path) = from {
        config = config.with_restore(Restore::Savepoint(path));
    }
    if stop {
        config = config.with_stop_with_savepoint(
            StopWithSavepoint::new(work.join("savepoints")).after_checkpoints(2),
        );
    }
    Ok(env.build()?.run(&config)?.savepoint)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Both, to the end of a sealed log.
    let input = tempfile::tempdir()?;
    append(input.path(), 500)?;
    std::fs::write(input.path().join(SEALED), "")?;
    let want = expected(input.path());
    let work = tempfile::tempdir()?;
    let env = StreamEnvironment::new(Model::Legacy);
    let dir = input.path().to_path_buf();
    env.add_source("log", move |_| LogSource { dir: dir.clone() })
        .two_phase_file_sink("sink", work.path().join("output"), |s: &String| s.clone());
    env.build()?.run(&config(work.path()))?;
    assert_eq!(
        committed(&work.path().join("output"))?,
        want,
        "the legacy source"
    );
    println!(
        "legacy SourceFunction (legacy model): {} records",
        want.len()
    );
    let work = tempfile::tempdir()?;
    run_port(Model::Mailbox, (input.path(), work.path()), 2, None, false)?;
    assert_eq!(committed(&work.path().join("output"))?, want, "the port");
    println!(
        "split source port (mailbox model, 2 readers): the same {} records",
        want.len()
    );

    // The port while the log grows: rescaled through savepoints, across models.
    let input = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    let dirs = (input.path(), work.path());
    append(input.path(), 300)?;
    let first = run_port(Model::Mailbox, dirs, 2, None, true)?.ok_or("no first savepoint")?;
    println!(
        "stopped with a savepoint at 2 readers (mailbox): {}",
        first.display()
    );
    append(input.path(), 300)?;
    let second =
        run_port(Model::Legacy, dirs, 3, Some(first), true)?.ok_or("no second savepoint")?;
    println!(
        "resumed at 3 readers (legacy), stopped again: {}",
        second.display()
    );
    append(input.path(), 300)?;
    std::fs::write(input.path().join(SEALED), "")?;
    run_port(Model::Bridge, dirs, 1, Some(second), false)?;
    let got = committed(&work.path().join("output"))?;
    assert_eq!(
        got,
        expected(input.path()),
        "exactly once across the rescales"
    );
    println!(
        "resumed at 1 reader (bridge) to the sealed end: {} records, each once",
        got.len()
    );
    Ok(())
}
