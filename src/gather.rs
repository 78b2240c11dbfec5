//! Feature gather outside candle: the rows a block needs are copied from the
//! mmapped archive (or any other row source, e.g. a buffer of rows fetched
//! from remote owners) straight into the buffer that becomes the input tensor
//! (`model::Model::input` moves it into the tensor without a copy).

use crate::comm::{NotHeld, RowSource};
use crate::format::DatasetFile;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Below this many values a gather runs on the calling thread.
const PAR_MIN_VALUES: usize = 1 << 16;

/// A whole dataset holds every row.
impl RowSource for DatasetFile {
    fn dim(&self) -> usize {
        self.feature_dim()
    }
    #[inline]
    fn row(&self, id: u32) -> Option<&[f32]> {
        ((id as usize) < self.num_nodes()).then(|| self.feature_row(id))
    }
}

/// Copies the rows of `ids` into `out` (`ids.len() * dim` values), in parallel when large.
pub fn gather_into<S: RowSource + ?Sized>(src: &S, ids: &[u32], out: &mut [MaybeUninit<f32>]) -> Result<(), NotHeld> {
    let dim = src.dim();
    assert_eq!(out.len(), ids.len() * dim, "gather output has the wrong length");
    if dim == 0 {
        return Ok(());
    }
    let copy = |(dst, &v): (&mut [MaybeUninit<f32>], &u32)| -> Result<(), NotHeld> {
        dst.write_copy_of_slice(src.row(v).ok_or(NotHeld(v))?);
        Ok(())
    };
    if out.len() < PAR_MIN_VALUES {
        out.chunks_mut(dim).zip(ids).try_for_each(copy)
    } else {
        out.par_chunks_mut(dim).zip(ids.par_iter()).with_min_len(256).try_for_each(copy)
    }
}

/// The rows of `ids`, row-major, without zero-filling the buffer first.
pub fn gather<S: RowSource + ?Sized>(src: &S, ids: &[u32]) -> Result<Vec<f32>, NotHeld> {
    let n = ids.len() * src.dim();
    let mut out = Vec::with_capacity(n);
    gather_into(src, ids, &mut out.spare_capacity_mut()[..n])?;
    // SAFETY: `gather_into` asserted that its output covers exactly `n` values
    // and returned Ok only after writing every one of them (each of the
    // `ids.len()` chunks of `dim` values is written by `write_copy_of_slice`; an
    // error or a panic leaves before this line), so the first `n` elements are
    // initialised.
    unsafe { out.set_len(n) };
    Ok(out)
}

/// How gathered rows are scaled before they enter the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowNorm {
    #[default]
    None,
    /// Each row divided by the sum of its absolute values (PyG's `NormalizeFeatures`).
    L1,
}

impl std::str::FromStr for RowNorm {
    type Err = crate::BadInput;
    fn from_str(s: &str) -> Result<Self, crate::BadInput> {
        match s {
            "none" => Ok(RowNorm::None),
            "l1" => Ok(RowNorm::L1),
            _ => Err(crate::BadInput::new(format!("unknown feature normalisation `{s}`: expected none or l1"))),
        }
    }
}

/// Applies `norm` to each `dim`-wide row of `buf` (all-zero rows stay zero).
pub fn normalize_rows(buf: &mut [f32], dim: usize, norm: RowNorm) {
    if norm == RowNorm::None || dim == 0 {
        return;
    }
    buf.par_chunks_mut(dim).with_min_len(256).for_each(|row| {
        let s: f32 = row.iter().map(|v| v.abs()).sum();
        if s > 0.0 {
            row.iter_mut().for_each(|v| *v /= s);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::TableRows;

    #[test]
    fn gathers_the_right_rows_small_and_large() {
        let dim = 7;
        let n = 20_000u32;
        let table: Vec<f32> = (0..n as usize * dim).map(|i| i as f32).collect();
        let src = TableRows::all(n as usize, dim, table).unwrap();
        for count in [3usize, 15_000] {
            let ids: Vec<u32> = (0..count as u32).map(|i| (i * 7919) % n).collect();
            let got = gather(&src, &ids).unwrap();
            assert_eq!(got.len(), count * dim);
            for (i, &v) in ids.iter().enumerate() {
                assert_eq!(&got[i * dim..(i + 1) * dim], src.row(v).unwrap());
            }
        }
        let part = TableRows::new(n as usize, dim, &[5, 9], vec![0.0; 2 * dim]).unwrap();
        assert_eq!(gather(&part, &[9, 4, 5]), Err(NotHeld(4)));
        let small = TableRows::all(2, 2, vec![1.0, -3.0, 0.0, 0.0]).unwrap();
        let mut t = gather(&small, &[0, 1]).unwrap();
        normalize_rows(&mut t, 2, RowNorm::L1);
        assert_eq!(t, vec![0.25, -0.75, 0.0, 0.0], "rows scaled to unit L1 norm; a zero row stays zero");
    }
}
