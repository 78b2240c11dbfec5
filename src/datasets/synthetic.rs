//! Deterministic synthetic graphs with power-law degrees and planted
//! communities (labels = communities, features = class signal + noise), so
//! METIS finds locality as in real graphs and a GNN can learn.
//!
//! The model is a degree-corrected stochastic block model drawn Chung-Lu
//! style: every node has a Pareto weight θ (its expected degree is
//! proportional to θ); an edge picks its source by θ, then with probability
//! `P_INTRA` a target by θ inside the source's community, otherwise anywhere.
//! Each community belongs to one class, so most edges join nodes of the same
//! label (homophily), and node ids are shuffled so that id order says nothing
//! about communities. Features are the class centroid plus Gaussian noise,
//! loud enough that one node's features are a weak clue while the mean over
//! its neighbourhood is a strong one: a GNN clearly beats an MLP.
//!
//! Every random draw comes from a stream keyed by (seed, purpose, chunk or
//! node), so the bytes do not depend on the number of threads.

use crate::BadInput;
use crate::format::{Dataset, DatasetMeta};
use crate::graph::{Csr, undirected_key};
use crate::util::rng::{Rng, hash_of, stream};
use rand::seq::SliceRandom;
use rand::{Rng as _, SeedableRng};
use rand_distr::weighted::WeightedAliasIndex;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

/// Parameters of a synthetic graph; the `[NAME]` tables of datasets.toml with
/// `format = "synthetic"` deserialise into this.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct SyntheticSpec {
    pub nodes: u64,
    /// Target number of undirected edges (each stored in both directions).
    pub edges: u64,
    pub feature_dim: u32,
    pub classes: u32,
    /// Fractions of the nodes in the train / val / test splits (the rest is in none).
    #[serde(default = "default_split")]
    pub split: [f64; 3],
    /// Difficulty knobs; the defaults give the original, easy graphs.
    #[serde(flatten)]
    pub difficulty: Difficulty,
}

/// How hard a synthetic graph is to classify. Real graphs are far from the
/// clean planted partition: fewer same-class edges, noisier features, skewed
/// classes, and nodes whose features point the wrong way.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Difficulty {
    /// Probability that an edge stays inside its source's community (each
    /// community belongs to one class; an edge that leaves it still lands in
    /// the same class 1/classes of the time).
    pub homophily: f64,
    /// Multiplies the feature noise σ (1 = one node's features are a weak clue).
    pub feature_noise: f64,
    /// Zipf exponent of the class sizes: class k gets communities with weight
    /// (k + 1)^-s; 0 = every class the same share.
    pub class_imbalance: f64,
    /// Share of nodes whose features are drawn around another, random class's
    /// centroid: only their neighbourhood tells their class.
    pub misleading_features: f64,
}

impl Default for Difficulty {
    fn default() -> Self {
        Difficulty { homophily: 0.85, feature_noise: 1.0, class_imbalance: 0.0, misleading_features: 0.0 }
    }
}

/// The split when a spec names none.
pub const DEFAULT_SPLIT: [f64; 3] = [0.6, 0.2, 0.2];

fn default_split() -> [f64; 3] {
    DEFAULT_SPLIT
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            nodes: 20_000,
            edges: 100_000,
            feature_dim: 64,
            classes: 10,
            split: DEFAULT_SPLIT,
            difficulty: Difficulty::default(),
        }
    }
}

/// The built-in presets (the registry, datasets.toml, holds the same numbers).
/// The arxiv and products splits have the sizes of the real OGB splits; the
/// plain names are calibrated to the real datasets' accuracy, the `-easy`
/// ones are the original clean graphs (what older benchmarks ran).
pub fn preset(name: &str) -> Option<SyntheticSpec> {
    let (nodes, edges, feature_dim, classes, split) = match name {
        "synthetic-small" => (20_000, 100_000, 64, 10, DEFAULT_SPLIT),
        "synthetic-arxiv" | "synthetic-arxiv-easy" => (169_343, 585_000, 128, 40, ARXIV_SPLIT),
        "synthetic-products" | "synthetic-products-easy" => (2_449_029, 31_000_000, 100, 47, PRODUCTS_SPLIT),
        _ => return None,
    };
    let difficulty = match name {
        "synthetic-arxiv" => ARXIV_DIFFICULTY,
        "synthetic-products" => PRODUCTS_DIFFICULTY,
        _ => Difficulty::default(),
    };
    Some(SyntheticSpec { nodes, edges, feature_dim, classes, split, difficulty })
}

const ARXIV_SPLIT: [f64; 3] = [0.537, 0.176, 0.287];
const PRODUCTS_SPLIT: [f64; 3] = [0.08, 0.016, 0.904];
/// Calibrated so 2-layer SAGE 10,10 lands near ogbn-arxiv's accuracy (about
/// 0.71): 0.730 after 3 epochs of batch 1024 (README, "Synthetic presets").
pub const ARXIV_DIFFICULTY: Difficulty =
    Difficulty { homophily: 0.7, feature_noise: 1.5, class_imbalance: 1.0, misleading_features: 0.2 };
/// Calibrated so 2-layer SAGE 10,10 lands near ogbn-products' accuracy (about
/// 0.79): 0.792 after 3 epochs of batch 1024 (chosen on products-shaped
/// graphs of 200k nodes, then measured on the preset).
pub const PRODUCTS_DIFFICULTY: Difficulty =
    Difficulty { homophily: 0.55, feature_noise: 1.5, class_imbalance: 1.0, misleading_features: 0.25 };

/// Degree distribution P(deg = k) ~ k^-γ (real citation / co-purchase graphs: 2..3).
const DEGREE_EXPONENT: f64 = 2.5;
/// Communities hold about this many average degrees' worth of nodes, so that
/// intra-community edges stay sparse enough to be mostly distinct.
const COMMUNITY_DEGREES: f64 = 24.0;
const EDGE_CHUNK: usize = 1 << 14;
const MAX_ROUNDS: u64 = 48;
const TAG_EDGES: u64 = 0xed9e;
const TAG_FEATURES: u64 = 0xfea7;
const TAG_MISLEADING: u64 = 0x3151;

/// Generates the dataset `name` from `spec`; the same (spec, seed) gives the same bytes.
pub fn generate(name: &str, spec: &SyntheticSpec, seed: u64) -> Result<Dataset, BadInput> {
    validate(name, spec)?;
    check_memory(name, spec)?;
    let n = spec.nodes as usize;
    let layout = Layout::new(spec, seed);
    let keys = draw_graph(name, spec, &layout, seed)?;
    let csr = Csr::from_sorted_undirected(n, &keys);
    drop(keys);

    let mut labels = vec![0i32; n];
    let class_of =
        community_classes(layout.communities(), spec.classes as usize, spec.difficulty.class_imbalance, seed);
    for (c, &class) in class_of.iter().enumerate() {
        for p in layout.comm_start[c]..layout.comm_start[c + 1] {
            labels[layout.id_of_pos[p as usize] as usize] = class as i32;
        }
    }
    drop(layout);
    let features = features(spec, &labels, seed);
    let [train, val, test] = split(n, spec.split, seed);

    Ok(Dataset {
        meta: DatasetMeta {
            name: name.to_string(),
            source: format!("synthetic:{name}"),
            num_nodes: spec.nodes,
            num_edges: csr.indices.len() as u64,
            feature_dim: spec.feature_dim,
            num_classes: spec.classes,
            directed: false,
            generated_features: true,
            seed,
        },
        indptr: csr.indptr,
        indices: csr.indices,
        features: crate::format::FeatureTable::Dense(features),
        labels,
        train,
        val,
        test,
    })
}

fn validate(name: &str, s: &SyntheticSpec) -> Result<(), BadInput> {
    let bad = |why: String| Err(BadInput::new(format!("synthetic dataset `{name}`: {why}")));
    if s.nodes < 2 || s.nodes > u32::MAX as u64 {
        return bad(format!("nodes = {} must be between 2 and {}", s.nodes, u32::MAX));
    }
    if s.classes == 0 || s.classes as u64 > s.nodes {
        return bad(format!("classes = {} must be between 1 and the number of nodes", s.classes));
    }
    if s.feature_dim == 0 {
        return bad("feature_dim must be at least 1".into());
    }
    if s.nodes.checked_mul(s.feature_dim as u64).is_none_or(|v| v > isize::MAX as u64 / 4) {
        return bad(format!("{} nodes x {} features do not fit in memory", s.nodes, s.feature_dim));
    }
    // Chung-Lu sampling slows down as the graph fills up; a quarter of all pairs is plenty.
    let pairs = s.nodes as u128 * (s.nodes as u128 - 1) / 2;
    if s.edges as u128 > pairs / 4 {
        return bad(format!("edges = {} is too dense for {} nodes (at most {})", s.edges, s.nodes, pairs / 4));
    }
    if s.split.iter().any(|f| !(0.0..=1.0).contains(f)) || s.split.iter().sum::<f64>() > 1.0 + 1e-9 {
        return bad(format!("split = {:?} must be fractions that sum to at most 1", s.split));
    }
    let d = &s.difficulty;
    for (key, v, lo, hi) in [
        ("homophily", d.homophily, 0.0, 1.0),
        ("feature_noise", d.feature_noise, 0.0, 100.0),
        ("class_imbalance", d.class_imbalance, 0.0, 10.0),
        ("misleading_features", d.misleading_features, 0.0, 1.0),
    ] {
        if !(lo..=hi).contains(&v) {
            return bad(format!("{key} = {v} must be between {lo} and {hi}"));
        }
    }
    Ok(())
}

/// Refuses, before anything is allocated, a graph whose feature table and
/// edges cannot fit in the memory this process may use: a registry entry
/// of 1000 nodes x 4e9 features passes `validate` (it is only 16 TB) and
/// then writes pages until the OOM killer comes, the command seemingly hung.
/// A lower bound (features and both directions of every edge), so a graph
/// that fits is never refused. Not part of `validate`: the built-in
/// registry holds graphs larger than some machines, refused only when built.
fn check_memory(name: &str, s: &SyntheticSpec) -> Result<(), BadInput> {
    let Some((usable, source)) = crate::util::usable_memory() else { return Ok(()) };
    let need =
        s.nodes.saturating_mul(s.feature_dim as u64).saturating_mul(4).saturating_add(s.edges.saturating_mul(16));
    if need <= usable {
        return Ok(());
    }
    use crate::util::mib;
    Err(BadInput::new(format!(
        "synthetic dataset `{name}`: {} nodes x {} features and {} edges need at least {} MiB, but {} MiB are \
         available ({source}); give smaller nodes, feature_dim or edges, or generate it on a machine with more memory",
        s.nodes,
        s.feature_dim,
        s.edges,
        mib(need),
        mib(usable)
    )))
}

/// Nodes laid out by community in "position" space (community c holds positions
/// `comm_start[c]..comm_start[c+1]`); `id_of_pos` maps a position to its shuffled node id.
struct Layout {
    comm_start: Vec<u32>,
    /// Inclusive prefix sums of θ over positions: draws by θ inside a community
    /// are binary searches over its (small, cache-resident) slice.
    cum: Vec<f64>,
    /// Draws by θ over all positions in O(1): these would otherwise be binary
    /// searches over the whole array, a cache miss per step.
    global: WeightedAliasIndex<f64>,
    id_of_pos: Vec<u32>,
}

impl Layout {
    fn new(spec: &SyntheticSpec, seed: u64) -> Layout {
        let n = spec.nodes as usize;
        let avg_degree = 2.0 * spec.edges as f64 / n as f64;
        let target = (COMMUNITY_DEGREES * avg_degree).clamp(128.0, 4096.0);
        let m = ((n as f64 / target).round() as usize).clamp(spec.classes as usize, n);

        // Community sizes: Pareto weights (capped at 10x), each community non-empty.
        let mut r = stream(seed, "synthetic-communities");
        let w: Vec<f64> = (0..m).map(|_| pareto(&mut r, 2.0).min(10.0)).collect();
        let total: f64 = w.iter().sum();
        let spare = n - m;
        let mut sizes: Vec<usize> = w.iter().map(|x| 1 + (spare as f64 * x / total) as usize).collect();
        let short = n - sizes.iter().sum::<usize>();
        for s in sizes.iter_mut().take(short) {
            *s += 1;
        }
        let mut comm_start = Vec::with_capacity(m + 1);
        comm_start.push(0u32);
        for s in &sizes {
            comm_start.push(comm_start.last().copied().unwrap_or(0) + *s as u32);
        }

        // Degree weights: Pareto with exponent γ, capped at sqrt(n) so hubs stay plausible.
        let cap = (n as f64).sqrt().max(1.0);
        let mut r = stream(seed, "synthetic-degrees");
        let theta: Vec<f64> = (0..n).map(|_| pareto(&mut r, DEGREE_EXPONENT - 1.0).min(cap)).collect();
        let cum = theta
            .iter()
            .scan(0.0, |acc, t| {
                *acc += t;
                Some(*acc)
            })
            .collect();
        // θ >= 1 and finite, 2 <= n <= u32::MAX (validated): the table always builds.
        let global = WeightedAliasIndex::new(theta).expect("valid degree weights");

        let mut id_of_pos: Vec<u32> = (0..n as u32).collect();
        id_of_pos.shuffle(&mut stream(seed, "synthetic-ids"));
        Layout { comm_start, cum, global, id_of_pos }
    }

    fn communities(&self) -> usize {
        self.comm_start.len() - 1
    }

    fn community_of(&self, pos: usize) -> usize {
        self.comm_start.partition_point(|&s| s as usize <= pos) - 1
    }

    /// A position in `lo..hi` drawn with probability proportional to θ.
    fn draw(&self, lo: usize, hi: usize, r: &mut Rng) -> usize {
        let base = if lo == 0 { 0.0 } else { self.cum[lo - 1] };
        let x = base + r.random::<f64>() * (self.cum[hi - 1] - base);
        (lo + self.cum[lo..hi].partition_point(|&c| c <= x)).min(hi - 1)
    }

    /// One edge as an undirected key, or `u64::MAX` for a self loop (dropped later).
    fn edge(&self, source: usize, homophily: f64, r: &mut Rng) -> u64 {
        let target = if r.random::<f64>() < homophily {
            let c = self.community_of(source);
            self.draw(self.comm_start[c] as usize, self.comm_start[c + 1] as usize, r)
        } else {
            self.global.sample(r)
        };
        if target == source {
            return u64::MAX;
        }
        undirected_key(self.id_of_pos[source], self.id_of_pos[target])
    }
}

/// The class of each of `m` communities: round robin when `imbalance` is 0;
/// otherwise the first `classes` communities take one class each (no class
/// is empty) and the rest draw class k with weight (k + 1)^-imbalance.
fn community_classes(m: usize, classes: usize, imbalance: f64, seed: u64) -> Vec<u32> {
    if imbalance == 0.0 {
        return (0..m).map(|c| (c % classes) as u32).collect();
    }
    let weights: Vec<f64> = (0..classes).map(|k| ((k + 1) as f64).powf(-imbalance)).collect();
    let pick = WeightedAliasIndex::new(weights).expect("positive finite class weights");
    let mut r = stream(seed, "synthetic-class-sizes");
    (0..m).map(|c| if c < classes { c as u32 } else { pick.sample(&mut r) as u32 }).collect()
}

/// Pareto(1, α): P(X > x) = x^-α.
fn pareto(r: &mut Rng, alpha: f64) -> f64 {
    let u: f64 = 1.0 - r.random::<f64>(); // in (0, 1]
    u.powf(-1.0 / alpha)
}

/// Exactly `spec.edges` distinct undirected edges as sorted keys. Rounds of
/// draws top up what duplicates and self loops removed; a small overshoot is
/// then trimmed at random.
fn draw_graph(name: &str, spec: &SyntheticSpec, layout: &Layout, seed: u64) -> Result<Vec<u64>, BadInput> {
    let target = spec.edges as usize;
    let n = spec.nodes as usize;
    let mut keys: Vec<u64> = Vec::new();
    let mut want = target + target / 16 + 64;
    for round in 0..MAX_ROUNDS {
        // First round: node at position e sources edge e, so no node is isolated.
        let spanning = round == 0 && want >= n;
        let mut batch = vec![0u64; want];
        batch.par_chunks_mut(EDGE_CHUNK).enumerate().for_each(|(chunk, out)| {
            let mut r = Rng::seed_from_u64(hash_of(seed, &[TAG_EDGES, round, chunk as u64]));
            for (j, k) in out.iter_mut().enumerate() {
                let e = chunk * EDGE_CHUNK + j;
                let source = if spanning && e < n { e } else { layout.global.sample(&mut r) };
                *k = layout.edge(source, spec.difficulty.homophily, &mut r);
            }
        });
        batch.par_sort_unstable();
        let before = keys.len();
        if keys.is_empty() {
            keys = batch;
        } else {
            // Two sorted runs: the stable sort merges them in linear time.
            keys.extend_from_slice(&batch);
            drop(batch);
            keys.sort();
        }
        keys.dedup();
        if keys.last() == Some(&u64::MAX) {
            keys.pop();
        }
        if keys.len() >= target {
            let excess = keys.len() - target;
            drop_random(&mut keys, excess, seed);
            return Ok(keys);
        }
        let kept = (keys.len() - before) as f64 / want as f64;
        let deficit = target - keys.len();
        want = ((deficit as f64 / kept.max(0.01)).ceil() as usize).min(4 * deficit) + 64;
    }
    Err(BadInput::new(format!(
        "synthetic dataset `{name}`: only {} distinct edges of the {target} asked for after {MAX_ROUNDS} rounds; \
         ask for fewer edges or more nodes",
        keys.len()
    )))
}

/// Removes `excess` keys chosen uniformly at random, keeping the order.
fn drop_random(keys: &mut Vec<u64>, excess: usize, seed: u64) {
    if excess == 0 {
        return;
    }
    let mut gone = rand::seq::index::sample(&mut stream(seed, "synthetic-trim"), keys.len(), excess).into_vec();
    gone.sort_unstable();
    let mut next = gone.into_iter().peekable();
    let mut i = 0usize;
    keys.retain(|_| {
        let drop = next.next_if_eq(&i).is_some();
        i += 1;
        !drop
    });
}

/// Row v = (centroid of v's class + σ·N(0, I)) / sqrt(1 + σ²): unit variance per
/// value. σ is chosen so that two classes' centroids are κ noise deviations from
/// their midpoint, with κ growing with the number of classes so that one node's
/// features alone stay a weak clue whatever the class count.
fn features(spec: &SyntheticSpec, labels: &[i32], seed: u64) -> Vec<f32> {
    let d = spec.feature_dim as usize;
    let mut r = stream(seed, "synthetic-centroids");
    let centroids: Vec<f32> = (0..spec.classes as usize * d).map(|_| r.sample(StandardNormal)).collect();
    let kappa = 0.45 + 0.3 * (spec.classes.max(2) as f64).ln();
    let sigma = spec.difficulty.feature_noise * (2.0 * d as f64).sqrt() / (2.0 * kappa);
    let scale = (1.0 / (1.0 + sigma * sigma).sqrt()) as f32;
    let sigma = sigma as f32;
    let (misleading, classes) = (spec.difficulty.misleading_features, spec.classes as u64);
    let mut out = vec![0f32; labels.len() * d];
    out.par_chunks_mut(d).enumerate().for_each(|(v, row)| {
        let mut r = Rng::seed_from_u64(hash_of(seed, &[TAG_FEATURES, v as u64]));
        let mut class = labels[v] as usize;
        if misleading > 0.0 {
            // Its own stream: the easy graphs' rows stay byte for byte what they were.
            let mut m = Rng::seed_from_u64(hash_of(seed, &[TAG_MISLEADING, v as u64]));
            if m.random::<f64>() < misleading {
                class = m.random_range(0..classes) as usize;
            }
        }
        let c = &centroids[class * d..][..d];
        for (x, &mu) in row.iter_mut().zip(c) {
            let z: f32 = r.sample(StandardNormal);
            *x = (mu + sigma * z) * scale;
        }
    });
    out
}

/// Train / val / test ids (each sorted) from a seeded shuffle of all nodes.
fn split(n: usize, fractions: [f64; 3], seed: u64) -> [Vec<u32>; 3] {
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut stream(seed, "synthetic-split"));
    let mut start = 0usize;
    fractions.map(|f| {
        let len = ((f * n as f64).round() as usize).min(n - start);
        let mut ids = order[start..start + len].to_vec();
        start += len;
        ids.sort_unstable();
        ids
    })
}
