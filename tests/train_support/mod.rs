//! Helpers shared by the `train_*` integration tests: run the real binary,
//! write small datasets with a planted class structure.

#![allow(dead_code)]

#[path = "../support/bounded.rs"]
pub mod bounded;

use bounded::{Bounded, QUICK_LIMIT, RUN_LIMIT, run_within};
use leapgnn::format::{Dataset, DatasetMeta, FeatureStorage, FeatureTable};
use leapgnn::graph::Csr;
use leapgnn::util::rng::hash_of;
use std::path::Path;
use std::process::{Command, Output};

/// The entries of `dir`, sorted by name.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

pub fn leapgnn(data: &Path, args: &[&str]) -> Output {
    leapgnn_env(data, args, &[])
}

/// `leapgnn` with extra environment variables.
pub fn leapgnn_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    c.envs(env.iter().copied());
    c.arg("--data-dir").arg(data).args(args);
    run_within(&mut c, RUN_LIMIT, &format!("leapgnn {args:?}"))
}

/// Runs `leapgnn ... --json`, asserts success and parses the summary.
pub fn json(data: &Path, args: &[&str]) -> serde_json::Value {
    json_env(data, args, &[])
}

/// `json` with extra environment variables.
pub fn json_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = leapgnn_env(data, &all, env);
    assert!(out.status.success(), "leapgnn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Asserts the command failed with exit code `code` and exactly one stderr line
/// starting `error:`; returns that line.
pub fn fails(data: &Path, args: &[&str], code: i32) -> String {
    let out = leapgnn(data, args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "leapgnn {args:?}: stderr {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "leapgnn {args:?}: expected one error line, got {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

#[derive(Clone, Copy)]
pub struct Tiny {
    pub nodes: u32,
    pub classes: u32,
    pub dim: u32,
    pub with_splits: bool,
    /// Every feature value NaN.
    pub poisoned: bool,
    /// How the archive stores the features.
    pub storage: FeatureStorage,
    /// Keep one feature value in this many (the rest are zero): bag-of-words-like rows.
    pub keep_one_in: u64,
    /// The train nodes: those for which it holds (val and test split the
    /// rest); None: the first half of the nodes.
    pub train_if: Option<fn(u32) -> bool>,
}

impl Default for Tiny {
    fn default() -> Self {
        Tiny {
            nodes: 600,
            classes: 3,
            dim: 16,
            with_splits: true,
            poisoned: false,
            storage: FeatureStorage::Dense,
            keep_one_in: 1,
            train_if: None,
        }
    }
}

/// Writes `<data>/<name>/dataset.lgnn`: `classes` planted communities (most
/// edges inside a class), features = a class signal plus seeded noise.
pub fn write_tiny(data: &Path, name: &str, t: Tiny) {
    let n = t.nodes;
    let label = |v: u32| if t.classes == 0 { -1 } else { (v % t.classes) as i32 };
    let mut edges = Vec::new();
    for v in 0..n {
        for j in 0..5u64 {
            let h = hash_of(7, &[v as u64, j]);
            let mut u = (h % n as u64) as u32;
            if h % 10 < 8 && t.classes > 0 {
                u -= u % t.classes;
                u = (u + v % t.classes) % n;
            }
            edges.push((u, v));
            edges.push((v, u));
        }
    }
    let csr = Csr::from_edges(n as usize, &edges, true);
    let d = t.dim as usize;
    let features = (0..n as usize * d)
        .map(|i| {
            if t.poisoned {
                return f32::NAN;
            }
            let (v, c) = (i / d, i % d);
            if t.keep_one_in > 1 && !hash_of(5, &[i as u64]).is_multiple_of(t.keep_one_in) {
                return 0.0;
            }
            let noise = (hash_of(3, &[i as u64]) % 1000) as f32 / 1000.0 - 0.5;
            noise + if t.classes > 0 && c % t.classes as usize == label(v as u32) as usize { 0.4 } else { 0.0 }
        })
        .collect();
    let features = FeatureTable::from_dense(features, d, t.storage);
    let (train, rest): (Vec<u32>, Vec<u32>) = match t.train_if {
        Some(f) => (0..n).partition(|&v| f(v)),
        None => ((0..n / 2).collect(), (n / 2..n).collect()),
    };
    let (val, test) = rest.split_at(rest.len() / 2);
    let split = |s: &[u32]| if t.with_splits { s.to_vec() } else { Vec::new() };
    let ds = Dataset {
        meta: DatasetMeta {
            name: name.into(),
            source: "test".into(),
            num_nodes: n as u64,
            num_edges: csr.indices.len() as u64,
            feature_dim: t.dim,
            num_classes: t.classes,
            directed: false,
            generated_features: true,
            seed: 0,
        },
        indptr: csr.indptr,
        indices: csr.indices,
        features,
        labels: (0..n).map(label).collect(),
        train: split(&train),
        val: split(val),
        test: split(test),
    };
    ds.write(&data.join(name).join("dataset.lgnn")).expect("dataset writes");
}

/// The `loss` of every record in a run's metrics.jsonl, in order.
pub fn losses(data: &Path, run: &str) -> Vec<f64> {
    std::fs::read_to_string(data.join("runs").join(run).join("metrics.jsonl"))
        .expect("metrics.jsonl exists")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].as_f64().unwrap())
        .collect()
}

/// The bytes of the weights file of a run's checkpoint.
pub fn weights(data: &Path, run: &str) -> Vec<u8> {
    let dir = data.join("runs").join(run).join("checkpoint");
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    std::fs::read(dir.join(state["weights"].as_str().unwrap())).unwrap()
}

/// `leapgnn` (--json) run with its address space capped at `bytes` (what
/// `prlimit --as` or `ulimit -v` does).
pub fn leapgnn_capped(data: &std::path::Path, args: &[&str], bytes: u64) -> std::process::Output {
    run_within(&mut capped_command(data, args, bytes), RUN_LIMIT, &format!("leapgnn {args:?} (capped)"))
}

/// `leapgnn --data-dir DATA ARGS` under `timeout 300`: a process short of
/// memory or threads can hang (a thread it could not start awaited);
/// `timeout` passes the process's limits on and exits 124 then.
pub fn bounded_command(data: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.arg("300").arg(env!("CARGO_BIN_EXE_leapgnn")).arg("--data-dir").arg(data).args(args);
    c
}

/// The command `leapgnn_capped` runs, for a caller that adds to it.
pub fn capped_command(data: &std::path::Path, args: &[&str], bytes: u64) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = bounded_command(data, args);
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, on a `rlimit` it owns; it allocates nothing.
    unsafe {
        c.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    c
}

/// How many processes (threads included) user `uid` runs.
pub fn processes_of(uid: u32) -> usize {
    let out = Command::new("pgrep").arg("-u").arg(uid.to_string()).output_in(QUICK_LIMIT, "pgrep -u");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Opens `dir` and everything in it to every user (to a run as another uid).
pub fn open_to_all(dir: &Path) {
    let open = Command::new("chmod").arg("-R").arg("a+rwX").arg(dir).status_in(QUICK_LIMIT, "chmod -R a+rwX");
    assert!(open.success(), "chmod -R a+rwX {}", dir.display());
}

/// `leapgnn --data-dir DATA ARGS` under `strace -f -qq -e signal=none` with
/// `filters` (`-e trace=...`), the trace written to `trace`: the run's output
/// and the trace. None, saying why, where strace is not installed (CI installs it).
pub fn traced(data: &Path, filters: &[&str], args: &[&str], trace: &Path) -> Option<(Output, String)> {
    if Command::new("strace").arg("-V").try_output_in(QUICK_LIMIT, "strace -V").is_err() {
        eprintln!("skipped: strace is not installed (CI installs it)");
        return None;
    }
    let mut strace = Command::new("strace");
    strace.args(["-f", "-qq", "-e", "signal=none"]).args(filters).arg("-o").arg(trace);
    strace.arg(env!("CARGO_BIN_EXE_leapgnn")).arg("--data-dir").arg(data).args(args);
    let out = run_within(&mut strace, RUN_LIMIT, &format!("leapgnn {args:?} under strace"));
    let text = std::fs::read_to_string(trace)
        .unwrap_or_else(|e| panic!("strace wrote no trace ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    Some((out, text))
}

/// Runs `args` capped at `bytes` of address space and checks that it is
/// refused as bad input: exit 2 and one error line holding every needle.
pub fn refused_capped(data: &std::path::Path, args: &[&str], bytes: u64, needles: &[&str]) {
    let out = leapgnn_capped(data, args, bytes);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    for needle in needles {
        assert!(lines[0].contains(needle), "{args:?}: no `{needle}` in {err}");
    }
}
