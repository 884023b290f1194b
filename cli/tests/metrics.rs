//! The metrics of `streamtask run`: the endpoint scraped during a real run of the demo job under
//! every model and parsed with an exposition parser, the endpoint off unless asked for, a
//! non-loopback address refused, and the metrics file.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::{ORDERS, Paused, code, data, run_args, stderr, stdout, streamtask};
use prometheus_parse::{Sample, Scrape, Value};
use streamtask::{Model, OPENMETRICS_CONTENT_TYPE};
use streamtask_cli::demo::job::DemoJob;

/// How long a paused child may take to end once let go (a hang guard, not a timing).
const GUARD: Duration = Duration::from_secs(300);

/// The families the issue names for every task: start delay, busy, idle, backpressured.
const PER_TASK: [&str; 4] = [
    "streamtask_task_checkpoint_start_delay_nanos",
    "streamtask_task_busy_time_ms_per_second",
    "streamtask_task_idle_time_ms_per_second",
    "streamtask_task_back_pressured_time_ms_per_second",
];

/// Every task of the demo job under `model`, as `(task, subtask)` labels.
fn tasks_of(model: Model, dir: &Path) -> BTreeSet<(String, String)> {
    let job = DemoJob::new(data(ORDERS), dir).build(model).unwrap();
    job.vertices()
        .into_iter()
        .flat_map(|(name, parallelism, _)| {
            (0..parallelism).map(move |s| (name.clone(), s.to_string()))
        })
        .collect()
}

/// `GET /metrics` over a loopback connection: the response's head and its parsed body.
fn scrape(addr: SocketAddr) -> (String, Scrape) {
    let mut stream = TcpStream::connect(addr).expect("the endpoint accepts");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        body.ends_with("# EOF\n"),
        "an OpenMetrics body ends with # EOF"
    );
    let parsed = Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("it parses");
    (head.to_string(), parsed)
}

/// The address the child said it serves the metrics at.
fn served_at(log: &[String]) -> SocketAddr {
    log.iter()
        .find_map(|line| {
            let rest = line.split_once("serving metrics at http://")?.1;
            rest.strip_suffix("/metrics")?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no address announced in {log:?}"))
}

/// The samples of `family` for `model`.
fn samples<'a>(scrape: &'a Scrape, family: &str, model: Model) -> Vec<&'a Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == family && s.labels.get("model") == Some(model.name()))
        .collect()
}

fn gauge(sample: &Sample) -> f64 {
    match sample.value {
        Value::Gauge(v) => v,
        ref other => panic!("{} is not a gauge: {other:?}", sample.metric),
    }
}

/// Spawns a paused `run` of `model` with `extra` and lets it go on to its first checkpoint's
/// commit: every task of the attempt is running and took that checkpoint's snapshot.
fn at_first_commit(model: Model, dir: &Path, extra: &[&str]) -> Paused {
    let mut child = Paused::spawn(&run_args(model.name(), dir, extra));
    loop {
        match child.next_phase() {
            Some(phase) if phase.starts_with("commit ") => return child,
            Some(_) => child.resume(),
            None => panic!(
                "{model}: the run ended before a checkpoint committed: {:?}",
                child.log
            ),
        }
    }
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = at_first_commit(
        Model::Mailbox,
        dir.path(),
        &["--metrics-addr", "127.0.0.1:0"],
    );
    let (head, scrape) = scrape(served_at(&child.log));
    assert!(
        head.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}")),
        "{head}"
    );
    assert!(!samples(&scrape, PER_TASK[1], Model::Mailbox).is_empty());
    child.resume();
    let (code, log) = child.finish_within(GUARD).expect("the run ends");
    assert_eq!(code, 0, "{log:?}");
}

#[test]
fn every_task_has_start_delay_busy_idle_and_backpressure_under_every_model() {
    for model in Model::ALL {
        let dir = tempfile::tempdir().unwrap();
        let expected = tasks_of(model, dir.path());
        let mut child = at_first_commit(model, dir.path(), &["--metrics-addr", "127.0.0.1:0"]);
        let (_, scrape) = scrape(served_at(&child.log));
        for family in PER_TASK {
            let found = samples(&scrape, family, model);
            let tasks: BTreeSet<(String, String)> = found
                .iter()
                .map(|s| {
                    let label = |name| s.labels.get(name).unwrap_or_default().to_string();
                    assert_eq!(label("job"), "demo");
                    assert_eq!(label("attempt"), "1");
                    (label("task"), label("subtask"))
                })
                .collect();
            assert_eq!(tasks, expected, "{model}: {family}");
            assert_eq!(
                found.len(),
                expected.len(),
                "{model}: {family} once per task"
            );
            for sample in found {
                let value = gauge(sample);
                assert!(
                    value.is_finite() && value >= 0.0,
                    "{model}: {family} = {value}"
                );
                if family.ends_with("_per_second") {
                    assert!(value <= 1000.0, "{model}: {family} = {value} ms per second");
                }
                if family == "streamtask_task_checkpoint_start_delay_nanos" {
                    // Every task snapshotted the committed checkpoint, so its delay is recorded
                    // (a task that snapshots within a microsecond of its last barrier records
                    // 0: the gauge has microsecond resolution, so the snapshot count says it).
                    let snapshots = scrape
                        .samples
                        .iter()
                        .find(|s| {
                            s.metric == "streamtask_task_checkpoints_total"
                                && s.labels.get("model") == Some(model.name())
                                && s.labels.get("task") == sample.labels.get("task")
                                && s.labels.get("subtask") == sample.labels.get("subtask")
                        })
                        .unwrap_or_else(|| {
                            panic!("{model}: {:?} has no snapshot count", sample.labels)
                        });
                    assert!(
                        matches!(snapshots.value, Value::Untyped(n) | Value::Counter(n) if n >= 1.0),
                        "{model}: {:?} took no snapshot: {:?}",
                        sample.labels,
                        snapshots.value
                    );
                }
            }
        }
        let completed = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == "streamtask_job_number_of_completed_checkpoints_total"
                    && s.labels.get("model") == Some(model.name())
            })
            .unwrap_or_else(|| panic!("{model}: no completed-checkpoints counter"));
        assert!(
            matches!(completed.value, Value::Untyped(v) | Value::Counter(v) if v >= 1.0),
            "{model}: {completed:?}"
        );
        child.resume();
        let (code, log) = child.finish_within(GUARD).expect("the run ends");
        assert_eq!(code, 0, "{model}: {log:?}");
    }
}

/// The child's listening TCP ports (Linux: its socket descriptors matched with the kernel's
/// table of listening sockets).
#[cfg(target_os = "linux")]
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.ok()?.path()).ok()?;
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut ports = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT, st 0A is LISTEN, the inode is the tenth field.
            if fields.len() > 9 && fields[3] == "0A" && inodes.contains(fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.insert(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

#[cfg(target_os = "linux")]
#[test]
fn without_the_flag_no_endpoint_listens() {
    let on_dir = tempfile::tempdir().unwrap();
    let mut on = at_first_commit(
        Model::Mailbox,
        on_dir.path(),
        &["--metrics-addr", "127.0.0.1:0"],
    );
    let endpoint = served_at(&on.log);
    let with_flag = listening_ports(on.child.id());
    on.resume();
    assert_eq!(on.finish_within(GUARD).expect("the run ends").0, 0);
    assert!(
        with_flag.contains(&endpoint.port()),
        "{with_flag:?} lacks {endpoint}"
    );

    let off_dir = tempfile::tempdir().unwrap();
    let mut off = at_first_commit(Model::Mailbox, off_dir.path(), &[]);
    let without_flag = listening_ports(off.child.id());
    off.resume();
    let (code, log) = off.finish_within(GUARD).expect("the run ends");
    assert_eq!(code, 0, "{log:?}");
    assert!(
        !log.iter().any(|l| l.contains("serving metrics")),
        "{log:?}"
    );
    // The same run at the same moment listens on the demo's own services only: one port fewer.
    assert_eq!(
        without_flag.len() + 1,
        with_flag.len(),
        "{without_flag:?} vs {with_flag:?}"
    );
}

#[test]
fn a_non_loopback_address_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args(
        "mailbox",
        dir.path(),
        &["--metrics-addr", "0.0.0.0:0"],
    ));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a loopback address"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("--metrics-allow-remote"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("mailbox").exists(), "nothing ran");
}

#[test]
fn metrics_options_without_what_they_need_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing").join("metrics.txt");
    let cases: &[(&[&str], &str)] = &[
        (&["--metrics-allow-remote"], "--metrics-addr"),
        (&["--metrics-interval-ms", "10"], "--metrics-file"),
        (
            &["--metrics-file", missing.to_str().unwrap()],
            "--metrics-file",
        ),
        (
            &["--metrics-file", "m.txt", "--metrics-interval-ms", "0"],
            "--metrics-interval-ms",
        ),
    ];
    for (extra, named) in cases {
        let out = streamtask(&run_args("mailbox", dir.path(), extra));
        assert_eq!(code(&out), 2, "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(named), "{extra:?}: {}", stderr(&out));
    }
}

#[test]
fn the_metrics_file_is_written_during_the_run_and_holds_the_final_counts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.txt");
    let path = file.to_str().unwrap();
    let extra = ["--metrics-file", path, "--metrics-interval-ms", "20"];

    // During the run: a complete exposition (written at start and every interval).
    let mut child = at_first_commit(Model::Legacy, dir.path(), &extra);
    let during = std::fs::read_to_string(&file).expect("written while the run goes on");
    assert!(during.ends_with("# EOF\n"));
    Scrape::parse(during.lines().map(|l| Ok(l.to_string()))).expect("it parses");
    child.resume();
    assert_eq!(child.finish_within(GUARD).expect("the run ends").0, 0);

    // To the end, with a fault and so a restart: the last write holds what the report says.
    let faulty = [&extra[..], &["--faults", "1"]].concat();
    let out = streamtask(&run_args("legacy", dir.path(), &faulty));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let row = |name: &str| -> f64 {
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} row in {}", stdout(&out)))
    };
    let exported = |family: &str| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == family)
            .unwrap_or_else(|| panic!("no {family} in {text}"));
        match sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            ref other => panic!("{family}: {other:?}"),
        }
    };
    assert_eq!(
        exported("streamtask_job_number_of_completed_checkpoints_total"),
        row("checkpoints completed")
    );
    let restarts = row("restarts");
    assert!(restarts >= 1.0, "the fault restarted the job");
    assert_eq!(exported("streamtask_job_num_restarts"), restarts);
    // The tasks are the last attempt's.
    let tasks = tasks_of(Model::Legacy, dir.path());
    let delays = samples(&scrape, PER_TASK[0], Model::Legacy);
    assert_eq!(delays.len(), tasks.len());
    let last_attempt = (restarts + 1.0).to_string();
    assert!(
        delays
            .iter()
            .all(|s| s.labels.get("attempt") == Some(last_attempt.as_str())),
        "{delays:?}"
    );
    // Only the file itself: the temporary file was renamed over it.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("metrics") && n != "metrics.txt")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
