//! Partitions decoupled from workers: `--parts K --workers W` for K >= W, each
//! worker owning the contiguous parts `format::worker_parts` gives it. One
//! METIS partitioning into 8 parts serves 4 workers: model-centric, leapgnn
//! and full-graph training compute the gradient of the 4-part run (any
//! partition gives the same sum), and roots, halos and rows follow the owning
//! worker. Real processes, Facebook (22,470 nodes, 4,714-d features).

mod dist_support;

use dist_support::{count, facebook, fails, first_gradient, rel_diff};
use serde_json::Value;
use std::path::Path;

const SAMPLED: &[&str] = &["--fanout", "10,10", "--hidden", "64", "--seed", "1", "--batch-size", "64"];
const FULL: &[&str] = &["--full-batch", "--hidden", "16", "--seed", "1"];

fn bytes(s: &Value) -> String {
    let b = s["bytes"].as_object().expect("the summary counts bytes by category");
    b.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// One iteration of `extra` on 4 workers over K = 4 and K = 8 parts: the same
/// summed gradient (against `reference` when given, else the K = 4 run's).
fn k8_matches_k4(d: &Path, extra: &[&str], reference: Option<&[f32]>) -> (Vec<f32>, Value, Value) {
    let run = |k: &str| {
        let args = [&["--workers", "4", "--parts", k], extra].concat();
        first_gradient(d, "facebook", &args)
    };
    let (g4, s4) = run("4");
    let (g8, s8) = run("8");
    assert_eq!(count(&s8["workers"]), 4, "{extra:?}: {}", s8);
    let base = reference.unwrap_or(&g4);
    for (k, g) in [("4", &g4), ("8", &g8)] {
        let e = rel_diff(base, g);
        assert!(e <= 1e-5, "{extra:?} K={k}: relative difference {e}");
    }
    println!("{extra:?}\n  K=4 W=4: {}\n  K=8 W=4: {}", bytes(&s4), bytes(&s8));
    println!("  rows K=4: {}\n  rows K=8: {}", s4["rows"], s8["rows"]);
    (g4, s4, s8)
}

#[test]
fn eight_parts_on_four_workers_give_the_four_part_gradient() {
    let tmp = facebook();
    let d = tmp.path();
    let (reference, mc4, mc8) = k8_matches_k4(d, &[SAMPLED, &["--strategy", "model-centric"]].concat(), None);
    let (_, lg4, lg8) =
        k8_matches_k4(d, &[SAMPLED, &["--strategy", "leapgnn", "--time-steps", "2"]].concat(), Some(&reference));
    // Every worker serves its own rows and fetches the rest: on 8 parts too.
    for s in [&mc4, &mc8, &lg4, &lg8] {
        assert!(count(&s["rows"]["local"]) > 0 && count(&s["rows"]["remote"]) > 0, "{}", s["rows"]);
        assert!(count(&s["bytes"]["features"]) > 0, "{}", bytes(s));
    }
    // leapgnn routes roots to the worker that owns them (not to "part" ids):
    // fewer remote rows than model-centric on either partitioning.
    for (mc, lg, k) in [(&mc4, &lg4, 4), (&mc8, &lg8, 8)] {
        let (m, l) = (count(&mc["rows"]["remote"]), count(&lg["rows"]["remote"]));
        assert!(l < m, "K={k}: leapgnn fetched {l} remote rows, model-centric {m}");
    }
    // The 8-part partitioning exists beside the 4-part one: one cut serves both.
    assert!(d.join("facebook/parts/metis-8/manifest.lgnn").is_file() || d.join("facebook/parts/metis-8").is_dir());
}

#[test]
fn full_graph_on_eight_parts_and_four_workers_gives_the_four_part_gradient() {
    let tmp = facebook();
    let d = tmp.path();
    let (_, s4, s8) = k8_matches_k4(d, FULL, None);
    for s in [&s4, &s8] {
        assert_eq!(s["mode"], "full-graph");
        assert!(count(&s["bytes"]["activations"]) > 0, "no halo exchange: {}", bytes(s));
    }
}

#[test]
fn fewer_parts_than_workers_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let line = fails(tmp.path(), &["train", "cora", "--no-tui", "--parts", "2", "--workers", "4"], 2);
    assert!(line.contains("--parts 2 must be at least --workers 4"), "{line}");
    let line = fails(tmp.path(), &["train", "cora", "--no-tui", "--parts", "3", "--workers", "1"], 2);
    assert!(line.contains("--parts 3"), "{line}");
}
