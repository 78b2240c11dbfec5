//! The deep models (DeeperGCN with iteration-wide BatchNorm, GNN-FiLM) through
//! the real CLI: every sampled strategy sums to model-centric's gradient on 4
//! worker processes, both engines learn Cora, a stopped run resumes to the
//! uninterrupted weights (BatchNorm's statistics included), `infer` scores
//! as the run did, and the flags that do not apply are refused.

mod dist_support;

use dist_support::{cora, fails, final_weights, first_gradient, json, predictions, records, rel_diff};
use leapgnn::format::DatasetFile;
use std::path::Path;

/// Cora, the paper's deep-model shape: fanout 2 per layer (the models' default), hidden 16.
const COMMON: &[&str] = &["--normalize", "l1", "--hidden", "16", "--seed", "3"];

fn four(model: &str, extra: &[&str]) -> Vec<String> {
    let base = ["--workers", "4", "--batch-size", "35", "--model", model];
    [&base[..], COMMON, extra].concat().into_iter().map(String::from).collect()
}

fn gradient(d: &Path, args: &[String]) -> Vec<f32> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    first_gradient(d, "cora", &a).0
}

#[test]
fn every_sampled_strategy_gives_model_centrics_gradient_with_deepgcn_and_film() {
    let tmp = cora();
    let d = tmp.path();
    // Three layers as well as the default six: the warm-up's extra pass
    // (`warm_up_passes`) is what makes them agree (up to 7e-4 apart without it).
    let cases: [(&str, &[&str]); 4] =
        [("film", &[]), ("deepgcn", &[]), ("deepgcn", &["--layers", "3"]), ("deepgcn", &["--aggr", "softmax"])];
    for (model, extra) in cases {
        let reference = gradient(d, &four(model, &[&["--strategy", "model-centric"], extra].concat()));
        assert!(reference.iter().all(|g| g.is_finite()));
        let mut variants: Vec<&[&str]> = vec![
            &["--strategy", "micrograph"],
            &["--strategy", "pregather", "--prefetch"],
            &["--strategy", "leapgnn", "--time-steps", "2"],
            &["--strategy", "leapgnn", "--time-steps", "3", "--migration", "ring"],
        ];
        if model == "deepgcn" {
            variants.push(&["--strategy", "p3"]);
        }
        for v in variants {
            let g = gradient(d, &four(model, &[v, extra].concat()));
            let e = rel_diff(&reference, &g);
            assert!(e <= 1e-5, "{model} {extra:?} {v:?}: relative difference from model-centric {e}");
        }
    }
}

fn accuracy(s: &serde_json::Value) -> f64 {
    s["test_accuracy"].as_f64().unwrap()
}

#[test]
fn both_engines_learn_cora_and_a_stopped_run_resumes_exactly() {
    let tmp = cora();
    let d = tmp.path();
    // Short runs of 3 layers, well above Cora's majority class (0.319).
    let short =
        ["train", "cora", "--no-tui", "--normalize", "l1", "--hidden", "64", "--dropout", "0.2", "--layers", "3"];
    let ds = DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    for model in ["deepgcn", "film"] {
        let sampled = ["--model", model, "--batch-size", "32", "--epochs", "15", "--eval-fanout", "all"];
        let s = json(d, &[&short[..], &sampled[..]].concat());
        assert!(accuracy(&s) > 0.6, "{model} sampled: {s}");
        let run = format!("fg-{model}");
        let full = ["--model", model, "--mode", "full-graph", "--epochs", "30", "--workers", "2", "--run", &run];
        let s = json(d, &[&short[..], &full[..]].concat());
        assert!(accuracy(&s) > 0.6, "{model} full-graph: {s}");
        // infer predicts every node as the run's last evaluation scored them.
        let r = json(d, &["infer", &run]);
        assert_eq!(r["nodes"], 2708);
        let pred = predictions(&d.join(format!("runs/{run}/predictions.safetensors")));
        let correct = ds.test().iter().filter(|&&v| pred[v as usize] as i32 == ds.labels()[v as usize]).count();
        let last = s["history"].as_array().unwrap().last().unwrap()["test_accuracy"].as_f64().unwrap();
        assert_eq!(correct as f64 / ds.test().len() as f64, last, "{model}");
    }
    // Resume: BatchNorm's statistics are part of the checkpoint.
    let run =
        ["train", "cora", "--no-tui", "--model", "deepgcn", "--hidden", "16", "--batch-size", "16", "--epochs", "2"];
    let run = [&run[..], &["--workers", "2", "--checkpoint-every", "3"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    json(d, &[&run[..], &["--run", "cut", "--stop-after", "4"]].concat());
    let resumed = json(d, &["train", "--resume", "cut", "--no-tui"]);
    for k in ["final_loss", "test_accuracy", "best_val_accuracy", "epochs"] {
        assert_eq!(resumed[k], straight[k], "{k}");
    }
    assert_eq!(final_weights(d, "cut"), final_weights(d, "straight"), "final weights differ");
}

/// BatchNorm's warm-up before the first step runs the full-graph engine's
/// forwards alone: each of its passes (one per layer and one more) moves one
/// training forward's activation bytes and no backward's. A step's record of
/// layer l >= 1 holds its input's halo rows forward and their gradients back,
/// the same bytes each way; layer 0's holds VARCO's compressed input rows,
/// forward only (plain full-graph training fetched them once, as features).
/// The warm-up counts in the run's `train` bytes but in no step's record.
#[test]
fn full_graph_warm_up_moves_the_forward_activations_only() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--model", "deepgcn", "--layers", "3", "--hidden", "16", "--epochs", "2"];
    for engine in [&["--mode", "full-graph"][..], &["--strategy", "varco", "--ratio", "4"]] {
        let s = json(d, &[&run[..], &["--workers", "4"], engine].concat());
        let steps = s["iterations"].as_u64().unwrap();
        assert_eq!(steps, 2, "{engine:?}: one step per epoch");
        let (mut input, mut hidden) = (0u64, 0u64);
        for r in records(d, &s) {
            let b = r["bytes_out"]["activations"].as_u64().unwrap();
            if r["layer"].as_u64().unwrap() == 0 { input += b } else { hidden += b }
        }
        assert!(hidden > 0 && hidden.is_multiple_of(2 * steps) && input.is_multiple_of(steps), "{engine:?}");
        assert_eq!(
            input > 0,
            engine[0] == "--strategy",
            "{engine:?}: layer 0's rows cross at every step with VARCO only"
        );
        let forward = input / steps + hidden / (2 * steps);
        let warm_up = s["bytes"]["train"]["activations"].as_u64().unwrap() - input - hidden;
        assert_eq!(warm_up, 4 * forward, "{engine:?}: 3 layers, 4 passes of {forward} bytes");
    }
}

#[test]
fn flags_that_do_not_apply_to_the_model_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let e = fails(d, &["train", "--model", "film", "--aggr", "max"], 2);
    assert!(e.contains("--aggr"), "{e}");
    let e = fails(d, &["train", "--model", "deepgcn", "--aggr", "mean"], 2);
    assert!(e.contains("--aggr") && e.contains("softmax"), "{e}");
    let e = fails(d, &["train", "--model", "deepgcn", "--softmax-t", "2"], 2);
    assert!(e.contains("--softmax-t"), "{e}");
    let e = fails(d, &["train", "--model", "deepgcn", "--aggr", "softmax", "--softmax-t", "0"], 2);
    assert!(e.contains("--softmax-t"), "{e}");
    let e = fails(d, &["train", "--model", "film", "--strategy", "p3", "--workers", "2"], 2);
    assert!(e.contains("--strategy p3") && e.contains("film"), "{e}");
    let e = fails(d, &["train", "--model", "deepgcn", "--strategy", "retexo"], 2);
    assert!(e.contains("retexo") && e.contains("deepgcn"), "{e}");
}
