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
use super::row_ops::f32s;
use super::sparse_input::sparse_linear;
use super::{AggGraph, Input, Kernel, LayerNorm, Linear, Params, csr_op};
use crate::sample::Block;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Device, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
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
        let msg = message(&all, d, kernel)?;
        let y = self.norm.forward(&csr_op::weighted_sum(&msg, g, kernel)?, kernel)?;
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

/// ReLU(gamma * Wh + beta) of the rows of `all` = `[gamma | beta | Wh]`
/// (`[n, 3 d]`). On the CPU one pass over the rows, forward and backward:
/// candle's narrow, mul, add and relu made four temporaries and, backward,
/// a zero-padded `[n, 3 d]` gradient per narrow (film on Facebook spent a
/// fifth of its time in them).
fn message(all: &Tensor, d: usize, kernel: Kernel) -> Result<Tensor> {
    match kernel {
        Kernel::Fast => all.contiguous()?.apply_op1(Message { d }),
        Kernel::Reference | Kernel::Rows => {
            (all.narrow(1, 0, d)? * all.narrow(1, 2 * d, d)?)?.add(&all.narrow(1, d, d)?)?.relu()
        }
    }
}

/// Rows per rayon task: a few thousand floats each.
const MIN_ROWS: usize = 32;

struct Message {
    d: usize,
}

/// The `[n, 3 d]` rows `[gamma | beta | Wh]` as a slice, and n.
fn message_rows<'a>(s: &'a CpuStorage, l: &Layout, d: usize) -> Result<(&'a [f32], usize)> {
    match l.dims() {
        &[n, w] if w == 3 * d => Ok((f32s(s, l, "film-message")?, n)),
        dims => candle_core::bail!("film-message: expects [rows, {}], got {dims:?}", 3 * d),
    }
}

impl CustomOp1 for Message {
    fn name(&self) -> &'static str {
        "film-message"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let d = self.d;
        let (x, n) = message_rows(s, l, d)?;
        let mut out = vec![0f32; n * d];
        out.par_chunks_mut(d.max(1)).zip(x.par_chunks(3 * d.max(1))).with_min_len(MIN_ROWS).for_each(|(o, r)| {
            let (gamma, rest) = r.split_at(d);
            let (beta, wh) = rest.split_at(d);
            for c in 0..d {
                o[c] = (gamma[c] * wh[c] + beta[c]).max(0.0);
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((n, d))))
    }
    fn bwd(&self, all: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(all.apply_op2(&grad.contiguous()?, MessageBwd { d: self.d })?))
    }
}

/// (`[gamma | beta | Wh]`, grad of the message) -> its grad: where the
/// message is positive, `[grad * Wh | grad | grad * gamma]`, else 0.
struct MessageBwd {
    d: usize,
}

impl CustomOp2 for MessageBwd {
    fn name(&self) -> &'static str {
        "film-message-backward"
    }
    fn cpu_fwd(&self, sx: &CpuStorage, lx: &Layout, sg: &CpuStorage, lg: &Layout) -> Result<(CpuStorage, Shape)> {
        let d = self.d;
        let (x, n) = message_rows(sx, lx, d)?;
        if lg.dims() != [n, d] {
            candle_core::bail!("{}: gradient {:?} for {n} rows of {d}", self.name(), lg.dims());
        }
        let g = f32s(sg, lg, self.name())?;
        let w = 3 * d.max(1);
        let mut out = vec![0f32; n * 3 * d];
        out.par_chunks_mut(w).zip(x.par_chunks(w)).zip(g.par_chunks(d.max(1))).with_min_len(MIN_ROWS).for_each(
            |((o, r), g)| {
                let (gamma, rest) = r.split_at(d);
                let (beta, wh) = rest.split_at(d);
                let (og, rest) = o.split_at_mut(d);
                let (ob, ow) = rest.split_at_mut(d);
                for c in 0..d {
                    if gamma[c] * wh[c] + beta[c] > 0.0 {
                        og[c] = g[c] * wh[c];
                        ob[c] = g[c];
                        ow[c] = g[c] * gamma[c];
                    }
                }
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((n, 3 * d))))
    }
}
