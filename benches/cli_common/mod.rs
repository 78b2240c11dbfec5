//! What the benches that run the `leapgnn` binary share: their settings from
//! the environment and one command's `--json` summary.

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The setting `key` from the environment, else `default`.
pub fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// `leapgnn --data-dir DATA ARGS --json`: the parsed summary; a failed
/// command ends the bench with its stderr.
pub fn leapgnn(data: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .arg("--json")
        .output()
        .expect("leapgnn runs");
    assert!(out.status.success(), "leapgnn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}
