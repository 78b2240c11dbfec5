//! +PG: an iteration's remote input rows, fetched before its first time step.
//! All the worker's time steps are sampled first; the de-duplicated union of
//! their input vertices that other workers own goes out as one
//! `FeatureSource::rows` call (one request per owner); each step then reads
//! its own part's rows locally and the rest from this store, with no network.

use crate::gather::{CsrRows, RowNorm, Rows};
use crate::metrics::RowCounts;
use crate::sample::{Blocks, Interner, NeighborSampler, NodeMap};
use crate::train::{FeatureSource, RowsAsked, TrainError};
use std::time::Instant;

/// Dense per-vertex maps, reused from iteration to iteration (1 +
/// `PREFETCH_DEPTH` of them with `--prefetch`: the store being read and those
/// asked for ahead).
pub(super) struct Scratch {
    /// Sampling's vertex -> block position map.
    sample: NodeMap,
    /// Vertex -> row of the store.
    index: NodeMap,
}

impl Scratch {
    pub fn new(num_nodes: usize) -> Self {
        Scratch { sample: NodeMap::new(num_nodes), index: NodeMap::new(num_nodes) }
    }
}

/// Who owns what, from one worker's point of view.
#[derive(Clone, Copy)]
pub(super) struct Locality<'a> {
    /// None: this worker owns every vertex.
    pub owners: Option<&'a [u16]>,
    pub rank: usize,
}

impl Locality<'_> {
    #[inline]
    pub fn is_local(&self, v: u32) -> bool {
        self.owners.is_none_or(|o| o[v as usize] as usize == self.rank)
    }
}

/// One iteration's sampled steps and pre-gathered remote rows.
pub(super) struct Pregathered {
    /// The epoch and the roots of each step this was built for (a prefetched
    /// store is used only if the iteration routes its roots the same way).
    pub epoch: u64,
    pub roots: Vec<Vec<u32>>,
    blocks: Vec<Option<Blocks>>,
    sample_seconds: Vec<f64>,
    /// The union's remote ids, in store order, and their rows (as fetched;
    /// `asked` while they are on their way, see `request`).
    ids: Vec<u32>,
    rows: Rows,
    asked: Option<RowsAsked>,
    /// Where the union's rows came from, and how long fetching them took.
    pub fetched: RowCounts,
    pub fetch_seconds: f64,
    scratch: Scratch,
}

/// One step's share of a store: its blocks and their input rows.
pub(super) struct StepInput {
    pub blocks: Blocks,
    pub rows: Rows,
    /// The rows read from this worker's own part for the step.
    pub local: RowCounts,
    pub sample_seconds: f64,
    pub gather_seconds: f64,
}

impl Pregathered {
    /// Samples every step of `roots` for `epoch` and fetches the union of
    /// their remote input rows in one call.
    pub fn build(
        sampler: &NeighborSampler<'_>,
        features: &dyn FeatureSource,
        loc: Locality<'_>,
        roots: Vec<Vec<u32>>,
        epoch: u64,
        scratch: Scratch,
    ) -> Result<Self, TrainError> {
        let mut store = Self::request(sampler, features, loc, roots, epoch, scratch)?;
        store.complete(features)?;
        Ok(store)
    }

    /// `build`'s first half: samples, and asks the owners for the union's
    /// rows, which travel until `complete` takes them.
    pub fn request(
        sampler: &NeighborSampler<'_>,
        features: &dyn FeatureSource,
        loc: Locality<'_>,
        roots: Vec<Vec<u32>>,
        epoch: u64,
        mut scratch: Scratch,
    ) -> Result<Self, TrainError> {
        let mut blocks = Vec::with_capacity(roots.len());
        let mut sample_seconds = Vec::with_capacity(roots.len());
        let mut ids = Vec::new();
        for r in &roots {
            let t = Instant::now();
            let b = (!r.is_empty()).then(|| sampler.sample(r, epoch, &mut scratch.sample));
            sample_seconds.push(t.elapsed().as_secs_f64());
            if let Some(b) = &b {
                for &v in b.input_nodes().iter().filter(|&&v| !loc.is_local(v)) {
                    scratch.index.intern(v, &mut ids);
                }
            }
            blocks.push(b);
        }
        let t = Instant::now();
        let asked = if ids.is_empty() { None } else { Some(features.start_rows(ids.clone())?) };
        let (rows, fetched, fetch_seconds) = (Rows::Dense(Vec::new()), RowCounts::default(), t.elapsed().as_secs_f64());
        Ok(Pregathered { epoch, roots, blocks, sample_seconds, ids, rows, asked, fetched, fetch_seconds, scratch })
    }

    /// Takes the rows `request` asked for, waiting for those still on their
    /// way (the wait adds to `fetch_seconds`).
    pub fn complete(&mut self, features: &dyn FeatureSource) -> Result<(), TrainError> {
        let Some(asked) = self.asked.take() else { return Ok(()) };
        let t = Instant::now();
        (self.rows, self.fetched) = features.finish_rows(asked)?;
        self.fetch_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Step `t`'s blocks and input rows (normalised by `norm`); None when the
    /// step has no roots. Reads this worker's part and the store only.
    pub fn take_step(
        &mut self,
        t: usize,
        features: &dyn FeatureSource,
        loc: Locality<'_>,
        norm: RowNorm,
    ) -> Result<Option<StepInput>, TrainError> {
        self.complete(features)?;
        let Some(blocks) = self.blocks[t].take() else { return Ok(None) };
        let start = Instant::now();
        let input = blocks.input_nodes();
        let d = features.dim();
        // One copy per row, straight into the step's input: this worker's
        // rows are read in place from its part, the others from the store.
        let mut own = 0u64;
        let mut row_of = |v: u32| {
            let src = if loc.is_local(v) {
                own += 1;
                features.own_row(v)
            } else {
                self.scratch.index.get(v).map(|s| self.rows.row(s as usize, d))
            };
            src.ok_or_else(|| {
                TrainError::Rows(format!("node {v} is missing from this worker's part and the pre-gathered rows"))
            })
        };
        let mut rows = if features.stores_sparse() || self.rows.is_sparse() {
            let mut out = CsrRows { dim: d, indptr: Vec::with_capacity(input.len() + 1), ..Default::default() };
            out.indptr.push(0);
            for &v in input {
                out.push(row_of(v)?);
            }
            Rows::Sparse(out)
        } else {
            let mut out = Vec::with_capacity(input.len() * d);
            for &v in input {
                row_of(v)?.extend_dense(d, &mut out);
            }
            Rows::Dense(out)
        };
        let local = features.own_rows(own);
        rows.normalize(d, norm);
        Ok(Some(StepInput {
            blocks,
            rows,
            local,
            sample_seconds: self.sample_seconds[t],
            gather_seconds: start.elapsed().as_secs_f64(),
        }))
    }

    /// The maps, emptied for the next iteration.
    pub fn recycle(mut self) -> Scratch {
        self.scratch.index.clear(&self.ids);
        self.scratch
    }
}
