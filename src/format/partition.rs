use super::features::{FeatureTable, FeatureView, RowRef};
use super::header::Kind;
use super::mapped::{Mapped, write_archive};
use super::{FormatError, native};
use rkyv::{Archive, Deserialize, Serialize};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The worker that owns part `part` when a partitioning of `parts` parts is
/// spread over `workers` workers (`parts >= workers`): `part * workers / parts`,
/// so every worker owns a contiguous range of parts (`worker_parts`), at least
/// one. With `parts == workers`, part p is worker p's. The one rule every
/// consumer of a part -> worker assignment goes through.
pub fn part_worker(part: usize, parts: usize, workers: usize) -> usize {
    debug_assert!(workers >= 1 && parts >= workers && part < parts);
    part * workers / parts
}

/// The parts worker `worker` of `workers` owns (those `part_worker` maps to it):
/// `ceil(worker * parts / workers) .. ceil((worker + 1) * parts / workers)`.
pub fn worker_parts(worker: usize, parts: usize, workers: usize) -> Range<usize> {
    (worker * parts).div_ceil(workers)..((worker + 1) * parts).div_ceil(workers)
}

/// node -> owning worker of a node -> part map of `parts` parts spread over
/// `workers` workers by `part_worker`: a manifest's, or one just cut and
/// not yet written.
pub fn node_worker(node_part: &[u16], parts: usize, workers: usize) -> Vec<u16> {
    let of_part: Vec<u16> = (0..parts).map(|p| part_worker(p, parts, workers) as u16).collect();
    node_part.iter().map(|&p| of_part[p as usize]).collect()
}

/// `parts/<method>-<k>/manifest`: who owns which node, and how good the cut is.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PartManifest {
    pub dataset: String,
    /// Header checksum of the dataset archive this was cut from: a partition of
    /// an older download is detected and refused.
    pub dataset_checksum: u64,
    pub method: String,
    pub parts: u32,
    pub seed: u64,
    /// The balance constraints the partitioner was given, e.g. `nodes,train`.
    pub constraints: String,
    /// node -> part
    pub node_part: Vec<u16>,
    /// node -> row of its features inside its part's file (owned ids are sorted)
    pub local_index: Vec<u32>,
    pub part_nodes: Vec<u64>,
    pub part_train: Vec<u64>,
    /// Stored CSR entries whose endpoints sit in different parts.
    pub edge_cut: u64,
    pub edges: u64,
}

impl PartManifest {
    pub fn balance(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        if total == 0 || counts.is_empty() {
            return 1.0;
        }
        let avg = total as f64 / counts.len() as f64;
        *counts.iter().max().unwrap_or(&0) as f64 / avg
    }
}

/// `parts/<method>-<k>/part-<i>.lgnn`: the owned ids (sorted) and their feature rows.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PartFeatures {
    pub part: u32,
    pub parts: u32,
    pub feature_dim: u32,
    pub owned: Vec<u32>,
    pub features: FeatureTable,
}

pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("manifest")
}

pub fn part_path(dir: &Path, part: u32) -> PathBuf {
    dir.join(format!("part-{part}.lgnn"))
}

impl PartManifest {
    pub fn write(&self, dir: &Path) -> Result<(), FormatError> {
        write_archive(&manifest_path(dir), Kind::PartManifest, self)
    }
}

impl PartFeatures {
    pub fn write(&self, dir: &Path) -> Result<(), FormatError> {
        write_archive(&part_path(dir, self.part), Kind::PartFeatures, self)
    }
}

/// An opened manifest.
pub struct ManifestFile {
    inner: Mapped<PartManifest>,
}

impl ManifestFile {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, FormatError> {
        let inner = Mapped::<PartManifest>::open(manifest_path(dir.as_ref()), Kind::PartManifest)?;
        let f = ManifestFile { inner };
        let a = f.archived();
        let (n, k) = (a.node_part.len(), a.parts.to_native() as usize);
        if a.local_index.len() != n || a.part_nodes.len() != k || a.part_train.len() != k {
            return Err(FormatError::corrupt(f.inner.path(), "inconsistent table lengths"));
        }
        if let Some(v) = f.node_part().iter().position(|&p| p as usize >= k) {
            return Err(FormatError::corrupt(
                f.inner.path(),
                format!("node {v} assigned to part {} of {k}", f.node_part()[v]),
            ));
        }
        Ok(f)
    }
    /// Checksum, then O(n) consistency: the per-part counts match the map and
    /// every node's local index is a row of its part's file.
    pub fn verify(&self) -> Result<(), FormatError> {
        self.inner.verify_checksum()?;
        let counts = self.part_nodes();
        if counts.iter().sum::<u64>() != self.node_part().len() as u64 {
            return Err(FormatError::corrupt(self.inner.path(), "per-part node counts do not add up to the nodes"));
        }
        let bad = self.node_part().iter().zip(self.local_index()).position(|(&p, &i)| i as u64 >= counts[p as usize]);
        if let Some(v) = bad {
            return Err(FormatError::corrupt(self.inner.path(), format!("node {v} has a row outside its part")));
        }
        Ok(())
    }
    pub fn path(&self) -> &Path {
        self.inner.path()
    }
    pub fn archived(&self) -> &ArchivedPartManifest {
        self.inner.get()
    }
    pub fn parts(&self) -> usize {
        self.archived().parts.to_native() as usize
    }
    pub fn method(&self) -> &str {
        self.archived().method.as_str()
    }
    pub fn node_part(&self) -> &[u16] {
        native(&self.archived().node_part[..])
    }
    /// node -> owning worker when this partitioning's parts are spread over
    /// `workers` workers by `part_worker` (equal to `node_part` when parts == workers).
    pub fn node_worker(&self, workers: usize) -> Vec<u16> {
        node_worker(self.node_part(), self.parts(), workers)
    }
    pub fn local_index(&self) -> &[u32] {
        native(&self.archived().local_index[..])
    }
    pub fn part_nodes(&self) -> &[u64] {
        native(&self.archived().part_nodes[..])
    }
    pub fn part_train(&self) -> &[u64] {
        native(&self.archived().part_train[..])
    }
    /// The manifest's own checksum (its header's): which partitioning this
    /// is, as a run's driver and workers compare it.
    pub fn checksum(&self) -> u64 {
        self.inner.header().checksum
    }
    pub fn dataset_checksum(&self) -> u64 {
        self.archived().dataset_checksum.to_native()
    }
    /// This partitioning is of `ds` (by the dataset's checksum and node count)
    /// into `parts` parts; the error says which does not hold.
    pub fn check_matches(&self, ds: &super::DatasetFile, parts: usize) -> Result<(), FormatError> {
        let bad = |m: String| Err(FormatError::corrupt(self.path(), m));
        if self.dataset_checksum() != ds.checksum() {
            return bad(format!(
                "was made from another version of the dataset (checksum {:016x}, the dataset's is {:016x}); delete the directory to re-partition",
                self.dataset_checksum(),
                ds.checksum()
            ));
        }
        if self.node_part().len() != ds.num_nodes() {
            return bad(format!("covers {} nodes, the dataset has {}", self.node_part().len(), ds.num_nodes()));
        }
        if self.parts() != parts {
            return bad(format!("has {} parts, {parts} are needed", self.parts()));
        }
        Ok(())
    }
    /// `check_matches` for a run of `workers` workers over `parts` parts
    /// (`parts >= workers`, each worker owning `worker_parts`).
    pub fn check_serves(&self, ds: &super::DatasetFile, parts: usize, workers: usize) -> Result<(), FormatError> {
        self.check_matches(ds, parts)?;
        if parts < workers {
            return Err(FormatError::corrupt(
                self.path(),
                format!("has {parts} parts, fewer than the {workers} workers that must each own one"),
            ));
        }
        Ok(())
    }
    pub fn seed(&self) -> u64 {
        self.archived().seed.to_native()
    }
    pub fn constraints(&self) -> &str {
        self.archived().constraints.as_str()
    }
    pub fn edge_cut(&self) -> u64 {
        self.archived().edge_cut.to_native()
    }
    pub fn edges(&self) -> u64 {
        self.archived().edges.to_native()
    }
}

/// An opened part feature file.
pub struct PartFile {
    inner: Mapped<PartFeatures>,
}

impl PartFile {
    pub fn open(dir: impl AsRef<Path>, part: u32) -> Result<Self, FormatError> {
        let inner = Mapped::<PartFeatures>::open(part_path(dir.as_ref(), part), Kind::PartFeatures)?;
        let f = PartFile { inner };
        let a = f.inner.get();
        if let Err(e) = f.features().shape_check(a.owned.len()) {
            return Err(FormatError::corrupt(
                f.inner.path(),
                format!("feature block does not match the owned ids: {e}"),
            ));
        }
        if a.part.to_native() != part {
            return Err(FormatError::corrupt(f.inner.path(), format!("holds part {} not {part}", a.part.to_native())));
        }
        Ok(f)
    }
    pub fn verify(&self) -> Result<(), FormatError> {
        self.inner.verify_checksum()?;
        self.features().verify().map_err(|e| FormatError::corrupt(self.inner.path(), e))
    }
    pub fn part(&self) -> u32 {
        self.inner.get().part.to_native()
    }
    pub fn owned(&self) -> &[u32] {
        native(&self.inner.get().owned[..])
    }
    pub fn feature_dim(&self) -> usize {
        self.inner.get().feature_dim.to_native() as usize
    }
    pub fn features(&self) -> FeatureView<'_> {
        self.inner.get().features.view(self.feature_dim())
    }
    /// Row `i` of this part (i = the manifest's local index of the node, < `owned().len()`).
    pub fn row(&self, i: u32) -> RowRef<'_> {
        self.features().row(i as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::{part_worker, worker_parts};

    #[test]
    fn every_worker_owns_the_contiguous_parts_that_map_to_it() {
        for workers in 1..=9 {
            for parts in workers..=3 * workers + 2 {
                let mut next = 0;
                for w in 0..workers {
                    let r = worker_parts(w, parts, workers);
                    assert_eq!(r.start, next, "K={parts} W={workers} w={w}");
                    assert!(!r.is_empty(), "K={parts} W={workers}: worker {w} owns no part");
                    assert!(r.clone().all(|p| part_worker(p, parts, workers) == w));
                    next = r.end;
                }
                assert_eq!(next, parts);
                if parts == workers {
                    assert!((0..parts).all(|p| part_worker(p, parts, workers) == p));
                }
            }
        }
    }
}
