//! The sample job across worker processes on loopback ports: the same output as the local
//! executor, and exactly once through a SIGKILL of one process and a restart of all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use streamtask::checkpoint::CheckpointStorage;
use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_timely::sample::{expected_output, local_job, read_round_robin, write_input};
use streamtask_timely::{Cluster, completed_checkpoints};

fn start(work: &Path, extra: &[&str]) -> Cluster {
    let mut args = vec![
        "--inputs",
        path(&work.join("in")),
        "--out",
        path(&work.join("out")),
        "--checkpoints",
        path(&work.join("chk")),
    ]
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<_>>();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Cluster::start(
        env!("CARGO_BIN_EXE_streamtask-timely-worker"),
        &args,
        2,
        work,
    )
    .unwrap()
}

fn all_succeeded(cluster: &mut Cluster) -> bool {
    cluster.wait().unwrap().iter().all(|s| s.success())
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn reference(inputs: &[PathBuf], work: &Path) -> Vec<String> {
    let out = work.join("local-out");
    let job = local_job(Model::Mailbox, inputs.to_vec(), 1, &out).unwrap();
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
    assert_eq!(
        expected,
        expected_output(&read_round_robin(&inputs).unwrap())
    );
    let mut cluster = start(dir.path(), &[]);
    assert!(
        all_succeeded(&mut cluster),
        "every worker process succeeded"
    );
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
        let mut cluster = start(dir.path(), &slow);
        // Wait for a few completed checkpoints (bounded, in case the run cannot start).
        let deadline = Instant::now() + Duration::from_secs(60);
        while completed_checkpoints(&chk) < 3 {
            assert!(Instant::now() < deadline, "no checkpoint completed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(cluster.is_running(1).unwrap(), "the kill lands mid-run");
        cluster.kill(1).unwrap(); // SIGKILL
        // The survivor loses its peer; it is killed and reaped with the cluster here.
    }
    assert!(read_committed(dir.path().join("out")).unwrap().len() < expected.len());
    // The launcher opens the storage first: it removes a checkpoint the kill interrupted.
    let storage = CheckpointStorage::directory(&chk, 3).unwrap();
    assert!(storage.latest().unwrap().is_some());
    let mut cluster = start(dir.path(), &[]);
    assert!(
        all_succeeded(&mut cluster),
        "every restarted worker process succeeded"
    );
    assert_eq!(
        sorted(read_committed(dir.path().join("out")).unwrap()),
        expected
    );
}
