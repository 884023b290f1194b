//! One run at a time per directory: an exclusive lock on a file inside it.
//!
//! Two runs in one checkpoint or output directory destroy each other's state (each aborts the
//! other's transactions, restores checkpoints the other is writing). So a run takes
//! [`DirLock::acquire`] on every directory it writes before it reads or writes anything there,
//! and holds the lock until it ends.
//!
//! The lock is the operating system's (`flock` on Unix, `LockFileEx` on Windows, through
//! [`std::fs::File::try_lock`]), held by the open file: it is released when the [`DirLock`] is
//! dropped and, because the kernel releases it with the process's files, when the process
//! crashes or is killed. A marker file alone would outlive a SIGKILL and block every later
//! run. The file's content is only a hint for the message of the run that is refused: the
//! holder writes its process id into it after it locked it.
//!
//! Locks are per open file, not per process: a second acquire of the same directory in the
//! same process is refused as well.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside a locked directory (hidden: the sinks' readers ignore it).
const LOCK_FILE: &str = ".streamtask.lock";

/// A directory this process writes exclusively, until dropped.
///
/// # Examples
///
/// ```
/// use streamtask::{DirLock, LockError};
///
/// let dir = tempfile::tempdir().unwrap();
/// let lock = DirLock::acquire(dir.path()).unwrap();
/// // Another run (or another acquire in this process) is refused while it is held ...
/// match DirLock::acquire(dir.path()) {
///     Err(LockError::InUse { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
///     other => panic!("{other:?}"),
/// }
/// // ... and admitted once it is released.
/// drop(lock);
/// assert!(DirLock::acquire(dir.path()).is_ok());
/// ```
#[derive(Debug)]
pub struct DirLock {
    // Held open for the lock: closing the file releases it.
    _file: File,
    dir: PathBuf,
}

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another run holds the directory.
    #[error(
        "{} is in use by another run ({}); wait for that run to end or stop it, or choose \
         another directory",
        dir.display(),
        holder(*pid)
    )]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// The holder's process id, as it wrote it into the lock file.
        pid: Option<u32>,
    },
    /// The path, or one of its parents, is a file.
    #[error("{} is a file, not a directory; give a directory", path.display())]
    NotADirectory {
        /// The file in the way.
        path: PathBuf,
    },
    /// The directory or its lock file could not be created or locked.
    #[error(
        "cannot lock {}: {source}; check that the directory is writable",
        path.display()
    )]
    Io {
        /// The directory or the lock file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The holder as a refusal names it.
fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(
        || "a process that has not written its id yet".to_string(),
        |pid| format!("process {pid}"),
    )
}

impl DirLock {
    /// Creates `dir` if needed and locks it for this process, without waiting.
    ///
    /// # Errors
    ///
    /// [`LockError::InUse`] if another run (any process, this one included) holds it,
    /// [`LockError::NotADirectory`] if `dir` or a parent is a file, [`LockError::Io`] if it
    /// cannot be created or locked.
    pub fn acquire(dir: impl AsRef<Path>) -> Result<DirLock, LockError> {
        let dir = dir.as_ref();
        if let Some(file) = dir
            .ancestors()
            .find(|a| !a.as_os_str().is_empty() && a.metadata().is_ok())
            .filter(|a| !a.is_dir())
        {
            return Err(LockError::NotADirectory {
                path: file.to_path_buf(),
            });
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: the content is the holder's id until this process holds it.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::InUse {
                    dir: dir.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(source)) => return Err(io(&path)(source)),
        }
        // Ours now: name the holder for the runs this one refuses.
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.flush())
            .map_err(io(&path))?;
        Ok(DirLock {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_lock_can_be_taken_again_and_names_the_new_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path().join("work")).unwrap();
        assert!(matches!(
            DirLock::acquire(first.dir()),
            Err(LockError::InUse { pid: Some(p), .. }) if p == std::process::id()
        ));
        drop(first);
        let again = DirLock::acquire(dir.path().join("work")).unwrap();
        let text = std::fs::read_to_string(again.dir().join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        for path in [file.clone(), file.join("below")] {
            match DirLock::acquire(&path) {
                Err(LockError::NotADirectory { path }) => assert_eq!(path, file),
                other => panic!("{other:?}"),
            }
        }
    }
}
