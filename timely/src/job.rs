//! What a timely run executes: a source of splits, a chain behind it, a keyed chain behind a
//! key-group exchange, and the two-phase file sink.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask::sink::TwoPhaseCommitFileSink;
use streamtask_core::OperatorError;
use streamtask_core::keygroup::{DEFAULT_MAX_PARALLELISM, StableKey, key_group_of};
use streamtask_core::operator::{BoxOperator, Chain};

/// The records of one split, each with its event time in ms.
pub type SplitRecords<T> = Box<dyn Iterator<Item = (T, i64)> + Send>;

/// A bounded, replayable source cut into splits: worker `w` of `n` reads the splits `s` with
/// `s % n == w`, and a restore reopens each split after the records it had read.
pub trait SplitSource: Send + Sync + 'static {
    /// What it reads.
    type Out;

    /// How many splits there are.
    fn splits(&self) -> usize;

    /// The records of `split` after the first `skip`, each with its event time (ms).
    ///
    /// # Errors
    ///
    /// Whatever keeps the split from being read (a missing file); the run fails with it.
    fn open(&self, split: usize, skip: u64) -> Result<SplitRecords<Self::Out>, OperatorError>;

    /// What it reads, as a savepoint records it (`DataStream::source_identity`): a restore
    /// of a savepoint whose source read other input is refused. `None` (the default): not
    /// checked.
    fn identity(&self) -> Option<String> {
        None
    }
}

/// Text files as a [`SplitSource`]: one split per file, one record per line, its event time
/// given by a function of the line.
pub struct LineFiles {
    files: Vec<PathBuf>,
    event_time: Arc<dyn Fn(&str) -> i64 + Send + Sync>,
}

impl LineFiles {
    /// The lines of `files`, stamped with `event_time(line)`.
    pub fn new(
        files: Vec<PathBuf>,
        event_time: impl Fn(&str) -> i64 + Send + Sync + 'static,
    ) -> Self {
        LineFiles {
            files,
            event_time: Arc::new(event_time),
        }
    }
}

impl fmt::Debug for LineFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineFiles")
            .field("files", &self.files)
            .finish()
    }
}

impl SplitSource for LineFiles {
    type Out = String;

    fn splits(&self) -> usize {
        self.files.len()
    }

    /// The files' names and sizes, in split order.
    fn identity(&self) -> Option<String> {
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| {
                let name = f
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                let len = std::fs::metadata(f).map_or(0, |m| m.len());
                format!("{name}:{len}")
            })
            .collect();
        Some(format!("line files {}", files.join(",")))
    }

    fn open(&self, split: usize, skip: u64) -> Result<SplitRecords<String>, OperatorError> {
        let path = &self.files[split];
        let text = std::fs::read_to_string(path)
            .map_err(|e| OperatorError::user(format!("source file {}", path.display()), e))?;
        let event_time = Arc::clone(&self.event_time);
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        Ok(Box::new(lines.into_iter().skip(skip as usize).map(
            move |line| {
                let ts = event_time(&line);
                (line, ts)
            },
        )))
    }
}

/// Makes an operator chain for worker `w`.
pub(crate) type Factory<I, O> = Arc<dyn Fn(usize) -> BoxOperator<I, O> + Send + Sync>;

/// A job for [`run`](crate::run): `source -> chain -> key_by -> keyed chain -> file sink`.
///
/// Every operator is a `streamtask_core` operator, run one call at a time on its worker's thread
/// as the mailbox model runs it, and snapshotted into the same [`TaskSnapshot`]s the local
/// executor writes: task `<source name>#<worker>` holds the split offsets and the chain's state,
/// task `<keyed name>#<worker>` the keyed chain's and the sink's.
///
/// [`TaskSnapshot`]: streamtask_core::state::TaskSnapshot
///
/// # Examples
///
/// See [`sample::timely_job`](crate::sample::timely_job).
pub struct TimelyJob<A, B> {
    pub(crate) source_name: String,
    pub(crate) source: Arc<dyn SplitSource<Out = A>>,
    pub(crate) out_of_orderness: i64,
    pub(crate) chain: Factory<A, B>,
    pub(crate) key_group: Arc<dyn Fn(&B) -> u32 + Send + Sync>,
    pub(crate) keyed_name: String,
    pub(crate) keyed: Factory<B, ()>,
    pub(crate) sink_dir: PathBuf,
}

impl<A, B> fmt::Debug for TimelyJob<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimelyJob")
            .field("source", &self.source_name)
            .field("keyed", &self.keyed_name)
            .field("sink_dir", &self.sink_dir)
            .finish_non_exhaustive()
    }
}

impl<A: 'static, B> TimelyJob<A, B>
where
    B: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// A job reading `source` (task name `source_name`) whose watermark trails the largest
    /// event time read by `out_of_orderness_ms` (Flink's bounded out-of-orderness), then running
    /// `chain()` on each worker; records are exchanged by the key group of `key` (max
    /// parallelism 128, the local executor's default) into `keyed()` (task name `keyed_name`),
    /// whose output `sink_format` writes through a [`TwoPhaseCommitFileSink`] into `sink_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn new<K, C>(
        source_name: &str,
        source: impl SplitSource<Out = A>,
        out_of_orderness_ms: i64,
        chain: impl Fn() -> BoxOperator<A, B> + Send + Sync + 'static,
        key: impl Fn(&B) -> K + Send + Sync + 'static,
        keyed_name: &str,
        keyed: impl Fn() -> BoxOperator<B, C> + Send + Sync + 'static,
        sink_dir: impl Into<PathBuf>,
        sink_format: impl Fn(&C) -> String + Clone + Send + Sync + 'static,
    ) -> Self
    where
        K: StableKey,
        C: 'static,
    {
        let sink_dir = sink_dir.into();
        let dir = sink_dir.clone();
        let sink_name = format!("{keyed_name} sink");
        // One keyed chain per worker, the sink chained behind it with the worker as its
        // subtask, so its transaction files never collide.
        let keyed: Factory<B, ()> = Arc::new(move |worker: usize| {
            let sink = TwoPhaseCommitFileSink::new(&sink_name, &dir, worker, sink_format.clone());
            Box::new(Chain::new(keyed(), sink)) as BoxOperator<B, ()>
        });
        TimelyJob {
            source_name: source_name.to_string(),
            source: Arc::new(source),
            out_of_orderness: out_of_orderness_ms,
            chain: Arc::new(move |_| chain()),
            key_group: Arc::new(move |b: &B| key_group_of(&key(b), DEFAULT_MAX_PARALLELISM)),
            keyed_name: keyed_name.to_string(),
            keyed,
            sink_dir,
        }
    }

    /// The directory the sink commits into.
    pub fn sink_dir(&self) -> &std::path::Path {
        &self.sink_dir
    }
}
