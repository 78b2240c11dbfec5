//! GAT (Velickovic et al. 2018), PyG's `GATConv`: multi-head attention over each
//! destination's sampled neighbours plus itself; leaky ReLU 0.2, edge softmax,
//! attention dropout; heads concatenated in hidden layers, averaged in the last
//! (`--gat-heads concat`), or every layer's heads averaged (`--gat-heads mean`).

use super::dropout::{dropout_rows, edge_row_key};
use super::row_ops::End;
use super::sparse_input::sparse_linear;
use super::{AggGraph, LayerInput, Linear, Params, csr_op};
use crate::gather::CsrRows;
use crate::sample::Block;
use candle_core::{D, Device, Result, Tensor};
use std::sync::Arc;

/// How GAT combines its heads (`--gat-heads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GatHeads {
    /// Hidden layers: --heads heads of width hidden / heads, concatenated; the
    /// output layer: one head (the GAT paper's and PyG's example).
    #[default]
    Concat,
    /// Every layer: --heads heads of the layer's full output width, averaged
    /// (PyG's `GATConv(concat=False)`; RETEXO's GAT).
    Mean,
}

crate::value_names!(GatHeads, "--gat-heads");

pub struct GatLayer {
    lin: Linear,
    att_src: Tensor,
    att_dst: Tensor,
    bias: Tensor,
    heads: usize,
    per_head: usize,
    concat: bool,
}

impl GatLayer {
    pub fn new(
        p: &mut Params,
        prefix: &str,
        d_in: usize,
        heads: usize,
        per_head: usize,
        concat: bool,
        dev: &Device,
    ) -> Result<Self> {
        let hf = heads * per_head;
        let w = p.glorot(&format!("{prefix}.lin.weight"), (hf, d_in), d_in, hf, dev)?;
        let att_src = p.glorot(&format!("{prefix}.att_src"), (1, heads, per_head), heads, per_head, dev)?;
        let att_dst = p.glorot(&format!("{prefix}.att_dst"), (1, heads, per_head), heads, per_head, dev)?;
        let bias = p.zeros(&format!("{prefix}.bias"), if concat { hf } else { per_head }, dev)?;
        Ok(GatLayer { lin: Linear::new(w, None), att_src, att_dst, bias, heads, per_head, concat })
    }

    pub fn graph(&self, b: &Block) -> AggGraph {
        AggGraph::from_block(b, true)
    }

    pub fn forward(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        self.attend(inp, self.project(inp.x)?)
    }

    /// The projection's weight `[h*f, d_in]`.
    pub fn weight(&self) -> &Tensor {
        self.lin.weight()
    }

    /// The input rows' projection `[n_src, h*f]`.
    pub fn project(&self, x: &Tensor) -> Result<Tensor> {
        self.lin.forward(x, None)
    }

    /// The input rows' projection `[n_src, h*f]` from constant sparse rows.
    pub fn project_sparse(&self, x: &Arc<CsrRows>) -> Result<Tensor> {
        sparse_linear(x, x.num_rows(), self.lin.weight())
    }

    /// Attention over the projected input rows `wh` (`inp.x` is not read).
    pub fn attend(&self, inp: &LayerInput<'_>, wh: Tensor) -> Result<Tensor> {
        let g = inp.graph;
        let (h, f) = (self.heads, self.per_head);
        let n_src = wh.dim(0)?;
        let wh3 = wh.reshape((n_src, h, f))?;
        let s_src = wh3.broadcast_mul(&self.att_src)?.sum(D::Minus1)?; // [n_src, h]
        let s_dst = wh3.narrow(0, 0, g.num_dst())?.broadcast_mul(&self.att_dst)?.sum(D::Minus1)?;
        let dev = wh.device();
        let k = inp.kernel;
        let e = (csr_op::select_edges(&s_src, g, End::Src, k)? + csr_op::select_edges(&s_dst, g, End::Dst, k)?)?;
        let e = candle_nn::ops::leaky_relu(&e, 0.2)?; // [E, h]
        // Softmax over each destination's edges, stabilised by the per-destination
        // max (a constant: it cancels in the ratio, so no gradient flows through it).
        let row_max = csr_op::per_row_max(g, &e.flatten_all()?.to_vec1::<f32>()?, h);
        let p = e.sub(&Tensor::from_vec(row_max, (g.num_edges(), h), dev)?)?.exp()?;
        let denom = csr_op::select_edges(&csr_op::edge_sum(&p, g, k)?, g, End::Dst, k)?;
        let mut alpha = p.div(&denom)?;
        if let Some((rate, site)) = inp.attention_dropout {
            let (ed, es) = (g.edge_dst(), g.edge_src());
            alpha =
                dropout_rows(&alpha, rate, |i| edge_row_key(site, inp.ids[ed[i] as usize], inp.ids[es[i] as usize]))?;
        }
        let out = csr_op::edge_weighted_sum(&wh, &alpha, g, inp.kernel)?; // [n_dst, h*f]
        let out = if self.concat { out } else { out.reshape((g.num_dst(), h, f))?.mean(1)? };
        out.broadcast_add(&self.bias)
    }
}
