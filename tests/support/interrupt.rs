//! Signals a leapgnn command at the moment its stderr reaches a given line
//! (a progress line, or `test pause: NAME` under `LEAPGNN_TEST_PAUSE`), so
//! that the interrupt lands mid-way deterministically, and says how it ended.

// The including test crate's bounded.rs (`use X_support::bounded;` there):
// a second copy of it here would be the same module loaded twice.
use crate::bounded::{RUN_LIMIT, STOP_LIMIT, kill_after, wait_within};
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
    let watch = kill_after(child.id(), RUN_LIMIT, &format!("leapgnn {args:?}: a line containing `{at}`"));
    for line in lines.by_ref() {
        let line = line.unwrap();
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains(at) {
            let sent = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap();
            assert!(sent.success(), "kill -{sig} {}", child.id());
            drop(watch);
            let watch = kill_after(child.id(), STOP_LIMIT, &format!("leapgnn {args:?}: its end after SIG{sig}"));
            for rest in lines.by_ref() {
                stderr.push_str(&rest.unwrap());
                stderr.push('\n');
            }
            drop(watch);
            let code = wait_within(&mut child, STOP_LIMIT, &format!("leapgnn {args:?} after SIG{sig}")).code();
            return Ended { code, stderr };
        }
    }
    drop(watch);
    let status = wait_within(&mut child, STOP_LIMIT, &format!("leapgnn {args:?} after its stderr ended"));
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
