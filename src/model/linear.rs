//! A linear layer, y = x W^T + b, with PyTorch's weight layout `[out, in]`.
//!
//! candle's matmul backward always computes the gradient of both operands.
//! When `x` is a constant (the input features of the first layer), d/dx is a
//! wasted `[rows, in]` product, often the largest of the step; then the
//! product is applied as a custom op on W (and b) alone, whose backward is
//! only dW = grad^T x (and db = column sums of grad, which candle's
//! broadcast-add backward computes with a slow strided reduction).

use super::dropout::ReluDropout;
use super::sparse_input::sparse_linear;
use crate::gather::CsrRows;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Device, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

pub struct Linear {
    w: Tensor,
    b: Option<Tensor>,
    /// Use the custom op for constant inputs (CPU only).
    fast: bool,
}

impl Linear {
    pub fn new(w: Tensor, b: Option<Tensor>) -> Self {
        let fast = w.device().is_cpu();
        Linear { w, b, fast }
    }

    /// `act(x W^T + b)`, `act` = identity when None.
    pub fn forward(&self, x: &Tensor, act: Option<&ReluDropout>) -> Result<Tensor> {
        linear(x, &self.w, self.b.as_ref(), self.fast, act)
    }

    /// `x W^T + b` for constant CSR rows `x` (CPU): a sparse product, differentiable in W and b.
    pub fn forward_sparse(&self, x: &Arc<CsrRows>) -> Result<Tensor> {
        let y = sparse_linear(x, x.num_rows(), &self.w)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// `x W[:, cols]^T` for `x` holding only input columns `cols`: no bias, no
    /// activation (a column partition's products sum to the full product).
    pub fn columns(&self, x: &Tensor, cols: std::ops::Range<usize>) -> Result<Tensor> {
        linear(x, &self.w.narrow(1, cols.start, cols.len())?, None, self.fast, None)
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.b.as_ref()
    }

    /// The weight `[out, in]`.
    pub fn weight(&self) -> &Tensor {
        &self.w
    }

    pub fn out_dim(&self) -> usize {
        self.w.dims().first().copied().unwrap_or(0)
    }
}

/// `act(x W^T + b)`; `fast` allows the custom op for a constant `x` (CPU
/// tensors only), which also runs `act` as its epilogue.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, fast: bool, act: Option<&ReluDropout>) -> Result<Tensor> {
    if fast && !x.track_op() {
        let op = ConstInput { x: x.contiguous()?, act: act.cloned() };
        return match b {
            Some(b) => w.contiguous()?.apply_op2(&b.contiguous()?, op),
            None => w.contiguous()?.apply_op1(op),
        };
    }
    let y = x.matmul(&w.t()?)?;
    let y = match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    match act {
        Some(a) => a.apply(&y),
        None => Ok(y),
    }
}

fn f32s<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("const-input linear: expects contiguous f32 tensors"),
    }
}

/// (W) -> act(x W^T), or (W, b) -> act(x W^T + b), for a constant x.
struct ConstInput {
    x: Tensor,
    act: Option<ReluDropout>,
}

impl ConstInput {
    fn product(&self, w: &[f32], wl: &Layout, b: Option<&[f32]>) -> Result<(Vec<f32>, Shape)> {
        let w = Tensor::from_slice(w, wl.shape(), &Device::Cpu)?;
        let y = self.x.matmul(&w.t()?)?;
        let shape = y.shape().clone();
        let mut y = y.flatten_all()?.to_vec1::<f32>()?;
        let d = wl.dims()[0].max(1);
        if let Some(b) = b
            && b.len() != d
        {
            candle_core::bail!("const-input-affine: bias has {} values for {d} outputs", b.len());
        }
        if let Some(b) = b {
            y.par_chunks_mut(d).with_min_len(256).for_each(|row| row.iter_mut().zip(b).for_each(|(v, c)| *v += c));
        }
        if let Some(a) = &self.act {
            a.forward_in_place(&mut y);
        }
        Ok((y, shape))
    }

    /// The gradient of the pre-activation output.
    fn pre_grad(&self, res: &Tensor, grad: &Tensor) -> Result<Tensor> {
        match &self.act {
            Some(a) => a.input_grad(res, grad),
            None => grad.contiguous(),
        }
    }
}

impl CustomOp1 for ConstInput {
    fn name(&self) -> &'static str {
        "const-input-matmul"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (y, shape) = self.product(f32s(s, l)?, l, None)?;
        Ok((CpuStorage::F32(y), shape))
    }
    fn bwd(&self, _w: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.pre_grad(res, grad)?.t()?.matmul(&self.x)?))
    }
}

impl CustomOp2 for ConstInput {
    fn name(&self) -> &'static str {
        "const-input-affine"
    }
    fn cpu_fwd(&self, sw: &CpuStorage, lw: &Layout, sb: &CpuStorage, lb: &Layout) -> Result<(CpuStorage, Shape)> {
        let (y, shape) = self.product(f32s(sw, lw)?, lw, Some(f32s(sb, lb)?))?;
        Ok((CpuStorage::F32(y), shape))
    }
    fn bwd(&self, _w: &Tensor, _b: &Tensor, res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let g = self.pre_grad(res, grad)?;
        Ok((Some(g.t()?.matmul(&self.x)?), Some(g.apply_op1_no_bwd(&ColumnSum)?)))
    }
}

/// `[rows, d]` -> `[d]`, the sum over rows: fixed chunks summed in order, so the
/// result does not depend on thread timing.
struct ColumnSum;

impl CustomOp1 for ColumnSum {
    fn name(&self) -> &'static str {
        "column-sum"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let &[_, d] = l.dims() else { candle_core::bail!("column-sum: expects a matrix") };
        let x = f32s(s, l)?;
        let mut out = vec![0f32; d];
        if d > 0 {
            let partial: Vec<Vec<f32>> = x
                .par_chunks(d * 512)
                .map(|block| {
                    let mut acc = vec![0f32; d];
                    block.chunks(d).for_each(|row| acc.iter_mut().zip(row).for_each(|(a, v)| *a += v));
                    acc
                })
                .collect();
            for p in partial {
                out.iter_mut().zip(&p).for_each(|(a, v)| *a += v);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    #[test]
    fn constant_input_path_matches_candle_matmul_and_its_gradients() {
        let dev = Device::Cpu;
        // 1100 rows: the column sum of the bias gradient spans several chunks.
        let x = Tensor::arange(0f32, 5500.0, &dev).unwrap().reshape((1100, 5)).unwrap().affine(0.001, -1.0).unwrap();
        let w0 = Tensor::arange(0f32, 15.0, &dev).unwrap().reshape((3, 5)).unwrap().affine(0.05, -0.3).unwrap();
        let b0 = Tensor::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
        let probe = Tensor::arange(0f32, 3300.0, &dev).unwrap().reshape((1100, 3)).unwrap().sin().unwrap();
        let act = ReluDropout::new(1100, 3, 0.3, |i| i as u64);
        for (with_bias, act) in [(false, None), (true, None), (false, Some(&act)), (true, Some(&act))] {
            let run = |fast: bool| {
                let (w, b) = (Var::from_tensor(&w0).unwrap(), Var::from_tensor(&b0).unwrap());
                let lin = Linear { w: w.as_tensor().clone(), b: with_bias.then(|| b.as_tensor().clone()), fast };
                let y = lin.forward(&x, act).unwrap();
                let g = (&y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                let mut out = vec![y.flatten_all().unwrap().to_vec1::<f32>().unwrap()];
                out.push(g.get(w.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap());
                if with_bias {
                    out.push(g.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap());
                }
                out
            };
            let (fast, reference) = (run(true), run(false));
            for (a, b) in fast.iter().flatten().zip(reference.iter().flatten()) {
                assert!((a - b).abs() < 1e-3 * (1.0 + a.abs()), "bias {with_bias}: {a} vs {b}");
            }
        }
    }
}
