//! Feature storage shared by dataset archives and partition files: dense
//! row-major f32, or CSR (f32 values, u32 columns, u64 row offsets) for
//! bag-of-words style features where most values are zero. Readers see rows
//! through `RowRef`, which either form can densify on demand.

use super::native;
use rkyv::{Archive, Deserialize, Serialize};

/// Below this fraction of non-zero values, `--features auto` stores CSR.
pub const AUTO_SPARSE_DENSITY: f64 = 0.10;

/// How an import stores features.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureStorage {
    /// Sparse when fewer than `AUTO_SPARSE_DENSITY` of the values are non-zero.
    #[default]
    Auto,
    Dense,
    Sparse,
}

impl std::str::FromStr for FeatureStorage {
    type Err = crate::BadInput;
    fn from_str(s: &str) -> Result<Self, crate::BadInput> {
        match s {
            "auto" => Ok(FeatureStorage::Auto),
            "dense" => Ok(FeatureStorage::Dense),
            "sparse" => Ok(FeatureStorage::Sparse),
            _ => Err(crate::BadInput::new(format!("unknown feature storage `{s}`: expected auto, dense or sparse"))),
        }
    }
}

/// The feature rows of an archive.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FeatureTable {
    /// Row-major, `rows * dim` values.
    Dense(Vec<f32>),
    /// Row i's non-zeros are `indices/values[indptr[i]..indptr[i + 1]]`, columns ascending.
    Sparse { indptr: Vec<u64>, indices: Vec<u32>, values: Vec<f32> },
}

impl FeatureTable {
    /// Stores row-major `values` (`dim` wide) as `storage` asks.
    pub fn from_dense(values: Vec<f32>, dim: usize, storage: FeatureStorage) -> FeatureTable {
        let nnz = values.iter().filter(|&&v| v != 0.0).count();
        let sparse = match storage {
            FeatureStorage::Dense => false,
            FeatureStorage::Sparse => true,
            FeatureStorage::Auto => !values.is_empty() && (nnz as f64) < AUTO_SPARSE_DENSITY * values.len() as f64,
        };
        if !sparse || dim == 0 {
            return FeatureTable::Dense(values);
        }
        let rows = values.len() / dim;
        let mut indptr = Vec::with_capacity(rows + 1);
        let (mut indices, mut vals) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        indptr.push(0);
        for row in values.chunks_exact(dim) {
            for (c, &v) in row.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                indices.push(c as u32);
                vals.push(v);
            }
            indptr.push(indices.len() as u64);
        }
        FeatureTable::Sparse { indptr, indices, values: vals }
    }

    pub fn view(&self, dim: usize) -> FeatureView<'_> {
        match self {
            FeatureTable::Dense(v) => FeatureView::Dense { dim, values: v },
            FeatureTable::Sparse { indptr, indices, values } => FeatureView::Sparse { dim, indptr, indices, values },
        }
    }
}

impl ArchivedFeatureTable {
    pub fn view(&self, dim: usize) -> FeatureView<'_> {
        match self {
            ArchivedFeatureTable::Dense(v) => FeatureView::Dense { dim, values: native(&v[..]) },
            ArchivedFeatureTable::Sparse { indptr, indices, values } => FeatureView::Sparse {
                dim,
                indptr: native(&indptr[..]),
                indices: native(&indices[..]),
                values: native(&values[..]),
            },
        }
    }
}

/// Zero-copy view of a feature table.
#[derive(Clone, Copy, Debug)]
pub enum FeatureView<'a> {
    Dense { dim: usize, values: &'a [f32] },
    Sparse { dim: usize, indptr: &'a [u64], indices: &'a [u32], values: &'a [f32] },
}

impl<'a> FeatureView<'a> {
    pub fn dim(&self) -> usize {
        match *self {
            FeatureView::Dense { dim, .. } | FeatureView::Sparse { dim, .. } => dim,
        }
    }
    pub fn is_sparse(&self) -> bool {
        matches!(self, FeatureView::Sparse { .. })
    }
    /// Values stored: `rows * dim` when dense, the non-zeros when sparse.
    pub fn stored(&self) -> usize {
        match *self {
            FeatureView::Dense { values, .. } | FeatureView::Sparse { values, .. } => values.len(),
        }
    }

    /// Mean of `RowRef::wire_bytes` over the rows.
    pub fn mean_row_bytes(&self) -> f64 {
        match *self {
            FeatureView::Dense { dim, .. } => 4.0 * dim as f64,
            FeatureView::Sparse { values, .. } => 4.0 + 8.0 * values.len() as f64 / self.rows().max(1) as f64,
        }
    }

    /// O(1) check that the table holds `rows` rows (what `open` runs).
    pub fn shape_check(&self, rows: usize) -> Result<(), String> {
        match *self {
            FeatureView::Dense { dim, values } => {
                if (rows as u64).checked_mul(dim as u64) != Some(values.len() as u64) {
                    return Err(format!("{} feature values for {rows} rows x {dim} dims", values.len()));
                }
            }
            FeatureView::Sparse { indptr, indices, values, .. } => {
                if indptr.len() != rows + 1 {
                    return Err(format!("{} sparse feature offsets for {rows} rows", indptr.len()));
                }
                if indices.len() != values.len() {
                    return Err(format!("{} feature columns for {} values", indices.len(), values.len()));
                }
                if indptr[0] != 0 || indptr[rows] != values.len() as u64 {
                    return Err(format!(
                        "sparse feature offsets span {}..{} but {} values are stored",
                        indptr[0],
                        indptr[rows],
                        values.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// O(non-zeros) check: offsets monotone, columns ascending and below `dim`
    /// (what `verify` runs; `row` relies on the offsets being monotone).
    pub fn verify(&self) -> Result<(), String> {
        let FeatureView::Sparse { dim, indptr, indices, .. } = *self else { return Ok(()) };
        for (r, w) in indptr.windows(2).enumerate() {
            if w[0] > w[1] {
                return Err(format!("sparse feature offsets decrease at row {r}"));
            }
            // Monotone up to here, yet past the end: caught before it is used to slice.
            if w[1] > indices.len() as u64 {
                return Err(format!(
                    "sparse feature offset {} of row {r} is past the {} values stored",
                    w[1],
                    indices.len()
                ));
            }
            let cols = &indices[w[0] as usize..w[1] as usize];
            if let Some(&c) = cols.iter().find(|&&c| c as usize >= dim) {
                return Err(format!("feature row {r} has column {c} but there are {dim} dims"));
            }
            if cols.windows(2).any(|p| p[0] >= p[1]) {
                return Err(format!("feature row {r} has columns out of order"));
            }
        }
        Ok(())
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        match *self {
            FeatureView::Dense { dim, values } => values.len().checked_div(dim).unwrap_or(0),
            FeatureView::Sparse { indptr, .. } => indptr.len().saturating_sub(1),
        }
    }

    /// Every row, row-major, zeros included.
    pub fn to_dense(&self) -> Vec<f32> {
        let d = self.dim();
        let mut out = vec![0f32; self.rows() * d];
        for (i, o) in out.chunks_exact_mut(d.max(1)).enumerate() {
            self.row(i).write_dense(o);
        }
        out
    }

    /// Row `i` (< rows, as `shape_check` established).
    #[inline]
    pub fn row(&self, i: usize) -> RowRef<'a> {
        match *self {
            FeatureView::Dense { dim, values } => RowRef::Dense(&values[i * dim..(i + 1) * dim]),
            FeatureView::Sparse { indptr, indices, values, .. } => {
                // Offsets of an unverified (corrupt) table yield a short row, never a panic.
                let b = (indptr[i + 1] as usize).min(values.len()).min(indices.len());
                let a = (indptr[i] as usize).min(b);
                RowRef::Sparse { indices: &indices[a..b], values: &values[a..b] }
            }
        }
    }
}

/// One feature row, as stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowRef<'a> {
    Dense(&'a [f32]),
    /// The non-zeros: ascending columns and their values.
    Sparse {
        indices: &'a [u32],
        values: &'a [f32],
    },
}

impl RowRef<'_> {
    /// Writes the row into `out` (the full `dim` width), zeros included.
    #[inline]
    pub fn write_dense(&self, out: &mut [f32]) {
        match *self {
            RowRef::Dense(r) => out.copy_from_slice(r),
            RowRef::Sparse { indices, values } => {
                out.fill(0.0);
                for (&c, &v) in indices.iter().zip(values) {
                    if let Some(o) = out.get_mut(c as usize) {
                        *o = v;
                    }
                }
            }
        }
    }

    /// Appends the row to `out` (the full `dim` width), zeros included: no
    /// zero-filled buffer first, as `write_dense` needs.
    #[inline]
    pub fn extend_dense(&self, dim: usize, out: &mut Vec<f32>) {
        match *self {
            RowRef::Dense(r) => out.extend_from_slice(r),
            RowRef::Sparse { .. } => {
                let start = out.len();
                out.resize(start + dim, 0.0);
                self.write_dense(&mut out[start..]);
            }
        }
    }

    /// Columns `cols` of the row into `out` (`cols.len()` values), zeros included.
    pub fn write_columns(&self, cols: std::ops::Range<usize>, out: &mut [f32]) {
        match *self {
            RowRef::Dense(r) => out.copy_from_slice(&r[cols]),
            RowRef::Sparse { indices, values } => {
                out.fill(0.0);
                let first = indices.partition_point(|&c| (c as usize) < cols.start);
                for (&c, &v) in indices[first..].iter().zip(&values[first..]) {
                    if c as usize >= cols.end {
                        break;
                    }
                    out[c as usize - cols.start] = v;
                }
            }
        }
    }

    /// Sum of absolute values, in column order (zeros add nothing, so both forms agree).
    pub fn abs_sum(&self) -> f32 {
        match *self {
            RowRef::Dense(r) => r.iter().map(|x| x.abs()).sum(),
            RowRef::Sparse { values, .. } => values.iter().map(|x| x.abs()).sum(),
        }
    }

    /// The row as `dim` values.
    pub fn to_dense(&self, dim: usize) -> Vec<f32> {
        let mut out = vec![0f32; dim];
        self.write_dense(&mut out);
        out
    }

    /// Bytes the row takes in a feature service reply: its values when dense;
    /// a count, then a column and a value per non-zero when sparse.
    pub fn wire_bytes(&self) -> u64 {
        match *self {
            RowRef::Dense(r) => 4 * r.len() as u64,
            RowRef::Sparse { values, .. } => 4 + 8 * values.len() as u64,
        }
    }

    /// Values stored for the row.
    pub fn stored(&self) -> usize {
        match *self {
            RowRef::Dense(r) => r.len(),
            RowRef::Sparse { values, .. } => values.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FeatureView;

    /// Offsets that rise past the values stored (in an archive whose checksum
    /// was made to match) are reported, not used to slice.
    #[test]
    fn an_offset_past_the_values_is_an_error_not_a_panic() {
        let (indices, values) = ([0u32, 1, 2], [1.0f32; 3]);
        let view = |indptr: &'static [u64]| FeatureView::Sparse { dim: 4, indptr, indices: &indices, values: &values };
        let e = view(&[0, 1 << 30, 3]).verify().unwrap_err();
        assert!(e.contains("offset 1073741824 of row 0 is past the 3 values"), "{e}");
        assert!(view(&[0, 2, 3]).verify().is_ok());
    }
}
