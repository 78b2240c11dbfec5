//! GNN models in candle over sampled blocks: GraphSAGE (mean, max), GCN, GAT,
//! and the deep models DeeperGCN and GNN-FiLM. A model has one layer per
//! fanout; hidden layers are followed by a non-linearity, and seeded dropout
//! is applied to every hidden layer's input (and to the input features for
//! GCN and GAT: `ModelKind::drops_input`). The deep models keep their encoder,
//! normalisations and head inside their first and last layers, so every
//! layer is still one call of `layer_forward` over one block.

mod agg_graph;
mod batch_norm;
pub mod csr_op;
mod deepgcn;
pub mod dropout;
mod film;
mod gat;
mod gcn;
mod layer_norm;
mod linear;
mod loss;
mod params;
pub mod row_ops;
mod sage;
mod seed;
pub mod sparse_input;
mod split;

pub use agg_graph::AggGraph;
pub use batch_norm::{BatchNorm, micrograph_weights, warm_up_passes};
pub use csr_op::Kernel;
pub use deepgcn::GenAggr;
pub use gat::{GatHeads, GatLayer};
pub use gcn::gcn_graph;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use loss::{count_correct, cross_entropy_sum};
pub use params::{Param, Params};
pub use seed::{backward_from, seeded};

use crate::BadInput;
use crate::gather::{CsrRows, Rows};
use crate::graph::CsrView;
use crate::sample::{Blocks, Fanout, Fanouts};
use crate::util::rng::hash_of;
use candle_core::{Device, Result, Tensor};
use deepgcn::{DeepInput, GenLayer};
use dropout::{ReluDropout, dropout_in_place, dropout_rows, dropout_sparse, vertex_row_key};
use film::FilmLayer;
use gcn::GcnLayer;
use sage::SageLayer;
pub(crate) use sage::{SageAggr, transforms_first as sage_transforms_first};
use sparse_input::SparseInput;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// GraphSAGE with mean aggregation.
    #[value(name = "sage", alias = "sage-mean", alias = "graphsage")]
    SageMean,
    /// GraphSAGE with max-pooling aggregation.
    SageMax,
    /// GCN (Kipf & Welling).
    Gcn,
    /// GAT (--heads attention heads in hidden layers).
    Gat,
    /// DeeperGCN, res+ GENConv blocks with BatchNorm (6 layers plus the head by default).
    #[serde(rename = "deepgcn")]
    #[value(name = "deepgcn", alias = "deepergcn")]
    DeepGcn,
    /// GNN-FiLM (10 layers plus a linear head by default).
    #[value(alias = "gnn-film")]
    Film,
}

crate::value_names!(ModelKind, "--model");

impl ModelKind {
    /// Layers when neither --layers nor --fanout says: the LeapGNN paper's
    /// deep models have 6 GENConv layers (7 with the head) and 10 FiLM layers.
    pub fn default_layers(self) -> usize {
        match self {
            ModelKind::DeepGcn => 6,
            ModelKind::Film => 10,
            _ => 2,
        }
    }

    /// The deep models, whose default fanout is 2 per layer (the paper's).
    pub fn is_deep(self) -> bool {
        matches!(self, ModelKind::DeepGcn | ModelKind::Film)
    }

    /// Whether the first layer can be computed from column slices of its
    /// input (P3): linear in the input up to its bias, aggregated column by
    /// column. GAT's attention and FiLM's modulation read whole rows.
    pub fn splits_by_column(self) -> bool {
        !matches!(self, ModelKind::Gat | ModelKind::Film)
    }

    /// Whether dropout also applies to the input features. GCN and GAT drop
    /// them, as their papers do; GraphSAGE only drops hidden layers, as the
    /// PyG and DGL GraphSAGE examples do (and it measures better on Cora).
    pub fn drops_input(self) -> bool {
        matches!(self, ModelKind::Gcn | ModelKind::Gat)
    }
}

/// Everything that fixes a model's architecture.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelSpec {
    pub kind: ModelKind,
    pub in_dim: usize,
    pub hidden: usize,
    pub classes: usize,
    pub layers: usize,
    /// Attention heads of GAT's hidden layers (its output layer has one).
    pub heads: usize,
    /// Dropout on hidden layers' inputs (see `ModelKind::drops_input`) and on
    /// GAT's attention coefficients.
    pub dropout: f32,
    /// deepgcn's GENConv aggregation.
    #[serde(default)]
    pub aggr: GenAggr,
    /// deepgcn's softmax temperature (`--aggr softmax`).
    #[serde(default = "unit")]
    pub softmax_t: f32,
    /// GCN: a self loop per vertex in every layer, counted in the
    /// normalisation (PyG's `add_self_loops`); false: in-neighbours only, as
    /// RETEXO's authors' GCN (`--self-loops`).
    #[serde(default = "yes")]
    pub self_loops: bool,
    /// GAT: heads concatenated in hidden layers, or averaged in every layer.
    #[serde(default)]
    pub gat_heads: GatHeads,
}

fn unit() -> f32 {
    1.0
}

fn yes() -> bool {
    true
}

impl ModelSpec {
    /// Whether each layer's aggregation graph adds an edge from every
    /// destination to itself (`AggGraph::from_block(_, true)`): GAT and FiLM
    /// always, GCN with `self_loops`. SAGE and deepgcn aggregate the
    /// in-neighbours alone and add the vertex's own row apart, so their
    /// graphs hold only the block's edges.
    pub fn adds_self_loops(&self) -> bool {
        match self.kind {
            ModelKind::Gat | ModelKind::Film => true,
            ModelKind::Gcn => self.self_loops,
            ModelKind::SageMean | ModelKind::SageMax | ModelKind::DeepGcn => false,
        }
    }

    /// Rejects architectures that cannot be built, naming the flag at fault.
    pub fn check(&self) -> std::result::Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(m));
        if self.layers == 0 {
            return bad("a model needs at least one layer (one --fanout entry per layer)".into());
        }
        if self.hidden == 0 {
            return bad("--hidden must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("--dropout {} is outside [0, 1)", self.dropout));
        }
        if self.kind == ModelKind::Gat && self.heads == 0 {
            return bad("--heads 0: GAT needs at least one attention head".into());
        }
        if self.kind == ModelKind::Gat && self.gat_heads == GatHeads::Concat && !self.hidden.is_multiple_of(self.heads)
        {
            return bad(format!(
                "--hidden {} is not divisible by --heads {} (GAT splits hidden across heads; --gat-heads mean gives every head the full width)",
                self.hidden, self.heads
            ));
        }
        if !(self.softmax_t.is_finite() && self.softmax_t > 0.0) {
            return bad(format!("--softmax-t {} must be a positive number", self.softmax_t));
        }
        if self.classes == 0 {
            return bad("the dataset has no classes to predict".into());
        }
        // Refused before anything is allocated: an absurd --hidden (or a
        // corrupt archive's feature or class count) must not abort the
        // process on a failed allocation.
        let width = match (self.kind, self.gat_heads) {
            (ModelKind::Gat, GatHeads::Mean) => self.hidden.checked_mul(self.heads),
            _ => Some(self.hidden),
        };
        let shapes = [(self.in_dim, width), (width.unwrap_or(0), width), (width.unwrap_or(0), Some(self.classes))];
        for (rows, cols) in shapes {
            let values = cols.and_then(|c| c.checked_mul(rows));
            if values.is_none_or(|v| v > MAX_WEIGHT_VALUES) {
                return bad(format!(
                    "--hidden {}: with {} input features and {} classes the model needs a {rows} x {} weight \
                     matrix, more than the {MAX_WEIGHT_VALUES} values (8 GiB) leapgnn builds one of; give a smaller \
                     --hidden",
                    self.hidden,
                    self.in_dim,
                    self.classes,
                    cols.map_or("(overflow)".to_string(), |c| c.to_string())
                ));
            }
        }
        Ok(())
    }

    /// A lower bound on the weight values a model of this spec holds (the
    /// layers' dense matrices; biases, norms and attention vectors left out),
    /// saturating. A checkpoint's weights file smaller than this cannot be
    /// this model's, so a restore can refuse a spec before building it.
    pub fn min_weight_values(&self) -> usize {
        let (inp, h, c, l) = (self.in_dim, self.hidden, self.classes, self.layers);
        let mul = |a: usize, b: usize| a.saturating_mul(b);
        let dims = |i: usize| {
            let d_in = if i == 0 { inp } else { h };
            (d_in, if i + 1 == l { c } else { h })
        };
        match self.kind {
            // Encoder, one hidden x hidden Linear per GENConv, the head.
            ModelKind::DeepGcn => mul(inp, h).saturating_add(mul(l, mul(h, h))).saturating_add(mul(h, c)),
            // Every layer maps its input to `hidden` (then the head to classes).
            ModelKind::Film => (0..l).fold(mul(h, c), |s, i| s.saturating_add(mul(dims(i).0, h))),
            // Each layer holds at least one d_in x d_out matrix.
            _ => (0..l).fold(0, |s: usize, i| {
                let (a, b) = dims(i);
                s.saturating_add(mul(a, b))
            }),
        }
    }
}

/// The most values one weight matrix may hold (2^31 f32: 8 GiB).
pub const MAX_WEIGHT_VALUES: usize = 1 << 31;

enum Layer {
    Sage(SageLayer),
    Gcn(GcnLayer),
    Gat(GatLayer),
    Deep(GenLayer),
    Film(FilmLayer),
}

/// What one layer's forward pass reads.
pub struct LayerInput<'a> {
    /// Source rows `[num_src, d_in]`.
    pub x: &'a Tensor,
    pub graph: &'a Arc<AggGraph>,
    /// Global vertex id of each source row.
    pub ids: &'a [u32],
    pub kernel: Kernel,
    /// (rate, site key) when attention dropout is on.
    pub attention_dropout: Option<(f32, u64)>,
    /// Applied to the layer's output (fused when the layer can): relu and the
    /// next layer's dropout. Never set for GAT, whose activation is ELU.
    pub activation: Option<&'a ReluDropout>,
}

/// The first layer's input: a dense tensor, or constant CSR rows that the
/// first layer multiplies sparse x dense (CPU only).
#[derive(Clone, Debug)]
pub enum Input {
    Dense(Tensor),
    Sparse(Arc<CsrRows>),
}

/// Training (seeded dropout under `key`) or evaluation.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Train { key: u64 },
    Eval,
}

/// Sampled blocks with the aggregation graphs this model computes over.
pub struct Prepared {
    pub blocks: Blocks,
    pub graphs: Vec<Arc<AggGraph>>,
}

pub struct Model {
    spec: ModelSpec,
    layers: Vec<Layer>,
    kernel: Kernel,
}

impl Model {
    /// Builds the layers, registering their parameters (seeded from `params`'s seed).
    pub fn new(spec: &ModelSpec, params: &mut Params, dev: &Device) -> Result<Self> {
        spec.check().map_err(|e| candle_core::Error::Msg(e.0))?;
        let l = spec.layers;
        let mut layers = Vec::with_capacity(l);
        for i in 0..l {
            let last = i + 1 == l;
            let d_in = if i == 0 { spec.in_dim } else { spec.hidden };
            let d_out = if last { spec.classes } else { spec.hidden };
            let prefix = format!("layers.{i}");
            layers.push(match spec.kind {
                ModelKind::SageMean => Layer::Sage(SageLayer::new(params, &prefix, d_in, d_out, SageAggr::Mean, dev)?),
                ModelKind::SageMax => Layer::Sage(SageLayer::new(params, &prefix, d_in, d_out, SageAggr::Max, dev)?),
                ModelKind::Gcn => Layer::Gcn(GcnLayer::new(params, &prefix, d_in, d_out, spec.self_loops, dev)?),
                ModelKind::Gat => Layer::Gat(match spec.gat_heads {
                    GatHeads::Mean => GatLayer::new(params, &prefix, d_in, spec.heads, d_out, false, dev)?,
                    GatHeads::Concat if last => GatLayer::new(params, &prefix, d_in, 1, d_out, false, dev)?,
                    GatHeads::Concat => {
                        GatLayer::new(params, &prefix, d_in, spec.heads, spec.hidden / spec.heads, true, dev)?
                    }
                }),
                ModelKind::DeepGcn => Layer::Deep(GenLayer::new(
                    params,
                    &prefix,
                    (i, l),
                    (spec.in_dim, spec.hidden, spec.classes),
                    spec.aggr,
                    spec.softmax_t,
                    dev,
                )?),
                ModelKind::Film => {
                    Layer::Film(FilmLayer::new(params, &prefix, (d_in, spec.hidden, spec.classes), last, dev)?)
                }
            });
        }
        // The custom CSR kernels run on CPU storage; other devices use candle's own ops.
        let kernel = Kernel::for_device(dev);
        Ok(Model { spec: spec.clone(), layers, kernel })
    }

    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// Uses `k` for every aggregation (tests compare the kernels end to end).
    pub fn with_kernel(mut self, k: Kernel) -> Self {
        self.kernel = k;
        self
    }

    /// Builds the aggregation graphs of `blocks`. `graph` and `fanouts` are the
    /// ones the blocks were sampled with (GCN's normalisation reads degrees).
    pub fn prepare(&self, blocks: Blocks, graph: CsrView<'_>, fanouts: &Fanouts) -> Prepared {
        let mut weights = match self.spec.kind {
            ModelKind::DeepGcn => micrograph_weights(&blocks),
            _ => Vec::new(),
        };
        let graphs = (0..self.layers.len().min(blocks.layers.len()))
            .map(|i| {
                let g = self.layer_graph(i, &blocks.layers[i], graph, fanouts.0[i]);
                match weights.get_mut(i) {
                    Some(w) => Arc::new(g.with_src_weights(std::mem::take(w))),
                    None => Arc::new(g),
                }
            })
            .collect();
        Prepared { blocks, graphs }
    }

    /// The aggregation graph layer `i` computes over for block `b`.
    pub fn layer_graph(&self, i: usize, b: &crate::sample::Block, graph: CsrView<'_>, fanout: Fanout) -> AggGraph {
        match &self.layers[i] {
            Layer::Sage(s) => s.graph(b),
            Layer::Gcn(c) => c.graph(b, graph, fanout),
            Layer::Gat(a) => a.graph(b),
            Layer::Deep(_) => GenLayer::graph(b),
            Layer::Film(_) => FilmLayer::graph(b),
        }
    }

    /// Floats of batch statistics an iteration sums over the workers
    /// (`take_norm_sums`); 0 for models without BatchNorm.
    pub fn norm_sums_len(&self) -> usize {
        self.norms().map(BatchNorm::sums_len).sum()
    }

    fn norms(&self) -> impl Iterator<Item = &BatchNorm> {
        self.layers.iter().flat_map(|l| {
            match l {
                Layer::Deep(d) => Some(d.norms()),
                _ => None,
            }
            .into_iter()
            .flatten()
        })
    }

    /// Appends this worker's batch-statistic sums of the iteration to `out`
    /// (`norm_sums_len` floats) and clears them.
    pub fn take_norm_sums(&self, out: &mut Vec<f32>) {
        self.norms().for_each(|n| n.take_sums(out));
    }

    /// Sets the next iteration's batch statistics (and the running ones)
    /// from every worker's sums, all-reduced; `warm_up`: the running
    /// statistics are set to the batch ones rather than averaged with them.
    pub fn finish_iteration(&self, sums: &[f32], warm_up: bool) -> Result<()> {
        let mut off = 0;
        for n in self.norms() {
            n.finish_iteration(&sums[off..off + n.sums_len()], warm_up)?;
            off += n.sums_len();
        }
        Ok(())
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Width of layer `i`'s output rows (the last layer's is the number of classes).
    pub fn out_dim(&self, i: usize) -> usize {
        if i + 1 == self.layers.len() { self.spec.classes } else { self.spec.hidden }
    }

    fn feature_site(key: u64, layer: usize) -> u64 {
        hash_of(key, &[layer as u64, 0])
    }

    /// The first layer's input from the gathered rows of `p`'s input nodes
    /// (row-major, `in_dim` wide): its dropout is applied here, in place, as the
    /// features are constants.
    pub fn input(&self, p: &Prepared, rows: Vec<f32>, mode: Mode, dev: &Device) -> Result<Tensor> {
        self.input_dense(p.blocks.input_nodes(), rows, mode, dev)
    }

    /// The first layer's input from the rows of vertices `ids` (row-major,
    /// `in_dim` wide), with its dropout applied in place.
    pub fn input_dense(&self, ids: &[u32], mut rows: Vec<f32>, mode: Mode, dev: &Device) -> Result<Tensor> {
        if let (Mode::Train { key }, true) = (mode, self.spec.kind.drops_input()) {
            let site = Self::feature_site(key, 0);
            dropout_in_place(&mut rows, self.spec.in_dim, self.spec.dropout, |r| vertex_row_key(site, ids[r]));
        }
        Tensor::from_vec(rows, (ids.len(), self.spec.in_dim), &Device::Cpu)?.to_device(dev)
    }

    /// The first layer's input from gathered rows, dense or sparse: sparse rows
    /// stay sparse where the first layer can multiply them (CPU, not max
    /// aggregation), their dropout applied to the stored values with the masks
    /// the dense rows would get; otherwise they are densified.
    pub fn input_rows(&self, p: &Prepared, rows: Rows, mode: Mode, dev: &Device) -> Result<Input> {
        self.input_rows_of(p.blocks.input_nodes(), rows, mode, dev)
    }

    /// `input_rows` for the rows of vertices `ids` (the full-graph engine's owned + halo).
    pub fn input_rows_of(&self, ids: &[u32], rows: Rows, mode: Mode, dev: &Device) -> Result<Input> {
        match rows {
            Rows::Sparse(mut c)
                if dev.is_cpu() && self.kernel == Kernel::Fast && self.spec.kind != ModelKind::SageMax =>
            {
                if c.num_rows() != ids.len() || c.dim != self.spec.in_dim {
                    candle_core::bail!(
                        "{} sparse rows of {} columns for {} input nodes of {} features",
                        c.num_rows(),
                        c.dim,
                        ids.len(),
                        self.spec.in_dim
                    );
                }
                // The product indexes weight rows by column: a column beyond the
                // width (a damaged file read without `verify`) must not get that far.
                if let Some(&bad) = c.indices.iter().find(|&&col| col as usize >= c.dim) {
                    candle_core::bail!("a sparse input row has column {bad} but the features have {} columns", c.dim);
                }
                if c.indptr.last() != Some(&c.values.len()) || c.indices.len() != c.values.len() {
                    candle_core::bail!("sparse input rows with inconsistent offsets");
                }
                if let (Mode::Train { key }, true) = (mode, self.spec.kind.drops_input()) {
                    let site = Self::feature_site(key, 0);
                    dropout_sparse(&mut c, self.spec.dropout, |r| vertex_row_key(site, ids[r]));
                }
                Ok(Input::Sparse(Arc::new(c)))
            }
            rows => Ok(Input::Dense(self.input_dense(ids, rows.into_dense(), mode, dev)?)),
        }
    }

    /// Logits `[roots, classes]` from the first layer's input `x` (made by `input`).
    pub fn forward(&self, p: &Prepared, x: &Tensor, mode: Mode) -> Result<Tensor> {
        self.forward_layers(p, 0, Input::Dense(x.clone()), mode)
    }

    /// Logits from the first layer's input made by `input_rows`.
    pub fn forward_input(&self, p: &Prepared, x: &Input, mode: Mode) -> Result<Tensor> {
        self.forward_layers(p, 0, x.clone(), mode)
    }

    /// (rate, site key) of the dropout on layer `i`'s output rows, i.e. on layer i + 1's input.
    fn output_dropout(&self, i: usize, mode: Mode) -> (f32, u64) {
        match mode {
            Mode::Train { key } => (self.spec.dropout, Self::feature_site(key, i + 1)),
            Mode::Eval => (0.0, 0),
        }
    }

    /// What deepgcn's layer `i` reads besides its rows: dropout sites keyed
    /// like every other model's (layer i's input, and the head's input).
    fn deep_input<'a>(
        &self,
        i: usize,
        graph: &'a Arc<AggGraph>,
        (src, dst): (&'a [u32], &'a [u32]),
        mode: Mode,
    ) -> DeepInput<'a> {
        let train = match mode {
            Mode::Train { key } => {
                Some((self.spec.dropout, Self::feature_site(key, i), Self::feature_site(key, self.layers.len())))
            }
            Mode::Eval => None,
        };
        DeepInput { graph, src, dst, kernel: self.kernel, train }
    }

    /// Layers `start..` on `h`, the input of layer `start`; the logits.
    fn forward_layers(&self, p: &Prepared, start: usize, mut h: Input, mode: Mode) -> Result<Tensor> {
        for i in start..self.layers.len() {
            let b = &p.blocks.layers[i];
            h = Input::Dense(self.layer_forward_input(i, &h, &p.graphs[i], (&b.src, b.dst()), mode)?);
        }
        match h {
            Input::Dense(t) => Ok(t),
            Input::Sparse(_) => candle_core::bail!("a model without layers"),
        }
    }

    /// Layer `i` on its input rows `x` (vertices `src`) over `graph`, for the
    /// destinations `dst`: the logits for the last layer, else the layer's
    /// output after its non-linearity and the next layer's dropout (whose masks
    /// are keyed by the destinations' global ids, so any split of the rows
    /// over workers draws the same masks).
    pub fn layer_forward(
        &self,
        i: usize,
        x: &Tensor,
        graph: &Arc<AggGraph>,
        ids: (&[u32], &[u32]),
        mode: Mode,
    ) -> Result<Tensor> {
        self.layer_forward_input(i, &Input::Dense(x.clone()), graph, ids, mode)
    }

    /// `layer_forward` on dense or sparse input rows (sparse only reaches the first layer).
    pub fn layer_forward_input(
        &self,
        i: usize,
        h: &Input,
        graph: &Arc<AggGraph>,
        (src, dst): (&[u32], &[u32]),
        mode: Mode,
    ) -> Result<Tensor> {
        let layer = &self.layers[i];
        let last = i + 1 == self.layers.len();
        match layer {
            Layer::Deep(d) => return d.forward(h, &self.deep_input(i, graph, (src, dst), mode)),
            Layer::Film(f) => {
                let (rate, site) = self.output_dropout(i, mode);
                return f.forward(h, graph, dst, self.kernel, (rate > 0.0).then_some((rate, site)));
            }
            _ => {}
        }
        let attention_dropout = match (mode, layer) {
            (Mode::Train { key }, Layer::Gat(_)) if self.spec.dropout > 0.0 => {
                Some((self.spec.dropout, hash_of(key, &[i as u64, 1])))
            }
            _ => None,
        };
        let (rate, site) = self.output_dropout(i, mode);
        let key = |r: usize| vertex_row_key(site, dst[r]);
        let relu = (!last && !matches!(layer, Layer::Gat(_)))
            .then(|| ReluDropout::new(dst.len(), self.spec.hidden, rate, key));
        let kernel = self.kernel;
        let out = match h {
            Input::Dense(x) => {
                let inp = LayerInput { x, graph, ids: src, kernel, attention_dropout, activation: relu.as_ref() };
                match layer {
                    Layer::Sage(s) => s.forward(&inp)?,
                    Layer::Gcn(c) => c.forward(&inp)?,
                    Layer::Gat(a) => a.forward(&inp)?,
                    Layer::Deep(_) | Layer::Film(_) => candle_core::bail!("deep layers take their own path"),
                }
            }
            Input::Sparse(x) => {
                let sparse = SparseInput { x, graph, kernel, activation: relu.as_ref() };
                match layer {
                    Layer::Sage(s) => s.forward_sparse(&sparse)?,
                    Layer::Gcn(c) => c.forward_sparse(&sparse)?,
                    Layer::Gat(a) => {
                        let wh = a.project_sparse(x)?;
                        let inp = LayerInput { x: &wh, graph, ids: src, kernel, attention_dropout, activation: None };
                        a.attend(&inp, wh.clone())?
                    }
                    Layer::Deep(_) | Layer::Film(_) => candle_core::bail!("deep layers take their own path"),
                }
            }
        };
        match layer {
            Layer::Gat(_) if !last => dropout_rows(&out.elu(1.0)?, rate, key),
            _ => Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::TableRows;
    use crate::gather::gather;
    use crate::graph::Csr;
    use crate::optim::OptimizerKind;
    use crate::sample::{NeighborSampler, NodeMap};
    use crate::util::rng::hash_of;

    /// Two planted classes: edges mostly within a class, features = class signal + noise.
    struct Toy {
        csr: Csr,
        feats: Vec<f32>,
        labels: Vec<u32>,
        dim: usize,
    }

    fn toy(n: u32, dim: usize) -> Toy {
        let labels: Vec<u32> = (0..n).map(|v| v % 2).collect();
        let mut edges = Vec::new();
        for v in 0..n {
            for j in 0..6u64 {
                let h = hash_of(1, &[v as u64, j]);
                let mut u = (h % n as u64) as u32;
                if h % 10 < 8 && labels[u as usize] != labels[v as usize] {
                    u = (u + 1) % n;
                }
                edges.push((u, v));
                edges.push((v, u));
            }
        }
        let feats = (0..n as usize * dim)
            .map(|i| {
                let (v, c) = (i / dim, i % dim);
                let noise = (hash_of(2, &[i as u64]) % 1000) as f32 / 1000.0 - 0.5;
                noise * 2.0 + if c == labels[v] as usize { 0.6 } else { 0.0 }
            })
            .collect();
        Toy { csr: Csr::from_edges(n as usize, &edges, true), feats, labels, dim }
    }

    fn spec(kind: ModelKind, dim: usize) -> ModelSpec {
        ModelSpec {
            kind,
            in_dim: dim,
            hidden: 16,
            classes: 2,
            layers: 2,
            heads: 4,
            dropout: 0.3,
            aggr: GenAggr::Max,
            softmax_t: 1.0,
            self_loops: true,
            gat_heads: GatHeads::Concat,
        }
    }

    const KINDS: [ModelKind; 6] =
        [ModelKind::SageMean, ModelKind::SageMax, ModelKind::Gcn, ModelKind::Gat, ModelKind::DeepGcn, ModelKind::Film];

    /// Every architecture the tests build: the kinds, and deepgcn with softmax aggregation.
    fn specs(dim: usize) -> Vec<ModelSpec> {
        let mut out: Vec<ModelSpec> = KINDS.iter().map(|&k| spec(k, dim)).collect();
        out.push(ModelSpec { aggr: GenAggr::Softmax, softmax_t: 0.7, ..spec(ModelKind::DeepGcn, dim) });
        out
    }

    /// The loss of `roots` (train mode, fixed key) and its gradient, for `spec`'s model with `kernel`.
    fn loss_and_grad(t: &Toy, spec: &ModelSpec, kernel: Kernel, flat: Option<&[f32]>) -> (f64, Vec<f32>) {
        let fan: Fanouts = vec!["3"; spec.layers].join(",").parse().unwrap();
        let sampler = NeighborSampler::new(t.csr.view(), fan.clone(), 3);
        let roots: Vec<u32> = (0..30).map(|i| i * 7).collect();
        let dev = Device::Cpu;
        let mut params = Params::new(5);
        let model = Model::new(spec, &mut params, &dev).unwrap().with_kernel(kernel);
        if let Some(f) = flat {
            params.set_flat(f).unwrap();
        }
        let blocks = sampler.sample(&roots, 0, &mut NodeMap::new(t.labels.len()));
        let rows =
            gather(&TableRows::all(t.labels.len(), t.dim, t.feats.clone()).unwrap(), blocks.input_nodes()).unwrap();
        let p = model.prepare(blocks, t.csr.view(), &fan);
        let mode = Mode::Train { key: 9 };
        let x = model.input(&p, rows, mode, &dev).unwrap();
        let logits = model.forward(&p, &x, mode).unwrap();
        let labels: Vec<u32> = roots.iter().map(|&r| t.labels[r as usize]).collect();
        let loss = cross_entropy_sum(&logits, &labels).unwrap();
        let grads = params.flat_grads(&loss.backward().unwrap()).unwrap();
        (loss.to_scalar::<f32>().unwrap() as f64, grads)
    }

    /// The bound a restore refuses a checkpoint by must never exceed what
    /// the model really holds, for any kind, depth or head layout, or a
    /// good checkpoint would be refused; and it must grow with hidden^2 once
    /// a model has a hidden-to-hidden layer (what an edited `hidden` inflates).
    #[test]
    fn min_weight_values_bounds_every_models_weights_from_below() {
        for base in specs(7) {
            for layers in 1..=4 {
                for (heads, gat_heads) in [(1, GatHeads::Concat), (4, GatHeads::Concat), (3, GatHeads::Mean)] {
                    let s = ModelSpec { layers, heads, gat_heads, hidden: 12, ..base.clone() };
                    let mut params = Params::new(1);
                    Model::new(&s, &mut params, &Device::Cpu).unwrap();
                    let (min, have) = (s.min_weight_values(), params.numel());
                    assert!(min <= have, "{} layers {layers} {gat_heads:?}: bound {min} > {have}", s.kind);
                    assert!(min > 0);
                    if layers >= 3 || s.kind == ModelKind::DeepGcn || (s.kind == ModelKind::Film && layers >= 2) {
                        let wide = ModelSpec { hidden: 1200, ..s.clone() };
                        assert!(wide.min_weight_values() >= 1200 * 1200, "{} layers {layers}", s.kind);
                    }
                }
            }
        }
    }

    #[test]
    fn deep_model_gradients_match_finite_differences_and_candles_own_ops() {
        let t = toy(300, 6);
        for base in specs(t.dim).into_iter().filter(|s| s.kind.is_deep()) {
            // Three layers, no dropout: the loss is a smooth function of the
            // weights away from max-aggregation ties and ReLU kinks.
            let s = ModelSpec { layers: 3, dropout: 0.0, ..base };
            let (_, fast) = loss_and_grad(&t, &s, Kernel::Fast, None);
            for k in [Kernel::Reference, Kernel::Rows] {
                let (_, reference) = loss_and_grad(&t, &s, k, None);
                for (a, b) in fast.iter().zip(&reference) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "{} {:?} {k:?}: {a} vs {b}", s.kind, s.aggr);
                }
            }
            let mut params = Params::new(5);
            Model::new(&s, &mut params, &Device::Cpu).unwrap();
            let w0 = params.flat_values().unwrap();
            // Central differences on the coordinates with the largest gradients
            // (each parameter's largest), in f32 and across ReLU kinks: a
            // relative tolerance of 5% (a wrong term is off by far more; the
            // comparison with candle's own ops above is the tight one).
            let mut off = 0;
            let mut checked = 0;
            for (_, shape) in params.layout() {
                let n: usize = shape.iter().product();
                let i = off + (0..n).max_by(|&a, &b| fast[off + a].abs().total_cmp(&fast[off + b].abs())).unwrap();
                off += n;
                if fast[i].abs() < 1e-3 {
                    continue;
                }
                let h = 5e-4 * (1.0 + w0[i].abs());
                let at = |d: f32| {
                    let mut w = w0.clone();
                    w[i] += d;
                    loss_and_grad(&t, &s, Kernel::Reference, Some(&w)).0
                };
                let fd = (at(h) - at(-h)) / (2.0 * h as f64);
                let rel = (fd - fast[i] as f64).abs() / fast[i].abs().max(1e-2) as f64;
                assert!(
                    rel < 5e-2,
                    "{} {:?} parameter {i}: analytic {} vs finite difference {fd}",
                    s.kind,
                    s.aggr,
                    fast[i]
                );
                checked += 1;
            }
            assert!(checked >= 4, "{}: only {checked} parameters had a gradient to check", s.kind);
        }
    }

    #[test]
    fn fast_and_reference_kernels_give_the_same_logits_and_gradients() {
        let t = toy(400, 8);
        let fan: Fanouts = "4,3".parse().unwrap();
        let sampler = NeighborSampler::new(t.csr.view(), fan.clone(), 3);
        let roots: Vec<u32> = (0..40).map(|i| i * 7).collect();
        let dev = Device::Cpu;
        for sp in specs(t.dim) {
            let kind = sp.kind;
            let run = |k: Kernel| {
                let mut params = Params::new(5);
                let model = Model::new(&sp, &mut params, &dev).unwrap().with_kernel(k);
                let blocks = sampler.sample(&roots, 0, &mut NodeMap::new(400));
                let rows = gather(&TableRows::all(400, t.dim, t.feats.clone()).unwrap(), blocks.input_nodes()).unwrap();
                let p = model.prepare(blocks, t.csr.view(), &fan);
                let x = model.input(&p, rows, Mode::Train { key: 9 }, &dev).unwrap();
                let logits = model.forward(&p, &x, Mode::Train { key: 9 }).unwrap();
                let labels: Vec<u32> = roots.iter().map(|&r| t.labels[r as usize]).collect();
                let loss = cross_entropy_sum(&logits, &labels).unwrap();
                let grads = params.flat_grads(&loss.backward().unwrap()).unwrap();
                (logits.flatten_all().unwrap().to_vec1::<f32>().unwrap(), grads)
            };
            let (lf, gf) = run(Kernel::Fast);
            for k in [Kernel::Reference, Kernel::Rows] {
                let (lr, gr) = run(k);
                for (a, b) in lf.iter().zip(&lr).chain(gf.iter().zip(&gr)) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "{kind} {k:?}: {a} vs {b}");
                }
            }
            assert!(gf.iter().any(|&g| g != 0.0), "{kind}: no gradient reached the parameters");
        }
    }

    #[test]
    fn sparse_and_dense_input_rows_give_the_same_logits_and_gradients() {
        let mut t = toy(400, 24);
        // Bag-of-words-like rows: most values zero.
        t.feats
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| !hash_of(4, &[*i as u64]).is_multiple_of(5))
            .for_each(|(_, x)| *x = 0.0);
        let fan: Fanouts = "4,3".parse().unwrap();
        let sampler = NeighborSampler::new(t.csr.view(), fan.clone(), 3);
        let roots: Vec<u32> = (0..40).map(|i| i * 7).collect();
        let dev = Device::Cpu;
        let table = TableRows::all(400, t.dim, t.feats.clone()).unwrap();
        for kind in KINDS {
            for mode in [Mode::Train { key: 9 }, Mode::Eval] {
                let run = |sparse: bool| {
                    let mut params = Params::new(5);
                    let model = Model::new(&spec(kind, t.dim), &mut params, &dev).unwrap();
                    let blocks = sampler.sample(&roots, 0, &mut NodeMap::new(400));
                    let rows = gather(&table, blocks.input_nodes()).unwrap();
                    let rows = if sparse { Rows::Sparse(CsrRows::from_dense(&rows, t.dim)) } else { Rows::Dense(rows) };
                    let p = model.prepare(blocks, t.csr.view(), &fan);
                    let x = model.input_rows(&p, rows, mode, &dev).unwrap();
                    let sparse_path = matches!(x, Input::Sparse(_));
                    let logits = model.forward_input(&p, &x, mode).unwrap();
                    let labels: Vec<u32> = roots.iter().map(|&r| t.labels[r as usize]).collect();
                    let loss = cross_entropy_sum(&logits, &labels).unwrap();
                    let grads = params.flat_grads(&loss.backward().unwrap()).unwrap();
                    (logits.flatten_all().unwrap().to_vec1::<f32>().unwrap(), grads, sparse_path)
                };
                let (ls, gs, took_sparse) = run(true);
                let (ld, gd, _) = run(false);
                assert_eq!(took_sparse, kind != ModelKind::SageMax, "{kind}: which path sparse rows take");
                for (a, b) in ls.iter().zip(&ld).chain(gs.iter().zip(&gd)) {
                    assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{kind} {mode:?}: {a} vs {b}");
                }
                assert!(gs.iter().any(|&g| g != 0.0), "{kind}: no gradient reached the parameters");
            }
        }
    }

    #[test]
    fn every_model_learns_a_planted_partition() {
        let t = toy(600, 8);
        let fan: Fanouts = "5,5".parse().unwrap();
        let sampler = NeighborSampler::new(t.csr.view(), fan.clone(), 1);
        let dev = Device::Cpu;
        let train: Vec<u32> = (0..400).collect();
        let test: Vec<u32> = (400..600).collect();
        let mut map = NodeMap::new(600);
        let feats = TableRows::all(600, t.dim, t.feats.clone()).unwrap();
        for kind in KINDS {
            let mut params = Params::new(7);
            let model = Model::new(&spec(kind, t.dim), &mut params, &dev).unwrap();
            let mut opt = OptimizerKind::Adam.build(params.numel(), 0.01, 5e-4);
            for epoch in 0..15u64 {
                for (i, batch) in train.chunks(50).enumerate() {
                    let blocks = sampler.sample(batch, epoch, &mut map);
                    let rows = gather(&feats, blocks.input_nodes()).unwrap();
                    let p = model.prepare(blocks, t.csr.view(), &fan);
                    let mode = Mode::Train { key: hash_of(epoch, &[i as u64]) };
                    let x = model.input(&p, rows, mode, &dev).unwrap();
                    let logits = model.forward(&p, &x, mode).unwrap();
                    let labels: Vec<u32> = batch.iter().map(|&r| t.labels[r as usize]).collect();
                    let loss = (cross_entropy_sum(&logits, &labels).unwrap() / batch.len() as f64).unwrap();
                    let g = params.flat_grads(&loss.backward().unwrap()).unwrap();
                    let mut w = params.flat_values().unwrap();
                    opt.step(&mut w, &g);
                    params.set_flat(&w).unwrap();
                }
            }
            let blocks = sampler.sample(&test, 99, &mut map);
            let rows = gather(&feats, blocks.input_nodes()).unwrap();
            let p = model.prepare(blocks, t.csr.view(), &fan);
            let x = model.input(&p, rows, Mode::Eval, &dev).unwrap();
            let logits = model.forward(&p, &x, Mode::Eval).unwrap();
            let labels: Vec<u32> = test.iter().map(|&r| t.labels[r as usize]).collect();
            let acc = count_correct(&logits, &labels).unwrap() as f64 / test.len() as f64;
            assert!(acc > 0.85, "{kind}: test accuracy {acc}");
        }
    }

    #[test]
    fn spec_check_names_the_flag() {
        let mut s = spec(ModelKind::Gat, 8);
        s.heads = 3;
        assert!(s.check().unwrap_err().0.contains("--heads"));
        s.kind = ModelKind::Gcn;
        assert!(s.check().is_ok());
        s.dropout = 1.0;
        assert!(s.check().unwrap_err().0.contains("--dropout"));
        assert!("sage-maxx".parse::<ModelKind>().is_err());
    }
}
