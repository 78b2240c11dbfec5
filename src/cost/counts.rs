//! Exact counts of sampled iterations: for each worker and time step, the
//! roots, the block's edges and destination rows per layer, and where its
//! input rows come from (own part, cache, each remote owner). The blocks are
//! the ones training samples (`NeighborSampler`, the epoch's shuffle, DGL
//! batching), so a count is what the worker would really do, not an estimate.

use super::assign::{merged_steps, own_groups};
use crate::comm::cache;
use crate::graph::CsrView;
use crate::locality::Pool;
use crate::sample::{Blocks, Fanouts, NeighborSampler, NodeMap, VertexSet};
use crate::schedule::{Schedule, epoch_order};
use rayon::prelude::*;

/// How an iteration's roots are split into time steps.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Worker w trains its batch b(i, w) in one step, fetching its own rows.
    ModelCentric,
    /// W steps: at step t worker r trains the roots of model (r + t) mod W it owns.
    /// `pregather`: all remote rows of the iteration in one request per owner first.
    Micrograph { pregather: bool },
    /// T steps per `assign::merged_steps` with these shares (one row per worker);
    /// always pre-gathered.
    Merged { shares: Vec<Vec<f64>> },
}

impl Layout {
    pub fn time_steps(&self, workers: usize) -> usize {
        match self {
            Layout::ModelCentric => 1,
            Layout::Micrograph { .. } => workers,
            Layout::Merged { shares } => shares.first().map_or(1, Vec::len),
        }
    }
    pub fn pregathers(&self) -> bool {
        matches!(self, Layout::Micrograph { pregather: true } | Layout::Merged { .. })
    }
}

/// Where a set of input rows comes from, seen by one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSources {
    pub local: u64,
    pub cache: u64,
    /// Rows fetched from each worker (index = owner; this worker's entry is 0).
    pub remote: Vec<u64>,
}

impl RowSources {
    pub fn remote_rows(&self) -> u64 {
        self.remote.iter().sum()
    }
    pub fn rows(&self) -> u64 {
        self.local + self.cache + self.remote_rows()
    }
}

/// One block (a worker's work in one time step).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    pub roots: u64,
    /// Per layer, input layer first.
    pub edges: Vec<u64>,
    pub dst: Vec<u64>,
    pub input_rows: u64,
    /// Where the input rows come from when the block fetches its own rows.
    pub rows: RowSources,
}

impl BlockCounts {
    pub fn total_edges(&self) -> u64 {
        self.edges.iter().sum()
    }
    pub fn is_empty(&self) -> bool {
        self.roots == 0
    }
}

/// One worker's iteration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// One block per time step (empty blocks included).
    pub steps: Vec<BlockCounts>,
    /// Pre-gathering strategies: the de-duplicated union of the steps' input rows.
    pub pregather: Option<RowSources>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IterationCounts {
    pub epoch: u64,
    pub iteration: u64,
    pub workers: Vec<WorkerCounts>,
}

/// The job the counts are for.
pub struct CountJob<'a> {
    pub graph: CsrView<'a>,
    /// Owner of every vertex (the partition's node -> part map).
    pub owner: &'a [u16],
    /// Labelled train ids, as training uses them.
    pub train: &'a [u32],
    pub workers: usize,
    pub batch_size: usize,
    pub fanouts: Fanouts,
    pub seed: u64,
    /// Per-worker cache (`--cache-mb`, filled by degree as training does); empty: none.
    pub cached: Vec<Vec<u32>>,
}

impl<'a> CountJob<'a> {
    /// The degree cache training would fill for `cache_mb` per worker.
    /// `row_bytes`: a row's bytes in the cache (`FeatureView::mean_row_bytes`).
    pub fn degree_cache(
        graph: CsrView<'_>,
        owner: &[u16],
        workers: usize,
        cache_mb: u64,
        row_bytes: f64,
    ) -> Vec<Vec<u32>> {
        let budget = cache::rows_within(cache_mb.saturating_mul(1 << 20), row_bytes);
        if budget == 0 {
            return Vec::new();
        }
        (0..workers).map(|r| cache::by_degree(graph, owner, r, budget)).collect()
    }

    /// Iterations in one epoch of this job.
    pub fn iterations_per_epoch(&self) -> usize {
        Schedule::new(self.train, self.workers, self.batch_size).iterations().max(1)
    }

    /// Iterations of the epochs from 0 on, in order: `(epoch, iteration)`.
    pub fn first_iterations(&self, n: usize) -> Vec<(u64, u64)> {
        let per_epoch = self.iterations_per_epoch();
        (0..n).map(|k| ((k / per_epoch) as u64, (k % per_epoch) as u64)).collect()
    }

    /// The counts of `iterations` under `layout` (in parallel; deterministic).
    pub fn count(&self, layout: &Layout, iterations: &[(u64, u64)]) -> Vec<IterationCounts> {
        let n = self.graph.num_nodes();
        let w = self.workers;
        let sampler = NeighborSampler::new(self.graph, self.fanouts.clone(), self.seed);
        let cached: Vec<VertexSet> = self
            .cached
            .iter()
            .map(|ids| {
                let mut s = VertexSet::new(n);
                ids.iter().for_each(|&v| {
                    s.insert(v);
                });
                s
            })
            .collect();
        let mut epochs: Vec<u64> = iterations.iter().map(|&(e, _)| e).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let orders: Vec<Vec<u32>> = epochs.iter().map(|&e| epoch_order(self.train, self.seed, e)).collect();
        let pool = Pool::new(move || (NodeMap::new(n), VertexSet::new(n)));
        let tasks: Vec<(usize, usize)> = (0..iterations.len()).flat_map(|k| (0..w).map(move |r| (k, r))).collect();
        let mut per_task: Vec<WorkerCounts> = tasks
            .par_iter()
            .map(|&(k, r)| {
                let (epoch, it) = iterations[k];
                let order = &orders[epochs.binary_search(&epoch).expect("every epoch has its order")];
                let sched = Schedule::new(order, w, self.batch_size);
                let batches = sched.workers(it as usize);
                let mut scratch = pool.get();
                let (map, union) = &mut *scratch;
                let source = Source { owner: self.owner, rank: r, cached: cached.get(r) };
                self.worker(&sampler, layout, &batches, epoch, source, map, union)
            })
            .collect();
        let mut out: Vec<IterationCounts> = iterations
            .iter()
            .map(|&(epoch, iteration)| IterationCounts { epoch, iteration, workers: Vec::with_capacity(w) })
            .collect();
        for (&(k, _), wc) in tasks.iter().zip(per_task.drain(..)) {
            out[k].workers.push(wc);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn worker(
        &self,
        sampler: &NeighborSampler<'_>,
        layout: &Layout,
        batches: &[&[u32]],
        epoch: u64,
        src: Source<'_>,
        map: &mut NodeMap,
        union: &mut VertexSet,
    ) -> WorkerCounts {
        let r = src.rank;
        let steps: Vec<Vec<u32>> = match layout {
            Layout::ModelCentric => vec![batches[r].to_vec()],
            Layout::Micrograph { .. } => own_groups(batches, self.owner, r),
            Layout::Merged { shares } => {
                let t = layout.time_steps(self.workers);
                let mine = shares.get(r).cloned().unwrap_or_else(|| vec![1.0 / t as f64; t]);
                merged_steps(batches, self.owner, r, &mine)
            }
        };
        let pregather = layout.pregathers();
        union.clear();
        let mut gathered = RowSources { remote: vec![0; self.workers], ..Default::default() };
        let steps = steps
            .iter()
            .map(|roots| {
                let mut rows = RowSources { remote: vec![0; self.workers], ..Default::default() };
                if roots.is_empty() {
                    let zeros = vec![0; self.fanouts.layers()];
                    return BlockCounts { edges: zeros.clone(), dst: zeros, rows, ..Default::default() };
                }
                let blocks = sampler.sample(roots, epoch, map);
                let mut b = block_counts(&blocks, roots.len());
                for &v in blocks.input_nodes() {
                    if pregather {
                        if union.insert(v) {
                            src.classify(v, &mut gathered);
                        }
                    } else {
                        src.classify(v, &mut rows);
                    }
                }
                if pregather {
                    // The step reads its rows from the pre-gathered table, on this worker.
                    rows.local = b.input_rows;
                }
                b.rows = rows;
                b
            })
            .collect();
        WorkerCounts { steps, pregather: pregather.then_some(gathered) }
    }
}

/// Who serves a row to worker `rank`.
#[derive(Clone, Copy)]
struct Source<'a> {
    owner: &'a [u16],
    rank: usize,
    cached: Option<&'a VertexSet>,
}

impl Source<'_> {
    #[inline]
    fn classify(&self, v: u32, into: &mut RowSources) {
        let o = self.owner[v as usize] as usize;
        if o == self.rank {
            into.local += 1;
        } else if self.cached.is_some_and(|c| c.contains(v)) {
            into.cache += 1;
        } else {
            into.remote[o] += 1;
        }
    }
}

fn block_counts(blocks: &Blocks, roots: usize) -> BlockCounts {
    BlockCounts {
        roots: roots as u64,
        edges: blocks.layers.iter().map(|b| b.num_edges() as u64).collect(),
        dst: blocks.layers.iter().map(|b| b.num_dst as u64).collect(),
        input_rows: blocks.input_nodes().len() as u64,
        rows: RowSources::default(),
    }
}
