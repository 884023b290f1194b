//! [`CheckpointStorage`]: where completed checkpoints are kept, in memory or in a directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use streamtask_core::sync::{Arc, Mutex};

use super::CompletedCheckpoint;
use super::directory::{self, DirectoryStorage};
use super::error::StorageError;

/// Where completed checkpoints are kept: in memory (tests, single-process runs) or in a
/// directory (survives the process).
///
/// Both keep the [`retained`](Self::retained) newest checkpoints, deleting older ones once a new
/// one is stored, and answer the same questions: [`load`](Self::load) one by id,
/// [`latest`](Self::latest) intact one for restore, [`completed_ids`](Self::completed_ids).
///
/// Clones share the same storage (the same map, or the same directory), so the coordinator can
/// write through one clone while the executor restores through another. One storage should have
/// one writer at a time; writes through clones of one value are serialized.
///
/// # The directory layout
///
/// ```text
/// <dir>/chk-00000000000000000007/_manifest        id, timestamp, and per file: task, length, CRC32
/// <dir>/chk-00000000000000000007/task-0.state     one task's entries (see the module docs)
/// <dir>/chk-00000000000000000008.inprogress-...   a write in progress (or a crash's leftover)
/// ```
///
/// A checkpoint is written into a temporary directory (each file fsynced, the manifest last),
/// renamed to its final name, and the parent directory fsynced: a crash leaves either a whole
/// checkpoint or a leftover that [`directory`](Self::directory) removes on open. Ids are
/// zero-padded so names sort by id.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use streamtask_core::state::TaskSnapshot;
/// use streamtask::checkpoint::{CheckpointStorage, CompletedCheckpoint, StorageError};
///
/// let dir = tempfile::tempdir().unwrap();
/// let storage = CheckpointStorage::directory(dir.path(), 2).unwrap();
/// for id in 1..=3 {
///     let mut state = TaskSnapshot::new();
///     state.put_value(TaskSnapshot::SOURCE, &(id * 100)).unwrap();
///     let tasks = BTreeMap::from([("source".to_string(), state)]);
///     storage.store(&CompletedCheckpoint { id, timestamp: 10 * id as i64, tasks }).unwrap();
/// }
/// // Only the two newest are retained.
/// assert_eq!(storage.completed_ids().unwrap(), vec![2, 3]);
/// let latest = storage.latest().unwrap().expect("a checkpoint is stored");
/// assert_eq!(latest.id, 3);
/// assert_eq!(latest.tasks["source"].get_value::<u64>(TaskSnapshot::SOURCE).unwrap(), Some(300));
/// assert!(matches!(storage.load(1), Err(StorageError::UnknownCheckpoint { id: 1 })));
/// ```
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    backend: Backend,
}

/// The closed set of storage kinds.
#[derive(Debug, Clone)]
enum Backend {
    /// Checkpoints in a map shared by the clones.
    Memory(Arc<MemoryStorage>),
    /// Checkpoints in a directory.
    Directory(Arc<DirectoryStorage>),
}

impl CheckpointStorage {
    /// A storage in memory that retains the `retained` newest checkpoints.
    ///
    /// # Errors
    ///
    /// [`StorageError::ZeroRetention`] if `retained` is 0.
    pub fn in_memory(retained: usize) -> Result<Self, StorageError> {
        check_retention(retained)?;
        Ok(CheckpointStorage {
            backend: Backend::Memory(Arc::new(MemoryStorage {
                retained,
                checkpoints: Mutex::new(BTreeMap::new()),
            })),
        })
    }

    /// A storage in the directory `path` (created if missing) that retains the `retained` newest
    /// checkpoints.
    ///
    /// Opening removes the leftovers of interrupted writes: temporary directories, and checkpoint
    /// directories without a manifest or with a partly written one. Checkpoints that are complete
    /// but damaged stay, and [`load`](Self::load) reports them.
    ///
    /// # Errors
    ///
    /// [`StorageError::ZeroRetention`] if `retained` is 0; [`StorageError::Io`] if the directory
    /// cannot be created, read or cleaned.
    pub fn directory(path: impl Into<PathBuf>, retained: usize) -> Result<Self, StorageError> {
        check_retention(retained)?;
        Ok(CheckpointStorage {
            backend: Backend::Directory(Arc::new(DirectoryStorage::open(path.into(), retained)?)),
        })
    }

    /// How many of the newest checkpoints are kept.
    pub fn retained(&self) -> usize {
        match &self.backend {
            Backend::Memory(m) => m.retained,
            Backend::Directory(d) => d.retained(),
        }
    }

    /// The directory of a directory storage; `None` in memory.
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Directory(d) => Some(d.root()),
        }
    }

    /// Stores `checkpoint` durably, then deletes the checkpoints older than the
    /// [`retained`](Self::retained) newest.
    ///
    /// When this returns `Ok` the checkpoint survives a crash. Failing to delete an old
    /// checkpoint is logged, not returned: the new one is stored all the same.
    ///
    /// # Errors
    ///
    /// [`StorageError::DuplicateCheckpoint`] if a checkpoint with this id is stored;
    /// [`StorageError::Io`] if writing fails (nothing of the checkpoint is left behind then).
    pub fn store(&self, checkpoint: &CompletedCheckpoint) -> Result<(), StorageError> {
        match &self.backend {
            Backend::Memory(m) => m.store(checkpoint),
            Backend::Directory(d) => d.store(checkpoint),
        }
    }

    /// The checkpoint `id`, every file checked against its length and checksum.
    ///
    /// # Errors
    ///
    /// - [`StorageError::UnknownCheckpoint`]: no completed checkpoint `id` is stored.
    /// - [`StorageError::Truncated`]: a file is shorter than the manifest says, or its framing
    ///   runs past its end.
    /// - [`StorageError::Corrupted`]: a checksum, length, magic number or version is wrong.
    /// - [`StorageError::MissingFile`]: a file the manifest lists is gone.
    /// - [`StorageError::Io`]: reading failed.
    pub fn load(&self, id: u64) -> Result<CompletedCheckpoint, StorageError> {
        match &self.backend {
            Backend::Memory(m) => m.load(id),
            Backend::Directory(d) => d.load(id),
        }
    }

    /// The newest checkpoint, the one to restore from; `None` if there is none.
    ///
    /// Unlike [`latest`](Self::latest) this never falls back: a damaged newest checkpoint is an
    /// error, because the sinks may already have committed the output of that checkpoint, and
    /// restoring an older one would commit it again.
    ///
    /// # Errors
    ///
    /// What [`load`](Self::load) reports for the newest checkpoint ([`StorageError::Truncated`],
    /// [`StorageError::Corrupted`], [`StorageError::MissingFile`], [`StorageError::Io`]), or
    /// [`StorageError::Io`] if the storage cannot be listed.
    pub fn newest(&self) -> Result<Option<CompletedCheckpoint>, StorageError> {
        loop {
            let Some(&id) = self.completed_ids()?.last() else {
                return Ok(None);
            };
            match self.load(id) {
                Ok(checkpoint) => return Ok(Some(checkpoint)),
                // Removed by retention between listing and loading: list again.
                Err(StorageError::UnknownCheckpoint { .. }) => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// The newest intact checkpoint, falling back past damaged ones; `None` if there is none.
    ///
    /// A newer checkpoint that is truncated, corrupted or missing a file is skipped with a
    /// warning in the log, and the next older one is tried. Only restore from it with sinks that
    /// rewind (see the executor's fallback setting): the skipped checkpoints' output may have
    /// been committed. [`newest`](Self::newest) is the strict form.
    ///
    /// # Errors
    ///
    /// [`StorageError::Io`] if the storage cannot be read at all (listing fails, or reading a
    /// checkpoint fails for another reason than its content).
    pub fn latest(&self) -> Result<Option<CompletedCheckpoint>, StorageError> {
        let mut ids = self.completed_ids()?;
        while let Some(id) = ids.pop() {
            match self.load(id) {
                Ok(checkpoint) => return Ok(Some(checkpoint)),
                Err(err) if err.is_damage() => {
                    log::warn!("skipping checkpoint {id} for restore: {err}");
                }
                // Removed by retention between listing and loading: look further back.
                Err(StorageError::UnknownCheckpoint { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(None)
    }

    /// The directory of checkpoint `id` in a directory storage; `None` in memory.
    pub fn checkpoint_path(&self, id: u64) -> Option<PathBuf> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Directory(d) => Some(d.checkpoint_dir(id)),
        }
    }

    /// Loads the checkpoint in directory `path` (a `chk-<id>` directory a directory storage
    /// wrote), without opening or cleaning the storage around it.
    ///
    /// # Errors
    ///
    /// [`StorageError::NotACheckpoint`] if `path` is not named `chk-<id>`; otherwise what
    /// [`load`](Self::load) reports.
    pub fn load_path(path: &Path) -> Result<CompletedCheckpoint, StorageError> {
        let not_one = || StorageError::NotACheckpoint {
            path: path.to_path_buf(),
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(not_one)?;
        let id = directory::checkpoint_id_of(name).ok_or_else(not_one)?;
        let root = path.parent().ok_or_else(not_one)?.to_path_buf();
        match DirectoryStorage::read_only(root).load(id) {
            Err(StorageError::UnknownCheckpoint { .. }) => Err(not_one()),
            other => other,
        }
    }

    /// The id in the name of a checkpoint's directory (`chk-<id>`, as a directory storage names
    /// it), without reading anything; `None` for any other name. For tools that report on a
    /// checkpoint that does not load.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use streamtask::checkpoint::CheckpointStorage;
    ///
    /// let dir = Path::new("checkpoints/chk-00000000000000000007");
    /// assert_eq!(CheckpointStorage::id_of_path(dir), Some(7));
    /// assert_eq!(CheckpointStorage::id_of_path(Path::new("checkpoints")), None);
    /// ```
    pub fn id_of_path(path: &Path) -> Option<u64> {
        directory::checkpoint_id_of(path.file_name()?.to_str()?)
    }

    /// Deletes every stored checkpoint; returns the ids deleted.
    ///
    /// # Errors
    ///
    /// [`StorageError::Io`] if a checkpoint cannot be deleted.
    pub fn discard_all(&self) -> Result<Vec<u64>, StorageError> {
        match &self.backend {
            Backend::Memory(m) => {
                let mut checkpoints = m.checkpoints.lock();
                let ids = checkpoints.keys().copied().collect();
                checkpoints.clear();
                Ok(ids)
            }
            Backend::Directory(d) => d.discard_all(),
        }
    }

    /// The ids of the completed checkpoints, oldest first (damaged ones included: only
    /// [`load`](Self::load) reads their content).
    ///
    /// # Errors
    ///
    /// [`StorageError::Io`] if the directory cannot be listed.
    pub fn completed_ids(&self) -> Result<Vec<u64>, StorageError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.checkpoints.lock().keys().copied().collect()),
            Backend::Directory(d) => d.completed_ids(),
        }
    }
}

fn check_retention(retained: usize) -> Result<(), StorageError> {
    if retained == 0 {
        Err(StorageError::ZeroRetention)
    } else {
        Ok(())
    }
}

/// Checkpoints in memory, keyed by id.
#[derive(Debug)]
struct MemoryStorage {
    retained: usize,
    checkpoints: Mutex<BTreeMap<u64, CompletedCheckpoint>>,
}

impl MemoryStorage {
    fn store(&self, checkpoint: &CompletedCheckpoint) -> Result<(), StorageError> {
        let mut checkpoints = self.checkpoints.lock();
        if checkpoints.contains_key(&checkpoint.id) {
            return Err(StorageError::DuplicateCheckpoint { id: checkpoint.id });
        }
        checkpoints.insert(checkpoint.id, checkpoint.clone());
        while checkpoints.len() > self.retained {
            checkpoints.pop_first();
        }
        Ok(())
    }

    fn load(&self, id: u64) -> Result<CompletedCheckpoint, StorageError> {
        self.checkpoints
            .lock()
            .get(&id)
            .cloned()
            .ok_or(StorageError::UnknownCheckpoint { id })
    }
}
