//! GraphSAGE (Hamilton et al. 2017), PyG's `SAGEConv`:
//! out = lin_l(aggregate(neighbours)) + lin_r(self), computed as one matmul of
//! `[aggregate | self]` with `[W_l | W_r]`.

use super::csr_op::{self, Reduce};
use super::linear::linear;
use super::sparse_input::{SparseInput, sparse_linear};
use super::{AggGraph, LayerInput, Params};
use crate::sample::Block;
use candle_core::{Device, Result, Tensor};
use std::ops::Range;

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

/// Whether a layer of `aggr` over a block of `(src, dst, edges)` projects
/// its rows before aggregating them (`SageLayer::forward`): the mean
/// commutes with lin_l, and over whole-graph layers (sources about the
/// destinations) transforming first sums narrow rows instead of wide ones.
/// Then no `[dst, 2 x d_in]` aggregate beside the own rows is built, which
/// the memory estimates count (`fullgraph::memory`).
pub fn transforms_first(aggr: SageAggr, (src, dst, edges): (u64, u64, u64), d_in: u64, d_out: u64) -> bool {
    let aggregate_first = edges * d_in + 2 * dst * d_in * d_out;
    let transform_first = (src + dst) * d_in * d_out + edges * d_out;
    aggr == SageAggr::Mean && transform_first < aggregate_first
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

    /// `[aggregate of the neighbours | self row]` per destination.
    fn aggregate(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        let reduce = match self.aggr {
            SageAggr::Mean => Reduce::Sum,
            SageAggr::Max => Reduce::Max,
        };
        csr_op::aggregate_with_self(inp.x, inp.graph, reduce, inp.kernel)
    }

    pub fn forward(&self, inp: &LayerInput<'_>) -> Result<Tensor> {
        let g = inp.graph;
        let (d_in, d_out) = (inp.x.dim(1)?, self.w_l.dim(0)?);
        let (src, dst, edges) = (g.num_src() as u64, g.num_dst() as u64, g.num_edges() as u64);
        if transforms_first(self.aggr, (src, dst, edges), d_in as u64, d_out as u64) {
            let fast = inp.kernel == csr_op::Kernel::Fast;
            let h = linear(inp.x, &self.w_l, None, fast, None)?;
            let nbrs = csr_op::weighted_sum(&h, g, inp.kernel)?;
            let own = linear(&inp.x.narrow(0, 0, g.num_dst())?, &self.w_r, Some(&self.b_l), fast, None)?;
            let y = (nbrs + own)?;
            return match inp.activation {
                Some(a) => a.apply(&y),
                None => Ok(y),
            };
        }
        let both = self.aggregate(inp)?;
        let w = Tensor::cat(&[&self.w_l, &self.w_r], 1)?;
        linear(&both, &w, Some(&self.b_l), inp.kernel == csr_op::Kernel::Fast, inp.activation)
    }

    /// `forward` on constant sparse rows: both linear maps are applied to the
    /// rows first (sparse x dense), then the neighbours' projections are
    /// averaged. Mean aggregation only (`Model` densifies for max).
    pub fn forward_sparse(&self, inp: &SparseInput<'_>) -> Result<Tensor> {
        if self.aggr != SageAggr::Mean {
            candle_core::bail!("sparse input rows reach a max-aggregation layer");
        }
        let x = inp.x;
        let neigh = csr_op::weighted_sum(&sparse_linear(x, x.num_rows(), &self.w_l)?, inp.graph, inp.kernel)?;
        let own = sparse_linear(x, inp.graph.num_dst(), &self.w_r)?;
        inp.finish((neigh + own)?, Some(&self.b_l))
    }

    /// `forward` before bias and activation, from input columns `cols` only.
    /// Both aggregations act column by column, so the aggregate of a column
    /// slice is that slice of the aggregate, and the products of a column
    /// partition sum to the whole.
    pub fn partial(&self, inp: &LayerInput<'_>, cols: Range<usize>) -> Result<Tensor> {
        let both = self.aggregate(inp)?;
        let (c, n) = (cols.start, cols.len());
        let w = Tensor::cat(&[&self.w_l.narrow(1, c, n)?, &self.w_r.narrow(1, c, n)?], 1)?;
        linear(&both, &w, None, inp.kernel == csr_op::Kernel::Fast, None)
    }

    pub fn bias(&self) -> &Tensor {
        &self.b_l
    }
}
