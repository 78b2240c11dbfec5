//! `leapgnn bench-report DIR` on summaries written by real `train --json`
//! runs: timings no epoch can have and byte counts whose sum passes u64 are
//! refused naming the file, and the report is written, never hangs.

mod train_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
use train_support::{Tiny, json, write_tiny};

/// `leapgnn bench-report DIR`, given a minute: a report that does not end is a
/// failure, not a test that never ends.
fn bench_report(dir: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("bench-report").arg(dir);
    train_support::bounded::run_within(&mut cmd, Duration::from_secs(60), &format!("bench-report {}", dir.display()))
}

/// A bench directory of two runs at 1gbit (model-centric and leapgnn), from one
/// real summary: `edit` changes each before it is written.
fn bench_dir(summary: &serde_json::Value, edit: &dyn Fn(&str, &mut serde_json::Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for strategy in ["model-centric", "leapgnn"] {
        let mut s = summary.clone();
        s["strategy"] = strategy.into();
        edit(strategy, &mut s);
        std::fs::write(dir.path().join(format!("run-1gbit-{strategy}.json")), s.to_string()).unwrap();
    }
    dir
}

fn refused(out: &Output, file: &str, field: &str) {
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "one error line: {e}");
    assert!(e.starts_with("error: ") && e.contains(file) && e.contains(field), "{file} {field}: {e}");
}

#[test]
fn timings_no_epoch_has_and_overflowing_bytes_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let summary = json(d, &["train", "tiny", "--epochs", "2", "--no-tui", "--run", "r"]);

    let fine = bench_dir(&summary, &|_, _| {});
    let out = bench_report(fine.path());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fine.path().join("bench.svg").is_file() && fine.path().join("report.md").is_file());

    // Means to infinity; an infinite speed-up; none, negative or zero time.
    let cases: [(&str, serde_json::Value); 5] = [
        ("model-centric", serde_json::json!([1e308, 1e308])),
        ("leapgnn", serde_json::json!([5e-324])),
        ("leapgnn", serde_json::json!([1.0, -2.0])),
        ("model-centric", serde_json::json!([0.0])),
        ("leapgnn", serde_json::json!([1e300])),
    ];
    for (which, secs) in cases {
        let dir = bench_dir(&summary, &|strategy, s| {
            if strategy == which {
                s["epoch_seconds"] = secs.clone();
            }
        });
        refused(&bench_report(dir.path()), &format!("run-1gbit-{which}.json"), "epoch_seconds");
        assert!(!dir.path().join("report.md").exists(), "{secs}: no report from refused input");
    }

    // Step records whose feature bytes sum past u64::MAX.
    let dir = bench_dir(&summary, &|_, _| {});
    let record = serde_json::json!({"time_step": 0, "bytes_in": {"features": u64::MAX - 1}}).to_string();
    let metrics = "run-1gbit-leapgnn.metrics.jsonl";
    std::fs::write(dir.path().join(metrics), format!("{record}\n{record}\n")).unwrap();
    refused(&bench_report(dir.path()), &format!("{metrics} line 2"), "bytes_in.features");
}
