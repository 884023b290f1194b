//! `streamtask timely`: the sample job across two worker processes commits the local mailbox
//! executor's output, exactly once, also with one process SIGKILLed and all restarted.

mod common;

fn timely(extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["timely", "--records", "4000", "--processes", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--work-dir".to_string(), dir.path().display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    common::streamtask(&args)
}

/// The two columns of a table row.
fn row(stdout: &str, name: &str) -> (String, String) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {name} |")))
        .unwrap_or_else(|| panic!("no {name} row in {stdout}"));
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    (cells[2].to_string(), cells[3].to_string())
}

#[test]
fn smoke() {
    let out = timely(&[]);
    let stdout = common::stdout(&out);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    let (local, on_timely) = row(&stdout, "committed output digest");
    assert_eq!(local, on_timely);
    assert_eq!(row(&stdout, "exactly-once"), ("true".into(), "true".into()));
}

#[test]
fn with_a_process_killed_mid_run_the_output_stays_exactly_once() {
    let out = timely(&[
        "--checkpoint-interval-ms",
        "1",
        "--kill-after-checkpoints",
        "2",
    ]);
    let stdout = common::stdout(&out);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    assert_eq!(row(&stdout, "exactly-once"), ("true".into(), "true".into()));
    let (local, on_timely) = row(&stdout, "committed output digest");
    assert_eq!(local, on_timely);
}
