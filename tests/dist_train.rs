//! Distributed model-centric training with real worker processes on
//! 127.0.0.1, against the single worker on Cora (and the feature cache of
//! every sampled strategy).

mod dist_support;

use dist_support::{cora, final_weights, json, losses, read_f32, rel_diff};

const COMMON: &[&str] = &["--normalize", "l1", "--fanout", "10,10", "--hidden", "64", "--seed", "3"];

fn train(d: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    json(d, &[&["train", "cora", "--no-tui"], COMMON, extra].concat())
}

#[test]
fn four_workers_give_the_single_worker_gradient_and_accuracy() {
    let tmp = cora();
    let d = tmp.path();
    // One global batch of 140 roots: W = 1 x 140 and W = 4 x 35 cut the same shuffle.
    let (g1, g4) = (d.join("g1.f32"), d.join("g4.f32"));
    let one = ["--stop-after", "1", "--epochs", "1", "--dump-grad"];
    train(d, &[&one[..], &[g1.to_str().unwrap(), "--batch-size", "140"]].concat());
    train(d, &[&one[..], &[g4.to_str().unwrap(), "--batch-size", "35", "--workers", "4"]].concat());
    let e = rel_diff(&read_f32(&g1), &read_f32(&g4));
    assert!(e <= 1e-5, "relative gradient difference {e}");

    // Training: the same global batches, so the same model up to float summation order.
    let epochs = ["--epochs", "8"];
    let s1 = train(d, &[&epochs[..], &["--batch-size", "32"]].concat());
    let s4 = train(d, &[&epochs[..], &["--batch-size", "8", "--workers", "4", "--check-replicas", "3"]].concat());
    assert_eq!(s4["workers"], 4);
    assert_eq!(s1["iterations"], s4["iterations"], "the same grid of global batches");
    // --check-replicas 3 compares the replicas before iterations 0, 3, 6, ...: the summary says how often.
    assert_eq!(s4["replica_checks"].as_u64(), Some(s4["iterations"].as_u64().unwrap().div_ceil(3)));
    assert!(s1.get("replica_checks").is_none(), "no checks asked for, none reported");
    let (a1, a4) = (s1["test_accuracy"].as_f64().unwrap(), s4["test_accuracy"].as_f64().unwrap());
    assert!(a1 > 0.6, "single worker learns Cora: {a1}");
    assert!((a1 - a4).abs() <= 0.01, "W = 1 accuracy {a1}, W = 4 accuracy {a4}");
    // Model-centric with random roots reads most rows from the other three parts.
    let rows = &s4["rows"];
    let (req, local, remote) =
        (rows["requested"].as_u64().unwrap(), rows["local"].as_u64().unwrap(), rows["remote"].as_u64().unwrap());
    assert_eq!(req, local + remote);
    assert!(remote > 0 && local > 0);
    assert!(s4["bytes"]["features"].as_u64().unwrap() > remote * 1433 * 4);
    assert!(s4["bytes"]["gradients"].as_u64().unwrap() > 0);
    let run = s4["run"].as_str().unwrap();
    let lines = std::fs::read_to_string(d.join("runs").join(run).join("metrics.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len() as u64, 4 * s4["iterations"].as_u64().unwrap(), "one record per (iteration, worker)");
    for w in 0..4 {
        assert!(recs.iter().any(|r| r["worker"] == w && r["bytes_in"]["features"].as_u64().unwrap() > 0));
    }
}

/// Framing of the feature service (documented in comm::features and comm::frame):
/// a request is a 16-byte frame header + 4 bytes per id; its reply a 16-byte
/// header + a 4-byte status + the rows. With two workers every fetch that needs
/// a remote row sends exactly one request.
const PER_FETCH: u64 = 16 + 16 + 4;
const DIM: u64 = 1433;

#[test]
fn feature_bytes_on_the_socket_match_the_remote_rows() {
    let tmp = cora();
    let d = tmp.path();
    let s = train(d, &["--epochs", "2", "--batch-size", "16", "--workers", "2"]);
    let done = dist_support::workers_json(d, s["run"].as_str().unwrap());
    assert_eq!(done.len(), 2);
    let field = |v: &serde_json::Value, path: &[&str]| path.iter().fold(v, |v, k| &v[k]).as_u64().unwrap();
    let (mut sent, mut received, mut expected) = (0, 0, 0);
    for w in &done {
        let remote = field(w, &["fetch", "remote"]);
        assert!(remote > 0);
        sent += field(w, &["bytes", "sent", "features"]);
        received += field(w, &["bytes", "received", "features"]);
        expected += remote * (DIM * 4 + 4) + field(w, &["remote_fetches"]) * PER_FETCH;
    }
    assert_eq!(received, expected, "feature bytes counted on the sockets = remote rows x dim x 4 + framing");
    assert_eq!(sent, received);
    assert_eq!(s["bytes"]["features"].as_u64().unwrap(), sent, "the summary sums what the workers sent");
    let rows = &s["rows"];
    assert!(rows["remote"].as_u64().unwrap() > 0);
    assert!(s["miss_rate"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_cache_holding_every_remote_row_makes_the_miss_rate_zero() {
    let tmp = cora();
    let d = tmp.path();
    // Cora's 2708 rows x 1433 floats = 15.5 MB: 16 MB holds every remote row.
    for policy in ["degree", "presample"] {
        let s = train(
            d,
            &["--epochs", "2", "--batch-size", "16", "--workers", "2", "--cache-mb", "16", "--cache-policy", policy],
        );
        assert_eq!(s["rows"]["remote"], 0, "{policy}: {s}");
        assert_eq!(s["miss_rate"], 0.0, "{policy}");
        assert!(s["rows"]["cache_hit"].as_u64().unwrap() > 0, "{policy}");
    }
    // A small cache serves some rows and misses others.
    let s = train(d, &["--epochs", "1", "--batch-size", "16", "--workers", "2", "--cache-mb", "1"]);
    assert!(s["rows"]["cache_hit"].as_u64().unwrap() > 0 && s["rows"]["remote"].as_u64().unwrap() > 0, "{s}");
}

/// `--cache-policy presample` ranks the rows the worker's training draws: a
/// micrograph strategy's worker trains the roots it owns from every batch,
/// not batch b(i, rank), so its cache must hold their neighbourhoods. Cora,
/// 3 workers on 7 parts, 1 MiB a worker (about 180 of the ~1,800 remote
/// rows): the rows the routed roots need fit, and none is fetched; the
/// presample of model-centric's batches once left 240 of them to fetch.
#[test]
fn the_presample_cache_holds_the_rows_of_the_roots_a_micrograph_worker_trains() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--workers", "3", "--parts", "7", "--batch-size", "20", "--epochs", "2"];
    let model = ["--fanout", "5,5", "--hidden", "16", "--seed", "3", "--cache-mb", "1", "--cache-policy", "presample"];
    for strategy in [
        &["--strategy", "micrograph"][..],
        &["--strategy", "pregather"],
        &["--strategy", "leapgnn", "--time-steps", "2"],
    ] {
        let s = json(d, &[&run[..], &model, strategy].concat());
        assert!(s["rows"]["cache_hit"].as_u64().unwrap() > 0, "{strategy:?}: {s}");
        assert_eq!(s["rows"]["remote"], 0, "{strategy:?}: rows missed by the presampled cache: {}", s["rows"]);
    }
    // Model-centric's own batches draw more remote rows than 1 MiB holds.
    let s = json(d, &[&run[..], &model, &["--strategy", "model-centric"]].concat());
    assert!(s["rows"]["remote"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn a_stopped_multi_worker_run_resumes_to_the_uninterrupted_weights() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 3 x 16: 3 iterations per epoch, 9 in all.
    let run = ["--workers", "3", "--batch-size", "16", "--epochs", "3", "--checkpoint-every", "2"];
    let straight = train(d, &[&run[..], &["--run", "straight"]].concat());
    // Stopped in mid-epoch 2 (after iteration 4), then resumed from that checkpoint.
    let stopped = train(d, &[&run[..], &["--run", "mid", "--stop-after", "4"]].concat());
    assert_eq!(stopped["iterations"], 4);
    let resumed = json(d, &["train", "--resume", "mid", "--no-tui"]);
    assert_eq!(resumed["workers"], 3);
    assert_eq!(resumed["iterations"], straight["iterations"]);
    // The rows fetched before the stop count too, so the whole run's rows and miss rate are the uninterrupted run's.
    for k in ["final_loss", "test_accuracy", "best_val_accuracy", "best_epoch", "epochs", "rows", "miss_rate"] {
        assert_eq!(resumed[k], straight[k], "{k}");
    }
    assert_eq!(final_weights(d, "mid"), final_weights(d, "straight"), "final weights differ");
    // Each record once: those before the checkpoint kept, the rest written again.
    assert_eq!(losses(d, resumed["run"].as_str().unwrap()), losses(d, straight["run"].as_str().unwrap()));
}
