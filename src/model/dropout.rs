//! Seeded dropout. candle's dropout draws from an unseeded thread RNG; here the
//! mask of a row is a pure function of (key, the row's global id), so the same
//! seed gives the same run, a resumed run is exact, and a vertex gets the same
//! mask whichever batch or worker computes it.

use crate::util::rng::{SplitMix, mix64};
use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// Inverted dropout with probability `p` on the rows of the 2-D `x`; row `i`'s
/// mask is seeded by `row_key(i)`.
pub fn dropout_rows(x: &Tensor, p: f32, row_key: impl Fn(usize) -> u64 + Sync) -> Result<Tensor> {
    if p <= 0.0 {
        return Ok(x.clone());
    }
    let (rows, cols) = x.dims2()?;
    let scale = 1.0 / (1.0 - p);
    // Keep when a 24-bit uniform is at or above p.
    let threshold = (p as f64 * (1u64 << 24) as f64) as u64;
    let mut mask = vec![0f32; rows * cols];
    if cols > 0 {
        mask.par_chunks_mut(cols).enumerate().with_min_len(64).for_each(|(i, m)| {
            let mut rng = SplitMix(row_key(i));
            for pair in m.chunks_mut(2) {
                let r = rng.next_u64();
                for (j, v) in pair.iter_mut().enumerate() {
                    *v = if (r >> (j * 32)) & 0xFF_FFFF >= threshold { scale } else { 0.0 };
                }
            }
        });
    }
    x.mul(&Tensor::from_vec(mask, (rows, cols), x.device())?)
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
        assert!(a.iter().flatten().all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-6));
    }
}
