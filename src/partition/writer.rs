//! Writes a partition directory as a whole. Every file goes into a hidden
//! sibling directory, which then takes the place of the old one: a reader sees
//! the old partition or the new one, never a mix of part files from two runs.

use crate::format::{DatasetFile, FeatureTable, FeatureView, FormatError, PartFeatures, PartManifest, RowRef};
use crate::util::interrupt::{Registered, settle};
use crate::util::lock_file::Removable;
use rayon::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};

/// The nodes of each part, sorted, and each node's row inside its part.
pub struct Grouping {
    /// Part i owns `members[offsets[i]..offsets[i + 1]]`.
    pub offsets: Vec<usize>,
    pub members: Vec<u32>,
    pub local_index: Vec<u32>,
}

impl Grouping {
    /// Counting sort by part; scanning nodes in id order keeps each part's ids sorted.
    pub fn new(node_part: &[u16], parts: usize) -> Grouping {
        let mut offsets = vec![0usize; parts + 1];
        for &q in node_part {
            offsets[q as usize + 1] += 1;
        }
        for i in 0..parts {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets[..parts].to_vec();
        let mut members = vec![0u32; node_part.len()];
        let mut local_index = vec![0u32; node_part.len()];
        for (v, &q) in node_part.iter().enumerate() {
            let slot = &mut fill[q as usize];
            members[*slot] = v as u32;
            local_index[v] = (*slot - offsets[q as usize]) as u32;
            *slot += 1;
        }
        Grouping { offsets, members, local_index }
    }

    pub fn owned(&self, part: usize) -> &[u32] {
        &self.members[self.offsets[part]..self.offsets[part + 1]]
    }
}

/// Writes `manifest` and one feature file per part (rows gathered from `ds`) as `dir`.
pub fn write_dir(dir: &Path, ds: &DatasetFile, groups: &Grouping, manifest: &PartManifest) -> Result<(), FormatError> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let parent = dir.parent().unwrap_or(Path::new("."));
    let staging = Staging::create(parent.join(format!(".{name}.tmp.{}", std::process::id())))?;

    let d = ds.feature_dim();
    for part in 0..manifest.parts as usize {
        let owned = groups.owned(part);
        let features = match ds.features() {
            FeatureView::Dense { .. } => {
                let mut values = vec![0f32; owned.len() * d];
                if d > 0 {
                    values
                        .par_chunks_mut(d)
                        .zip(owned.par_iter())
                        .for_each(|(row, &v)| ds.feature_row(v).write_dense(row));
                }
                FeatureTable::Dense(values)
            }
            FeatureView::Sparse { .. } => {
                let mut indptr = Vec::with_capacity(owned.len() + 1);
                let (mut indices, mut values) = (Vec::new(), Vec::new());
                indptr.push(0u64);
                for &v in owned {
                    if let RowRef::Sparse { indices: c, values: x } = ds.feature_row(v) {
                        indices.extend_from_slice(c);
                        values.extend_from_slice(x);
                    }
                    indptr.push(values.len() as u64);
                }
                FeatureTable::Sparse { indptr, indices, values }
            }
        };
        PartFeatures {
            part: part as u32,
            parts: manifest.parts,
            feature_dim: d as u32,
            owned: owned.to_vec(),
            features,
        }
        .write(&staging.path)?;
    }
    manifest.write(&staging.path)?;
    crate::util::interrupt::test_pause("partition-staged");
    staging.replace(dir)
}

/// A directory being filled; removed on drop unless it replaced its target.
struct Staging {
    path: PathBuf,
    done: bool,
    _temp: Registered,
}

impl Staging {
    fn create(path: PathBuf) -> Result<Staging, FormatError> {
        if path.exists() {
            fs::remove_dir_all(&path).map_err(|e| FormatError::io(&path, e))?;
        }
        let temp = Registered::new(&path);
        fs::create_dir_all(&path).map_err(|e| FormatError::io(&path, e))?;
        Ok(Staging { path, done: false, _temp: temp })
    }

    /// Renames over `target`, moving an existing directory aside first (a
    /// non-empty directory cannot be renamed over) and deleting it afterwards.
    fn replace(mut self, target: &Path) -> Result<(), FormatError> {
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let old = target.with_file_name(format!(".{name}.old.{}", std::process::id()));
        let had_old = target.exists();
        // Set aside, the old directory is a temporary too; the two renames are
        // one step for an interrupt, which never leaves the target missing.
        let _old = Registered::new(&old);
        settle(|| {
            if had_old {
                fs::rename(target, &old).map_err(|e| FormatError::io(target, e))?;
            }
            fs::rename(&self.path, target).map_err(|e| FormatError::io(target, e))
        })?;
        self.done = true;
        if had_old {
            fs::remove_dir_all(&old).map_err(|e| FormatError::io(&old, e))?;
        }
        if let Some(parent) = target.parent()
            && let Ok(d) = fs::File::open(parent)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// How often `TargetLock::acquire` makes its directory again after other
/// processes removed it: each time one of them let its lock go, so more
/// means something else keeps deleting it.
const MAX_VANISHED: usize = 1000;

/// Held while one process checks, cuts and writes partition directory `dir`
/// (`util::lock_file`): concurrent `partition` runs (or trains partitioning
/// on demand) of the same method and K take turns instead of renaming over
/// each other's directories. Its file, `.{name}.lock` beside `dir`, is
/// there only while held (`Removable`): a run refused on its cut, or
/// interrupted, used to leave it behind.
pub struct TargetLock {
    lock: Option<Removable>,
    /// The directory of `dir`, when this process made it: removed with the
    /// lock if still empty, so a run that wrote nothing leaves no `parts/`.
    made: Option<PathBuf>,
}

impl Drop for TargetLock {
    fn drop(&mut self) {
        drop(self.lock.take());
        // Fails unless empty: a partition written there, or another process's
        // lock file, keeps it; that process makes it again should it vanish
        // before its lock file is there (`acquire`).
        if let Some(parent) = &self.made {
            let _ = fs::remove_dir(parent);
        }
    }
}

impl TargetLock {
    /// Waits for `dir`'s lock (saying so once when another process holds it),
    /// then removes what killed writers of `dir` left beside it (staging and
    /// set-aside directories): with the lock held, no live process owns them.
    pub fn acquire(dir: &Path) -> Result<TargetLock, FormatError> {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parent = dir.parent().unwrap_or(Path::new("."));
        let made = (!parent.is_dir()).then(|| parent.to_path_buf());
        let path = parent.join(format!(".{name}.lock"));
        let mut say = Some(|| crate::elog!("waiting for another leapgnn process partitioning into {}", dir.display()));
        let mut vanished = 0;
        let lock = loop {
            fs::create_dir_all(parent).map_err(|e| FormatError::io(parent, e))?;
            crate::util::interrupt::test_hold("partition-dir-made");
            match Removable::acquire(&path, || say.take().map_or((), |s| s())) {
                Ok(lock) => break lock,
                // Another process let its lock go and removed the directory, empty,
                // between our making it and opening the lock file in it: make it again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && vanished < MAX_VANISHED => vanished += 1,
                Err(e) => return Err(FormatError::io(&path, e)),
            }
        };
        crate::util::interrupt::test_hold("partition-locked");
        let (tmp, old) = (format!(".{name}.tmp."), format!(".{name}.old."));
        for entry in fs::read_dir(parent).map_err(|e| FormatError::io(parent, e))?.flatten() {
            let n = entry.file_name().to_string_lossy().into_owned();
            // A writer killed (SIGKILL) between its two renames left the old
            // partition set aside and none in place: put it back, it is whole.
            if n.starts_with(&old) && !dir.exists() && fs::rename(entry.path(), dir).is_ok() {
                continue;
            }
            if n.starts_with(&tmp) || n.starts_with(&old) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        Ok(TargetLock { lock: Some(lock), made })
    }
}
