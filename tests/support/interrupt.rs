//! Signals a leapgnn command at the moment its stderr reaches a given line
//! (a progress line, or `test pause: NAME` under `LEAPGNN_TEST_PAUSE`), so
//! that the interrupt lands mid-way deterministically, and says how it ended.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// How an interrupted command ended: its exit code (`None`: killed by a
/// signal) and everything it wrote on stderr.
pub struct Ended {
    pub code: Option<i32>,
    pub stderr: String,
}

/// Runs `leapgnn --data-dir DATA ARGS` with `env`, sends `kill -SIG` once a
/// stderr line contains `at`, and waits for the process to end.
pub fn interrupt_at(data: &Path, args: &[&str], env: &[(&str, &str)], at: &str, sig: &str) -> Ended {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("LEAPGNN_REGISTRY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leapgnn");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains(at) {
            let sent = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap();
            assert!(sent.success(), "kill -{sig} {}", child.id());
            for rest in lines.by_ref() {
                stderr.push_str(&rest.unwrap());
                stderr.push('\n');
            }
            let code = child.wait().unwrap().code();
            return Ended { code, stderr };
        }
    }
    let status = child.wait().unwrap();
    panic!("leapgnn {args:?} ended ({status}) without a line containing `{at}`: {stderr}");
}

/// The names in `dir` that a write in progress uses (`.NAME.tmp.PID`, `.NAME.old.PID`).
pub fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp.") || n.contains(".old."))
        .collect()
}
