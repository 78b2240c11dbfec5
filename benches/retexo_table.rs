//! The README's RETEXO table: for each dataset and model, `--strategy retexo`
//! against the same model trained normally with the full-graph engine
//! (`--mode full-graph`) for the same number of gradient steps (L layers x R
//! rounds = L x R epochs), both on 4 workers over the same random partition
//! and seed, with RETEXO's hyperparameters (lr 0.003, weight decay 5e-4,
//! dropout 0.3, GAT 8 heads). Prints a markdown table: test accuracy (at the
//! best validation round / epoch) and the bytes the whole run sent over the
//! network (training and evaluation, all workers).
//!
//! ```sh
//! cargo bench --bench retexo_table
//! RETEXO_HIDDEN=64 RETEXO_ROUNDS=100 RETEXO_ROUNDS_FACEBOOK=20 cargo bench --bench retexo_table
//! ```
//!
//! Settings (environment, defaults = the authors'): `RETEXO_DATASETS`
//! (`cora,citeseer,facebook`), `RETEXO_MODELS` (`gcn,sage,gat`),
//! `RETEXO_HIDDEN` (256), `RETEXO_ROUNDS` (200 per layer), `RETEXO_LAYERS` (2),
//! `RETEXO_SEEDS` (`0`; with several, the table shows means),
//! per-dataset overrides `RETEXO_HIDDEN_<DATASET>` / `RETEXO_ROUNDS_<DATASET>`
//! (e.g. `RETEXO_ROUNDS_FACEBOOK=20`), and `RETEXO_DATA=DIR`: keep the data
//! dir and each run's summary there (`DIR/retexo-table/<run>.json`), and
//! reuse the summaries already there instead of training again.
//! `RETEXO_LR`, `RETEXO_WEIGHT_DECAY`, `RETEXO_DROPOUT` and `RETEXO_HEADS`
//! replace the authors' 0.003, 5e-4, 0.3 and 8 in both runs.
//! `RETEXO_GCN_SELF_LOOPS=off` trains the full-graph GCN without self loops
//! (`--self-loops off`), the conv of RETEXO's GCN and of the authors' graphs
//! (`add_self_loop: false`); by default it is the usual GCN, with them.
//! `RETEXO_GAT_HEADS=mean` trains the full-graph GAT with RETEXO's heads
//! (`--gat-heads mean`: every layer --heads heads of its full width,
//! averaged); by default it is the usual GAT, whose hidden heads split
//! --hidden and are concatenated.
//! `RETEXO_SPLIT=authors` trains on the splits of the authors' code
//! (`data/dataset.py`) instead of the public ones: Cora and CiteSeer as PyG's
//! `Planetoid(split="random")` with 86 and 178 training nodes per class, 300
//! and 357 validation and 1806 and 2146 test nodes (CiteSeer runs out of
//! nodes first), Facebook 20/10/70 (their `get_masks_fb_page(0.7, 0.33)`);
//! drawn once with seed 0, whatever `RETEXO_SEEDS` says.
//!
//! Datasets come from `../shared/datasets` (Cora and CiteSeer: Planetoid
//! public split; Facebook: MUSAE page-page, seeded 60/20/20 split).

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::{env_or, leapgnn};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;

const WORKERS: &str = "4";
/// RETEXO's hyperparameters, given to both runs: (flag, environment
/// variable that overrides it, the authors' value).
const COMMON: &[(&str, &str, &str)] = &[
    ("--lr", "RETEXO_LR", "0.003"),
    ("--weight-decay", "RETEXO_WEIGHT_DECAY", "5e-4"),
    ("--dropout", "RETEXO_DROPOUT", "0.3"),
    ("--heads", "RETEXO_HEADS", "8"),
];
/// The byte categories of a run summary (each the sum over training and evaluation).
const CATEGORIES: &[&str] = &["features", "activations", "gradients", "control", "migration"];

fn shared(rel: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    assert!(root.is_dir(), "the shared datasets are missing at {}", root.display());
    root.join(rel)
}

/// A per-dataset setting: `RETEXO_<KEY>_<DATASET>`, else `RETEXO_<KEY>`, else `default`.
fn setting(key: &str, dataset: &str, default: u64) -> u64 {
    let specific = format!("RETEXO_{key}_{}", dataset.to_uppercase());
    let v = std::env::var(&specific).unwrap_or_else(|_| env_or(&format!("RETEXO_{key}"), &default.to_string()));
    v.parse().unwrap_or_else(|_| panic!("{specific} / RETEXO_{key}: not a number: {v}"))
}

fn list(key: &str, default: &str) -> Vec<String> {
    env_or(key, default).split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// Imports `dataset` with the split `RETEXO_SPLIT` names; returns the name it has under `data`.
fn import(data: &Path, dataset: &str, split: &str) -> String {
    let (name, split_args): (String, &[&str]) = match (split, dataset) {
        ("public", _) => (dataset.to_string(), &[]),
        ("authors", "cora") => ("cora-authors".into(), &["--split-per-class", "86,300,1806"]),
        ("authors", "citeseer") => ("citeseer-authors".into(), &["--split-per-class", "178,357,2146"]),
        ("authors", "facebook") => ("facebook-authors".into(), &["--split", "20.1,9.9,70"]),
        (other, _) => panic!("RETEXO_SPLIT: unknown split {other} (public or authors)"),
    };
    if data.join(&name).join("dataset.lgnn").is_file() {
        return name;
    }
    let from = match dataset {
        "cora" | "citeseer" => shared(&format!("planetoid/converted/{dataset}")),
        "facebook" => shared("musae-facebook"),
        other => panic!("RETEXO_DATASETS: unknown dataset {other} (cora, citeseer or facebook)"),
    };
    let mut args = vec!["download", &name, "--from", from.to_str().unwrap()];
    if dataset != "facebook" {
        args.extend(["--format", "text"]);
    }
    args.extend(split_args);
    leapgnn(data, &args);
    name
}

/// Trains run `name` (or reads its saved summary) and returns the summary.
fn train(data: &Path, name: &str, args: &[String]) -> Value {
    let saved = data.join("retexo-table").join(format!("{name}.json"));
    if let Ok(bytes) = std::fs::read(&saved) {
        eprintln!("{name}: summary from {}", saved.display());
        return serde_json::from_slice(&bytes).expect("saved summary");
    }
    // A run stopped before its summary was saved starts over.
    let _ = std::fs::remove_dir_all(data.join("runs").join(name));
    let mut all: Vec<&str> = vec!["train", "--no-tui", "--run", name];
    all.extend(args.iter().map(String::as_str));
    let t = Instant::now();
    let s = leapgnn(data, &all);
    eprintln!(
        "{name}: test {:.4}, {:.1} MB, {:.0} s  (leapgnn {})",
        s["test_accuracy"].as_f64().unwrap_or(f64::NAN),
        total_bytes(&s) as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        all.join(" ")
    );
    std::fs::create_dir_all(saved.parent().unwrap()).unwrap();
    std::fs::write(&saved, serde_json::to_vec(&s).unwrap()).unwrap();
    s
}

fn bytes(s: &Value, categories: &[&str]) -> u64 {
    categories.iter().map(|c| s["bytes"][c].as_u64().unwrap_or(0)).sum()
}

/// Everything the run sent over the network (all categories, training and evaluation, all workers).
fn total_bytes(s: &Value) -> u64 {
    bytes(s, CATEGORIES)
}

#[derive(Default)]
struct Side {
    acc: f64,
    total: f64,
    rows: f64,
}

impl Side {
    fn add(&mut self, s: &Value, n: f64) {
        self.acc += s["test_accuracy"].as_f64().expect("test accuracy") / n;
        self.total += total_bytes(s) as f64 / n;
        self.rows += bytes(s, &["features", "activations"]) as f64 / n;
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing here is a filter.
    let datasets = list("RETEXO_DATASETS", "cora,citeseer,facebook");
    let models = list("RETEXO_MODELS", "gcn,sage,gat");
    let seeds = list("RETEXO_SEEDS", "0");
    let layers = setting("LAYERS", "", 2);
    let split = env_or("RETEXO_SPLIT", "public");
    let (_tmp, data) = match std::env::var_os("RETEXO_DATA") {
        Some(d) => (None, PathBuf::from(d)),
        None => {
            let t = tempfile::tempdir().expect("temp dir");
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    std::fs::create_dir_all(&data).unwrap();
    let gcn_self_loops = env_or("RETEXO_GCN_SELF_LOOPS", "on") != "off";
    let gat_mean = env_or("RETEXO_GAT_HEADS", "concat") == "mean";
    // The hyperparameters, and a run-name suffix for each one not the authors' (so RETEXO_DATA's summaries are
    // reused only for the same settings).
    let common: Vec<(&str, String)> = COMMON.iter().map(|(flag, key, d)| (*flag, env_or(key, d))).collect();
    let suffix: String = COMMON
        .iter()
        .zip(&common)
        .filter(|((_, _, d), (_, v))| v != d)
        .map(|((flag, _, _), (_, v))| format!("-{}{v}", flag.trim_start_matches("--")))
        .collect();
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut settings = Vec::new();
    for ds in &datasets {
        let name = import(&data, ds, &split);
        let (hidden, rounds) = (setting("HIDDEN", ds, 256), setting("ROUNDS", ds, 200));
        settings.push(format!("{ds}: hidden {hidden}, {rounds} rounds/layer = {} steps", layers * rounds));
        for model in &models {
            let (mut r, mut f) = (Side::default(), Side::default());
            for seed in &seeds {
                let tag = format!("{name}-{model}-h{hidden}-l{layers}-r{rounds}-s{seed}{suffix}");
                let mut shared_args: Vec<String> = [name.as_str(), "--workers", WORKERS, "--partition", "random"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                for (k, v) in [("--model", model.clone()), ("--hidden", hidden.to_string()), ("--seed", seed.clone())] {
                    shared_args.extend([k.to_string(), v]);
                }
                shared_args.extend(["--layers".to_string(), layers.to_string()]);
                for (flag, v) in &common {
                    shared_args.extend([flag.to_string(), v.clone()]);
                }
                let mut ra = shared_args.clone();
                ra.extend(["--strategy", "retexo", "--rounds"].iter().map(|s| s.to_string()));
                ra.push(rounds.to_string());
                let mut fa = shared_args;
                fa.extend(["--mode", "full-graph", "--epochs"].iter().map(|s| s.to_string()));
                fa.push((layers * rounds).to_string());
                // RETEXO's GCN has no self term; RETEXO_GCN_SELF_LOOPS=off trains the same conv normally.
                let same_conv = model == "gcn" && !gcn_self_loops;
                if same_conv {
                    fa.extend(["--self-loops", "off"].iter().map(|s| s.to_string()));
                }
                // RETEXO's GAT averages full-width heads; RETEXO_GAT_HEADS=mean trains that GAT normally.
                let same_heads = model == "gat" && gat_mean;
                if same_heads {
                    fa.extend(["--gat-heads", "mean"].iter().map(|s| s.to_string()));
                }
                let n = seeds.len() as f64;
                let rs = train(&data, &format!("retexo-{tag}"), &ra);
                assert_eq!(rs["iterations"].as_u64(), Some(layers * rounds), "RETEXO: one gradient step per round");
                r.add(&rs, n);
                let variant = match (same_conv, same_heads) {
                    (true, _) => "-noloops",
                    (_, true) => "-meanheads",
                    _ => "",
                };
                let fs = train(&data, &format!("full-{tag}{variant}"), &fa);
                assert_eq!(fs["iterations"].as_u64(), Some(layers * rounds), "full-graph: one gradient step per epoch");
                f.add(&fs, n);
            }
            rows.push(format!(
                "| {ds} | {model} | {:.1} | {:.1} | {:+.1} | {:.1} | {:.1} | {:.1}x | {:.0}x |",
                r.acc * 100.0,
                f.acc * 100.0,
                (r.acc - f.acc) * 100.0,
                r.total / 1e6,
                f.total / 1e6,
                f.total / r.total,
                f.rows / r.rows,
            ));
        }
    }
    let mean = if seeds.len() > 1 { "mean over seeds " } else { "seed " };
    println!(
        "RETEXO vs full-graph training, 4 workers, random partition, {split} split, {mean}{}; {}; {}, \
         {layers} layers; full-graph GCN {}, full-graph GAT {}. Test accuracy in %, at the best validation round/epoch; \
         MB = 10^6 bytes sent over the network by the whole run (training and evaluation, all workers); \
         bytes ratio = full-graph / RETEXO; rows ratio = the same for features + activations only \
         (no gradients or control).\n",
        seeds.join(", "),
        settings.join("; "),
        common.iter().map(|(flag, v)| format!("{flag} {v}")).collect::<Vec<_>>().join(" "),
        if gcn_self_loops { "with self loops" } else { "without self loops (as RETEXO's)" },
        if gat_mean { "with averaged full-width heads (as RETEXO's)" } else { "with concatenated heads" }
    );
    println!(
        "| dataset | model | RETEXO test acc | full-graph test acc | diff (points) | RETEXO MB | full-graph MB | bytes ratio | rows ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    eprintln!("retexo_table: {:.0} s", started.elapsed().as_secs_f64());
}
