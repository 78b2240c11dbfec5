use super::features::{FeatureTable, FeatureView, RowRef};
use super::header::Kind;
use super::mapped::{Mapped, write_archive};
use super::{FormatError, native};
use crate::graph::CsrView;
use rkyv::{Archive, Deserialize, Serialize};
use std::path::Path;

/// Dataset metadata, stored inside the archive.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, serde::Serialize)]
pub struct DatasetMeta {
    pub name: String,
    /// Where it came from: a URL, a local path, or `synthetic:<preset>`.
    pub source: String,
    pub num_nodes: u64,
    pub num_edges: u64,
    pub feature_dim: u32,
    pub num_classes: u32,
    /// False when every edge is stored in both directions.
    pub directed: bool,
    /// True when features were generated (seeded), not read from the source.
    pub generated_features: bool,
    pub seed: u64,
}

/// A whole dataset: CSR by destination, f32 features (dense row-major or CSR), labels
/// (-1 = unlabelled) and the train/val/test node ids.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Dataset {
    pub meta: DatasetMeta,
    pub indptr: Vec<u64>,
    pub indices: Vec<u32>,
    pub features: FeatureTable,
    pub labels: Vec<i32>,
    pub train: Vec<u32>,
    pub val: Vec<u32>,
    pub test: Vec<u32>,
}

impl Dataset {
    pub fn write(&self, path: &Path) -> Result<(), FormatError> {
        if let Err(e) = self.check() {
            return Err(FormatError::Serialize { path: path.into(), detail: e });
        }
        write_archive(path, Kind::Dataset, self)
    }

    /// The invariants every reader relies on.
    pub fn check(&self) -> Result<(), String> {
        check_parts(
            &self.meta,
            CsrView { indptr: &self.indptr, indices: &self.indices },
            self.features.view(self.meta.feature_dim as usize),
            &self.labels,
            [&self.train, &self.val, &self.test],
        )
    }
}

fn check_parts(
    meta: &DatasetMeta,
    g: CsrView<'_>,
    feats: FeatureView<'_>,
    labels: &[i32],
    splits: [&[u32]; 3],
) -> Result<(), String> {
    let n = meta.num_nodes as usize;
    shape_check(meta, g, feats, labels.len())?;
    g.check()?;
    feats.verify()?;
    if let Some(i) = labels.iter().position(|&l| l < -1 || (l >= 0 && l as u32 >= meta.num_classes)) {
        return Err(format!("node {i} has label {} but there are {} classes", labels[i], meta.num_classes));
    }
    for (name, ids) in ["train", "val", "test"].iter().zip(splits) {
        if let Some(&v) = ids.iter().find(|&&v| v as usize >= n) {
            return Err(format!("{name} split names node {v} but there are {n} nodes"));
        }
    }
    Ok(())
}

/// O(1) consistency of lengths: what `open` checks before anything is indexed.
fn shape_check(meta: &DatasetMeta, g: CsrView<'_>, feats: FeatureView<'_>, nlabels: usize) -> Result<(), String> {
    let n = meta.num_nodes as usize;
    if g.indptr.len() != n + 1 {
        return Err(format!("{} CSR offsets for {n} nodes", g.indptr.len()));
    }
    if g.indices.len() as u64 != meta.num_edges {
        return Err(format!("{} edges stored, metadata says {}", g.indices.len(), meta.num_edges));
    }
    feats.shape_check(n)?;
    if nlabels != n {
        return Err(format!("{nlabels} labels for {n} nodes"));
    }
    Ok(())
}

/// An opened `dataset.lgnn`: zero-copy views into the mmapped archive.
pub struct DatasetFile {
    inner: Mapped<Dataset>,
}

/// What `info` and `download --json` print.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetSummary {
    pub name: String,
    pub path: String,
    pub nodes: u64,
    pub edges: u64,
    pub feature_dim: u32,
    pub classes: u32,
    pub train: usize,
    pub val: usize,
    pub test: usize,
    pub directed: bool,
    pub generated_features: bool,
    /// `dense` or `sparse`: how the features are stored.
    pub feature_storage: &'static str,
    /// Feature values stored (the non-zeros when sparse).
    pub feature_values: u64,
    pub source: String,
    pub bytes: u64,
    pub sha256: String,
}

impl DatasetFile {
    /// mmap + structural validation + O(1) shape checks. Use `verify` before
    /// trusting neighbour ids on a file of unknown history.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        let inner = Mapped::<Dataset>::open(path, Kind::Dataset)?;
        let f = DatasetFile { inner };
        shape_check(&f.meta_owned(), f.graph(), f.features(), f.labels().len())
            .map_err(|e| FormatError::corrupt(f.path(), e))?;
        Ok(f)
    }

    /// Open, then hash the payload and check every invariant (O(n + m)).
    pub fn open_verified(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        let f = Self::open(path)?;
        f.verify()?;
        Ok(f)
    }

    pub fn verify(&self) -> Result<(), FormatError> {
        self.inner.verify_checksum()?;
        check_parts(
            &self.meta_owned(),
            self.graph(),
            self.features(),
            self.labels(),
            [self.train(), self.val(), self.test()],
        )
        .map_err(|e| FormatError::corrupt(self.path(), e))
    }

    pub fn path(&self) -> &Path {
        self.inner.path()
    }
    pub fn archived(&self) -> &ArchivedDataset {
        self.inner.get()
    }
    pub fn meta_owned(&self) -> DatasetMeta {
        let m = &self.archived().meta;
        DatasetMeta {
            name: m.name.to_string(),
            source: m.source.to_string(),
            num_nodes: m.num_nodes.to_native(),
            num_edges: m.num_edges.to_native(),
            feature_dim: m.feature_dim.to_native(),
            num_classes: m.num_classes.to_native(),
            directed: m.directed,
            generated_features: m.generated_features,
            seed: m.seed.to_native(),
        }
    }
    pub fn num_nodes(&self) -> usize {
        self.archived().meta.num_nodes.to_native() as usize
    }
    pub fn feature_dim(&self) -> usize {
        self.archived().meta.feature_dim.to_native() as usize
    }
    pub fn num_classes(&self) -> usize {
        self.archived().meta.num_classes.to_native() as usize
    }
    pub fn graph(&self) -> CsrView<'_> {
        let a = self.archived();
        CsrView { indptr: native(&a.indptr[..]), indices: native(&a.indices[..]) }
    }
    /// The feature table, dense or sparse as stored.
    pub fn features(&self) -> FeatureView<'_> {
        self.archived().features.view(self.feature_dim())
    }
    /// Node `v`'s features as stored (`v` < `num_nodes`).
    pub fn feature_row(&self, v: u32) -> RowRef<'_> {
        self.features().row(v as usize)
    }
    pub fn labels(&self) -> &[i32] {
        native(&self.archived().labels[..])
    }
    pub fn train(&self) -> &[u32] {
        native(&self.archived().train[..])
    }
    pub fn val(&self) -> &[u32] {
        native(&self.archived().val[..])
    }
    pub fn test(&self) -> &[u32] {
        native(&self.archived().test[..])
    }
    pub fn file_len(&self) -> u64 {
        self.inner.file_len()
    }
    /// The payload checksum from the header: identifies this exact dataset
    /// (partitions record it to detect a re-downloaded or regenerated dataset).
    pub fn checksum(&self) -> u64 {
        self.inner.header().checksum
    }

    pub fn summary(&self) -> DatasetSummary {
        let m = self.meta_owned();
        DatasetSummary {
            name: m.name,
            path: self.path().display().to_string(),
            nodes: m.num_nodes,
            edges: m.num_edges,
            feature_dim: m.feature_dim,
            classes: m.num_classes,
            train: self.train().len(),
            val: self.val().len(),
            test: self.test().len(),
            directed: m.directed,
            generated_features: m.generated_features,
            feature_storage: if self.features().is_sparse() { "sparse" } else { "dense" },
            feature_values: self.features().stored() as u64,
            source: m.source,
            bytes: self.file_len(),
            sha256: self.inner.sha256_hex(),
        }
    }
}
