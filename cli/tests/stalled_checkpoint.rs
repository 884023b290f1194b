//! `--stall-report-ms`: a checkpoint pending past the threshold is logged as one warning block
//! and listed in `--json`'s `stalled_checkpoints`, each entry readable as the library's
//! `StallReport`.
//!
//! The run is the legacy model under the backpressure scenario, with a 1 ms threshold: its
//! source holds the checkpoint lock while it waits in a full send, so a trigger waits for the
//! lock and each barrier waits behind a full channel, far longer than 1 ms. (The library's
//! `tests/stalled_checkpoint.rs` makes a stall happen without relying on load at all.)

mod common;

use common::{code, run_args_sized, stderr, streamtask};
use streamtask::StallReport;

/// Orders of the run: the throttled enrichment answers about 20,000 a second, so the source
/// reads for a good part of the run's half second, its channels full (with fewer, it may read
/// everything into the channels before the first checkpoint is triggered).
const ORDERS: u64 = 10_000;

/// Runs the legacy model under backpressure with `--stall-report-ms stall_ms` in `dir`; the
/// command's output and its `--json` report.
fn run_legacy_under_backpressure(
    dir: &std::path::Path,
    stall_ms: &str,
) -> (std::process::Output, serde_json::Value) {
    let report = dir.join("report.json");
    let out = streamtask(&run_args_sized(
        "legacy",
        dir,
        ORDERS,
        &[
            "--scenario",
            "backpressure",
            "--stall-report-ms",
            stall_ms,
            "--json",
            report.to_str().unwrap(),
        ],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    (out, json)
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let (out, json) = run_legacy_under_backpressure(dir.path(), "1");
    let stalls = json["models"][0]["stalled_checkpoints"]
        .as_array()
        .expect("a stalled_checkpoints array");
    assert!(!stalls.is_empty(), "no stall reported: {json}");
    for stall in stalls {
        let parsed: StallReport = serde_json::from_value(stall.clone()).unwrap();
        assert_eq!(parsed.model, "legacy");
        assert_eq!(parsed.threshold_ms, 1);
        assert!(
            !parsed.tasks.is_empty(),
            "a stalled checkpoint misses a task"
        );
    }
    // Each report is one warning block: its first line names the checkpoint.
    let err = stderr(&out);
    let first = stalls[0]["checkpoint"].as_u64().unwrap();
    assert!(
        err.lines()
            .any(|l| l.contains("WARN") && l.contains(&format!("checkpoint {first} stalled"))),
        "{err}"
    );
    assert!(err.contains("    thread: "), "{err}");
}

#[test]
fn zero_turns_the_reports_off() {
    let dir = tempfile::tempdir().unwrap();
    let (out, json) = run_legacy_under_backpressure(dir.path(), "0");
    assert_eq!(
        json["models"][0]["stalled_checkpoints"],
        serde_json::json!([])
    );
    assert!(!stderr(&out).contains("stalled"), "{}", stderr(&out));
}
