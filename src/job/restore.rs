//! Where a run starts: fresh, from the latest checkpoint, or from a given one, and the marker
//! that tells a finished run from an unfinished one.
//!
//! # The run marker
//!
//! The executor keeps one small file, `_run`, in the checkpoint directory, written atomically
//! (a temporary file, fsynced, renamed, the directory fsynced):
//!
//! | content | written | means |
//! |---|---|---|
//! | (no file, no checkpoint) | - | nothing to restore |
//! | `running` | when a run starts | an unfinished run: resume it or discard it |
//! | `finished` | after the job finished and its sinks committed | nothing to resume |
//!
//! A directory with checkpoints but no marker (written by an older version) counts as
//! unfinished.
//!
//! What each [`Restore`] setting does with what it finds is tabled on the type.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::{CheckpointStorage, CompletedCheckpoint, Savepoint};

use super::environment::JobGraph;
use super::{JobConfig, JobError};

/// Where a run starts, set with [`JobConfig::with_restore`](crate::JobConfig::with_restore).
///
/// The executor keeps a run marker (`_run`, written atomically) in the checkpoint directory:
/// `running` while a run is under way or after it was killed, `finished` once its sinks
/// committed everything. A directory with checkpoints and no marker counts as unfinished.
///
/// # What each setting does with what an earlier run left
///
/// | [`Restore`] | empty | unfinished run | finished run |
/// |---|---|---|---|
/// | `Fresh` | start | [`JobError::UnfinishedRun`] | start over (info log) |
/// | `DiscardState` | start (deleting any sink output) | discard, start over | start over |
/// | `Latest` | start (info log) | restore its newest checkpoint | [`JobError::NothingToResume`] |
///
/// "Empty" means no run in the checkpoint directory and no committed output in the sinks'
/// directories: committed output there that no run accounts for (its checkpoints deleted,
/// another work directory's) is [`JobError::UnownedOutput`] under `Fresh` and `Latest`.
/// | `From(path)` | restore `path` | restore `path` | restore `path` |
/// | `Savepoint(path)` | restore `path` | restore `path` | restore `path` |
///
/// "Start over" deletes the checkpoints and the two-phase sinks' transaction files, so the new
/// run's output does not add to the old one's. Every restore logs at info level which
/// checkpoint it restored from where.
///
/// # Examples
///
/// ```
/// use streamtask::{JobConfig, Restore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let config = JobConfig::new(dir.path()).with_restore(Restore::Latest);
/// assert_eq!(config.restore, Restore::Latest);
/// assert_eq!(JobConfig::new(dir.path()).restore, Restore::Fresh);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Restore {
    /// Start from the beginning (the default). An unfinished earlier run's state in the
    /// checkpoint directory is refused with [`JobError::UnfinishedRun`]; a finished run's is
    /// cleared.
    #[default]
    Fresh,
    /// Start from the beginning after deleting an earlier run's checkpoints and sink output,
    /// finished or not.
    DiscardState,
    /// Resume from the newest completed checkpoint in the checkpoint directory (from the
    /// beginning if the earlier run completed none).
    Latest,
    /// Restore from this checkpoint directory (a `chk-<id>` directory), wherever it is.
    From(PathBuf),
    /// Restore from this savepoint directory (what stop-with-savepoint printed), wherever it
    /// is, into this job even if it changed: state is found by operator id and redistributed
    /// to the job's parallelism (see [`StopWithSavepoint`](crate::StopWithSavepoint)). State
    /// for operators the job lacks is refused ([`JobError::NonRestoredState`]) unless
    /// [`JobConfig::with_allow_non_restored_state`](crate::JobConfig::with_allow_non_restored_state).
    Savepoint(PathBuf),
}

/// Name of the run marker in the checkpoint directory.
const MARKER: &str = "_run";

/// What the run marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// A run started and has not finished.
    Running,
    /// The last run finished and committed its output.
    Finished,
}

impl Marker {
    fn as_str(self) -> &'static str {
        match self {
            Marker::Running => "running\n",
            Marker::Finished => "finished\n",
        }
    }
}

/// What an earlier run left in the checkpoint directory.
#[derive(Debug)]
enum Found {
    Empty,
    Unfinished { latest: Option<u64> },
    Finished,
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> JobError + '_ {
    move |source| JobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the marker atomically: temporary file, fsync, rename, fsync of the directory.
pub(crate) fn write_marker(dir: &Path, finished: bool) -> Result<(), JobError> {
    let marker = if finished {
        Marker::Finished
    } else {
        Marker::Running
    };
    let path = dir.join(MARKER);
    let tmp = dir.join(format!("{MARKER}.tmp"));
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(marker.as_str().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(&tmp))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(io_error(&path))?;
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))?;
    Ok(())
}

fn read_marker(dir: &Path) -> Result<Option<Marker>, JobError> {
    let path = dir.join(MARKER);
    match fs::read_to_string(&path) {
        Ok(text) if text == Marker::Finished.as_str() => Ok(Some(Marker::Finished)),
        // Anything else (including a damaged marker) is treated as unfinished: the safe side.
        Ok(_) => Ok(Some(Marker::Running)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(&path)(e)),
    }
}

fn found(dir: &Path, storage: &CheckpointStorage) -> Result<Found, JobError> {
    let ids = storage.completed_ids()?;
    Ok(match read_marker(dir)? {
        Some(Marker::Finished) => Found::Finished,
        Some(Marker::Running) => Found::Unfinished {
            latest: ids.last().copied(),
        },
        None if ids.is_empty() => Found::Empty,
        None => Found::Unfinished {
            latest: ids.last().copied(),
        },
    })
}

/// What [`JobConfig::check_restore`](crate::JobConfig::check_restore) checks: the refusals
/// of [`Restore`] that need no job to decide.
pub(crate) fn check(restore: &Restore, dir: &Path, retained: usize) -> Result<(), JobError> {
    if let Restore::Savepoint(path) = restore {
        // A savepoint that cannot be read is refused before the caller prepares anything.
        load_savepoint(path)?;
    }
    if !dir.exists() {
        return Ok(());
    }
    let storage = CheckpointStorage::directory(dir, retained)?;
    match (restore, found(dir, &storage)?) {
        (Restore::Fresh, Found::Unfinished { latest }) => Err(JobError::UnfinishedRun {
            dir: dir.to_path_buf(),
            latest,
        }),
        (Restore::Latest, Found::Finished) => Err(JobError::NothingToResume {
            dir: dir.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Reads the savepoint at `path`, a damaged one as [`JobError::DamagedSavepoint`].
fn load_savepoint(path: &Path) -> Result<Savepoint, JobError> {
    Savepoint::load(path).map_err(|source| {
        if source.is_damage() {
            JobError::DamagedSavepoint {
                path: path.to_path_buf(),
                source,
            }
        } else {
            JobError::Storage(source)
        }
    })
}

impl JobGraph {
    /// Decides where the first attempt starts, clearing an earlier run's state when the
    /// setting says so. Returns the checkpoint to restore, if any.
    pub(crate) fn first_restore(
        &self,
        restore: &Restore,
        fallback: bool,
        allow_non_restored: bool,
        storage: &CheckpointStorage,
        dir: &Path,
    ) -> Result<Option<CompletedCheckpoint>, JobError> {
        if let Restore::Savepoint(path) = restore {
            // The same path as a checkpoint from here on: the savepoint becomes a checkpoint
            // of this job's tasks.
            let savepoint = load_savepoint(path)?;
            let checkpoint = self.restore_savepoint(&savepoint, allow_non_restored)?;
            self.check_shape(&checkpoint)?;
            // The checkpoints an earlier run left here belong to the job the savepoint
            // replaces (another shape, perhaps): a restart must never fall back to them.
            let ids = storage.discard_all()?;
            if !ids.is_empty() {
                log::info!(
                    "deleted {} checkpoint(s) of an earlier run in {}: this run starts from \
                     the savepoint (the sink output is kept)",
                    ids.len(),
                    dir.display()
                );
            }
            return Ok(Some(checkpoint));
        }
        let found = found(dir, storage)?;
        let restored = match (restore, found) {
            (Restore::Savepoint(_), _) => unreachable!("handled above"),
            (Restore::From(path), _) => {
                let checkpoint = CheckpointStorage::load_path(path)?;
                log::info!(
                    "restoring checkpoint {} from {}",
                    checkpoint.id,
                    path.display()
                );
                Some(checkpoint)
            }
            (Restore::DiscardState, Found::Empty) => {
                // No run to discard, but output no run accounts for may be there: the user
                // asked for a clean start.
                self.start_over(storage)?;
                None
            }
            (_, Found::Empty) => {
                self.check_no_unowned_output(dir)?;
                if *restore == Restore::Latest {
                    log::info!(
                        "no earlier run in {} to resume; starting from the beginning",
                        dir.display()
                    );
                }
                None
            }
            (Restore::Fresh, Found::Unfinished { latest }) => {
                return Err(JobError::UnfinishedRun {
                    dir: dir.to_path_buf(),
                    latest,
                });
            }
            (Restore::Latest, Found::Finished) => {
                return Err(JobError::NothingToResume {
                    dir: dir.to_path_buf(),
                });
            }
            (Restore::Latest, Found::Unfinished { .. }) => {
                match self.restore_point(fallback, storage)? {
                    Some(checkpoint) => {
                        log::info!(
                            "resuming from checkpoint {} in {}",
                            checkpoint.id,
                            storage
                                .checkpoint_path(checkpoint.id)
                                .unwrap_or_else(|| dir.to_path_buf())
                                .display()
                        );
                        Some(checkpoint)
                    }
                    None => {
                        // Only a fallback gets here with checkpoints stored: all are damaged.
                        let damaged = storage.completed_ids()?.len();
                        if damaged == 0 {
                            log::info!(
                                "the earlier run in {} completed no checkpoint; resuming from \
                                 the beginning",
                                dir.display()
                            );
                        } else {
                            log::warn!(
                                "every checkpoint of the earlier run in {} is damaged ({damaged} \
                                 stored); falling back to the beginning as asked: its sink \
                                 output is deleted and written again",
                                dir.display()
                            );
                        }
                        self.start_over(storage)?;
                        None
                    }
                }
            }
            (Restore::Fresh, Found::Finished) => {
                log::info!(
                    "the earlier run in {} finished; starting over (its checkpoints and output \
                     are replaced)",
                    dir.display()
                );
                self.start_over(storage)?;
                None
            }
            (Restore::DiscardState, Found::Finished | Found::Unfinished { .. }) => {
                log::info!(
                    "discarding the earlier run's state in {} as asked; starting over",
                    dir.display()
                );
                self.start_over(storage)?;
                None
            }
        };
        if let Some(checkpoint) = &restored {
            self.check_shape(checkpoint)?;
            let path = match restore {
                Restore::From(path) => path.clone(),
                _ => storage
                    .checkpoint_path(checkpoint.id)
                    .unwrap_or_else(|| dir.to_path_buf()),
            };
            self.check_checkpoint_identities(checkpoint, &path)?;
        }
        Ok(restored)
    }

    /// Checks, before anything is generated or run, what [`JobConfig::check_restore`] checks
    /// and that the state the run would restore (the savepoint, the checkpoint given, or the
    /// newest checkpoint of the run it resumes) was taken while its sources read what this
    /// job's sources declare they read (see
    /// [`DataStream::source_identity`](crate::DataStream::source_identity)). Reads the state;
    /// changes nothing. [`run`](Self::run) checks the same again.
    ///
    /// # Errors
    ///
    /// What [`JobConfig::check_restore`] reports; [`JobError::SourceMismatch`] if a source
    /// reads other input than when the state was taken; [`JobError::Storage`] if the state
    /// cannot be read.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.from_sequence("numbers", 0..10)
    ///     .source_identity("numbers 0..10")
    ///     .collect_sink("out", &out);
    /// let job = env.build().unwrap();
    /// let work = tempfile::tempdir().unwrap();
    /// let config = JobConfig::new(work.path()).with_restore(Restore::Latest);
    /// // Nothing to resume in an empty directory: the run starts from the beginning.
    /// assert!(job.check_restore(&config).is_ok());
    /// ```
    pub fn check_restore(&self, config: &JobConfig) -> Result<(), JobError> {
        config.check_restore()?;
        match &config.restore {
            Restore::Savepoint(path) => self.check_source_identities(&load_savepoint(path)?),
            Restore::From(path) => {
                let checkpoint = CheckpointStorage::load_path(path)?;
                self.check_checkpoint_identities(&checkpoint, path)
            }
            Restore::Latest if config.checkpoint_dir.exists() => {
                let dir = &config.checkpoint_dir;
                let storage = CheckpointStorage::directory(dir, config.retained_checkpoints)?;
                if !matches!(found(dir, &storage)?, Found::Unfinished { .. }) {
                    return Ok(());
                }
                // The checkpoint the run would restore; a damaged one is the run's to report.
                let restored = if config.fallback_to_older {
                    storage.latest()
                } else {
                    storage.newest()
                };
                match restored {
                    Ok(Some(checkpoint)) => {
                        let path = storage
                            .checkpoint_path(checkpoint.id)
                            .unwrap_or_else(|| dir.clone());
                        self.check_checkpoint_identities(&checkpoint, &path)
                    }
                    Ok(None) => Ok(()),
                    Err(e) if e.is_damage() => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The checkpoint a (re)start restores: the newest, or with `fallback` the newest intact.
    pub(crate) fn restore_point(
        &self,
        fallback: bool,
        storage: &CheckpointStorage,
    ) -> Result<Option<CompletedCheckpoint>, JobError> {
        if fallback {
            let newest = storage.completed_ids()?.last().copied();
            let restored = storage.latest()?;
            if let (Some(newest), Some(c)) = (newest, &restored)
                && c.id != newest
            {
                log::warn!(
                    "fell back from damaged checkpoint {newest} to checkpoint {} as asked; the \
                     sinks rewind the output committed after it",
                    c.id
                );
            }
            return Ok(restored);
        }
        match storage.newest() {
            Err(source) if source.is_damage() => {
                let id = storage.completed_ids()?.last().copied().unwrap_or_default();
                Err(JobError::DamagedCheckpoint {
                    id,
                    path: storage.checkpoint_path(id).unwrap_or_default(),
                    source,
                })
            }
            other => Ok(other?),
        }
    }

    /// With no earlier run in the checkpoint directory, a sink's directory must hold no committed
    /// output (see [`JobError::UnownedOutput`]).
    fn check_no_unowned_output(&self, checkpoint_dir: &Path) -> Result<(), JobError> {
        for sink_dir in &self.sink_dirs {
            if !sink_dir.exists() {
                continue;
            }
            let files = crate::sink::committed_files(sink_dir)?.len();
            if files > 0 {
                return Err(JobError::UnownedOutput {
                    sink_dir: sink_dir.clone(),
                    files,
                    checkpoint_dir: checkpoint_dir.to_path_buf(),
                });
            }
        }
        Ok(())
    }

    /// Deletes the checkpoints and the sinks' transaction files of an earlier run.
    fn start_over(&self, storage: &CheckpointStorage) -> Result<(), JobError> {
        let ids = storage.discard_all()?;
        let mut files = 0;
        for dir in &self.sink_dirs {
            files += crate::sink::discard_output(dir)?.len();
        }
        log::info!(
            "deleted {} checkpoint(s) and {files} sink file(s) of the earlier run",
            ids.len()
        );
        Ok(())
    }

    /// A checkpoint restores only into a job with the same tasks: the same vertices with the
    /// same parallelism (state is matched by `<vertex>#<subtask>`; a savepoint rescales).
    fn check_shape(&self, checkpoint: &CompletedCheckpoint) -> Result<(), JobError> {
        let names: Vec<String> = self.task_names().into_iter().map(|(_, _, n)| n).collect();
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !checkpoint.tasks.contains_key(*n))
            .cloned()
            .collect();
        let unexpected: Vec<String> = checkpoint
            .tasks
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        if missing.is_empty() && unexpected.is_empty() {
            Ok(())
        } else {
            Err(JobError::ShapeMismatch {
                id: checkpoint.id,
                missing,
                unexpected,
            })
        }
    }
}
