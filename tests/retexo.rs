//! `--strategy retexo` (lazy message passing): rows cross the network once
//! per layer for the whole run: the halo's input features as the full-graph
//! engine fetches them, then each hidden layer's halo rows x width x 4 bytes
//! plus one frame per peer; it learns Cora (public split, 4 random parts) and moves far
//! fewer bytes than full-graph training of the same model for the same number
//! of gradient steps; a run stopped mid-stage (`--stop-after`, or SIGUSR1 as
//! a Slurm time limit sends it) checkpoints at the round it stopped in and,
//! resumed, ends with the uninterrupted run's losses, accuracies and
//! weights. Real processes, real data.

mod dist_support;

use dist_support::{
    Driver, cora, count, fails, final_weights, halo_counts, json, leapgnn, load_infer, max_abs_diff, records, scores,
    signal, wait_gone, weights,
};
use leapgnn::tui::fmt::bytes as bytes_in_words;
use std::path::Path;

const TRAIN: &[&str] = &["train", "cora", "--no-tui", "--strategy", "retexo", "--workers", "4"];

/// `leapgnn -v ARGS --json`: the summary and the log (`-v`: the driver logs each stage's gradient choice).
fn verbose_json(d: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let out = leapgnn(d, &[&["-v"], args, &["--json"]].concat());
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "leapgnn {args:?}: {log}");
    (serde_json::from_slice(&out.stdout).unwrap(), log)
}

/// Sent bytes of `category` over the whole run (all workers).
fn bytes(s: &serde_json::Value, category: &str) -> u64 {
    count(&s["bytes"][category])
}

#[test]
fn stage_0_fetches_the_halo_features_as_full_graph_training_does_and_later_stages_exchange_hidden_rows_once() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden, rounds) = (4usize, 16u64, 3u64);
    let s = json(d, &[TRAIN, &["--model", "gcn", "--hidden", "16", "--rounds", "3", "--seed", "5"]].concat());
    assert_eq!(s["strategy"], "retexo");
    assert_eq!(s["mode"], "full-graph", "retexo implies the full-graph engine");
    assert_eq!(count(&s["epochs"]), 2 * rounds, "one epoch per round, 2 layers by default");
    // RETEXO's default partition is random, as its authors' runs.
    let halo = halo_counts(d, "cora", "random", 4);
    let recs = records(d, &s);
    assert_eq!(recs.len() as u64, 2 * rounds * w as u64, "one record per round and worker");
    let mut total = 0;
    for r in &recs {
        let (rank, layer, epoch) = (count(&r["worker"]) as usize, count(&r["layer"]), count(&r["epoch"]));
        assert_eq!(layer, epoch / rounds, "{r}");
        // Stage 0's input rows are fetched from the feature service (below);
        // the first round of stage 1 carries the exchange of the frozen stage
        // 0's embeddings: each peer's halo rows x hidden x 4 bytes plus one
        // 16-byte frame per peer. Nothing moves back.
        let sent: u64 = (0..w).filter(|&q| q != rank).map(|q| halo[q][rank] * hidden * 4 + 16).sum();
        let want = if layer == 1 && epoch % rounds == 0 { sent } else { 0 };
        assert_eq!(count(&r["bytes_out"]["activations"]), want, "{r}");
        assert!(count(&r["bytes_out"]["gradients"]) > 0, "every round sums the gradient: {r}");
        total += want;
    }
    assert_eq!(bytes(&s, "activations"), total);
    // The fetch before stage 0 is exactly the full-graph engine's first (and
    // only) fetch of the same owned + halo rows on the same partition: the
    // requests plus the feature servers' replies, over all workers.
    let fetched = bytes(&s, "features");
    assert!(fetched > 0, "the halo's features are fetched");
    let full_args = [
        "train",
        "cora",
        "--no-tui",
        "--full-batch",
        "--workers",
        "4",
        "--partition",
        "random",
        "--model",
        "gcn",
        "--hidden",
        "16",
        "--epochs",
        "1",
        "--seed",
        "5",
        "--run",
        "full",
    ];
    let full = json(d, &full_args);
    assert_eq!(
        fetched,
        bytes(&full, "features"),
        "RETEXO's stage-0 fetch vs the full-graph engine's: {}",
        full["bytes"]
    );
    assert_eq!(count(&s["bytes"]["eval"]["features"]), 0, "evaluation reuses the fetched rows: {}", s["bytes"]);
}

/// A full-graph run of `model` with RETEXO's settings: its bytes per gradient
/// step (training and evaluation, all workers), measured over `epochs`.
fn full_graph_bytes_per_step(d: &Path, model: &str, epochs: u64) -> (f64, f64) {
    let e = epochs.to_string();
    let args = [
        "train",
        "cora",
        "--no-tui",
        "--full-batch",
        "--workers",
        "4",
        "--partition",
        "random",
        "--model",
        model,
        "--hidden",
        "256",
        "--lr",
        "0.003",
        "--dropout",
        "0.3",
        "--epochs",
        &e,
    ];
    let s = json(d, &args);
    // The halo's features are fetched once, in the first step: leave epoch 0 out.
    let steady: Vec<_> = records(d, &s).into_iter().filter(|r| count(&r["epoch"]) > 0).collect();
    let sum = |cats: &[&str]| -> f64 {
        let train: u64 = steady.iter().map(|r| cats.iter().map(|c| count(&r["bytes_out"][c])).sum::<u64>()).sum();
        let eval: u64 = cats.iter().map(|c| count(&s["bytes"]["eval"][c])).sum();
        train as f64 / (epochs - 1) as f64 + eval as f64 / epochs as f64
    };
    (sum(&["activations", "features"]), sum(&["activations", "features", "gradients", "control"]))
}

#[test]
fn learns_cora_and_moves_far_fewer_bytes_than_full_graph_training() {
    let tmp = cora();
    let d = tmp.path();
    for model in ["gcn", "sage"] {
        // The authors' settings: 2 layers, hidden 256, 200 rounds per layer, lr 0.003, dropout 0.3.
        let s = json(d, &[TRAIN, &["--model", model]].concat());
        let acc = s["test_accuracy"].as_f64().unwrap();
        // Full-graph training of the same model reaches 0.81 (gcn) / 0.79 (sage); majority class 0.319.
        assert!(acc >= 0.74, "{model}: RETEXO test accuracy {acc}");
        let steps = count(&s["iterations"]);
        assert_eq!(steps, 400);
        let (mp_step, all_step) = full_graph_bytes_per_step(d, model, 3);
        let mp = (bytes(&s, "activations") + bytes(&s, "features")) as f64;
        let all: f64 = ["activations", "features", "gradients", "control"].iter().map(|c| bytes(&s, c) as f64).sum();
        let (mp_ratio, all_ratio) = (mp_step * steps as f64 / mp, all_step * steps as f64 / all);
        eprintln!(
            "{model}: test {acc:.3}; full-graph / RETEXO bytes: message passing {mp_ratio:.1}x, all {all_ratio:.2}x"
        );
        assert!(mp_ratio >= 10.0, "{model}: rows exchanged only {mp_ratio:.1}x fewer than full-graph training");
        assert!(all_ratio >= 10.0, "{model}: all bytes only {all_ratio:.2}x fewer than full-graph training");
    }
}

#[test]
fn the_factored_stage_gradient_trains_the_all_reduced_weights_and_moves_the_bytes_of_its_formula() {
    let tmp = cora();
    let d = tmp.path();
    let (w, rounds, heads, classes) = (4u64, 4u64, 8u64, 7u64);
    // Hidden 16: Cora's 7 classes are fewer than the conv's outputs, so the
    // gradients cross at the logits; hidden 4: at the conv output.
    for (model, hidden) in [("sage", 16u64), ("gat", 16), ("sage", 4)] {
        let tag = format!("{model}-h{hidden}");
        let run = |fg: &str| {
            // SGD: Adam divides by the root of each gradient's square, so float
            // rounding in a near-zero gradient (a rare input column) would
            // show as a visible weight difference; SGD's step is the gradient's.
            let sgd = ["--optimizer", "sgd", "--lr", "1"];
            let h = hidden.to_string();
            let rest = ["--model", model, "--hidden", &h, "--rounds", "4", "--seed", "2", "--factored-grads", fg];
            verbose_json(d, &[TRAIN, &rest, &sgd, &["--run", &format!("{tag}-{fg}")]].concat())
        };
        let ((on, on_log), (off, off_log)) = (run("on"), run("off"));
        // The same sum of gradients, in another order: the same weights to float rounding.
        let final_of = |fg: &str| weights(&final_weights(d, &format!("{tag}-{fg}")));
        let (a, b) = (final_of("on"), final_of("off"));
        assert_eq!(a.len(), b.len());
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{tag}, weight {i}: {p} against {q}");
        }
        assert_eq!(on["test_accuracy"], off["test_accuracy"], "{tag}");
        let total = |s: &serde_json::Value| bytes(s, "gradients");
        assert!(
            total(&on) * 2 < total(&off),
            "{tag}: factored {} against all-reduced {} bytes",
            total(&on),
            total(&off)
        );
        // Stage 0's later rounds (the first also sends the rows). At the
        // logits the all-reduce leaves out every parameter of the stage:
        // SAGE's [hidden, 2 x 1433] weight or GAT's conv (8 heads of
        // [hidden, 1433], two attention vectors of 8 x hidden), the conv's
        // bias, the LayerNorm and the [7, hidden] head; at the conv output,
        // the conv's weight and bias only. Their ring moves 2 (W - 1) x their
        // floats x 4 bytes over all workers; instead each worker sends its
        // training vertices' gradients (rows x width x 4 bytes, one 16-byte
        // frame) to each of its W - 1 peers.
        let conv = match model {
            "sage" => hidden * 2 * 1433 + hidden,
            _ => heads * hidden * 1433 + 2 * heads * hidden + hidden,
        };
        let (left_out, width) =
            if classes < hidden { (conv + 2 * hidden + classes * hidden + classes, classes) } else { (conv, hidden) };
        let cut = if classes < hidden { "its logits" } else { "its conv output" };
        let said = format!("stage 1: the gradient crosses as factors at {cut} ({width} wide)");
        assert!(on_log.contains(&said), "{tag}: no `{said}` in {on_log}");
        assert!(!off_log.contains("the gradient"), "{tag}: --factored-grads off logged a choice: {off_log}");
        let per_round = |s: &serde_json::Value, epoch: u64| -> (u64, u64) {
            let recs: Vec<_> = records(d, s).into_iter().filter(|r| count(&r["epoch"]) == epoch).collect();
            assert_eq!(recs.len() as u64, w);
            let sent = recs.iter().map(|r| count(&r["bytes_out"]["gradients"])).sum();
            (sent, recs.iter().map(|r| count(&r["roots"])).sum())
        };
        for epoch in 1..rounds {
            let ((on_sent, roots), (off_sent, _)) = (per_round(&on, epoch), per_round(&off, epoch));
            assert_eq!(roots, 140, "Cora's public training vertices all have in-edges");
            let factors = (w - 1) * roots * width * 4 + w * (w - 1) * 16;
            assert_eq!(off_sent + factors, on_sent + 2 * (w - 1) * left_out * 4, "{tag}, round {epoch}");
        }
    }
}

#[test]
fn a_worker_without_training_vertices_takes_part_in_the_factored_exchange() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // One training vertex per class: 7 over 8 workers, so at least one trains none.
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/planetoid/converted/cora");
    let from = from.to_str().unwrap();
    json(d, &["download", "cora", "--from", from, "--format", "text", "--split-per-class", "1,50,500"]);
    let run = |fg: &str| {
        let args = ["train", "cora", "--no-tui", "--strategy", "retexo", "--workers", "8", "--hidden", "16"];
        let rest = ["--rounds", "3", "--optimizer", "sgd", "--lr", "1", "--factored-grads", fg, "--run", fg];
        verbose_json(d, &[&args[..], &rest].concat())
    };
    let ((on, log), (off, _)) = (run("on"), run("off"));
    let roots: Vec<u64> =
        records(d, &on).iter().filter(|r| count(&r["epoch"]) == 0).map(|r| count(&r["roots"])).collect();
    assert_eq!(roots.iter().sum::<u64>(), 7, "{roots:?}");
    assert!(roots.contains(&0), "every worker has a training vertex: {roots:?}");
    // Both stages factor here, the last at its conv output (the classes).
    for said in [
        "stage 1: the gradient crosses as factors at its logits (7 wide)",
        "stage 2: the gradient crosses as factors at its conv output (7 wide)",
    ] {
        assert!(log.contains(said), "no `{said}` in {log}");
    }
    let (a, b) = (weights(&final_weights(d, "on")), weights(&final_weights(d, "off")));
    assert_eq!(a.len(), b.len());
    for (i, (p, q)) in a.iter().zip(&b).enumerate() {
        assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "weight {i}: {p} against {q}");
    }
    assert_eq!(on["test_accuracy"], off["test_accuracy"]);
}

/// Runs `whole` (2 workers, 2 stages of 3 rounds) and the same run `cut`,
/// stopped after round `stop_after`; returns both summaries.
fn whole_and_stopped(d: &Path, stop_after: u64) -> (serde_json::Value, serde_json::Value) {
    let whole = json(d, &[STAGED, &["--run", "whole"]].concat());
    let stop = stop_after.to_string();
    let stopped = json(d, &[STAGED, &["--run", "cut", "--stop-after", &stop]].concat());
    (whole, stopped)
}

/// The run of `whole_and_stopped`: 2 workers, 2 stages of 3 rounds.
const STAGED: &[&str] = &[
    "train",
    "cora",
    "--no-tui",
    "--strategy",
    "retexo",
    "--workers",
    "2",
    "--model",
    "sage",
    "--hidden",
    "16",
    "--rounds",
    "3",
    "--seed",
    "3",
];

/// The round (epoch) of run `run`'s checkpoint.
fn checkpoint_round(d: &Path, run: &str) -> u64 {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join(format!("runs/{run}/checkpoint/state.json"))).unwrap()).unwrap();
    count(&state["progress"]["epoch"])
}

/// Resumes `cut` (see `whole_and_stopped`), whose checkpoint must be of
/// round `at`, and checks that it ends as `whole` did (every round's loss
/// and accuracies, the weights), each round recorded once per worker;
/// returns the resumed summary.
fn resumed_from(d: &Path, whole: &serde_json::Value, at: u64) -> serde_json::Value {
    assert_eq!(checkpoint_round(d, "cut"), at, "the checkpoint's round");
    let resumed = json(d, &["train", "--no-tui", "--resume", "cut"]);
    assert_eq!(final_weights(d, "whole"), final_weights(d, "cut"));
    assert_eq!(resumed["test_accuracy"], whole["test_accuracy"]);
    assert_eq!(scores(&resumed), scores(whole), "every round's loss and accuracies");
    let rounds: Vec<u64> = records(d, &resumed).iter().map(|r| count(&r["epoch"])).collect();
    assert_eq!(rounds.len(), 12, "each round once per worker after the resume: {rounds:?}");
    resumed
}

/// A stop inside a stage checkpoints at its round, with the stage's
/// optimizer and best state so far: it used to go back to the stage's
/// start, so a stage longer than a Slurm job's time-limit warning was
/// trained again by every job and never finished.
#[test]
fn a_run_stopped_mid_stage_resumes_from_its_round_to_the_same_result() {
    let tmp = cora();
    let d = tmp.path();
    // Stopped after round 5 of 6 (stage 2's second round).
    let (whole, stopped) = whole_and_stopped(d, 5);
    // Its stage 2 is not its best state there: infer used to score such a
    // checkpoint anyway, at chance (Cora test accuracy 0.08-0.16 against the
    // 0.59-0.72 the run reported), without a word. It is refused, in
    // process and on workers, before any output is written.
    for workers in [&[][..], &["--workers", "2"]] {
        let e = fails(d, &[&["infer", "cut"][..], workers].concat(), 2);
        for said in
            ["stopped in stage 2 of 2", "round 5 of 6", "round 2 of that stage's 3", "untrained", "train --resume cut"]
        {
            assert!(e.contains(said), "{workers:?}: no `{said}` in {e}");
        }
        assert!(!d.join("runs/cut/predictions.safetensors").exists(), "{workers:?}");
    }
    let resumed = resumed_from(d, &whole, 5);
    // No round trained again: beyond the uninterrupted run's gradients the
    // resumed one moved only the stage's set-up again (its factored
    // exchange's choice), less than one round's all-reduce.
    let round: u64 = records(d, &whole)
        .iter()
        .filter(|r| count(&r["epoch"]) == 4)
        .map(|r| count(&r["bytes_out"]["gradients"]))
        .sum();
    let extra = bytes(&resumed, "gradients") - bytes(&whole, "gradients");
    assert!(extra < round, "{extra} more gradient bytes than the uninterrupted run, a round is {round}");
    // Finished, it is inferred as the run reported it.
    let r = json(d, &["infer", "cut"]);
    assert_eq!(r["accuracy"]["test"], resumed["test_accuracy"], "{r}");
    // The bytes are the whole run's: what the stopped run moved (its
    // checkpoint's count, stage 1's rounds among them; the same as its
    // summary's but for the setup's control, which the resumed workers do
    // again) and what the resumed workers moved (workers.json, each since it
    // started). They were the resumed workers' only: stage 1's gradients
    // were missing.
    let workers: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(d.join("runs/cut/workers.json")).unwrap()).unwrap();
    assert_eq!(workers.len(), 2);
    for cat in ["features", "gradients", "activations", "control"] {
        let since: u64 = workers.iter().map(|w| count(&w["bytes"]["sent"][cat])).sum();
        let eval: u64 = workers.iter().map(|w| count(&w["eval_bytes"][cat])).sum();
        if cat == "control" {
            assert!(bytes(&resumed, cat) < bytes(&stopped, cat) + since, "{cat}: {}", resumed["bytes"]);
        } else {
            assert_eq!(bytes(&resumed, cat), bytes(&stopped, cat) + since, "{cat}: {}", resumed["bytes"]);
        }
        assert_eq!(count(&resumed["bytes"]["eval"][cat]), count(&stopped["bytes"]["eval"][cat]) + eval, "{cat}");
        assert!(bytes(&resumed, cat) >= bytes(&whole, cat), "{cat}: {} against {}", resumed["bytes"], whole["bytes"]);
    }
    assert!(bytes(&stopped, "gradients") > 0, "{}", stopped["bytes"]);
}

/// A run stopped inside a stage whose driver was killed before it wrote the
/// stop's summary (`kill -9` while rank 0 held at the stop's checkpoint)
/// resumed with a warning that the checkpoint held no count, and counted
/// from the checkpoint on: the rounds before the stop were missing. The
/// stop's checkpoint now carries the count, and the resumed run reports
/// what the same run stopped and resumed with its summary reports. That
/// one used to report more control, about 185 KB on 2 workers: its summary
/// holds the stopped attempt's setup (its mesh, the weights' broadcast, the
/// barriers around training), which the resumed attempt does again; it now
/// takes the checkpoint's count too.
#[test]
fn a_run_stopped_mid_stage_whose_driver_was_killed_resumes_with_the_stopped_runs_totals() {
    let tmp = cora();
    let d = tmp.path();
    // Stopped after round 2 of 6 (stage 1's second round): `cut`, with its summary.
    let (whole, _) = whole_and_stopped(d, 2);
    let cut = resumed_from(d, &whole, 2);
    let pause = [("LEAPGNN_TEST_PAUSE", "checkpoint-written")];
    let mut drv = Driver::start_env(d, &[STAGED, &["--run", "killed", "--stop-after", "2"]].concat(), &pause);
    let pids: Vec<u32> = drv.workers(2).iter().map(|w| w.pid).collect();
    let within = std::time::Duration::from_secs(60);
    drv.wait_line(within, |l| l.contains("test pause: checkpoint-written"));
    signal(drv.child.id(), "KILL");
    drv.child.wait().unwrap();
    assert_eq!(wait_gone(&pids, within), Vec::<u32>::new(), "workers outlived their driver");
    assert!(!d.join("runs/killed/summary.json").exists(), "a killed driver wrote a summary");
    assert_eq!(checkpoint_round(d, "killed"), 2, "the checkpoint's round");
    let out = leapgnn(d, &["train", "--no-tui", "--resume", "killed", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("holds no count"), "{stderr}");
    let killed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(final_weights(d, "killed"), final_weights(d, "whole"));
    let (b, s, u) = (&killed["bytes"], &cut["bytes"], &whole["bytes"]);
    println!("driver killed: {b}\nstopped:       {s}\nuninterrupted: {u}");
    for cat in ["features", "gradients", "migration", "activations", "control"] {
        assert_eq!(count(&b["eval"][cat]), count(&s["eval"][cat]), "eval {cat}: {b} vs {s}");
        let (r, c) = (count(&b["train"][cat]), count(&s["train"][cat]));
        // The same training, and the same setup done again by the resumed attempt.
        assert_eq!(r, c, "train {cat}: {b} vs {s}");
        if cat == "control" {
            // The count is from the start of training, not the stopped attempt's
            // setup before it: the uninterrupted run's control and the stop's
            // exchange of counts, 128 x W x (W - 1).
            assert_eq!(r, count(&u["train"][cat]) + 128 * 2, "train {cat}: {b} vs {u}");
        }
    }
    assert_eq!(killed["rows"], cut["rows"]);
}

#[test]
fn infer_scores_a_retexo_run_as_its_last_stage_evaluated_it_in_process_and_on_two_workers() {
    use leapgnn::format::DatasetFile;
    let tmp = cora();
    let d = tmp.path();
    let ds = DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    for model in ["sage", "gat"] {
        let run = format!("rx-{model}");
        let args = ["--model", model, "--hidden", "32", "--rounds", "60", "--seed", "1", "--run", &run];
        let s = json(d, &[TRAIN, &args].concat());
        let one = d.join(format!("runs/{run}/predictions.safetensors"));
        let two = d.join(format!("{run}-2.safetensors"));
        let r = json(d, &["infer", &run, "--embeddings", "0"]);
        assert_eq!(r["nodes"], 2708);
        let r2 = json(d, &["infer", &run, "--workers", "2", "--embeddings", "0", "--out", two.to_str().unwrap()]);
        // The second worker's hidden rows cross once, for the one hidden stage.
        assert!(count(&r2["bytes_by_category"]["activations"]) > 0, "{r2}");
        let (one, two) = (load_infer(&one), load_infer(&two));
        // The checkpoint holds each stage's best-validation state, which is
        // what the run's test accuracy was taken with.
        let pred = &one.u32s["prediction"];
        let correct = ds.test().iter().filter(|&&v| pred[v as usize] as i32 == ds.labels()[v as usize]).count();
        let acc = correct as f64 / ds.test().len() as f64;
        assert_eq!(acc, s["test_accuracy"].as_f64().unwrap(), "{model}");
        assert!(acc > 0.6, "{model}: test accuracy {acc} (majority class 0.319)");
        assert_eq!(pred, &two.u32s["prediction"], "{model}: one worker and two predict differently");
        for name in ["probs", "embeddings"] {
            let ((sa, a), (sb, b)) = (&one.f32s[name], &two.f32s[name]);
            assert_eq!(sa, sb, "{model} {name}");
            let diff = max_abs_diff(a, b);
            assert!(diff <= 1e-5, "{model} {name}: one worker and two differ by {diff}");
        }
        // Stage 0's embedding: `hidden` columns (GAT's heads averaged), after the ReLU.
        let (shape, e) = &one.f32s["embeddings"];
        assert_eq!(shape, &[2708, 32], "{model}");
        assert!(e.iter().all(|&x| x >= 0.0) && e.iter().any(|&x| x > 0.0), "{model}");
    }
    // Two stages: stage 0 is the only hidden one.
    let e = fails(d, &["infer", "rx-sage", "--embeddings", "1"], 2);
    assert!(e.contains("--embeddings 1"), "{e}");
}

/// A stop at a stage's last round used to throw the whole stage away: the
/// checkpoint stayed at the stage's start, and the resumed run trained it
/// again. The workers now finish the stage (its best state, the embeddings
/// the next stage reads) and stop at the next stage's checkpoint; the resume
/// trains the next stage only, to the uninterrupted run's weights.
#[test]
fn a_run_stopped_at_a_stages_last_round_keeps_the_stage() {
    let tmp = cora();
    let d = tmp.path();
    let (whole, stopped) = whole_and_stopped(d, 3);
    assert_eq!(stopped["iterations"], 3);
    let resumed = resumed_from(d, &whole, 3);
    // Stage 1 trained once: the resumed workers moved only stage 2's gradients.
    let workers: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(d.join("runs/cut/workers.json")).unwrap()).unwrap();
    let since: u64 = workers.iter().map(|w| count(&w["bytes"]["sent"]["gradients"])).sum();
    assert_eq!(bytes(&resumed, "gradients"), bytes(&whole, "gradients"), "{}", resumed["bytes"]);
    assert!(since < bytes(&stopped, "gradients"), "{since} against {}", stopped["bytes"]);
    // Finished: a resume has nothing to train, and no --epochs makes a RETEXO
    // run longer (they told the user to give --epochs, which RETEXO refuses,
    // naming --rounds, which --resume refuses).
    for more in [&[][..], &["--epochs", "9"]] {
        let err = fails(d, &[&["train", "--no-tui", "--resume", "cut"], more].concat(), 2);
        assert!(err.contains("cannot be made longer") && err.contains("new run with more --rounds"), "{err}");
    }
}

/// SIGUSR1 (a Slurm time limit's warning) inside a long stage: the run stops
/// after the round under way, says it stopped for the time limit, and its
/// checkpoint is of that round, not of the stage's start (iteration 0).
#[test]
fn a_time_limit_inside_a_stage_checkpoints_at_the_round_it_stopped_in() {
    let tmp = cora();
    let d = tmp.path();
    let args = ["train", "cora", "--no-tui", "--strategy", "retexo", "--workers", "2", "--hidden", "16"];
    let mut drv = Driver::start(d, &[&args[..], &["--rounds", "100000", "--run", "long"]].concat());
    drv.wait_line(std::time::Duration::from_secs(60), |l| {
        l.starts_with("epoch") && l.split_whitespace().nth(1).is_some_and(|e| e.starts_with("2/"))
    });
    signal(drv.child.id(), "USR1");
    let (code, stderr) = drv.wait_exit(std::time::Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let head = "stopped for the job's time limit (SIGUSR1 from `slurm-script --stop-before`) after iteration ";
    let line = stderr.lines().find(|l| l.starts_with(head)).unwrap_or_else(|| panic!("no `{head}` in {stderr}"));
    let after: u64 = line[head.len()..].split(',').next().unwrap().parse().unwrap();
    assert!(after >= 2, "{line}");
    assert_eq!(checkpoint_round(d, "long"), after, "{line}");
    assert!(line.contains("train --resume long"), "{line}");
}

/// A frame's header, in bytes.
const FRAME: u64 = 16;

/// A ring all-reduce of `floats` over `w` workers: 2 (W - 1) frames per
/// worker and `floats` x 4 bytes per step over all workers.
fn all_reduce(w: u64, floats: u64) -> u64 {
    2 * (w - 1) * (floats * 4 + w * FRAME)
}

/// The bytes of a RETEXO run of `cora()`'s Cora on `w` random parts, `layers`
/// stages of `rounds` rounds, `hidden` wide, with `params` parameters in all,
/// outside its training gradients: they do not depend on the model's
/// exchange of gradients.
struct Fixed {
    features: u64,
    activations: u64,
    eval: u64,
    control: u64,
}

impl Fixed {
    fn of(d: &Path, w: u64, (layers, rounds, hidden): (u64, u64, u64), params: u64) -> Fixed {
        let (frame, feats) = (FRAME, 1433);
        let halo = halo_counts(d, "cora", "random", w as usize);
        let pairs = || (0..w as usize).flat_map(|r| (0..w as usize).filter(move |&o| o != r).map(move |o| (r, o)));
        // Before stage 0 each worker asks each owner for its halo rows (u32 ids)
        // and gets them back dense after a 4-byte status.
        let features = pairs()
            .map(|(r, o)| halo[r][o])
            .filter(|&h| h > 0)
            .map(|h| frame + 4 * h + frame + 4 + 4 * h * feats)
            .sum();
        // Before every later stage each worker sends each peer the frozen
        // embeddings of its rows in the peer's halo (one frame, empty or not).
        let activations = (1..layers).map(|_| pairs().map(|(r, o)| halo[r][o] * hidden * 4 + frame).sum::<u64>()).sum();
        // Every round's evaluation all-reduces 4 counts.
        let eval = layers * rounds * all_reduce(w, 4);
        // The mesh's handshake per pair (two hellos of 12 + 32 bytes, two
        // 32-byte proofs, a welcome), rank 0's weights broadcast to each peer,
        // the barrier that starts training, and each stage's checkpoint gather of
        // 14 u64 counts from every worker to every other. The final gather is
        // no part of the run's bytes.
        let handshakes = w * (w - 1) / 2 * (2 * (frame + 44) + 2 * (frame + 32) + frame);
        let control =
            handshakes + (w - 1) * (params * 4 + frame) + w * (w - 1) * frame + layers * w * (w - 1) * (frame + 14 * 8);
        Fixed { features, activations, eval, control }
    }

    /// `s`'s bytes are these and `gradients` (training's, evaluation's apart).
    fn assert_run(&self, s: &serde_json::Value, gradients: u64, what: &str) {
        let b = &s["bytes"];
        assert_eq!(count(&b["features"]), self.features, "{what}: {b}");
        assert_eq!(count(&b["activations"]), self.activations, "{what}: {b}");
        assert_eq!(count(&b["gradients"]), gradients + self.eval, "{what}: {b}");
        assert_eq!(count(&b["eval"]["gradients"]), self.eval, "{what}: {b}");
        assert_eq!(count(&b["control"]), self.control, "{what}: {b}");
        assert_eq!(count(&b["migration"]), 0, "{what}: {b}");
        for c in ["features", "activations", "control", "migration"] {
            assert_eq!(count(&b["eval"][c]), 0, "{what}: evaluation sends only its counts' all-reduce: {b}");
        }
    }
}

/// Every byte of a RETEXO run on 3 workers, by category, from its formula,
/// with every gradient all-reduced and with the default factored exchange:
/// it used to be checked only as fewer than full-graph training's, so a
/// count that doubled or dropped an exchange went unseen.
#[test]
fn a_runs_bytes_in_every_category_are_those_of_its_formula() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden, rounds, layers, feats, classes) = (3u64, 16u64, 2u64, 2u64, 1433u64, 7u64);
    let runs = ["off", "on"].map(|fg| {
        let args = ["--model", "sage", "--hidden", "16", "--rounds", "2", "--layers", "2", "--factored-grads", fg];
        let train = ["train", "cora", "--no-tui", "--strategy", "retexo", "--workers", "3", "--run", fg];
        (fg, verbose_json(d, &[&train[..], &args].concat()))
    });
    let (frame, all_reduce) = (FRAME, |floats: u64| all_reduce(w, floats));
    // SAGE's [out, 2 in] weight and bias; every stage but the last has a
    // LayerNorm and a [classes, hidden] head.
    let stage = |l: u64| {
        let (d_in, d_out) = (if l == 0 { feats } else { hidden }, if l + 1 == layers { classes } else { hidden });
        let head = if l + 1 == layers { 0 } else { 2 * hidden + classes * hidden + classes };
        d_out * 2 * d_in + d_out + head
    };
    let fixed = Fixed::of(d, w, (layers, rounds, hidden), (0..layers).map(stage).sum());
    // Every stage ends with an all-reduce of one 4-piece hash per worker (the
    // best states agree, so none is broadcast).
    let hash = all_reduce(4 * w);
    // All-reduced, every round sends the stage's gradient with the loss and the stop vote.
    let all_reduced = |l: u64| rounds * all_reduce(stage(l) + 2) + hash;
    // Factored (`factored`): each worker's training rows, the cached
    // [mean of in-neighbours | self] of SAGE, cross once as one message to
    // each peer (a row count, then per row its id and length, and per
    // non-zero a column and a value), then every round each worker's output
    // gradient (its rows x width x 4 bytes) goes to each peer, and only the
    // loss and the stop vote are all-reduced.
    let (n, nnz) = sage_training_rows(d);
    let rows_message = |nnz: u64| (w - 1) * (4 * w + 8 * n + 8 * nnz) + w * (w - 1) * frame;
    let output_grads = |width: u64| (w - 1) * n * width * 4 + w * (w - 1) * frame;
    // Each stage first all-reduces its message's bytes and row count to
    // choose (`Cost::pays`): factors where their bytes, frames aside, are
    // fewer than the ring's over the stage. Stage 0 cuts at its 7 logits
    // (fewer than its 16 conv outputs) and pays; stage 1 cuts at its conv
    // output (the 7 classes) and would not pay even with no non-zero.
    let factors = |nnz: u64| (w - 1) * (4 * w + 8 * n + 8 * nnz + rounds * n * classes * 4);
    let ring = |l: u64| rounds * 2 * (w - 1) * stage(l) * 4;
    assert!(factors(nnz) < ring(0) && factors(0) >= ring(1), "{} {} {}", factors(nnz), ring(0), ring(1));
    let choice = all_reduce(2);
    let stage_0 = choice + rows_message(nnz) + rounds * (all_reduce(2) + output_grads(classes)) + hash;
    let on = stage_0 + choice + all_reduced(1);
    let off: u64 = (0..layers).map(all_reduced).sum();
    for ((fg, (s, log)), gradients) in runs.iter().zip([off, on]) {
        if *fg == "on" {
            for said in [
                "stage 1: the gradient crosses as factors at its logits (7 wide)",
                "stage 2: the gradient is all-reduced",
            ] {
                assert!(log.contains(said), "no `{said}` in {log}");
            }
        }
        fixed.assert_run(s, gradients, &format!("--factored-grads {fg}"));
    }
}

/// Cora's training vertices with an in-edge (those RETEXO trains on) and
/// the non-zeros of their SAGE input rows `[mean of in-neighbours | self]`,
/// recomputed from the dataset: its features are 0 or 1, so the mean is
/// non-zero in every column one in-neighbour has.
fn sage_training_rows(d: &Path) -> (u64, u64) {
    let ds = leapgnn::format::DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    let (g, dim) = (ds.graph(), ds.feature_dim());
    let cols = |v: u32| -> Vec<usize> {
        let row = ds.feature_row(v).to_dense(dim);
        row.iter().enumerate().filter(|(_, x)| **x != 0.0).map(|(c, _)| c).collect()
    };
    let (mut n, mut nnz) = (0, 0);
    for &v in ds.train().iter().filter(|&&v| !g.in_neighbors(v).is_empty()) {
        let around: std::collections::BTreeSet<usize> = g.in_neighbors(v).iter().flat_map(|&u| cols(u)).collect();
        n += 1;
        nnz += (around.len() + cols(v).len()) as u64;
    }
    (n, nnz)
}

/// RETEXO's factored GAT exchange to the byte: a 3-worker run (2 stages of 2
/// rounds, hidden 16, 8 heads) whose stage 0 sends each peer, once, the ids
/// of the rows its training vertices attend over and their edges, and the
/// values of only the rows that peer does not hold already, then every round
/// the gradients of their logits. What a worker sends each peer depends on
/// which of its training vertices' in-edges cross the partition and which of
/// those rows are the peer's own or halo rows, so it is recomputed here from
/// the run's partition file and Cora's edges and features: an extra,
/// duplicated or dropped row, edge or id changes the total. It was checked
/// only against the all-reduce per round (not the rows it sends once), and
/// each peer used to get every row, about 80% of which it held.
#[test]
fn a_gat_runs_factored_exchange_moves_the_bytes_of_its_partitions_edges_and_rows() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden, rounds, layers, heads, feats, classes) = (3u64, 16u64, 2u64, 2u64, 8u64, 1433u64, 7u64);
    let args = ["--model", "gat", "--hidden", "16", "--heads", "8", "--rounds", "2", "--layers", "2"];
    let train = ["train", "cora", "--no-tui", "--strategy", "retexo", "--workers", "3"];
    let (s, log) = verbose_json(d, &[&train[..], &args].concat());
    // GAT's conv: `heads` projections [d_out, d_in], two attention vectors of
    // heads x d_out and a bias; every stage but the last has a LayerNorm and
    // a [classes, hidden] head.
    let stage = |l: u64| {
        let (d_in, d_out) = (if l == 0 { feats } else { hidden }, if l + 1 == layers { classes } else { hidden });
        let head = if l + 1 == layers { 0 } else { 2 * hidden + classes * hidden + classes };
        heads * d_out * d_in + 2 * heads * d_out + d_out + head
    };
    let fixed = Fixed::of(d, w, (layers, rounds, hidden), (0..layers).map(stage).sum());
    let shares = gat_shares(d, w as usize);
    let n: u64 = shares.iter().map(|p| p.dst).sum::<u64>() / (w - 1);
    assert_eq!(n, 140, "Cora's public training vertices all have in-edges");
    let messages = |with_values: bool| shares.iter().map(|p| p.bytes(with_values)).sum::<u64>();
    // Each stage first all-reduces its messages' bytes and row count to
    // choose (`Cost::pays`), and logs both figures. Stage 0 cuts at its 7
    // logits (fewer than its 16 conv outputs) and pays. Stage 1's rows are
    // the embeddings of the same vertices, whose non-zeros are the run's:
    // its cut (its conv output, the 7 classes) is all-reduced, as its log
    // says, and its factors would have been at least those without values.
    let factors = |messages: u64| messages + (w - 1) * rounds * n * classes * 4;
    let ring = |l: u64| rounds * 2 * (w - 1) * stage(l) * 4;
    let (with, without) = (factors(messages(true)), factors(messages(false)));
    assert!(with < ring(0), "{with} {}", ring(0));
    let [with, without, ring_0, ring_1] = [with, without, ring(0), ring(1)].map(|b| bytes_in_words(b as f64));
    for said in [
        format!(
            "stage 1: the gradient crosses as factors at its logits (7 wide): {with} over the stage, against {ring_0}"
        ),
        format!("stage 2: the gradient is all-reduced: {ring_1} over the stage, against "),
    ] {
        assert!(log.contains(&said), "no `{said}` (factors without values: {without}) in {log}");
    }
    let (choice, hash) = (all_reduce(w, 2), all_reduce(w, 4 * w));
    // Stage 0: each worker's message once to each peer, then every round the
    // loss and the stop vote all-reduced and its logits' gradients (its
    // training vertices x 7 x 4 bytes) to each peer, one frame per message.
    let frames = w * (w - 1) * FRAME;
    let output_grads = (w - 1) * n * classes * 4 + frames;
    let stage_0 = choice + messages(true) + frames + rounds * (all_reduce(w, 2) + output_grads) + hash;
    // Stage 1: every round all-reduces its gradient with the loss and the stop vote.
    let stage_1 = choice + rounds * all_reduce(w, stage(1) + 2) + hash;
    fixed.assert_run(&s, stage_0 + stage_1, "GAT, factored");
}

/// One worker's message to one peer in RETEXO's factored GAT exchange of stage 0.
struct GatShare {
    /// The sender's training vertices with an in-edge (the destinations).
    dst: u64,
    /// Their in-edges, each with its self loop.
    edges: u64,
    /// The distinct vertices they attend over (themselves and their in-neighbours).
    rows: u64,
    /// Those of `rows` the peer does not hold as its own or halo input rows.
    sent: u64,
    /// The non-zeros of the features of the `sent` vertices.
    nnz: u64,
}

impl GatShare {
    /// Its message (`GatPart::encode`): a destination count, an edge count
    /// per destination and a source position per edge, a row count and an id
    /// per row, a bitmap of the rows sent (a bit per row, in 4-byte
    /// words), then only the rows the peer lacks (per row a length, per
    /// non-zero a column and a value; `with_values` false leaves the
    /// non-zeros out), all 4-byte words.
    fn bytes(&self, with_values: bool) -> u64 {
        4 * (1 + self.dst + self.edges)
            + 4
            + 4 * self.rows
            + 4 * self.rows.div_ceil(32)
            + 4 * self.sent
            + if with_values { 8 * self.nnz } else { 0 }
    }
}

/// Each worker's message to each peer (sender, then receiver, by rank; none
/// to itself), recomputed from `cora()`'s Cora and its random partition
/// into `w` parts: a vertex's row crosses once however many of the sender's
/// training vertices attend over it, and not at all to a peer that owns it
/// or owns one of its out-neighbours (its halo).
fn gat_shares(d: &Path, w: usize) -> Vec<GatShare> {
    use leapgnn::format::{DatasetFile, ManifestFile};
    use std::collections::BTreeSet;
    let ds = DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    let manifest = ManifestFile::open(d.join(format!("cora/parts/random-{w}"))).unwrap();
    let (part, g, dim) = (manifest.node_part(), ds.graph(), ds.feature_dim());
    let nnz = |v: u32| ds.feature_row(v).to_dense(dim).iter().filter(|x| **x != 0.0).count() as u64;
    let owner = |v: u32| part[v as usize] as usize;
    // What each worker holds: its vertices and their in-neighbours.
    let mut held: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); w];
    for v in 0..g.num_nodes() as u32 {
        held[owner(v)].extend(std::iter::once(v).chain(g.in_neighbors(v).iter().copied()));
    }
    let mut shares = Vec::new();
    for k in 0..w {
        let dst: Vec<u32> =
            ds.train().iter().copied().filter(|&v| owner(v) == k && !g.in_neighbors(v).is_empty()).collect();
        let rows: BTreeSet<u32> =
            dst.iter().flat_map(|&v| std::iter::once(v).chain(g.in_neighbors(v).iter().copied())).collect();
        for (_, held) in held.iter().enumerate().filter(|&(q, _)| q != k) {
            let sent: Vec<u32> = rows.difference(held).copied().collect();
            let share = GatShare {
                dst: dst.len() as u64,
                edges: dst.iter().map(|&v| g.in_neighbors(v).len() as u64 + 1).sum(),
                rows: rows.len() as u64,
                sent: sent.len() as u64,
                nnz: sent.iter().map(|&v| nnz(v)).sum(),
            };
            shares.push(share);
        }
    }
    shares
}
