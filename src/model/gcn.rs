//! GCN (Kipf & Welling 2017) on sampled blocks: a self loop per destination
//! and symmetric normalisation 1/sqrt(d_u d_v), where d_x is the number of
//! neighbours x gets in this layer (in-degree capped at the fanout) plus its
//! self loop. With the full neighbourhood (`--eval-fanout all`) this is
//! exactly the GCN propagation rule. `--self-loops off` leaves the self loop
//! out of both (DGL's GraphConv on a graph without self loops).

use super::sparse_input::{SparseInput, sparse_linear};
use super::{AggGraph, LayerInput, Linear, Params, csr_op};
use crate::graph::CsrView;
use crate::sample::{Block, Fanout};
use candle_core::{Device, Result, Tensor};
use std::ops::Range;

/// GCN's aggregation over block `b` of graph `g`: 1/sqrt(d_u d_v) per edge,
/// d_x being x's in-degree capped at `fanout`, plus its self loop where
/// `self_loops` (at least 1: a vertex without in-edges aggregates nothing).
pub fn gcn_graph(b: &Block, g: CsrView<'_>, fanout: Fanout, self_loops: bool) -> AggGraph {
    let d = |v: u32| (fanout.take(g.in_degree(v)) + self_loops as usize).max(1) as f32;
    let norm: Vec<f32> = b.src.iter().map(|&v| 1.0 / d(v).sqrt()).collect();
    AggGraph::from_block(b, self_loops).with_weights(|dd, s| norm[dd] * norm[s])
}

pub struct GcnLayer {
    lin: Linear,
    self_loops: bool,
}

impl GcnLayer {
    pub fn new(
        p: &mut Params,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        self_loops: bool,
        dev: &Device,
    ) -> Result<Self> {
        let w = p.glorot(&format!("{prefix}.lin.weight"), (d_out, d_in), d_in, d_out, dev)?;
        let bias = p.zeros(&format!("{prefix}.bias"), d_out, dev)?;
        Ok(GcnLayer { lin: Linear::new(w, Some(bias)), self_loops })
    }

    pub fn graph(&self, b: &Block, g: CsrView<'_>, fanout: Fanout) -> AggGraph {
        gcn_graph(b, g, fanout, self.self_loops)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;

    #[test]
    fn without_self_loops_a_vertex_aggregates_its_in_neighbours_normalised_by_in_degrees() {
        // 0 <- 1, 0 <- 2, 1 <- 2 (edges as (src, dst)); one block over vertices 0 and 1.
        let csr = Csr::from_edges(3, &[(1, 0), (2, 0), (2, 1)], true);
        let g = csr.view();
        let b = Block { src: vec![0, 1, 2], num_dst: 2, indptr: vec![0, 2, 3], indices: vec![1, 2, 2] };
        let deg = |v: u32, loops: usize| ((g.in_degree(v) + loops).max(1) as f32).sqrt();
        for loops in [false, true] {
            let a = gcn_graph(&b, g, Fanout::All, loops);
            let w = a.weights().unwrap();
            let mut e = 0;
            for d in 0..2u32 {
                let mut want: Vec<u32> =
                    b.indices[b.indptr[d as usize] as usize..b.indptr[d as usize + 1] as usize].to_vec();
                if loops {
                    want.push(d);
                }
                let mut got = a.row(d as usize).to_vec();
                let weights: Vec<(u32, f32)> = got.iter().zip(&w[e..e + got.len()]).map(|(&s, &x)| (s, x)).collect();
                e += got.len();
                got.sort();
                want.sort();
                assert_eq!(got, want, "loops {loops}, destination {d}");
                for (s, x) in weights {
                    let l = loops as usize;
                    let expect = 1.0 / (deg(d, l) * deg(b.src[s as usize], l));
                    assert!((x - expect).abs() < 1e-7, "loops {loops}: edge {s} -> {d} weighs {x}, not {expect}");
                }
            }
        }
    }
}
