//! The backpressure scenario and the checkpoint-alignment options of the `streamtask` command:
//! refused values exit 2 naming the fix, every model still commits the reference output, and
//! the report has the end-to-end and channel-state rows and keys.

mod common;

use std::path::Path;

use common::{assert_exactly_once_sized, code, run_args_sized, stderr, stdout, streamtask};

/// Orders of a backpressured child run: the throttled enrichment answers about 20,000 a
/// second, so a run stays well under a second.
const ORDERS: u64 = 3_000;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = streamtask(&run_args_sized(
        "mailbox",
        dir.path(),
        ORDERS,
        &[
            "--scenario",
            "backpressure",
            "--json",
            report.to_str().unwrap(),
        ],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_exactly_once_sized(dir.path(), "mailbox", ORDERS, "backpressure");
    let table = stdout(&out);
    for row in [
        "checkpoint alignment",
        "checkpoint end-to-end p50",
        "checkpoint end-to-end p99",
        "checkpoint end-to-end max",
        "alignment time p99 (slowest task)",
        "unaligned checkpoints",
        "channel state per checkpoint",
        "channel state total",
        "backpressure scenario",
    ] {
        assert!(table.contains(row), "no {row:?}: {table}");
    }
    let v = json(&report);
    assert_eq!(v["scenario"], "backpressure");
    assert_eq!(v["checkpoint_alignment"], "aligned");
    let m = &v["models"][0];
    assert_eq!(m["checkpoint_alignment"], "aligned");
    for key in ["p50", "p99", "max", "count"] {
        assert!(m["checkpoint_end_to_end_us"][key].is_u64(), "{key}: {m}");
    }
    for key in [
        "alignment_p99_us",
        "alignment_max_us",
        "unaligned_checkpoints",
        "channel_state_records",
        "channel_state_bytes",
    ] {
        assert!(m[key].is_u64(), "{key}: {m}");
    }
    for key in [
        "channel_state_records_per_checkpoint",
        "channel_state_bytes_per_checkpoint",
    ] {
        assert!(m[key].is_number(), "{key}: {m}");
    }
    let series = m["checkpoint_end_to_end_series"].as_array().unwrap();
    assert_eq!(
        series.len() as u64,
        m["checkpoint_end_to_end_us"]["count"].as_u64().unwrap(),
        "every completed checkpoint is in the series: {m}"
    );
}

#[test]
fn unaligned_checkpoints_under_backpressure_keep_every_models_output() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = streamtask(&args(&[
        "compare",
        "--records",
        &ORDERS.to_string(),
        "--customers",
        "500",
        "--seed",
        "7",
        "--checkpoint-interval-ms",
        "2",
        "--quiet",
        "--scenario",
        "backpressure",
        "--checkpoint-alignment",
        "unaligned",
        "--aligned-timeout",
        "5",
        "--work-dir",
        dir.path().to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for model in ["legacy", "mailbox", "bridge"] {
        assert_exactly_once_sized(dir.path(), model, ORDERS, model);
    }
    let table = stdout(&out);
    assert!(
        table.contains("identical committed output across models"),
        "{table}"
    );
    assert!(table.contains("unaligned after 5 ms (*)"), "{table}");
    assert!(table.contains("checkpoint lock"), "{table}");
    let v = json(&report);
    assert_eq!(v["checkpoint_alignment"], "aligned_timeout");
    assert_eq!(v["aligned_timeout_ms"], 5);
    let alignment = |i: usize| {
        let m = &v["models"][i];
        (
            m["model"].as_str().unwrap().to_string(),
            m["checkpoint_alignment"].as_str().unwrap().to_string(),
            m["aligned_timeout_ms"].as_u64(),
        )
    };
    assert_eq!(
        alignment(0),
        ("legacy".into(), "aligned_timeout".into(), Some(5))
    );
    assert_eq!(
        alignment(1),
        ("mailbox".into(), "aligned_timeout".into(), Some(5))
    );
    assert_eq!(
        alignment(2),
        ("bridge".into(), "aligned_timeout".into(), Some(5))
    );
}

#[test]
fn bad_scenario_and_alignment_values_exit_2_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--scenario", "sideways"],
            &["invalid value 'sideways'", "normal", "backpressure"],
        ),
        (
            &["--checkpoint-alignment", "diagonal"],
            &["invalid value 'diagonal'", "aligned", "unaligned"],
        ),
        (&["--aligned-timeout", "soon"], &["invalid value 'soon'"]),
        (
            &["--aligned-timeout", "10"],
            &["--aligned-timeout", "--checkpoint-alignment unaligned"],
        ),
    ];
    for (extra, wanted) in cases {
        let out = streamtask(&run_args_sized("mailbox", dir.path(), ORDERS, extra));
        assert_eq!(code(&out), 2, "{extra:?}: {}", stderr(&out));
        for w in *wanted {
            assert!(
                stderr(&out).contains(w),
                "{extra:?}: no {w:?} in {}",
                stderr(&out)
            );
        }
        // Refused before anything ran: no data was generated.
        assert!(!dir.path().join("orders.csv").exists(), "{extra:?}");
    }
}
