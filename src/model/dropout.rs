//! Seeded dropout. candle's dropout draws from an unseeded thread RNG; here the
//! mask of a row is a pure function of (key, the row's global id), so the same
//! seed gives the same run, a resumed run is exact, and a vertex gets the same
//! mask whichever batch or worker computes it.

use crate::gather::CsrRows;
use crate::util::rng::{SplitMix, mix64};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// Inverted dropout with probability `p`, in place, on the `cols`-wide rows of
/// `buf`; row `i`'s mask is seeded by `row_key(i)`.
pub fn dropout_in_place(buf: &mut [f32], cols: usize, p: f32, row_key: impl Fn(usize) -> u64 + Sync) {
    dropout_columns(buf, 0..cols, p, row_key)
}

/// `dropout_in_place` on a window of columns: `buf` holds columns `window` of
/// every row, and each value gets the mask bit its column has in the full row
/// (a worker holding a column slice drops exactly what a full-row worker drops).
pub fn dropout_columns(buf: &mut [f32], window: Range<usize>, p: f32, row_key: impl Fn(usize) -> u64 + Sync) {
    let cols = window.len();
    if p <= 0.0 || cols == 0 {
        return;
    }
    let (threshold, scale) = keep_rule(p);
    let apply = |v: &mut [f32], r: u64| {
        for (j, x) in v.iter_mut().enumerate() {
            // Branch-free: a random keep/drop branch mispredicts half the time.
            let keep = ((r >> (16 * j)) as u16 >= threshold) as u32 as f32;
            *x *= keep * scale;
        }
    };
    let lead = window.start % 4;
    buf.par_chunks_mut(cols).enumerate().with_min_len(64).for_each(|(i, row)| {
        let mut rng = SplitMix(row_key(i));
        rng.skip((window.start / 4) as u64);
        let (head, rest) = row.split_at_mut(if lead > 0 { (4 - lead).min(row.len()) } else { 0 });
        if lead > 0 {
            apply(head, rng.next_u64() >> (16 * lead));
        }
        let mut quads = rest.chunks_exact_mut(4);
        for quad in &mut quads {
            apply(quad, rng.next_u64());
        }
        apply(quads.into_remainder(), rng.next_u64());
    });
}

/// Keep when a 16-bit uniform is at or above the threshold (four per random
/// word, column c from word c / 4); the scale uses the exact keep
/// probability, so the mask is unbiased.
fn keep_rule(p: f32) -> (u16, f32) {
    let threshold = (p as f64 * 65536.0).round().min(65535.0) as u16;
    (threshold, (65536.0 / (65536.0 - threshold as f64)) as f32)
}

/// `dropout_in_place` on CSR rows: each stored value gets the mask bit its
/// column has in the dense row, so sparse and dense storage drop the same values.
pub fn dropout_sparse(rows: &mut CsrRows, p: f32, row_key: impl Fn(usize) -> u64 + Sync) {
    if p <= 0.0 {
        return;
    }
    let (threshold, scale) = keep_rule(p);
    let CsrRows { indptr, indices, values, .. } = rows;
    for (i, w) in indptr.windows(2).enumerate() {
        let key = row_key(i);
        let mut word = (u32::MAX, 0u64);
        for (&c, v) in indices[w[0]..w[1]].iter().zip(&mut values[w[0]..w[1]]) {
            if word.0 != c / 4 {
                let mut rng = SplitMix(key);
                rng.skip((c / 4) as u64);
                word = (c / 4, rng.next_u64());
            }
            let keep = ((word.1 >> (16 * (c % 4))) as u16 >= threshold) as u32 as f32;
            *v *= keep * scale;
        }
    }
}

/// `dropout_in_place` as a differentiable op on the 2-D `x` (x times a mask).
pub fn dropout_rows(x: &Tensor, p: f32, row_key: impl Fn(usize) -> u64 + Sync) -> Result<Tensor> {
    if p <= 0.0 {
        return Ok(x.clone());
    }
    let (rows, cols) = x.dims2()?;
    let mut mask = vec![1f32; rows * cols];
    dropout_in_place(&mut mask, cols, p, row_key);
    x.mul(&Tensor::from_vec(mask, (rows, cols), x.device())?)
}

/// relu(x), then dropout with probability `p` (0: none) keyed per row as in
/// `dropout_rows`, as one op: one pass forward and one backward (the
/// gradient flows where the output is positive), where candle's relu and mul
/// take a dozen passes over the tensor in backward.
pub fn relu_dropout(x: &Tensor, p: f32, row_key: impl Fn(usize) -> u64 + Sync) -> Result<Tensor> {
    let (rows, cols) = x.dims2()?;
    ReluDropout::new(rows, cols, p, row_key).apply(x)
}

/// relu followed by dropout, with the mask drawn up front so that the op can
/// run on its own (`apply`) or as the epilogue of the op that produces its
/// input (`linear::linear` fuses it into the first layer's matmul).
#[derive(Clone, Debug)]
pub struct ReluDropout {
    /// Inverted-dropout scale or 0 per element; None without dropout.
    mask: Option<Arc<Vec<f32>>>,
}

impl ReluDropout {
    pub fn new(rows: usize, cols: usize, p: f32, row_key: impl Fn(usize) -> u64 + Sync) -> Self {
        let mask = (p > 0.0).then(|| {
            let mut m = vec![1f32; rows * cols];
            dropout_in_place(&mut m, cols, p, row_key);
            Arc::new(m)
        });
        ReluDropout { mask }
    }

    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        if !x.device().is_cpu() {
            let h = x.relu()?;
            return match &self.mask {
                Some(m) => h.mul(&Tensor::from_slice(m, h.shape(), h.device())?),
                None => Ok(h),
            };
        }
        x.contiguous()?.apply_op1(ReluMask(self.clone()))
    }

    /// y <- relu(y) * mask, in place (`y` is the whole tensor).
    pub(crate) fn forward_in_place(&self, y: &mut [f32]) {
        const CHUNK: usize = 1 << 14;
        match &self.mask {
            Some(m) => {
                assert_eq!(m.len(), y.len(), "relu-dropout mask does not fit its input");
                y.par_chunks_mut(CHUNK)
                    .zip(m.par_chunks(CHUNK))
                    .for_each(|(y, m)| y.iter_mut().zip(m).for_each(|(v, &k)| *v = v.max(0.0) * k));
            }
            None => y.par_chunks_mut(CHUNK).for_each(|y| y.iter_mut().for_each(|v| *v = v.max(0.0))),
        }
    }

    /// The gradient of the input from the output `y` and its gradient.
    pub(crate) fn input_grad(&self, y: &Tensor, grad: &Tensor) -> Result<Tensor> {
        y.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &ReluMaskBwd(self.clone()))
    }
}

fn f32s<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("relu-dropout: expects a contiguous f32 tensor"),
    }
}

struct ReluMask(ReluDropout);

impl CustomOp1 for ReluMask {
    fn name(&self) -> &'static str {
        "relu-dropout"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let mut out = f32s(s, l)?.to_vec();
        self.0.forward_in_place(&mut out);
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.0.input_grad(res, grad)?))
    }
}

/// (output, grad of output) -> grad of input: grad * mask where the output is positive.
struct ReluMaskBwd(ReluDropout);

impl CustomOp2 for ReluMaskBwd {
    fn name(&self) -> &'static str {
        "relu-dropout-backward"
    }
    fn cpu_fwd(&self, sy: &CpuStorage, ly: &Layout, sg: &CpuStorage, lg: &Layout) -> Result<(CpuStorage, Shape)> {
        const CHUNK: usize = 1 << 14;
        let (y, g) = (f32s(sy, ly)?, f32s(sg, lg)?);
        let mut out = vec![0f32; y.len()];
        out.par_chunks_mut(CHUNK).zip(y.par_chunks(CHUNK)).zip(g.par_chunks(CHUNK)).enumerate().for_each(
            |(c, ((o, y), g))| {
                let m = self.0.mask.as_ref().map(|m| &m[c * CHUNK..c * CHUNK + o.len()]);
                for (i, (o, (&y, &g))) in o.iter_mut().zip(y.iter().zip(g)).enumerate() {
                    // Where the output is positive the input was, and the mask kept it.
                    *o = ((y > 0.0) as u32 as f32) * g * m.map_or(1.0, |m| m[i]);
                }
            },
        );
        Ok((CpuStorage::F32(out), ly.shape().clone()))
    }
}

/// Key of the row of vertex `v` under a dropout site key.
#[inline]
pub fn vertex_row_key(site: u64, v: u32) -> u64 {
    mix64(site ^ v as u64)
}

/// Key of the row of edge (dst, src) under a dropout site key.
#[inline]
pub fn edge_row_key(site: u64, dst: u32, src: u32) -> u64 {
    mix64(mix64(site ^ dst as u64) ^ src as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn fused_relu_dropout_matches_relu_then_dropout_with_gradients() {
        // No input is exactly 0, where candle's relu passes the gradient and
        // ours (as PyTorch's) does not.
        let dev = Device::Cpu;
        let x0 = Tensor::arange(0f32, 600.0, &dev)
            .unwrap()
            .reshape((40, 15))
            .unwrap()
            .affine(0.01, -3.005)
            .unwrap()
            .sin()
            .unwrap();
        let probe = Tensor::arange(0f32, 600.0, &dev).unwrap().reshape((40, 15)).unwrap().cos().unwrap();
        for p in [0.0, 0.4] {
            let run = |fused: bool| {
                let x = candle_core::Var::from_tensor(&x0).unwrap();
                let y = if fused {
                    relu_dropout(x.as_tensor(), p, |i| vertex_row_key(3, i as u32)).unwrap()
                } else {
                    dropout_rows(&x.as_tensor().relu().unwrap(), p, |i| vertex_row_key(3, i as u32)).unwrap()
                };
                let g = (&y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                let gx = g.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                (y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), gx)
            };
            assert_eq!(run(true), run(false), "p = {p}");
        }
    }

    #[test]
    fn masks_are_seeded_per_row_and_keep_the_right_fraction() {
        let x = Tensor::ones((2000, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..2000).map(|i| i * 3).collect();
        let a = dropout_rows(&x, 0.3, |i| vertex_row_key(5, ids[i])).unwrap().to_vec2::<f32>().unwrap();
        // Rows of the same vertices in another order get the same masks.
        let rev: Vec<u32> = ids.iter().rev().copied().collect();
        let b = dropout_rows(&x, 0.3, |i| vertex_row_key(5, rev[i])).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(a[0], b[1999]);
        assert_eq!(a[17], b[1999 - 17]);
        let c = dropout_rows(&x, 0.3, |i| vertex_row_key(6, ids[i])).unwrap().to_vec2::<f32>().unwrap();
        assert_ne!(a, c);
        let kept = a.iter().flatten().filter(|&&v| v > 0.0).count() as f64 / (2000.0 * 64.0);
        assert!((kept - 0.7).abs() < 0.01, "kept {kept}");
        assert!(a.iter().flatten().all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-4));
        // The in-place form applies the same masks.
        let mut buf = vec![2f32; 2000 * 64];
        dropout_in_place(&mut buf, 64, 0.3, |i| vertex_row_key(5, ids[i]));
        assert!(buf.iter().zip(a.iter().flatten()).all(|(b, m)| (b - 2.0 * m).abs() < 1e-6));
    }

    #[test]
    fn sparse_rows_get_the_dense_rows_mask_bits() {
        let (rows, cols) = (40, 29);
        let dense: Vec<f32> =
            (0..rows * cols).map(|i| if mix64(i as u64).is_multiple_of(4) { 1.0 + i as f32 } else { 0.0 }).collect();
        let mut want = dense.clone();
        dropout_in_place(&mut want, cols, 0.4, |i| vertex_row_key(2, i as u32 * 3));
        let mut sparse = CsrRows::from_dense(&dense, cols);
        dropout_sparse(&mut sparse, 0.4, |i| vertex_row_key(2, i as u32 * 3));
        assert_eq!(sparse.to_dense(), want);
    }

    #[test]
    fn column_windows_get_the_full_rows_mask_bits() {
        let (rows, cols) = (50, 23);
        let full: Vec<f32> = (0..rows * cols).map(|i| 1.0 + i as f32).collect();
        let mut want = full.clone();
        dropout_in_place(&mut want, cols, 0.5, |i| vertex_row_key(9, i as u32 * 7));
        for window in [0..23, 0..5, 1..2, 3..11, 4..8, 5..23, 22..23, 6..6] {
            let mut part: Vec<f32> = full.chunks(cols).flat_map(|r| r[window.clone()].to_vec()).collect();
            dropout_columns(&mut part, window.clone(), 0.5, |i| vertex_row_key(9, i as u32 * 7));
            let expect: Vec<f32> = want.chunks(cols).flat_map(|r| r[window.clone()].to_vec()).collect();
            assert_eq!(part, expect, "window {window:?}");
        }
    }
}
