//! GraphSAGE (Hamilton et al. 2017), PyG's `SAGEConv`:
//! out = lin_l(aggregate(neighbours)) + lin_r(self), computed as one matmul of
//! `[aggregate | self]` with `[W_l | W_r]`.

use super::csr_op::{self, Reduce};
use super::linear::linear;
use super::{AggGraph, LayerInput, Params};
use crate::sample::Block;
use candle_core::{Device, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SageAggr {
    Mean,
    Max,
}

pub struct SageLayer {
    w_l: Tensor,
    b_l: Tensor,
    w_r: Tensor,
    aggr: SageAggr,
}

impl SageLayer {
    pub fn new(p: &mut Params, prefix: &str, d_in: usize, d_out: usize, aggr: SageAggr, dev: &Device) -> Result<Self> {
        let wl = p.glorot(&format!("{prefix}.lin_l.weight"), (d_out, d_in), d_in, d_out, dev)?;
        let bl = p.zeros(&format!("{prefix}.lin_l.bias"), d_out, dev)?;
        let wr = p.glorot(&format!("{prefix}.lin_r.weight"), (d_out, d_in), d_in, d_out, dev)?;
        Ok(SageLayer { w_l: wl, b_l: bl, w_r: wr, aggr })
    }

    pub fn graph(&self, b: &Block) -> AggGraph {
        let g = AggGraph::from_block(b, false);
        match self.aggr {
            SageAggr::Mean => g.with_mean_weights(),
            SageAggr::Max => g,
        }
    }

    pub fn forward(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        let reduce = match self.aggr {
            SageAggr::Mean => Reduce::Sum,
            SageAggr::Max => Reduce::Max,
        };
        let both = csr_op::aggregate_with_self(inp.x, inp.graph, reduce, inp.kernel)?;
        let w = Tensor::cat(&[&self.w_l, &self.w_r], 1)?;
        linear(&both, &w, Some(&self.b_l), inp.kernel == csr_op::Kernel::Fast, inp.activation)
    }
}
