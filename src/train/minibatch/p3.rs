//! P3 (Gandhi & Iyer, OSDI'21): features split by column, the first layer
//! model-parallel, the rest data-parallel. Per iteration, on worker r of W:
//!
//! 1. Sample every worker's batch b(i, m) (sampling is a pure function of
//!    (seed, epoch, layer, vertex), so all workers build the same blocks
//!    without shipping them) and compute, from r's columns chunk(dim, W, r)
//!    of the input rows, each batch's partial first-layer pre-activation.
//! 2. All-to-all: batch m's partials go to m, which sums them, adds the bias,
//!    applies the activation and runs the other layers, forward and backward.
//! 3. All-to-all back: the owner sends the gradient of the summed
//!    pre-activation to every worker, which back-propagates it through its
//!    partials into its columns of the first layer's weights. (The LeapGNN
//!    artifact skipped this exchange, so its first layer learned only from
//!    the local partial; here the gradient equals model-centric's.)
//!
//! The loop's all-reduce then sums the first layer's weight columns (each
//! worker holds the gradient of its own columns), the first layer's bias and
//! the other layers (each worker holds its own batch's). Partials and their
//! gradients are billed as `activations`; no feature row crosses the network.
//!
//! The column slice is read from the full dataset archive the worker already
//! maps (`Worker::all_rows`), touching only those columns: a P3 deployment
//! would store just the slice. Evaluation uses the worker's usual feature
//! source, as model-centric does.

use super::{Iteration, Strategy, StrategyKind};
use crate::comm::{Category, RowSource, add_from_le, chunk, le_bytes};
use crate::gather::RowNorm;
use crate::metrics::{RowCounts, StepRecord};
use crate::model::{Mode, Prepared, cross_entropy_sum};
use crate::sample::NodeMap;
use crate::train::strategy::StepSink;
use crate::train::{Collective, TrainError, Worker};
use candle_core::{Tensor, Var};
use std::ops::Range;
use std::time::Instant;

#[derive(Default)]
pub struct P3 {
    map: Option<NodeMap>,
    /// L1 norm of each full row, read once per vertex (NaN: not yet), for
    /// `--normalize l1`: a slice alone does not know its row's norm.
    l1: Vec<f32>,
}

/// A batch this worker computes the partial pre-activation of.
struct Partial {
    /// `[num_dst, d_out]` of the first layer, a function of this worker's weight columns.
    value: Tensor,
    prepared: Prepared,
}

fn to_bytes(t: &Tensor) -> Result<Vec<u8>, TrainError> {
    Ok(le_bytes(&t.flatten_all()?.to_vec1::<f32>()?))
}

/// `dst += src` for little-endian f32 bytes of the expected length.
fn add_le(dst: &mut [f32], src: &[u8], from: usize, what: &str) -> Result<(), TrainError> {
    if src.len() != dst.len() * 4 {
        return Err(TrainError::Comm(
            format!(
                "worker {from} sent {} bytes of {what} where {} f32s were due: the workers disagree on the sampled batch (same binary, dataset and seed?)",
                src.len(),
                dst.len()
            )
            .into(),
        ));
    }
    add_from_le(dst, src);
    Ok(())
}

impl P3 {
    /// Columns `cols` of the rows of `ids`, normalised as the full rows would be.
    fn slice_rows(&mut self, w: &Worker<'_>, ids: &[u32], cols: &Range<usize>) -> Result<Vec<f32>, TrainError> {
        let src: &dyn RowSource = w.all_rows.ok_or_else(|| {
            TrainError::Rows("--strategy p3 needs the dataset's rows in this process, and this worker has none".into())
        })?;
        let row = |v: u32| src.row(v).ok_or_else(|| TrainError::Rows(format!("vertex {v} has no feature row")));
        let mut out = vec![0f32; ids.len() * cols.len()];
        for (dst, &v) in out.chunks_exact_mut(cols.len().max(1)).zip(ids) {
            row(v)?.write_columns(cols.clone(), dst);
        }
        if w.norm == RowNorm::L1 {
            if self.l1.is_empty() {
                self.l1 = vec![f32::NAN; w.graph.num_nodes()];
            }
            for (i, &v) in ids.iter().enumerate() {
                let s = &mut self.l1[v as usize];
                if s.is_nan() {
                    // The same sum, in the same order, as `gather::normalize_rows`.
                    *s = row(v)?.abs_sum();
                }
                if *s > 0.0 {
                    out[i * cols.len()..(i + 1) * cols.len()].iter_mut().for_each(|x| *x /= *s);
                }
            }
        }
        Ok(out)
    }
}

impl Strategy for P3 {
    fn kind(&self) -> StrategyKind {
        StrategyKind::P3
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        let (rank, world) = (coll.rank(), coll.world());
        let dim = w.all_rows.map_or(0, |r| r.dim());
        let cols = chunk(dim, world, rank);
        let mode = Mode::Train { key: it.dropout_key };
        let mut rec = StepRecord {
            epoch: it.epoch,
            iteration: it.index,
            worker: rank as u32,
            roots: it.batches[rank].len() as u64,
            ..Default::default()
        };

        // 1. Every batch's partial from this worker's columns.
        let mut partials: Vec<Option<Partial>> = Vec::with_capacity(world);
        let mut out = Vec::with_capacity(world);
        for &roots in &it.batches {
            if roots.is_empty() {
                partials.push(None);
                out.push(Vec::new());
                continue;
            }
            let t = Instant::now();
            let map = self.map.get_or_insert_with(|| NodeMap::new(w.graph.num_nodes()));
            let blocks = w.sampler.sample(roots, it.epoch, map);
            let prepared = w.model.prepare(blocks, w.graph, w.sampler.fanouts());
            rec.sample_seconds += t.elapsed().as_secs_f64();

            let t = Instant::now();
            let ids = prepared.blocks.input_nodes();
            let rows = self.slice_rows(w, ids, &cols)?;
            // Rows = the slices read for every batch computed here, all local.
            rec.rows += RowCounts { requested: ids.len() as u64, local: ids.len() as u64, ..Default::default() };
            rec.gather_seconds += t.elapsed().as_secs_f64();

            let t = Instant::now();
            let x = w.model.input_columns(&prepared, rows, cols.clone(), mode, &w.device)?;
            let value = w.model.first_layer_partial(&prepared, &x, cols.clone())?;
            out.push(to_bytes(&value)?);
            partials.push(Some(Partial { value, prepared }));
            rec.compute_seconds += t.elapsed().as_secs_f64();
        }
        let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;

        // 2. This worker's batch: sum the partials, run the rest of the model.
        let t = Instant::now();
        let mut back = Vec::new();
        if let Some(own) = &partials[rank] {
            let (n, d) = own.value.dims2()?;
            let mut sum = vec![0f32; n * d];
            for (from, bytes) in got.iter().enumerate() {
                add_le(&mut sum, bytes, from, "first-layer partials")?;
            }
            let pre =
                Var::from_tensor(&Tensor::from_vec(sum, (n, d), &candle_core::Device::Cpu)?.to_device(&w.device)?)?;
            let p = &own.prepared;
            let logits = w.model.forward_from_first(p, pre.as_tensor(), mode)?;
            let labels: Vec<u32> = p.blocks.roots().iter().map(|&r| w.labels[r as usize] as u32).collect();
            let loss = (cross_entropy_sum(&logits, &labels)? / it.global_size as f64)?;
            rec.loss = loss.to_scalar::<f32>()? as f64;
            rec.edges = p.blocks.num_edges() as u64;
            let store = loss.backward()?;
            for (a, b) in grad.iter_mut().zip(w.params.flat_grads(&store)?) {
                *a += b;
            }
            let g = match store.get(pre.as_tensor()) {
                Some(g) => g.clone(),
                None => pre.as_tensor().zeros_like()?,
            };
            back = to_bytes(&g)?;
        }
        rec.compute_seconds += t.elapsed().as_secs_f64();
        let got = coll.all_to_all(vec![back; world], Category::Activations).map_err(TrainError::Comm)?;

        // 3. Back-propagate each owner's gradient through this worker's partial.
        let t = Instant::now();
        let mut surrogate: Option<Tensor> = None;
        for (from, (part, bytes)) in partials.iter().zip(&got).enumerate() {
            let Some(part) = part else { continue };
            let (n, d) = part.value.dims2()?;
            let mut g = vec![0f32; n * d];
            add_le(&mut g, bytes, from, "first-layer gradients")?;
            let g = Tensor::from_vec(g, (n, d), &candle_core::Device::Cpu)?.to_device(&w.device)?;
            // d/dW of sum(partial * g) is g back-propagated through the partial.
            let term = (&part.value * &g)?.sum_all()?;
            surrogate = Some(match surrogate {
                Some(s) => (s + term)?,
                None => term,
            });
        }
        if let Some(s) = surrogate {
            for (a, b) in grad.iter_mut().zip(w.params.flat_grads(&s.backward()?)?) {
                *a += b;
            }
        }
        rec.compute_seconds += t.elapsed().as_secs_f64();
        rec.miss_rate = rec.rows.miss_rate().unwrap_or(0.0);
        let loss = rec.loss;
        records.push(rec)?;
        Ok(loss)
    }
}
