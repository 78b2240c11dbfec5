//! `train --tensorboard DIR`: the event files are read back with TensorBoard's
//! own reader (the `tensorboard` Python package), and every scalar equals what
//! the run recorded in its summary and `metrics.jsonl`.

mod dist_support;

use dist_support::bounded::Bounded;
use dist_support::{cora, fails, json};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long TensorBoard's reader may take: importing the package takes
/// seconds, longer on a loaded machine; reading a run's events, a moment.
const READ_BACK_LIMIT: Duration = Duration::from_secs(300);

/// TensorBoard's reader over `dir`: tag -> [(step, value)], or None when the
/// package is missing outside CI (CI installs it and must not skip).
fn read_back(dir: &Path) -> Option<BTreeMap<String, Vec<(u64, f64)>>> {
    let script = format!(
        "import json\n\
         from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n\
         a = EventAccumulator('{}', size_guidance={{'scalars': 0}})\n\
         a.Reload()\n\
         print(json.dumps({{t: [[e.step, e.value] for e in a.Scalars(t)] for t in a.Tags()['scalars']}}))",
        dir.display()
    );
    let out = Command::new("python3").arg("-c").arg(&script).try_output_in(READ_BACK_LIMIT, "TensorBoard's reader");
    let missing = match &out {
        Ok(o) => String::from_utf8_lossy(&o.stderr).contains("No module named 'tensorboard'"),
        Err(_) => true,
    };
    if missing {
        assert!(std::env::var_os("CI").is_none(), "CI must have the tensorboard package (.ci/run installs it)");
        eprintln!("skipping the read-back: python3 or its tensorboard package is missing (.ci/run installs them)");
        return None;
    }
    let o = out.unwrap();
    assert!(o.status.success(), "tensorboard reader: {}", String::from_utf8_lossy(&o.stderr));
    Some(serde_json::from_slice(&o.stdout).expect("the reader prints JSON"))
}

fn records(d: &Path, run: &str) -> Vec<Value> {
    std::fs::read_to_string(d.join("runs").join(run).join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn total(bytes: &Value) -> u64 {
    bytes.as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum()
}

/// Scalars are f32 in the event file.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// Every scalar of run `run` against its summary `s` and its records.
fn check(d: &Path, tb: &Path, run: &str, s: &Value) {
    let Some(tags) = read_back(&tb.join(run)) else { return };
    let history = s["history"].as_array().unwrap();
    for (tag, field) in [
        ("epoch/loss", "loss"),
        ("epoch/val_accuracy", "val_accuracy"),
        ("epoch/test_accuracy", "test_accuracy"),
        ("epoch/seconds", "seconds"),
        ("epoch/eval_seconds", "eval_seconds"),
    ] {
        let got = &tags[tag];
        assert_eq!(got.len(), history.len(), "{tag}: one point per epoch");
        for (p, e) in got.iter().zip(history) {
            assert_eq!(p.0, e["epoch"].as_u64().unwrap(), "{tag}");
            assert!(close(p.1, e[field].as_f64().unwrap()), "{tag} at epoch {}: {} vs {}", p.0, p.1, e[field]);
        }
    }
    // Per iteration and per epoch, from the records the run wrote.
    let recs = records(d, run);
    let mut loss: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut sent: BTreeMap<u64, u64> = BTreeMap::new();
    // Per epoch: (requested, remote) feature rows.
    let mut rows: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut steps = 0;
    for r in &recs {
        let (e, i) = (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap());
        *loss.entry((e, i)).or_default() += r["loss"].as_f64().unwrap();
        *sent.entry(e).or_default() += total(&r["bytes_out"]);
        let at = rows.entry(e).or_default();
        at.0 += r["rows"]["requested"].as_u64().unwrap();
        at.1 += r["rows"]["remote"].as_u64().unwrap();
        steps = steps.max(r["time_step"].as_u64().unwrap() + 1);
    }
    let per_epoch = s["iterations"].as_u64().unwrap() / history.len() as u64;
    let got = &tags["iteration/loss"];
    assert_eq!(got.len(), loss.len(), "one point per iteration");
    for (p, ((e, i), l)) in got.iter().zip(&loss) {
        assert_eq!(p.0, e * per_epoch + i);
        assert!(close(p.1, *l), "iteration/loss at {}: {} vs {l}", p.0, p.1);
    }
    for t in 0..steps {
        assert_eq!(tags[&format!("iteration/step{t}_seconds")].len(), loss.len(), "time step {t}");
    }
    assert!(!tags.contains_key(&format!("iteration/step{steps}_seconds")));
    let got = &tags["epoch/bytes/total"];
    for p in got {
        assert!(close(p.1, sent[&p.0] as f64), "bytes at epoch {}: {} vs {}", p.0, p.1, sent[&p.0]);
    }
    let all: f64 = got.iter().map(|p| p.1).sum();
    assert!(all > 0.0 || s["workers"] == 1, "a multi-worker run moves bytes");
    // A miss rate for each epoch that requested rows; none (not 0) for one that requested none.
    let want: Vec<(u64, f64)> =
        rows.iter().filter(|(_, r)| r.0 > 0).map(|(e, r)| (*e, r.1 as f64 / r.0 as f64)).collect();
    let got = tags.get("epoch/miss_rate").cloned().unwrap_or_default();
    assert_eq!(got.len(), want.len(), "epoch/miss_rate: {got:?} vs {want:?}");
    for (p, w) in got.iter().zip(&want) {
        assert!(p.0 == w.0 && close(p.1, w.1), "epoch/miss_rate: {p:?} vs {w:?}");
    }
}

#[test]
fn event_files_read_back_with_tensorboard_equal_the_runs_records() {
    let tmp = cora();
    let d = tmp.path();
    let tb = d.join("tb");
    let tbs = tb.to_str().unwrap();
    let common = ["--no-tui", "--batch-size", "64", "--hidden", "16", "--fanout", "5,5", "--tensorboard", tbs];
    let s = json(d, &[&["train", "cora", "--epochs", "3", "--run", "one"][..], &common].concat());
    check(d, &tb, "one", &s);

    // Several workers and time steps: the driver's records, per time step.
    json(d, &["partition", "cora", "--parts", "2"]);
    let two = ["train", "cora", "--workers", "2", "--strategy", "leapgnn", "--time-steps", "2", "--epochs", "2"];
    let s = json(d, &[&two[..], &["--run", "two"], &common].concat());
    check(d, &tb, "two", &s);
    let files = std::fs::read_dir(tb.join("two")).unwrap().count();
    assert_eq!(files, 1, "one event file per session");

    // The full-graph engine fetches no rows through the cache: no miss rate at all.
    let s = json(
        d,
        &[
            "train",
            "cora",
            "--workers",
            "2",
            "--full-batch",
            "--epochs",
            "2",
            "--run",
            "fg",
            "--no-tui",
            "--tensorboard",
            tbs,
        ],
    );
    assert_eq!(s["rows"]["requested"], 0, "{s}");
    check(d, &tb, "fg", &s);
    assert!(read_back(&tb.join("fg")).is_none_or(|tags| !tags.contains_key("epoch/miss_rate")));
}

#[test]
fn a_file_in_place_of_the_directory_is_refused_before_anything_starts() {
    let tmp = cora();
    let d = tmp.path();
    std::fs::write(d.join("tb"), "not a directory").unwrap();
    let e = fails(d, &["train", "cora", "--no-tui", "--tensorboard", d.join("tb").to_str().unwrap()], 2);
    assert!(e.contains("--tensorboard") && e.contains("not a directory"), "{e}");
    // Below a file, or where nothing can be made (/proc), it was taken, the
    // run trained and wrote no event file, and said nothing off a terminal.
    let below = d.join("tb").join("logs");
    for dir in [below.as_path(), Path::new("/proc/leapgnn-tb")] {
        let e = fails(d, &["train", "cora", "--no-tui", "--tensorboard", dir.to_str().unwrap()], 2);
        assert!(e.contains("--tensorboard") && e.contains(dir.to_str().unwrap()), "{e}");
        assert!(e.contains("not a directory") || e.contains("cannot create"), "{e}");
    }
    assert!(!d.join("runs").exists(), "nothing is created for a refused run");
    // A directory yet to be made, several levels down, is fine; the probe leaves nothing.
    let deep = d.join("new").join("tb");
    json(d, &["train", "cora", "--epochs", "1", "--tensorboard", deep.to_str().unwrap()]);
    let made: Vec<_> = std::fs::read_dir(&deep).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(made.len(), 1, "one run's directory: {made:?}");
}
