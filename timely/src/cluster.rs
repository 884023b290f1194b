//! Starting the processes of a multi-process run on this machine.

use std::fmt;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// The worker processes of one run on loopback ports, each started as
/// `program <args> --process I --hostfile FILE`; every one still running is killed (SIGKILL)
/// and reaped on drop.
///
/// # Examples
///
/// ```no_run
/// use streamtask_timely::Cluster;
///
/// let dir = std::path::Path::new("/tmp/run");
/// let mut cluster = Cluster::start("streamtask-timely-worker", &["--inputs", "/tmp/in"], 2, dir)?;
/// assert!(cluster.wait()?.iter().all(|status| status.success()));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Cluster {
    children: Vec<Child>,
    hostfile: PathBuf,
}

impl Cluster {
    /// Starts `processes` processes of `program` with `args`, on free ports of 127.0.0.1 listed
    /// in a hostfile written into `dir`.
    ///
    /// # Errors
    ///
    /// Binding a port, writing the hostfile or starting a process failed; the processes
    /// started so far are killed.
    pub fn start(
        program: impl AsRef<Path>,
        args: &[&str],
        processes: usize,
        dir: &Path,
    ) -> io::Result<Cluster> {
        // Bind all ports at once so no two are the same, then free them for the workers.
        let listeners = (0..processes)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<io::Result<Vec<_>>>()?;
        let hosts = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()))
            .collect::<io::Result<Vec<_>>>()?;
        drop(listeners);
        let hostfile = dir.join("hostfile");
        std::fs::write(&hostfile, hosts.join("\n"))?;
        let mut cluster = Cluster {
            children: Vec::new(),
            hostfile,
        };
        for i in 0..processes {
            let child = Command::new(program.as_ref())
                .args(args)
                .arg("--process")
                .arg(i.to_string())
                .arg("--hostfile")
                .arg(&cluster.hostfile)
                .stdout(Stdio::null())
                .spawn()?;
            cluster.children.push(child);
        }
        Ok(cluster)
    }

    /// The hostfile the processes read.
    pub fn hostfile(&self) -> &Path {
        &self.hostfile
    }

    /// Whether process `i` is still running.
    ///
    /// # Errors
    ///
    /// Asking the operating system failed.
    pub fn is_running(&mut self, i: usize) -> io::Result<bool> {
        Ok(self.children[i].try_wait()?.is_none())
    }

    /// Kills process `i` with SIGKILL and reaps it.
    ///
    /// # Errors
    ///
    /// Asking the operating system failed.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        self.children[i].kill()?;
        self.children[i].wait().map(|_| ())
    }

    /// Waits for every process and returns their exit statuses, in process order.
    ///
    /// # Errors
    ///
    /// Asking the operating system failed.
    pub fn wait(&mut self) -> io::Result<Vec<ExitStatus>> {
        self.children.iter_mut().map(Child::wait).collect()
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("processes", &self.children.len())
            .field("hostfile", &self.hostfile)
            .finish()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Killing one that already exited fails harmlessly; waiting reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The addresses a hostfile lists, one `host:port` per non-empty line, in process order (the
/// file [`Cluster::start`] writes).
///
/// # Errors
///
/// Reading the file failed.
pub fn read_hostfile(path: &Path) -> io::Result<Vec<String>> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// How many whole checkpoints (`chk-*` directories, none in progress) `dir` holds: a read-only
/// look for watching a running job, unlike
/// [`CheckpointStorage::directory`](streamtask::checkpoint::CheckpointStorage::directory),
/// which removes in-progress writes and so must not be opened beside a running writer.
pub fn completed_checkpoints(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("chk-") && !name.contains("inprogress")
            })
            .count()
    })
}
