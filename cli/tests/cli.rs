//! The `streamtask` command line: exit codes (0 success, 1 job failed or verdict
//! false, 2 usage error), options validated before anything runs, restore options, signals,
//! single-model output, soak's honesty, and the data generation's temporary file.

mod common;

use std::fs;
use std::path::Path;

use common::{
    Paused, assert_exactly_once, code, run_args, stderr, stdout, streamtask, streamtask_default_log,
};
use streamtask::checkpoint::CheckpointStorage;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn work(dir: &Path) -> String {
    dir.to_str().unwrap().to_string()
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args("mailbox", dir.path(), &[]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_exactly_once(dir.path(), "mailbox", "smoke");
}

#[test]
fn exit_code_0_for_a_successful_run_twice_in_a_row() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let out = streamtask(&run_args("mailbox", dir.path(), &[]));
        assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out));
        assert_exactly_once(dir.path(), "mailbox", &format!("round {round}"));
        if round == 1 {
            // It says that it starts over, and restored nothing.
            assert!(
                stderr(&out).contains("finished; starting over"),
                "{}",
                stderr(&out)
            );
            assert!(!stderr(&out).contains("resuming"), "{}", stderr(&out));
        }
    }
}

#[test]
fn exit_code_2_for_usage_errors_found_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let w = work(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--model", "mailbox", "--customers", "0"],
            "--customers",
        ),
        (
            &["run", "--model", "mailbox", "--checkpoint-interval-ms", "0"],
            "--checkpoint-interval-ms",
        ),
        (&["run", "--model", "mailbox", "--plot", "x.png"], ".svg"),
        (
            &[
                "run",
                "--model",
                "mailbox",
                "--json",
                "/nonexistent/dir/x.json",
            ],
            "does not exist",
        ),
        (
            &["soak", "--seeds", "1", "--json", "x.json"],
            "unexpected argument '--json'",
        ),
        (
            &["soak", "--seeds", "1", "--plot", "x.svg"],
            "unexpected argument '--plot'",
        ),
        (&["run", "--model", "nosuchmodel"], "nosuchmodel"),
        (
            &["run", "--model", "mailbox", "--resume", "--discard-state"],
            "cannot be used",
        ),
    ];
    for (case, needle) in cases {
        let mut a = args(case);
        a.extend(args(&["--work-dir", &w, "--quiet"]));
        let out = streamtask(&a);
        assert_eq!(code(&out), 2, "{case:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{case:?}: {}", stderr(&out));
        // Nothing ran: no data was generated.
        assert!(
            !dir.path().join("orders.csv").exists(),
            "{case:?} generated data"
        );
    }
}

#[test]
fn a_rerun_over_an_unfinished_run_is_refused_with_exit_2_naming_resume_and_discard() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_args("mailbox", dir.path(), &[]);
    assert_eq!(code(&streamtask(&run)), 0);
    // What a SIGKILL leaves (tests/process_crash.rs does it for real).
    fs::write(dir.path().join("mailbox/checkpoints/_run"), "running\n").unwrap();
    fs::remove_file(dir.path().join("orders.csv")).unwrap();
    let out = streamtask(&run);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--resume"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--discard-state"), "{}", stderr(&out));
    assert!(
        !dir.path().join("orders.csv").exists(),
        "refused before generating data"
    );
    let out = streamtask(&run_args("mailbox", dir.path(), &["--discard-state"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_exactly_once(dir.path(), "mailbox", "after --discard-state");
}

/// A finished run marked unfinished whose newest checkpoint's manifest is cut short (rerun
/// until a run completed two checkpoints: how many complete depends on the machine).
fn damage_newest(dir: &Path, model: &str) -> u64 {
    let checkpoints = dir.join(model).join("checkpoints");
    for _ in 0..20 {
        let out = streamtask(&run_args(model, dir, &["--discard-state"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let storage = CheckpointStorage::directory(&checkpoints, 3).unwrap();
        let ids = storage.completed_ids().unwrap();
        if ids.len() >= 2 {
            fs::write(checkpoints.join("_run"), "running\n").unwrap();
            let newest = *ids.last().unwrap();
            let manifest = storage.checkpoint_path(newest).unwrap().join("_manifest");
            let len = fs::metadata(&manifest).unwrap().len();
            fs::OpenOptions::new()
                .write(true)
                .open(&manifest)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
            return newest;
        }
    }
    panic!("{model}: 20 runs completed fewer than two checkpoints each");
}

#[test]
fn exit_code_1_for_a_damaged_newest_checkpoint_and_0_with_the_explicit_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let newest = damage_newest(dir.path(), "mailbox");
    let out = streamtask(&run_args("mailbox", dir.path(), &["--resume"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("newest checkpoint {newest}")),
        "{err}"
    );
    assert!(err.contains("--fallback-to-older-checkpoint"), "{err}");

    let out = streamtask(&run_args(
        "mailbox",
        dir.path(),
        &["--resume", "--fallback-to-older-checkpoint"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("rewound"),
        "the rewound files are listed: {err}"
    );
    assert_exactly_once(dir.path(), "mailbox", "after the fallback");
}

#[test]
fn a_single_model_run_makes_no_cross_model_claims() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args("bridge", dir.path(), &[]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&out);
    assert!(!table.contains("matches the other models"), "{table}");
    assert!(!table.contains("across models"), "{table}");
    assert!(
        !table.lines().any(|l| l.trim_end().ends_with(" us")),
        "units are µs: {table}"
    );
    assert!(table.contains("exactly-once held"), "{table}");
}

#[test]
fn faults_beyond_the_restart_budget_raise_it_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args("mailbox", dir.path(), &["--faults", "12"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("raised from 10 to 12"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn injected_faults_are_logged_below_warnings_one_line_per_attempt() {
    let restarts = |out: &std::process::Output| -> usize {
        stdout(out)
            .lines()
            .find_map(|l| l.strip_prefix("restarts"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a restarts row")
    };
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask_default_log(&run_args("legacy", dir.path(), &["--faults", "6"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(restarts(&out) > 0, "{}", stdout(&out));
    // The faults were asked for: no warning about them by default.
    let err = stderr(&out);
    assert!(
        err.lines()
            .filter(|l| l.contains("WARN"))
            .all(|l| !l.contains("injected fault") && !l.contains("attempt")),
        "{err}"
    );
    // At info, the executor's one line per failed attempt, not every task's copy.
    let out = std::process::Command::new(common::BIN)
        .args(run_args(
            "legacy",
            dir.path(),
            &["--faults", "6", "--discard-state"],
        ))
        .env("RUST_LOG", "error,streamtask::job::executor=info")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let attempts = err
        .lines()
        .filter(|l| l.contains("INFO") && l.contains("attempt") && l.contains("injected fault"))
        .count();
    assert_eq!(
        attempts,
        restarts(&out),
        "one line per failed attempt: {err}"
    );
}

#[test]
fn soak_injects_one_fault_by_default_and_reports_per_model() {
    let dir = tempfile::tempdir().unwrap();
    let w = work(dir.path());
    let soak = |extra: &[&str]| {
        let mut a = args(&[
            "soak",
            "--seeds",
            "2",
            "--model",
            "mailbox",
            "--records",
            "2000",
            "--quiet",
            "--work-dir",
            &w,
        ]);
        a.extend(args(extra));
        streamtask_default_log(&a)
    };
    let out = soak(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("2 seed(s), 1 fault(s) each"),
        "{}",
        stdout(&out)
    );
    // The faults it injects on purpose are no warnings.
    let err = stderr(&out);
    assert!(
        err.lines()
            .filter(|l| l.contains("WARN"))
            .all(|l| !l.contains("injected fault")),
        "{err}"
    );
    // Nor is starting every seed over, which it does on purpose.
    assert!(!err.contains("discarding the earlier run"), "{err}");
    // An explicit 0 is raised, and it says so.
    let out = soak(&["--faults", "0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--faults 0 raised to 1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn soak_help_lists_only_its_options_with_its_defaults() {
    let out = streamtask(&args(&["soak", "--help"]));
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for refused in [
        "--json",
        "--trace",
        "--plot",
        "--resume",
        "--stop-with-savepoint",
        "--from-savepoint",
    ] {
        assert!(
            !help.contains(refused),
            "soak --help lists {refused}: {help}"
        );
    }
    assert!(help.contains("--faults <FAULTS>"), "{help}");
    assert!(help.contains("[default: 1]"), "{help}");
    // `run` keeps them.
    let run = stdout(&streamtask(&args(&["run", "--help"])));
    for kept in [
        "--json",
        "--resume",
        "--stop-with-savepoint",
        "--from-savepoint",
    ] {
        assert!(run.contains(kept), "run --help lacks {kept}: {run}");
    }
}

#[test]
fn a_records_count_that_does_not_fit_the_disk_is_refused_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&args(&[
        "run",
        "--model",
        "mailbox",
        "--records",
        "1000000000000000",
        "--quiet",
        "--work-dir",
        &work(dir.path()),
    ]));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("MiB free"), "{}", stderr(&out));
    assert!(!dir.path().join("orders.tmp").exists());
    assert!(!dir.path().join("orders.csv").exists());
}

#[test]
fn sigterm_during_data_generation_removes_the_temporary_file_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that generation checks for the signal after the midpoint.
    let mut a = run_args("mailbox", dir.path(), &[]);
    let records = a.iter().position(|s| s == "--records").unwrap() + 1;
    a[records] = "100000".into();
    let mut child = Paused::spawn(&a);
    assert_eq!(child.next_phase().as_deref(), Some("generate"));
    assert!(dir.path().join("orders.tmp").exists(), "half written");
    let (code, log) = child.terminate();
    assert_eq!(code, 1, "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("stopped by a signal")),
        "{log:?}"
    );
    assert!(
        !dir.path().join("orders.tmp").exists(),
        "temporary file removed"
    );
}

#[test]
fn sigterm_mid_run_stops_cleanly_and_resume_completes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_args("mailbox", dir.path(), &[]);
    let mut child = Paused::spawn(&run);
    // Past data generation, at the first checkpoint's trigger.
    loop {
        match child.next_phase() {
            Some(p) if p.starts_with("trigger") => break,
            Some(_) => child.resume(),
            None => panic!("the run ended before its first checkpoint"),
        }
    }
    let (code, log) = child.terminate();
    if code == 0 {
        // The signal came as the job finished: nothing was left to stop.
        assert_exactly_once(
            dir.path(),
            "mailbox",
            "finished before the signal took effect",
        );
        return;
    }
    assert_eq!(code, 1, "{log:?}");
    assert!(log.iter().any(|l| l.contains("--resume")), "{log:?}");
    let mut resume = run.clone();
    resume.push("--resume".into());
    let out = streamtask(&resume);
    assert_eq!(common::code(&out), 0, "{}", stderr(&out));
    assert_exactly_once(dir.path(), "mailbox", "after SIGTERM and --resume");
}

#[test]
fn an_unusable_stop_with_savepoint_directory_exits_2_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    let under = file.join("sp");
    for (path, says) in [
        (&file, "is a file, not a directory"),
        (&under, "which is a file"),
    ] {
        for model in ["legacy", "mailbox", "bridge"] {
            let out = streamtask(&run_args(
                model,
                dir.path(),
                &["--stop-with-savepoint", path.to_str().unwrap()],
            ));
            assert_eq!(code(&out), 2, "{model}: {}", stderr(&out));
            assert!(stderr(&out).contains(says), "{model}: {}", stderr(&out));
        }
    }
}

/// The savepoint directory breaks during the run (it becomes a file after the up-front
/// check): the savepoint cannot be written, and the stop ends with exit 1 and a message in
/// every model, never a hang (the child is waited for with a hang guard, then killed).
#[test]
fn a_savepoint_that_cannot_be_written_during_the_run_exits_1_in_every_model() {
    for model in ["legacy", "mailbox", "bridge"] {
        let dir = tempfile::tempdir().unwrap();
        let savepoints = dir.path().join("savepoints");
        let run = run_args(
            model,
            dir.path(),
            &[
                "--stop-with-savepoint",
                savepoints.to_str().unwrap(),
                "--stop-with-savepoint-after-records",
                "3000",
            ],
        );
        let mut child = Paused::spawn(&run);
        // Past the up-front checks and the data generation, at the first trigger: no
        // savepoint can have been written yet (the coordinator waits in this phase).
        loop {
            match child.next_phase() {
                Some(p) if p.starts_with("trigger") => break,
                Some(_) => child.resume(),
                None => panic!("{model}: the run ended before its first checkpoint"),
            }
        }
        if savepoints.is_dir() {
            fs::remove_dir_all(&savepoints).unwrap();
        }
        fs::write(&savepoints, b"not a directory").unwrap();
        let (exit, log) = child
            .finish_within(std::time::Duration::from_secs(120))
            .unwrap_or_else(|| panic!("{model}: the run hung after its savepoint failed"));
        assert_eq!(exit, 1, "{model}: {log:?}");
        assert!(
            log.iter().any(|l| l.contains("stop-with-savepoint failed")),
            "{model}: {log:?}"
        );
    }
}

#[test]
fn tolerable_failed_checkpoints_is_an_option_of_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args(
        "mailbox",
        dir.path(),
        &["--tolerable-failed-checkpoints", "3"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = streamtask(&run_args(
        "mailbox",
        dir.path(),
        &["--tolerable-failed-checkpoints", "-1"],
    ));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

#[test]
fn a_work_dir_that_is_a_file_or_under_one_is_a_usage_error_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, "not a directory").unwrap();
    let under = file.join("work");
    for (work_dir, named) in [(&file, &file), (&under, &file)] {
        let out = streamtask(&run_args("mailbox", work_dir, &[]));
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("is a file, not a directory"), "{err}");
        assert!(err.contains(&named.display().to_string()), "{err}");
    }
}

/// A savepoint of the usual run's data, stopped at half of it; its path.
fn take_savepoint(work: &Path, savepoints: &Path) -> String {
    let out = streamtask(&run_args(
        "mailbox",
        work,
        &[
            "--stop-with-savepoint",
            savepoints.to_str().unwrap(),
            "--stop-with-savepoint-after-records",
            "6000",
        ],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
        .lines()
        .find_map(|l| l.strip_prefix("savepoint: "))
        .unwrap_or_else(|| panic!("no savepoint printed: {}", stdout(&out)))
        .to_string()
}

#[test]
fn a_savepoint_path_that_is_a_file_or_missing_is_refused_before_data_generation() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, "not a savepoint").unwrap();
    let missing = dir.path().join("no-such-savepoint");
    let work = dir.path().join("work");
    for (path, needle) in [
        (&file, "is a file, not a savepoint directory"),
        (&missing, "is not a savepoint"),
    ] {
        let out = streamtask(&run_args(
            "mailbox",
            &work,
            &["--from-savepoint", path.to_str().unwrap()],
        ));
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains("writable"), "{err}");
        assert!(
            !work.join("orders.csv").exists(),
            "{path:?}: data generated"
        );
    }
}

#[test]
fn a_damaged_savepoint_names_another_savepoint_as_the_fix_not_an_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let path = take_savepoint(&work, &dir.path().join("savepoints"));
    let state = fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "state"))
        .expect("a state file");
    let len = fs::metadata(&state).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&state)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    fs::remove_file(work.join("orders.csv")).unwrap();
    let out = streamtask(&run_args("mailbox", &work, &["--from-savepoint", &path]));
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(err.contains("is damaged"), "{err}");
    assert!(err.contains("another savepoint"), "{err}");
    assert!(!err.contains("older"), "{err}");
    assert!(
        !work.join("orders.csv").exists(),
        "refused before generating data"
    );
}

#[test]
fn a_fallback_past_every_damaged_checkpoint_says_they_are_damaged() {
    let dir = tempfile::tempdir().unwrap();
    damage_newest(dir.path(), "mailbox");
    let checkpoints = dir.path().join("mailbox/checkpoints");
    let storage = CheckpointStorage::directory(&checkpoints, 3).unwrap();
    for id in storage.completed_ids().unwrap() {
        let manifest = storage.checkpoint_path(id).unwrap().join("_manifest");
        fs::write(&manifest, b"").unwrap();
    }
    let out = streamtask(&run_args(
        "mailbox",
        dir.path(),
        &["--resume", "--fallback-to-older-checkpoint"],
    ));
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(!err.contains("completed no checkpoint"), "{err}");
    assert!(err.contains("every checkpoint"), "{err}");
    assert!(err.contains("is damaged"), "{err}");
    assert_exactly_once(dir.path(), "mailbox", "after falling back to the beginning");
}

#[test]
fn interrupting_soak_does_not_suggest_resume_which_soak_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let w = work(dir.path());
    let mut child = Paused::spawn(&args(&[
        "soak",
        "--seeds",
        "50",
        "--model",
        "mailbox",
        "--records",
        "2000",
        "--quiet",
        "--work-dir",
        &w,
    ]));
    // The signal arrives while the data is generated (after the check for it, at order 0), so
    // the first seed's run is the one that stops.
    assert_eq!(child.next_phase().as_deref(), Some("generate"));
    let (code, log) = child.terminate();
    assert_eq!(code, 1, "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("soak stopped by a signal")),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.contains("--resume")), "{log:?}");
}

#[test]
fn the_report_says_how_many_planned_faults_fired() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&run_args("mailbox", dir.path(), &["--faults", "12"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&out);
    let row = |label: &str| -> u32 {
        table
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} row: {table}"))
    };
    let fired = row("faults fired");
    // Every restart is an injected fault's; one attempt may hit two.
    assert!(row("restarts") <= fired && fired <= 12, "{table}");
    assert!(table.contains("12 fault(s) planned"), "{table}");
    assert!(!table.contains("12 injected fault(s)"), "{table}");
}

#[test]
fn a_second_run_in_a_work_dir_in_use_is_refused_naming_the_holder_until_it_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_args("mailbox", dir.path(), &[]);
    let mut first = Paused::spawn(&run);
    let holder = format!("process {}", first.child.id());
    let refused = |when: &str| {
        for extra in [&[][..], &["--resume"][..], &["--discard-state"][..]] {
            let out = streamtask(&run_args("mailbox", dir.path(), extra));
            let err = stderr(&out);
            assert_eq!(code(&out), 2, "{when} {extra:?}: {err}");
            assert!(err.contains("in use by another run"), "{when}: {err}");
            assert!(err.contains(&holder), "{when}: names the holder: {err}");
        }
    };
    // While the first run generates the data, and while its job runs.
    assert_eq!(first.next_phase().as_deref(), Some("generate"));
    refused("generating");
    loop {
        first.resume();
        match first.next_phase() {
            Some(p) if p.starts_with("trigger") => break,
            Some(_) => {}
            None => panic!("the first run ended before its first checkpoint"),
        }
    }
    refused("running");
    // A SIGKILL leaves no lock behind: the kernel drops it with the process.
    first.kill();
    let out = streamtask(&run_args("mailbox", dir.path(), &["--resume"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_exactly_once(dir.path(), "mailbox", "resumed after the holder was killed");
}

#[test]
fn an_output_dir_that_is_a_file_is_a_usage_error_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, "x").unwrap();
    let work = dir.path().join("work");
    let out = streamtask(&run_args(
        "mailbox",
        &work,
        &["--output-dir", file.to_str().unwrap()],
    ));
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("--output-dir"), "{err}");
    assert!(err.contains("is a file, not a directory"), "{err}");
    assert!(!work.join("orders.csv").exists(), "data generated");
}

/// `compare --async-mode key-ordered`: every model's committed output keeps each customer's
/// order, and the report says so (table row and JSON); unordered enrichment is not checked.
#[test]
fn compare_with_key_ordered_enrichment_checks_and_reports_each_customers_order() {
    for (mode, row, value) in [
        ("key-ordered", "held", serde_json::Value::Bool(true)),
        ("unordered", "- (unordered)", serde_json::Value::Null),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.json");
        let out = streamtask(&args(&[
            "compare",
            "--records",
            "3000",
            "--customers",
            "50",
            "--quiet",
            "--async-mode",
            mode,
            "--work-dir",
            &work(dir.path()),
            "--json",
            report.to_str().unwrap(),
        ]));
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let table = stdout(&out);
        let order_row = table
            .lines()
            .find(|l| l.starts_with("per-key order"))
            .unwrap_or_else(|| panic!("{mode}: no per-key order row:\n{table}"));
        assert_eq!(order_row.matches(row).count(), 3, "{mode}: {order_row}");
        if mode == "key-ordered" {
            assert!(table.contains("per-key order held"), "{table}");
        }
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&report).unwrap()).unwrap();
        for m in v["models"].as_array().unwrap() {
            assert_eq!(m["per_key_order"], value, "{mode}: {m}");
        }
    }
}
