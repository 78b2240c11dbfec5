//! Backpropagation from a given output gradient: the gradients of everything
//! `out` depends on when d(loss)/d(out) is `grad` (the full-graph engine's
//! layers, whose output gradient arrives from the peers).
//!
//! candle only backpropagates from a tensor, so the plain way is
//! `(out * grad).sum_all().backward()`. Its backward materialises the ones
//! of the sum, multiplies them by `grad`, and also computes the gradient of
//! `grad` itself (`ones * out`), each into a fresh zeroed accumulator: about
//! eight `out`-sized passes and allocations that produce nothing used. On the
//! CPU a custom op does the same in one step: its output is a scalar whose
//! backward hands `grad` to `out` as is. The gradients are the same bit for
//! bit (`1 * g` is `g`, and `out`'s accumulator adds it to zeros either way).

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

/// The gradients of everything `out` depends on, given d(loss)/d(out) = `grad`.
pub fn backward_from(out: &Tensor, grad: &Tensor) -> Result<GradStore> {
    seeded(out, grad)?.backward()
}

/// A scalar whose gradient with respect to `out` is `grad`: its value is
/// unspecified (0 on the CPU), so add it only to terms that are backpropagated.
pub fn seeded(out: &Tensor, grad: &Tensor) -> Result<Tensor> {
    if out.shape() != grad.shape() {
        candle_core::bail!("backward_from: output {:?} and gradient {:?} differ", out.dims(), grad.dims());
    }
    if !out.device().is_cpu() {
        return (out * grad)?.sum_all();
    }
    out.apply_op1(Seed { grad: grad.clone() })
}

/// out -> a scalar (0: nothing reads it) whose backward gives `out` the gradient `grad`.
struct Seed {
    grad: Tensor,
}

impl CustomOp1 for Seed {
    fn name(&self) -> &'static str {
        "backward-seed"
    }
    fn cpu_fwd(&self, _s: &CpuStorage, _l: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((CpuStorage::F32(vec![0.0]), Shape::from(())))
    }
    fn bwd(&self, _out: &Tensor, _res: &Tensor, _grad: &Tensor) -> Result<Option<Tensor>> {
        // The root's gradient is 1 (candle seeds the backward with ones), so
        // the chain rule's product is `grad` itself.
        Ok(Some(self.grad.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// `v`'s gradient in `s`, as bits (so -0.0 and 0.0 differ).
    fn bits(s: &GradStore, v: &Var) -> Vec<u32> {
        let g = s.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        g.iter().map(|f| f.to_bits()).collect()
    }

    /// Every gradient equals the plain form's, bit for bit, including a
    /// tensor used twice and a -0.0 in the seed.
    #[test]
    fn matches_mul_sum_backward_bit_for_bit() {
        let dev = Device::Cpu;
        let w = Var::from_vec((0..12).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), (4, 3), &dev).unwrap();
        let b = Var::from_vec(vec![0.5f32, -0.25, 0.125], 3, &dev).unwrap();
        let x = Tensor::from_vec((0..20).map(|i| (i as f32 * 0.11).cos()).collect::<Vec<_>>(), (5, 4), &dev).unwrap();
        let out = x.matmul(w.as_tensor()).unwrap().broadcast_add(b.as_tensor()).unwrap().relu().unwrap();
        let out = (&out * &out).unwrap();
        let mut g: Vec<f32> = (0..15).map(|i| (i as f32 * 0.7).sin()).collect();
        g[3] = -0.0;
        let g = Tensor::from_vec(g, (5, 3), &dev).unwrap();
        let want = (&out * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let got = backward_from(&out, &g).unwrap();
        for v in [&w, &b] {
            assert_eq!(bits(&got, v), bits(&want, v));
        }
        assert!(backward_from(&out, &g.narrow(0, 0, 4).unwrap()).is_err());
        // A sum of seeds and a loss, as GNNPipe backpropagates its terms.
        let loss = out.sqr().unwrap().sum_all().unwrap();
        let g2 = Tensor::from_vec((0..15).map(|i| i as f32 * 0.01).collect::<Vec<_>>(), (5, 3), &dev).unwrap();
        let want = ((&loss + (&out * &g).unwrap().sum_all().unwrap()).unwrap()
            + (&out * &g2).unwrap().sum_all().unwrap())
        .unwrap()
        .backward()
        .unwrap();
        let got =
            ((&loss + seeded(&out, &g).unwrap()).unwrap() + seeded(&out, &g2).unwrap()).unwrap().backward().unwrap();
        for v in [&w, &b] {
            assert_eq!(bits(&got, v), bits(&want, v));
        }
    }
}
