//! Layer normalisation over each row (Ba et al. 2016, PyTorch's `LayerNorm`):
//! (x - mean) / sqrt(var + eps) * gamma + beta, biased variance. Built from
//! candle's differentiable tensor ops (candle-nn's fused `layer_norm` has no
//! backward).

use super::Params;
use candle_core::{D, Device, Result, Tensor};

/// PyTorch's default epsilon.
const EPS: f64 = 1e-5;

pub struct LayerNorm {
    gamma: Tensor,
    beta: Tensor,
}

impl LayerNorm {
    /// Registers `<prefix>.weight` (ones) and `<prefix>.bias` (zeros), `dim` wide.
    pub fn new(p: &mut Params, prefix: &str, dim: usize, dev: &Device) -> Result<Self> {
        let gamma = p.ones(&format!("{prefix}.weight"), dim, dev)?;
        let beta = p.zeros(&format!("{prefix}.bias"), dim, dev)?;
        Ok(LayerNorm { gamma, beta })
    }

    /// `x` is `[rows, dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + EPS)?.sqrt()?)?;
        normed.broadcast_mul(&self.gamma)?.broadcast_add(&self.beta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_out_with_zero_mean_and_unit_variance_and_gradients_flow() {
        let dev = Device::Cpu;
        let mut p = Params::new(1);
        let ln = LayerNorm::new(&mut p, "ln", 4, &dev).unwrap();
        let x = candle_core::Var::new(&[[1f32, 2.0, 3.0, 6.0], [-1.0, 0.0, 0.0, 5.0]], &dev).unwrap();
        let y = ln.forward(x.as_tensor()).unwrap();
        for row in y.to_vec2::<f32>().unwrap() {
            let mean = row.iter().sum::<f32>() / 4.0;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 4.0;
            assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "{row:?}");
        }
        // Weighting the outputs unevenly gives the input and gamma a gradient.
        let w = Tensor::new(&[[1f32, 0.0, 0.0, 2.0], [0.0, 3.0, 0.0, 0.0]], &dev).unwrap();
        let g = (y * w).unwrap().sum_all().unwrap().backward().unwrap();
        let gx = g.get(x.as_tensor()).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(gx > 0.0);
        assert!(p.flat_grads(&g).unwrap().iter().any(|&v| v != 0.0));
    }
}
