//! `--strategy varco`: each layer's halo exchange moves exactly the halo rows
//! times the columns the ratio schedule keeps (forward and backward, layer 0's
//! features included, the last layer never compressed), evaluation exchanges
//! at the same ratio, and without compression the gradient is plain
//! full-graph training's. Real processes on Cora, METIS parts.

mod dist_support;

use dist_support::{
    cora, count, fails, final_weights, first_gradient, halo_counts, json, records, rel_diff, scores,
    straight_and_resumed,
};

/// r(t) of the schedule, computed here independently of the library.
fn ratio(t: u64, steps: u64, (max, min, slope): (f64, f64, f64)) -> f64 {
    (max - slope * t as f64 * (max - min) / (steps as f64 - 2.0)).max(min)
}

#[test]
fn compressed_exchange_moves_halo_rows_times_kept_columns_plus_framing() {
    let tmp = cora();
    let d = tmp.path();
    let (w, steps, hidden) = (3usize, 4u64, 16usize);
    let sched = (8.0, 2.0, 1.0);
    let s = json(
        d,
        &[
            "train",
            "cora",
            "--no-tui",
            "--strategy",
            "varco",
            "--workers",
            "3",
            "--hidden",
            "16",
            "--epochs",
            "4",
            "--max-ratio",
            "8",
            "--min-ratio",
            "2",
            "--slope",
            "1",
        ],
    );
    assert_eq!(s["mode"], "full-graph", "varco implies the full-graph engine");
    assert_eq!(s["strategy"], "varco");
    let halo = halo_counts(d, "cora", "metis", w);
    // Layer inputs: the 1433 features, then two hidden layers; the last is never compressed.
    let widths = [1433usize, hidden, hidden];
    let kept = |t: u64| -> Vec<u64> {
        let r = ratio(t, steps, sched);
        widths.iter().enumerate().map(|(l, &d)| if l == 2 { d as u64 } else { (d as f64 / r).floor() as u64 }).collect()
    };
    assert_eq!(kept(0), [179, 2, 16]);
    assert_eq!(kept(2), [716, 8, 16]);
    let recs = records(d, &s);
    assert_eq!(recs.len() as u64, steps * 3 * w as u64);
    let mut total = 0;
    for r in &recs {
        let (rank, layer, t) = (count(&r["worker"]) as usize, count(&r["layer"]) as usize, count(&r["epoch"]));
        let k = kept(t)[layer];
        assert_eq!(count(&r["columns"]), k, "{r}");
        // Forward: the rows each peer holds as halo from here, k columns each;
        // backward (hidden layers only: the features need no gradient): the
        // gradients of this worker's halo rows, k columns each. 16 bytes of
        // framing per message.
        let sent: u64 = (0..w).filter(|&q| q != rank).map(|q| halo[q][rank] * k * 4 + 16).sum();
        let back: u64 = (0..w).filter(|&q| q != rank).map(|q| halo[rank][q] * k * 4 + 16).sum();
        let want = if layer == 0 { sent } else { sent + back };
        assert_eq!(count(&r["bytes_out"]["activations"]), want, "{r}");
        total += want;
    }
    // Each evaluation runs the same forward exchange at the ratio of the step just trained.
    let halo_rows: u64 = halo.iter().flatten().sum();
    let frames = (w * (w - 1)) as u64 * 16;
    let eval: u64 = (0..steps).map(|t| kept(t).iter().map(|k| halo_rows * k * 4 + frames).sum::<u64>()).sum();
    assert_eq!(count(&s["bytes"]["activations"]), total + eval);
    assert!(s["test_accuracy"].as_f64().unwrap() > 0.3, "{s}");
}

#[test]
fn without_compression_the_gradient_is_full_graph_trainings() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["--layers", "3", "--hidden", "16", "--dropout", "0", "--weight-decay", "0", "--seed", "3"];
    let (plain, _) = first_gradient(d, "cora", &[&["--full-batch", "--workers", "1"], &common[..]].concat());
    for workers in ["1", "3"] {
        let (g, s) = first_gradient(
            d,
            "cora",
            &[&["--strategy", "varco", "--compression", "none", "--workers", workers], &common[..]].concat(),
        );
        assert_eq!(s["strategy"], "varco");
        let e = rel_diff(&plain, &g);
        assert!(e <= 1e-5, "W={workers}: relative difference from plain full-graph {e}");
    }
    // The compressed exchange changes the step (r(0) = 128 keeps 11 of 1433
    // feature columns and no hidden column of 16 from other workers' rows).
    let (g, s) = first_gradient(d, "cora", &[&["--strategy", "varco", "--workers", "3"], &common[..]].concat());
    assert!(count(&s["bytes"]["activations"]) > 0);
    let e = rel_diff(&plain, &g);
    assert!(e > 1e-3, "variable compression left the gradient unchanged ({e})");
}

#[test]
fn a_stopped_run_resumes_at_its_ratio_and_ends_as_an_uninterrupted_one() {
    let tmp = cora();
    let d = tmp.path();
    let run = [
        "train",
        "cora",
        "--no-tui",
        "--strategy",
        "varco",
        "--workers",
        "3",
        "--hidden",
        "16",
        "--epochs",
        "5",
        "--max-ratio",
        "8",
        "--min-ratio",
        "2",
        "--slope",
        "1",
    ];
    // Stopped after step 2, before that epoch's evaluation: the resumed run
    // evaluates it, at step 2's ratio, then trains on from step 3.
    let (whole, resumed) = straight_and_resumed(d, &run, ["whole", "cut"], 2, || ());
    assert_eq!(resumed["iterations"], 5);
    assert_eq!(scores(&resumed), scores(&whole));
    assert_eq!(final_weights(d, "cut"), final_weights(d, "whole"), "final weights differ");
}

#[test]
fn the_minibatch_refusal_reads_as_one_sentence() {
    let tmp = cora();
    let err = fails(tmp.path(), &["train", "cora", "--no-tui", "--strategy", "varco", "--mode", "minibatch"], 2);
    assert!(
        err.contains("VARCO compresses the full-graph engine's halo exchange, so it always trains the whole graph"),
        "{err}"
    );
    assert!(!err.contains("  "), "a run of spaces in `{err}`");
}

/// VARCO's defaults (no dropout, no weight decay) take Cora's loss below a
/// thousandth within 30 steps: the epoch lines and the closing line print it
/// with its digits (`2.35e-6`), as the summary has it, not as `0.0000`.
#[test]
fn a_loss_below_a_thousandth_is_printed_with_its_digits() {
    let tmp = cora();
    let d = tmp.path();
    let args =
        ["train", "cora", "--no-tui", "--strategy", "varco", "--workers", "2", "--hidden", "16", "--epochs", "30"];
    // (--json prints no epoch lines: the summary is read from the run's directory.)
    let out = dist_support::leapgnn(d, &[&args[..], &["--run", "tiny-loss"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let summary = std::fs::read(d.join("runs/tiny-loss/summary.json")).unwrap();
    let s: serde_json::Value = serde_json::from_slice(&summary).unwrap();
    let after = |l: &str, key: &str| -> Option<f64> {
        l.split(key).nth(1)?.split(|c: char| c.is_whitespace() || c == ';').next()?.parse().ok()
    };
    // What a printed loss may differ by: half its last digit.
    let close = |printed: f64, loss: f64| {
        let digit = if loss.abs() < 1e-3 { loss.abs() * 5e-3 } else { 5e-5 };
        (printed - loss).abs() <= digit * 1.0001
    };
    let printed: Vec<f64> =
        err.lines().filter(|l| l.trim_start().starts_with("epoch ")).filter_map(|l| after(l, "loss ")).collect();
    let history: Vec<f64> = s["history"].as_array().unwrap().iter().map(|e| e["loss"].as_f64().unwrap()).collect();
    assert_eq!(printed.len(), history.len(), "{err}");
    assert!(history.iter().any(|&l| l > 0.0 && l < 1e-4), "the loss stays above 1e-4: {history:?}");
    for (p, h) in printed.iter().zip(&history) {
        assert!(close(*p, *h), "printed loss {p} for {h}:\n{err}");
    }
    let last = err.lines().find(|l| l.contains("final loss ")).unwrap_or_else(|| panic!("{err}"));
    let final_loss = s["final_loss"].as_f64().unwrap();
    assert!(after(last, "final loss ").is_some_and(|p| close(p, final_loss)), "{last} for {final_loss}");
}
