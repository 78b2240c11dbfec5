//! The micrograph strategies compute model-centric's gradient: with the same
//! seed, one iteration of micrograph, pregather and leapgnn (any T, either
//! migration) on 4 worker processes sums to the gradient of DGL-style
//! training, and a few epochs reach the same accuracy. Real processes, real
//! datasets (Cora, Facebook), METIS partitions; GCN also without self loops,
//! GAT also with averaged full-width heads.

mod dist_support;

use dist_support::{cora, count, facebook, first_gradient, json, records, rel_diff};
use serde_json::Value;
use std::path::Path;

const CORA: &[&str] = &["--normalize", "l1", "--fanout", "10,10", "--hidden", "64", "--seed", "3"];
const FACEBOOK: &[&str] = &["--fanout", "10,10", "--hidden", "64", "--seed", "1"];

/// Every strategy variant that must give model-centric's gradient.
const VARIANTS: &[&[&str]] = &[
    &["--strategy", "micrograph"],
    &["--strategy", "micrograph", "--migration", "ring"],
    &["--strategy", "pregather"],
    &["--strategy", "pregather", "--prefetch", "on"],
    &["--strategy", "leapgnn", "--time-steps", "2"],
    &["--strategy", "leapgnn", "--time-steps", "3", "--prefetch", "on"],
    &["--strategy", "leapgnn", "--time-steps", "4"],
    &["--strategy", "leapgnn", "--time-steps", "2", "--migration", "ring"],
    &["--strategy", "leapgnn", "--time-steps", "3", "--migration", "ring", "--prefetch"],
];

fn train(d: &Path, dataset: &str, common: &[&str], extra: &[&str]) -> Value {
    json(d, &[&["train", dataset, "--no-tui", "--workers", "4"], common, extra].concat())
}

/// Checks every variant against model-centric on `dataset` with `batch` roots per worker.
fn gradients_match(d: &Path, dataset: &str, common: &[&str], batch: &str) {
    let size = ["--batch-size", batch];
    let four = [&["--workers", "4"], common, &size[..]].concat();
    let (reference, mc) = first_gradient(d, dataset, &[&four[..], &["--strategy", "model-centric"]].concat());
    let mc_remote = count(&mc["rows"]["remote"]);
    let mut fused_ring: Vec<(String, Vec<f32>)> = Vec::new();
    for v in VARIANTS {
        let (g, s) = first_gradient(d, dataset, &[&four[..], v].concat());
        let e = rel_diff(&reference, &g);
        assert!(e <= 1e-5, "{dataset} {v:?}: relative difference from model-centric {e}");
        let ring = v.contains(&"ring");
        let migration = count(&s["bytes"]["migration"]);
        assert_eq!(migration > 0, ring, "{dataset} {v:?}: migration bytes {migration}");
        if ring {
            // T - 1 passes of the whole accumulator per worker, 4 workers.
            let steps = count(&s["time_steps"]);
            assert!(migration >= (steps - 1) * 4 * reference.len() as u64 * 4, "{v:?}: {migration}");
        }
        // Routing roots to their owners reads fewer remote rows than model-centric.
        assert!(count(&s["rows"]["remote"]) < mc_remote, "{dataset} {v:?}: {} >= {mc_remote}", s["rows"]["remote"]);
        fused_ring.push((v.join(" "), g));
    }
    // --migration ring moves the same sums around: the same gradient as fused.
    let find = |name: &str| &fused_ring.iter().find(|(n, _)| n == name).unwrap().1;
    for (fused, ring) in [
        ("--strategy micrograph", "--strategy micrograph --migration ring"),
        ("--strategy leapgnn --time-steps 2", "--strategy leapgnn --time-steps 2 --migration ring"),
    ] {
        let e = rel_diff(find(fused), find(ring));
        assert!(e <= 1e-5, "{dataset}: ring vs fused ({fused}) differ by {e}");
    }
}

#[test]
fn cora_one_iteration_gives_the_model_centric_gradient() {
    let tmp = cora();
    // 4 x 35 roots: the whole public train set in one iteration.
    gradients_match(tmp.path(), "cora", CORA, "35");
}

/// Cora, 4 workers: `variant` (extra model flags) under model-centric and
/// each of `strategies` gives the same gradient (within 1e-5); returns it and
/// the gradient model-centric gives without the variant's flags.
fn variant_gradients(d: &Path, model: &[&str], variant: &[&str], strategies: &[&[&str]]) -> (Vec<f32>, Vec<f32>) {
    let base = [CORA, &["--workers", "4", "--batch-size", "35"], model].concat();
    let with = [&base[..], variant].concat();
    let mc = ["--strategy", "model-centric"];
    let (reference, _) = first_gradient(d, "cora", &[&with[..], &mc].concat());
    let (without, _) = first_gradient(d, "cora", &[&base[..], &mc].concat());
    for v in strategies {
        let (g, _) = first_gradient(d, "cora", &[&with[..], v].concat());
        let e = rel_diff(&reference, &g);
        assert!(e <= 1e-5, "{v:?} with {variant:?}: relative difference from model-centric {e}");
    }
    (reference, without)
}

#[test]
fn gcn_without_self_loops_gives_the_model_centric_gradient_and_not_the_one_with_them() {
    let tmp = cora();
    let strategies: &[&[&str]] =
        &[&["--strategy", "micrograph"], &["--strategy", "leapgnn", "--time-steps", "2"], &["--strategy", "p3"]];
    let (reference, looped) = variant_gradients(tmp.path(), &["--model", "gcn"], &["--self-loops", "off"], strategies);
    let e = rel_diff(&reference, &looped);
    assert!(e > 1e-2, "the self loops change the gradient (relative difference {e})");
}

#[test]
fn gat_with_averaged_heads_gives_the_model_centric_gradient_and_not_the_concatenated_one() {
    let tmp = cora();
    let strategies: &[&[&str]] =
        &[&["--strategy", "micrograph"], &["--strategy", "leapgnn", "--time-steps", "2"], &["--strategy", "pregather"]];
    let gat = ["--model", "gat", "--heads", "4"];
    let (reference, concat) = variant_gradients(tmp.path(), &gat, &["--gat-heads", "mean"], strategies);
    // Four full-width heads: the first layer's weight (1433 x 64 per head) is
    // four times the concatenated heads' (1433 x 16 per head).
    assert!(reference.len() > 3 * concat.len(), "{} parameters against {}", reference.len(), concat.len());
}

#[test]
fn facebook_one_iteration_gives_the_model_centric_gradient() {
    let tmp = facebook();
    gradients_match(tmp.path(), "facebook", FACEBOOK, "64");
}

#[test]
fn cora_accuracy_after_three_epochs_matches_model_centric() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["--epochs", "3", "--batch-size", "8", "--check-replicas", "2"];
    let mc = train(d, "cora", CORA, &[&run[..], &["--strategy", "model-centric"]].concat());
    let acc = |s: &Value| s["test_accuracy"].as_f64().unwrap();
    assert!(acc(&mc) > 0.3, "model-centric learns something in 15 iterations: {mc}");
    for (v, steps) in [
        (&["--strategy", "micrograph"][..], 4),
        (&["--strategy", "pregather", "--prefetch"][..], 4),
        (&["--strategy", "leapgnn", "--time-steps", "2"][..], 2),
        (&["--strategy", "leapgnn", "--time-steps", "3", "--migration", "ring"][..], 3),
    ] {
        let s = train(d, "cora", CORA, &[&run[..], v].concat());
        assert!((acc(&s) - acc(&mc)).abs() <= 0.005, "{v:?}: test accuracy {} vs model-centric {}", acc(&s), acc(&mc));
        assert_eq!(s["iterations"], mc["iterations"]);
        assert_eq!(count(&s["time_steps"]), steps, "{v:?}");
        assert!(count(&s["bytes"]["features"]) < count(&mc["bytes"]["features"]), "{v:?}");

        // One record per (iteration, time step, worker), the visiting model named.
        let recs = records(d, &s);
        assert_eq!(recs.len() as u64, count(&s["iterations"]) * steps * 4, "{v:?}");
        for r in &recs {
            let (t, w, m) = (count(&r["time_step"]), count(&r["worker"]), count(&r["model"]));
            assert!(t < steps, "{r}");
            assert_eq!(m, (w + t) % 4, "{v:?}: {r}");
            if v[1] != "micrograph" && t > 0 {
                // Pre-gathered: later steps read only the worker's own part.
                assert_eq!(count(&r["rows"]["remote"]), 0, "{v:?}: {r}");
            }
        }
        let roots: u64 = recs.iter().map(|r| count(&r["roots"])).sum();
        assert_eq!(roots, 3 * 140, "{v:?}: every train root once per epoch");
    }
}

#[test]
fn prefetching_changes_nothing_but_the_timing() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["--epochs", "2", "--batch-size", "8"];
    for strategy in [&["--strategy", "pregather"][..], &["--strategy", "leapgnn", "--time-steps", "2"]] {
        let plain = train(d, "cora", CORA, &[&run[..], strategy, &["--prefetch", "off"]].concat());
        let ahead = train(d, "cora", CORA, &[&run[..], strategy, &["--prefetch", "on"]].concat());
        assert_eq!(
            (plain["prefetch"].as_bool(), ahead["prefetch"].as_bool()),
            (Some(false), Some(true)),
            "{strategy:?}"
        );
        // The same blocks and rows in the same order: bit-identical training.
        for k in ["final_loss", "test_accuracy", "best_val_accuracy"] {
            assert_eq!(plain[k], ahead[k], "{strategy:?} {k}");
        }
        assert_eq!(plain["rows"], ahead["rows"], "{strategy:?}: the same rows fetched");
        let losses = |s: &Value| records(d, s).iter().map(|r| r["loss"].as_f64().unwrap()).sum::<f64>();
        assert_eq!(losses(&plain), losses(&ahead));
    }
}
