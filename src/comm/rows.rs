//! Where feature rows come from: a worker's own partition file, or a table in
//! memory (the feature cache, tests). Lookups are by global node id through a
//! dense id -> slot table: one array read per row (see benches/comm.rs,
//! `cache_lookup`, for the comparison with hashing and binary search).

use super::error::CommError;
use crate::format::{FeatureTable, FormatError, ManifestFile, PartFile, RowRef, part_path};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// A row the source was asked for but does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("node {0} is not held here")]
pub struct NotHeld(pub u32);

/// Feature rows by global node id, dense or sparse as stored; `copy_rows`
/// and `gather::gather` densify, `gather::gather_rows` keeps sparse rows sparse.
pub trait RowSource: Send + Sync {
    fn dim(&self) -> usize;
    /// The row of node `id`, if this source holds it.
    fn row(&self, id: u32) -> Option<RowRef<'_>>;
    /// Whether the rows are stored sparse (then gathers keep them sparse).
    fn is_sparse(&self) -> bool {
        false
    }
    /// Copies the rows of `ids` into `out` (`ids.len() * dim` floats, dense), in order.
    fn copy_rows(&self, ids: &[u32], out: &mut [f32]) -> Result<(), NotHeld> {
        let d = self.dim();
        assert_eq!(out.len(), ids.len() * d, "copy_rows: out must hold ids.len() * dim floats");
        for (i, &id) in ids.iter().enumerate() {
            self.row(id).ok_or(NotHeld(id))?.write_dense(&mut out[i * d..(i + 1) * d]);
        }
        Ok(())
    }
}

/// The rows of a contiguous range of parts of a partitioning (one part, or
/// every part a worker owns when parts outnumber workers), read zero-copy
/// from their mmapped files.
pub struct PartRows {
    first: u16,
    files: Vec<PartFile>,
    manifest: Arc<ManifestFile>,
}

impl PartRows {
    /// Opens `dir/part-<part>.lgnn`, verifies its checksum (O(size), once per
    /// run) and checks it against the manifest.
    pub fn open(dir: &Path, part: u32, manifest: Arc<ManifestFile>) -> Result<PartRows, FormatError> {
        PartRows::open_parts(dir, part..part + 1, manifest)
    }

    /// The rows of every part worker `rank` of `workers` owns
    /// (`format::worker_parts` of the manifest's parts).
    pub fn open_worker(
        dir: &Path,
        rank: usize,
        workers: usize,
        manifest: Arc<ManifestFile>,
    ) -> Result<PartRows, FormatError> {
        let r = crate::format::worker_parts(rank, manifest.parts(), workers);
        PartRows::open_parts(dir, r.start as u32..r.end as u32, manifest)
    }

    /// Opens (and verifies, as `open`) the parts `parts`, a non-empty range.
    pub fn open_parts(dir: &Path, parts: Range<u32>, manifest: Arc<ManifestFile>) -> Result<PartRows, FormatError> {
        let mut files = Vec::with_capacity(parts.len());
        for part in parts.clone() {
            let path = part_path(dir, part);
            if part as usize >= manifest.parts() {
                return Err(FormatError::corrupt(path, format!("part {part} of a {}-part manifest", manifest.parts())));
            }
            let file = PartFile::open(dir, part)?;
            file.verify()?;
            let expected = manifest.part_nodes()[part as usize];
            if file.owned().len() as u64 != expected {
                return Err(FormatError::corrupt(
                    path,
                    format!("holds {} rows but the manifest gives the part {expected} nodes", file.owned().len()),
                ));
            }
            if let Some(f) = files.first().filter(|f: &&PartFile| f.feature_dim() != file.feature_dim()) {
                return Err(FormatError::corrupt(
                    path,
                    format!("rows of {} features, part {}'s have {}", file.feature_dim(), f.part(), f.feature_dim()),
                ));
            }
            files.push(file);
        }
        if files.is_empty() {
            return Err(FormatError::corrupt(part_path(dir, parts.start), "an empty range of parts".to_string()));
        }
        Ok(PartRows { first: parts.start as u16, files, manifest })
    }
}

impl RowSource for PartRows {
    fn dim(&self) -> usize {
        self.files[0].feature_dim()
    }
    fn is_sparse(&self) -> bool {
        self.files[0].features().is_sparse()
    }
    fn row(&self, id: u32) -> Option<RowRef<'_>> {
        let part = *self.manifest.node_part().get(id as usize)?;
        let file = self.files.get(part.wrapping_sub(self.first) as usize)?;
        let local = self.manifest.local_index()[id as usize];
        // A manifest that disagrees with the part file must never yield another node's row.
        (file.owned().get(local as usize) == Some(&id)).then(|| file.row(local))
    }
}

const ABSENT: u32 = u32::MAX;

/// Rows of some nodes, held in memory (dense or sparse).
#[derive(Debug, Clone)]
pub struct TableRows {
    dim: usize,
    held: usize,
    slot: Vec<u32>,
    rows: FeatureTable,
}

impl TableRows {
    /// Row `i` of `rows` (dense, row-major) belongs to node `ids[i]`, in a graph of `num_nodes` nodes.
    pub fn new(num_nodes: usize, dim: usize, ids: &[u32], rows: Vec<f32>) -> Result<TableRows, CommError> {
        Self::from_table(num_nodes, dim, ids, FeatureTable::Dense(rows))
    }

    /// Row `i` of `rows` belongs to node `ids[i]`.
    pub fn from_table(num_nodes: usize, dim: usize, ids: &[u32], rows: FeatureTable) -> Result<TableRows, CommError> {
        let view = rows.view(dim);
        view.shape_check(ids.len()).and_then(|()| view.verify()).map_err(CommError::Usage)?;
        if ids.len() >= ABSENT as usize {
            return Err(CommError::Usage(format!("{} rows is more than a table holds", ids.len())));
        }
        let mut slot = vec![ABSENT; num_nodes];
        for (i, &id) in ids.iter().enumerate() {
            match slot.get_mut(id as usize) {
                None => return Err(CommError::Usage(format!("node {id} in a graph of {num_nodes} nodes"))),
                Some(s) if *s != ABSENT => return Err(CommError::Usage(format!("node {id} given twice"))),
                Some(s) => *s = i as u32,
            }
        }
        Ok(TableRows { dim, held: ids.len(), slot, rows })
    }

    /// Every node's row: row `v` of `rows` is node `v`.
    pub fn all(num_nodes: usize, dim: usize, rows: Vec<f32>) -> Result<TableRows, CommError> {
        let ids: Vec<u32> = (0..num_nodes as u32).collect();
        TableRows::new(num_nodes, dim, &ids, rows)
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.held
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Memory held: the rows plus the id -> slot table.
    pub fn bytes(&self) -> usize {
        let rows = match &self.rows {
            FeatureTable::Dense(v) => v.len() * 4,
            FeatureTable::Sparse { indptr, indices, values } => indptr.len() * 8 + indices.len() * 4 + values.len() * 4,
        };
        rows + self.slot.len() * 4
    }
}

impl RowSource for TableRows {
    fn dim(&self) -> usize {
        self.dim
    }
    fn is_sparse(&self) -> bool {
        matches!(self.rows, FeatureTable::Sparse { .. })
    }
    #[inline]
    fn row(&self, id: u32) -> Option<RowRef<'_>> {
        match *self.slot.get(id as usize)? {
            ABSENT => None,
            s => Some(self.rows.view(self.dim).row(s as usize)),
        }
    }
}
