//! Turns what a converter read (edges, features, labels, split rule) into a
//! `format::Dataset`: symmetrisation, CSR by destination, generated features
//! and labels when the source has none, and the split.

use super::split::{self, SplitRule};
use super::{ConvertOptions, Format};
use crate::datasets::DatasetError;
use crate::format::{Dataset, DatasetMeta, FeatureTable};
use crate::graph::Csr;
use crate::util::rng::{Rng, hash_of};
use rand::{Rng as _, SeedableRng};
use rayon::prelude::*;

/// Feature dimension generated for graphs without features when none is asked for.
pub const DEFAULT_GENERATED_DIM: u32 = 128;
/// Split used with generated labels, as the paper did for its web graphs.
pub const GENERATED_LABEL_SPLIT: [f64; 3] = [0.65, 0.10, 0.25];

const FEATURE_TAG: u64 = 0x6665_6174; // "feat"
const LABEL_TAG: u64 = 0x6c61_6265; // "labe"

/// What a converter read, before the format-independent steps.
#[derive(Debug, Default)]
pub struct Raw {
    pub num_nodes: usize,
    /// (source, destination) pairs as read; every id < `num_nodes`.
    pub edges: Vec<(u32, u32)>,
    pub features: Option<Dense>,
    /// Per node, -1 = unlabelled.
    pub labels: Option<Vec<i32>>,
    /// At least max label + 1 (more when the source names unused classes).
    pub num_classes: u32,
    pub split: SplitRule,
}

/// Row-major f32 features.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub dim: u32,
    pub values: Vec<f32>,
}

/// The widest feature row a converter densifies. A column index beyond it
/// is far more likely a corrupt file than a real feature, and densifying it
/// would allocate nodes x 2^20 x 4 bytes or more from a single number.
pub const MAX_FEATURE_DIM: u32 = 1 << 20;

/// Elements of a dense `num_nodes` x `dim` feature matrix, checked: refused
/// beyond `MAX_FEATURE_DIM` columns or when the count overflows.
pub fn dense_len(num_nodes: usize, dim: u32) -> Result<usize, String> {
    if dim > MAX_FEATURE_DIM {
        return Err(format!(
            "features {dim} wide (a column index or a declared dimension) exceed the {MAX_FEATURE_DIM} columns a dense feature matrix may have; the file is corrupt, or its columns need renumbering"
        ));
    }
    num_nodes
        .checked_mul(dim as usize)
        .filter(|&n| n.checked_mul(4).is_some())
        .ok_or_else(|| format!("{num_nodes} nodes x {dim} features do not fit in memory"))
}

/// Sparse binary feature rows (column lists) collected while parsing, before
/// the dimension is known.
#[derive(Debug, Default)]
pub struct SparseRows {
    indptr: Vec<usize>,
    cols: Vec<u32>,
}

impl SparseRows {
    pub fn new() -> Self {
        SparseRows { indptr: vec![0], cols: Vec::new() }
    }
    pub fn push_row(&mut self, cols: impl IntoIterator<Item = u32>) {
        self.cols.extend(cols);
        self.indptr.push(self.cols.len());
    }
    pub fn num_rows(&self) -> usize {
        self.indptr.len() - 1
    }
    /// Smallest dimension that holds every column.
    pub fn min_dim(&self) -> u32 {
        self.cols.iter().max().map_or(0, |&c| c + 1)
    }
    /// Ones at the listed columns; rows beyond `num_rows` (nodes without a row) stay zero.
    pub fn to_dense(&self, num_nodes: usize, dim: u32) -> Result<Dense, String> {
        let d = dim as usize;
        let mut values = vec![0f32; dense_len(num_nodes, dim)?];
        if d > 0 {
            values.par_chunks_mut(d).take(self.num_rows()).enumerate().for_each(|(v, row)| {
                for &c in &self.cols[self.indptr[v]..self.indptr[v + 1]] {
                    row[c as usize] = 1.0;
                }
            });
        }
        Ok(Dense { dim, values })
    }
}

/// Uniform [0, 1) features: row v is a pure function of (seed, v), so any
/// thread count gives the same bytes.
pub fn generated_features(num_nodes: usize, dim: u32, seed: u64) -> Dense {
    let d = dim as usize;
    let mut values = vec![0f32; num_nodes * d];
    if d > 0 {
        values.par_chunks_mut(d).enumerate().for_each(|(v, row)| {
            let mut r = Rng::seed_from_u64(hash_of(seed, &[FEATURE_TAG, v as u64]));
            row.iter_mut().for_each(|x| *x = r.random::<f32>());
        });
    }
    Dense { dim, values }
}

/// Uniform random labels in 0..classes, each a pure function of (seed, v).
pub fn generated_labels(num_nodes: usize, classes: u32, seed: u64) -> Vec<i32> {
    (0..num_nodes as u64).into_par_iter().map(|v| (hash_of(seed, &[LABEL_TAG, v]) % classes as u64) as i32).collect()
}

/// Every feature value is a finite number: one NaN or infinity (an OGB CSV's
/// `nan`, a value past f32's range, an npz array holding them) made the first
/// training iteration's loss NaN, long after the import said nothing.
fn check_finite(f: &Dense) -> Result<(), String> {
    let Some(i) = f.values.par_iter().position_first(|x| !x.is_finite()) else {
        return Ok(());
    };
    let d = (f.dim as usize).max(1);
    Err(format!(
        "feature value {} at node {} column {} (of {} columns): features must be finite numbers; fix that value in the source",
        f.values[i],
        i / d,
        i % d,
        f.dim
    ))
}

/// The format-independent steps; `source` is recorded in the metadata.
pub fn finish(
    mut raw: Raw,
    format: Format,
    name: &str,
    source: &str,
    seed: u64,
    opts: &ConvertOptions,
) -> Result<Dataset, DatasetError> {
    let n = raw.num_nodes;
    if n > u32::MAX as usize {
        return Err(DatasetError::invalid(source, format!("{n} nodes do not fit 32-bit node ids")));
    }
    if let Some(&(s, d)) = raw.edges.iter().find(|&&(s, d)| s as usize >= n || d as usize >= n) {
        return Err(DatasetError::invalid(source, format!("edge {s} -> {d} names a node beyond the node count {n}")));
    }
    let symmetrize = opts.symmetrize.unwrap_or(format.undirected_by_default());
    if symmetrize {
        raw.edges.reserve(raw.edges.len());
        for i in 0..raw.edges.len() {
            let (s, d) = raw.edges[i];
            raw.edges.push((d, s));
        }
    }
    let csr = Csr::from_edges(n, &raw.edges, !opts.self_loops);
    drop(raw.edges);

    let features_generated = raw.features.is_none();
    let features = match raw.features {
        Some(f) => {
            if opts.feature_dim.is_some_and(|d| d != f.dim) {
                return Err(DatasetError::input(format!(
                    "--feature-dim applies to graphs without features, and {source} has {}-dim features",
                    f.dim
                )));
            }
            check_finite(&f).map_err(|m| DatasetError::invalid(source, m))?;
            f
        }
        None => {
            let dim = opts.feature_dim.unwrap_or(DEFAULT_GENERATED_DIM);
            dense_len(n, dim).map_err(|m| DatasetError::input(format!("--feature-dim {dim} for {source}: {m}")))?;
            generated_features(n, dim, seed)
        }
    };

    let (labels, num_classes, default_split) = match (raw.labels, opts.generated_classes) {
        (Some(_), Some(_)) => {
            return Err(DatasetError::input(format!(
                "generated_classes applies to graphs without labels, and {source} has labels"
            )));
        }
        (Some(l), None) => {
            if l.len() != n {
                return Err(DatasetError::invalid(source, format!("{} labels for {n} nodes", l.len())));
            }
            let classes = raw.num_classes.max(l.iter().max().map_or(0, |&m| (m + 1).max(0) as u32));
            (l, classes, raw.split)
        }
        (None, Some(0)) => return Err(DatasetError::input("generated_classes must be at least 1")),
        (None, Some(c)) => (generated_labels(n, c, seed), c, SplitRule::Fractions(GENERATED_LABEL_SPLIT)),
        (None, None) => (vec![-1; n], 0, raw.split),
    };
    let rule = match (&opts.split, &opts.split_per_class) {
        (Some(_), Some(_)) => {
            return Err(DatasetError::input("split and split_per_class both set: give one of them"));
        }
        (Some(f), None) => SplitRule::Fractions(split::fractions(f).map_err(DatasetError::input)?),
        (None, Some(c)) => {
            let [per_class, val, test] = split::per_class(c).map_err(DatasetError::input)?;
            let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            SplitRule::PerClass { per_class: count(per_class), val: count(val), test: count(test) }
        }
        (None, None) => default_split,
    };
    let [train, val, test] = split::apply(&rule, &labels, num_classes, seed);

    let ds = Dataset {
        meta: DatasetMeta {
            name: name.to_owned(),
            source: source.to_owned(),
            num_nodes: n as u64,
            num_edges: csr.indices.len() as u64,
            feature_dim: features.dim,
            num_classes,
            directed: !symmetrize,
            generated_features: features_generated,
            seed,
        },
        indptr: csr.indptr,
        indices: csr.indices,
        features: FeatureTable::from_dense(features.values, features.dim as usize, opts.features),
        labels,
        train,
        val,
        test,
    };
    ds.check().map_err(|e| DatasetError::invalid(source, e))?;
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_features_are_seeded_and_uniform() {
        let a = generated_features(1000, 16, 3);
        assert_eq!(a, generated_features(1000, 16, 3));
        assert_ne!(a, generated_features(1000, 16, 4));
        assert!(a.values.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = a.values.iter().sum::<f32>() / a.values.len() as f32;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }

    #[test]
    fn symmetrises_drops_self_loops_and_records_direction() {
        let raw = Raw { num_nodes: 3, edges: vec![(0, 1), (1, 2), (2, 2)], ..Default::default() };
        let ds = finish(raw, Format::Edgelist, "t", "t.txt", 0, &ConvertOptions::default()).unwrap();
        assert_eq!((ds.meta.num_edges, ds.meta.directed), (2, true));
        let opts = ConvertOptions { symmetrize: Some(true), ..Default::default() };
        let raw = Raw { num_nodes: 3, edges: vec![(0, 1), (1, 2), (2, 2)], ..Default::default() };
        let ds = finish(raw, Format::Edgelist, "t", "t.txt", 0, &opts).unwrap();
        assert_eq!((ds.meta.num_edges, ds.meta.directed), (4, false));
        assert_eq!(ds.indices, vec![1, 0, 2, 1]);
        assert!(ds.meta.generated_features && ds.meta.feature_dim == DEFAULT_GENERATED_DIM);
    }

    #[test]
    fn generated_labels_get_the_web_graph_split() {
        let opts = ConvertOptions { generated_classes: Some(60), ..Default::default() };
        let raw = Raw { num_nodes: 1000, ..Default::default() };
        let ds = finish(raw, Format::Edgelist, "t", "t.txt", 0, &opts).unwrap();
        assert_eq!(ds.meta.num_classes, 60);
        assert_eq!([ds.train.len(), ds.val.len(), ds.test.len()], [650, 100, 250]);
        assert!(ds.labels.iter().all(|&l| (0..60).contains(&l)));
    }
}
