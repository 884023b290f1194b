//! The sample job across worker processes on loopback ports: the same output as the local
//! executor, and exactly once through a SIGKILL of one process and a restart of all.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use streamtask::checkpoint::CheckpointStorage;
use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_timely::sample::{local_job, read_round_robin, write_input};

/// Started processes, killed and reaped on drop (also when a test fails).
struct Cluster {
    children: Vec<Child>,
}

impl Cluster {
    /// Starts `processes` workers on fresh loopback ports, with a hostfile in `work`.
    fn start(processes: usize, work: &Path, extra: &[&str]) -> Cluster {
        // Bind every port first so no two are the same, then free them for the workers.
        let listeners: Vec<TcpListener> = (0..processes)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let hosts: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        drop(listeners);
        let hostfile = work.join("hostfile");
        std::fs::write(&hostfile, hosts.join("\n")).unwrap();
        let children = (0..processes)
            .map(|i| {
                Command::new(env!("CARGO_BIN_EXE_streamtask-timely-worker"))
                    .args(["--inputs", path(&work.join("in"))])
                    .args(["--out", path(&work.join("out"))])
                    .args(["--checkpoints", path(&work.join("chk"))])
                    .args(["--process", &i.to_string()])
                    .args(["--hostfile", path(&hostfile)])
                    .args(extra)
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Cluster { children }
    }

    /// Waits for every process; true if all succeeded.
    fn wait(&mut self) -> bool {
        let mut ok = true;
        for child in &mut self.children {
            ok &= child.wait().unwrap().success();
        }
        ok
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn reference(inputs: &[PathBuf], work: &Path) -> Vec<String> {
    let out = work.join("local-out");
    let job = local_job(Model::Mailbox, read_round_robin(inputs).unwrap(), &out).unwrap();
    job.run(&JobConfig::new(work.join("local"))).unwrap();
    sorted(read_committed(&out).unwrap())
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_input(&dir.path().join("in"), 3, 300).unwrap();
    let expected = reference(&inputs, dir.path());
    let mut cluster = Cluster::start(2, dir.path(), &[]);
    assert!(cluster.wait(), "every worker process succeeded");
    assert_eq!(
        sorted(read_committed(dir.path().join("out")).unwrap()),
        expected
    );
}

#[test]
fn a_killed_process_restarts_with_the_others_from_the_last_complete_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_input(&dir.path().join("in"), 4, 2_000).unwrap();
    let expected = reference(&inputs, dir.path());
    // Small epochs: many checkpoints, so the kill lands mid-run.
    let slow = ["--interval-ms", "1", "--max-epoch-records", "20"];
    let chk = dir.path().join("chk");
    {
        let mut cluster = Cluster::start(2, dir.path(), &slow);
        // Wait for a few completed checkpoints (bounded, in case the run cannot start).
        let deadline = Instant::now() + Duration::from_secs(60);
        while checkpoints(&chk) < 3 {
            assert!(Instant::now() < deadline, "no checkpoint completed");
            std::thread::sleep(Duration::from_millis(5));
        }
        let victim = &mut cluster.children[1];
        assert!(
            victim.try_wait().unwrap().is_none(),
            "the kill lands mid-run"
        );
        victim.kill().unwrap(); // SIGKILL
        victim.wait().unwrap();
        // The survivor loses its peer; it is killed and reaped with the cluster here.
    }
    assert!(read_committed(dir.path().join("out")).unwrap().len() < expected.len());
    // The launcher opens the storage first: it removes a checkpoint the kill interrupted.
    let storage = CheckpointStorage::directory(&chk, 3).unwrap();
    assert!(storage.latest().unwrap().is_some());
    let mut cluster = Cluster::start(2, dir.path(), &[]);
    assert!(cluster.wait(), "every restarted worker process succeeded");
    assert_eq!(
        sorted(read_committed(dir.path().join("out")).unwrap()),
        expected
    );
}

/// Completed checkpoints in `dir` (whole `chk-*` directories).
fn checkpoints(dir: &Path) -> usize {
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
