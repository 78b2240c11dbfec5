//! The analysis: open the dataset and its partitions, then one pass per
//! (sampling, depth) whose samples serve every (method, S) at once where the
//! sample does not depend on them (micrographs, worker batches).

use super::micrographs::{LocalitySums, micrograph_locality};
use super::naive::{ModelDims, NaiveCost, NaiveScratch, naive_migration};
use super::owners::{OwnerTable, Trainer};
use super::report::{Report, Row};
use super::requests::{GroupScratch, Requests, owner_iteration};
use super::sampler::Sampler;
use super::scratch::Pool;
use super::{Options, Setting};
use crate::format::{DatasetFile, FeatureView, FormatError, ManifestFile};
use crate::partition::{Method, ensure_partition};
use crate::sample::{LayerNodes, NodeMap};
use crate::schedule::{Schedule, epoch_order};
use crate::{BadInput, DataDir};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::time::Instant;

/// The analysed epoch (its shuffle and its draws), as `train` samples epoch 0.
const EPOCH: u64 = 0;

/// Runs the analysis of dataset `name` under `data`; creates (and keeps) the
/// partitions that are missing. Draws a progress bar on stderr when `progress`.
pub fn analyze(data: &DataDir, name: &str, opts: &Options, progress: bool) -> anyhow::Result<Report> {
    let started = Instant::now();
    opts.check()?;
    let path = crate::datasets::ensure_dataset(data, name)?;
    // Verified (checksum and every invariant): corrupt data must fail, not give other figures.
    let ds = DatasetFile::open_verified(&path)?;
    let g = ds.graph();
    g.check().map_err(|e| FormatError::corrupt(&path, e))?;
    let n = g.num_nodes();
    let train = ds.train();
    if train.is_empty() {
        return Err(BadInput::new(format!("{name} has no train vertices: nothing to batch")).into());
    }
    if let Some(&v) = train.iter().find(|&&v| v as usize >= n) {
        return Err(FormatError::corrupt(&path, format!("train id {v} is not one of the {n} nodes")).into());
    }
    opts.check_graph(n)?;
    let grid = opts.grid();

    // One owner column per (method, S).
    let mut columns: Vec<(Method, usize)> = Vec::new();
    for s in &grid {
        if !columns.contains(&(s.method, s.parts)) {
            columns.push((s.method, s.parts));
        }
    }
    let mut created = Vec::new();
    let mut manifests = Vec::with_capacity(columns.len());
    for &(m, k) in &columns {
        let (manifest, new) = partition_of(data, name, &ds, m, k, opts.seed)?;
        manifests.push(manifest);
        created.extend(new);
    }
    // `--no-keep`: what this analysis created goes when it ends (the maps stay valid until dropped).
    let _cleanup = Cleanup { dirs: if opts.keep { Vec::new() } else { created } };
    let owners = OwnerTable::new(&manifests.iter().map(|m| m.node_part()).collect::<Vec<_>>());
    let partition_seeds: Vec<u64> = manifests.iter().map(|m| m.seed()).collect();
    let column_of = |s: &Setting| columns.iter().position(|&c| c == (s.method, s.parts)).expect("every column listed");

    let order = epoch_order(train, opts.seed, EPOCH);
    let bar = progress_bar(grid.len(), progress);
    let mut rows: Vec<Option<Row>> = vec![None; grid.len()];
    let mut passes: Vec<(super::Sampling, usize, u32)> = Vec::new();
    for s in &grid {
        if !passes.contains(&(s.sampling, s.layers, s.fanout)) {
            passes.push((s.sampling, s.layers, s.fanout));
        }
    }
    for (sampling, layers, fanout) in passes {
        let members: Vec<Member> = grid
            .iter()
            .enumerate()
            .filter(|(_, s)| (s.sampling, s.layers, s.fanout) == (sampling, layers, fanout))
            .map(|(row, s)| Member::new(row, *s, column_of(s), &order, opts))
            .collect();
        let pass = Pass {
            sampler: Sampler::new(g, sampling, layers, fanout, opts.seed),
            order: &order,
            owners: &owners,
            partition_seeds: &partition_seeds,
            dims: ModelDims { in_dim: ds.feature_dim(), hidden: opts.hidden, classes: ds.num_classes().max(1), layers },
            num_nodes: n,
            features: ds.features(),
            batch: opts.batch_size,
        };
        for (m, row) in pass.run(&members, opts.micrographs, &bar) {
            rows[m.row] = Some(row);
        }
    }
    bar.finish_and_clear();
    Ok(Report {
        dataset: name.to_string(),
        nodes: n,
        edges: g.num_edges(),
        feature_dim: ds.feature_dim(),
        classes: ds.num_classes(),
        train: train.len(),
        batch_size: opts.batch_size,
        batches: opts.batches,
        micrographs: opts.micrographs,
        hidden: opts.hidden,
        seed: opts.seed,
        rows: rows.into_iter().map(|r| r.expect("every row computed")).collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Partition directories removed on drop, whatever the analysis's outcome.
struct Cleanup {
    dirs: Vec<std::path::PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.dirs {
            match std::fs::remove_dir_all(d) {
                Ok(()) => {
                    crate::elog!("removed {} (--no-keep)", d.display());
                }
                Err(e) => tracing::warn!("cannot remove {}: {e}", d.display()),
            }
        }
    }
}

/// The `method`-`parts` partition of `name`: an existing one cut from this
/// dataset (whatever its seed), else a new one made with `seed` (then also its
/// directory, as created here).
fn partition_of(
    data: &DataDir,
    name: &str,
    ds: &DatasetFile,
    method: Method,
    parts: usize,
    seed: u64,
) -> anyhow::Result<(ManifestFile, Option<std::path::PathBuf>)> {
    // Where `ensure_partition` reads and writes it (beside the archive for a dataset given as a path).
    let dir = crate::paths::partition_dir(data, name, method.name(), parts);
    if let Ok(m) = ManifestFile::open(&dir)
        && m.check_matches(ds, parts).is_ok()
    {
        return Ok((m, None));
    }
    let existed = dir.exists();
    let dir = ensure_partition(data, name, method.name(), parts, seed)?;
    let m = ManifestFile::open(&dir)
        .with_context(|| format!("cannot read the partition just written to {}", dir.display()))?;
    Ok((m, (!existed).then_some(dir)))
}

fn progress_bar(rows: usize, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(rows as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:20} {pos}/{len} rows, {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar
}

/// One row of a pass and the batches it analyses.
struct Member {
    row: usize,
    setting: Setting,
    column: usize,
    iterations: usize,
    /// The analysed roots are `order[..roots]`.
    roots: usize,
}

impl Member {
    fn new(row: usize, setting: Setting, column: usize, order: &[u32], opts: &Options) -> Self {
        let s = setting.parts;
        let sched = Schedule::new(order, s, opts.batch_size);
        let iterations = opts.batches.div_ceil(s).min(sched.iterations());
        let roots = (iterations * s * opts.batch_size).min(order.len());
        Member { row, setting, column, iterations, roots }
    }
    fn schedule<'a>(&self, order: &'a [u32], batch: usize) -> Schedule<'a> {
        Schedule::new(order, self.setting.parts, batch)
    }
}

struct Pass<'a> {
    sampler: Sampler<'a>,
    order: &'a [u32],
    owners: &'a OwnerTable,
    /// Seed of each owner column's partition.
    partition_seeds: &'a [u64],
    dims: ModelDims,
    num_nodes: usize,
    /// The rows whose reply bytes the requests count.
    features: FeatureView<'a>,
    batch: usize,
}

/// Model-centric sums of one row.
#[derive(Clone, Copy, Default)]
struct Centric {
    req: Requests,
    naive: NaiveCost,
}

impl Pass<'_> {
    /// The rows of `members` (one sampling and depth); `bar` counts finished rows.
    fn run<'m>(&self, members: &'m [Member], micrographs: usize, bar: &ProgressBar) -> Vec<(&'m Member, Row)> {
        let (batch, n) = (self.batch, self.num_nodes);
        let what = members.first().map(|m| format!("{}-wise {}L", m.setting.sampling, m.setting.layers));
        let step = |s: &str| bar.set_message(format!("{}: {s}", what.as_deref().unwrap_or_default()));
        step("micrographs");

        // Locality: the first roots of each row's batches; one micrograph serves every column.
        let t = Instant::now();
        let mut limits = vec![0usize; self.owners.columns()];
        for m in members {
            limits[m.column] = micrographs.min(m.roots);
        }
        let nodes_pool = Pool::new(move || LayerNodes::new(n));
        let locality = micrograph_locality(&self.sampler, self.order, &limits, self.owners, EPOCH, &nodes_pool);
        drop(nodes_pool);
        tracing::info!("micrograph locality: {:.2} s", t.elapsed().as_secs_f64());

        // Model-centric: each distinct worker batch is sampled once for every row that trains it.
        step("worker batches");
        let centric = self.model_centric(members, batch);
        tracing::info!("micrograph locality and model-centric batches: {:.2} s", t.elapsed().as_secs_f64());
        let shared = t.elapsed().as_secs_f64() / members.len() as f64;

        step("owner groups");
        let group_pool = Pool::new(move || GroupScratch::new(n));
        let mut out = Vec::with_capacity(members.len());
        for (k, m) in members.iter().enumerate() {
            let t = Instant::now();
            let (micro, pre) = self.owner_centric(m, batch, &group_pool);
            let seconds = shared + t.elapsed().as_secs_f64();
            out.push((m, self.row(m, &locality, centric[k], micro, pre, seconds)));
            bar.inc(1);
        }
        out
    }

    fn model_centric(&self, members: &[Member], batch: usize) -> Vec<Centric> {
        // Worker batches keyed by their position in the epoch order: rows with
        // different S share a batch whenever the cut is the same.
        let base = self.order.as_ptr().addr();
        let mut users: BTreeMap<(usize, usize), Vec<(usize, Trainer)>> = BTreeMap::new();
        for (k, m) in members.iter().enumerate() {
            let sched = m.schedule(self.order, batch);
            for i in 0..m.iterations {
                for (w, b) in sched.workers(i).into_iter().enumerate() {
                    let key = ((b.as_ptr().addr() - base) / size_of::<u32>(), b.len());
                    let t = Trainer { column: m.column, home: w as u16, servers: m.setting.parts };
                    users.entry(key).or_default().push((k, t));
                }
            }
        }
        let n = self.num_nodes;
        let pool = Pool::new(move || (NodeMap::new(n), NaiveScratch::default()));
        let per_batch: Vec<(Vec<Requests>, Vec<NaiveCost>)> = users
            .par_iter()
            .map(|(&(start, len), users)| {
                let who: Vec<Trainer> = users.iter().map(|&(_, t)| t).collect();
                let mut scratch = pool.get();
                let (map, naive) = &mut *scratch;
                let blocks = self.sampler.blocks(&self.order[start..start + len], EPOCH, map);
                let req = Requests::of_each(blocks.input_nodes(), self.owners, &who, &self.features);
                (req, naive_migration(&blocks, self.owners, &who, &self.dims, naive))
            })
            .collect();
        let mut sums = vec![Centric::default(); members.len()];
        for (users, (req, naive)) in users.values().zip(per_batch) {
            for ((&(k, _), r), c) in users.iter().zip(req).zip(naive) {
                sums[k].req.add(r);
                sums[k].naive.add(c);
            }
        }
        sums
    }

    /// Micrograph and pregather requests of a row, over its (iteration, owner) pairs.
    fn owner_centric(&self, m: &Member, batch: usize, pool: &Pool<GroupScratch>) -> (Requests, Requests) {
        let sched = m.schedule(self.order, batch);
        let s = m.setting.parts;
        (0..m.iterations * s)
            .into_par_iter()
            .map(|t| {
                let (i, r) = (t / s, t % s);
                let mut scratch = pool.get();
                let batches = sched.workers(i);
                let owner = self.owners.column(m.column);
                owner_iteration(&self.sampler, &batches, r as u16, owner, EPOCH, &self.features, &mut scratch)
            })
            .reduce(
                || (Requests::default(), Requests::default()),
                |(mut a, mut b), (c, d)| {
                    a.add(c);
                    b.add(d);
                    (a, b)
                },
            )
    }

    fn row(
        &self,
        m: &Member,
        locality: &LocalitySums,
        centric: Centric,
        micro: Requests,
        pre: Requests,
        seconds: f64,
    ) -> Row {
        let s = m.setting;
        let per = (m.iterations * s.parts) as f64;
        let rows = |r: Requests| r.rows as f64 / per;
        let remote = |r: Requests| r.remote as f64 / per;
        let (bytes, remote_bytes) = (|r: Requests| r.bytes as f64 / per, |r: Requests| r.remote_bytes as f64 / per);
        let words = |w: u64| 4.0 * w as f64 / per;
        let mc = centric.req;
        Row {
            method: s.method.name().to_string(),
            parts: s.parts,
            sampling: s.sampling,
            layers: s.layers,
            fanout: s.fanout,
            iterations: m.iterations,
            roots: m.roots,
            micrographs: locality.micrographs[m.column],
            locality_pct: locality.pct(m.column),
            r_sub_pct: 100.0 / s.parts as f64,
            miss_model_centric: mc.miss_rate(),
            miss_micrograph: micro.miss_rate(),
            miss_pregather: pre.miss_rate(),
            rows_model_centric: rows(mc),
            rows_micrograph: rows(micro),
            rows_pregather: rows(pre),
            remote_rows_model_centric: remote(mc),
            remote_rows_micrograph: remote(micro),
            remote_rows_pregather: remote(pre),
            bytes_model_centric: bytes(mc),
            bytes_micrograph: bytes(micro),
            bytes_pregather: bytes(pre),
            remote_bytes_model_centric: remote_bytes(mc),
            remote_bytes_micrograph: remote_bytes(micro),
            remote_bytes_pregather: remote_bytes(pre),
            bytes_naive_migration: words(centric.naive.words()),
            naive_hops: centric.naive.hops as f64 / per,
            naive_bytes_params: words(centric.naive.params),
            naive_bytes_partial: words(centric.naive.partial),
            naive_bytes_intermediate: words(centric.naive.intermediate),
            partition_seed: self.partition_seeds[m.column],
            seconds,
        }
    }
}
