//! Helpers shared by the `dist_*` tests: Cora in a temp data dir, a driver
//! process whose stderr is read line by line (workers announce their pid and
//! mesh address there), process liveness by pid.

#![allow(dead_code)]

#[path = "../support/ports.rs"]
pub mod ports;
#[path = "../support/sshd.rs"]
pub mod sshd;
#[path = "../train_support/mod.rs"]
mod train_support;

#[allow(unused_imports)] // dist_train does not watch processes
pub use sshd::wait_gone;
#[allow(unused_imports)] // not every test waits on a process of its own
pub use train_support::bounded::{self, RUN_LIMIT, STOP_LIMIT, join_within, recv_within, wait_within};
#[allow(unused_imports)] // only some tests check failures
pub use train_support::{
    Tiny, fails, json, leapgnn, leapgnn_capped, leapgnn_env, names_in, open_to_all, processes_of, refused_capped,
    write_tiny,
};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Training flags of a Cora run long enough never to finish before the test acts on it.
/// How long a test waits for a run it made fail to end: the driver notices,
/// stops the other workers (SIGTERM, then a grace) and copies back the last
/// checkpoint, each step a turn for a core on a loaded machine. Only a hang
/// outlasts it; whether a loss was noticed is `assert_noticed_not_waited_out`.
pub const LONG_EXIT: Duration = Duration::from_secs(120);

pub const LONG_RUN: &[&str] =
    &["--epochs", "1000", "--batch-size", "8", "--hidden", "16", "--fanout", "5,5", "--no-tui"];

/// A run's error line that says it noticed a worker's loss rather than waited
/// it out: a stopwatch on the run's end would tell the two apart only on an
/// idle machine, the comm timeout (30 s by default) being the wait.
pub fn assert_noticed_not_waited_out(line: &str) {
    for waited in ["timed out", "stopped answering", "sent nothing for"] {
        assert!(!line.contains(waited), "the loss was waited out, not noticed: {line}");
    }
}

/// A temp data dir holding Cora (public Planetoid split) as `cora`, features
/// stored dense (the tests count dense rows' bytes on the wire).
pub fn cora() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/planetoid/converted/cora");
    let args = ["download", "cora", "--from", from.to_str().unwrap(), "--format", "text", "--features", "dense"];
    let s = json(tmp.path(), &args);
    assert_eq!(s["nodes"], 2708);
    tmp
}

/// A small, fast model-centric job on `cora()`'s Cora: W parts, batch 8,
/// hidden 16, fanouts 5,5, seed 4 (tests override the rest).
pub fn small_cora_job(workers: usize, epochs: u64) -> leapgnn::train::TrainConfig {
    leapgnn::train::TrainConfig {
        dataset: "cora".into(),
        workers,
        parts: workers,
        epochs,
        batch_size: 8,
        hidden: 16,
        fanouts: "5,5".parse().unwrap(),
        eval_fanouts: "5,5".parse().unwrap(),
        seed: 4,
        ..leapgnn::train::TrainConfig::default()
    }
}

/// `small_cora_job` of 2 workers, one epoch, on the full-graph engine
/// (evaluated on the whole graph) at hidden 8192: over a GiB per worker,
/// which the memory checks' tests put in a host's way.
pub fn wide_full_graph_cora_job() -> leapgnn::train::TrainConfig {
    leapgnn::train::TrainConfig {
        mode: leapgnn::train::TrainMode::FullGraph,
        fanouts: "all,all".parse().unwrap(),
        eval_fanouts: "all,all".parse().unwrap(),
        eval: leapgnn::train::EvalMode::Full,
        hidden: 8192,
        ..small_cora_job(2, 1)
    }
}

/// Options for a run of local worker processes: 30 s comm timeout, the
/// driver on a free 127.0.0.1 port, no restarts, no replica checks.
pub fn local_options<'a>(
    launcher: &'a leapgnn::cluster::LocalLauncher,
    interrupted: &'a std::sync::atomic::AtomicBool,
) -> leapgnn::train::distributed::DistOptions<'a> {
    leapgnn::train::distributed::DistOptions {
        launcher,
        interrupted,
        comm_timeout: Duration::from_secs(30),
        check_replicas: 0,
        dump_grad: None,
        worker_lines: None,
        driver_bind: "127.0.0.1:0".parse().unwrap(),
        auto_planner: Some(&leapgnn::cost::auto_plans),
        restarts: 0,
        encrypt: false,
        keep_remote: false,
    }
}

/// A temp data dir holding the MUSAE Facebook page-page graph as `facebook`
/// (22,470 nodes, 4,714-d features, seeded 60/20/20 split).
pub fn facebook() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/musae-facebook");
    let s = json(tmp.path(), &["download", "facebook", "--from", from.to_str().unwrap()]);
    assert_eq!(s["nodes"], 22470);
    tmp
}

/// |a - b| / |a| (Euclidean norms, in f64); panics if the lengths differ or a is zero.
pub fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "gradients of different lengths");
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let base = norm(&mut a.iter().map(|x| *x as f64));
    assert!(base > 0.0, "the reference gradient is zero");
    norm(&mut a.iter().zip(b).map(|(x, y)| (*x - *y) as f64)) / base
}

/// Runs `leapgnn train DATASET --no-tui ARGS` for one iteration, dumping its
/// summed gradient; returns the gradient and the run summary.
pub fn first_gradient(d: &Path, dataset: &str, args: &[&str]) -> (Vec<f32>, serde_json::Value) {
    let path = d.join(format!("{}.f32", args.join("_").replace(['-', '/', '.'], "")));
    let dump = ["--stop-after", "1", "--epochs", "1", "--dump-grad", path.to_str().unwrap()];
    let s = json(d, &[&["train", dataset, "--no-tui"], args, &dump[..]].concat());
    (read_f32(&path), s)
}

/// Every line of a run's metrics.jsonl.
pub fn records(d: &Path, summary: &serde_json::Value) -> Vec<serde_json::Value> {
    let path = d.join("runs").join(summary["run"].as_str().unwrap()).join("metrics.jsonl");
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// (epoch, iteration, time step, worker, loss) of every step record of run
/// `run` (restart records aside), sorted.
pub fn losses(d: &Path, run: &str) -> Vec<(u64, u64, u64, u64, String)> {
    let mut v: Vec<_> = records(d, &serde_json::json!({ "run": run }))
        .iter()
        .filter(|r| r.get("restart").is_none())
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (n("epoch"), n("iteration"), n("time_step"), n("worker"), r["loss"].to_string())
        })
        .collect();
    v.sort();
    v
}

/// Each remote worker's pid, by rank, from the lines "[HOST rank R] pid P, mesh listening on A".
pub fn remote_workers<const W: usize>(drv: &mut Driver) -> [u32; W] {
    let mut pids = [0u32; W];
    for _ in 0..W {
        let l = drv.wait_line(Duration::from_secs(60), |l| l.contains("] pid ") && l.contains("mesh listening on"));
        let rank: usize = l.split(" rank ").nth(1).unwrap().split(']').next().unwrap().parse().unwrap();
        pids[rank] = l.split("] pid ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    }
    assert!(pids.iter().all(|&p| p != 0), "{pids:?}");
    pids
}

/// The final weights file of run `run` (named in its checkpoint's state).
pub fn final_weights(d: &Path, run: &str) -> Vec<u8> {
    let ck = d.join("runs").join(run).join("checkpoint");
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(ck.join("state.json")).unwrap()).unwrap();
    std::fs::read(ck.join(state["weights"].as_str().unwrap())).unwrap()
}

/// Every weight of a safetensors file, tensors in name order.
pub fn weights(bytes: &[u8]) -> Vec<f32> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let mut names = st.names();
    names.sort();
    let le = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
    names.iter().flat_map(|n| st.tensor(n).unwrap().data().chunks_exact(4).map(le).collect::<Vec<_>>()).collect()
}

/// An `infer` output file's tensors by name: f32 ones with their shapes, and u32 ones.
pub struct InferOut {
    pub f32s: std::collections::HashMap<String, (Vec<usize>, Vec<f32>)>,
    pub u32s: std::collections::HashMap<String, Vec<u32>>,
}

pub fn load_infer(path: &Path) -> InferOut {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out = InferOut { f32s: Default::default(), u32s: Default::default() };
    for (name, v) in st.tensors() {
        let words = v.data().chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
        match v.dtype() {
            safetensors::Dtype::F32 => {
                out.f32s.insert(name, (v.shape().to_vec(), words.map(f32::from_le_bytes).collect()));
            }
            safetensors::Dtype::U32 => {
                out.u32s.insert(name, words.map(u32::from_le_bytes).collect());
            }
            d => panic!("{name}: unexpected dtype {d:?}"),
        }
    }
    out
}

/// The `prediction` tensor (u32 class per node) of an `infer` output file.
pub fn predictions(path: &Path) -> Vec<u32> {
    load_infer(path).u32s.remove("prediction").expect("an infer file has `prediction`")
}

/// The largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Halo rows each worker receives from each owner in `dataset`'s
/// `method`-`parts` partition, counted from the edges.
pub fn halo_counts(d: &Path, dataset: &str, method: &str, parts: usize) -> Vec<Vec<u64>> {
    use leapgnn::format::{DatasetFile, ManifestFile};
    let ds = DatasetFile::open(d.join(format!("{dataset}/dataset.lgnn"))).unwrap();
    let m = ManifestFile::open(d.join(format!("{dataset}/parts/{method}-{parts}"))).unwrap();
    let part = m.node_part();
    let g = ds.graph();
    let mut halo: Vec<std::collections::HashSet<u32>> = vec![Default::default(); parts];
    for v in 0..ds.num_nodes() as u32 {
        for &u in g.in_neighbors(v) {
            if part[u as usize] != part[v as usize] {
                halo[part[v as usize] as usize].insert(u);
            }
        }
    }
    halo.iter()
        .map(|h| {
            let mut by_owner = vec![0u64; parts];
            h.iter().for_each(|&u| by_owner[part[u as usize] as usize] += 1);
            by_owner
        })
        .collect()
}

/// Trains `args` to the end as run `whole`, and as run `cut` stopped after
/// `stop_after` iterations, `between` done, and resumed: both summaries.
pub fn straight_and_resumed(
    d: &Path,
    args: &[&str],
    [whole, cut]: [&str; 2],
    stop_after: u64,
    between: impl FnOnce(),
) -> (serde_json::Value, serde_json::Value) {
    let straight = json(d, &[args, &["--run", whole]].concat());
    let stopped = json(d, &[args, &["--run", cut, "--stop-after", &stop_after.to_string()]].concat());
    assert_eq!(stopped["iterations"], stop_after);
    between();
    let resumed = json(d, &["train", "--resume", cut, "--no-tui"]);
    // Bytes are the whole run's: each phase moved at least what the straight run's did (the
    // resumed workers connect and set up again, in training or, where the run resumes at an
    // evaluation, in that one).
    let (a, b) = (&straight["bytes"], &resumed["bytes"]);
    for c in ["features", "gradients", "migration", "activations", "control"] {
        for phase in ["train", "eval"] {
            let (x, y) = (count(&a[phase][c]), count(&b[phase][c]));
            assert!(y >= x, "{phase} {c} bytes: straight {a}, resumed {b}");
        }
        assert_eq!(count(&b[c]), count(&b["train"][c]) + count(&b["eval"][c]), "{b}");
    }
    (straight, resumed)
}

/// Each epoch's (loss, validation accuracy, test accuracy) of a run's
/// summary: what must repeat exactly (its seconds differ from run to run).
pub fn scores(s: &serde_json::Value) -> Vec<[serde_json::Value; 3]> {
    let h = s["history"].as_array().unwrap();
    h.iter().map(|e| [e["loss"].clone(), e["val_accuracy"].clone(), e["test_accuracy"].clone()]).collect()
}

/// Each epoch's training loss, from a run's summary.
pub fn epoch_losses(s: &serde_json::Value) -> Vec<f64> {
    s["history"].as_array().unwrap().iter().map(|e| e["loss"].as_f64().unwrap()).collect()
}

/// A JSON count.
/// Run `run`'s `workers.json`: each worker's final report.
pub fn workers_json(d: &Path, run: &str) -> Vec<serde_json::Value> {
    let path = d.join("runs").join(run).join("workers.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap()
}

/// Checks that run `summary`'s `workers.json` has one report per worker and
/// that their bytes, summed, are the summary's in every category, training
/// and evaluation alike.
pub fn workers_add_up_to(d: &Path, summary: &serde_json::Value) {
    let done = workers_json(d, summary["run"].as_str().unwrap());
    let ranks: Vec<u64> = done.iter().map(|w| count(&w["rank"])).collect();
    assert_eq!(ranks, (0..count(&summary["workers"])).collect::<Vec<_>>(), "{done:?}");
    let b = &summary["bytes"];
    for c in ["features", "gradients", "migration", "activations", "control"] {
        let sent: u64 = done.iter().map(|w| count(&w["bytes"]["sent"][c])).sum();
        let eval: u64 = done.iter().map(|w| count(&w["eval_bytes"][c])).sum();
        assert_eq!(sent, count(&b[c]), "{c}: workers.json {done:?} vs summary {b}");
        assert_eq!(eval, count(&b["eval"][c]), "eval {c}: workers.json {done:?} vs summary {b}");
    }
}

pub fn count(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// A worker as announced on the driver's stderr.
#[derive(Debug, Clone)]
pub struct Announced {
    pub rank: usize,
    pub pid: u32,
    pub mesh: String,
}

/// A running `leapgnn train` whose stderr lines arrive on a channel.
pub struct Driver {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

/// Each line of `from`, as it comes, on a channel.
fn line_channel(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    lines
}

impl Driver {
    pub fn start(data: &Path, args: &[&str]) -> Driver {
        Driver::spawn(data, args, Stdio::null())
    }

    /// `start`, with the driver's stdout lines (`--json-stream`) on a channel.
    pub fn start_streaming(data: &Path, args: &[&str]) -> (Driver, mpsc::Receiver<String>) {
        let mut d = Driver::spawn(data, args, Stdio::piped());
        let out = line_channel(d.child.stdout.take().unwrap());
        (d, out)
    }

    /// `start`, with the driver's stdout (`--json-stream`) a pipe this test
    /// holds and does not read: a reader that stopped reading.
    pub fn start_stalled(data: &Path, args: &[&str]) -> (Driver, std::process::ChildStdout) {
        let mut d = Driver::spawn(data, args, Stdio::piped());
        let out = d.child.stdout.take().unwrap();
        (d, out)
    }

    /// `start`, with the driver's stdout where the test puts it (`> /dev/full`, a closed pipe).
    pub fn start_to(data: &Path, args: &[&str], stdout: Stdio) -> Driver {
        Driver::spawn(data, args, stdout)
    }

    /// `start`, with these variables in its environment (`LEAPGNN_TEST_PAUSE`).
    pub fn start_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Driver {
        Driver::spawn_env(data, args, Stdio::null(), env)
    }

    fn spawn(data: &Path, args: &[&str], stdout: Stdio) -> Driver {
        Driver::spawn_env(data, args, stdout, &[])
    }

    /// `start_to` and `start_env` at once.
    pub fn spawn_env(data: &Path, args: &[&str], stdout: Stdio, env: &[(&str, &str)]) -> Driver {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
        cmd.arg("--data-dir").arg(data).args(args).envs(env.iter().copied()).stdout(stdout);
        Driver::from_command(&mut cmd)
    }

    /// Any command watched as a driver is (its stderr read line by line): lets a
    /// test give `wait_exit` a process whose stderr outlives it.
    pub fn from_command(cmd: &mut Command) -> Driver {
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("driver starts");
        let lines = line_channel(child.stderr.take().unwrap());
        Driver { child, lines, seen: Vec::new() }
    }

    /// Reads lines until one satisfies `pred` (panics at the deadline or on EOF).
    pub fn wait_line(&mut self, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(e) => {
                    panic!("no expected line within {within:?} ({e:?}); stderr so far:\n{}", self.seen.join("\n"))
                }
            }
        }
    }

    /// Waits until all `world` workers have announced themselves.
    pub fn workers(&mut self, world: usize) -> Vec<Announced> {
        let mut out: Vec<Announced> = Vec::new();
        while out.len() < world {
            let l =
                self.wait_line(Duration::from_secs(30), |l| l.contains("] pid ") && l.contains("mesh listening on"));
            let rank = l["[worker ".len()..l.find(']').unwrap()].parse().unwrap();
            let pid = l.split("pid ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
            let mesh = l.rsplit(' ').next().unwrap().to_string();
            out.push(Announced { rank, pid, mesh });
        }
        out.sort_by_key(|a| a.rank);
        out
    }

    /// Waits (bounded) for the driver to exit; returns its exit code and the rest of its stderr.
    pub fn wait_exit(&mut self, within: Duration) -> (Option<i32>, String) {
        let status = bounded::within(within, || self.child.try_wait().unwrap())
            .unwrap_or_else(|| panic!("driver still running after {within:?}:\n{}", self.seen.join("\n")));
        // The rest of stderr, to EOF: the pipe closes once the driver and anything that
        // inherited it have exited (its workers' stderr is the driver's own pipe, not
        // this one). A quiet spell is no end: a reader thread not scheduled for a while
        // on a loaded machine would lose the last line, often the error a test checks.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) => self.seen.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "the driver exited ({status}) but its stderr stayed open 60 s later (a process that \
                     inherited it still runs); stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
        (status.code(), self.seen.join("\n"))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(pid: u32, sig: &str) {
    assert!(try_signal(pid, sig), "kill -{sig} {pid}");
}

/// `signal`, for where a failure must not panic (a guard's `drop`): whether it was sent.
pub fn try_signal(pid: u32, sig: &str) -> bool {
    let kill = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status();
    kill.is_ok_and(|s| s.success())
}

pub fn read_f32(path: &PathBuf) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A launcher of local workers started through the shell script `body`
/// (written as `name` in `dir`, the data directory), which gets the worker's arguments.
pub fn wrapped(dir: &Path, name: &str, body: &str) -> leapgnn::cluster::LocalLauncher {
    use std::os::unix::fs::PermissionsExt;
    let wrapper = dir.join(name);
    std::fs::write(&wrapper, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    leapgnn::cluster::LocalLauncher::new(&wrapper, vec!["--data-dir".into(), dir.display().to_string()])
}

/// Whether refusal `e`, from a worker of 2 on `host` over its address-space
/// limit, names the worker and the limit as that worker's: the driver
/// prints it, where "this process's" (which it said) reads as the driver's.
pub fn names_its_workers_limit(e: &str, host: &str) -> bool {
    let names = |r: usize| {
        e.contains(&format!("worker {r} on {host}: "))
            && e.contains(&format!(
                "MiB are available there (the address-space limit of worker {r} on {host}, RLIMIT_AS)"
            ))
    };
    (names(0) || names(1)) && !e.contains("this process's")
}

/// Runs leapgnn -vv `args` in `data` on a machine that stands for one with
/// 1 MiB free (`MEM_AVAILABLE_TEST_VAR`) and asserts that it succeeds and
/// that each of its 2 local workers was held to the driver's
/// `--memory-limit-mb 4096` in place of that MemAvailable.
pub fn workers_take_the_drivers_limit(data: &Path, args: &[&str]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("--data-dir").arg(data).args([&["-vv"][..], args].concat());
    cmd.env(leapgnn::util::MEM_AVAILABLE_TEST_VAR, (1u64 << 20).to_string());
    let out = bounded::run_within(&mut cmd, RUN_LIMIT, &format!("leapgnn -vv {args:?}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for rank in 0..2 {
        let said = format!("worker {rank}: this host's workers are held together to 4096 MiB (--memory-limit-mb)");
        assert!(err.contains(&said), "no `{said}` in {err}");
    }
}

/// The MiB figure just before `before` in `e` (a refusal's figures).
pub fn mib_before(e: &str, before: &str) -> u64 {
    let at = e.find(before).unwrap_or_else(|| panic!("no `{before}` in {e}"));
    e[..at].rsplit(['(', ' ']).next().unwrap().parse().unwrap_or_else(|_| panic!("{before}: {e}"))
}
