//! Shared by the analyze-locality tests: importing the shared real graphs into
//! a temporary data dir and running the real binary.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `../shared/datasets/<rel>` from the repository root.
pub fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets").join(rel)
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Exit code `code` and exactly one `error:` line on stderr that contains every `needle`.
    pub fn assert_error(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, code, "exit code; stderr: {}", self.stderr);
        let errors: Vec<&str> = self.stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "want one `error:` line in: {}", self.stderr);
        for n in needles {
            assert!(errors[0].contains(n), "`{n}` not in: {}", errors[0]);
        }
    }
}

/// Runs `leapgnn --data-dir DATA ARGS...`.
pub fn leapgnn(data: &Path, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("LEAPGNN_REGISTRY")
        .env_remove("LEAPGNN_DATA")
        .output()
        .expect("run leapgnn");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn ok_json(data: &Path, args: &[&str]) -> Value {
    let out = leapgnn(data, args);
    assert_eq!(out.code, 0, "leapgnn {args:?} failed: {}", out.stderr);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", out.stdout))
}

/// Imports a registry dataset from the shared copy at `rel`.
pub fn import(data: &Path, name: &str, rel: &str) {
    let from = shared(rel);
    ok_json(data, &["download", name, "--from", from.to_str().unwrap(), "--json"]);
}

pub fn cora(data: &Path) {
    import(data, "cora-planetoid", "planetoid/converted/cora");
}

pub fn slashdot(data: &Path) {
    import(data, "slashdot", "snap/soc-Slashdot0902.txt.gz");
}

pub fn facebook(data: &Path) {
    import(data, "facebook", "musae-facebook");
}

/// `analyze-locality NAME ARGS... --json`.
pub fn analyze(data: &Path, name: &str, args: &[&str]) -> Value {
    let mut all = vec!["analyze-locality", name, "--json"];
    all.extend_from_slice(args);
    ok_json(data, &all)
}

/// The report without its timings (the only fields that differ between runs).
pub fn without_seconds(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("seconds");
    for r in v["rows"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("seconds");
    }
    v
}

/// The row of `report` for (method, parts, sampling, layers).
pub fn row<'a>(report: &'a Value, method: &str, parts: u64, sampling: &str, layers: u64) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == method && r["parts"] == parts && r["sampling"] == sampling && r["layers"] == layers)
        .unwrap_or_else(|| panic!("no row {method} {parts} {sampling} {layers} in {report}"))
}
