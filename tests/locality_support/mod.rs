//! Shared by the analyze-locality tests: importing the shared real graphs into
//! a temporary data dir and reading `analyze-locality --json` (the binary is
//! run by `import_support`).
#![allow(dead_code)]

use crate::import_support::{ok_json, shared};
use serde_json::Value;
use std::path::Path;

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
