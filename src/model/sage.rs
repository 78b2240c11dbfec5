//! GraphSAGE (Hamilton et al. 2017), PyG's `SAGEConv`:
//! out = lin_l(aggregate(neighbours)) + lin_r(self).

use super::{AggGraph, LayerInput, Linear, Params, csr_op};
use crate::sample::Block;
use candle_core::{Device, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SageAggr {
    Mean,
    Max,
}

pub struct SageLayer {
    lin_l: Linear,
    lin_r: Linear,
    aggr: SageAggr,
}

impl SageLayer {
    pub fn new(p: &mut Params, prefix: &str, d_in: usize, d_out: usize, aggr: SageAggr, dev: &Device) -> Result<Self> {
        let wl = p.glorot(&format!("{prefix}.lin_l.weight"), (d_out, d_in), d_in, d_out, dev)?;
        let bl = p.zeros(&format!("{prefix}.lin_l.bias"), d_out, dev)?;
        let wr = p.glorot(&format!("{prefix}.lin_r.weight"), (d_out, d_in), d_in, d_out, dev)?;
        Ok(SageLayer { lin_l: Linear::new(wl, Some(bl)), lin_r: Linear::new(wr, None), aggr })
    }

    pub fn graph(&self, b: &Block) -> AggGraph {
        let g = AggGraph::from_block(b, false);
        match self.aggr {
            SageAggr::Mean => g.with_mean_weights(),
            SageAggr::Max => g,
        }
    }

    pub fn forward(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        let agg = match self.aggr {
            SageAggr::Mean => csr_op::weighted_sum(inp.x, inp.graph, inp.kernel)?,
            SageAggr::Max => csr_op::max(inp.x, inp.graph, inp.kernel)?,
        };
        let own = inp.x.narrow(0, 0, inp.graph.num_dst())?;
        self.lin_l.forward(&agg)? + self.lin_r.forward(&own)?
    }
}
