//! `--strategy gnnpipe` (GNNPipe, Chen, Chen and Qian): layer-level model
//! parallelism on the full graph. Worker s of W is stage s: it owns layers
//! [s L / W, (s + 1) L / W) for every vertex. The graph is cut into C chunks
//! (METIS) that flow through the stages as a pipeline: at tick t stage s
//! computes its layers for chunk t - s and sends the chunk's output rows to
//! stage s + 1, which computes that chunk at tick t + 1. A layer reads, for
//! the in-neighbours of a chunk's vertices that lie outside it, the rows of
//! the chunks computed before it in this epoch and, for the others, the rows
//! kept from the previous epoch (the history: zero in the first epoch, which
//! warms it; always zero with `--history off`). Backward runs the pipeline
//! in reverse from each chunk's loss at the last stage, the last chunk
//! first. The gradient a chunk's layer sends into its halo rows of this
//! epoch (rows of chunks computed before it) is kept at the stage until
//! their own chunk comes back through the pipeline, which the reverse order
//! makes later, and added to that chunk's gradient, which carries it to the
//! previous stage (no extra bytes). Rows read from the history are
//! constants: their chunk is already back, and handing their gradient to
//! the next epoch (PipeGCN's stale gradients) made the loss oscillate. So
//! without history reads (every cross edge from an earlier chunk to a later
//! one) the gradient is the full graph's. Each stage sums its layers'
//! gradient over the chunks and steps its own optimizer over its own
//! layers: there is no gradient all-reduce. One optimizer step per epoch, as
//! the full-graph engine, so a row read from the history is exactly one
//! step old.
//!
//! What crosses the network per epoch: each chunk's rows between
//! consecutive stages and their gradients (`activations`: rows x width x 4
//! bytes plus the mesh's framing per message) and a few control values (the
//! loss, the stop vote). Stage 0 reads every feature row from the dataset
//! shipped with the job; every stage holds the whole topology and a row of
//! every vertex per layer it owns. Evaluation is exact: each stage computes
//! its layers for every vertex and sends every row to the next stage.
//! With C = 1 and `--history off` the mathematics are the full-graph
//! engine's (the tests compare the gradients).
//!
//! Hybrid (`--pipeline-groups G`): the W workers form G groups of W / G
//! stages; group g trains the vertices of its workers' parts, its chunks
//! being the METIS chunks cut at the group boundary. A group reads the other
//! groups' vertices from the history, refreshed once per epoch by an exchange
//! between matching stages (`activations`), and matching stages sum their
//! gradients (`gradients`), so every group keeps the same weights; group 0
//! evaluates.
//!
//! Stages split a model through its per-layer interface: `Model::layer_forward`
//! and the parameters named `layers.<l>.*` (`layer_of`).

mod checkpoint;

use super::HaloPlan;
use super::chunks::{self, Chunk, VertexRows, flat};
use super::exchange::decode_rows as decode;
use super::memory::Shape;
use crate::BadInput;
use crate::comm::{Category, add_from_le};
use crate::metrics::{EpochRecord, StepRecord, add_bytes};
use crate::model::csr_op::select_rows;
use crate::model::{Mode, Params, cross_entropy_sum};
use crate::optim::Optimizer;
use crate::train::evaluate::StopVote;
use crate::train::trainer::{Attempt, dropout_key};
use crate::train::{Collective, LoopInput, Observer, Progress, TrainError, Worker};
use candle_core::{Tensor, Var};
use std::ops::Range;
use std::time::Instant;

/// GNNPipe's flags.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GnnPipeConfig {
    /// Graph chunks per epoch (`--chunks`).
    pub chunks: usize,
    /// Rows of chunks not yet computed this epoch come from the previous
    /// epoch (`--history on`) or are zero (`off`).
    pub history: bool,
    /// The history a row leaves for the next epoch is `g` times the one it
    /// left before plus `1 - g` times this epoch's row (`--history-smoothing`,
    /// 0: this epoch's row alone). A run recorded without the field predates
    /// the flag and ran unsmoothed, so it resumes with 0, not [`SMOOTHING`].
    #[serde(default)]
    pub history_smoothing: f32,
    /// Graph-parallel groups, each a pipeline over its part of the graph (`--pipeline-groups`).
    #[serde(default = "one")]
    pub groups: usize,
}

fn one() -> usize {
    1
}

/// `--history-smoothing`'s default with the history on: it removed the
/// 8-layer GCN's epoch-to-epoch oscillation on synthetic-arxiv and did better
/// on average in all but one of the pairs measured (docs/results/gnnpipe.md, convergence aid (6)).
pub const SMOOTHING: f32 = 0.8;

impl Default for GnnPipeConfig {
    fn default() -> Self {
        GnnPipeConfig { chunks: 8, history: true, history_smoothing: SMOOTHING, groups: 1 }
    }
}

impl GnnPipeConfig {
    /// The stages of each pipeline group of a run on `world` workers (at least one).
    pub fn stages(&self, world: usize) -> usize {
        (world / self.groups.max(1)).max(1)
    }

    /// Refuses zero chunks, groups that do not divide the workers and fewer
    /// layers than stages, naming the flag.
    pub fn check(&self, layers: usize, workers: usize) -> Result<(), BadInput> {
        if self.chunks == 0 {
            return Err(BadInput::new(
                "--chunks 0: GNNPipe cuts the graph into at least one chunk; give --chunks 1 or more (e.g. 8)",
            ));
        }
        let g = self.history_smoothing;
        if !(0.0..1.0).contains(&g) {
            return Err(BadInput::new(format!(
                "--history-smoothing {g}: the weight of a row's earlier history must lie in [0, 1) \
                 (0 = no smoothing; 0.8 keeps a fifth of each epoch's row)"
            )));
        }
        if g > 0.0 && !self.history {
            return Err(BadInput::new(format!(
                "--history-smoothing {g} with --history off: there is no history to smooth; drop one of them"
            )));
        }
        if self.chunks > u16::MAX as usize {
            return Err(BadInput::new(format!("--chunks {}: at most {} chunks", self.chunks, u16::MAX)));
        }
        if self.groups == 0 {
            return Err(BadInput::new(
                "--pipeline-groups 0: the workers form at least one pipeline; give --pipeline-groups 1 (one \
                 pipeline over the whole graph) or a divisor of --workers",
            ));
        }
        if !workers.is_multiple_of(self.groups) {
            return Err(BadInput::new(format!(
                "--pipeline-groups {} with --workers {workers}: the workers form groups of equal pipelines, so the \
                 number of groups must divide --workers (1 = one pipeline over the whole graph)",
                self.groups
            )));
        }
        let stages = workers / self.groups;
        if layers < stages {
            let per = if self.groups > 1 { format!(" / --pipeline-groups {}", self.groups) } else { String::new() };
            return Err(BadInput::new(format!(
                "--layers {layers} with --strategy gnnpipe and --workers {workers}{per}: each worker is a pipeline \
                 stage that owns at least one layer; give --layers {stages} or more, or fewer stages"
            )));
        }
        Ok(())
    }

    /// Refuses more chunks than the graph has vertices (a chunk holds at
    /// least one): the driver before launch, each worker again.
    pub fn check_graph(&self, nodes: usize) -> Result<(), BadInput> {
        if self.chunks > nodes {
            return Err(BadInput::new(format!(
                "--chunks {}: the graph has {nodes} nodes, and a chunk holds at least one; give --chunks {nodes} or fewer",
                self.chunks
            )));
        }
        Ok(())
    }
}

/// The layers of stage `s` of `stages` in a model of `layers` layers.
pub fn stage_layers(s: usize, stages: usize, layers: usize) -> Range<usize> {
    s * layers / stages..(s + 1) * layers / stages
}

/// The layer a parameter belongs to: its name is `layers.<l>.…`.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("layers.")?.split('.').next()?.parse().ok()
}

/// The width of layer `l`'s input rows.
fn input_width(w: &Worker<'_>, l: usize) -> usize {
    if l == 0 { w.model.spec().in_dim } else { w.model.out_dim(l - 1) }
}

/// The parameters of `layers` (sharing storage with `params`).
fn stage_params(params: &Params, layers: &Range<usize>) -> Params {
    params.subset_where(|name| layer_of(name).is_some_and(|l| layers.contains(&l)))
}

/// Where the parameters of `layers` lie in `params`' flat buffer.
fn flat_ranges(params: &Params, layers: &Range<usize>) -> Vec<Range<usize>> {
    let mut at = 0;
    let mut out = Vec::new();
    for p in params.iter() {
        let n = p.var.elem_count();
        if layer_of(&p.name).is_some_and(|l| layers.contains(&l)) {
            out.push(at..at + n);
        }
        at += n;
    }
    out
}

fn le_bytes(x: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice::<f32, u8>(x).to_vec()
}

/// Element-wise sum of a few values over every worker (one small
/// all-to-all, billed as control: nothing here is a gradient).
fn sum_small(coll: &mut dyn Collective, vals: &mut [f32]) -> Result<(), TrainError> {
    let msg = le_bytes(vals);
    let got = coll.all_to_all(vec![msg; coll.world()], Category::Control).map_err(TrainError::Comm)?;
    vals.fill(0.0);
    for (p, m) in got.iter().enumerate() {
        super::exchange::check_len(m.len(), 1, vals.len(), p, "control values")?;
        add_from_le(vals, m);
    }
    Ok(())
}

/// Whether every worker takes part in a checkpoint before the run's end: rank
/// 0's `may_checkpoint` (false: the driver did not confirm in time, Ctrl-Z)
/// is summed with the others' over the control path, since the save gathers
/// every stage's state and rank 0 cannot skip it alone; all skip it together,
/// and the next one tries again. A stop's (`stop`) is not skipped (nothing
/// comes after it: `before_checkpoint` waits longer) but votes too, so that a
/// checkpoint moves the same bytes wherever it is (a resumed run's totals
/// are the uninterrupted run's).
fn all_may_checkpoint(
    coll: &mut dyn Collective,
    obs: &mut dyn Observer,
    through: u64,
    stop: bool,
) -> Result<bool, TrainError> {
    let may = if stop { obs.before_checkpoint(through).map(|()| true)? } else { obs.may_checkpoint(through)? };
    let mut yes = [f32::from(u8::from(may))];
    sum_small(coll, &mut yes)?;
    Ok(yes[0] as usize == coll.world())
}

/// One stage of the pipeline, built once per run.
struct Stage {
    s: usize,
    stages: usize,
    /// This worker's rank and the job's workers: group g's stage s is rank g S + s.
    rank: usize,
    world: usize,
    /// Hybrid: the groups' halo plan (vertices of this worker's group, and
    /// what each group needs from it); None with one group.
    groups: Option<HaloPlan>,
    /// Hybrid: exchanges per refresh, the most hidden-layer inputs any stage
    /// owns (every worker takes part in every all-to-all).
    refreshes: usize,
    /// Evaluation: chunks over the whole graph where `chunks` cover this
    /// group's part only (group 0 evaluates; other groups have none).
    eval_chunks: Option<Vec<Chunk>>,
    layers: Range<usize>,
    chunks: Vec<Chunk>,
    /// The stage's own parameters (a view of the worker's).
    own: Params,
    /// Training vertices over the whole graph: the loss is their sum over this.
    global_train: usize,
    /// Width of the stage's input and output rows.
    d_in: usize,
    d_out: usize,
}

/// A chunk's forward pass kept for its backward: the stage's output, above
/// stage 0 its input rows as a variable (their gradient goes back), and
/// each layer's inputs (the gradient of its halo rows goes to the chunks
/// computed before this one).
struct Tape {
    out: Tensor,
    input: Option<Var>,
    layers: Vec<chunks::LayerInput>,
}

/// Seconds computing and exchanging (waits for the neighbours included).
#[derive(Default)]
struct Times {
    compute: f64,
    exchange: f64,
}

impl Stage {
    fn ticks(&self) -> usize {
        self.chunks.len() + self.stages - 1
    }

    /// The chunk stage `s` computes at forward tick `t`.
    fn forward_chunk(&self, t: usize, s: usize) -> Option<usize> {
        t.checked_sub(s).filter(|&c| c < self.chunks.len())
    }

    /// The chunk stage `s` computes at backward tick `u` (the last stage first, the last chunk first).
    fn backward_chunk(&self, u: usize, s: usize) -> Option<usize> {
        let k = u.checked_sub(self.stages - 1 - s).filter(|&k| k < self.chunks.len())?;
        Some(self.chunks.len() - 1 - k)
    }

    fn exchange(
        &self,
        coll: &mut dyn Collective,
        out: Vec<Vec<u8>>,
        times: &mut Times,
    ) -> Result<Vec<Vec<u8>>, TrainError> {
        let t = Instant::now();
        let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;
        times.exchange += t.elapsed().as_secs_f64();
        Ok(got)
    }

    /// The forward pipeline of one epoch: every chunk's tape.
    fn forward(
        &self,
        w: &Worker<'_>,
        coll: &mut dyn Collective,
        bufs: &mut [VertexRows],
        mode: Mode,
        times: &mut Times,
    ) -> Result<Vec<Option<Tape>>, TrainError> {
        let s = self.s;
        let mut tapes: Vec<Option<Tape>> = (0..self.chunks.len()).map(|_| None).collect();
        let mut received: Option<Vec<f32>> = None;
        for t in 0..self.ticks() {
            let mut out = vec![Vec::new(); self.world];
            if let Some(c) = self.forward_chunk(t, s).filter(|&c| self.chunks[c].len() > 0) {
                let tc = Instant::now();
                let ch = &self.chunks[c];
                let input = match (s, received.take()) {
                    (0, _) => None,
                    (_, Some(rows)) => {
                        bufs[0].write(ch.plan.owned(), &rows);
                        // Var::from_vec wraps the rows (from_tensor would copy them).
                        Some(Var::from_vec(rows, (ch.len(), self.d_in), &w.device)?)
                    }
                    (_, None) => {
                        return Err(TrainError::Comm(
                            format!("stage {s} reached chunk {c} without its rows from stage {}", s - 1).into(),
                        ));
                    }
                };
                let first = input.as_ref().map(|v| v.as_tensor().clone());
                let (y, layers) = chunks::forward(w, ch, self.layers.clone(), first, bufs, mode)?;
                if s + 1 < self.stages {
                    out[self.rank + 1] = le_bytes(&flat(&y)?);
                }
                tapes[c] = Some(Tape { out: y, input, layers });
                times.compute += tc.elapsed().as_secs_f64();
            }
            // The last tick's output (the last stage's last chunk) goes nowhere.
            if t + 1 < self.ticks() {
                let got = self.exchange(coll, out, times)?;
                if let Some(c) = s.checked_sub(1).and_then(|p| self.forward_chunk(t, p)) {
                    let r = self.rank - 1;
                    received = Some(decode(&got[r], self.chunks[c].len(), self.d_in, r, "chunk rows")?);
                }
            }
        }
        Ok(tapes)
    }

    /// The backward pipeline: the stage's gradient (its own parameters,
    /// summed over the chunks) and, at the last stage, the loss. `pending`
    /// (one row per vertex for each layer input the stage owns, zero on
    /// entry) gathers the gradient that reaches a chunk's halo rows, and a
    /// chunk takes its own rows' share when it comes back through the
    /// pipeline: that of rows of this epoch, the reverse order bringing
    /// their chunk back after the chunks that read them. What reaches a row
    /// read from the history (its chunk already back) is dropped.
    fn backward(
        &self,
        coll: &mut dyn Collective,
        mut tapes: Vec<Option<Tape>>,
        pending: &mut [VertexRows],
        times: &mut Times,
    ) -> Result<(f64, Vec<f32>), TrainError> {
        let s = self.s;
        let last = s + 1 == self.stages;
        let mut grad = vec![0f32; self.own.numel()];
        let mut loss = 0.0;
        let mut received: Option<Vec<f32>> = None;
        for u in 0..self.ticks() {
            let mut out = vec![Vec::new(); self.world];
            if let Some(c) = self.backward_chunk(u, s).filter(|&c| self.chunks[c].len() > 0) {
                let tc = Instant::now();
                let ch = &self.chunks[c];
                let Tape { out: y, input, layers } = tapes[c].take().expect("the forward pass kept every chunk's tape");
                // What is back-propagated: the loss (last stage) or the output
                // rows against their gradient from the next stage, plus each
                // layer's own input rows against the gradient pending for them
                // (a constant, so the product's gradient is exactly it).
                let mut terms = Vec::with_capacity(layers.len() + 1);
                if last {
                    if !ch.train.is_empty() {
                        let l =
                            (cross_entropy_sum(&select_rows(&y, &ch.train)?, &ch.labels)? / self.global_train as f64)?;
                        loss += l.to_scalar::<f32>()? as f64;
                        terms.push(l);
                    }
                } else {
                    let g = received.take().ok_or_else(|| {
                        TrainError::Comm(
                            format!("stage {s} reached chunk {c} without its gradient from stage {}", s + 1).into(),
                        )
                    })?;
                    let g = Tensor::from_vec(g, y.dims2()?, &candle_core::Device::Cpu)?.to_device(y.device())?;
                    terms.push(crate::model::seeded(&y, &g)?);
                }
                for (x, buf) in layers.iter().zip(pending.iter()) {
                    if let Some(own) = &x.own {
                        let g = buf.of(ch.plan.owned());
                        if g.iter().any(|&v| v != 0.0) {
                            let g = Tensor::from_vec(g, own.dims2()?, &candle_core::Device::Cpu)?
                                .to_device(own.device())?;
                            terms.push(crate::model::seeded(own, &g)?);
                        }
                    }
                }
                let grads = match terms.split_first() {
                    None => None,
                    Some((a, rest)) => Some(rest.iter().try_fold(a.clone(), |acc, t| acc + t)?.backward()?),
                };
                if let Some(gs) = &grads {
                    for (x, buf) in layers.iter().zip(pending.iter_mut()) {
                        if let Some(g) = x.halo.as_ref().and_then(|h| gs.get(h.as_tensor())) {
                            buf.add(ch.plan.halo(), &flat(g)?);
                        }
                    }
                    for (a, b) in grad.iter_mut().zip(self.own.flat_grads(gs)?) {
                        *a += b;
                    }
                }
                if let Some(x) = &input {
                    let g = grads.as_ref().and_then(|gs| gs.get(x.as_tensor()));
                    out[self.rank - 1] = match g {
                        Some(g) => le_bytes(&flat(g)?),
                        None => le_bytes(&vec![0.0; ch.len() * self.d_in]),
                    };
                }
                times.compute += tc.elapsed().as_secs_f64();
            }
            if u + 1 < self.ticks() {
                let got = self.exchange(coll, out, times)?;
                if let Some(c) = (!last).then(|| self.backward_chunk(u, s + 1)).flatten() {
                    let r = self.rank + 1;
                    received = Some(decode(&got[r], self.chunks[c].len(), self.d_out, r, "chunk gradients")?);
                }
            }
        }
        Ok((loss, grad))
    }

    /// PipeGCN's smoothing of the history (`--history-smoothing g`): after an
    /// epoch's forward, every row the stage's chunks computed becomes, for the
    /// next epoch's history reads, g times its smoothed value so far plus 1 - g
    /// times this epoch's (`first`: this epoch's alone). The later chunks of
    /// this epoch have already read its rows as they were, so only history
    /// reads change. Without it a deep GCN's stale rows made training
    /// oscillate (docs/results/gnnpipe.md, convergence aids).
    fn smooth_history(&self, g: f32, bufs: &mut [VertexRows], smoothed: &mut [VertexRows], first: bool) {
        for (b, sm) in bufs.iter_mut().zip(smoothed.iter_mut()).filter(|(b, _)| !b.vals.is_empty()) {
            let d = b.d;
            for &v in self.chunks.iter().flat_map(|ch| ch.plan.owned()) {
                let r = v as usize * d..(v as usize + 1) * d;
                for (s, f) in sm.vals[r.clone()].iter_mut().zip(&mut b.vals[r]) {
                    *s = if first { *f } else { g * *s + (1.0 - g) * *f };
                    *f = *s;
                }
            }
        }
    }

    /// Hybrid, after an epoch: each group's rows of every layer input this
    /// stage owns go to the matching stage of the groups that hold them as
    /// halo; the next epoch reads them as history (as rows of chunks not yet
    /// computed). Billed as activations.
    fn refresh_groups(
        &self,
        coll: &mut dyn Collective,
        bufs: &mut [VertexRows],
        times: &mut Times,
    ) -> Result<(), TrainError> {
        let Some(plan) = &self.groups else { return Ok(()) };
        let mut hidden: Vec<&mut VertexRows> = bufs.iter_mut().filter(|b| !b.vals.is_empty()).collect();
        for i in 0..self.refreshes {
            let mut out = vec![Vec::new(); self.world];
            let Some(buf) = hidden.get_mut(i) else {
                self.exchange(coll, out, times)?;
                continue;
            };
            for (h, send) in plan.send.iter().enumerate().filter(|&(h, _)| h != plan.rank) {
                let ids: Vec<u32> = send.iter().map(|&p| plan.owned()[p as usize]).collect();
                out[h * self.stages + self.s] = le_bytes(&buf.of(&ids));
            }
            let got = self.exchange(coll, out, times)?;
            for h in (0..plan.world).filter(|&h| h != plan.rank) {
                let ids = &plan.halo()[plan.halo_of(h)];
                let r = h * self.stages + self.s;
                buf.write(ids, &decode(&got[r], ids.len(), buf.d, r, "group rows")?);
            }
        }
        Ok(())
    }

    /// Hybrid: the stage's gradient summed with the matching stages' of the
    /// other groups (each sends its own to the others), billed as gradients.
    fn sum_over_groups(&self, coll: &mut dyn Collective, grad: &mut [f32]) -> Result<(), TrainError> {
        let Some(plan) = &self.groups else { return Ok(()) };
        let mine = le_bytes(grad);
        let peers = |h: usize| h * self.stages + self.s;
        let mut out = vec![Vec::new(); self.world];
        for h in (0..plan.world).filter(|&h| h != plan.rank) {
            out[peers(h)] = mine.clone();
        }
        let got = coll.all_to_all(out, Category::Gradients).map_err(TrainError::Comm)?;
        for h in (0..plan.world).filter(|&h| h != plan.rank) {
            super::exchange::check_len(got[peers(h)].len(), 1, grad.len(), peers(h), "gradients")?;
            add_from_le(grad, &got[peers(h)]);
        }
        Ok(())
    }

    /// BatchNorm's statistics before the first step, as the common loop sets
    /// them (`trainer::warm_up_statistics`): `warm_up_passes` training
    /// forwards of the pipeline with the first epoch's dropout, nothing learned,
    /// after each the statistics of every vertex (summed over the groups);
    /// pass k's make layer k's inputs those of the initial weights. The rows
    /// it leaves are dropped: the first epoch warms the history, as without
    /// BatchNorm.
    fn warm_up(
        &self,
        w: &Worker<'_>,
        coll: &mut dyn Collective,
        bufs: &mut [VertexRows],
        key: u64,
    ) -> Result<(), TrainError> {
        for _ in 0..crate::model::warm_up_passes(w.model.num_layers()) {
            self.forward(w, coll, bufs, Mode::Train { key }, &mut Times::default())?;
            let mut sums = Vec::with_capacity(w.model.norm_sums_len());
            w.model.take_norm_sums(&mut sums);
            self.sum_over_groups(coll, &mut sums)?;
            w.model.finish_iteration(&sums, true)?;
        }
        bufs.iter_mut().for_each(VertexRows::clear);
        Ok(())
    }

    /// Validation and test accuracy: each stage its layers for every vertex
    /// (no dropout, no history), every row sent on to the next stage; and
    /// whether any worker voted to stop in the counts' sum (`stop`: this
    /// one is asked to).
    fn accuracies(
        &self,
        w: &Worker<'_>,
        coll: &mut dyn Collective,
        sets: [&[u32]; 2],
        stop: &dyn Fn() -> bool,
        times: &mut Times,
    ) -> Result<(f64, f64, bool), TrainError> {
        // Group 0 (ranks 0..S) evaluates; the other groups' stages take part in the exchanges only.
        let (s, n) = (self.s, w.graph.num_nodes());
        let evaluates = self.rank < self.stages;
        let chunks = self.eval_chunks.as_ref().unwrap_or(&self.chunks);
        let run = |x: VertexRows| chunks::infer(w, chunks, self.layers.clone(), x);
        let mut out = if s == 0 && evaluates { Some(run(VertexRows::zeros(0, 0))?) } else { None };
        for k in 0..self.stages - 1 {
            let mut msg = vec![Vec::new(); self.world];
            if s == k && evaluates {
                msg[k + 1] = le_bytes(&out.take().expect("this stage has computed its layers").vals);
            }
            let got = self.exchange(coll, msg, times)?;
            if s == k + 1 && evaluates {
                let vals = decode(&got[k], n, self.d_in, k, "rows")?;
                out = Some(run(VertexRows { d: self.d_in, vals })?);
            }
        }
        let mut counts = [0f32; 4];
        if let Some(logits) = out.filter(|_| s + 1 == self.stages && evaluates) {
            for (i, ids) in sets.iter().enumerate() {
                let right = ids
                    .iter()
                    .filter(|&&v| {
                        let row = &logits.vals[v as usize * logits.d..(v as usize + 1) * logits.d];
                        super::inference::argmax(row) as i64 == w.labels[v as usize] as i64
                    })
                    .count();
                counts[2 * i] = right as f32;
                counts[2 * i + 1] = ids.len() as f32;
            }
        }
        // Only the last stage of group 0 scores, but every worker votes.
        let vote = StopVote::new::<f32>(stop(), sets[0].len(), coll.world());
        vote.cast(&mut counts);
        sum_small(coll, &mut counts)?;
        let stop = vote.tally(&mut counts);
        let ratio = |a: f32, b: f32| if b > 0.0 { a as f64 / b as f64 } else { 0.0 };
        Ok((ratio(counts[0], counts[1]), ratio(counts[2], counts[3]), stop))
    }
}

/// The whole model's gradient at rank 0 (each stage sends its layers'), for
/// an observer that asked for it (`--dump-grad`).
fn whole_gradient(
    w: &Worker<'_>,
    coll: &mut dyn Collective,
    stages: usize,
    own: &[f32],
) -> Result<Option<Vec<f32>>, TrainError> {
    // After the groups' sum every group holds the whole gradient: group 0's stages send theirs.
    let mut out = vec![Vec::new(); w.world];
    if w.rank < stages {
        out[0] = le_bytes(own);
    }
    let got = coll.all_to_all(out, Category::Control).map_err(TrainError::Comm)?;
    if w.rank != 0 {
        return Ok(None);
    }
    let mut whole = vec![0f32; w.params.numel()];
    for (q, m) in got.iter().enumerate().take(stages) {
        let ranges = flat_ranges(&w.params, &stage_layers(q, stages, w.model.num_layers()));
        let n = ranges.iter().map(|r| r.len()).sum();
        let part = decode(m, 1, n, q, "gradients")?;
        let mut at = 0;
        for r in ranges {
            whole[r.clone()].copy_from_slice(&part[at..at + r.len()]);
            at += r.len();
        }
    }
    Ok(Some(whole))
}

/// Runs a GNNPipe job from `p` to the end (or `stop_after`): the common
/// loop's inputs, an optimizer per stage (its slice of `whole`, the whole
/// model's: fresh, or restored from the checkpoint `p` comes from).
pub fn run(
    inp: &LoopInput<'_>,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    whole: &dyn Optimizer,
    mut p: Progress,
    obs: &mut dyn Observer,
) -> Result<Progress, TrainError> {
    let cfg = inp.cfg;
    let g = cfg.gnnpipe.clone().unwrap_or_default();
    let (world, num_layers) = (w.world, w.model.num_layers());
    g.check(num_layers, world)?;
    g.check_graph(w.graph.num_nodes())?;
    let stages = g.stages(world);
    let (group, s) = (w.rank / stages, w.rank % stages);
    if let Some(bad) = w.params.iter().find(|q| layer_of(&q.name).is_none_or(|l| l >= num_layers)) {
        return Err(BadInput::new(format!(
            "--strategy gnnpipe splits a model by layer, and parameter `{}` belongs to no layer (`layers.<l>.*`)",
            bad.name
        ))
        .into());
    }
    let layers = stage_layers(s, stages, num_layers);
    let last = s + 1 == stages;
    let n = w.graph.num_nodes();
    let width = |l: usize| input_width(w, l);

    let t = Instant::now();
    let mut mark = coll.bytes();
    // Cut once, by the driver (`chunks::ensure_stored`): never here.
    let (of, count) = match (g.chunks, inp.chunks) {
        (1, _) => (vec![0; n], 1),
        (_, Some((of, count))) => (of.to_vec(), count),
        (c, None) => {
            return Err(BadInput::new(format!(
                "--chunks {c}: this worker was given no stored chunks to read (the driver cuts them into \
                 <dataset>/chunks/metis-{c}/); are driver and worker the same version?"
            ))
            .into());
        }
    };
    if count < g.chunks {
        obs.event(&format!("METIS left {} of the {} chunks empty: {count} chunks", g.chunks - count, g.chunks));
    }
    // Hybrid: group g trains the vertices of its workers' parts, its chunks
    // being the METIS chunks cut by the group boundaries (some may be empty).
    let (groups, of, total) = if g.groups > 1 {
        if g.groups * count > u16::MAX as usize {
            return Err(BadInput::new(format!(
                "--chunks {} with --pipeline-groups {}: at most {} chunks in all",
                g.chunks,
                g.groups,
                u16::MAX
            ))
            .into());
        }
        let owners = w.owners.as_ref().ok_or_else(|| {
            BadInput::new("--pipeline-groups needs the partition's owners: run it on several workers")
        })?;
        let group_of: Vec<u16> = owners.as_slice().iter().map(|&o| o / stages as u16).collect();
        let plan = HaloPlan::derive(w.graph, Some(&group_of), (group, g.groups), w.model.spec().adds_self_loops())?;
        let of = chunks::hybrid(&of, count, &group_of);
        (Some(plan), of, g.groups * count)
    } else {
        (None, of, count)
    };
    let mine = group * count..(group + 1) * count;
    let train = if last { inp.train } else { &[] };
    let chunks = chunks::build(w, (&of, total), mine.clone(), layers.start, s == 0, train)?;
    let eval_chunks = match (&groups, group) {
        (Some(_), 0) => Some(chunks::build(w, (&of, total), 0..total, layers.start, s == 0, &[])?),
        _ => None,
    };
    // Before any layer runs: the chunks as cut, not the even share checked before the run.
    let cut: Vec<Shape> = eval_chunks.as_ref().unwrap_or(&chunks).iter().map(Chunk::shape).collect();
    super::memory::check_cut_chunks(&cut, w.model.spec(), cfg.device, inp.resumed_from.is_some())?;
    let stage = Stage {
        s,
        stages,
        rank: w.rank,
        world,
        refreshes: (0..stages)
            .map(|q| stage_layers(q, stages, num_layers).filter(|&l| l > 0).count())
            .max()
            .unwrap_or(0),
        groups,
        eval_chunks,
        chunks,
        own: stage_params(&w.params, &layers),
        global_train: inp.train.len().max(1),
        d_in: width(layers.start),
        d_out: w.model.out_dim(layers.end - 1),
        layers: layers.clone(),
    };
    // The input rows of every layer the stage owns (none for layer 0: the features).
    let per_layer_input = || -> Vec<VertexRows> {
        layers.clone().map(|l| VertexRows::zeros(if l == 0 { 0 } else { n }, width(l))).collect()
    };
    let mut bufs = per_layer_input();
    // The gradient reaching those rows through later chunks' halos, shaped alike.
    let mut pending = per_layer_input();
    let edges: u64 = stage.chunks.iter().map(|c| c.plan.block.num_edges() as u64).sum();
    let roots: u64 = stage.chunks.iter().map(|c| c.train.len() as u64).sum();
    let mut opt = stage.optimizer(w, cfg, whole)?;
    if let Some(dir) = inp.resumed_from.filter(|_| g.history) {
        stage.restore_history(w, dir, &mut bufs)?;
    }
    // The smoothed history (`--history-smoothing`): after each forward the
    // rows in `bufs` are it, so a checkpoint of `bufs` restores it too.
    let smoothing = g.history_smoothing;
    let mut smoothed = if smoothing > 0.0 { bufs.clone() } else { Vec::new() };
    let mut setup_seconds = t.elapsed().as_secs_f64();
    // What this attempt's checkpoints count from: the sockets as training
    // begins. The setup above (chunks, history) a resumed attempt does again,
    // and counts itself; the warm-up below only a run's first attempt does.
    let attempt = Attempt { progress: p.clone(), sent: coll.bytes().sent, barrier: 0 };
    if w.model.norm_sums_len() > 0 && p.global_iteration == 0 {
        // Not billed to the first epoch's time or bytes, as in the common loop.
        stage.warm_up(w, coll, &mut bufs, dropout_key(cfg.seed, 0, 0))?;
        mark = coll.bytes();
    }
    // A stop always leaves a resumable checkpoint; the final one holds the
    // history only when the run asked for checkpoints (it costs a row per
    // vertex and hidden layer at rank 0).
    let history = g.history;
    let periodic = cfg.checkpoint_every > 0;
    // Where every checkpoint goes (rank 0 writes it).
    let to = (cfg, inp.checkpoint_dir);

    while p.epoch < cfg.epochs {
        // A checkpoint taken after an epoch's step and before its evaluation
        // resumes at the evaluation.
        if p.iteration == 0 {
            let t0 = Instant::now();
            if !g.history {
                bufs.iter_mut().for_each(VertexRows::clear);
            }
            let mode = Mode::Train { key: dropout_key(cfg.seed, p.epoch, p.iteration) };
            let mut times = Times::default();
            let tapes = stage.forward(w, coll, &mut bufs, mode, &mut times)?;
            if smoothing > 0.0 {
                stage.smooth_history(smoothing, &mut bufs, &mut smoothed, p.global_iteration == 0);
            }
            pending.iter_mut().for_each(VertexRows::clear);
            let (loss, mut grad) = stage.backward(coll, tapes, &mut pending, &mut times)?;
            stage.refresh_groups(coll, &mut bufs, &mut times)?;
            // BatchNorm's sums of this epoch (non-zero for the stage's own layers
            // only) ride with the gradient over the groups, as they ride with the
            // all-reduce in the common loop; they set the next epoch's statistics.
            let own = grad.len();
            w.model.take_norm_sums(&mut grad);
            stage.sum_over_groups(coll, &mut grad)?;
            w.model.finish_iteration(&grad.split_off(own), false)?;

            // The loss (the last stage's), the stop vote, and whether anyone wants the whole gradient.
            let ts = Instant::now();
            let mut ctl =
                [loss as f32, f32::from(u8::from(obs.stop_requested())), f32::from(u8::from(obs.wants_gradient()))];
            sum_small(coll, &mut ctl)?;
            let (loss, stop_voted) = (ctl[0] as f64, ctl[1] > 0.0);
            if !loss.is_finite() {
                return Err(TrainError::NonFiniteLoss { epoch: p.epoch, iteration: p.iteration, value: loss });
            }
            if ctl[2] > 0.0
                && let Some(all) = whole_gradient(w, coll, stages, &grad)?
            {
                obs.gradient(p.global_iteration, &all);
            }
            let mut weights = stage.own.flat_values()?;
            opt.step(&mut weights, &grad);
            stage.own.set_flat(&weights)?;
            let sync = ts.elapsed().as_secs_f64();

            let moved = coll.bytes().since(&mark);
            mark = coll.bytes();
            let rec = StepRecord {
                epoch: p.epoch,
                iteration: p.iteration,
                worker: w.rank as u32,
                model: w.rank as u32,
                roots,
                edges,
                bytes_out: moved.sent,
                bytes_in: moved.received,
                gather_seconds: times.exchange + std::mem::take(&mut setup_seconds),
                compute_seconds: times.compute,
                sync_seconds: sync,
                loss: if last { loss } else { 0.0 },
                layer: Some(layers.start as u32),
                ..Default::default()
            };
            add_bytes(&mut p.bytes, &rec.bytes_out);
            obs.step(&rec)?;
            p.epoch_seconds = t0.elapsed().as_secs_f64();
            p.epoch_loss_sum = loss;
            p.epoch_iterations = 1;
            p.iteration += 1;
            p.global_iteration += 1;
            let stop = inp.stop_after == Some(p.global_iteration) || stop_voted;
            let due = periodic && p.global_iteration.is_multiple_of(cfg.checkpoint_every);
            if (stop || due) && all_may_checkpoint(coll, obs, p.global_iteration, stop)? {
                stage.save(w, coll, to, (&mut p, &attempt, false), opt.as_ref(), (&bufs, history))?;
                obs.event(&format!("{} {}", crate::train::checkpoint::WRITTEN, p.global_iteration));
                if inp.checkpoint_dir.is_some() {
                    // Tests: the driver is killed with the run held at this checkpoint.
                    crate::util::interrupt::test_pause("checkpoint-written");
                }
            }
            if stop || due {
                // The vote and the save, like the save alone, go to no step record.
                mark = coll.bytes();
            }
            if stop {
                return Ok(p);
            }
        }

        let te = Instant::now();
        let raised = inp.raises_stop_in_evaluation(p.epoch, coll);
        let asked = || raised || obs.stop_requested();
        let (val, test, stop) = stage.accuracies(w, coll, [inp.val, inp.test], &asked, &mut Times::default())?;
        let eval = coll.bytes().since(&mark);
        mark = coll.bytes();
        crate::train::trainer::counted_evaluation(&mut p, obs, &eval.sent);
        let e = EpochRecord {
            epoch: p.epoch,
            loss: p.epoch_loss_sum,
            val_accuracy: val,
            test_accuracy: test,
            seconds: p.epoch_seconds,
            eval_seconds: te.elapsed().as_secs_f64(),
            iterations: 1,
            layer: None,
        };
        obs.epoch(&e, cfg.epochs);
        p.history.push(e);
        p.epoch += 1;
        p.iteration = 0;
        (p.epoch_loss_sum, p.epoch_iterations, p.epoch_seconds) = (0.0, 0, 0.0);
        // Asked to stop while evaluating: the run stops at the epoch's end, as
        // after a step (a stop at the last epoch's end is its end).
        if stop && p.epoch < cfg.epochs {
            // Gathered (every worker voted alike): the driver may die before it
            // writes this stop's summary, and a resume then has only this count.
            all_may_checkpoint(coll, obs, p.global_iteration, true)?;
            stage.save(w, coll, to, (&mut p, &attempt, false), opt.as_ref(), (&bufs, history))?;
            obs.event(&format!("{} {}", crate::train::checkpoint::WRITTEN, p.global_iteration));
            if inp.checkpoint_dir.is_some() {
                // Tests: the driver is killed with the run held at this checkpoint.
                crate::util::interrupt::test_pause("checkpoint-written");
            }
            return Ok(p);
        }
    }
    // Rank 0 gathers every stage's layers: its checkpoint is the whole model
    // (`infer`). Every worker reaches here (a stop returned above on all alike).
    obs.before_checkpoint(p.global_iteration)?;
    let history = history && periodic;
    stage.save(w, coll, to, (&mut p, &attempt, true), opt.as_ref(), (&bufs, history))?;
    obs.event("final checkpoint written");
    if inp.checkpoint_dir.is_some() {
        // Tests: the driver is killed before it writes the run's summary.
        crate::util::interrupt::test_pause("final-checkpoint-written");
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_cover_every_layer_once_in_order() {
        for (layers, stages) in [(8, 4), (7, 4), (4, 4), (10, 3), (1, 1)] {
            let got: Vec<usize> = (0..stages).flat_map(|s| stage_layers(s, stages, layers)).collect();
            assert_eq!(got, (0..layers).collect::<Vec<_>>(), "{layers} layers on {stages} stages");
            assert!((0..stages).all(|s| !stage_layers(s, stages, layers).is_empty()));
        }
        assert_eq!(layer_of("layers.12.lin_l.weight"), Some(12));
        assert_eq!(layer_of("encoder.weight"), None);
    }

    #[test]
    fn bad_flags_are_named() {
        let err = |g: GnnPipeConfig, l, s| g.check(l, s).unwrap_err().0;
        assert!(err(GnnPipeConfig { chunks: 0, ..Default::default() }, 8, 4).starts_with("--chunks 0"));
        assert!(err(GnnPipeConfig::default(), 2, 4).starts_with("--layers 2"));
        let groups = |g| GnnPipeConfig { groups: g, ..Default::default() };
        assert!(err(groups(3), 8, 4).starts_with("--pipeline-groups 3 with --workers 4"));
        assert!(err(groups(0), 8, 4).starts_with("--pipeline-groups 0"));
        // 2 groups of 4 stages need 4 layers, not 8.
        assert!(groups(2).check(4, 8).is_ok());
        assert!(err(groups(2), 3, 8).starts_with("--layers 3"));
        assert!(GnnPipeConfig::default().check(8, 4).is_ok());
    }

    #[test]
    fn a_run_recorded_before_smoothing_existed_resumes_unsmoothed() {
        let old: GnnPipeConfig = serde_json::from_str(r#"{"chunks":4,"history":true,"groups":1}"#).unwrap();
        assert_eq!(old.history_smoothing, 0.0);
        assert_eq!(GnnPipeConfig::default().history_smoothing, SMOOTHING);
    }
}
