//! A linear layer, y = x W^T + b, with PyTorch's weight layout `[out, in]`.
//!
//! candle's matmul backward always computes the gradient of both operands.
//! When `x` is a constant (the input features of the first layer), d/dx is a
//! wasted `[rows, in]` product, often the largest of the step; then the
//! product is applied as a custom op on W alone, whose backward is only
//! dW = grad^T x.

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Result, Shape, Tensor};

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

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        linear(x, &self.w, self.b.as_ref(), self.fast)
    }
}

/// x W^T + b; `fast` allows the custom op for a constant `x` (CPU tensors only).
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, fast: bool) -> Result<Tensor> {
    let y = if fast && !x.track_op() {
        w.contiguous()?.apply_op1(ConstInputMatmul { x: x.contiguous()? })?
    } else {
        x.matmul(&w.t()?)?
    };
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// W -> x W^T for a constant x.
struct ConstInputMatmul {
    x: Tensor,
}

impl CustomOp1 for ConstInputMatmul {
    fn name(&self) -> &'static str {
        "const-input-matmul"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(v) = s else { candle_core::bail!("const-input-matmul: expects f32") };
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("const-input-matmul: expects a contiguous weight")
        };
        let w = Tensor::from_slice(&v[a..b], l.shape(), &Device::Cpu)?;
        let y = self.x.matmul(&w.t()?)?;
        let shape = y.shape().clone();
        Ok((CpuStorage::F32(y.flatten_all()?.to_vec1::<f32>()?), shape))
    }
    fn bwd(&self, _w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.t()?.matmul(&self.x)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    #[test]
    fn constant_input_path_matches_candle_matmul_and_its_gradient() {
        let dev = Device::Cpu;
        let x = Tensor::arange(0f32, 35.0, &dev).unwrap().reshape((7, 5)).unwrap().affine(0.1, -1.0).unwrap();
        let w0 = Tensor::arange(0f32, 15.0, &dev).unwrap().reshape((3, 5)).unwrap().affine(0.05, -0.3).unwrap();
        let probe = Tensor::arange(0f32, 21.0, &dev).unwrap().reshape((7, 3)).unwrap().sin().unwrap();
        let run = |fast: bool| {
            let w = Var::from_tensor(&w0).unwrap();
            let lin = Linear { w: w.as_tensor().clone(), b: None, fast };
            let y = lin.forward(&x).unwrap();
            let g = (&y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            (y.to_vec2::<f32>().unwrap(), g.get(w.as_tensor()).unwrap().to_vec2::<f32>().unwrap())
        };
        let (yf, gf) = run(true);
        let (yr, gr) = run(false);
        for (a, b) in yf.iter().flatten().zip(yr.iter().flatten()).chain(gf.iter().flatten().zip(gr.iter().flatten())) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
