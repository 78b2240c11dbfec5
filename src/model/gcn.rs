//! GCN (Kipf & Welling 2017) on sampled blocks: a self loop per destination
//! and symmetric normalisation 1/sqrt(d_u d_v), where d_x is the number of
//! neighbours x gets in this layer (in-degree capped at the fanout) plus its
//! self loop. With the full neighbourhood (`--eval-fanout all`) this is
//! exactly the GCN propagation rule.

use super::sparse_input::{SparseInput, sparse_linear};
use super::{AggGraph, LayerInput, Linear, Params, csr_op};
use crate::graph::CsrView;
use crate::sample::{Block, Fanout};
use candle_core::{Device, Result, Tensor};
use std::ops::Range;

pub struct GcnLayer {
    lin: Linear,
}

impl GcnLayer {
    pub fn new(p: &mut Params, prefix: &str, d_in: usize, d_out: usize, dev: &Device) -> Result<Self> {
        let w = p.glorot(&format!("{prefix}.lin.weight"), (d_out, d_in), d_in, d_out, dev)?;
        let bias = p.zeros(&format!("{prefix}.bias"), d_out, dev)?;
        Ok(GcnLayer { lin: Linear::new(w, Some(bias)) })
    }

    pub fn graph(&self, b: &Block, g: CsrView<'_>, fanout: Fanout) -> AggGraph {
        let norm: Vec<f32> = b.src.iter().map(|&v| 1.0 / ((fanout.take(g.in_degree(v)) + 1) as f32).sqrt()).collect();
        AggGraph::from_block(b, true).with_weights(|d, s| norm[d] * norm[s])
    }

    /// The weighted sum and the linear map commute: aggregate first when the
    /// aggregate is much smaller than the input (sampled blocks, whose sources
    /// outnumber their destinations), transform first when the sources are
    /// about the destinations (full-graph layers), so the sum runs over narrow rows.
    pub fn forward(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        let g = inp.graph;
        let (d_in, d_out) = (inp.x.dim(1)?, self.lin.out_dim());
        let aggregate_first = g.num_edges() * d_in + g.num_dst() * d_in * d_out;
        let transform_first = g.num_src() * d_in * d_out + g.num_edges() * d_out;
        if transform_first >= aggregate_first {
            let agg = csr_op::weighted_sum(inp.x, g, inp.kernel)?;
            return self.lin.forward(&agg, inp.activation);
        }
        let h = self.lin.columns(inp.x, 0..d_in)?;
        let y = csr_op::weighted_sum(&h, g, inp.kernel)?;
        let y = match self.lin.bias() {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        match inp.activation {
            Some(a) => a.apply(&y),
            None => Ok(y),
        }
    }

    /// `forward` on constant sparse rows: transform first (sparse x dense), then
    /// aggregate the projections (the weighted sum commutes with the linear map).
    pub fn forward_sparse(&self, inp: &SparseInput<'_>) -> Result<Tensor> {
        let x = inp.x;
        let agg = csr_op::weighted_sum(&sparse_linear(x, x.num_rows(), self.lin.weight())?, inp.graph, inp.kernel)?;
        inp.finish(agg, self.lin.bias())
    }

    /// `forward` before bias and activation, from input columns `cols` only.
    pub fn partial(&self, inp: &LayerInput<'_>, cols: Range<usize>) -> Result<Tensor> {
        let agg = csr_op::weighted_sum(inp.x, inp.graph, inp.kernel)?;
        self.lin.columns(&agg, cols)
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.lin.bias()
    }
}
