//! Feature gather outside candle: the rows a block needs are copied from the
//! mmapped archive (or any other row source, e.g. a buffer of rows fetched
//! from remote owners) straight into the buffer that becomes the input tensor.

use crate::format::DatasetFile;
use candle_core::{Device, Tensor};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Below this many values a gather runs on the calling thread.
const PAR_MIN_VALUES: usize = 1 << 16;

/// Feature rows addressed by global vertex id.
pub trait FeatureSource: Sync {
    fn dim(&self) -> usize;
    fn row(&self, v: u32) -> &[f32];
}

/// A row-major table of every vertex's features (e.g. an archive's feature array).
#[derive(Clone, Copy, Debug)]
pub struct DenseRows<'a> {
    pub data: &'a [f32],
    pub dim: usize,
}

impl FeatureSource for DenseRows<'_> {
    fn dim(&self) -> usize {
        self.dim
    }
    #[inline]
    fn row(&self, v: u32) -> &[f32] {
        &self.data[v as usize * self.dim..(v as usize + 1) * self.dim]
    }
}

impl FeatureSource for DatasetFile {
    fn dim(&self) -> usize {
        self.feature_dim()
    }
    #[inline]
    fn row(&self, v: u32) -> &[f32] {
        self.feature_row(v)
    }
}

/// Copies the rows of `ids` into `out` (`ids.len() * dim` values), in parallel when large.
pub fn gather_into(src: &impl FeatureSource, ids: &[u32], out: &mut [MaybeUninit<f32>]) {
    let dim = src.dim();
    assert_eq!(out.len(), ids.len() * dim, "gather output has the wrong length");
    if dim == 0 {
        return;
    }
    let copy = |(dst, &v): (&mut [MaybeUninit<f32>], &u32)| {
        dst.write_copy_of_slice(src.row(v));
    };
    if out.len() < PAR_MIN_VALUES {
        out.chunks_mut(dim).zip(ids).for_each(copy);
    } else {
        out.par_chunks_mut(dim).zip(ids.par_iter()).with_min_len(256).for_each(copy);
    }
}

/// The rows of `ids`, row-major, without zero-filling the buffer first.
pub fn gather(src: &impl FeatureSource, ids: &[u32]) -> Vec<f32> {
    let n = ids.len() * src.dim();
    let mut out = Vec::with_capacity(n);
    gather_into(src, ids, &mut out.spare_capacity_mut()[..n]);
    // SAFETY: `gather_into` asserted that its output covers exactly `n` values
    // and wrote every one of them (each of the `ids.len()` chunks of `dim`
    // values is written by `write_copy_of_slice`; a panic there unwinds before
    // this line), so the first `n` elements are initialised.
    unsafe { out.set_len(n) };
    out
}

/// The rows of `ids` as an `[ids.len(), dim]` tensor on `device` (the buffer is
/// moved into the tensor on CPU, not copied).
pub fn gather_tensor(src: &impl FeatureSource, ids: &[u32], device: &Device) -> candle_core::Result<Tensor> {
    let t = Tensor::from_vec(gather(src, ids), (ids.len(), src.dim()), &Device::Cpu)?;
    if device.is_cpu() { Ok(t) } else { t.to_device(device) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_the_right_rows_small_and_large() {
        let dim = 7;
        let n = 20_000u32;
        let table: Vec<f32> = (0..n as usize * dim).map(|i| i as f32).collect();
        let src = DenseRows { data: &table, dim };
        for count in [3usize, 15_000] {
            let ids: Vec<u32> = (0..count as u32).map(|i| (i * 7919) % n).collect();
            let got = gather(&src, &ids);
            assert_eq!(got.len(), count * dim);
            for (i, &v) in ids.iter().enumerate() {
                assert_eq!(&got[i * dim..(i + 1) * dim], src.row(v));
            }
        }
        let t = gather_tensor(&src, &[2, 0], &Device::Cpu).unwrap();
        assert_eq!(t.dims(), &[2, dim]);
        assert_eq!(t.to_vec2::<f32>().unwrap()[1], src.row(0));
    }
}
