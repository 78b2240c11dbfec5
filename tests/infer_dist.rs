//! `leapgnn infer RUN --workers W | --cluster PROFILE`: the distributed
//! layer-wise inference on W real worker processes writes what in-process
//! inference (W = 1) writes: the same node order, probabilities within 1e-4,
//! the same predictions, equal to the run's own evaluation; and refuses bad
//! input with exit 2 naming the flag.

mod dist_support;

use dist_support::sshd::{LEFT_WITHIN, Sshd, wait_none_mentioning};
use dist_support::{
    Driver, InferOut, cora, facebook, fails, json, leapgnn, load_infer as load, max_abs_diff, signal, wait_gone,
    wrapped,
};
use leapgnn::format::DatasetFile;
use std::path::Path;
use std::time::Duration;

/// The distributed output `b` against the in-process `a`: same nodes, same
/// shapes, every value within 1e-4, identical predictions.
fn same_as(a: &InferOut, b: &InferOut, what: &str) {
    assert_eq!(a.u32s["node_id"], b.u32s["node_id"], "{what}: node order");
    assert_eq!(a.u32s["prediction"], b.u32s["prediction"], "{what}: predictions (argmax)");
    for field in ["probs", "embeddings"] {
        let (x, y) = (&a.f32s[field], &b.f32s[field]);
        assert_eq!(x.0, y.0, "{what}: shape of {field}");
        let e = max_abs_diff(&x.1, &y.1);
        assert!(e <= 1e-4, "{what}: {field} differ by up to {e}");
    }
}

#[test]
fn facebook_on_4_workers_scores_every_node_as_one_worker_does_and_as_the_run_evaluated() {
    let tmp = facebook();
    let d = tmp.path();
    // Trained on 4 workers: its evaluation is the distributed inference on its own partition.
    let fg = ["train", "facebook", "--no-tui", "--full-batch", "--workers", "4", "--hidden", "16", "--epochs", "3"];
    let s = json(d, &[&fg[..], &["--seed", "3", "--run", "fb"]].concat());
    let out = |name: &str| d.join(name).to_str().unwrap().to_string();
    let solo = json(d, &["infer", "fb", "--embeddings", "0", "--out", &out("w1.safetensors")]);
    assert_eq!((solo["workers"].as_u64(), solo["bytes"].as_u64()), (Some(1), Some(0)));
    let four = json(d, &["infer", "fb", "--embeddings", "0", "--workers", "4", "--out", &out("w4.safetensors")]);
    assert_eq!(four["workers"], 4);
    assert_eq!(four["nodes"], 22470);
    assert_eq!(four["out"], out("w4.safetensors"));
    // The halo's hidden rows crossed the sockets (and its input rows, once).
    assert!(four["bytes_by_category"]["activations"].as_u64().unwrap() > 0, "{four}");
    assert!(four["bytes_by_category"]["features"].as_u64().unwrap() > 0, "{four}");
    let one = json(d, &["infer", "fb", "--embeddings", "0", "--workers", "1", "--out", &out("d1.safetensors")]);
    assert_eq!((one["workers"].as_u64(), one["bytes_by_category"]["activations"].as_u64()), (Some(1), Some(0)));

    let (w1, w4, d1) =
        (load(&d.join("w1.safetensors")), load(&d.join("w4.safetensors")), load(&d.join("d1.safetensors")));
    assert_eq!(w1.u32s["node_id"], (0..22470).collect::<Vec<u32>>());
    assert_eq!(w1.f32s["probs"].0, [22470, 4]);
    assert_eq!(w1.f32s["embeddings"].0, [22470, 16]);
    same_as(&w1, &w4, "W=4");
    same_as(&w1, &d1, "W=1 as a worker process");

    // The predictions are the run's final evaluation (on 4 workers).
    let ds = DatasetFile::open(d.join("facebook/dataset.lgnn")).unwrap();
    let last = &s["history"][2];
    for (ids, key) in [(ds.val(), "val_accuracy"), (ds.test(), "test_accuracy")] {
        let pred = &w4.u32s["prediction"];
        let correct = ids.iter().filter(|&&v| pred[v as usize] as i32 == ds.labels()[v as usize]).count();
        assert_eq!(correct as f64 / ids.len() as f64, last[key].as_f64().unwrap(), "{key}");
    }
    let split_acc = |r: &serde_json::Value| ["train", "val", "test"].map(|k| r["accuracy"][k].as_f64().unwrap());
    assert_eq!(split_acc(&four), split_acc(&solo), "accuracy on 4 workers and in process");
    assert_eq!(four["accuracy"]["test"], last["test_accuracy"]);
    assert_eq!(four["accuracy"]["val"], last["val_accuracy"]);
    assert!(last["test_accuracy"].as_f64().unwrap() > 0.5, "{last}");

    // --nodes: those rows, in the order given.
    std::fs::write(d.join("nodes.txt"), "22469 0\n17 5 22469\n").unwrap();
    let nodes = d.join("nodes.txt");
    let args = ["infer", "fb", "--workers", "4", "--nodes", nodes.to_str().unwrap(), "--out", &out("some.safetensors")];
    assert_eq!(json(d, &args)["nodes"], 5);
    let some = load(&d.join("some.safetensors"));
    let order = [22469u32, 0, 17, 5, 22469];
    assert_eq!(some.u32s["node_id"], order);
    let (all, picked) = (&w4.f32s["probs"].1, &some.f32s["probs"].1);
    for (i, &v) in order.iter().enumerate() {
        assert_eq!(&picked[i * 4..i * 4 + 4], &all[v as usize * 4..v as usize * 4 + 4], "node {v}");
    }
}

#[test]
fn bad_input_to_distributed_infer_is_refused_with_exit_2_naming_the_flag() {
    let tmp = cora();
    let d = tmp.path();
    let e = fails(d, &["infer", "nosuchrun", "--workers", "2"], 2);
    assert!(e.contains("`nosuchrun` does not exist"), "{e}");
    json(d, &["train", "cora", "--no-tui", "--full-batch", "--epochs", "1", "--hidden", "16", "--run", "one"]);
    for w in ["0", "5000"] {
        let e = fails(d, &["infer", "one", "--workers", w], 2);
        assert!(e.contains(&format!("--workers {w}")), "{e}");
    }
    let e = fails(d, &["infer", "one", "--workers", "2", "--embeddings", "1"], 2);
    assert!(e.contains("--embeddings 1"), "{e}");
    let e = fails(d, &["infer", "one", "--workers", "2", "--comm-timeout", "0"], 2);
    assert!(e.contains("--comm-timeout 0"), "{e}");
    // An ssh profile sets W (the sum of its hosts' slots): a different --workers is refused before any connection.
    std::fs::write(d.join("known_hosts"), "").unwrap();
    let host = |a: &str| format!("[[host]]\naddress = \"{a}\"\nuser = \"gnn\"\nworkers = 2\n");
    let profile = format!(
        "[cluster]\nlauncher = \"ssh\"\nknown_hosts = \"{}\"\n{}{}",
        d.join("known_hosts").display(),
        host("192.0.2.10"),
        host("192.0.2.11")
    );
    let lab = d.join("lab.toml");
    std::fs::write(&lab, profile).unwrap();
    let e = fails(d, &["infer", "one", "--cluster", lab.to_str().unwrap(), "--workers", "3"], 2);
    assert!(e.contains("--workers 3") && e.contains("4 worker slots"), "{e}");
    assert!(!d.join("runs/one/predictions.safetensors").exists());

    // A local profile runs --workers processes, by default as many as the run trained on (here 1).
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/local.toml");
    let r = json(d, &["infer", "one", "--cluster", local.to_str().unwrap()]);
    assert_eq!((r["workers"].as_u64(), r["nodes"].as_u64()), (Some(1), Some(2708)));
    let r = json(d, &["infer", "one", "--cluster", local.to_str().unwrap(), "--workers", "3"]);
    assert_eq!(r["workers"], 3);
    assert!(r["bytes_by_category"]["activations"].as_u64().unwrap() > 0, "{r}");
    assert!(d.join("cora/parts/metis-3").is_dir(), "the 3-worker partition is made on first use");
}

#[test]
fn over_ssh_the_workers_get_the_runs_weights_and_score_as_in_process() {
    let sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let fg = ["train", "cora", "--no-tui", "--full-batch", "--epochs", "3", "--hidden", "16", "--normalize", "l1"];
    json(d, &[&fg[..], &["--seed", "6", "--run", "cr"]].concat());
    let out = |name: &str| d.join(name).to_str().unwrap().to_string();
    json(d, &["infer", "cr", "--embeddings", "0", "--out", &out("here.safetensors")]);
    let r = json(
        d,
        // --keep-remote: what was shipped stays on the host to be looked at (tests/ssh_train.rs
        // checks that without it nothing does).
        &[
            "infer",
            "cr",
            "--embeddings",
            "0",
            "--keep-remote",
            "--cluster",
            profile.to_str().unwrap(),
            "--out",
            &out("ssh.safetensors"),
        ],
    );
    assert_eq!((r["workers"].as_u64(), r["nodes"].as_u64()), (Some(2), Some(2708)));
    same_as(&load(&d.join("here.safetensors")), &load(&d.join("ssh.safetensors")), "ssh, W=2");
    // The workers read the checkpoint's weights from their own copy, shipped with the data.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/cr/checkpoint/state.json")).unwrap()).unwrap();
    let weights = state["weights"].as_str().unwrap();
    let shipped = walk(&sshd.remote);
    assert!(shipped.iter().any(|p| p.ends_with(format!("runs/cr/checkpoint/{weights}"))), "{shipped:?}");
    assert!(!shipped.iter().any(|p| p.to_string_lossy().contains("optimizer-")), "only the weights are shipped");
    let marker = sshd.remote.display().to_string();
    assert_eq!(wait_none_mentioning(&marker, LEFT_WITHIN), Vec::<u32>::new(), "processes left");
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

/// Starts local workers, but first gives run `run`'s checkpoint other weights
/// and removes the old ones, as a run still training saves a new checkpoint
/// while infer starts. With `host`, the workers do not share the driver's
/// files: they have their own data directory `host` (`inner` runs them on
/// it), which gets the dataset and what the job ships as ssh would, when
/// the workers start.
struct CheckpointMovesOn {
    inner: leapgnn::cluster::LocalLauncher,
    checkpoint: std::path::PathBuf,
    newer: std::path::PathBuf,
    host: Option<(std::path::PathBuf, std::path::PathBuf)>,
    shipped: std::sync::Mutex<Vec<(std::path::PathBuf, std::path::PathBuf)>>,
}

impl leapgnn::cluster::Launcher for CheckpointMovesOn {
    fn name(&self) -> &'static str {
        "checkpoint-moves-on"
    }

    fn launch(&self, spec: &leapgnn::cluster::WorkerSpec) -> anyhow::Result<Box<dyn leapgnn::cluster::WorkerProcess>> {
        if spec.rank == 0 {
            std::fs::copy(&self.newer, self.checkpoint.join("model-newer.safetensors")).unwrap();
            let path = self.checkpoint.join("state.json");
            let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let old = state["weights"].as_str().unwrap().to_string();
            state["weights"] = "model-newer.safetensors".into();
            std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
            // As a save does once the new state is written.
            std::fs::remove_file(self.checkpoint.join(old)).unwrap();
            if let Some((data, host)) = &self.host {
                let dataset = data.join("cora");
                let files =
                    walk(&dataset).into_iter().map(|f| (f.clone(), f.strip_prefix(data).unwrap().to_path_buf()));
                for (local, there) in files.chain(self.shipped.lock().unwrap().iter().cloned()) {
                    std::fs::create_dir_all(host.join(&there).parent().unwrap()).unwrap();
                    std::fs::copy(&local, host.join(&there)).unwrap_or_else(|e| panic!("{}: {e}", local.display()));
                }
            }
        }
        self.inner.launch(spec)
    }

    fn shares_files(&self) -> bool {
        self.host.is_none()
    }

    fn ship_with_job(&self, files: Vec<(std::path::PathBuf, std::path::PathBuf)>) {
        *self.shipped.lock().unwrap() = files;
    }
}

/// The driver checks the weights the checkpoint names as infer starts; every
/// worker scores with those, not with whatever checkpoint a run still
/// training has written by the time it loads them (a mix of two models, one
/// per worker's nodes, with no error), and the run removing them meanwhile
/// fails nothing.
///
/// Without shared files (ssh, Slurm with sbcast) the same: the weights used
/// to be shipped from the checkpoint's file as the workers started, so one
/// removed since the check failed infer, naming the file.
#[test]
fn every_worker_scores_with_the_weights_the_driver_checked() {
    checked_weights_scored(false);
    checked_weights_scored(true);
}

fn checked_weights_scored(shipped: bool) {
    use leapgnn::train::distributed::infer_distributed;
    use leapgnn::train::infer::{InferOptions, OutputFormat};
    let tmp = cora();
    let d = tmp.path();
    let fg = ["train", "cora", "--no-tui", "--full-batch", "--epochs", "2", "--hidden", "16"];
    json(d, &[&fg[..], &["--seed", "1", "--run", "a"]].concat());
    json(d, &[&fg[..], &["--seed", "2", "--run", "b"]].concat());
    let out = |name: &str| d.join(name);
    json(d, &["infer", "a", "--out", out("a.safetensors").to_str().unwrap()]);
    json(d, &["infer", "b", "--out", out("b.safetensors").to_str().unwrap()]);
    let (a, b) = (load(&out("a.safetensors")), load(&out("b.safetensors")));
    assert_ne!(a.f32s["probs"].1, b.f32s["probs"].1, "the two runs must score differently for this test");

    let checkpoint = d.join("runs/a/checkpoint");
    let b_state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/b/checkpoint/state.json")).unwrap()).unwrap();
    let host = tempfile::tempdir().unwrap();
    let workers_data = if shipped { host.path() } else { d };
    let launcher = CheckpointMovesOn {
        inner: leapgnn::cluster::LocalLauncher::new(
            env!("CARGO_BIN_EXE_leapgnn"),
            vec!["--data-dir".into(), workers_data.display().to_string()],
        ),
        newer: d.join("runs/b/checkpoint").join(b_state["weights"].as_str().unwrap()),
        checkpoint,
        host: shipped.then(|| (d.to_path_buf(), host.path().to_path_buf())),
        shipped: Default::default(),
    };
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let launch = local_launch(&launcher, &interrupted);
    let opts = InferOptions {
        out: Some(out("moved.safetensors")),
        format: OutputFormat::Safetensors,
        embeddings: None,
        nodes: None,
        device: None,
        memory_limit: None,
    };
    let data = leapgnn::DataDir::new(d);
    infer_distributed(&data, "a", &opts, Some(2), &launch).unwrap_or_else(|e| panic!("shipped {shipped}: {e:#}"));
    if shipped {
        let weights = launcher.shipped.lock().unwrap().clone();
        assert_eq!(weights.len(), 1, "{weights:?}");
        // Where the checkpoint named them when checked; the driver's copy is gone with the inference.
        assert!(weights[0].1.starts_with("runs/a/checkpoint"), "{weights:?}");
        assert!(!weights[0].0.exists(), "{weights:?}");
    }
    let moved = load(&out("moved.safetensors"));
    let (got, want) = (&moved.u32s["prediction"], &a.u32s["prediction"]);
    let differ = got.iter().zip(want).filter(|(x, y)| x != y).count();
    assert_eq!((got.len(), differ), (want.len(), 0), "predictions that are not the checked weights'");
    let e = max_abs_diff(&moved.f32s["probs"].1, &a.f32s["probs"].1);
    assert!(e <= 1e-4, "the workers scored with other weights than the driver checked (probs differ by {e})");
}

/// `infer` of a 2-worker run training with `--checkpoint-every 1` (a new
/// checkpoint, the old one's files removed, at every iteration), in process
/// and on 1 and 2 workers, over and over: each succeeds without a warning,
/// says which checkpoint it scored with, and scores as that checkpoint does
/// (a run trained to that iteration, seeded alike, has the same weights).
#[test]
fn infer_of_a_run_writing_a_checkpoint_every_iteration_scores_one_whole_checkpoint() {
    let tmp = cora();
    let d = tmp.path();
    let fg = ["--no-tui", "--full-batch", "--hidden", "16", "--seed", "3", "--workers", "2"];
    let live = [&["train", "cora", "--run", "live", "--epochs", "100000", "--checkpoint-every", "1"][..], &fg].concat();
    let mut drv = Driver::start(d, &live);
    let trainers = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch"));
    let mut scored = Vec::new();
    for round in 0..3 {
        for workers in [None, Some("1"), Some("2")] {
            let out = d.join(format!("live-{round}-{}.safetensors", workers.unwrap_or("0")));
            let mut args = vec!["infer", "live", "--out", out.to_str().unwrap()];
            args.extend(workers.map(|w| ["--workers", w]).into_iter().flatten());
            args.push("--json");
            let o = leapgnn(d, &args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{args:?}: {err}");
            // The run's own workers hold their marks in its directory: no call for alarm.
            assert!(!err.contains("WARN"), "{args:?}: {err}");
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(r["nodes"], 2708, "{r}");
            scored.push((r["checkpoint_iteration"].as_u64().unwrap(), out));
        }
    }
    signal(drv.child.id(), "TERM");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let pids: Vec<u32> = trainers.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(10)), Vec::<u32>::new(), "workers left behind");
    let runs = d.join("runs/live");
    let left: Vec<_> = walk(&runs).into_iter().filter(|p| p.to_string_lossy().contains(".infer-")).collect();
    assert!(left.is_empty(), "copies left in {}: {left:?}", runs.display());
    scored.sort();
    // The first and the last checkpoint scored (each trained again), or one if all scored the same.
    for (it, out) in [scored.first().unwrap(), scored.last().unwrap()] {
        let run = format!("at-{it}");
        if !d.join("runs").join(&run).exists() {
            let epochs = it.to_string();
            json(d, &[&["train", "cora", "--run", &run, "--epochs", &epochs][..], &fg].concat());
            json(d, &["infer", &run, "--out", d.join(format!("{run}.safetensors")).to_str().unwrap()]);
        }
        let want = load(&d.join(format!("{run}.safetensors")));
        let got = load(out);
        assert_eq!(got.u32s["prediction"], want.u32s["prediction"], "{}: iteration {it}'s predictions", out.display());
        let e = max_abs_diff(&got.f32s["probs"].1, &want.f32s["probs"].1);
        assert!(e <= 1e-4, "{}: probs differ from iteration {it}'s by {e}", out.display());
    }
}

/// An infer killed (SIGKILL) could not remove its copy of the checked
/// weights from the run's directory, where it stayed for ever. The next
/// infer of the run removes it, and keeps the copy of an infer still running
/// (which holds the copy's lock: no pid is trusted, which the system may
/// have given to another process since); a `train --resume` removes it too.
#[test]
fn the_copy_of_an_infer_killed_is_removed_by_the_next_and_a_live_ones_is_kept() {
    let tmp = cora();
    let d = tmp.path();
    json(d, &["train", "cora", "--no-tui", "--full-batch", "--epochs", "2", "--hidden", "16", "--run", "k"]);
    let run = d.join("runs/k");
    let copies = || -> Vec<std::path::PathBuf> {
        let is_copy = |p: &std::path::PathBuf| p.file_name().unwrap().to_string_lossy().starts_with(".infer-");
        walk(&run).into_iter().filter(is_copy).collect()
    };
    let pause = [("LEAPGNN_TEST_PAUSE", "infer-weights-copied")];
    let paused = |name: &str| {
        let out = d.join(name);
        let mut drv = Driver::start_env(d, &["infer", "k", "--workers", "2", "--out", out.to_str().unwrap()], &pause);
        drv.wait_line(Duration::from_secs(60), |l| l.contains("test pause: infer-weights-copied"));
        drv
    };
    let mut killed = paused("killed.safetensors");
    let left = copies();
    assert_eq!(left.len(), 1, "one copy for the workers: {left:?}");
    signal(killed.child.id(), "KILL");
    killed.child.wait().unwrap();
    assert_eq!(copies(), left, "the killed infer's copy is there until the next infer");

    let mut live = paused("live.safetensors");
    let now = copies();
    assert!(!now.contains(&left[0]), "the killed infer's copy is left: {now:?}");
    assert_eq!(now.len(), 1, "the live infer's copy: {now:?}");
    json(d, &["infer", "k", "--out", d.join("in-process.safetensors").to_str().unwrap()]);
    assert_eq!(copies(), now, "the copy of an infer still running was removed");
    signal(live.child.id(), "KILL");
    live.child.wait().unwrap();
    json(d, &["train", "--resume", "k", "--epochs", "3", "--no-tui"]);
    assert_eq!(copies(), Vec::<std::path::PathBuf>::new(), "train --resume left the killed infer's copy");
}

/// Each inference worker checks its own share against its own host before
/// loading the weights: workers started under `prlimit --as` (as an ssh
/// host's or a Slurm node's limit, which the driver cannot read) with a
/// model whose estimate is over it refuse at once, naming the worker, the
/// host and what an inference can change (not the model: no --hidden, no
/// --mode), and the driver fails naming the worker (before, the worker
/// aborted on an allocation). The same inference without the limit scores.
#[test]
fn infer_workers_refuse_a_share_over_their_own_hosts_limit() {
    use leapgnn::train::distributed::infer_distributed;
    let tmp = cora();
    let d = tmp.path();
    // A pass without gradients over half of Cora at hidden 16384 with its embeddings: an estimated 1.2 GiB.
    json(d, &["train", "cora", "--no-tui", "--epochs", "1", "--hidden", "16384", "--run", "big"]);
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    // 1 GiB of address space: the worker starts and builds its model (180 MiB of weights) under it.
    let capped = wrapped(d, "capped-worker.sh", &format!("exec prlimit --as={} '{bin}' \"$@\"\n", 1u64 << 30));
    let plain = leapgnn::cluster::LocalLauncher::new(bin, vec!["--data-dir".into(), d.display().to_string()]);
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let launch = |launcher| local_launch(launcher, &interrupted);
    let out = d.join("big.safetensors");
    let opts = with_embeddings_to(&out);
    let data = leapgnn::DataDir::new(d);
    let e = infer_distributed(&data, "big", &opts, Some(2), &launch(&capped)).expect_err("over the workers' limit");
    let e = format!("{e:#}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    for needle in [
        format!("on {host}: infer needs an estimated"),
        format!("raise the limit on {host} (ulimit -v, prlimit --as"),
        "more --workers or more machines (--cluster), omit --embeddings 0".into(),
    ] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    assert!(dist_support::names_its_workers_limit(&e, host), "{e}");
    // The run's model is fixed: nothing advises changing it.
    assert!(!e.contains("--hidden") && !e.contains("--mode"), "{e}");
    assert!(!out.exists());
    infer_distributed(&data, "big", &opts, Some(2), &launch(&plain)).expect("the inference succeeds");
    assert_eq!(load(&out).u32s["node_id"].len(), 2708);
}

/// Two inference workers on one host share its memory: where its
/// MemAvailable (read by the workers only, `LEAPGNN_TEST_MEM_AVAILABLE`)
/// holds one worker's share and a half, each share fits alone (the old
/// check held each to its own and scored) but not the two together: refused,
/// naming the two on the host and advising what local workers can do
/// (not "hosts with --cluster" whatever the launcher) in one sentence: fewer
/// of them on the host (it advised more --workers too). With three shares'
/// worth free, the inference scores.
#[test]
fn infer_workers_on_one_host_hold_their_shares_together() {
    use leapgnn::train::distributed::infer_distributed;
    use leapgnn::util::MEM_AVAILABLE_TEST_VAR;
    const MIB: u64 = 1 << 20;
    let tmp = cora();
    let d = tmp.path();
    json(d, &["train", "cora", "--no-tui", "--epochs", "1", "--hidden", "256", "--run", "r"]);
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    let out = d.join("r.safetensors");
    let opts = with_embeddings_to(&out);
    let data = leapgnn::DataDir::new(d);
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let infer_with_free = |name: &str, free: u64| {
        let body = format!("exec env {MEM_AVAILABLE_TEST_VAR}={free} '{bin}' \"$@\"\n");
        let launcher = wrapped(d, &format!("{name}.sh"), &body);
        infer_distributed(&data, "r", &opts, Some(2), &local_launch(&launcher, &interrupted)).map(|_| ())
    };
    // 1 MiB free: every share is over it; the refusal gives one share's figure.
    let e = format!("{:#}", infer_with_free("none", MIB).expect_err("no share fits in 1 MiB"));
    let after = "infer needs an estimated ";
    let at = e.find(after).unwrap_or_else(|| panic!("no `{after}` in {e}")) + after.len();
    let share: u64 = e[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();
    assert!(share > 1, "{e}");

    let e = format!("{:#}", infer_with_free("tight", share * 3 / 2 * MIB).expect_err("two shares are over"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    for needle in [
        format!(" MiB for the 2 workers on {host} together but {} MiB are available there", share * 3 / 2),
        "(MemAvailable in /proc/meminfo)".into(),
        format!(
            "free memory on {host}, run fewer --workers (or --cluster to spread them over machines), \
             omit --embeddings 0, or infer on hosts with more memory"
        ),
    ] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    // One sentence: fewer workers here, not also more of them (it advised both).
    assert!(!e.contains("hosts with --cluster") && !e.contains("more --workers"), "{e}");
    assert!(!out.exists());
    infer_with_free("roomy", share * 3 * MIB).expect("both shares fit");
    assert_eq!(load(&out).u32s["node_id"].len(), 2708);
}

/// Inference of every node's probabilities and first-layer embeddings to `out` (safetensors).
fn with_embeddings_to(out: &Path) -> leapgnn::train::infer::InferOptions {
    leapgnn::train::infer::InferOptions {
        out: Some(out.to_path_buf()),
        format: leapgnn::train::infer::OutputFormat::Safetensors,
        embeddings: Some(0),
        nodes: None,
        device: None,
        memory_limit: None,
    }
}

/// How a test starts inference workers through `launcher`: 30 s comm
/// timeout, the driver on a free 127.0.0.1 port, never stopped.
fn local_launch<'a>(
    launcher: &'a dyn leapgnn::cluster::Launcher,
    interrupted: &'a std::sync::atomic::AtomicBool,
) -> leapgnn::train::distributed::InferLaunch<'a> {
    fn never() -> bool {
        false
    }
    leapgnn::train::distributed::InferLaunch {
        launcher,
        interrupted,
        stop_requested: &never,
        comm_timeout: Duration::from_secs(30),
        driver_bind: "127.0.0.1:0".parse().unwrap(),
        keep_remote: false,
        encrypt: false,
    }
}
