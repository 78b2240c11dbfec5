//! The full-graph engine computes plain full-batch training's gradient on any
//! number of workers, moves exactly the halo rows it must, and its layer-wise
//! inference scores nodes as the sampled evaluation with the full
//! neighbourhood does. Real processes, real datasets (Cora, Facebook), METIS
//! partitions.

mod dist_support;

use dist_support::{cora, count, facebook, first_gradient, halo_counts, json, records, rel_diff};
use std::path::Path;

const MODELS: [&str; 3] = ["gcn", "sage", "gat"];

/// One full-graph step of each of `models` on W = 1 and on each of
/// `workers`: the same gradient, and halo rows crossing.
fn gradients_match<'a>(d: &Path, dataset: &str, models: &[&'a str], common: &[&'a str], workers: &[&'a str]) {
    for &model in models {
        let args = |w: &'a str| [&["--full-batch", "--model", model, "--workers", w], common].concat();
        let (reference, s) = first_gradient(d, dataset, &args("1"));
        assert_eq!(s["mode"], "full-graph");
        assert!(reference.iter().any(|&g| g != 0.0));
        for &w in workers {
            let (g, s) = first_gradient(d, dataset, &args(w));
            let e = rel_diff(&reference, &g);
            assert!(e <= 1e-5, "{dataset} {model} {common:?} W={w}: relative difference from W=1 {e}");
            assert!(count(&s["bytes"]["activations"]) > 0, "{dataset} {model} W={w}: no halo exchange");
        }
    }
}

#[test]
fn cora_full_graph_gradient_is_the_single_worker_gradient() {
    let tmp = cora();
    gradients_match(
        tmp.path(),
        "cora",
        &MODELS,
        &["--normalize", "l1", "--hidden", "16", "--seed", "2"],
        &["2", "3", "4"],
    );
}

/// deepgcn's BatchNorm statistics are the iteration's, summed over the
/// workers' owned rows, so splitting the graph changes nothing either.
#[test]
fn deepgcn_full_graph_gradient_is_the_single_worker_gradient() {
    let tmp = cora();
    let common = ["--normalize", "l1", "--hidden", "16", "--seed", "3"];
    for extra in [["--layers", "3"], ["--aggr", "softmax"]] {
        gradients_match(tmp.path(), "cora", &["deepgcn"], &[&common[..], &extra].concat(), &["2", "4"]);
    }
}

#[test]
fn gat_with_averaged_heads_full_graph_gradient_is_the_single_worker_gradient() {
    let tmp = cora();
    let common = ["--gat-heads", "mean", "--heads", "3", "--hidden", "16", "--normalize", "l1", "--seed", "2"];
    gradients_match(tmp.path(), "cora", &["gat"], &common, &["2", "4"]);
}

#[test]
fn facebook_full_graph_gradient_is_the_single_worker_gradient() {
    let tmp = facebook();
    gradients_match(tmp.path(), "facebook", &MODELS, &["--hidden", "16", "--seed", "1"], &["2", "3", "4"]);
}

#[test]
fn per_layer_activation_bytes_are_halo_rows_times_width_plus_framing() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden) = (3usize, 16u64);
    let s =
        json(d, &["train", "cora", "--no-tui", "--full-batch", "--layers", "3", "--hidden", "16", "--workers", "3"]);
    let halo = halo_counts(d, "cora", "metis", w);
    let recs = records(d, &s);
    // 3 layers per iteration and worker; one iteration per epoch.
    assert_eq!(recs.len() as u64, count(&s["iterations"]) * 3 * w as u64);
    let mut total = 0;
    for r in &recs {
        let (rank, layer) = (count(&r["worker"]) as usize, count(&r["layer"]));
        // Forward: the rows every peer holds as halo from here go out; backward:
        // the gradient of this worker's halo rows goes to their owners. One
        // frame (16 bytes) per message. (Received bytes are counted by the
        // mesh's reader as frames arrive, which may be before the step starts.)
        let sent: u64 = (0..w).filter(|&q| q != rank).map(|q| halo[q][rank] * hidden * 4 + 16).sum();
        let received: u64 = (0..w).filter(|&q| q != rank).map(|q| halo[rank][q] * hidden * 4 + 16).sum();
        let want = if layer == 0 { 0 } else { sent + received };
        assert_eq!(count(&r["bytes_out"]["activations"]), want, "{r}");
        total += count(&r["bytes_out"]["activations"]);
    }
    // Evaluation exchanges each hidden layer's rows once more (forward only).
    let per_eval: u64 =
        (0..w).map(|r| (0..w).filter(|&q| q != r).map(|q| halo[r][q] * hidden * 4 + 16).sum::<u64>()).sum::<u64>() * 2;
    assert_eq!(count(&s["bytes"]["activations"]), total + per_eval * count(&s["epochs"]));
}

#[test]
fn eval_full_scores_as_the_full_neighbourhood_sampled_evaluation_and_moves_less() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["train", "cora", "--no-tui", "--workers", "4", "--epochs", "2", "--batch-size", "16"];
    let run =
        |eval: &str| json(d, &[&common[..], &["--normalize", "l1", "--eval-fanout", "all", "--eval", eval]].concat());
    let (full, sampled) = (run("full"), run("sampled"));
    for (a, b) in full["history"].as_array().unwrap().iter().zip(sampled["history"].as_array().unwrap()) {
        assert_eq!(a["val_accuracy"], b["val_accuracy"], "{a} vs {b}");
        assert_eq!(a["test_accuracy"], b["test_accuracy"], "{a} vs {b}");
    }
    assert!(count(&full["bytes"]["features"]) < count(&sampled["bytes"]["features"]), "{full} vs {sampled}");
    // Full-graph W = 1 and W = 4: one identical step, the same evaluation.
    let fg = |w: &str| json(d, &["train", "cora", "--no-tui", "--full-batch", "--epochs", "1", "--workers", w]);
    let (one, four) = (fg("1"), fg("4"));
    assert_eq!(one["history"][0]["val_accuracy"], four["history"][0]["val_accuracy"]);
    assert_eq!(one["history"][0]["test_accuracy"], four["history"][0]["test_accuracy"]);
    assert_eq!(four["peak_rss_bytes"].as_array().unwrap().len(), 4);
}

/// Every byte the halo's feature fetch moves is in a step record: the
/// records' feature bytes, sent and received, add up to the summary's
/// training features, for the full-graph engine, RETEXO and VARCO on 4
/// workers. (A worker's feature server answers a faster peer whatever the
/// worker is doing; before the run's start was fenced by a barrier, the
/// answers of a worker still setting up left before its count started, and
/// the records missed up to half of the fetch.)
#[test]
fn the_step_records_carry_every_feature_byte_of_the_halo_fetch() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["train", "cora", "--no-tui", "--workers", "4", "--hidden", "8"];
    let runs: [(&str, &[&str]); 3] = [
        ("full-graph", &["--full-batch", "--epochs", "2"]),
        ("retexo", &["--strategy", "retexo", "--rounds", "1"]),
        ("varco", &["--strategy", "varco", "--epochs", "2"]),
    ];
    for (name, extra) in runs {
        let s = json(d, &[&common[..], extra, &["--run", name]].concat());
        let fetched = count(&s["bytes"]["train"]["features"]);
        assert!(fetched > 0, "{name}: the halo's features are fetched: {}", s["bytes"]);
        let recs = records(d, &s);
        let sum = |dir: &str| recs.iter().map(|r| count(&r[dir]["features"])).sum::<u64>();
        assert_eq!(sum("bytes_out"), fetched, "{name}: feature bytes sent in the records vs the summary");
        assert_eq!(sum("bytes_in"), fetched, "{name}: feature bytes received in the records vs the summary");
    }
}
