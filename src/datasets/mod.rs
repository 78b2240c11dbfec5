//! Dataset registry (`datasets.toml`), downloaders, format converters and
//! synthetic generators. Everything ends as a `format::Dataset` archive at
//! `<data-dir>/<name>/dataset.lgnn`.
//!
//! Downloads go to `<data-dir>/<name>/download/` and are kept there after
//! conversion (so `--force` can re-convert without the network when the
//! registry has a checksum to trust them by); delete that folder to reclaim
//! the space.

pub mod convert;
pub mod error;
pub mod fetch;
pub mod registry;
pub mod source;
pub mod synthetic;

pub use convert::{ConvertOptions, Format};
pub use error::DatasetError;
pub use registry::{Entry, Registry};

use crate::DataDir;
use crate::format::{DatasetFile, DatasetSummary};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One `leapgnn download` (or import) request.
#[derive(Debug, Clone, Default)]
pub struct DownloadRequest {
    pub name: String,
    /// Convert this local file or directory instead of fetching.
    pub from: Option<PathBuf>,
    /// Override (or, for names not in the registry, give) the format.
    pub format: Option<Format>,
    /// Rebuild even when a valid archive exists.
    pub force: bool,
    pub seed: u64,
    /// Flags that override the registry entry's converter options.
    pub options: ConvertOptions,
    /// Extra rounds over the mirrors after a network failure.
    pub retries: u32,
    pub progress: bool,
}

/// What `download --json` prints: the archive's summary plus timing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DownloadReport {
    #[serde(flatten)]
    pub summary: DatasetSummary,
    pub seconds: f64,
    /// `present` (already there), `downloaded`, `imported` (--from) or `generated`.
    pub action: &'static str,
    /// Warnings for stderr.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Fetches or imports, converts and writes the dataset `req.name`. An existing
/// valid archive is reported as is unless `force`; an invalid one is rebuilt.
/// Nothing is written at the archive path unless the whole conversion succeeded.
pub fn download(data: &DataDir, reg: &Registry, req: &DownloadRequest) -> Result<DownloadReport, DatasetError> {
    let t0 = Instant::now();
    check_name(&req.name)?;
    let entry = reg.get(&req.name);
    let format = match (req.format, entry) {
        (Some(f), _) => f,
        (None, Some(e)) => e.format,
        (None, None) if req.from.is_some() => {
            return Err(DatasetError::input(format!(
                "`{}` is not in the registry, so --format is needed to import it (ogb, npz, edgelist, musae, text)",
                req.name
            )));
        }
        (None, None) => return Err(reg.require(&req.name).unwrap_err()),
    };
    if let Some(from) = &req.from
        && std::fs::symlink_metadata(from).is_err()
        && !Path::new(&format!("{}.edges.txt", from.display())).is_file()
    {
        return Err(DatasetError::input(format!("--from {}: no such file or directory", from.display())));
    }
    let target = data.dataset_path(&req.name);
    let mut notes = Vec::new();
    if let Some(present) = present(&target, req, t0, &mut notes)? {
        return Ok(present);
    }
    // One process at a time fetches and builds a dataset: two would write the
    // same `.part` at once. The second, once it has the lock, finds the
    // dataset the first made.
    let _lock = lock_download(data, &req.name)?;
    let mut again = Vec::new(); // an invalid archive was noted above
    if let Some(present) = present(&target, req, t0, &mut again)? {
        return Ok(present);
    }

    let options = match entry {
        Some(e) => merge(&e.options, &req.options),
        None => req.options.clone(),
    };
    let (ds, action) = if format == Format::Synthetic {
        if req.from.is_some() {
            return Err(DatasetError::input(format!("{}: synthetic datasets are generated; drop --from", req.name)));
        }
        let entry = entry.ok_or_else(|| {
            DatasetError::input(format!("`{}`: the synthetic format needs a registry entry with its spec", req.name))
        })?;
        (synthetic::generate(&req.name, &entry.synthetic_spec()?, req.seed)?, "generated")
    } else if let Some(from) = &req.from {
        (convert::convert(format, from, &req.name, req.seed, &options)?, "imported")
    } else {
        let entry = reg.require(&req.name)?;
        if entry.urls.is_empty() {
            return Err(DatasetError::input(format!(
                "`{}` has no download URL; import a local copy with `leapgnn download {} --from PATH`",
                req.name, req.name
            )));
        }
        let spec = fetch::FetchSpec {
            urls: &entry.urls,
            sha256: entry.sha256.as_deref(),
            size: entry.size,
            retries: req.retries,
            progress: req.progress,
            force: req.force,
        };
        let dir = data.downloads_dir(&req.name);
        let (file, url) = fetch::fetch(&dir, &spec, &mut notes).map_err(|e| {
            // Nothing half-made stays behind when nothing was fetched (a partial file is kept for resume).
            fetch::remove_if_empty(&dir, &data.dataset_dir(&req.name));
            local_copy_hint(e, &req.name)
        })?;
        let mut ds = convert::convert(format, &file, &req.name, req.seed, &options).map_err(|e| {
            let e = unverified_download(e, &file, &url, entry.sha256.is_some() || req.format.is_some());
            fetch::remove_if_empty(&dir, &data.dataset_dir(&req.name));
            e
        })?;
        ds.meta.source = url;
        (ds, "downloaded")
    };
    // Expectations hold for the registry's own recipe only.
    if let Some(e) = entry
        && req.format.is_none()
        && options == e.options
    {
        let m = &ds.meta;
        notes.extend(e.check_expected(m.num_nodes, m.num_edges, m.feature_dim, m.num_classes));
    }
    if ds.meta.num_classes == 0 {
        let split = if options.split.is_some() { " (--split applies to labelled nodes, so it made none)" } else { "" };
        notes.push(format!(
            "{} has no labels (0 classes){split}: `leapgnn train` needs them; re-import with --generated-classes K \
             (seeded labels) and --split, or from a source with labels",
            req.name
        ));
    }
    notes.extend(empty_splits(&ds));
    ds.write(&target)?;
    Ok(report(DatasetFile::open_verified(&target)?, t0, action, notes))
}

/// The report of a valid archive already at `target` (unless `--force`); an
/// invalid one is noted for rebuilding. One that cannot be read for another
/// reason (memory, permissions) is an error: rebuilding would not cure it,
/// and would replace an archive that may be sound.
fn present(
    target: &Path,
    req: &DownloadRequest,
    t0: Instant,
    notes: &mut Vec<String>,
) -> Result<Option<DownloadReport>, DatasetError> {
    if req.force || !target.exists() {
        return Ok(None);
    }
    match DatasetFile::open_verified(target) {
        Ok(f) => {
            notes.extend(not_applied(&f, req, target));
            Ok(Some(report(f, t0, "present", std::mem::take(notes))))
        }
        Err(e) if !e.is_missing_or_damaged() => Err(e.into()),
        Err(e) => {
            notes.push(format!("{}; rebuilding it", e.fault()));
            Ok(None)
        }
    }
}

/// Held while one process fetches, converts and writes dataset `name`
/// (`util::lock_file::Removable`): `<data-dir>/.<name>.download.lock`, there
/// only while a download runs.
fn lock_download(data: &DataDir, name: &str) -> Result<crate::util::lock_file::Removable, DatasetError> {
    std::fs::create_dir_all(&data.root).map_err(|e| DatasetError::io(&data.root, e))?;
    let path = data.root.join(format!(".{name}.download.lock"));
    crate::util::lock_file::Removable::acquire(&path, || {
        crate::elog!(
            "waiting for another leapgnn process getting {name} into {} (lock {})",
            data.root.display(),
            path.display()
        );
    })
    .map_err(|e| DatasetError::io(&path, e))
}

/// What `req` asks of a conversion that the archive kept at `target` was not
/// made with (another --from, another --seed) or may not have been (converter
/// flags, which an archive does not record): said, since a present archive is
/// left as it is and the import asked for does not happen.
fn not_applied(f: &DatasetFile, req: &DownloadRequest, target: &Path) -> Option<String> {
    let meta = f.meta_owned();
    let mut asked = Vec::new();
    if let Some(from) = &req.from
        && canonical(from) != canonical(Path::new(&meta.source))
    {
        asked.push(format!("--from {} (it was made from {})", from.display(), meta.source));
    }
    if req.seed != meta.seed {
        asked.push(format!("--seed {} (it was made with {})", req.seed, meta.seed));
    }
    if req.options != ConvertOptions::default() {
        asked.push("the conversion flags given".to_string());
    }
    if asked.is_empty() {
        return None;
    }
    Some(format!(
        "{} is already at {} and was kept as it is, without {}: add --force to convert it again",
        req.name,
        target.display(),
        asked.join(", ")
    ))
}

/// A labelled dataset whose split leaves train, val or test without a
/// labelled node (`--split 100,0,0`, a source's empty split file): `train`
/// refuses it, so the import says so while the flags are at hand.
fn empty_splits(ds: &crate::format::Dataset) -> Option<String> {
    if ds.meta.num_classes == 0 {
        return None;
    }
    let labelled = |ids: &[u32]| ids.iter().any(|&v| ds.labels[v as usize] >= 0);
    let empty: Vec<&str> = [("train", &ds.train), ("val", &ds.val), ("test", &ds.test)]
        .into_iter()
        .filter(|(_, ids)| !labelled(ids))
        .map(|(s, _)| s)
        .collect();
    if empty.is_empty() {
        return None;
    }
    Some(format!(
        "{} has no labelled {} nodes: `leapgnn train` needs train, val and test nodes; re-import it with --force \
         and a split that gives each a share (e.g. --split 60,20,20)",
        ds.meta.name,
        empty.join(" or ")
    ))
}

/// `p` with its links and `.`/`..` resolved as far as it exists (a text
/// source's `DIR/PREFIX` names no file: its directory is resolved).
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| crate::paths::in_canonical_dir(p))
}

/// A download the registry has no sha256 for that does not convert is most
/// likely cut short (a server that closed early without a Content-Length) or
/// not the file at all (an error page served with 200): kept, it would be
/// converted again by every rerun, failing the same way, so it is deleted
/// and the rerun fetches it again. A checked download, or one converted with
/// another `--format` than the registry's, is kept (the file is not the fault).
fn unverified_download(e: DatasetError, file: &Path, url: &str, keep: bool) -> DatasetError {
    use crate::error::Blame;
    if keep || !e.is_bad_input() {
        return e;
    }
    let gone = match std::fs::remove_file(file) {
        Ok(()) => "it was deleted, so rerun to download it again".to_owned(),
        Err(r) => format!("delete {} ({r}) and rerun to download it again", file.display()),
    };
    DatasetError::Download {
        url: url.to_owned(),
        msg: format!(
            "the downloaded file does not convert ({e}); the registry has no sha256 to check it by, so it is \
             likely cut short or not the dataset (an error page): {gone}"
        ),
    }
}

/// A failed download says how to go on without the network.
fn local_copy_hint(e: DatasetError, name: &str) -> DatasetError {
    match e {
        DatasetError::Download { url, msg } => DatasetError::Download {
            url,
            msg: format!("{msg}; offline, import a local copy instead: `leapgnn download {name} --from PATH`"),
        },
        e => e,
    }
}

fn report(f: DatasetFile, t0: Instant, action: &'static str, notes: Vec<String>) -> DownloadReport {
    DownloadReport { summary: f.summary(), seconds: t0.elapsed().as_secs_f64(), action, notes }
}

/// Registry options overridden by the flags the user set.
fn merge(base: &ConvertOptions, over: &ConvertOptions) -> ConvertOptions {
    // The two kinds of split are one setting: either one given by flag replaces whichever the entry has.
    let splits = if over.split.is_some() || over.split_per_class.is_some() { over } else { base };
    let (split, split_per_class) = (splits.split.clone(), splits.split_per_class.clone());
    ConvertOptions {
        symmetrize: over.symmetrize.or(base.symmetrize),
        self_loops: over.self_loops || base.self_loops,
        feature_dim: over.feature_dim.or(base.feature_dim),
        generated_classes: over.generated_classes.or(base.generated_classes),
        split,
        split_per_class,
        prefix: over.prefix.clone().or_else(|| base.prefix.clone()),
        id_column: over.id_column.clone().or_else(|| base.id_column.clone()),
        label_column: over.label_column.clone().or_else(|| base.label_column.clone()),
        num_nodes: over.num_nodes.or(base.num_nodes),
        split_name: over.split_name.clone().or_else(|| base.split_name.clone()),
        features: if over.features == Default::default() { base.features } else { over.features },
    }
}

/// A dataset name becomes a directory under --data-dir: keep it one plain component.
fn check_name(name: &str) -> Result<(), DatasetError> {
    if crate::paths::is_plain_name(name) {
        Ok(())
    } else {
        Err(DatasetError::input(format!(
            "dataset name `{name}` must be letters, digits, `-`, `_` or `.` (it names a directory under --data-dir)"
        )))
    }
}

/// Path of the dataset archive `name` (or of the archive/directory `name`
/// points to), creating it first when it is missing and can be made without
/// the network (synthetic presets). Other missing datasets are an error that
/// says which `leapgnn download` to run.
pub fn ensure_dataset(data: &DataDir, name: &str) -> anyhow::Result<PathBuf> {
    match locate_dataset(data, name)? {
        Located::Archive(path) => Ok(path),
        Located::Synthetic { reg, .. } => {
            crate::elog!("{name}: not in {} yet; generating it (synthetic, seed 0)", data.root.display());
            let req = DownloadRequest { name: name.to_owned(), ..Default::default() };
            Ok(PathBuf::from(download(data, &reg, &req)?.summary.path))
        }
    }
}

/// Where `locate_dataset` found a dataset.
pub enum Located {
    /// The archive is on disk.
    Archive(PathBuf),
    /// Missing, but a synthetic preset of the registry: `ensure_dataset`
    /// generates it at `path` without the network.
    Synthetic { reg: Registry, path: PathBuf },
}

/// `ensure_dataset` without making anything: the archive, or that it can be
/// generated; a dataset that must be downloaded first is the same error.
/// For checking a job's dataset before the job runs (`slurm-script`).
pub fn locate_dataset(data: &DataDir, name: &str) -> anyhow::Result<Located> {
    let path = crate::paths::resolve_archive(data, name);
    if path.is_file() {
        return Ok(Located::Archive(path));
    }
    let reg = Registry::resolve(None)?;
    match reg.get(name) {
        Some(e) if e.format == Format::Synthetic => Ok(Located::Synthetic { reg, path }),
        Some(_) => Err(crate::BadInput::new(format!(
            "dataset `{name}` is not in {}; run `leapgnn download {name}` first",
            data.root.display()
        ))
        .into()),
        None => Err(crate::BadInput::new(format!(
            "no dataset `{name}` in {} and none by that name in the registry; run `leapgnn download --list`",
            data.root.display()
        ))
        .into()),
    }
}
