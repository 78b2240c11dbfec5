//! Where things live under `--data-dir`.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct DataDir {
    pub root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DataDir { root: root.into() }
    }

    /// A data directory that exists as something else (a file) cannot hold
    /// datasets: said once, up front, rather than as "no dataset ... download
    /// it first" by every command that looks inside it.
    pub fn check(&self) -> Result<(), crate::BadInput> {
        match std::fs::metadata(&self.root) {
            Ok(m) if !m.is_dir() => Err(crate::BadInput::new(format!(
                "--data-dir {} is a file, not a directory; give the directory that holds (or is to hold) the \
                 datasets, or set LEAPGNN_DATA",
                self.root.display()
            ))),
            _ => Ok(()),
        }
    }
    pub fn dataset_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
    /// `<data-dir>/<name>/dataset.lgnn`
    pub fn dataset_path(&self, name: &str) -> PathBuf {
        self.dataset_dir(name).join("dataset.lgnn")
    }
    /// `<data-dir>/<name>/parts/<method>-<k>/`
    pub fn parts_dir(&self, name: &str, method: &str, parts: usize) -> PathBuf {
        self.dataset_dir(name).join("parts").join(format!("{method}-{parts}"))
    }
    /// Downloads in progress and source files kept for resume.
    pub fn downloads_dir(&self, name: &str) -> PathBuf {
        self.dataset_dir(name).join("download")
    }
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }
    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.runs_dir().join(run)
    }
}

/// True when `name` can name a directory under --data-dir (a dataset, a run):
/// one plain path component of letters, digits, `-`, `_` or `.`, not hidden.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Where the partitions of the archive at `archive` (a dataset given by path)
/// go: `<dir>/parts/<method>-<k>/` beside `<dir>/dataset.lgnn`, as under
/// --data-dir; `<dir>/<stem>.parts/<method>-<k>/` beside any other archive.
pub fn parts_beside(archive: &Path, method: &str, parts: usize) -> PathBuf {
    let dir = archive.parent().unwrap_or(Path::new("."));
    let base = match archive.file_name().and_then(|f| f.to_str()) {
        Some("dataset.lgnn") | None => dir.join("parts"),
        Some(_) => dir.join(format!("{}.parts", archive.file_stem().and_then(|s| s.to_str()).unwrap_or("dataset"))),
    };
    base.join(format!("{method}-{parts}"))
}

/// Where the `method`-`parts` partition of dataset `name_or_path` lives, as
/// `partition` and every on-demand partitioning write it: under `data` for a
/// dataset there, beside the archive for a path elsewhere.
pub fn partition_dir(data: &DataDir, name_or_path: &str, method: &str, parts: usize) -> PathBuf {
    let archive = resolve_archive(data, name_or_path);
    if archive == data.dataset_path(name_or_path) {
        data.parts_dir(name_or_path, method, parts)
    } else {
        parts_beside(&archive, method, parts)
    }
}

/// Where GNNPipe's `chunks` chunks of dataset `name_or_path` are stored
/// (`partition::chunks`): `chunks/metis-<C>/` beside its partitions
/// (`<stem>.chunks/` beside an archive given by path), as `partition_dir`.
pub fn chunks_dir(data: &DataDir, name_or_path: &str, chunks: usize) -> PathBuf {
    let parts = partition_dir(data, name_or_path, "metis", chunks);
    let (base, leaf) = (parts.parent().unwrap_or(Path::new(".")), parts.file_name().unwrap_or_default());
    let name = base.file_name().map_or("parts".into(), |n| n.to_string_lossy().into_owned());
    let stem = name.strip_suffix("parts").unwrap_or(&name);
    base.with_file_name(format!("{stem}chunks")).join(leaf)
}

/// A dataset argument is either a registry/dataset name or a path to an archive.
pub fn resolve_archive(data: &DataDir, name_or_path: &str) -> PathBuf {
    let p = Path::new(name_or_path);
    if p.is_file() {
        return p.to_path_buf();
    }
    if p.is_dir() && p.join("dataset.lgnn").is_file() {
        return p.join("dataset.lgnn");
    }
    data.dataset_path(name_or_path)
}

/// Why files cannot be made in a directory (`can_create_in`).
#[derive(Debug)]
pub enum Uncreatable {
    /// This, the nearest existing ancestor, is not a directory.
    NotADirectory(PathBuf),
    /// Creating a file in this existing directory failed.
    Refused(PathBuf, std::io::Error),
}

/// Whether files can be created in `dir` or, when it does not exist yet, in
/// its nearest existing ancestor (where the missing directories would be
/// made): tried with an empty file, removed at once. For refusing an output
/// path before any work rather than after it.
pub fn can_create_in(dir: &Path) -> Result<(), Uncreatable> {
    let existing = dir
        .ancestors()
        .map(|a| if a.as_os_str().is_empty() { Path::new(".") } else { a })
        .find(|a| a.exists())
        .unwrap_or(Path::new("."));
    if !existing.is_dir() {
        return Err(Uncreatable::NotADirectory(existing.to_path_buf()));
    }
    let probe = existing.join(format!(".leapgnn-probe.{}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(f) => {
            drop(f);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(Uncreatable::Refused(existing.to_path_buf(), e)),
    }
}

/// `p` as an absolute path: its directory canonical (links and `.`/`..`
/// resolved) and its own name kept, so a file not written yet, or a link
/// written through, is named as given. When the directory cannot be
/// resolved (it does not exist), `p` resolved as far as it exists.
pub fn in_canonical_dir(p: &Path) -> PathBuf {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (std::fs::canonicalize(dir), p.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => std::fs::canonicalize(p).or_else(|_| std::path::absolute(p)).unwrap_or_else(|_| p.to_path_buf()),
    }
}
