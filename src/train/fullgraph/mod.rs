//! The full-graph engine: every epoch is one gradient step over all training
//! nodes. Each worker computes its owned vertices' outputs layer by layer from
//! owned + halo inputs, exchanging the halo rows of every hidden layer (and
//! their gradients on the way back); the loop's all-reduce sums the gradient.
//! W = 1 is plain full-batch training. Evaluation and `infer` use the same
//! forward pass without dropout (`inference`).

pub(crate) mod chunks;
mod exchange;
mod factored;
mod factored_gat;
pub mod gnnpipe;
mod halo;
pub mod inference;
pub mod memory;
pub mod retexo;
pub mod varco;

pub use exchange::{backward_columns, backward_rows, forward_columns, forward_rows};
pub use halo::HaloPlan;

use super::strategy::{Iteration, Strategy, StrategyKind};
use super::{Collective, TrainError, Worker};
use crate::comm::ByteCounts;
use crate::gather::Rows;
use crate::metrics::{StepRecord, add_bytes};
use crate::model::csr_op::select_rows;
use crate::model::{AggGraph, Input, Mode, backward_from, cross_entropy_sum};
use crate::sample::Fanout;
use crate::train::strategy::StepSink;
use candle_core::{Tensor, Var};
use std::sync::Arc;
use std::time::Instant;

/// What a worker computes full-graph passes from, built once per run.
pub struct State {
    pub plan: HaloPlan,
    /// Input rows of owned + halo vertices, normalised: features are
    /// constants, so the halo's rows cross the network once, not per epoch.
    /// Sparse rows stay sparse where the first layer multiplies them so (as
    /// mini-batches do): bag-of-words features are mostly zeros.
    inputs: Input,
    /// The aggregation graph of every layer (the same block, so one graph).
    graph: Arc<AggGraph>,
}

/// The worker's full-graph state, built on first use (every worker calls this
/// at the same point of the run, so the halo fetch finds every feature server up).
pub(crate) fn state(w: &mut Worker<'_>) -> Result<Arc<State>, TrainError> {
    if let Some(s) = &w.full {
        return Ok(s.clone());
    }
    let plan = worker_plan(w)?;
    let rows = w.gather_rows(&plan.block.src)?.0.sparse_if_mostly_zero(w.model.spec().in_dim);
    let inputs = w.model.input_rows_of(&plan.block.src, rows, Mode::Eval, &w.device)?;
    let graph = Arc::new(w.model.layer_graph(0, &plan.block, w.graph, Fanout::All));
    let s = Arc::new(State { plan, inputs, graph });
    w.full = Some(s.clone());
    Ok(s)
}

/// The halo plan of worker `w` over its partition's owners (all vertices with one worker).
pub(crate) fn worker_plan(w: &Worker<'_>) -> Result<HaloPlan, crate::BadInput> {
    let owners = w.owners.as_ref().map(|o| o.as_slice());
    HaloPlan::derive(w.graph, owners, (w.rank, w.world), w.model.spec().adds_self_loops())
}

/// Layer-by-layer forward over owned + halo rows. With `keep`, each layer's
/// output stays attached to the graph and every hidden layer's exchanged input
/// is a fresh variable (so backward can stop there and exchange its gradient).
pub(crate) struct Forward {
    /// Output of every layer `[owned, d_l]` (the last: the logits).
    pub outs: Vec<Tensor>,
    /// Input variables of layers 1.. (`[owned + halo, d]`), when training.
    pub inputs: Vec<Var>,
    /// Bytes and seconds of each layer's input exchange (layer 0: none).
    pub moved: Vec<(ByteCounts, f64)>,
    pub compute: Vec<f64>,
}

pub(crate) fn forward(
    w: &Worker<'_>,
    st: &State,
    coll: &mut dyn Collective,
    mode: Mode,
    train: bool,
) -> Result<Forward, TrainError> {
    let plan = &st.plan;
    let layers = w.model.num_layers();
    let mut f = Forward {
        outs: Vec::with_capacity(layers),
        inputs: Vec::new(),
        moved: vec![Default::default(); layers],
        compute: vec![0.0; layers],
    };
    let x0 = match (&w.halo_columns, &st.inputs) {
        // VARCO: the halo's input rows cross the network at every step, compressed.
        (Some(cols), x) => {
            let d = w.model.spec().in_dim;
            let n = plan.owned().len();
            let own = match x {
                Input::Dense(t) => t.narrow(0, 0, n)?.flatten_all()?.to_vec1::<f32>()?,
                Input::Sparse(c) => c.dense_rows(n),
            };
            let (t, b0) = (Instant::now(), coll.bytes());
            let rows = forward_columns(coll, plan, own, (d, cols[0]))?;
            f.moved[0] = (coll.bytes().since(&b0), t.elapsed().as_secs_f64());
            Input::Dense(w.model.input_dense(&plan.block.src, rows, mode, &w.device)?)
        }
        (None, x) => first_input(w, &plan.block.src, x, mode)?,
    };
    let mut h = None;
    for l in 0..layers {
        let t = Instant::now();
        let ids = (&plan.block.src[..], plan.owned());
        let y = match &h {
            None => w.model.layer_forward_input(l, &x0, &st.graph, ids, mode)?,
            Some(x) => w.model.layer_forward(l, x, &st.graph, ids, mode)?,
        };
        f.compute[l] += t.elapsed().as_secs_f64();
        if l + 1 < layers {
            let d = w.model.out_dim(l);
            let (t, b0) = (Instant::now(), coll.bytes());
            let k = columns(w, l + 1, d);
            let rows = forward_columns(coll, plan, y.flatten_all()?.to_vec1::<f32>()?, (d, k))?;
            f.moved[l + 1] = (coll.bytes().since(&b0), t.elapsed().as_secs_f64());
            // Var::from_vec wraps the rows (from_tensor would copy them).
            h = Some(if train {
                let v = Var::from_vec(rows, (plan.rows(), d), &w.device)?;
                let t = v.as_tensor().clone();
                f.inputs.push(v);
                t
            } else {
                Tensor::from_vec(rows, (plan.rows(), d), &candle_core::Device::Cpu)?.to_device(&w.device)?
            });
        }
        f.outs.push(y);
    }
    Ok(f)
}

/// The first layer's input in `mode` from the cached rows `x` of vertices
/// `ids`: input dropout needs a copy of the rows; without it the cached rows
/// are the input.
pub(crate) fn first_input(w: &Worker<'_>, ids: &[u32], x: &Input, mode: Mode) -> Result<Input, TrainError> {
    if !(matches!(mode, Mode::Train { .. }) && w.model.spec().kind.drops_input()) {
        return Ok(x.clone());
    }
    let rows = match x {
        Input::Dense(t) => Rows::Dense(t.flatten_all()?.to_vec1::<f32>()?),
        Input::Sparse(c) => Rows::Sparse((**c).clone()),
    };
    Ok(w.model.input_rows_of(ids, rows, mode, &w.device)?)
}

/// Columns of layer `l`'s `d`-wide input that its halo exchange sends.
fn columns(w: &Worker<'_>, l: usize, d: usize) -> usize {
    w.halo_columns.as_ref().map_or(d, |c| c[l])
}

/// The full-graph engine as the loop's strategy: one iteration per epoch.
#[derive(Default)]
pub struct FullGraph;

impl Strategy for FullGraph {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ModelCentric
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        let st = state(w)?;
        let plan = &st.plan;
        let layers = w.model.num_layers();
        // The loop schedules the whole train set in one iteration; each worker
        // takes the roots it owns.
        let mut pos: Vec<u32> = Vec::new();
        let mut labels: Vec<u32> = Vec::new();
        for &v in it.batches.iter().flat_map(|b| b.iter()) {
            if let Some(p) = plan.owned_position(v) {
                pos.push(p as u32);
                labels.push(w.labels[v as usize] as u32);
            }
        }
        let mode = Mode::Train { key: it.dropout_key };
        let mut f = forward(w, &st, coll, mode, true)?;

        let t = Instant::now();
        let logits = &f.outs[layers - 1];
        let loss = if pos.is_empty() {
            (logits.sum_all()? * 0.0)?
        } else {
            let rows = select_rows(logits, &pos)?;
            (cross_entropy_sum(&rows, &labels)? / it.global_size as f64)?
        };
        let loss_value = loss.to_scalar::<f32>()? as f64;
        let mut grads = loss.backward()?;
        let mut add = |grads: &candle_core::backprop::GradStore| -> Result<(), TrainError> {
            for (a, b) in grad.iter_mut().zip(w.params.flat_grads(grads)?) {
                *a += b;
            }
            Ok(())
        };
        add(&grads)?;
        f.compute[layers - 1] += t.elapsed().as_secs_f64();
        // Down the layers: the gradient of layer l + 1's input rows, its halo
        // part summed at the owners, is the gradient of layer l's output.
        for l in (0..layers - 1).rev() {
            let x = &f.inputs[l];
            let d = w.model.out_dim(l);
            let g = match grads.get(x.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                None => vec![0.0; plan.rows() * d],
            };
            let (t, b0) = (Instant::now(), coll.bytes());
            let g = backward_columns(coll, plan, g, (d, columns(w, l + 1, d)))?;
            let (moved, secs) = &mut f.moved[l + 1];
            let back = coll.bytes().since(&b0);
            add_bytes(&mut moved.sent, &back.sent);
            add_bytes(&mut moved.received, &back.received);
            *secs += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let g = Tensor::from_vec(g, (plan.owned().len(), d), &candle_core::Device::Cpu)?.to_device(&w.device)?;
            grads = backward_from(&f.outs[l], &g)?;
            add(&grads)?;
            f.compute[l] += t.elapsed().as_secs_f64();
        }

        let edges = plan.block.num_edges() as u64;
        for l in 0..layers {
            let (moved, secs) = &f.moved[l];
            let last = l + 1 == layers;
            let record = StepRecord {
                epoch: it.epoch,
                iteration: it.index,
                worker: w.rank as u32,
                model: w.rank as u32,
                roots: if last { labels.len() as u64 } else { 0 },
                edges,
                bytes_out: moved.sent,
                bytes_in: moved.received,
                gather_seconds: *secs,
                compute_seconds: f.compute[l],
                loss: if last { loss_value } else { 0.0 },
                layer: Some(l as u32),
                columns: w.halo_columns.as_ref().map(|c| c[l] as u32),
                ..Default::default()
            };
            if last { records.push(record)? } else { records.push_final(record)? }
        }
        Ok(loss_value)
    }

    /// The forward alone: its backward would move every halo gradient row.
    fn statistics_pass(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
    ) -> Result<(), TrainError> {
        let st = state(w)?;
        forward(w, &st, coll, Mode::Train { key: it.dropout_key }, false)?;
        Ok(())
    }
}
