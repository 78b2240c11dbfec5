//! The first layer over sparse input rows (bag-of-words features): x W^T as a
//! sparse x dense product, a custom op on W whose backward is dW = grad^T x
//! (the rows are constants: no gradient for them). Sparse rows are projected
//! before they are aggregated, as the mean, weighted-sum and attention layers
//! allow (`Model` densifies for max aggregation, where the order matters):
//! a row then costs its non-zeros times the output width, not the input width.

use super::dropout::ReluDropout;
use super::{AggGraph, Kernel};
use crate::gather::CsrRows;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// Below this many output values the product runs on the calling thread.
const PAR_MIN_VALUES: usize = 1 << 15;

/// What a first layer reads from sparse rows.
pub struct SparseInput<'a> {
    /// The input rows `[num_src, d_in]`.
    pub x: &'a Arc<CsrRows>,
    pub graph: &'a Arc<AggGraph>,
    pub kernel: Kernel,
    /// Applied to the layer's output: relu and the next layer's dropout.
    pub activation: Option<&'a ReluDropout>,
}

impl SparseInput<'_> {
    /// `act(y + bias)`: the end of a projected-then-aggregated layer.
    pub fn finish(&self, y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let y = match bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        match self.activation {
            Some(a) => a.apply(&y),
            None => Ok(y),
        }
    }
}

/// `x[..rows] W^T` for the constant CSR rows `x` (`[n, in]`) and `w` `[out, in]`:
/// `[rows, out]`, differentiable in `w`.
pub fn sparse_linear(x: &Arc<CsrRows>, rows: usize, w: &Tensor) -> Result<Tensor> {
    let (_, d_in) = w.dims2()?;
    if d_in != x.dim || rows > x.num_rows() {
        candle_core::bail!(
            "sparse-linear: {rows} of {} rows of {} columns for a [{:?}] weight",
            x.num_rows(),
            x.dim,
            w.dims()
        );
    }
    w.contiguous()?.apply_op1(SparseLinear { x: x.clone(), rows })
}

struct SparseLinear {
    x: Arc<CsrRows>,
    rows: usize,
}

fn f32s<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("sparse-linear: expects contiguous f32 tensors"),
    }
}

/// `[r, c]` row-major -> `[c, r]` row-major, in square tiles so that both
/// sides stay in cache (a plain loop strides through memory on every write).
fn transpose(m: &[f32], r: usize, c: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut t = vec![0f32; m.len()];
    for i0 in (0..r).step_by(TILE) {
        for j0 in (0..c).step_by(TILE) {
            for i in i0..(i0 + TILE).min(r) {
                let row = &m[i * c..(i + 1) * c];
                for j in j0..(j0 + TILE).min(c) {
                    t[j * r + i] = row[j];
                }
            }
        }
    }
    t
}

#[inline]
fn axpy(out: &mut [f32], a: f32, x: &[f32]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o += a * v;
    }
}

impl CustomOp1 for SparseLinear {
    fn name(&self) -> &'static str {
        "sparse-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (d_out, d_in) = l.shape().dims2()?;
        // W^T: each stored value then scales one contiguous row of weights.
        let wt = transpose(f32s(s, l)?, d_out, d_in);
        let x = &*self.x;
        let mut y = vec![0f32; self.rows * d_out];
        let row = |(i, o): (usize, &mut [f32])| {
            let (cols, vals) = x.row(i);
            for (&c, &v) in cols.iter().zip(vals) {
                axpy(o, v, &wt[c as usize * d_out..(c as usize + 1) * d_out]);
            }
        };
        if d_out > 0 {
            if y.len() < PAR_MIN_VALUES {
                y.chunks_mut(d_out).enumerate().for_each(row);
            } else {
                y.par_chunks_mut(d_out).enumerate().with_min_len(64).for_each(row);
            }
        }
        Ok((CpuStorage::F32(y), Shape::from((self.rows, d_out))))
    }

    fn bwd(&self, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let (d_out, d_in) = w.dims2()?;
        let g = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let gw = weight_grad(&self.x, self.rows, &g, d_out);
        Ok(Some(Tensor::from_vec(gw, (d_out, d_in), w.device())?))
    }
}

/// `g^T x[..rows]`: the `[d_out, x.dim]` weight gradient of `x W^T` for the
/// output gradient `g` (`[rows, d_out]` row-major). Each weight column is
/// summed by one thread over the rows in order, so the result does not
/// depend on the thread count.
pub fn weight_grad(x: &CsrRows, rows: usize, g: &[f32], d_out: usize) -> Vec<f32> {
    let d_in = x.dim;
    let end = x.indptr[rows];
    // The used rows by column (a counting sort of their non-zeros).
    let mut start = vec![0usize; d_in + 1];
    for &c in &x.indices[..end] {
        start[c as usize + 1] += 1;
    }
    for c in 0..d_in {
        start[c + 1] += start[c];
    }
    let mut fill = start.clone();
    let mut by_col = vec![(0u32, 0f32); end];
    for i in 0..rows {
        let (cols, vals) = x.row(i);
        for (&c, &v) in cols.iter().zip(vals) {
            by_col[fill[c as usize]] = (i as u32, v);
            fill[c as usize] += 1;
        }
    }
    let mut gwt = vec![0f32; d_in * d_out];
    let col = |(c, o): (usize, &mut [f32])| {
        for &(i, v) in &by_col[start[c]..start[c + 1]] {
            axpy(o, v, &g[i as usize * d_out..(i as usize + 1) * d_out]);
        }
    };
    if d_out > 0 {
        if end * d_out < PAR_MIN_VALUES {
            gwt.chunks_mut(d_out).enumerate().for_each(col);
        } else {
            gwt.par_chunks_mut(d_out).enumerate().with_min_len(64).for_each(col);
        }
    }
    transpose(&gwt, d_in, d_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn sparse_product_and_weight_gradient_match_the_dense_matmul() {
        let dev = Device::Cpu;
        let (n, d_in, d_out) = (300, 37, 5);
        let dense: Vec<f32> = (0..n * d_in)
            .map(
                |i| if crate::util::rng::mix64(i as u64).is_multiple_of(9) { (i % 13) as f32 * 0.1 - 0.6 } else { 0.0 },
            )
            .collect();
        let x = Arc::new(CsrRows::from_dense(&dense, d_in));
        let xt = Tensor::from_vec(dense, (n, d_in), &dev).unwrap();
        let w0 =
            Tensor::arange(0f32, (d_out * d_in) as f32, &dev).unwrap().reshape((d_out, d_in)).unwrap().sin().unwrap();
        for rows in [n, 17] {
            let probe = Tensor::arange(0f32, (rows * d_out) as f32, &dev)
                .unwrap()
                .reshape((rows, d_out))
                .unwrap()
                .cos()
                .unwrap();
            let run = |sparse: bool| {
                let w = Var::from_tensor(&w0).unwrap();
                let y = if sparse {
                    sparse_linear(&x, rows, w.as_tensor()).unwrap()
                } else {
                    xt.narrow(0, 0, rows).unwrap().matmul(&w.as_tensor().t().unwrap()).unwrap()
                };
                let g = (&y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                let gw = g.get(w.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                (y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), gw)
            };
            let ((ys, gs), (yd, gd)) = (run(true), run(false));
            for (a, b) in ys.iter().zip(&yd).chain(gs.iter().zip(&gd)) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "rows {rows}: {a} vs {b}");
            }
        }
    }
}
