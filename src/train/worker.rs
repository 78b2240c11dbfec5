//! What one worker holds and the work every strategy is built from: sample a
//! set of roots, gather their input rows, run the model forward and backward.

use super::{EvalMode, TrainError, fullgraph};
use crate::comm::{Owners, RowSource};
use crate::format::RowRef;
use crate::gather::{RowNorm, Rows, gather, gather_rows};
use crate::graph::CsrView;
use crate::metrics::RowCounts;
use crate::model::{Mode, Model, Params, count_correct, cross_entropy_sum};
use crate::sample::{Blocks, EVAL_EPOCH_SALT, Fanouts, NeighborSampler, NodeMap};
use candle_core::Device;
use std::sync::Arc;
use std::time::Instant;

pub struct Worker<'d> {
    pub rank: usize,
    pub world: usize,
    pub graph: CsrView<'d>,
    pub features: &'d dyn FeatureSource,
    /// Class of every vertex (-1 = unlabelled).
    pub labels: &'d [i32],
    pub sampler: NeighborSampler<'d>,
    pub eval_sampler: NeighborSampler<'d>,
    pub model: Model,
    pub params: Params,
    pub device: Device,
    /// Applied to input rows as they are gathered.
    pub norm: RowNorm,
    /// Every vertex's full input row, read in place (the mmapped dataset
    /// archive), for strategies that split features by column instead of by
    /// owner (p3); None where the worker has no such view.
    pub all_rows: Option<&'d dyn RowSource>,
    /// The partition's vertex -> worker map (None: this worker owns every vertex).
    pub owners: Option<Owners>,
    /// How `accuracies` scores validation and test nodes.
    pub eval: EvalMode,
    /// The full-graph engine's halo plan and inputs, built on first use.
    pub(crate) full: Option<Arc<fullgraph::State>>,
    /// VARCO: the columns each layer's halo exchange sends (layer 0's input
    /// included, which then crosses the network at every pass); None: every
    /// column, and layer 0's halo rows are fetched once.
    pub(crate) halo_columns: Option<Vec<usize>>,
    /// `--check-replicas`: the checks this worker passed so far, which its
    /// final checkpoint's report carries; None where none are asked for.
    pub replica_checks: Option<&'d std::sync::atomic::AtomicU64>,
    map: NodeMap,
}

/// What the worker reads: topology, features and labels of every vertex.
#[derive(Clone, Copy)]
pub struct GraphData<'d> {
    pub graph: CsrView<'d>,
    pub features: &'d dyn FeatureSource,
    pub labels: &'d [i32],
}

/// Where a worker's input rows come from: any `RowSource` (every row at hand),
/// or, with several workers, the worker's part + cache + remote owners.
pub trait FeatureSource: Sync {
    fn dim(&self) -> usize;
    /// Rows read so far, by origin, and fetches that needed a remote row:
    /// `None` for a source with every row at hand.
    fn fetched(&self) -> Option<(crate::comm::FetchStats, u64)> {
        None
    }
    /// The rows of `ids`, row-major in the order given, and where they came from.
    fn rows(&self, ids: &[u32]) -> Result<(Vec<f32>, RowCounts), TrainError>;
    /// The rows of `ids` as the first layer takes them: CSR where the source
    /// stores them sparse, dense otherwise.
    fn input_rows(&self, ids: &[u32]) -> Result<(Rows, RowCounts), TrainError> {
        self.rows(ids).map(|(r, c)| (Rows::Dense(r), c))
    }
    /// `input_rows` in two halves: other workers are asked now, and
    /// `finish_rows` takes their answers (a source with every row at hand
    /// reads them here).
    fn start_rows(&self, ids: Vec<u32>) -> Result<RowsAsked, TrainError> {
        self.input_rows(&ids).map(RowsAsked::Ready)
    }
    fn finish_rows(&self, asked: RowsAsked) -> Result<(Rows, RowCounts), TrainError> {
        match asked {
            RowsAsked::Ready(r) => Ok(r),
            RowsAsked::InFlight(_) => Err(TrainError::Rows("rows asked of another feature source".into())),
        }
    }
    /// The row of `id` where this worker's own part holds it: read in place,
    /// so a caller assembling an input copies it once (`own_rows` counts them).
    fn own_row(&self, id: u32) -> Option<RowRef<'_>>;
    /// Counts `n` rows read with `own_row` as `input_rows` would have.
    fn own_rows(&self, n: u64) -> RowCounts {
        RowCounts { requested: n, local: n, ..Default::default() }
    }
    /// Whether the rows are stored sparse (then so are the answers of owners).
    fn stores_sparse(&self) -> bool;
}

/// Rows `FeatureSource::start_rows` asked for.
pub enum RowsAsked {
    Ready((Rows, RowCounts)),
    InFlight(crate::comm::RowsInFlight),
}

impl<T: RowSource + ?Sized> FeatureSource for T {
    fn own_row(&self, id: u32) -> Option<RowRef<'_>> {
        self.row(id)
    }
    fn stores_sparse(&self) -> bool {
        self.is_sparse()
    }
    fn dim(&self) -> usize {
        RowSource::dim(self)
    }
    fn rows(&self, ids: &[u32]) -> Result<(Vec<f32>, RowCounts), TrainError> {
        let rows = gather(self, ids).map_err(|e| TrainError::Rows(e.to_string()))?;
        let n = ids.len() as u64;
        Ok((rows, RowCounts { requested: n, local: n, ..Default::default() }))
    }
    fn input_rows(&self, ids: &[u32]) -> Result<(Rows, RowCounts), TrainError> {
        let rows = gather_rows(self, ids).map_err(|e| TrainError::Rows(e.to_string()))?;
        let n = ids.len() as u64;
        Ok((rows, RowCounts { requested: n, local: n, ..Default::default() }))
    }
}

/// What one `compute` did, for the metrics record.
#[derive(Clone, Debug, Default)]
pub struct StepStats {
    /// Sum over the roots of their loss, divided by the global batch size.
    pub loss: f64,
    pub roots: u64,
    pub edges: u64,
    pub rows: RowCounts,
    pub sample_seconds: f64,
    pub gather_seconds: f64,
    pub compute_seconds: f64,
}

impl<'d> Worker<'d> {
    /// `fanouts` = (training, evaluation).
    pub fn new(
        (rank, world): (usize, usize),
        data: GraphData<'d>,
        fanouts: (&Fanouts, &Fanouts),
        seed: u64,
        (model, params): (Model, Params),
        device: Device,
    ) -> Self {
        Worker {
            rank,
            world,
            graph: data.graph,
            features: data.features,
            labels: data.labels,
            sampler: NeighborSampler::new(data.graph, fanouts.0.clone(), seed),
            eval_sampler: NeighborSampler::new(data.graph, fanouts.1.clone(), seed),
            model,
            params,
            device,
            norm: RowNorm::None,
            all_rows: None,
            owners: None,
            eval: EvalMode::Sampled,
            full: None,
            halo_columns: None,
            replica_checks: None,
            map: NodeMap::new(data.graph.num_nodes()),
        }
    }

    /// Input rows of `ids`, normalised as configured, and where they came from.
    pub(crate) fn gather_rows(&self, ids: &[u32]) -> Result<(Rows, RowCounts), TrainError> {
        let (mut rows, counts) = self.features.input_rows(ids)?;
        rows.normalize(self.features.dim(), self.norm);
        Ok((rows, counts))
    }

    fn labels_of(&self, roots: &[u32]) -> Vec<u32> {
        roots.iter().map(|&r| self.labels[r as usize] as u32).collect()
    }

    /// Samples `roots` (labelled, distinct) for `epoch`, runs forward and backward,
    /// and adds d(sum of root losses / `global_batch`)/d(params) into `grad`.
    pub fn compute(
        &mut self,
        roots: &[u32],
        epoch: u64,
        dropout_key: u64,
        global_batch: usize,
        grad: &mut [f32],
    ) -> Result<StepStats, TrainError> {
        let mut s = StepStats { roots: roots.len() as u64, ..Default::default() };
        if roots.is_empty() {
            return Ok(s);
        }
        let t = Instant::now();
        let blocks = self.sample(roots, epoch);
        s.sample_seconds = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let (rows, counts) = self.gather_rows(blocks.input_nodes())?;
        s.rows = counts;
        s.gather_seconds = t.elapsed().as_secs_f64();
        self.learn(blocks, rows, dropout_key, global_batch, grad, &mut s)?;
        Ok(s)
    }

    /// The training blocks of `roots` for `epoch`.
    pub fn sample(&mut self, roots: &[u32], epoch: u64) -> Blocks {
        self.sampler.sample(roots, epoch, &mut self.map)
    }

    /// Forward and backward over blocks sampled already, given their input rows
    /// (normalised); adds the gradient into `grad` and fills `s`'s edges, loss and
    /// compute time.
    pub fn learn(
        &mut self,
        blocks: Blocks,
        rows: Rows,
        dropout_key: u64,
        global_batch: usize,
        grad: &mut [f32],
        s: &mut StepStats,
    ) -> Result<(), TrainError> {
        let t = Instant::now();
        s.edges = blocks.num_edges() as u64;
        let labels = self.labels_of(blocks.roots());
        let mode = Mode::Train { key: dropout_key };
        let prepared = self.model.prepare(blocks, self.graph, self.sampler.fanouts());
        let x = self.model.input_rows(&prepared, rows, mode, &self.device)?;
        let logits = self.model.forward_input(&prepared, &x, mode)?;
        let loss = (cross_entropy_sum(&logits, &labels)? / global_batch as f64)?;
        s.loss = loss.to_scalar::<f32>()? as f64;
        let g = self.params.flat_grads(&loss.backward()?)?;
        for (a, b) in grad.iter_mut().zip(&g) {
            *a += b;
        }
        s.compute_seconds = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Correct predictions among `ids` (labelled), sampled with the evaluation
    /// fanouts, in batches of `batch`.
    pub fn count_correct(&mut self, ids: &[u32], epoch: u64, batch: usize) -> Result<u64, TrainError> {
        let mut correct = 0;
        for chunk in ids.chunks(batch) {
            let blocks = self.eval_sampler.sample(chunk, EVAL_EPOCH_SALT | epoch, &mut self.map);
            let (rows, _) = self.gather_rows(blocks.input_nodes())?;
            let prepared = self.model.prepare(blocks, self.graph, self.eval_sampler.fanouts());
            let x = self.model.input_rows(&prepared, rows, Mode::Eval, &self.device)?;
            let logits = self.model.forward_input(&prepared, &x, Mode::Eval)?;
            correct += count_correct(&logits, &self.labels_of(chunk))? as u64;
        }
        Ok(correct)
    }
}
