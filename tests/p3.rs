//! P3 (features split by column, first layer model-parallel) against
//! model-centric training: the same summed gradient for one iteration, the
//! same accuracy, no feature rows on the network, and the models it refuses.

mod dist_support;

use dist_support::{cora, facebook, fails, json, read_f32, rel_diff};
use std::path::Path;

const COMMON: &[&str] = &["--no-tui", "--fanout", "10,10", "--hidden", "32", "--seed", "5"];

fn train(d: &Path, dataset: &str, extra: &[&str]) -> serde_json::Value {
    json(d, &[&["train", dataset], COMMON, extra].concat())
}

/// The first iteration's summed gradient of `strategy` with `workers` x `batch` roots.
fn first_gradient(d: &Path, dataset: &str, args: (&str, &str), workers: usize, batch: usize) -> Vec<f32> {
    let (model, strategy) = args;
    let file = d.join(format!("{dataset}-{model}-{strategy}-{workers}.f32"));
    let (w, b) = (workers.to_string(), batch.to_string());
    let s = train(
        d,
        dataset,
        &[
            "--model",
            model,
            "--strategy",
            strategy,
            "--workers",
            &w,
            "--batch-size",
            &b,
            "--epochs",
            "1",
            "--stop-after",
            "1",
            "--dump-grad",
            file.to_str().unwrap(),
        ],
    );
    if strategy == "p3" && workers > 1 {
        // Partials and their gradients cross the network; feature rows never do.
        assert_eq!(s["bytes"]["features"], 0, "{s}");
        assert!(s["bytes"]["activations"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["rows"]["remote"], 0, "{s}");
    }
    read_f32(&file)
}

#[test]
fn p3_gradient_equals_model_centric_on_cora_for_one_two_and_four_workers() {
    let tmp = cora();
    let d = tmp.path();
    // One global batch of 140 roots (Cora's whole train split), cut W ways.
    // GCN drops input features, so this also checks that a column slice gets
    // the full row's dropout mask; l1 normalisation needs the full row's norm.
    for model in ["sage", "gcn", "sage-max"] {
        let want = first_gradient(d, "cora", (model, "model-centric"), 1, 140);
        for w in [1, 2, 4] {
            if model == "sage-max" && w != 2 {
                continue;
            }
            let got = first_gradient(d, "cora", (model, "p3"), w, 140 / w);
            let rel = rel_diff(&want, &got);
            assert!(rel <= 1e-4, "{model}, W = {w}: relative gradient difference {rel}");
        }
    }
}

#[test]
fn p3_gradient_equals_model_centric_on_facebook_with_four_workers() {
    let tmp = facebook();
    let d = tmp.path();
    for model in ["sage", "gcn"] {
        let want = first_gradient(d, "facebook", (model, "model-centric"), 1, 512);
        let got = first_gradient(d, "facebook", (model, "p3"), 4, 128);
        let rel = rel_diff(&want, &got);
        assert!(rel <= 1e-4, "{model}: relative gradient difference {rel}");
    }
}

#[test]
fn p3_reaches_model_centrics_accuracy_on_cora_with_four_workers() {
    let tmp = cora();
    let d = tmp.path();
    let run = |strategy: &str| {
        train(d, "cora", &["--strategy", strategy, "--workers", "4", "--batch-size", "8", "--epochs", "3"])
    };
    let (mc, p3) = (run("model-centric"), run("p3"));
    assert_eq!(p3["strategy"], "p3");
    assert_eq!(mc["iterations"], p3["iterations"], "the same grid of global batches");
    let (a, b) = (mc["test_accuracy"].as_f64().unwrap(), p3["test_accuracy"].as_f64().unwrap());
    assert!(a > 0.3, "model-centric learns something in 3 epochs: {a}");
    assert!((a - b).abs() <= 0.005, "model-centric {a}, p3 {b}");
    // The summary counts every socket byte, evaluation's row fetches too; the
    // step records hold what training moved.
    let (mc, p3) = (training_bytes(d, &mc), training_bytes(d, &p3));
    assert!(mc.0 > 0 && mc.1 == 0, "model-centric moves features, no activations: {mc:?}");
    assert!(p3.0 == 0 && p3.1 > 0, "p3 moves activations, no features: {p3:?}");
}

/// (features, activations) bytes sent by training steps, from `metrics.jsonl`.
fn training_bytes(d: &Path, s: &serde_json::Value) -> (u64, u64) {
    let path = d.join("runs").join(s["run"].as_str().unwrap()).join("metrics.jsonl");
    let lines = std::fs::read_to_string(path).unwrap();
    let recs = lines.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    recs.fold((0, 0), |(f, a), r| {
        (f + r["bytes_out"]["features"].as_u64().unwrap(), a + r["bytes_out"]["activations"].as_u64().unwrap())
    })
}

#[test]
fn p3_refuses_gat_naming_the_models_that_work() {
    let tmp = cora();
    let d = tmp.path();
    for workers in ["1", "4"] {
        let e = fails(d, &["train", "cora", "--strategy", "p3", "--model", "gat", "--workers", workers], 2);
        assert!(e.contains("--model gat") && e.contains("sage") && e.contains("gcn"), "{e}");
    }
}

/// The activations the training step records bill are exactly P3's two
/// all-to-alls: each worker sends every other batch's `[n_m, hidden]` partial
/// to its owner, and each owner sends the gradient of its summed partial back
/// to every other worker, one 16-byte frame per message. Summed over the
/// workers that is 2 (W - 1) (4 hidden S + 16 W), S the first-layer outputs of
/// all W batches, which depends on the sampled batches only: two hidden sizes
/// must give the same whole S.
#[test]
fn p3_records_bill_exactly_the_partials_and_their_gradients() {
    let tmp = cora();
    let d = tmp.path();
    let w = 3u64;
    let s_of = |hidden: u64| {
        let (h, run) = (hidden.to_string(), format!("h{hidden}"));
        let args = ["--strategy", "p3", "--workers", "3", "--batch-size", "16", "--epochs", "1", "--stop-after", "1"];
        let s = json(
            d,
            &[
                &["train", "cora", "--no-tui", "--fanout", "5,5", "--seed", "5", "--hidden", &h, "--run", &run],
                &args[..],
            ]
            .concat(),
        );
        let (_, total) = training_bytes(d, &s);
        let per_worker_pair = total / (2 * (w - 1));
        assert_eq!(per_worker_pair * 2 * (w - 1), total, "hidden {hidden}: {total} bytes of activations");
        let rows = per_worker_pair - 16 * w;
        assert_eq!(rows % (4 * hidden), 0, "hidden {hidden}: {total} bytes are not whole rows plus frames");
        rows / (4 * hidden)
    };
    let (a, b) = (s_of(8), s_of(12));
    assert_eq!(a, b, "the same batches' first-layer outputs at hidden 8 and 12");
    assert!(a >= 3 * 16, "at least the 48 roots: {a}");
}
