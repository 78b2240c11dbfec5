//! The synthetic presets are as hard as the real graphs they stand for: on
//! cheap graphs with the presets' difficulty knobs and shape (average degree,
//! feature width, classes), 2-layer SAGE 10,10 lands in the accuracy range of
//! ogbn-arxiv (0.65-0.78) and ogbn-products (0.70-0.85), where the same graph
//! without the knobs is nearly solved; a bad knob is refused, naming it.

#[path = "train_support/mod.rs"]
mod train_support;

use leapgnn::datasets::synthetic::{ARXIV_DIFFICULTY, Difficulty, PRODUCTS_DIFFICULTY};
use train_support::{fails, json};

/// A registry entry `name`: `shape` (nodes, edges, width, classes, split) with `d`.
fn entry(name: &str, shape: &str, d: Option<Difficulty>) -> String {
    let knobs = d.map_or(String::new(), |d| {
        format!(
            "homophily = {}\nfeature_noise = {}\nclass_imbalance = {}\nmisleading_features = {}\n",
            d.homophily, d.feature_noise, d.class_imbalance, d.misleading_features
        )
    });
    format!("[\"{name}\"]\nformat = \"synthetic\"\n{shape}{knobs}\n")
}

/// Test accuracy after 3 epochs of SAGE 10,10 (batch 256: the cheap graphs
/// have a tenth of the presets' training roots per epoch).
fn accuracy(d: &std::path::Path, registry: &std::path::Path, name: &str) -> f64 {
    json(d, &["download", name, "--registry", registry.to_str().unwrap()]);
    let s = json(
        d,
        &["train", name, "--no-tui", "--model", "sage", "--fanout", "10,10", "--epochs", "3", "--batch-size", "256"],
    );
    s["test_accuracy"].as_f64().unwrap()
}

#[test]
fn hard_presets_land_in_the_real_datasets_accuracy_range() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // synthetic-arxiv's average degree (6.9), width and classes; synthetic-products'
    // average degree (25.3), width and classes with a larger training share.
    let arxiv = "nodes = 30_000\nedges = 103_600\nfeature_dim = 128\nclasses = 40\nsplit = [0.537, 0.176, 0.287]\n";
    let products = "nodes = 30_000\nedges = 380_000\nfeature_dim = 100\nclasses = 47\nsplit = [0.6, 0.1, 0.3]\n";
    let registry = d.join("registry.toml");
    let text = [
        entry("arxiv-hard", arxiv, Some(ARXIV_DIFFICULTY)),
        entry("arxiv-easy", arxiv, None),
        entry("products-hard", products, Some(PRODUCTS_DIFFICULTY)),
        entry("bad", arxiv, Some(Difficulty { homophily: 1.5, ..ARXIV_DIFFICULTY })),
    ]
    .concat();
    std::fs::write(&registry, text).unwrap();

    let a = accuracy(d, &registry, "arxiv-hard");
    assert!((0.65..=0.78).contains(&a), "arxiv-shaped with synthetic-arxiv's knobs: {a}");
    let easy = accuracy(d, &registry, "arxiv-easy");
    assert!(easy > 0.9, "the same graph without the knobs is nearly solved: {easy}");
    let p = accuracy(d, &registry, "products-hard");
    assert!((0.70..=0.85).contains(&p), "products-shaped with synthetic-products' knobs: {p}");

    let err = fails(d, &["download", "bad", "--registry", registry.to_str().unwrap()], 2);
    assert!(err.contains("homophily"), "{err}");
}
