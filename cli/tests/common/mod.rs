//! Running the `streamtask` binary as a child process, for the CLI and process-crash tests.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use streamtask::sink::read_committed;
use streamtask_cli::demo::data::{DemoData, expected_output};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_streamtask");

/// The data a child run generates: small (a debug build runs it in well under a second).
pub fn data(orders: u64) -> DemoData {
    DemoData {
        orders,
        // Few keys hold checkpoints back (every barrier waits behind the same hot keys).
        customers: 500,
        seed: 7,
    }
}

/// Orders of the usual child run.
pub const ORDERS: u64 = 12_000;

/// `run --model <model>` on [`data`]`(`[`ORDERS`]`)` in `dir`, plus `extra`.
pub fn run_args(model: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    run_args_sized(model, dir, ORDERS, extra)
}

/// `run --model <model>` on [`data`]`(orders)` in `dir`, plus `extra`.
pub fn run_args_sized(model: &str, dir: &Path, orders: u64, extra: &[&str]) -> Vec<String> {
    let data = data(orders);
    let mut args: Vec<String> = [
        "run",
        "--model",
        model,
        "--records",
        &data.orders.to_string(),
        "--customers",
        &data.customers.to_string(),
        "--seed",
        &data.seed.to_string(),
        "--checkpoint-interval-ms",
        "2",
        "--quiet",
        // A fair checkpoint lock: the legacy source does not starve the checkpoint triggers.
        "--fairness",
        "fair",
        "--work-dir",
        dir.to_str().expect("a UTF-8 temp path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Runs the binary to the end.
pub fn streamtask(args: &[String]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn,streamtask::job::restore=info")
        .stdin(Stdio::null())
        .output()
        .expect("the streamtask binary starts")
}

/// Runs the binary to the end with its default log filter (no `RUST_LOG`).
pub fn streamtask_default_log(args: &[String]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("the streamtask binary starts")
}

/// The exit code (a signal death has none: -1).
pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Its stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Its stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The model's committed output equals the reference of the usual run, as multisets.
pub fn assert_exactly_once(dir: &Path, model: &str, context: &str) {
    assert_exactly_once_sized(dir, model, ORDERS, context);
}

/// The model's committed output equals the reference of `orders` orders, as multisets.
pub fn assert_exactly_once_sized(dir: &Path, model: &str, orders: u64, context: &str) {
    let mut committed = read_committed(dir.join(model).join("output")).unwrap();
    committed.sort_unstable();
    let mut expected = expected_output(&data(orders));
    expected.sort_unstable();
    assert_eq!(
        committed.len(),
        expected.len(),
        "{context}: committed {} lines, the reference has {}",
        committed.len(),
        expected.len()
    );
    assert!(committed == expected, "{context}: committed output differs");
}

/// A child that pauses at each phase (`STREAMTASK_PAUSE_AT_PHASES=1`) until told to go on.
pub struct Paused {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    /// Stderr lines that were not phase announcements.
    pub log: Vec<String>,
}

impl Paused {
    pub fn spawn(args: &[String]) -> Paused {
        let mut child = Command::new(BIN)
            .args(args)
            .env("STREAMTASK_PAUSE_AT_PHASES", "1")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the streamtask binary starts");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        Paused {
            child,
            stdin,
            lines,
            log: Vec::new(),
        }
    }

    /// The next phase the child announced (it waits there); `None` once it ended.
    pub fn next_phase(&mut self) -> Option<String> {
        for line in self.lines.by_ref() {
            let line = line.ok()?;
            match line.strip_prefix("streamtask-phase ") {
                Some(phase) => return Some(phase.to_string()),
                None => self.log.push(line),
            }
        }
        None
    }

    /// Lets the child go on from the phase it waits at.
    pub fn resume(&mut self) {
        if let Some(stdin) = &mut self.stdin {
            // The child may have ended meanwhile; then there is no one to tell.
            let _ = stdin.write_all(b"\n").and_then(|()| stdin.flush());
        }
    }

    /// SIGKILLs the child (only its PID) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("the child can be killed");
        self.child.wait().expect("the child is reaped");
    }

    /// Sends SIGTERM to the child's PID, lets it go on, and waits for its exit code and the
    /// rest of its stderr.
    pub fn terminate(mut self) -> (i32, Vec<String>) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -TERM {pid}");
        self.resume();
        drop(self.stdin.take()); // later phases go on at once
        while self.next_phase().is_some() {}
        let status = self.child.wait().expect("the child is reaped");
        (status.code().unwrap_or(-1), self.log)
    }

    /// Answers every phase until the child ends, waiting at most `guard`: its exit code and
    /// the rest of its stderr, or `None` if it did not end in time (it is then killed).
    pub fn finish_within(mut self, guard: std::time::Duration) -> Option<(i32, Vec<String>)> {
        drop(self.stdin.take());
        let mut log = std::mem::take(&mut self.log);
        let lines = self.lines;
        // The rest of stderr is read on a thread of its own (a child that writes into a full
        // pipe would block); it ends when the child's stderr closes, so it is always joined.
        let reader = std::thread::spawn(move || {
            lines
                .map_while(Result::ok)
                .filter(|l| !l.starts_with("streamtask-phase "))
                .collect::<Vec<String>>()
        });
        let deadline = std::time::Instant::now() + guard;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("the child can be waited for") {
                break Some(status);
            }
            if std::time::Instant::now() >= deadline {
                self.child.kill().expect("the child can be killed");
                self.child.wait().expect("the child is reaped");
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        log.extend(reader.join().expect("the stderr reader"));
        status.map(|s| (s.code().unwrap_or(-1), log))
    }

    /// Answers every phase until the child ends; its exit code.
    pub fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        while self.next_phase().is_some() {}
        self.child
            .wait()
            .expect("the child is reaped")
            .code()
            .unwrap_or(-1)
    }
}
