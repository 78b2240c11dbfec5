use super::FormatError;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file written under a temporary name next to its target and renamed into
/// place after fsync, so a crash or error never leaves a half-written file at
/// the target path. Dropped without `commit`, the temp file is removed.
pub struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
    committed: bool,
}

impl AtomicFile {
    pub fn create(target: impl AsRef<Path>) -> Result<Self, FormatError> {
        let target = target.as_ref().to_path_buf();
        let dir = parent_dir(&target);
        fs::create_dir_all(&dir).map_err(|e| FormatError::io(&dir, e))?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
        // Errors name the file being written, not its temporary name.
        let file = File::create(&tmp).map_err(|e| FormatError::io(&target, e))?;
        Ok(AtomicFile { target, tmp, file: Some(BufWriter::with_capacity(1 << 20, file)), committed: false })
    }

    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.file.as_mut().expect("writer used after commit")
    }

    /// Lends the writer out by value (for writers that must own it); give it back with `restore`.
    pub(crate) fn take(&mut self) -> BufWriter<File> {
        self.file.take().expect("writer taken twice")
    }

    pub(crate) fn restore(&mut self, w: BufWriter<File>) {
        self.file = Some(w);
    }

    /// Flush, fsync, rename over the target, fsync the directory.
    pub fn commit(mut self) -> Result<PathBuf, FormatError> {
        let w = self.file.take().expect("commit twice");
        let f = w.into_inner().map_err(|e| FormatError::io(&self.target, e.into_error()))?;
        f.sync_all().map_err(|e| FormatError::io(&self.target, e))?;
        drop(f);
        fs::rename(&self.tmp, &self.target).map_err(|e| FormatError::io(&self.target, e))?;
        self.committed = true;
        if let Ok(d) = File::open(parent_dir(&self.target)) {
            let _ = d.sync_all();
        }
        Ok(self.target.clone())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed (error or panic on the way): the target is untouched, drop the temp.
        if !self.committed {
            self.file = None;
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

fn parent_dir(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes a small file (JSON, TOML, text) atomically.
pub fn write_atomic(target: impl AsRef<Path>, bytes: &[u8]) -> Result<(), FormatError> {
    let target = target.as_ref();
    let mut f = AtomicFile::create(target)?;
    f.writer().write_all(bytes).map_err(|e| FormatError::io(target, e))?;
    f.commit()?;
    Ok(())
}
