//! Feature gather outside candle: the rows a block needs are copied from the
//! mmapped archive (or any other row source, e.g. a buffer of rows fetched
//! from remote owners) straight into the buffer that becomes the input tensor
//! (`model::Model::input` moves it into the tensor without a copy). Sparse
//! sources can also be gathered into `CsrRows` (`gather_rows`), which the
//! first layer multiplies without densifying.

use crate::comm::{NotHeld, RowSource};
use crate::format::{DatasetFile, RowRef};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Below this many values a gather runs on the calling thread.
const PAR_MIN_VALUES: usize = 1 << 16;

/// A whole dataset holds every row.
impl RowSource for DatasetFile {
    fn dim(&self) -> usize {
        self.feature_dim()
    }
    fn is_sparse(&self) -> bool {
        self.features().is_sparse()
    }
    #[inline]
    fn row(&self, id: u32) -> Option<RowRef<'_>> {
        ((id as usize) < self.num_nodes()).then(|| self.feature_row(id))
    }
}

/// Gathered rows in CSR: row i's non-zeros are `indices/values[indptr[i]..indptr[i + 1]]`,
/// columns ascending, each below `dim`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsrRows {
    pub dim: usize,
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl CsrRows {
    pub fn num_rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
    /// Row i's (columns, values).
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let r = self.indptr[i]..self.indptr[i + 1];
        (&self.indices[r.clone()], &self.values[r])
    }
    /// The non-zeros of `dim`-wide row-major `values`.
    pub fn from_dense(values: &[f32], dim: usize) -> CsrRows {
        let mut out = CsrRows { dim, indptr: vec![0], ..Default::default() };
        for row in values.chunks_exact(dim.max(1)) {
            out.push(RowRef::Dense(row));
        }
        out
    }
    /// Appends a row (the non-zeros of a dense one).
    pub fn push(&mut self, row: RowRef<'_>) {
        match row {
            RowRef::Dense(r) => {
                for (c, &v) in r.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                    self.indices.push(c as u32);
                    self.values.push(v);
                }
            }
            RowRef::Sparse { indices, values } => {
                self.indices.extend_from_slice(indices);
                self.values.extend_from_slice(values);
            }
        }
        self.indptr.push(self.values.len());
    }
    /// Row-major, zeros included.
    pub fn to_dense(&self) -> Vec<f32> {
        self.dense_rows(self.num_rows())
    }
    /// The first `n` rows, row-major, zeros included.
    pub fn dense_rows(&self, n: usize) -> Vec<f32> {
        let n = n.min(self.num_rows());
        let mut out = vec![0f32; n * self.dim];
        for i in 0..n {
            let (c, v) = self.row(i);
            RowRef::Sparse { indices: c, values: v }.write_dense(&mut out[i * self.dim..(i + 1) * self.dim]);
        }
        out
    }
    /// Bytes a CSR row block takes on the wire: u32 count per row, then u32 columns and f32 values.
    pub fn wire_bytes(&self) -> usize {
        4 * self.num_rows() + 8 * self.nnz()
    }
}

/// Gathered input rows: dense row-major, or CSR when the source stores them sparse.
#[derive(Clone, Debug, PartialEq)]
pub enum Rows {
    Dense(Vec<f32>),
    Sparse(CsrRows),
}

impl Rows {
    /// Row-major `dim`-wide values (densifies sparse rows).
    pub fn into_dense(self) -> Vec<f32> {
        match self {
            Rows::Dense(v) => v,
            Rows::Sparse(c) => c.to_dense(),
        }
    }
    /// Row `i` (`dim` wide).
    #[inline]
    pub fn row(&self, i: usize, dim: usize) -> RowRef<'_> {
        match self {
            Rows::Dense(v) => RowRef::Dense(&v[i * dim..(i + 1) * dim]),
            Rows::Sparse(c) => {
                let (indices, values) = c.row(i);
                RowRef::Sparse { indices, values }
            }
        }
    }
    pub fn is_sparse(&self) -> bool {
        matches!(self, Rows::Sparse(_))
    }
    /// Dense rows with fewer non-zeros than `--features auto` would keep
    /// dense become CSR (bag-of-words features imported dense): a consumer
    /// that keeps its input for a whole run then multiplies the non-zeros,
    /// not the width. Anything else comes back as it was.
    pub fn sparse_if_mostly_zero(self, dim: usize) -> Rows {
        match self {
            Rows::Dense(v) if !v.is_empty() => {
                let nnz = v.iter().filter(|x| **x != 0.0).count();
                if (nnz as f64) < crate::format::AUTO_SPARSE_DENSITY * v.len() as f64 {
                    Rows::Sparse(CsrRows::from_dense(&v, dim))
                } else {
                    Rows::Dense(v)
                }
            }
            rows => rows,
        }
    }
    /// Applies `norm` to each row (`dim` wide).
    pub fn normalize(&mut self, dim: usize, norm: RowNorm) {
        match self {
            Rows::Dense(v) => normalize_rows(v, dim, norm),
            Rows::Sparse(c) => normalize_sparse(c, norm),
        }
    }
}

/// The rows of `ids` as CSR, whatever the source stores (dense rows keep their non-zeros).
pub fn gather_sparse<S: RowSource + ?Sized>(src: &S, ids: &[u32]) -> Result<CsrRows, NotHeld> {
    let mut out = CsrRows { dim: src.dim(), indptr: Vec::with_capacity(ids.len() + 1), ..Default::default() };
    out.indptr.push(0);
    for &v in ids {
        out.push(src.row(v).ok_or(NotHeld(v))?);
    }
    Ok(out)
}

/// The rows of `ids`: CSR when `src` stores them sparse, dense otherwise.
pub fn gather_rows<S: RowSource + ?Sized>(src: &S, ids: &[u32]) -> Result<Rows, NotHeld> {
    if src.is_sparse() { gather_sparse(src, ids).map(Rows::Sparse) } else { gather(src, ids).map(Rows::Dense) }
}

/// Copies the rows of `ids` into `out` (`ids.len() * dim` values), in parallel when large.
pub fn gather_into<S: RowSource + ?Sized>(src: &S, ids: &[u32], out: &mut [MaybeUninit<f32>]) -> Result<(), NotHeld> {
    let dim = src.dim();
    assert_eq!(out.len(), ids.len() * dim, "gather output has the wrong length");
    if dim == 0 {
        return Ok(());
    }
    let copy = |(dst, &v): (&mut [MaybeUninit<f32>], &u32)| -> Result<(), NotHeld> {
        match src.row(v).ok_or(NotHeld(v))? {
            RowRef::Dense(r) => {
                dst.write_copy_of_slice(r);
            }
            RowRef::Sparse { indices, values } => {
                dst.iter_mut().for_each(|o| {
                    o.write(0.0);
                });
                for (&c, &x) in indices.iter().zip(values) {
                    if let Some(o) = dst.get_mut(c as usize) {
                        o.write(x);
                    }
                }
            }
        }
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
    // `ids.len()` chunks of `dim` values is written whole, by `write_copy_of_slice`
    // or by zero-filling it before the non-zeros of a sparse row are placed); an
    // error or a panic leaves before this line), so the first `n` elements are
    // initialised.
    unsafe { out.set_len(n) };
    Ok(out)
}

/// How gathered rows are scaled before they enter the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RowNorm {
    /// As stored.
    #[default]
    None,
    /// Each row divided by the sum of its absolute values (PyG's `NormalizeFeatures`).
    L1,
}

crate::value_names!(RowNorm, "--normalize");

/// `normalize_rows` on CSR rows: the same sums (zeros add nothing), so the same values.
pub fn normalize_sparse(rows: &mut CsrRows, norm: RowNorm) {
    if norm == RowNorm::None {
        return;
    }
    for w in rows.indptr.windows(2) {
        let row = &mut rows.values[w[0]..w[1]];
        let s: f32 = row.iter().map(|v| v.abs()).sum();
        if s > 0.0 {
            row.iter_mut().for_each(|v| *v /= s);
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

    #[test]
    fn mostly_zero_dense_rows_become_the_same_rows_in_csr() {
        // 3 rows of 20: 2 non-zeros of 60 (3 %), below the 10 % of `--features auto`.
        let mut v = vec![0f32; 60];
        v[3] = 1.5;
        v[47] = -2.0;
        match Rows::Dense(v.clone()).sparse_if_mostly_zero(20) {
            Rows::Sparse(c) => {
                assert_eq!((c.num_rows(), c.nnz()), (3, 2));
                assert_eq!(c.to_dense(), v);
            }
            Rows::Dense(_) => panic!("3 % non-zeros stayed dense"),
        }
        // 20 % non-zeros: kept dense, untouched.
        let busy: Vec<f32> = (0..60).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
        assert_eq!(Rows::Dense(busy.clone()).sparse_if_mostly_zero(20), Rows::Dense(busy));
    }
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
                assert_eq!(RowRef::Dense(&got[i * dim..(i + 1) * dim]), src.row(v).unwrap());
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
