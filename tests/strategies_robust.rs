//! The micrograph strategies on the awkward cases: iterations whose roots all
//! sit on one worker (the others own none), one worker, two workers with one
//! time step, merge plans, `--time-steps auto`, and flags that do not fit the
//! strategy. Each still computes model-centric's gradient, and never hangs.

mod dist_support;

use dist_support::{cora, count, fails, first_gradient, json, records, rel_diff};
use leapgnn::format::{Dataset, DatasetMeta, FeatureTable, ManifestFile};
use leapgnn::graph::Csr;
use leapgnn::util::rng::hash_of;
use serde_json::Value;
use std::path::Path;

const CORA: &[&str] = &["--normalize", "l1", "--fanout", "10,10", "--hidden", "64", "--seed", "3"];

fn train(d: &Path, dataset: &str, args: &[&str]) -> Value {
    json(d, &[&["train", dataset, "--no-tui"], args].concat())
}

/// Runs model-centric and each of `variants` for one iteration with `common`
/// and asserts the gradients agree; returns the variants' summaries.
fn all_give_model_centric(d: &Path, dataset: &str, common: &[&str], variants: &[&[&str]]) -> Vec<Value> {
    let (reference, _) = first_gradient(d, dataset, &[common, &["--strategy", "model-centric"]].concat());
    variants
        .iter()
        .map(|v| {
            let (g, s) = first_gradient(d, dataset, &[common, v].concat());
            let e = rel_diff(&reference, &g);
            assert!(e <= 1e-5, "{dataset} {common:?} {v:?}: relative difference from model-centric {e}");
            s
        })
        .collect()
}

const ISLANDS: u32 = 4;
const ISLAND: u32 = 30;
const TRAIN_PER_ISLAND: u32 = 6;

/// Four disconnected islands of 30 vertices, 6 train roots each: METIS gives
/// each island to one worker, so the roots of an iteration sit on the workers
/// owning their islands.
fn write_islands(data: &Path) -> Vec<u32> {
    let n = ISLANDS * ISLAND;
    let mut edges = Vec::new();
    for v in 0..n {
        let (base, i) = (v - v % ISLAND, v % ISLAND);
        for step in [1, 7, 13] {
            let u = base + (i + step) % ISLAND;
            edges.extend([(u, v), (v, u)]);
        }
    }
    let csr = Csr::from_edges(n as usize, &edges, true);
    let (dim, classes) = (12usize, 3u32);
    let label = |v: u32| (v % classes) as i32;
    let features = (0..n as usize * dim)
        .map(|i| {
            let (v, c) = (i / dim, i % dim);
            let noise = (hash_of(5, &[i as u64]) % 1000) as f32 / 1000.0 - 0.5;
            noise + if c % classes as usize == label(v as u32) as usize { 0.5 } else { 0.0 }
        })
        .collect();
    let pick = |lo: u32, hi: u32| (0..n).filter(|v| (lo..hi).contains(&(v % ISLAND))).collect::<Vec<u32>>();
    let train = pick(0, TRAIN_PER_ISLAND);
    let ds = Dataset {
        meta: DatasetMeta {
            name: "islands".into(),
            source: "test".into(),
            num_nodes: n as u64,
            num_edges: csr.indices.len() as u64,
            feature_dim: dim as u32,
            num_classes: classes,
            directed: false,
            generated_features: true,
            seed: 0,
        },
        indptr: csr.indptr,
        indices: csr.indices,
        features: FeatureTable::Dense(features),
        labels: (0..n).map(label).collect(),
        train: train.clone(),
        val: pick(TRAIN_PER_ISLAND, TRAIN_PER_ISLAND + 4),
        test: pick(TRAIN_PER_ISLAND + 4, TRAIN_PER_ISLAND + 8),
    };
    ds.write(&data.join("islands").join("dataset.lgnn")).expect("dataset writes");
    train
}

/// The first seed whose epoch-0 shuffle puts the first `roots` train ids on
/// exactly `islands` islands.
fn seed_with(train: &[u32], roots: usize, islands: usize) -> u64 {
    (0..100_000)
        .find(|&seed| {
            let order = leapgnn::train::epoch_order(train, seed, 0);
            let mut hit: Vec<u32> = order[..roots].iter().map(|v| v / ISLAND).collect();
            hit.sort_unstable();
            hit.dedup();
            hit.len() == islands
        })
        .expect("some seed shuffles that way")
}

#[test]
fn iterations_whose_roots_sit_on_one_worker_or_skip_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let train = write_islands(d);
    let variants: &[&[&str]] = &[
        &["--strategy", "micrograph"],
        &["--strategy", "micrograph", "--migration", "ring"],
        &["--strategy", "pregather", "--prefetch"],
        &["--strategy", "leapgnn", "--time-steps", "2", "--migration", "ring"],
        &["--strategy", "leapgnn", "--time-steps", "3"],
    ];
    // (batch size, islands holding iteration 0's roots): all on one worker
    // (three workers own none), then exactly one worker owning none.
    for (batch, islands) in [(1usize, 1usize), (2, 3)] {
        let seed = seed_with(&train, 4 * batch, islands);
        let (seed_s, batch_s) = (seed.to_string(), batch.to_string());
        let common =
            ["--workers", "4", "--batch-size", &batch_s, "--seed", &seed_s, "--fanout", "5,5", "--hidden", "16"];
        let runs = all_give_model_centric(d, "islands", &common, variants);

        // The premise: METIS kept each island whole, so iteration 0's roots are on `islands` workers.
        let m = ManifestFile::open(d.join("islands/parts/metis-4")).unwrap();
        let part = m.node_part();
        for i in 0..ISLANDS {
            let p = part[(i * ISLAND) as usize];
            assert!((i * ISLAND..(i + 1) * ISLAND).all(|v| part[v as usize] == p), "island {i} split: {part:?}");
        }
        let order = leapgnn::train::epoch_order(&train, seed, 0);
        let mut owners: Vec<u16> = order[..4 * batch].iter().map(|&v| part[v as usize]).collect();
        owners.sort_unstable();
        owners.dedup();
        assert_eq!(owners.len(), islands);

        for (v, s) in variants.iter().zip(&runs) {
            let recs = records(d, s);
            for w in 0..4u64 {
                let roots: u64 = recs.iter().filter(|r| count(&r["worker"]) == w).map(|r| count(&r["roots"])).sum();
                let owns = order[..4 * batch].iter().filter(|&&x| part[x as usize] as u64 == w).count() as u64;
                assert_eq!(roots, owns, "{v:?}: worker {w} trains exactly the roots it owns");
                let steps = recs.iter().filter(|r| count(&r["worker"]) == w).count() as u64;
                assert_eq!(steps, count(&s["time_steps"]), "{v:?}: worker {w} records every step, empty or not");
            }
        }
    }
}

#[test]
fn one_worker_and_two_workers_with_one_time_step() {
    let tmp = cora();
    let d = tmp.path();
    // W = 1: every strategy is one step over the whole batch.
    let solo: &[&[&str]] = &[
        &["--strategy", "micrograph"],
        &["--strategy", "micrograph", "--migration", "ring"],
        &["--strategy", "pregather", "--prefetch"],
        &["--strategy", "leapgnn"],
        &["--strategy", "leapgnn", "--time-steps", "1"],
    ];
    let common = [CORA, &["--batch-size", "140"]].concat();
    for s in all_give_model_centric(d, "cora", &common, solo) {
        assert_eq!(s["time_steps"], 1, "{s}");
        assert_eq!(s["workers"], 1);
    }
    // W = 2, T = 1: each worker trains all its roots in one step; ring has nothing to pass.
    let pair: &[&[&str]] = &[
        &["--strategy", "leapgnn", "--time-steps", "1"],
        &["--strategy", "leapgnn", "--time-steps", "1", "--migration", "ring", "--prefetch"],
        &["--strategy", "micrograph", "--migration", "ring"],
    ];
    let common = [CORA, &["--batch-size", "70", "--workers", "2"]].concat();
    let runs = all_give_model_centric(d, "cora", &common, pair);
    assert_eq!(runs[0]["time_steps"], 1);
    assert_eq!(runs[1]["bytes"]["migration"], 0, "T = 1: no accumulator moves");
    assert!(count(&runs[2]["bytes"]["migration"]) > 0);
}

#[test]
fn a_merge_plan_sets_the_steps_and_their_shares() {
    let tmp = cora();
    let d = tmp.path();
    let plan = d.join("plan.toml");
    std::fs::write(&plan, "workers = 4\ntime_steps = 2\nbalance = [[0.7, 0.3], [0.5, 0.5], [0.2, 0.8], [0.5, 0.5]]\n")
        .unwrap();
    let p = plan.to_str().unwrap();
    let common = [CORA, &["--batch-size", "35", "--workers", "4"]].concat();
    let runs = all_give_model_centric(d, "cora", &common, &[&["--strategy", "leapgnn", "--merge-plan", p]]);
    assert_eq!(runs[0]["time_steps"], 2);
    let recs = records(d, &runs[0]);
    assert_eq!(recs.len(), 2 * 4);
    // Worker 0 puts about 70 % of its roots in step 0 (its own model's roots may exceed that share).
    let roots = |w: u64, t: u64| {
        count(&recs.iter().find(|r| count(&r["worker"]) == w && count(&r["time_step"]) == t).unwrap()["roots"]) as f64
    };
    assert!(roots(0, 0) >= 0.7 * (roots(0, 0) + roots(0, 1)) - 1.0, "{recs:?}");
}

#[test]
fn auto_time_steps_start_from_the_model_and_change_only_between_epochs() {
    let tmp = cora();
    let d = tmp.path();
    // 5 iterations per epoch; T is re-planned at each of the 3 epoch boundaries.
    let s = train(
        d,
        "cora",
        &[CORA, &["--workers", "4", "--batch-size", "8", "--epochs", "4", "--strategy", "leapgnn"]].concat(),
    );
    let recs = records(d, &s);
    let steps = |e: u64, i: u64, w: u64| {
        recs.iter()
            .filter(|r| count(&r["epoch"]) == e && count(&r["iteration"]) == i && count(&r["worker"]) == w)
            .count() as u64
    };
    // Every worker takes the same T at every iteration of an epoch.
    let per_epoch: Vec<u64> = (0..4)
        .map(|e| {
            let t = steps(e, 0, 0);
            for i in 0..5 {
                for w in 0..4 {
                    assert_eq!(steps(e, i, w), t, "epoch {e} iteration {i} worker {w}");
                }
            }
            t
        })
        .collect();
    assert!(per_epoch.iter().all(|t| (1..=4).contains(t)), "{per_epoch:?}");
    assert_eq!(count(&s["time_steps"]), per_epoch[3], "the summary reports the T in use at the end");
    // The first epoch runs the T the cost model (tune-merge, same job, 4 iterations counted) picks.
    let model = json(
        d,
        &[
            "tune-merge",
            "cora",
            "--parts",
            "4",
            "--batch-size",
            "8",
            "--fanout",
            "10,10",
            "--hidden",
            "64",
            "--seed",
            "3",
            "--iterations",
            "4",
        ],
    );
    assert_eq!(count(&model["chosen"]["time_steps"]), per_epoch[0], "{}", model["chosen"]);
}

#[test]
fn flags_that_do_not_fit_the_strategy_are_refused() {
    let tmp = cora();
    let d = tmp.path();
    let plan = d.join("plan2.toml");
    std::fs::write(&plan, "workers = 4\ntime_steps = 2\n").unwrap();
    let plan3 = d.join("plan3.toml");
    std::fs::write(&plan3, "workers = 3\ntime_steps = 2\n").unwrap();
    let (p, p3) = (plan.to_str().unwrap(), plan3.to_str().unwrap());
    let cases: &[(&[&str], &str)] = &[
        (&["--time-steps", "3"], "does not apply to --strategy model-centric"),
        (&["--strategy", "leapgnn", "--workers", "4", "--time-steps", "5"], "at most one time step per worker"),
        (&["--strategy", "leapgnn", "--time-steps", "0"], "'0' for '--time-steps"),
        (
            &["--strategy", "micrograph", "--workers", "4", "--time-steps", "2"],
            "does not apply to --strategy micrograph",
        ),
        (&["--migration", "ring"], "--migration ring"),
        (&["--strategy", "micrograph", "--prefetch"], "--prefetch applies to"),
        (&["--strategy", "pregather", "--workers", "4", "--merge-plan", p], "leapgnn only"),
        (&["--strategy", "leapgnn", "--workers", "4", "--merge-plan", p3], "written for 3 workers"),
        (&["--strategy", "leapgnn", "--workers", "4", "--merge-plan", p, "--time-steps", "3"], "disagrees"),
        (&["--strategy", "leapgnn", "--merge-plan", "no-such-plan.toml"], "cannot read merge plan"),
    ];
    for (extra, needle) in cases {
        let line = fails(d, &[&["train", "cora", "--no-tui", "--epochs", "1"], *extra].concat(), 2);
        assert!(line.contains(needle), "{extra:?}: {line}");
    }
    // Nothing was started: no run directory, no partition.
    assert!(!d.join("cora/parts").exists());
}
