//! Batch normalisation whose statistics belong to the iteration, not to a
//! worker or a block.
//!
//! A training forward normalises with the statistics of the previous
//! iteration's rows (constants: no gradient flows through them) and adds its
//! own rows' weighted sums to an accumulator. The training loop appends every
//! accumulator to the gradient buffer, so the gradient all-reduce also sums
//! them over the workers; `finish_iteration` turns the sums into the
//! statistics of the next iteration. Evaluation normalises with the same
//! (the latest iteration's, over all W x B micrographs): with the
//! exponential running averages PyTorch evaluates with, which lag a model
//! that still moves fast, Cora's validation accuracy after 12 epochs was
//! 0.33 instead of 0.71. The running averages are still kept and saved
//! (`running_mean`, `running_var`) for an export that wants them.
//!
//! Why the previous iteration's: the statistics of the current one would need
//! every worker's rows of layer l before any worker could compute layer l + 1,
//! an all-reduce inside every forward and backward pass, which the strategies
//! that train an iteration in several sequential time steps cannot do. With
//! constant statistics every strategy computes exactly the same function, so
//! their gradients agree as they do without BatchNorm.
//!
//! Each row is weighted by the number of micrographs (roots) it stands for
//! (`micrograph_weights`): a vertex shared by the micrographs of k roots is
//! computed once in a block that holds all k and once per block otherwise,
//! and counts k times either way, so the sums do not depend on which worker
//! computes which roots.

use super::Params;
use crate::sample::Blocks;
use candle_core::{Device, Result, Tensor, Var};
use std::sync::Mutex;

/// PyTorch's defaults.
const EPS: f64 = 1e-5;
const MOMENTUM: f64 = 0.1;

pub struct BatchNorm {
    gamma: Tensor,
    beta: Tensor,
    /// What training normalises with: the previous iteration's mean and (biased) variance.
    batch_mean: Var,
    batch_var: Var,
    /// Exponential averages of the batch statistics (momentum 0.1), saved, not read.
    running_mean: Var,
    running_var: Var,
    dim: usize,
    /// This iteration's [sum w, sum w (x - m), sum w (x - m)^2] per channel
    /// (m = `batch_mean`: shifted sums keep the variance's precision).
    acc: Mutex<Vec<f64>>,
}

impl BatchNorm {
    pub fn new(p: &mut Params, prefix: &str, dim: usize, dev: &Device) -> Result<Self> {
        let gamma = p.ones(&format!("{prefix}.weight"), dim, dev)?;
        let beta = p.zeros(&format!("{prefix}.bias"), dim, dev)?;
        let (zeros, ones) =
            (Tensor::zeros(dim, candle_core::DType::F32, dev)?, Tensor::ones(dim, candle_core::DType::F32, dev)?);
        Ok(BatchNorm {
            gamma,
            beta,
            batch_mean: p.buffer(&format!("{prefix}.batch_mean"), zeros.clone())?,
            batch_var: p.buffer(&format!("{prefix}.batch_var"), ones.clone())?,
            running_mean: p.buffer(&format!("{prefix}.running_mean"), zeros)?,
            running_var: p.buffer(&format!("{prefix}.running_var"), ones)?,
            dim,
            acc: Mutex::new(vec![0.0; 1 + 2 * dim]),
        })
    }

    /// Normalises the rows of `x` `[rows, dim]`. Training (`weights` given:
    /// one per row, 0 for rows another worker counts) also accumulates them.
    pub fn forward(&self, x: &Tensor, weights: Option<&[f32]>) -> Result<Tensor> {
        if let Some(w) = weights {
            self.accumulate(x, w)?;
        }
        let (mean, var) = (&self.batch_mean, &self.batch_var);
        let scale = self.gamma.div(&(var.as_tensor().detach() + EPS)?.sqrt()?)?;
        let shift = self.beta.sub(&mean.as_tensor().detach().mul(&scale)?)?;
        x.broadcast_mul(&scale)?.broadcast_add(&shift)
    }

    fn accumulate(&self, x: &Tensor, w: &[f32]) -> Result<()> {
        let (rows, dim) = x.dims2()?;
        if rows != w.len() || dim != self.dim {
            candle_core::bail!("batch-norm: {rows} rows of {dim} for {} weights of {} channels", w.len(), self.dim);
        }
        let vals = x.detach().flatten_all()?.to_vec1::<f32>()?;
        let m = self.batch_mean.as_tensor().to_vec1::<f32>()?;
        let mut acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        let (n, rest) = acc.split_at_mut(1);
        let (s1, s2) = rest.split_at_mut(dim);
        for (row, &wr) in vals.chunks_exact(dim.max(1)).zip(w) {
            if wr == 0.0 {
                continue;
            }
            let wr = wr as f64;
            n[0] += wr;
            for c in 0..dim {
                let d = (row[c] - m[c]) as f64;
                s1[c] += wr * d;
                s2[c] += wr * d * d;
            }
        }
        Ok(())
    }

    /// Floats `take_sums` and `finish_iteration` exchange.
    pub fn sums_len(&self) -> usize {
        1 + 2 * self.dim
    }

    /// Appends this iteration's sums to `out` and clears them.
    pub fn take_sums(&self, out: &mut Vec<f32>) {
        let mut acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(acc.iter().map(|&v| v as f32));
        acc.iter_mut().for_each(|v| *v = 0.0);
    }

    /// Sets the statistics from the all-reduced sums (as `take_sums` laid them
    /// out); an iteration without rows leaves them as they were. `warm_up`
    /// sets the running statistics to the batch ones.
    pub fn finish_iteration(&self, sums: &[f32], warm_up: bool) -> Result<()> {
        let dim = self.dim;
        if sums.len() != self.sums_len() {
            candle_core::bail!("batch-norm: {} sums for {} channels", sums.len(), dim);
        }
        let n = sums[0] as f64;
        if n <= 0.0 {
            return Ok(());
        }
        let m = self.batch_mean.as_tensor().to_vec1::<f32>()?;
        let (rm, rv) =
            (self.running_mean.as_tensor().to_vec1::<f32>()?, self.running_var.as_tensor().to_vec1::<f32>()?);
        let mut mean = Vec::with_capacity(dim);
        let mut var = Vec::with_capacity(dim);
        for c in 0..dim {
            let shift = sums[1 + c] as f64 / n;
            mean.push((m[c] as f64 + shift) as f32);
            var.push((sums[1 + dim + c] as f64 / n - shift * shift).max(0.0) as f32);
        }
        let momentum = if warm_up { 1.0 } else { MOMENTUM };
        let mix = |run: &[f32], new: &[f32]| -> Vec<f32> {
            run.iter().zip(new).map(|(&r, &b)| ((1.0 - momentum) * r as f64 + momentum * b as f64) as f32).collect()
        };
        let dev = self.gamma.device();
        self.running_mean.set(&Tensor::from_vec(mix(&rm, &mean), dim, dev)?)?;
        self.running_var.set(&Tensor::from_vec(mix(&rv, &var), dim, dev)?)?;
        self.batch_mean.set(&Tensor::from_vec(mean, dim, dev)?)?;
        self.batch_var.set(&Tensor::from_vec(var, dim, dev)?)?;
        Ok(())
    }
}

/// Forward passes that set the statistics before the first step, for a
/// model of `layers` layers. Pass k makes layer k's inputs those of the
/// initial weights, so `layers` passes would do in exact arithmetic; the
/// extra one re-centres the sums. They travel as f32 and are centred on the
/// statistics already held (`accumulate`), so while layer k's are those of
/// pass k - 1, taken over other inputs, the variance comes out as a small
/// difference of large f32 sums. The strategies sum the same rows in other
/// orders, so without that last pass their first gradients differed by up
/// to 7e-4 (Cora, deepgcn: 3 layers, softmax, P3); with it they agree to 5e-7.
pub fn warm_up_passes(layers: usize) -> usize {
    layers + 1
}

/// For every block layer, the number of roots whose micrograph holds each of
/// its source rows at that depth: a destination reaches the roots it is
/// computed for, and a source row the union of the destinations that read
/// it (itself included, as a destination is also its own source row).
pub fn micrograph_weights(blocks: &Blocks) -> Vec<Vec<f32>> {
    let Some(top) = blocks.layers.last() else { return Vec::new() };
    let words = top.num_dst.div_ceil(64).max(1);
    // Root sets of the current layer's destinations, `words` bits per row.
    let mut reach = vec![0u64; top.num_dst * words];
    for r in 0..top.num_dst {
        reach[r * words + r / 64] |= 1 << (r % 64);
    }
    let mut out = vec![Vec::new(); blocks.layers.len()];
    for (l, b) in blocks.layers.iter().enumerate().rev() {
        let mut src = vec![0u64; b.num_src() * words];
        src[..b.num_dst * words].copy_from_slice(&reach[..b.num_dst * words]);
        for d in 0..b.num_dst {
            for &s in b.edges_of(d) {
                let s = s as usize;
                for k in 0..words {
                    src[s * words + k] |= reach[d * words + k];
                }
            }
        }
        out[l] = src.chunks_exact(words).map(|r| r.iter().map(|w| w.count_ones()).sum::<u32>() as f32).collect();
        reach = src;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;
    use crate::sample::{Fanouts, NeighborSampler, NodeMap};

    #[test]
    fn micrograph_weights_add_up_over_any_split_of_the_roots() {
        let edges: Vec<(u32, u32)> =
            (0..300u32).flat_map(|v| [(v, (v * 7 + 1) % 300), ((v * 13 + 5) % 300, v)]).collect();
        let csr = Csr::from_edges(300, &edges, true);
        let fan: Fanouts = "2,3,2".parse().unwrap();
        let sampler = NeighborSampler::new(csr.view(), fan, 4);
        let roots: Vec<u32> = (0..90).map(|i| i * 3).collect();
        let mut map = NodeMap::new(300);
        // Weight per (layer, vertex) of a block of `roots`.
        let per_vertex = |roots: &[u32], map: &mut NodeMap| {
            let blocks = sampler.sample(roots, 2, map);
            let w = micrograph_weights(&blocks);
            let mut out = vec![vec![0f32; 300]; 3];
            for (l, b) in blocks.layers.iter().enumerate() {
                for (&v, &x) in b.src.iter().zip(&w[l]) {
                    out[l][v as usize] += x;
                }
            }
            out
        };
        let whole = per_vertex(&roots, &mut map);
        let mut parts = vec![vec![0f32; 300]; 3];
        for chunk in roots.chunks(7) {
            for (acc, w) in parts.iter_mut().zip(per_vertex(chunk, &mut map)) {
                acc.iter_mut().zip(w).for_each(|(a, b)| *a += b);
            }
        }
        assert_eq!(whole, parts);
        // The roots' own rows at the top count once each; deeper rows are shared.
        assert!(whole[2].iter().sum::<f32>() >= roots.len() as f32);
        assert!(whole[0].iter().any(|&w| w > 1.0), "no vertex shared by two micrographs");
    }

    #[test]
    fn statistics_come_from_the_summed_iteration_and_the_running_ones_average_them() {
        let dev = Device::Cpu;
        let mut p = Params::new(1);
        let bn = BatchNorm::new(&mut p, "bn", 2, &dev).unwrap();
        let x = Tensor::new(&[[1f32, 10.0], [3.0, 30.0], [100.0, 100.0]], &dev).unwrap();
        // The first iteration normalises with mean 0, variance 1 (identity up to eps).
        let y = bn.forward(&x, Some(&[1.0, 3.0, 0.0])).unwrap();
        assert!((y.to_vec2::<f32>().unwrap()[1][1] - 30.0).abs() < 1e-2);
        let mut sums = Vec::new();
        bn.take_sums(&mut sums);
        bn.finish_iteration(&sums, false).unwrap();
        // Weighted mean (1 + 3*3)/4 = 2.5, variance (1*2.25 + 3*0.25)/4 = 0.75 on channel 0.
        let y = bn.forward(&x, Some(&[0.0, 0.0, 0.0])).unwrap().to_vec2::<f32>().unwrap();
        assert!((y[0][0] - (1.0 - 2.5) / (0.75f32 + 1e-5).sqrt()).abs() < 1e-4, "{y:?}");
        // Evaluation normalises as training does, and accumulates nothing.
        let e = bn.forward(&x, None).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(e, y);
        let mut none = Vec::new();
        bn.take_sums(&mut none);
        assert_eq!(none, vec![0.0; 5]);
        let rm = bn.running_mean.as_tensor().to_vec1::<f32>().unwrap();
        let rv = bn.running_var.as_tensor().to_vec1::<f32>().unwrap();
        assert!((rm[0] - 0.25).abs() < 1e-6 && (rv[0] - (0.9 + 0.075)).abs() < 1e-6, "{rm:?} {rv:?}");
    }
}
