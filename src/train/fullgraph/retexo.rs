//! RETEXO (Kolluri et al.): lazy message passing. The model is trained one
//! layer (stage) at a time on the full graph. Before stage 0 every worker
//! fetches the feature rows of its owned + halo vertices from the feature
//! service, as the full-graph engine does (sparse rows cross the network as
//! CSR, billed as `features`); stage l is dropout, then
//! conv_l, then (l < L-1) a head LayerNorm -> ReLU -> Linear(hidden ->
//! classes), trained for `--rounds` full-batch rounds on the worker's own
//! training vertices (gradients summed over workers, then Adam). Each round
//! is validated; the best state of the stage is kept (rank 0's, broadcast).
//! The frozen stage's embeddings (conv -> LayerNorm -> ReLU) of the owned
//! vertices are exchanged once and are the next stage's constant input. So
//! rows cross the network once per layer for the whole run, not twice per
//! layer per step as in the full-graph engine.
//!
//! A stage's input is fixed, so its neighbour aggregation is computed once:
//! GCN (symmetric normalisation, no self term) and GraphSAGE become a linear
//! map of the cached aggregate (dropout then applies to the aggregate rather
//! than to the rows before aggregation); GAT (heads averaged) keeps its
//! attention graph and recomputes attention each round.
//!
//! The summed gradient of a stage crosses as its factors where that is fewer
//! bytes (`factored`): every worker's input rows once per stage (GAT: with
//! the edges of its training vertices), and every round the gradient of its
//! training vertices' logits (or conv outputs, where those are narrower);
//! every worker then recomputes the stage for all training vertices. At the
//! end of a stage the workers compare a hash of the best state they kept
//! (they are replicas and chose by the same all-reduced counts) instead of
//! broadcasting it.
//!
//! One round is one epoch (and one iteration) of the run; checkpoints are
//! written at the start of every stage, at the end, and where a stop comes
//! inside a stage: that one also holds the stage's optimizer state (in the
//! whole model's optimizer file, zero elsewhere) and its best state so far
//! (`BEST`), so a resumed run goes on with the stage's next round. A stage
//! can be longer than a Slurm job's warning before its time limit: had a
//! stop gone back to the stage's start, every job would train it again and
//! none would get past it.

use super::chunks::flat;
use super::factored::{Cost, FactoredLinear, stacked_grads};
use super::factored_gat::{FactoredGat, GatPart, Holders};
use super::{HaloPlan, forward_rows, worker_plan};
use crate::gather::CsrRows;
use crate::metrics::{EpochRecord, StepRecord, add_bytes};
use crate::model::csr_op::{self, Reduce, select_rows};
use crate::model::dropout::{dropout_rows, dropout_sparse, vertex_row_key};
use crate::model::{
    AggGraph, GatLayer, Kernel, LayerInput, LayerNorm, Linear, ModelKind, ModelSpec, Params, cross_entropy_sum,
    gcn_graph,
};
use crate::optim::Optimizer;
use crate::sample::Fanout;
use crate::train::evaluate::StopVote;
use crate::train::{Collective, LoopInput, Observer, Progress, TrainError, Worker, checkpoint};
use crate::train::{read_u64_slots, u64_slots};
use crate::tui::fmt::bytes;
use crate::util::rng::hash_of;
use candle_core::{Device, Tensor, Var};
use std::sync::Arc;
use std::time::Instant;

/// The authors' settings, for every flag not given (they also used random
/// partitions: `TrainConfig::partition_method`).
pub const AUTHORS: crate::train::flags::AuthorDefaults = crate::train::flags::AuthorDefaults {
    layers: Some(2),
    hidden: Some(256),
    heads: Some(8),
    lr: Some(0.003),
    weight_decay: Some(5e-4),
    dropout: Some(0.3),
    epochs: None,
};

/// Training rounds per stage (layer), the authors' setting.
pub const ROUNDS: u64 = 200;

const DROPOUT_TAG: u64 = 0x5245_5458;
/// Cached rows with fewer non-zeros than this fraction are kept as CSR (bag-of-words features and their
/// aggregates): a product then costs the non-zeros times the output width.
const SPARSE_BELOW: f64 = 0.1;

/// A stage's conv: GCN and GraphSAGE reduce to a linear map of the cached
/// aggregate (`[agg | self]` for SAGE, with `[W_l | W_r]`); GAT attends.
enum Conv {
    Linear(Linear),
    Gat(GatLayer),
}

struct Stage {
    conv: Conv,
    /// LayerNorm and the classifier head; None for the last stage, whose conv outputs the classes.
    head: Option<(LayerNorm, Linear)>,
}

/// Every stage's parameters, named `stages.<l>.*` (one `Params`, so one
/// checkpoint holds the whole model).
pub struct RetexoModel {
    kind: ModelKind,
    /// GCN: whether the aggregation has a self term (`--self-loops`; off by default, as the authors').
    self_loops: bool,
    stages: Vec<Stage>,
    dropout: f32,
    kernel: Kernel,
}

impl RetexoModel {
    /// Registers every stage's parameters in `p` (seeded by its seed and their names).
    pub fn new(spec: &ModelSpec, p: &mut Params, dev: &Device) -> candle_core::Result<Self> {
        let n = spec.layers;
        let mut stages = Vec::with_capacity(n);
        for l in 0..n {
            let last = l + 1 == n;
            let d_in = if l == 0 { spec.in_dim } else { spec.hidden };
            let d_out = if last { spec.classes } else { spec.hidden };
            let prefix = format!("stages.{l}");
            let lin = |p: &mut Params, name: &str, cols: usize| -> candle_core::Result<Linear> {
                let w = p.glorot(&format!("{prefix}.{name}.weight"), (d_out, cols), d_in, d_out, dev)?;
                let b = p.zeros(&format!("{prefix}.{name}.bias"), d_out, dev)?;
                Ok(Linear::new(w, Some(b)))
            };
            let conv = match spec.kind {
                ModelKind::Gcn => Conv::Linear(lin(p, "conv", d_in)?),
                ModelKind::SageMean | ModelKind::SageMax => Conv::Linear(lin(p, "conv", 2 * d_in)?),
                ModelKind::Gat => {
                    Conv::Gat(GatLayer::new(p, &format!("{prefix}.conv"), d_in, spec.heads, d_out, false, dev)?)
                }
                ModelKind::DeepGcn | ModelKind::Film => {
                    candle_core::bail!("--strategy retexo does not train --model {}", spec.kind)
                }
            };
            let head = if last {
                None
            } else {
                let norm = LayerNorm::new(p, &format!("{prefix}.norm"), spec.hidden, dev)?;
                let w = p.glorot(
                    &format!("{prefix}.head.weight"),
                    (spec.classes, spec.hidden),
                    spec.hidden,
                    spec.classes,
                    dev,
                )?;
                let b = p.zeros(&format!("{prefix}.head.bias"), spec.classes, dev)?;
                Some((norm, Linear::new(w, Some(b))))
            };
            stages.push(Stage { conv, head });
        }
        let kernel = Kernel::for_device(dev);
        Ok(RetexoModel { kind: spec.kind, self_loops: spec.self_loops, stages, dropout: spec.dropout, kernel })
    }
}

/// Constant rows: CSR when mostly zeros, else a dense tensor.
enum Rows {
    Dense(Tensor),
    Sparse(Arc<CsrRows>),
}

impl Rows {
    fn new(vals: Vec<f32>, cols: usize, dev: &Device) -> Result<Rows, TrainError> {
        let nnz = vals.iter().filter(|v| **v != 0.0).count();
        if dev.is_cpu() && (nnz as f64) < SPARSE_BELOW * vals.len() as f64 {
            return Ok(Rows::Sparse(Arc::new(CsrRows::from_dense(&vals, cols))));
        }
        let n = vals.len() / cols.max(1);
        Ok(Rows::Dense(Tensor::from_vec(vals, (n, cols), &Device::Cpu)?.to_device(dev)?))
    }

    /// The rows at positions `pos`, in that order.
    fn select(&self, pos: &[u32]) -> Result<Rows, TrainError> {
        Ok(match self {
            Rows::Dense(t) => Rows::Dense(select_rows(t, pos)?),
            Rows::Sparse(c) => {
                let mut out = CsrRows { dim: c.dim, indptr: Vec::with_capacity(pos.len() + 1), ..Default::default() };
                out.indptr.push(0);
                for &r in pos {
                    let (idx, vals) = c.row(r as usize);
                    out.indices.extend_from_slice(idx);
                    out.values.extend_from_slice(vals);
                    out.indptr.push(out.values.len());
                }
                Rows::Sparse(Arc::new(out))
            }
        })
    }

    /// A copy with dropout at `rate`, row r's mask keyed by `key(r)`.
    fn dropped(&self, rate: f32, key: impl Fn(usize) -> u64 + Sync) -> Result<Rows, TrainError> {
        Ok(match self {
            Rows::Dense(t) => Rows::Dense(dropout_rows(t, rate, key)?),
            Rows::Sparse(c) => {
                let mut c = (**c).clone();
                dropout_sparse(&mut c, rate, key);
                Rows::Sparse(Arc::new(c))
            }
        })
    }

    /// The same rows as CSR (`cols` wide).
    fn to_csr(&self, cols: usize) -> Result<CsrRows, TrainError> {
        Ok(match self {
            Rows::Sparse(c) => (**c).clone(),
            Rows::Dense(t) => CsrRows::from_dense(&t.flatten_all()?.to_vec1::<f32>()?, cols),
        })
    }

    /// `x W^T + b`, differentiable in the weights.
    fn linear(&self, lin: &Linear) -> Result<Tensor, TrainError> {
        Ok(match self {
            Rows::Dense(t) => lin.forward(t, None)?,
            Rows::Sparse(c) => lin.forward_sparse(c)?,
        })
    }
}

/// A stage's factored gradient (`factored`).
struct Factored {
    exchange: Exchange,
    /// The factored parameters' place in the stage's flat gradient: the
    /// conv's, or the whole stage's when the cut is at the logits.
    range: std::ops::Range<usize>,
    /// Whether the output gradients cross at the logits (else at the conv output).
    at_logits: bool,
    /// Where this worker's training vertices start among every worker's.
    offset: usize,
}

enum Exchange {
    /// GCN and SAGE: the training vertices' cached aggregates.
    Linear(FactoredLinear),
    /// GAT: the rows the training vertices attend over, and their edges.
    Gat(FactoredGat),
}

impl Exchange {
    fn counts(&self) -> &[usize] {
        match self {
            Exchange::Linear(x) => x.counts(),
            Exchange::Gat(x) => x.counts(),
        }
    }
}

/// The gradient of the leaf `leaf` (this worker's rows of the stacked output), flat.
fn leaf_grad(grads: &candle_core::backprop::GradStore, leaf: &Var) -> Result<Vec<f32>, TrainError> {
    let g = match grads.get(leaf.as_tensor()) {
        Some(g) => g.clone(),
        None => leaf.zeros_like()?,
    };
    Ok(g.flatten_all()?.to_vec1::<f32>()?)
}

/// What a stage reads, fixed for the stage.
struct StageInput {
    /// GCN and SAGE: the aggregate of every owned vertex (owned order); GAT:
    /// the owned + halo rows (`plan.block.src` order).
    rows: Rows,
    /// GCN and SAGE: `rows` of the training vertices (`Split::train` order).
    train: Option<Rows>,
    /// GAT: the attention graph over `plan.block` (self loops added, as the
    /// model-centric GAT has them).
    graph: Option<Arc<AggGraph>>,
}

/// Who holds which vertex, for the factored GAT exchange: the whole graph,
/// each vertex's worker, and what the first stage learnt of it.
struct Who<'a> {
    graph: crate::graph::CsrView<'a>,
    owners: Option<&'a [u16]>,
    holders: Holders,
}

/// The worker's labelled vertices, as positions among its owned rows.
struct Split {
    /// Training vertices with at least one in-edge (the loss's destinations).
    train: Vec<u32>,
    train_labels: Vec<u32>,
    /// Over all workers: what each worker's loss sum is divided by.
    global_train: usize,
    val: Vec<(u32, u32)>,
    test: Vec<(u32, u32)>,
}

impl Split {
    fn new(w: &Worker<'_>, plan: &HaloPlan, inp: &LoopInput<'_>) -> Split {
        let g = w.graph;
        let label = |v: u32| w.labels[v as usize] as u32;
        let own = |ids: &[u32]| -> Vec<(u32, u32)> {
            ids.iter().filter_map(|&v| plan.owned_position(v).map(|p| (p as u32, label(v)))).collect()
        };
        let with_edges: Vec<u32> = inp.train.iter().copied().filter(|&v| g.in_degree(v) > 0).collect();
        let (train, train_labels) = own(&with_edges).into_iter().unzip();
        Split { train, train_labels, global_train: with_edges.len(), val: own(inp.val), test: own(inp.test) }
    }
}

/// Dropout site of stage `l` in round `epoch`.
fn site(seed: u64, epoch: u64, l: usize, what: u64) -> u64 {
    hash_of(seed, &[DROPOUT_TAG, epoch, l as u64, what])
}

/// GAT's attention dropout in stage `l`, round `epoch`: (rate, site), or None
/// at rate 0 (the local forward pass and the factored recomputation agree).
fn attention_dropout(rate: f32, seed: u64, epoch: u64, l: usize) -> Option<(f32, u64)> {
    (rate > 0.0).then(|| (rate, site(seed, epoch, l, 1)))
}

impl RetexoModel {
    /// Caches stage `l`'s input from the `[owned + halo, d]` rows `h`.
    fn stage_input(
        &self,
        l: usize,
        plan: &HaloPlan,
        graph: crate::graph::CsrView<'_>,
        h: Vec<f32>,
        split: &Split,
        dev: &Device,
    ) -> Result<StageInput, TrainError> {
        let b = &plan.block;
        let d = h.len() / b.src.len().max(1);
        let x = Tensor::from_vec(h, (b.src.len(), d), &Device::Cpu)?.to_device(dev)?;
        let agg = match (&self.stages[l].conv, self.kind) {
            (Conv::Gat(_), _) => {
                let graph = Arc::new(AggGraph::from_block(b, true));
                let rows = Rows::new(x.flatten_all()?.to_vec1::<f32>()?, d, dev)?;
                return Ok(StageInput { rows, train: None, graph: Some(graph) });
            }
            (_, ModelKind::Gcn) => {
                // The authors' GCN has no self term (`--self-loops on` adds it).
                let g = Arc::new(gcn_graph(b, graph, Fanout::All, self.self_loops));
                csr_op::weighted_sum(&x, &g, self.kernel)?
            }
            (_, kind) => {
                let g = AggGraph::from_block(b, false);
                let (g, reduce) = match kind {
                    ModelKind::SageMax => (g, Reduce::Max),
                    _ => (g.with_mean_weights(), Reduce::Sum),
                };
                csr_op::aggregate_with_self(&x, &Arc::new(g), reduce, self.kernel)?
            }
        };
        let cols = agg.dim(1)?;
        let rows = Rows::new(agg.flatten_all()?.to_vec1::<f32>()?, cols, dev)?;
        let train = Some(rows.select(&split.train)?);
        Ok(StageInput { rows, train, graph: None })
    }

    /// Stage `l`'s conv output: of the training vertices (`train`, with
    /// dropout under `key`) or of every owned vertex (evaluation).
    fn conv(
        &self,
        l: usize,
        inp: &StageInput,
        ids: (&[u32], &[u32]),
        split: &Split,
        train: Option<(u64, u64)>,
    ) -> Result<Tensor, TrainError> {
        let (src, owned) = ids;
        let rate = if train.is_some() { self.dropout } else { 0.0 };
        match &self.stages[l].conv {
            Conv::Linear(lin) => match train {
                Some((seed, epoch)) => {
                    let rows = inp.train.as_ref().expect("GCN and SAGE cache their training rows");
                    let s = site(seed, epoch, l, 0);
                    rows.dropped(rate, |r| vertex_row_key(s, owned[split.train[r] as usize]))?.linear(lin)
                }
                None => inp.rows.linear(lin),
            },
            Conv::Gat(gat) => {
                let graph = inp.graph.as_ref().expect("GAT keeps its graph");
                let dropped;
                let (x, attention) = match train {
                    Some((seed, epoch)) => {
                        let s = site(seed, epoch, l, 0);
                        dropped = inp.rows.dropped(rate, |r| vertex_row_key(s, src[r]))?;
                        (&dropped, attention_dropout(rate, seed, epoch, l))
                    }
                    None => (&inp.rows, None),
                };
                let wh = x.linear(&Linear::new(gat.weight().clone(), None))?;
                let li = LayerInput {
                    x: &wh,
                    graph,
                    ids: src,
                    kernel: self.kernel,
                    attention_dropout: attention,
                    activation: None,
                };
                let y = gat.attend(&li, wh.clone())?;
                Ok(match train {
                    Some(_) => select_rows(&y, &split.train)?,
                    None => y,
                })
            }
        }
    }

    /// The factored exchange of stage `l`'s gradient, where it moves fewer
    /// bytes over `rounds` rounds (every worker decides the same), and the
    /// choice in words for the run's log. Every worker recomputes the stage
    /// with the CPU kernels.
    #[allow(clippy::too_many_arguments)]
    fn factored(
        &self,
        l: usize,
        inp: &StageInput,
        plan: &HaloPlan,
        split: &Split,
        stage: &Params,
        coll: &mut dyn Collective,
        rounds: u64,
        who: &Who<'_>,
    ) -> Result<(Option<Factored>, Option<String>), TrainError> {
        if self.kernel != Kernel::Fast {
            return Ok((None, None));
        }
        let (src, owned) = (&plan.block.src, plan.owned());
        let at = |name: &str| stage.flat_range(&format!("stages.{l}.conv.{name}")).expect("a stage registers its conv");
        // A conv registers its parameters one after another, its bias last
        // (`Params::flat_range`), and the head's follow.
        let first = match &self.stages[l].conv {
            Conv::Linear(_) => "weight",
            Conv::Gat(_) => "lin.weight",
        };
        let conv = at(first).start..at("bias").end;
        let conv_width = at("bias").len();
        // The output gradients cross at the logits where they are narrower.
        let classes = self.stages[l].head.as_ref().map(|(_, head)| head.weight().dims2()).transpose()?.map(|d| d.0);
        let (at_logits, width, range) = match classes {
            Some(c) if c < conv_width => (true, c, 0..stage.numel()),
            _ => (false, conv_width, conv),
        };
        let said = |c: Cost| {
            let cut = format!("{} ({width} wide)", if at_logits { "its logits" } else { "its conv output" });
            let (f, a) = (bytes(c.factors), bytes(c.all_reduce));
            (c.all_reduce > 0.0).then(|| {
                if c.pays() {
                    format!("stage {}: the gradient crosses as factors at {cut}: {f} over the stage, against {a} all-reduced", l + 1)
                } else {
                    format!("stage {}: the gradient is all-reduced: {a} over the stage, against {f} as factors at {cut}", l + 1)
                }
            })
        };
        let (exchange, cost) = match &self.stages[l].conv {
            Conv::Linear(lin) => {
                let rows = inp.train.as_ref().expect("GCN and SAGE cache their training rows");
                let ids: Vec<u32> = split.train.iter().map(|&p| owned[p as usize]).collect();
                let rows = rows.to_csr(lin.weight().dim(1)?)?;
                let cost = FactoredLinear::cost(coll, &rows, width, range.len(), rounds)?;
                if !cost.pays() {
                    return Ok((None, said(cost)));
                }
                (Exchange::Linear(FactoredLinear::share(coll, &ids, &rows)?), cost)
            }
            // The rows the training vertices attend over (themselves and their
            // in-neighbours) and the edges between them.
            Conv::Gat(gat) => {
                let graph = inp.graph.as_ref().expect("GAT keeps its graph");
                let d_in = gat.weight().dim(1)?;
                let rows = |pos: &[u32]| inp.rows.select(pos)?.to_csr(d_in);
                let part = GatPart::new(graph, src, &split.train, rows)?;
                let owner = |v: u32| who.owners.map_or(0, |o| o[v as usize] as usize);
                let held = who.holders.of(&part, who.graph, owner, coll.world());
                let cost = FactoredGat::cost(coll, &part, &held, width, range.len(), rounds)?;
                if !cost.pays() {
                    return Ok((None, said(cost)));
                }
                (Exchange::Gat(FactoredGat::share(coll, part, &held, |v| plan.row_of(v), rows)?), cost)
            }
        };
        let offset = exchange.counts()[..coll.rank()].iter().sum();
        Ok((Some(Factored { exchange, range, at_logits, offset }), said(cost)))
    }

    /// Stage `l`'s output over every worker's training vertices (rank order)
    /// in round `epoch`, differentiable in the stage's parameters: the
    /// logits, or the conv's output where the exchange cuts there.
    fn stacked_output(&self, l: usize, f: &Factored, seed: u64, epoch: u64) -> Result<Tensor, TrainError> {
        let (s, rate) = (site(seed, epoch, l, 0), self.dropout);
        let key = |v| vertex_row_key(s, v);
        let y = match (&f.exchange, &self.stages[l].conv) {
            (Exchange::Linear(x), Conv::Linear(lin)) => x.output(lin, rate, key)?,
            (Exchange::Gat(x), Conv::Gat(gat)) => x.output(gat, rate, key, attention_dropout(rate, seed, epoch, l))?,
            _ => unreachable!("a stage's exchange is built for its conv"),
        };
        Ok(if f.at_logits { self.head(l, y)?.0 } else { y })
    }

    /// The logits of stage `l` from its conv output `y`, and (for l < L-1) the
    /// embedding the next stage reads: relu(LayerNorm(y)).
    fn head(&self, l: usize, y: Tensor) -> Result<(Tensor, Option<Tensor>), TrainError> {
        match &self.stages[l].head {
            None => Ok((y, None)),
            Some((norm, lin)) => {
                let e = norm.forward(&y, crate::model::Kernel::for_device(y.device()))?.relu()?;
                Ok((lin.forward(&e, None)?, Some(e)))
            }
        }
    }
}

/// The worker's RETEXO model over a copy of its parameters (`w.params`:
/// broadcast, restored or loaded), kept apart so a stage can train its subset.
fn replica(w: &Worker<'_>) -> Result<(RetexoModel, Params), TrainError> {
    let mut params = Params::new(0);
    let model = RetexoModel::new(w.model.spec(), &mut params, &w.device)?;
    params.set_flat(&w.params.flat_values()?)?;
    Ok((model, params))
}

/// The checkpoint block of a stop inside a stage: the stage's best state so far.
const BEST: &str = "retexo.best";

/// Where stage `stage`'s parameters lie in the whole model's flat layout.
fn stage_ranges(params: &Params, stage: &Params) -> Vec<std::ops::Range<usize>> {
    stage.iter().filter_map(|q| params.flat_range(&q.name)).collect()
}

/// A stage's best (validation accuracy, weights) so far.
type Best = Option<(f64, Vec<f32>)>;

/// A stage stopped inside, as its checkpoint (`save_mid_stage`) left it:
/// its optimizer and its best (validation accuracy, weights) so far.
fn resume_mid_stage(
    inp: &LoopInput<'_>,
    (params, stage, l): (&Params, &Params, usize),
    whole: &dyn Optimizer,
    history: &[EpochRecord],
) -> Result<(Box<dyn Optimizer>, Best), TrainError> {
    let cfg = inp.cfg;
    let missing = || {
        crate::BadInput::new(format!(
            "the checkpoint is inside stage {} but holds no RETEXO stage state (`{BEST}`); train the run again",
            l + 1
        ))
    };
    let dir = inp.resumed_from.ok_or_else(missing)?;
    let saved = checkpoint::read_history(dir)?.ok_or_else(missing)?;
    let weights = saved.rows(BEST, 1, stage.numel())?;
    let mut opt = cfg.optimizer.build(stage.numel(), cfg.lr, cfg.weight_decay);
    opt.load_state(whole.state().slice(&stage_ranges(params, stage)))
        .map_err(|e| crate::BadInput::new(format!("stage {} optimizer state in {}: {e}", l + 1, dir.display())))?;
    // The best round so far as the rounds chose it: the first of the highest.
    let mut best: Option<f64> = None;
    for e in history.iter().filter(|e| e.layer == Some(l as u32)) {
        if best.is_none_or(|b| e.val_accuracy > b) {
            best = Some(e.val_accuracy);
        }
    }
    Ok((opt, best.map(|b| (b, weights))))
}

/// Writes the checkpoint of a stop inside a stage (rank 0; see `resume_mid_stage`).
fn save_mid_stage(
    (dir, cfg, p): (&std::path::Path, &crate::train::TrainConfig, &Progress),
    (params, stage): (&Params, &Params),
    opt: &dyn Optimizer,
    best: &[f32],
) -> Result<(), TrainError> {
    let mut whole = cfg.optimizer.build(params.numel(), cfg.lr, cfg.weight_decay);
    whole
        .load_state(opt.state().placed(&stage_ranges(params, stage), params.numel()))
        .map_err(|e| TrainError::Comm(format!("checkpoint optimizer state: {e}").into()))?;
    let blocks = [(BEST.to_string(), stage.numel(), best)];
    checkpoint::save_with_history(dir, cfg, p, params, whole.as_ref(), Some(&blocks))
}

/// Runs a RETEXO job from `p` to the end (or `stop_after`); the common loop's
/// inputs, its own optimizer per stage (`opt`: the whole model's, restored
/// from a checkpoint inside a stage).
pub fn run(
    inp: &LoopInput<'_>,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    opt: &dyn Optimizer,
    mut p: Progress,
    obs: &mut dyn Observer,
) -> Result<Progress, TrainError> {
    let cfg = inp.cfg;
    let rounds = cfg.rounds.unwrap_or(1).max(1);
    let layers = w.model.spec().layers;
    let dev = w.device.clone();
    let counted_from = coll.bytes().sent;
    // Bytes not yet billed to a record (the exchanges before a stage, the
    // broadcast after one), from before the barrier that starts the run.
    let mut mark = crate::train::trainer::fenced_start(coll)?;
    // What this attempt's checkpoints count from: the sockets as it began.
    // Its setup (the feature fetch, the frozen stages' embeddings) is
    // counted: a resumed attempt does it again, and reports it again.
    let attempt = crate::train::trainer::Attempt::fenced(&p, counted_from, coll, &mark);
    let (model, params) = replica(w)?;
    let first = (p.epoch / rounds) as usize;
    // Rounds of stage `first` trained before the checkpoint (a stop inside it).
    let mut done = p.epoch % rounds;
    let whole = opt;

    let plan = worker_plan(w)?;
    let split = Split::new(w, &plan, inp);
    let (src, owned) = (plan.block.src.clone(), plan.owned().to_vec());
    let who = Who { graph: w.graph, owners: w.owners.as_ref().map(|o| o.as_slice()), holders: Holders::default() };
    let edges = plan.block.num_edges() as u64;

    let t = Instant::now();
    // Stage 0's input: the owned + halo feature rows, fetched from the feature
    // service as the full-graph engine fetches them (sparse rows stay sparse
    // on the wire, billed as `features`).
    let mut h = w.gather_rows(&src)?.0.into_dense();
    // A resumed run recomputes the frozen stages' embeddings.
    for l in 0..first {
        let si = model.stage_input(l, &plan, w.graph, h, &split, &dev)?;
        h = embed(&model, l, &si, coll, &plan, (&src, &owned), &split)?;
    }
    let mut exchange_seconds = t.elapsed().as_secs_f64();
    // A stop at a stage's last round: the stage is finished and the run stops
    // at the next stage's checkpoint, instead of training the stage again.
    let mut stop_at_next_stage = false;

    for l in first..layers {
        let stage = params.subset(&format!("stages.{l}."));
        let si = model.stage_input(l, &plan, w.graph, h, &split, &dev)?;
        let inside = std::mem::take(&mut done);
        // A resume at a stage's start writes its checkpoint again: the count
        // it restored stands (gathered again, the gather would count twice).
        if inside == 0 && (l > first || attempt.progress.global_iteration == 0) {
            p.run_counts = crate::train::trainer::gather_counts(coll, &p, &attempt)?;
        }
        // Only rank 0 writes a stage's checkpoint, and the count above is
        // gathered either way: one the driver did not confirm in time (Ctrl-Z)
        // rank 0 skips alone, and the next stage's tries again; a stop's is
        // not skipped (nothing comes after it).
        let write = match (inside, stop_at_next_stage) {
            (1.., _) => false,
            (0, true) => obs.before_checkpoint(p.global_iteration).map(|()| true)?,
            (0, false) => obs.may_checkpoint(p.global_iteration)?,
        };
        if let Some(dir) = inp.checkpoint_dir.filter(|_| write) {
            let fresh = cfg.optimizer.build(params.numel(), cfg.lr, cfg.weight_decay);
            checkpoint::save(dir, cfg, &p, &params, fresh.as_ref())?;
            // Read as every periodic checkpoint's event: without shared files
            // the driver copies the checkpoint back when it sees this.
            obs.event(&format!("{} {} (the start of stage {})", checkpoint::WRITTEN, p.global_iteration, l + 1));
            if l > 0 {
                // Tests: the driver is killed with the run held at this checkpoint (stage 1's is the run's start).
                crate::util::interrupt::test_pause("checkpoint-written");
            }
        }
        if stop_at_next_stage {
            obs.event(&format!("stopped at the end of stage {l}: a resumed run goes on with stage {}", l + 1));
            let sent = coll.bytes().since(&mark).sent;
            add_bytes(&mut p.bytes, &sent);
            return Ok(p);
        }
        // A new optimizer per stage, over this stage's parameters only.
        let (mut opt, mut best) = if inside > 0 {
            resume_mid_stage(inp, (&params, &stage, l), whole, &p.history)?
        } else {
            (cfg.optimizer.build(stage.numel(), cfg.lr, cfg.weight_decay), None)
        };
        let factored = match cfg.factored_grads {
            Some(false) => None,
            _ => {
                let (f, said) = model.factored(l, &si, &plan, &split, &stage, coll, rounds, &who)?;
                if let Some(line) = said {
                    obs.event(&line);
                }
                f
            }
        };
        for _ in inside..rounds {
            let t0 = Instant::now();
            let (seed, epoch) = (cfg.seed, p.epoch);
            // Factored: the stage's output over every worker's training
            // vertices, and this worker's rows of it held as a leaf whose
            // gradient crosses.
            let stacked = match &factored {
                Some(f) => {
                    let out = model.stacked_output(l, f, seed, epoch)?;
                    let v = Var::from_tensor(&out.narrow(0, f.offset, split.train.len())?.detach())?;
                    Some((f, out, v))
                }
                None => None,
            };
            let (y, at_logits) = match &stacked {
                Some((f, _, v)) => (v.as_tensor().clone(), f.at_logits),
                None => (model.conv(l, &si, (&src, &owned), &split, Some((seed, epoch)))?, false),
            };
            let logits = if at_logits { y } else { model.head(l, y)?.0 };
            let loss = if split.train.is_empty() {
                (logits.sum_all()? * 0.0)?
            } else {
                (cross_entropy_sum(&logits, &split.train_labels)? / split.global_train.max(1) as f64)?
            };
            let local_loss = loss.to_scalar::<f32>()? as f64;
            let grads = loss.backward()?;
            let mut buf = stage.flat_grads(&grads)?;
            // The factored parameters' (zero) slots stay out of the all-reduce.
            let mine = match &stacked {
                Some((f, _, v)) => {
                    buf.drain(f.range.clone());
                    leaf_grad(&grads, v)?
                }
                None => Vec::new(),
            };
            let n = buf.len();
            buf.push(local_loss as f32);
            buf.push(if obs.stop_requested() { 1.0 } else { 0.0 });
            let compute = t0.elapsed().as_secs_f64();
            let ts = Instant::now();
            coll.all_reduce_sum(&mut buf).map_err(TrainError::Comm)?;
            let (loss_sum, stop_voted) = (buf[n] as f64, buf[n + 1] > 0.0);
            buf.truncate(n);
            if let Some((f, out, _)) = &stacked {
                let all = stacked_grads(coll, out, &mine, f.exchange.counts(), &stage)?;
                buf.splice(f.range.start..f.range.start, all[f.range.clone()].iter().copied());
            }
            if !loss_sum.is_finite() {
                return Err(TrainError::NonFiniteLoss { epoch: p.epoch, iteration: 0, value: loss_sum });
            }
            obs.gradient(p.global_iteration, &buf);
            let mut weights = stage.flat_values()?;
            opt.step(&mut weights, &buf);
            stage.set_flat(&weights)?;
            let sync = ts.elapsed().as_secs_f64();

            let moved = coll.bytes().since(&mark);
            mark = coll.bytes();
            let te = Instant::now();
            let raised = inp.raises_stop_in_evaluation(p.epoch, coll);
            let asked = || raised || obs.stop_requested();
            let (val, test, stop_in_eval) =
                accuracies(&model, l, &si, coll, (&src, &owned), &split, (inp.val.len(), &asked))?;
            if best.as_ref().is_none_or(|(b, _)| val > *b) {
                best = Some((val, weights));
            }
            let eval_seconds = te.elapsed().as_secs_f64();
            // The round's evaluation (its counts' all-reduce) is not training:
            // counted and reported apart, as the other loops count theirs.
            let eval = coll.bytes().since(&mark);
            mark = coll.bytes();
            crate::train::trainer::counted_evaluation(&mut p, obs, &eval.sent);
            let rec = StepRecord {
                epoch: p.epoch,
                worker: w.rank as u32,
                model: w.rank as u32,
                roots: split.train.len() as u64,
                edges,
                bytes_out: moved.sent,
                bytes_in: moved.received,
                gather_seconds: std::mem::take(&mut exchange_seconds),
                compute_seconds: compute,
                sync_seconds: sync,
                loss: local_loss,
                layer: Some(l as u32),
                ..Default::default()
            };
            add_bytes(&mut p.bytes, &rec.bytes_out);
            obs.step(&rec)?;
            let seconds = t0.elapsed().as_secs_f64() - eval_seconds;
            let e = EpochRecord {
                epoch: p.epoch,
                loss: loss_sum,
                val_accuracy: val,
                test_accuracy: test,
                seconds,
                eval_seconds,
                iterations: 1,
                layer: Some(l as u32),
            };
            obs.epoch(&e, cfg.epochs);
            p.history.push(e);
            p.epoch += 1;
            p.global_iteration += 1;
            // A stop asked for while the round evaluated ends the run at this round too.
            if inp.stop_after == Some(p.global_iteration) || stop_voted || stop_in_eval {
                if p.epoch == (l as u64 + 1) * rounds {
                    // Every worker voted alike: all finish the stage together.
                    stop_at_next_stage = true;
                    break;
                }
                let sent = coll.bytes().since(&mark).sent;
                add_bytes(&mut p.bytes, &sent);
                // Gathered as at a stage's start: the driver may die before it
                // writes this stop's summary, and a resume then has only this count.
                p.run_counts = crate::train::trainer::gather_counts(coll, &p, &attempt)?;
                obs.before_checkpoint(p.global_iteration)?;
                if let Some(dir) = inp.checkpoint_dir {
                    let (_, kept) = best.as_ref().expect("a round was trained");
                    save_mid_stage((dir, cfg, &p), (&params, &stage), opt.as_ref(), kept)?;
                    obs.event(&format!(
                        "{} {} (round {} of stage {}: a resumed run goes on with round {})",
                        checkpoint::WRITTEN,
                        p.global_iteration,
                        p.epoch - l as u64 * rounds,
                        l + 1,
                        p.epoch - l as u64 * rounds + 1
                    ));
                    // Tests: the driver is killed with the run held at this checkpoint.
                    crate::util::interrupt::test_pause("checkpoint-written");
                }
                return Ok(p);
            }
        }
        // Every worker kept the same best state (identical replicas, and the
        // validation counts they chose by were all-reduced): a hash of it is
        // compared, and only if one differs does rank 0's cross the network.
        let (_, mut weights) = best.expect("a stage trains at least one round");
        let digest = xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&weights));
        let mut all = u64_slots(digest, coll.rank(), coll.world());
        coll.all_reduce_sum(&mut all).map_err(TrainError::Comm)?;
        if read_u64_slots(&all).windows(2).any(|p| p[0] != p[1]) {
            let mut bytes: Vec<u8> = bytemuck::cast_slice(&weights).to_vec();
            coll.broadcast(&mut bytes, 0).map_err(TrainError::Comm)?;
            weights = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        }
        stage.set_flat(&weights)?;
        if l + 1 < layers {
            let t = Instant::now();
            h = embed(&model, l, &si, coll, &plan, (&src, &owned), &split)?;
            exchange_seconds = t.elapsed().as_secs_f64();
        } else {
            h = Vec::new();
        }
    }
    drop(h);
    let tail = coll.bytes().since(&mark);
    add_bytes(&mut p.bytes, &tail.sent);
    w.params.set_flat(&params.flat_values()?)?;
    // Every worker reaches here (a stop returned above on all of them alike).
    crate::train::trainer::gather_final_counts(coll, &mut p, &attempt, &Default::default(), w)?;
    obs.before_checkpoint(p.global_iteration)?;
    if let Some(dir) = inp.checkpoint_dir {
        let fresh = cfg.optimizer.build(params.numel(), cfg.lr, cfg.weight_decay);
        checkpoint::save(dir, cfg, &p, &params, fresh.as_ref())?;
        obs.event("final checkpoint written");
        // Tests: the driver is killed before it writes the run's summary.
        crate::util::interrupt::test_pause("final-checkpoint-written");
    }
    Ok(p)
}

/// `infer` of a RETEXO run (the worker's parameters are its stages, loaded
/// from the checkpoint): the stages' forward over every vertex without
/// dropout, as training evaluated them, one halo exchange per hidden stage.
/// Returns the owned vertices' logits of the last stage and, with
/// `embeddings = Some(l)`, stage l's embedding (relu(LayerNorm(conv)), what
/// stage l + 1 reads).
pub fn score(
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    embeddings: Option<usize>,
) -> Result<super::inference::Scored, TrainError> {
    let (layers, dev) = (w.model.spec().layers, w.device.clone());
    let (model, _) = replica(w)?;
    let plan = worker_plan(w)?;
    // No training vertices: the stage inputs are only evaluated.
    let split =
        Split { train: Vec::new(), train_labels: Vec::new(), global_train: 0, val: Vec::new(), test: Vec::new() };
    let (src, owned) = (plan.block.src.clone(), plan.owned().to_vec());
    let mut h = w.gather_rows(&src)?.0.into_dense();
    let mut kept = None;
    // Every stage but the last has a head: its embedding is the next stage's input.
    let last = layers.saturating_sub(1);
    for l in 0..last {
        let si = model.stage_input(l, &plan, w.graph, h, &split, &dev)?;
        let (e, d) = owned_embedding(&model, l, &si, (&src, &owned), &split)?;
        if embeddings == Some(l) {
            kept = Some(e.clone());
        }
        h = forward_rows(coll, &plan, e, d)?;
    }
    let si = model.stage_input(last, &plan, w.graph, h, &split, &dev)?;
    let logits = model.conv(last, &si, (&src, &owned), &split, None)?;
    let (classes, logits) = (logits.dim(1)?, flat(&logits)?);
    Ok(super::inference::Scored { nodes: owned, logits, classes, embeddings: kept })
}

/// The frozen stage `l`'s embeddings of the owned vertices, exchanged: the
/// next stage's `[owned + halo, hidden]` input.
fn embed(
    model: &RetexoModel,
    l: usize,
    si: &StageInput,
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    ids: (&[u32], &[u32]),
    split: &Split,
) -> Result<Vec<f32>, TrainError> {
    let (e, d) = owned_embedding(model, l, si, ids, split)?;
    forward_rows(coll, plan, e, d)
}

/// The frozen stage `l`'s embeddings of the owned vertices (`[owned, d]`, flat) and d.
fn owned_embedding(
    model: &RetexoModel,
    l: usize,
    si: &StageInput,
    ids: (&[u32], &[u32]),
    split: &Split,
) -> Result<(Vec<f32>, usize), TrainError> {
    let (_, e) = model.head(l, model.conv(l, si, ids, split, None)?)?;
    let e = e.expect("every stage but the last has a head");
    Ok((flat(&e)?, e.dim(1)?))
}

/// Validation and test accuracy of stage `l` (with its head) over all
/// workers, and whether any worker voted to stop in their sum (`stop`: this
/// one is asked to; `val`: the validation set's size).
fn accuracies(
    model: &RetexoModel,
    l: usize,
    si: &StageInput,
    coll: &mut dyn Collective,
    ids: (&[u32], &[u32]),
    split: &Split,
    (val, stop): (usize, &dyn Fn() -> bool),
) -> Result<(f64, f64, bool), TrainError> {
    let (logits, _) = model.head(l, model.conv(l, si, ids, split, None)?)?;
    let c = logits.dim(1)?;
    let flat = logits.flatten_all()?.to_vec1::<f32>()?;
    let correct = |set: &[(u32, u32)]| {
        set.iter()
            .filter(|&&(p, y)| super::inference::argmax(&flat[p as usize * c..(p as usize + 1) * c]) == y as usize)
            .count() as f32
    };
    let mut counts = [correct(&split.val), split.val.len() as f32, correct(&split.test), split.test.len() as f32];
    let vote = StopVote::new::<f32>(stop(), val, coll.world());
    vote.cast(&mut counts);
    coll.all_reduce_sum(&mut counts).map_err(TrainError::Comm)?;
    let stop = vote.tally(&mut counts);
    let ratio = |a: f32, b: f32| if b > 0.0 { a as f64 / b as f64 } else { 0.0 };
    Ok((ratio(counts[0], counts[1]), ratio(counts[2], counts[3]), stop))
}
