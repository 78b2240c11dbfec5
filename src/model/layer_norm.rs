//! Layer normalisation over each row (Ba et al. 2016, PyTorch's `LayerNorm`):
//! (x - mean) / sqrt(var + eps) * gamma + beta, biased variance. On the CPU
//! (`Kernel::Fast`) one custom op, forward and backward, over rows in
//! parallel; elsewhere candle's differentiable tensor ops (candle-nn's fused
//! `layer_norm` has no backward), which the tests hold the op to. Built from
//! those ops, its eight broadcasts and their backward temporaries took a
//! quarter of film's time on Facebook.

use super::Params;
use super::csr_op::Kernel;
use super::row_ops::f32s;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, D, Device, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

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
    pub fn forward(&self, x: &Tensor, kernel: Kernel) -> Result<Tensor> {
        match kernel {
            Kernel::Fast => x.contiguous()?.apply_op3(&self.gamma, &self.beta, Fused),
            Kernel::Reference | Kernel::Rows => {
                let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
                let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
                let normed = centred.broadcast_div(&(var + EPS)?.sqrt()?)?;
                normed.broadcast_mul(&self.gamma)?.broadcast_add(&self.beta)
            }
        }
    }
}

/// Rows per rayon task, and per partial sum of the parameters' gradients: a
/// fixed split, so that those sums (added in order) do not depend on how
/// rayon schedules the tasks and a seed gives the same run.
const ROWS: usize = 64;

/// The mean and 1 / sqrt(var + eps) of a row.
fn moments(row: &[f32]) -> (f32, f32) {
    let n = row.len().max(1) as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + EPS as f32).sqrt())
}

/// (x `[n, d]`, gamma `[d]`, beta `[d]`) -> the normalised rows.
struct Fused;

impl CustomOp3 for Fused {
    fn name(&self) -> &'static str {
        "layer-norm"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sg: &CpuStorage,
        lg: &Layout,
        sb: &CpuStorage,
        lb: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let op = self.name();
        let (x, gamma, beta) = (f32s(sx, lx, op)?, f32s(sg, lg, op)?, f32s(sb, lb, op)?);
        let d = match lx.dims() {
            &[_, d] if d > 0 && gamma.len() == d && beta.len() == d => d,
            dims => {
                candle_core::bail!("{op}: expects [rows, d], [d], [d], got {dims:?}, {:?}, {:?}", lg.dims(), lb.dims())
            }
        };
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(d).zip(x.par_chunks(d)).with_min_len(ROWS).for_each(|(o, r)| {
            let (mean, rstd) = moments(r);
            for c in 0..d {
                o[c] = (r[c] - mean) * rstd * gamma[c] + beta[c];
            }
        });
        Ok((CpuStorage::F32(out), lx.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let n = x.dim(0)?;
        let gamma = gamma.to_vec1::<f32>()?;
        let all = x.apply_op2_no_bwd(&grad.contiguous()?, &Backward { gamma })?;
        Ok((Some(all.narrow(0, 0, n)?), Some(all.get(n)?), Some(all.get(n + 1)?)))
    }
}

/// (x, grad of the output) -> `[n + 2, d]`: the gradient of x, then of
/// gamma, then of beta.
struct Backward {
    gamma: Vec<f32>,
}

impl CustomOp2 for Backward {
    fn name(&self) -> &'static str {
        "layer-norm-backward"
    }
    fn cpu_fwd(&self, sx: &CpuStorage, lx: &Layout, sy: &CpuStorage, ly: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, dy) = (f32s(sx, lx, self.name())?, f32s(sy, ly, self.name())?);
        let (gamma, d) = (&self.gamma, self.gamma.len());
        match (lx.dims(), ly.dims()) {
            (&[_, w], y) if w == d && d > 0 && y == lx.dims() => {}
            (dims, y) => candle_core::bail!("{}: rows {dims:?} and gradient {y:?} for {d} channels", self.name()),
        }
        let n = x.len() / d;
        let mut out = vec![0f32; (n + 2) * d];
        let (dx, params) = out.split_at_mut(n * d);
        // Each task: its rows' dx, and its rows' share of the parameters' gradients.
        let partial: Vec<Vec<f32>> = dx
            .par_chunks_mut(ROWS * d)
            .zip(x.par_chunks(ROWS * d))
            .zip(dy.par_chunks(ROWS * d))
            .map(|((dx, x), dy)| {
                let mut acc = vec![0f32; 2 * d];
                let (dgamma, dbeta) = acc.split_at_mut(d);
                for ((o, r), g) in dx.chunks_exact_mut(d).zip(x.chunks_exact(d)).zip(dy.chunks_exact(d)) {
                    let (mean, rstd) = moments(r);
                    let (mut m1, mut m2) = (0f32, 0f32);
                    for c in 0..d {
                        let xhat = (r[c] - mean) * rstd;
                        let dxhat = g[c] * gamma[c];
                        m1 += dxhat;
                        m2 += dxhat * xhat;
                        dgamma[c] += g[c] * xhat;
                        dbeta[c] += g[c];
                    }
                    let (m1, m2) = (m1 / d as f32, m2 / d as f32);
                    for c in 0..d {
                        let xhat = (r[c] - mean) * rstd;
                        o[c] = rstd * (g[c] * gamma[c] - m1 - xhat * m2);
                    }
                }
                acc
            })
            .collect();
        for acc in &partial {
            params.iter_mut().zip(acc).for_each(|(p, a)| *p += a);
        }
        Ok((CpuStorage::F32(out), Shape::from((n + 2, d))))
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
        let y = ln.forward(x.as_tensor(), Kernel::Fast).unwrap();
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

    #[test]
    fn the_cpu_op_gives_candles_outputs_and_gradients() {
        let dev = Device::Cpu;
        let (n, d) = (300, 24);
        let mut p = Params::new(2);
        let ln = LayerNorm::new(&mut p, "ln", d, &dev).unwrap();
        // Parameters away from their initial ones, so their gradients' terms all count.
        let moved: Vec<f32> = (0..p.numel()).map(|i| 0.5 + ((i * 37) % 11) as f32 / 7.0).collect();
        p.set_flat(&moved).unwrap();
        let vals: Vec<f32> = (0..n * d).map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0).collect();
        let x = candle_core::Var::from_vec(vals, (n, d), &dev).unwrap();
        let w: Vec<f32> = (0..n * d).map(|i| ((i * 31) % 17) as f32 - 8.0).collect();
        let w = Tensor::from_vec(w, (n, d), &dev).unwrap();
        let run = |k: Kernel| {
            let y = ln.forward(x.as_tensor(), k).unwrap();
            let g = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gx = g.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            (y, gx, p.flat_grads(&g).unwrap())
        };
        let (fast, reference) = (run(Kernel::Fast), run(Kernel::Reference));
        for (what, a, b) in
            [("y", &fast.0, &reference.0), ("dx", &fast.1, &reference.1), ("params", &fast.2, &reference.2)]
        {
            assert_eq!(a.len(), b.len());
            for (u, v) in a.iter().zip(b) {
                assert!((u - v).abs() <= 1e-4 * (1.0 + v.abs()), "{what}: {u} against {v}");
            }
        }
        // The same twice: the parameters' sums do not depend on rayon's scheduling.
        assert_eq!(run(Kernel::Fast).2, fast.2);
    }
}
