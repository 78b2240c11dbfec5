//! DeeperGCN (Li et al. 2020), the res+ block the LeapGNN artifact ran, as
//! one addressable layer per GENConv:
//!
//! - layer 0: h = GEN_0(Linear_enc(x));
//! - layer l >= 1: h = GEN_l(Dropout(ReLU(BN_l(h)))) + h;
//! - the last layer then applies Linear_head(Dropout(ReLU(BN_out(h)))).
//!
//! GENConv: m_v = AGG over v's in-neighbours u of (ReLU(h_u) + 1e-7), out =
//! Linear(h_v + m_v), AGG the element-wise max (0 without neighbours) or the
//! per-channel softmax aggregation sum_u softmax_u(t m_u) m_u. BatchNorm is
//! `BatchNorm` (statistics over the whole iteration); a layer's dropout masks
//! are keyed by the rows' vertex ids, as every other model's.

use super::batch_norm::BatchNorm;
use super::dropout::{relu_dropout, vertex_row_key};
use super::row_ops::End;
use super::sparse_input::sparse_linear;
use super::{AggGraph, Input, Kernel, Linear, Params, csr_op};
use crate::sample::Block;
use candle_core::{DType, Device, Result, Tensor};
use std::sync::Arc;

/// GENConv's aggregation of its messages (`--aggr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GenAggr {
    /// The maximum of the messages (the LeapGNN artifact's).
    #[default]
    Max,
    /// A softmax-weighted sum of the messages, temperature --softmax-t.
    Softmax,
}

crate::value_names!(GenAggr, "--aggr");

/// GENConv's message offset (PyG's `eps`).
const MSG_EPS: f64 = 1e-7;

/// What one deep layer reads besides its input rows.
pub struct DeepInput<'a> {
    pub graph: &'a Arc<AggGraph>,
    /// Global ids of the source and destination rows.
    pub src: &'a [u32],
    pub dst: &'a [u32],
    pub kernel: Kernel,
    /// Training: (dropout rate, site key of the dropout on this layer's
    /// input rows, site key of the dropout before the head).
    pub train: Option<(f32, u64, u64)>,
}

pub struct GenLayer {
    encoder: Option<Linear>,
    norm: Option<BatchNorm>,
    lin: Linear,
    aggr: GenAggr,
    t: f32,
    head: Option<(BatchNorm, Linear)>,
}

impl GenLayer {
    /// Layer `i` of `layers`: `d_in` is the input width of layer 0 (the features).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        p: &mut Params,
        prefix: &str,
        (i, layers): (usize, usize),
        (d_in, hidden, classes): (usize, usize, usize),
        aggr: GenAggr,
        t: f32,
        dev: &Device,
    ) -> Result<Self> {
        let linear = |p: &mut Params, name: &str, d_in: usize, d_out: usize| -> Result<Linear> {
            let w = p.glorot(&format!("{prefix}.{name}.weight"), (d_out, d_in), d_in, d_out, dev)?;
            let b = p.zeros(&format!("{prefix}.{name}.bias"), d_out, dev)?;
            Ok(Linear::new(w, Some(b)))
        };
        let encoder = if i == 0 { Some(linear(p, "encoder", d_in, hidden)?) } else { None };
        let norm = if i > 0 { Some(BatchNorm::new(p, &format!("{prefix}.norm"), hidden, dev)?) } else { None };
        let lin = linear(p, "lin", hidden, hidden)?;
        let head = if i + 1 == layers {
            Some((BatchNorm::new(p, &format!("{prefix}.out_norm"), hidden, dev)?, linear(p, "head", hidden, classes)?))
        } else {
            None
        };
        Ok(GenLayer { encoder, norm, lin, aggr, t, head })
    }

    /// Messages come from in-neighbours only; the destination's own row is added to the aggregate.
    pub fn graph(b: &Block) -> AggGraph {
        AggGraph::from_block(b, false)
    }

    pub fn norms(&self) -> impl Iterator<Item = &BatchNorm> {
        self.norm.iter().chain(self.head.as_ref().map(|h| &h.0))
    }

    /// The encoder's output over every input row (layer 0), else the rows themselves.
    fn encode(&self, x: &Input) -> Result<Tensor> {
        match (x, &self.encoder) {
            (Input::Dense(t), Some(enc)) => enc.forward(t, None),
            (Input::Sparse(c), Some(enc)) => {
                let y = sparse_linear(c, c.num_rows(), enc.weight())?;
                match enc.bias() {
                    Some(b) => y.broadcast_add(b),
                    None => Ok(y),
                }
            }
            (Input::Dense(t), None) => Ok(t.clone()),
            (Input::Sparse(_), None) => candle_core::bail!("sparse input rows reach a deepgcn layer after the first"),
        }
    }

    pub fn forward(&self, x: &Input, inp: &DeepInput<'_>) -> Result<Tensor> {
        self.forward_encoded(self.encode(x)?, inp)
    }

    /// The encoder's output from input columns `cols` only, before its bias
    /// (P3: a column partition's products sum to the whole).
    pub fn encoder_partial(&self, x: &Tensor, cols: std::ops::Range<usize>) -> Result<Tensor> {
        match &self.encoder {
            Some(enc) => enc.columns(x, cols),
            None => candle_core::bail!("only deepgcn's first layer has the encoder"),
        }
    }

    pub fn encoder_bias(&self) -> Option<&Tensor> {
        self.encoder.as_ref().and_then(Linear::bias)
    }

    /// `forward` from the encoded rows `h` (layer 0) or the input rows (layers >= 1).
    pub fn forward_encoded(&self, h: Tensor, inp: &DeepInput<'_>) -> Result<Tensor> {
        let g = inp.graph;
        let n_dst = g.num_dst();
        let (rate, site_in, site_out) = inp.train.unwrap_or((0.0, 0, 0));
        let pre = match &self.norm {
            Some(bn) => {
                let w = inp.train.map(|_| g.src_weights());
                let y = bn.forward(&h, w.as_deref())?;
                relu_dropout(&y, rate, |r| vertex_row_key(site_in, inp.src[r]))?
            }
            None => h.clone(),
        };
        let msg = (pre.relu()? + MSG_EPS)?;
        let m = match self.aggr {
            GenAggr::Max => csr_op::max(&msg, g, inp.kernel)?,
            GenAggr::Softmax => softmax_aggregate(&msg, g, self.t, inp.kernel)?,
        };
        let mut out = self.lin.forward(&(pre.narrow(0, 0, n_dst)? + m)?, None)?;
        if self.norm.is_some() {
            out = (out + h.narrow(0, 0, n_dst)?)?;
        }
        match &self.head {
            Some((bn, head)) => {
                let ones = inp.train.map(|_| vec![1f32; n_dst]);
                let y = bn.forward(&out, ones.as_deref())?;
                head.forward(&relu_dropout(&y, rate, |r| vertex_row_key(site_out, inp.dst[r]))?, None)
            }
            None => Ok(out),
        }
    }
}

/// Per channel c: sum over d's edges of softmax_e(t msg[src_e, c]) msg[src_e, c]
/// (0 for a destination without edges).
fn softmax_aggregate(msg: &Tensor, g: &Arc<AggGraph>, t: f32, k: Kernel) -> Result<Tensor> {
    softmax_aggregate_within(msg, g, t, k, csr_op::ROWS_SLICE_VALUES)
}

/// `softmax_aggregate`, `Kernel::Rows` holding at most `limit` per-edge values
/// at once: its scores, weights and messages are `[edges, channels]` each, so
/// over a large graph (62M edges x 128 on synthetic-products) they would pass
/// the 2^32 elements candle's CUDA kernels can count.
fn softmax_aggregate_within(msg: &Tensor, g: &Arc<AggGraph>, t: f32, k: Kernel, limit: usize) -> Result<Tensor> {
    csr_op::rows_within(g, msg.dim(1)?, k, limit, |part, _| softmax_aggregate_whole(msg, part, t, k))
}

fn softmax_aggregate_whole(msg: &Tensor, g: &Arc<AggGraph>, t: f32, k: Kernel) -> Result<Tensor> {
    let (_, d) = msg.dims2()?;
    let (e, dev) = (g.num_edges(), msg.device());
    if e == 0 {
        return Tensor::zeros((g.num_dst(), d), DType::F32, dev);
    }
    let scores = (csr_op::select_edges(msg, g, End::Src, k)? * t as f64)?;
    // Stabilised by the per-destination max: a constant that cancels in the ratio.
    let row_max = csr_op::per_row_max(g, &scores.flatten_all()?.to_vec1::<f32>()?, d);
    let p = scores.sub(&Tensor::from_vec(row_max, (e, d), dev)?)?.exp()?;
    let alpha = p.div(&csr_op::select_edges(&csr_op::edge_sum(&p, g, k)?, g, End::Dst, k)?)?;
    csr_op::edge_weighted_sum(msg, &alpha, g, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    /// Values of `softmax_aggregate` and the gradient of their sum weighted
    /// by a fixed probe, with per-edge values held to `limit`.
    fn run(msg: &Tensor, g: &Arc<AggGraph>, limit: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let v = Var::from_tensor(msg).unwrap();
        let out = softmax_aggregate_within(v.as_tensor(), g, 0.7, Kernel::Rows, limit).unwrap();
        let (n, d) = out.dims2().unwrap();
        let probe: Vec<f32> = (0..n * d).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        let probe = Tensor::from_vec(probe, (n, d), &Device::Cpu).unwrap();
        let grads = (&out * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        (out.to_vec2().unwrap(), grads.get(v.as_tensor()).unwrap().to_vec2().unwrap())
    }

    #[test]
    fn rows_softmax_over_slices_of_destinations_equals_the_whole_graph() {
        // Degrees 3, 0, 5, 1, 4, 2, 6 (one destination without edges) over 9 sources.
        let degrees = [3u32, 0, 5, 1, 4, 2, 6];
        let mut indptr = vec![0u32];
        let mut indices = Vec::new();
        for (d, &n) in degrees.iter().enumerate() {
            indices.extend((0..n).map(|j| (d as u32 * 5 + j * 3) % 9));
            indptr.push(indices.len() as u32);
        }
        let g = Arc::new(AggGraph::new(degrees.len(), 9, indptr, indices, None));
        let d = 4;
        let vals: Vec<f32> = (0..9 * d).map(|i| ((i * 13 % 17) as f32 - 8.0) / 3.0).collect();
        let msg = Tensor::from_vec(vals, (9, d), &Device::Cpu).unwrap();
        let (whole, gw) = run(&msg, &g, usize::MAX);
        // 12 values: 3 edges of width 4 a slice, or one destination of more.
        let (sliced, gs) = run(&msg, &g, 12);
        // Each destination's softmax and sum read its own edges, in the same order.
        assert_eq!(sliced, whole);
        for (a, b) in gs.iter().flatten().zip(gw.iter().flatten()) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} against {b}");
        }
        assert!(whole.iter().flatten().any(|&x| x != 0.0));
    }
}
