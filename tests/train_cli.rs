//! `leapgnn train` end to end on small generated datasets: determinism,
//! checkpoint/resume exactness, the JSON contract, bad input.

mod train_support;

use std::collections::HashSet;
use std::process::Command;
use train_support::{
    Tiny, fails, json, leapgnn, leapgnn_capped, losses, names_in, refused_capped, weights, write_tiny,
};

const BASE: &[&str] = &["train", "tiny", "--batch-size", "64", "--fanout", "5,5", "--hidden", "32"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    BASE.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn same_seed_gives_identical_loss_curves_and_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    for run in ["a", "b"] {
        json(d, &args(&["--epochs", "3", "--seed", "5", "--run", run]));
    }
    json(d, &args(&["--epochs", "3", "--seed", "6", "--run", "c"]));
    let (a, b, c) = (losses(d, "a"), losses(d, "b"), losses(d, "c"));
    assert_eq!(a.len(), 15, "3 epochs x 5 iterations (300 roots / 64)");
    assert_eq!(a, b, "same seed, different loss curve");
    assert_ne!(a, c, "another seed gave the same loss curve");
    assert_eq!(weights(d, "a"), weights(d, "b"));
    assert!(a.last() < a.first(), "loss did not go down: {a:?}");
}

#[test]
fn resumed_runs_end_with_the_weights_of_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let straight = json(d, &args(&["--epochs", "4", "--model", "gat", "--run", "straight"]));
    // Stopped at an epoch boundary, then continued with more epochs.
    json(d, &args(&["--epochs", "2", "--model", "gat", "--run", "halves"]));
    let resumed = json(d, &["train", "--resume", "halves", "--epochs", "4"]);
    // Interrupted mid-epoch (iteration 7 of 20, checkpoints every 3), then resumed.
    json(
        d,
        &args(&["--epochs", "4", "--model", "gat", "--checkpoint-every", "3", "--run", "mid", "--stop-after", "7"]),
    );
    let mid = json(d, &["train", "--resume", "mid"]);
    assert_eq!(weights(d, "halves"), weights(d, "straight"));
    assert_eq!(weights(d, "mid"), weights(d, "straight"));
    for s in [&resumed, &mid] {
        assert_eq!(s["final_loss"], straight["final_loss"]);
        assert_eq!(s["test_accuracy"], straight["test_accuracy"]);
        assert_eq!(s["epochs"], 4);
    }
    // The resumed run's metrics hold each iteration once, with the same losses.
    assert_eq!(losses(d, "mid"), losses(d, "straight"));
    let ck: Vec<String> = std::fs::read_dir(d.join("runs/mid/checkpoint"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ck.len(), 3, "old checkpoint files were not cleaned up: {ck:?}");
}

#[test]
fn json_summary_follows_the_contract_and_metrics_have_one_record_per_iteration() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let s = json(d, &args(&["--epochs", "2", "--model", "sage-max", "--eval-fanout", "all", "--run", "r1"]));
    for key in [
        "run",
        "strategy",
        "workers",
        "epochs",
        "test_accuracy",
        "best_val_accuracy",
        "final_loss",
        "epoch_seconds",
        "rows",
        "miss_rate",
        "bytes",
        "time_steps",
    ] {
        assert!(s.get(key).is_some(), "summary lacks `{key}`: {s}");
    }
    assert_eq!(s["run"], "r1");
    assert_eq!(s["strategy"], "model-centric");
    assert_eq!(s["workers"], 1);
    assert_eq!(s["epoch_seconds"].as_array().unwrap().len(), 2);
    assert_eq!(s["miss_rate"], 0.0);
    for cat in ["features", "gradients", "migration", "activations", "control"] {
        assert_eq!(s["bytes"][cat], 0, "one worker sends nothing over a socket");
    }
    let rows = &s["rows"];
    assert!(rows["requested"].as_u64().unwrap() > 0);
    assert_eq!(rows["requested"], rows["local"]);
    assert!(s["test_accuracy"].as_f64().unwrap() > 0.6, "tiny planted classes not learned: {s}");

    let text = std::fs::read_to_string(d.join("runs/r1/metrics.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 10);
    let keys: HashSet<(u64, u64)> =
        recs.iter().map(|r| (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap())).collect();
    assert_eq!(keys.len(), 10, "duplicate (epoch, iteration) records");
    let roots: u64 = recs.iter().filter(|r| r["epoch"] == 0).map(|r| r["roots"].as_u64().unwrap()).sum();
    assert_eq!(roots, 300, "an epoch covers every train root once");
    let requested: u64 = recs.iter().map(|r| r["rows"]["requested"].as_u64().unwrap()).sum();
    assert_eq!(requested, rows["requested"].as_u64().unwrap());
    assert!(recs.iter().all(|r| r["time_step"] == 0 && r["worker"] == 0));
    for f in ["config.json", "summary.json", "checkpoint/state.json"] {
        assert!(d.join("runs/r1").join(f).is_file(), "{f} missing");
    }
}

#[test]
fn checkpoint_weights_are_safetensors_with_pytorch_names_and_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "1", "--model", "gcn", "--run", "g"]));
    let bytes = weights(d, "g");
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<(String, Vec<usize>)> = st.tensors().into_iter().map(|(n, v)| (n, v.shape().to_vec())).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            ("layers.0.bias".to_string(), vec![32]),
            ("layers.0.lin.weight".to_string(), vec![32, 16]),
            ("layers.1.bias".to_string(), vec![3]),
            ("layers.1.lin.weight".to_string(), vec![3, 32]),
        ]
    );
    assert!(st.tensors().iter().all(|(_, v)| v.dtype() == safetensors::Dtype::F32));
}

#[test]
fn bad_input_fails_with_one_error_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    write_tiny(d, "unlabelled", Tiny { classes: 0, ..Tiny::default() });
    write_tiny(d, "nosplit", Tiny { with_splits: false, ..Tiny::default() });
    let cases: &[(&[&str], &str)] = &[
        (&["--layers", "3"], "--layers 3"),
        (&["--eval-fanout", "5,5,5"], "--eval-fanout"),
        (&["--model", "gat", "--heads", "5"], "--heads"),
        (&["--dropout", "1.5"], "--dropout"),
        (&["--lr", "0"], "--lr"),
        (&["--workers", "3", "--parts", "2"], "--parts 2 must be at least --workers 3"),
        (&["--strategy", "p3", "--model", "gat"], "--model gat cannot"),
        (&["--time-steps", "auto"], "does not apply to --strategy model-centric"),
        (
            &["--device", "cuda"],
            "--device cuda: this leapgnn was built without CUDA; build one with `scripts/build-cuda.sh`",
        ),
        (&["--device", "cuda:1"], "--device cuda:1: this leapgnn was built without CUDA"),
        (&["--device", "cuda:x"], "--device cuda:x: unknown value; expected cpu, cuda or cuda:N"),
        (&["--device", "gpu"], "--device gpu: unknown value"),
        // 2^44 MiB is 2^64 bytes: it used to wrap to no cache at all.
        (&["--cache-mb", "17592186044416"], "--cache-mb 17592186044416 is more bytes"),
    ];
    for (extra, needle) in cases {
        let line = fails(d, &args(extra), 2);
        assert!(line.contains(needle), "{extra:?}: {line}");
    }
    let line = fails(d, &["train", "tiny", "--fanout", "5,0"], 2);
    assert!(line.contains("bad fanout `0`"), "{line}");
    let line = fails(d, &["train", "tiny", "--model", "gin"], 2);
    assert!(line.contains("invalid value 'gin' for '--model") && line.contains("sage-max"), "{line}");
    let line = fails(d, &["train", "tiny", "--batch-size", "0"], 2);
    assert!(line.contains("--batch-size"), "{line}");
    let line = fails(d, &["train", "unlabelled", "--epochs", "1"], 2);
    assert!(line.contains("no labels"), "{line}");
    let line = fails(d, &["train", "nosplit", "--epochs", "1"], 2);
    assert!(line.contains("no labelled train nodes"), "{line}");
    let line = fails(d, &["train", "no-such-dataset"], 2);
    assert!(line.contains("no-such-dataset"), "{line}");
    let line = fails(d, &["train", "--resume", "never-ran"], 2);
    assert!(line.contains("never-ran"), "{line}");
    json(d, &args(&["--epochs", "1", "--run", "once"]));
    let line = fails(d, &args(&["--epochs", "1", "--run", "once"]), 2);
    assert!(line.contains("already exists"), "{line}");
    let line = fails(d, &["train", "--resume", "once", "--lr", "0.1"], 2);
    assert!(line.contains("--lr"), "{line}");
}

#[test]
fn a_run_stopped_before_its_first_evaluation_reports_no_accuracy() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    // 5 iterations per epoch: stopped at 2, before the epoch's evaluation.
    let s = json(d, &args(&["--epochs", "2", "--run", "early", "--stop-after", "2"]));
    assert!(s["test_accuracy"].is_null() && s["best_val_accuracy"].is_null(), "{s}");
    // No epoch finished, so no epoch loss either (it read 0.0, a perfect fit).
    assert!(s["final_loss"].is_null(), "{s}");
    assert_eq!(s["iterations"], 2, "{s}");
    let s = json(d, &["train", "--resume", "early"]);
    assert!(s["test_accuracy"].as_f64().is_some_and(|a| a > 0.0), "{s}");
    assert!(s["final_loss"].as_f64().is_some_and(|l| l > 0.0), "{s}");
}

#[test]
fn a_damaged_partition_is_refused_when_a_run_first_uses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let out = leapgnn(d, &["partition", "tiny", "--parts", "2", "--method", "metis"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // One flipped bit in a feature row: the archive still opens, only the checksum can tell.
    let part = d.join("tiny/parts/metis-2/part-1.lgnn");
    let mut b = std::fs::read(&part).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    std::fs::write(&part, b).unwrap();
    let out = leapgnn(d, &args(&["--workers", "2", "--epochs", "1"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "trained on a damaged partition: {err}");
    assert!(err.contains("checksum mismatch") && err.contains("part-1.lgnn"), "{err}");
}

#[test]
fn nan_loss_stops_the_run_naming_epoch_and_iteration() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "poisoned", Tiny { poisoned: true, ..Tiny::default() });
    // One layer: a hidden ReLU would turn NaN into 0 (candle's relu is max(x, 0)).
    let line = fails(d, &["train", "poisoned", "--fanout", "5", "--batch-size", "64", "--epochs", "2"], 1);
    assert!(line.contains("epoch 1, iteration 1"), "{line}");
    assert!(line.contains("NaN"), "{line}");
    let out = leapgnn(d, &["train", "poisoned", "--fanout", "5", "--epochs", "1", "--json"]);
    assert!(out.stdout.is_empty(), "a failed run printed a summary");
}

#[test]
fn train_without_a_name_generates_and_learns_the_built_in_synthetic_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let s = json(tmp.path(), &["train", "--epochs", "1"]);
    assert!(s["run"].as_str().unwrap().starts_with("synthetic-small-sage-"), "{s}");
    assert!(s["test_accuracy"].as_f64().unwrap() > 0.8, "{s}");
    assert!(tmp.path().join("synthetic-small/dataset.lgnn").is_file());
}

#[test]
fn local_workers_share_the_cores_unless_the_operator_sets_their_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    // Each worker's compute threads, by rank, from its line "[worker r] pid P, mesh listening on A, N compute threads".
    let threads = |run: &str, preset: Option<&str>| -> Vec<usize> {
        let mut c = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
        c.arg("--data-dir").arg(d).args(args(&["--workers", "3", "--epochs", "1", "--json", "--run", run]));
        match preset {
            Some(t) => c.env("RAYON_NUM_THREADS", t),
            None => c.env_remove("RAYON_NUM_THREADS"),
        };
        let out = train_support::bounded::run_within(&mut c, train_support::bounded::RUN_LIMIT, run);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let mut by_rank = vec![0; 3];
        for l in err.lines().filter(|l| l.contains("mesh listening on")) {
            let rank: usize = l.strip_prefix("[worker ").unwrap().split(']').next().unwrap().parse().unwrap();
            let n = l.rsplit(", ").next().unwrap().split(' ').next().unwrap();
            by_rank[rank] = n.parse().unwrap_or_else(|_| panic!("no thread count in {l:?}"));
        }
        by_rank
    };
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(threads("shared", None), vec![leapgnn::cluster::launcher::threads_per_worker(cores, 3); 3]);
    assert_eq!(threads("preset", Some("3")), vec![3; 3], "the operator's RAYON_NUM_THREADS is kept");
}

/// A checkpoint's `state.json` names its files; a hand-edited one that names
/// a file outside the checkpoint directory is refused (exit 2) by `infer` and
/// `--resume`, never opened (nor shipped to ssh hosts on a resume).
#[test]
fn a_state_json_naming_a_file_outside_its_checkpoint_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "1", "--run", "r"]));
    let state = d.join("runs/r/checkpoint/state.json");
    let good = std::fs::read_to_string(&state).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let weights = v["weights"].as_str().unwrap().to_string();
    for bad in ["../../../etc/passwd", "/etc/passwd", "sub/model.safetensors"] {
        v["weights"] = bad.into();
        std::fs::write(&state, serde_json::to_vec(&v).unwrap()).unwrap();
        for cmd in [&["infer", "r"][..], &["train", "--resume", "r", "--epochs", "2"]] {
            let line = fails(d, cmd, 2);
            assert!(line.contains(&format!("it names `{bad}`")) && line.contains("state.json"), "{cmd:?}: {line}");
        }
    }
    v["weights"] = weights.into();
    std::fs::write(&state, serde_json::to_vec(&v).unwrap()).unwrap();
    json(d, &["train", "--resume", "r", "--epochs", "2"]);
}

/// A `state.json` that does not parse (emptied, truncated, bytes that are
/// not JSON, a field of the wrong type) is refused by `infer` and `--resume`
/// with exit 2 naming it and saying what to do; the message gave only
/// serde's `EOF while parsing a value at line 1 column 0`.
#[test]
fn a_damaged_state_json_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "1", "--run", "r"]));
    let state = d.join("runs/r/checkpoint/state.json");
    let good = std::fs::read(&state).unwrap();
    let wrong_type = String::from_utf8(good.clone()).unwrap().replacen("\"version\": 1", "\"version\": \"one\"", 1);
    for bad in [&b""[..], &good[..good.len() / 2], &[0xff, 0x00, 0x7b][..], wrong_type.as_bytes()] {
        std::fs::write(&state, bad).unwrap();
        for cmd in [&["infer", "r"][..], &["train", "--resume", "r", "--epochs", "2"]] {
            let line = fails(d, cmd, 2);
            assert!(
                line.contains("state.json") && line.contains("put back the run's own state.json"),
                "{cmd:?}: {line}"
            );
        }
    }
    std::fs::write(&state, &good).unwrap();
    json(d, &["train", "--resume", "r", "--epochs", "2"]);
}

/// A hand-edited `hidden` in `state.json` is refused against the weights
/// file's size (exit 2, naming state.json) by `infer` and `--resume`, before
/// a model that size is built: 3 layers at hidden 40000 would be a 6.4 GB
/// matrix, from a checkpoint of a few kilobytes.
#[test]
fn a_state_json_describing_a_bigger_model_than_its_weights_is_refused_before_building_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "1", "--fanout", "3,3,3", "--run", "r"]));
    let state = d.join("runs/r/checkpoint/state.json");
    let good = std::fs::read_to_string(&state).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["config"]["hidden"] = 40000.into();
    std::fs::write(&state, serde_json::to_vec(&v).unwrap()).unwrap();
    for cmd in [&["infer", "r"][..], &["train", "--resume", "r", "--epochs", "2"]] {
        let line = fails(d, cmd, 2);
        assert!(
            line.contains("hidden 40000") && line.contains("state.json") && line.contains("bytes"),
            "{cmd:?}: {line}"
        );
    }
    std::fs::write(&state, good).unwrap();
    json(d, &["train", "--resume", "r", "--epochs", "2"]);
}

/// A model too big for the memory the process may use is refused before it
/// is built (exit 2, one error line with the figures and what to do), where
/// the model's set-up used to abort the process on a failed allocation
/// ('memory allocation of 6400000000 bytes failed', SIGABRT): hidden 40000
/// over 3 layers is 25 GB of weights, gradient and Adam state, here under a
/// 2 GiB address-space limit. The same limit trains the usual hidden 32.
#[test]
fn a_model_too_big_for_memory_is_refused_before_it_is_built() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let cap = 2 << 30;
    for workers in ["1", "2"] {
        let huge = args(&["--epochs", "1", "--fanout", "3,3,3", "--hidden", "40000", "--workers", workers]);
        refused_capped(
            d,
            &huge,
            cap,
            &["error: ", "--hidden 40000 --layers 3", "MiB", "RLIMIT_AS", "give a smaller --hidden"],
        );
    }
    let small = args(&["--epochs", "1", "--json"]);
    let out = leapgnn_capped(d, &small, cap);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A run whose estimated peak does not fit under the address-space limit
/// (`ulimit -v`, `prlimit --as`) is refused before it starts (exit 2, naming
/// RLIMIT_AS and what to change). Full-graph, on one worker and on two (each
/// worker process inherits the limit): the preflight compared the estimate
/// with MemAvailable alone. Mini-batch: the model check counted the weights
/// alone. Both runs died on a failed allocation. --hidden 40000 over 16
/// features is 12 MB of weights, which fit; a layer over 4,000 rows is
/// 640 MB, held several times. The same limit trains the usual widths, and
/// says once that its check compared resident estimates with the limit on
/// address space, which mapped files, stacks and arenas also take.
#[test]
fn runs_over_the_address_space_limit_are_refused_before_they_start() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny { nodes: 4000, ..Tiny::default() });
    // The full-graph estimate needs the partition (which worker owns what).
    json(d, &["partition", "tiny", "--parts", "2"]);
    let cap = 2 << 30;
    for workers in ["1", "2"] {
        let wide = ["train", "tiny", "--full-batch", "--epochs", "1", "--hidden", "40000", "--workers", workers];
        let needles = ["error: ", "--mode full-graph needs", "2048 MiB are available to each worker", "RLIMIT_AS"];
        refused_capped(d, &wide, cap, &[&needles[..], &["prlimit --as", "a smaller --hidden"]].concat());
    }
    let wide = ["train", "tiny", "--epochs", "1", "--batch-size", "4000", "--fanout", "5,5", "--hidden", "40000"];
    let needles =
        ["error: ", "--batch-size 4000 --hidden 40000", "sampled layers", "2048 MiB are available", "RLIMIT_AS"];
    refused_capped(d, &wide, cap, &[&needles[..], &["give a smaller --batch-size, --hidden or --fanout"]].concat());
    for usual in [&["--full-batch", "--hidden", "32"][..], &["--fanout", "5,5", "--hidden", "32"]] {
        let out = leapgnn_capped(d, &[&["train", "tiny", "--epochs", "1", "--json"][..], usual].concat(), cap);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{usual:?}: {err}");
        // What the check compared, said once: resident estimates, not the address space the limit bounds.
        let said = "2048 MiB of address space (this process's address-space limit, RLIMIT_AS): the memory checks \
                    compared it with estimates of resident memory";
        assert_eq!(err.matches(said).count(), 1, "{usual:?}: {err}");
    }
}

/// The figure a mini-batch refusal gives as `(N MiB per worker`.
fn estimate_per_worker(refusal: &str) -> u64 {
    refusal
        .split(" MiB per worker")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `(N MiB per worker` in {refusal}"))
}

/// P3 holds every worker's batch at once, each with a dense slice of its
/// input rows' columns: on Facebook (4714 sparse columns) its workers peaked
/// at 445 MiB where the preflight, counting only the layers a batch's owner
/// runs, said 90. The estimate a refusal names must cover the peak of the
/// same run.
#[test]
fn the_p3_memory_estimate_covers_its_workers_peak() {
    let tmp = facebook();
    let d = tmp.path();
    let run = ["train", "facebook", "--strategy", "p3", "--workers", "2", "--epochs", "1", "--hidden", "16"];
    let e = fails(d, &[&run[..], &["--memory-limit-mb", "40"]].concat(), 2);
    let per_worker = estimate_per_worker(&e);
    let s = json(d, &run);
    let peaks: Vec<u64> = s["peak_rss_bytes"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
    assert_eq!(peaks.len(), 2, "{s}");
    for peak in peaks {
        assert!(peak >> 20 <= per_worker, "a worker peaked at {} MiB, over the estimate {per_worker} MiB", peak >> 20);
    }
}

/// The driver of local workers stays beside them: a mini-batch run whose
/// workers alone just fit `--memory-limit-mb` is refused, naming the driver.
/// The old check held only the workers to it, and started the run.
#[test]
fn local_workers_are_held_to_the_memory_limit_with_their_driver() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let run = ["train", "tiny", "--workers", "2", "--epochs", "1", "--hidden", "32"];
    let e = fails(d, &[&run[..], &["--memory-limit-mb", "10"]].concat(), 2);
    let per_worker = estimate_per_worker(&e);
    // Worker 0's figure is the larger (it counts the mapped archive): both fit in twice it.
    let workers = (2 * per_worker).to_string();
    let e = fails(d, &[&run[..], &["--memory-limit-mb", &workers]].concat(), 2);
    for needle in ["for the 2 workers and the driver on this machine together", "--memory-limit-mb"] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
    assert!(!d.join("runs").exists() || std::fs::read_dir(d.join("runs")).unwrap().next().is_none());
}

/// The driver stays beside a full-graph run's local workers too: under a
/// `--memory-limit-mb` its 2 workers alone fit (their figure, the lower bound
/// read from one refusal, plus far more than Tiny's halo adds) but not with
/// the driver's 64 MiB, the run is refused (exit 2) naming the driver, before
/// the graph is partitioned or a run created. The old preflight held only the
/// workers to the limit, and started the run.
#[test]
fn a_full_graph_run_is_held_to_the_memory_limit_with_its_driver() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let run = ["train", "tiny", "--full-batch", "--workers", "2", "--epochs", "1", "--hidden", "32"];
    let e = fails(d, &[&run[..], &["--memory-limit-mb", "10"]].concat(), 2);
    let workers = mib_before(&e, " MiB (2 worker(s), each an even share");
    let limit = (workers + 32).to_string();
    let e = fails(d, &[&run[..], &["--memory-limit-mb", &limit]].concat(), 2);
    for needle in ["for the 2 workers and the driver on this machine together", "(--memory-limit-mb)"] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
    assert!(!d.join("tiny/parts").exists(), "a refused run partitioned the graph");
    assert!(!d.join("runs").exists() || std::fs::read_dir(d.join("runs")).unwrap().next().is_none());
}

/// `train --resume` of a multi-worker run is held to `--memory-limit-mb` as a
/// new run is, mini-batch and full-graph alike: refused with exit 2 before a
/// worker starts, its checkpoint left where it was. The old driver checked
/// only new runs, and resumed. A single worker's resume is held to it too,
/// and every refusal advises only what a resume can change: the old advice
/// told it to give a smaller --hidden, which a resume refuses.
#[test]
fn a_resumed_multi_worker_run_is_held_to_the_memory_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let runs = [("mb", &["--workers", "2"][..]), ("fg", &["--workers", "2", "--full-batch"]), ("one", &[])];
    for (run, mode) in runs {
        let start = [&["train", "tiny", "--epochs", "1", "--hidden", "32", "--run", run][..], mode];
        let out = leapgnn(d, &[&start.concat()[..], &["--no-tui"][..]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let state = d.join("runs").join(run).join("checkpoint/state.json");
        let before = std::fs::read(&state).unwrap();
        let e = fails(d, &["train", "--resume", run, "--epochs", "2", "--no-tui", "--memory-limit-mb", "10"], 2);
        assert!(e.contains("--memory-limit-mb") && e.contains("MiB"), "{run}: {e}");
        assert_eq!(std::fs::read(&state).unwrap(), before, "{run}: the refused resume moved the checkpoint");
        // The flags that size the run are advised for a new run, not for the resume.
        let advice = &e[e.rfind("MiB are available").unwrap_or_else(|| panic!("{run}: {e}"))..];
        let (for_resume, for_new_run) =
            advice.split_once("start a new run (without --resume)").unwrap_or_else(|| panic!("{run}: {e}"));
        assert!(for_resume.contains("a higher --memory-limit-mb"), "{run}: {e}");
        for flag in ["--hidden", "--batch-size", "--fanout", "--layers", "--cluster", "--mode"] {
            assert!(!for_resume.contains(flag), "{run}: the resume is advised {flag}: {e}");
        }
        assert!(for_new_run.contains("a smaller") && for_new_run.contains("--hidden"), "{run}: {e}");
    }
}

/// A full-graph run of several workers that cannot fit even with the graph
/// shared evenly is refused before the graph is partitioned, as README
/// promises: one error line (no `creating .../parts/metis-2` before it) and
/// no partition written. The old driver partitioned first.
#[test]
fn a_full_graph_run_that_cannot_fit_is_refused_before_partitioning() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let e =
        fails(d, &["train", "tiny", "--full-batch", "--workers", "2", "--epochs", "1", "--memory-limit-mb", "10"], 2);
    for needle in ["--mode full-graph needs at least", "2 worker(s), each an even share", "10 MiB are available"] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
    assert!(!d.join("tiny/parts").exists(), "a refused run partitioned the graph");
    // What fits is partitioned and trained.
    let s = json(d, &["train", "tiny", "--full-batch", "--workers", "2", "--epochs", "1"]);
    assert_eq!(s["epochs"].as_u64(), Some(1), "{s}");
    assert!(d.join("tiny/parts").exists());
}

/// A full-graph run whose workers fit without their halo rows but not with
/// them is refused (exit 2, the partition's estimate named) with no
/// partition written: its halos are checked on the partition once it is cut,
/// before anything but the partitioners' lock file is written. The old driver wrote Facebook's
/// `parts/metis-2` (3 MB) and only then refused. A limit of the whole MiB
/// just above the refused estimate trains, and keeps its partition.
#[test]
fn a_full_graph_run_refused_for_its_halos_writes_no_partition() {
    let tmp = facebook();
    let d = tmp.path();
    let run = ["train", "facebook", "--full-batch", "--workers", "2", "--epochs", "1", "--no-tui"];
    let together = " MiB for the 2 workers and the driver on this machine together";
    // 100 MiB holds the weights (checked first) but not the graph: the lower bound is named.
    let bound = mib_before(&fails(d, &[&run[..], &["--memory-limit-mb", "100"]].concat(), 2), together);
    let e = fails(d, &[&run[..], &["--memory-limit-mb", &bound.to_string()]].concat(), 2);
    for needle in ["--mode full-graph needs an estimated", &format!("{bound} MiB are available (--memory-limit-mb)")] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
    // Nothing, not even the partitioners' lock file or the directory it was made in.
    let parts = d.join("facebook/parts");
    let left = parts.exists().then(|| names_in(&parts));
    assert_eq!(left, None, "a run refused for its halos left {}", parts.display());
    let need = mib_before(&e, together);
    assert!(need > bound, "{e}");
    let s = json(d, &[&run[..], &["--memory-limit-mb", &need.to_string()]].concat());
    assert_eq!(s["epochs"].as_u64(), Some(1), "{s}");
    assert!(parts.join("metis-2/manifest").is_file());
}

/// A data directory holding Facebook, imported from the shared datasets.
fn facebook() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let fb = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/musae-facebook");
    json(tmp.path(), &["download", "facebook", "--from", fb.to_str().unwrap(), "--format", "musae"]);
    tmp
}

/// The figure in MiB just before `needle` in the refusal `e`.
fn mib_before(e: &str, needle: &str) -> u64 {
    let at = e.find(needle).unwrap_or_else(|| panic!("no `{needle}` in {e}"));
    e[..at].rsplit(['(', ' ']).next().unwrap().parse().unwrap_or_else(|_| panic!("{needle}: {e}"))
}

/// The local workers of a mini-batch run share this machine's memory, so
/// they are held against it together: under a `--memory-limit-mb` that one
/// worker's estimate fits but four's sum does not, one worker trains and four
/// are refused (exit 2, one line naming 4 workers, the driver and their sum) before any
/// is started. The old check held one worker's share against the memory and
/// ignored the limit in mini-batch mode.
#[test]
fn local_mini_batch_workers_are_held_against_the_memory_together() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    fn run<'a>(workers: &'a str, limit: &'a str) -> [&'a str; 8] {
        ["train", "tiny", "--epochs", "1", "--workers", workers, "--memory-limit-mb", limit]
    }
    // The figures, from a refusal under a limit no worker fits in (the model's
    // weights do: well under a MiB).
    let e = fails(d, &run("4", "10"), 2);
    let (each, sum) = (
        mib_before(&e, " MiB per worker"),
        mib_before(&e, " MiB for the 4 workers and the driver on this machine together"),
    );
    assert!(each > 10 && sum > each, "{e}");
    let limit = (sum - 1).to_string();
    let one = json(d, &run("1", &limit));
    assert_eq!(one["epochs"].as_u64(), Some(1), "{one}");
    let e = fails(d, &run("4", &limit), 2);
    for needle in [
        format!("({each} MiB per worker, {sum} MiB for the 4 workers and the driver on this machine together)"),
        format!("but {limit} MiB are available (--memory-limit-mb)"),
        // Local workers are spread over machines with --cluster.
        "fewer --workers (or --cluster to spread them over machines)".into(),
    ] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    // Refused before the run's directory: the one worker's run is all there is.
    assert_eq!(std::fs::read_dir(d.join("runs")).unwrap().count(), 1);
}

/// On `wide`, 4000 nodes of 1024 features, runs `run(plain, limit)` and
/// `run(more, limit)` of 2 workers, first under
/// a 10 MiB limit to read their sums from the refusals, checks that `more`
/// adds `extra` MiB, then under a limit between the sums: `plain` trains and
/// `more` is refused before it starts. Returns that refusal.
fn between_the_sums(
    run: impl Fn(&str, &str) -> Vec<String>,
    (plain, more): (&str, &str),
    extra: std::ops::RangeInclusive<u64>,
) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "wide", Tiny { nodes: 4000, dim: 1024, ..Tiny::default() });
    let refusal =
        |flag: &str, limit: &str| fails(d, &run(flag, limit).iter().map(String::as_str).collect::<Vec<_>>(), 2);
    let sum = |e: String| mib_before(&e, " MiB for the 2 workers and the driver on this machine together");
    let (low, high) = (sum(refusal(plain, "10")), sum(refusal(more, "10")));
    assert!(extra.contains(&(high - low)), "{plain}: {low} MiB, {more}: {high} MiB, expected {extra:?} more");
    let limit = ((low + high) / 2).to_string();
    let s = json(d, &run(plain, &limit).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(s["epochs"].as_u64(), Some(1), "{s}");
    refusal(more, &limit)
}

/// A worker's `--cache-mb` feature cache is part of its memory estimate, as
/// much of it as the graph can fill: 4000 rows of 1024 floats (15.6 MiB) with
/// `--cache-mb 64` add 15.6 MiB per worker, not 64. Under a limit between the
/// two workers' sums with and without it, the run without a cache trains and
/// the one with it is refused naming the cache. The old estimate left the
/// cache out and trained both.
#[test]
fn the_feature_cache_counts_in_each_workers_memory() {
    let run = |cache: &str, limit: &str| {
        let a = ["train", "wide", "--epochs", "1", "--workers", "2", "--cache-mb", cache, "--memory-limit-mb", limit];
        a.map(String::from).to_vec()
    };
    // 2 x 15.6 MiB, rounded up in the sum.
    let e = between_the_sums(run, ("0", "64"), 31..=33);
    for needle in ["MiB of --cache-mb feature cache", "give a smaller --batch-size, --hidden, --cache-mb or --fanout"] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
}

/// pregather and leapgnn hold an iteration's input rows in a store, and with
/// `--prefetch on` the next iteration's too: two stores of the 4000 rows of
/// 1024 floats a layer of 1024 roots reads here, 31.25 MiB per worker, which
/// the estimate adds to model-centric's. Under a limit between the two, the
/// model-centric run trains and the leapgnn one is refused before it starts.
#[test]
fn pregathered_and_prefetched_rows_count_in_each_workers_memory() {
    let run = |strategy: &str, limit: &str| {
        let mut a = vec!["train", "wide", "--epochs", "1", "--workers", "2", "--memory-limit-mb", limit];
        a.extend(["--batch-size", "1024", "--fanout", "10,10", "--strategy", strategy]);
        if strategy == "leapgnn" {
            a.extend(["--prefetch", "on"]);
        }
        a.into_iter().map(String::from).collect()
    };
    // 2 workers x 2 stores x 4000 rows x 4 KiB, rounded up in the sum.
    between_the_sums(run, ("model-centric", "leapgnn"), 62..=64);
}

/// A micrograph worker trains the roots it owns, routed from every worker's
/// batch: here every train node hashes to part 0 (`--partition hash`), so
/// worker 0 gets all 2 x 256 roots of an iteration, in one time step with
/// `--time-steps 1`, and holds their input rows in its store (twice with
/// `--prefetch on`; evaluation's batches are kept smaller). The run is refused under a limit that the estimate of
/// one batch per worker (read from the refusal before partitioning) fits,
/// naming the roots; the old estimate counted 256 roots and started it.
#[test]
fn a_worker_owning_every_root_is_held_to_the_roots_it_is_routed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let part_zero = |v: u32| leapgnn::util::rng::mix64(v as u64).is_multiple_of(2);
    write_tiny(d, "skew", Tiny { nodes: 8000, dim: 1024, train_if: Some(part_zero), ..Tiny::default() });
    let run = |limit: &str| {
        let a = ["train", "skew", "--epochs", "1", "--workers", "2", "--partition", "hash", "--strategy", "leapgnn"];
        let b = ["--time-steps", "1", "--prefetch", "on", "--batch-size", "256", "--fanout", "2,2", "--hidden", "32"];
        let limit = ["--eval-batch-size", "64", "--memory-limit-mb", limit];
        leapgnn(d, &[&a[..], &b[..], &limit[..]].concat())
    };
    // Before partitioning, as if each worker were routed one batch: one error line.
    let out = run("10");
    let e = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!((out.status.code(), e.lines().count()), (Some(2), 1), "{e}");
    assert!(!e.contains("roots one worker owns"), "{e}");
    let even = mib_before(&e, " MiB for the 2 workers and the driver on this machine together");
    let even_worker = estimate_per_worker(&e);
    // Refused on the partition once it is cut, before it is written or the run is created: one error line.
    let out = run(&even.to_string());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    let e = err.lines().last().unwrap();
    let parts = d.join("skew/parts");
    assert_eq!(parts.exists().then(|| names_in(&parts)), None, "written before it was checked");
    assert!(!d.join("runs").exists() || std::fs::read_dir(d.join("runs")).unwrap().next().is_none());
    for needle in ["for up to 512 roots one worker owns in an iteration and 512 in one time step", "--memory-limit-mb"]
    {
        assert!(e.starts_with("error: ") && e.contains(needle), "no `{needle}` in {err}");
    }
    // Worker 0 gathers 4608 input rows of 4 KiB (and their dropped-out copy)
    // where one batch reads 2304 (18 MiB more), aggregates 1536 of them at
    // that width where 768 (9 MiB), and holds its rows in two stores (18 MiB).
    let routed_worker = estimate_per_worker(e);
    assert!(routed_worker >= even_worker + 45, "routed {routed_worker} MiB, even {even_worker} MiB: {e}");
    // And it covers what the workers of that run reach.
    let out = run("100000");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs = d.join("runs");
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(run_dir.join("summary.json")).unwrap()).unwrap();
    let peaks: Vec<u64> = s["peak_rss_bytes"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
    assert_eq!(peaks.len(), 2, "{s}");
    for peak in peaks {
        assert!(
            peak >> 20 <= routed_worker,
            "a worker peaked at {} MiB, over the estimate {routed_worker} MiB",
            peak >> 20
        );
    }
}

/// A hand-edited `state.json` whose position the run cannot have reached is
/// refused by `--resume` (exit 2, naming state.json and the figures): an
/// iteration past the epoch's last used to be resumed with exit 0, the loop
/// skipping the epoch and reporting it trained with loss 0.0000; an epoch
/// count without its records was taken as the run's length. The run's own
/// state resumes, from the middle of an epoch too.
#[test]
fn a_state_json_at_a_position_the_run_never_reached_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    // Stopped after 1 of its iterations per epoch: epoch 0, iteration 1.
    json(d, &args(&["--epochs", "2", "--stop-after", "1", "--run", "r"]));
    let state = d.join("runs/r/checkpoint/state.json");
    let good = std::fs::read_to_string(&state).unwrap();
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    assert_eq!((v["progress"]["epoch"].as_u64(), v["progress"]["iteration"].as_u64()), (Some(0), Some(1)));
    let per_epoch = json(d, &args(&["--epochs", "1", "--run", "whole"]))["history"][0]["iterations"].as_u64().unwrap();
    assert!(per_epoch > 1, "{per_epoch} iterations per epoch");
    let edits: [(&str, u64, &str); 3] = [
        ("iteration", per_epoch + 1, &format!("but an epoch of this run has {per_epoch} iteration(s)")),
        ("iteration", 1_000_000_000_000_000, "iteration 1000000000000000 of epoch 0"),
        ("epoch", 1, "1 epoch(s) are done but holds the records of 0"),
    ];
    for (field, value, needle) in edits {
        let mut bad = v.clone();
        bad["progress"][field] = value.into();
        std::fs::write(&state, serde_json::to_vec(&bad).unwrap()).unwrap();
        let line = fails(d, &["train", "--resume", "r", "--epochs", "2"], 2);
        assert!(line.contains(needle) && line.contains("state.json"), "{field} {value}: {line}");
    }
    std::fs::write(&state, good).unwrap();
    let s = json(d, &["train", "--resume", "r", "--epochs", "2"]);
    assert_eq!((s["epochs"].as_u64(), s["iterations"].as_u64()), (Some(2), Some(2 * per_epoch)), "{s}");
}

/// A checkpoint of a version before the sha256 record (state.json without
/// `sha256`) whose weights file is damaged is refused by a multi-worker
/// `--resume` before any worker starts (exit 2, one error line naming the
/// file), as a one-process resume refuses it: the workers used to find it
/// after starting, and the run failed at run time (exit 1, 'worker 0 failed:
/// ... cannot be used: incomplete metadata, file not fully covered').
#[test]
fn a_damaged_checkpoint_without_digests_is_refused_before_workers_start() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "1", "--workers", "2", "--checkpoint-every", "1", "--run", "r"]));
    let ck = d.join("runs/r/checkpoint");
    let state = ck.join("state.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert!(v.as_object_mut().unwrap().remove("sha256").is_some(), "{v}");
    std::fs::write(&state, serde_json::to_vec(&v).unwrap()).unwrap();
    let weights = ck.join(v["weights"].as_str().unwrap());
    let good = std::fs::read(&weights).unwrap();
    // Past the size check (a file too small for the model is refused by that).
    for cut in [good.len() - 4, good.len() / 2 + 1] {
        std::fs::write(&weights, &good[..cut]).unwrap();
        let out = leapgnn(d, &["train", "--resume", "r", "--epochs", "2"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "cut at {cut}: {err}");
        assert!(!err.contains("[worker"), "cut at {cut}: a worker was started: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "cut at {cut}: {err}");
        assert!(
            lines[0].contains("not a well-formed safetensors file") && lines[0].contains(&*weights.to_string_lossy()),
            "cut at {cut}: {err}"
        );
    }
    std::fs::write(&weights, good).unwrap();
    let s = json(d, &["train", "--resume", "r", "--epochs", "2"]);
    assert_eq!(s["epochs"].as_u64(), Some(2), "{s}");
}

/// A `metrics.jsonl` line damaged into bytes that are not UTF-8 is dropped
/// by `--resume` like a torn or unparsable line, keeping every record before
/// the checkpoint: the resume used to fail (exit 1, 'metrics.jsonl: stream
/// did not contain valid UTF-8') with nothing to say what to do, while a line
/// of garbage ASCII was dropped.
#[test]
fn a_resume_drops_a_metrics_line_that_is_not_utf8() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    json(d, &args(&["--epochs", "2", "--stop-after", "1", "--run", "r"]));
    let metrics = d.join("runs/r/metrics.jsonl");
    let mut bytes = std::fs::read(&metrics).unwrap();
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1, "one record before the stop");
    bytes.extend_from_slice(b"{\"epoch\":0,\"iteration\":\xff\xfe}\n\xc3\x28 torn");
    std::fs::write(&metrics, &bytes).unwrap();
    let s = json(d, &["train", "--resume", "r", "--epochs", "2"]);
    let text = std::fs::read_to_string(&metrics).expect("metrics.jsonl is UTF-8 again");
    let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let at: Vec<(u64, u64)> =
        records.iter().map(|r| (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap())).collect();
    let per_epoch = s["history"][0]["iterations"].as_u64().unwrap();
    let want: Vec<(u64, u64)> = (0..2).flat_map(|e| (0..per_epoch).map(move |i| (e, i))).collect();
    assert_eq!(at, want, "{text}");
    assert_eq!(s["iterations"].as_u64(), Some(2 * per_epoch), "{s}");
}
