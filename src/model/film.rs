//! GNN-FiLM (Brockschmidt 2020) as the LeapGNN artifact ran it, one
//! addressable layer per FiLM layer: m_u = ReLU(gamma(h_u) * W h_u +
//! beta(h_u)) with [gamma; beta] = Linear_nobias(h_u) and W without bias;
//! h'_v = Dropout(LayerNorm(sum of m_u over v's in-neighbours and v itself));
//! the last layer adds a linear head whose outputs are the logits (the
//! artifact put a sigmoid before the cross-entropy; we do not).
//!
//! The message depends on its source only, so it is computed once per source
//! row and then summed, as GCN's transform-first path.

use super::dropout::{dropout_rows, vertex_row_key};
use super::linear::linear;
use super::sparse_input::sparse_linear;
use super::{AggGraph, Input, Kernel, LayerNorm, Linear, Params, csr_op};
use crate::sample::Block;
use candle_core::{Device, Result, Tensor};
use std::sync::Arc;

pub struct FilmLayer {
    /// `[gamma; beta]` `[2 d_out, d_in]` and W `[d_out, d_in]`, stacked per
    /// forward so that one product gives all three.
    film: Tensor,
    w: Tensor,
    norm: LayerNorm,
    head: Option<Linear>,
    d_out: usize,
}

impl FilmLayer {
    pub fn new(
        p: &mut Params,
        prefix: &str,
        (d_in, d_out, classes): (usize, usize, usize),
        last: bool,
        dev: &Device,
    ) -> Result<Self> {
        let gb = p.glorot(&format!("{prefix}.film.weight"), (2 * d_out, d_in), d_in, 2 * d_out, dev)?;
        let w = p.glorot(&format!("{prefix}.lin.weight"), (d_out, d_in), d_in, d_out, dev)?;
        let norm = LayerNorm::new(p, &format!("{prefix}.norm"), d_out, dev)?;
        let head = if last {
            let w = p.glorot(&format!("{prefix}.head.weight"), (classes, d_out), d_out, classes, dev)?;
            Some(Linear::new(w, Some(p.zeros(&format!("{prefix}.head.bias"), classes, dev)?)))
        } else {
            None
        };
        Ok(FilmLayer { film: gb, w, norm, head, d_out })
    }

    /// Each destination sums its in-neighbours' messages and its own.
    pub fn graph(b: &Block) -> AggGraph {
        AggGraph::from_block(b, true)
    }

    /// `x` holds the source rows; `dropout` is (rate, site key) when training,
    /// its masks keyed by the destinations' ids `dst`.
    pub fn forward(
        &self,
        x: &Input,
        g: &Arc<AggGraph>,
        dst: &[u32],
        kernel: Kernel,
        dropout: Option<(f32, u64)>,
    ) -> Result<Tensor> {
        let d = self.d_out;
        let stacked = Tensor::cat(&[&self.film, &self.w], 0)?;
        let all = match x {
            Input::Dense(t) => linear(t, &stacked, None, kernel == Kernel::Fast, None)?,
            Input::Sparse(c) => sparse_linear(c, c.num_rows(), &stacked)?,
        };
        let msg = (all.narrow(1, 0, d)? * all.narrow(1, 2 * d, d)?)?.add(&all.narrow(1, d, d)?)?.relu()?;
        let y = self.norm.forward(&csr_op::weighted_sum(&msg, g, kernel)?)?;
        let y = match dropout {
            Some((rate, site)) => dropout_rows(&y, rate, |r| vertex_row_key(site, dst[r]))?,
            None => y,
        };
        match &self.head {
            Some(h) => h.forward(&y, None),
            None => Ok(y),
        }
    }
}
