//! Shipping files to a host over SFTP, only when missing or stale. A
//! shipped file `F` gets a sidecar `F.sha256` (sha256sum format) written
//! after it; a file whose size and sidecar match the driver's copy is left
//! alone. Uploads go to a temporary name and are renamed into place on the
//! remote side, so a worker never sees a half-written binary or partition,
//! and the sidecar is renamed last, so an interrupted upload is re-sent.

use super::ssh_session::{SshError, quote, run_ok};
use crate::DataDir;
use crate::format;
use serde::Serialize;
use ssh2::{OpenFlags, OpenType, Session, Sftp};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// One file to put on a host: `local` -> `<remote root>/<remote>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShipItem {
    pub local: PathBuf,
    /// Relative to the remote root (the profile's remote_dir), or absolute.
    pub remote: PathBuf,
    pub executable: bool,
    /// Where its size and sidecar match, hash the host's copy too
    /// (`remote_state`): a copy damaged in place there is then sent again
    /// rather than found current and refused by its worker. For GNNPipe's
    /// chunks, which every worker reads whole anyway and which are small
    /// beside a partition; a partition's gigabytes are not read on every run.
    pub check_bytes: bool,
}

impl ShipItem {
    /// A data file `local` under the data directory `root` (both absolute,
    /// or both relative alike), shipped to the same place under the remote
    /// data directory; a file outside `root` keeps its path.
    pub fn data_file(root: &Path, local: PathBuf) -> ShipItem {
        ShipItem {
            remote: local.strip_prefix(root).unwrap_or(&local).to_path_buf(),
            local,
            executable: false,
            check_bytes: false,
        }
    }
}

/// What happened to one item on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shipped {
    pub host: String,
    /// Absolute remote path.
    pub remote: PathBuf,
    pub bytes: u64,
    pub sha256: String,
    /// False when the remote copy was already current (nothing sent).
    pub sent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteState {
    Missing,
    /// Present, but its size or recorded hash differs from the driver's copy.
    Stale,
    /// Its size and recorded hash match, but its bytes there hash otherwise
    /// (`ShipItem::check_bytes`): damaged in place on the host.
    Damaged,
    Current,
}

/// The binary as shipped: named by its content hash, so a host can keep
/// several versions and a different build is simply a different file.
pub fn binary_item(binary: &Path) -> Result<ShipItem, SshError> {
    let sha = local_sha256(binary)?;
    Ok(ShipItem {
        local: binary.into(),
        remote: PathBuf::from(format!("bin/leapgnn-{}", &sha[..16])),
        executable: true,
        check_bytes: false,
    })
}

/// The files rank `rank` of `workers` needs of a dataset cut in `parts` parts:
/// the topology, the manifest and the parts it owns (`format::worker_parts`);
/// with one part (one worker, which owns every node) the dataset alone: no
/// partition of one part is ever cut (`partition` refuses `--parts 1`).
/// `name` is a dataset's name or the path of its archive, as `train` takes it
/// (its partitions lie beside an archive outside the data directory,
/// `paths::partition_dir`). Remote paths mirror the local layout under the
/// data directory; a file outside it keeps its absolute path (`remote` is
/// then absolute, which `train` refuses to ship).
pub fn rank_data_files(
    data: &DataDir,
    name: &str,
    method: &str,
    (parts, workers): (usize, usize),
    rank: usize,
) -> Vec<ShipItem> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let dataset = abs(&crate::paths::resolve_archive(data, name));
    if parts < 2 {
        return vec![ShipItem::data_file(&abs(&data.root), dataset)];
    }
    let parts_dir = abs(&crate::paths::partition_dir(data, name, method, parts));
    rank_files(&abs(&data.root), &dataset, &parts_dir, format::worker_parts(rank, parts, workers))
}

/// What a GNNPipe run of `chunks` chunks (above 1) ships to every rank
/// besides `rank_data_files`: the chunks its driver cut and stored
/// (`paths::chunks_dir`), which workers read and never cut.
pub fn chunk_files(data: &DataDir, name: &str, chunks: Option<usize>) -> Vec<ShipItem> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let Some(c) = chunks.filter(|&c| c > 1) else { return Vec::new() };
    let local = format::manifest_path(&abs(&crate::paths::chunks_dir(data, name, c)));
    vec![ShipItem { check_bytes: true, ..ShipItem::data_file(&abs(&data.root), local) }]
}

/// The same for a dataset archive and partition directory under `root` (the
/// data directory; all three absolute, or all relative alike) and the parts `owned`.
pub fn rank_files(root: &Path, dataset: &Path, parts_dir: &Path, owned: std::ops::Range<usize>) -> Vec<ShipItem> {
    [dataset.to_path_buf(), format::manifest_path(parts_dir)]
        .into_iter()
        .chain(owned.map(|p| format::part_path(parts_dir, p as u32)))
        .map(|local| ShipItem::data_file(root, local))
        .collect()
}

/// sha256 (hex) of a local file, cached per (path, size, mtime): several
/// workers ship the same binary and a partition may be gigabytes.
pub fn local_sha256(path: &Path) -> Result<String, SshError> {
    /// path -> (size, mtime, sha256)
    type Cache = HashMap<PathBuf, (u64, SystemTime, String)>;
    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
    let local = |source| SshError::Local { path: path.into(), source };
    let meta = std::fs::metadata(path).map_err(local)?;
    let stamp = (meta.len(), meta.modified().map_err(local)?);
    if let Some((_, _, sha)) = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .get(path)
        .filter(|(len, mtime, _)| (*len, *mtime) == stamp)
    {
        return Ok(sha.clone());
    }
    let sha = std::fs::File::open(path).and_then(format::sha256_read).map_err(local)?;
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .insert(path.into(), (stamp.0, stamp.1, sha.clone()));
    Ok(sha)
}

/// Where `item` lives on the host.
pub fn remote_path(root: &Path, item: &ShipItem) -> PathBuf {
    root.join(&item.remote)
}

/// Compares the remote copy of `item` with the local one, without sending
/// anything (`sess`, the session of `sftp` on `host`, hashes it there when
/// `item.check_bytes`).
pub fn remote_state(
    (sess, sftp): (&Session, &Sftp),
    host: &str,
    root: &Path,
    item: &ShipItem,
) -> Result<RemoteState, SshError> {
    let sha = local_sha256(&item.local)?;
    let len =
        std::fs::metadata(&item.local).map_err(|source| SshError::Local { path: item.local.clone(), source })?.len();
    let dst = remote_path(root, item);
    let Ok(stat) = sftp.stat(&dst) else { return Ok(RemoteState::Missing) };
    if stat.size != Some(len) || !stat.is_file() {
        return Ok(RemoteState::Stale);
    }
    let mut recorded = String::new();
    let Ok(f) = sftp.open(sidecar(&dst)) else { return Ok(RemoteState::Stale) };
    if Read::take(f, 4096).read_to_string(&mut recorded).is_err() {
        return Ok(RemoteState::Stale);
    }
    if recorded.split_whitespace().next() != Some(sha.as_str()) {
        return Ok(RemoteState::Stale);
    }
    if !item.check_bytes {
        return Ok(RemoteState::Current);
    }
    Ok(match remote_sha256(sess, host, &dst)? {
        Some(theirs) if theirs == sha => RemoteState::Current,
        Some(_) => RemoteState::Damaged,
        // No sha256sum there: sent again, as the safe side, without calling it damaged.
        None => RemoteState::Stale,
    })
}

/// sha256 (hex) of the file `path` on `host`, hashed there: None when
/// `sha256sum` fails there (absent, unreadable file).
fn remote_sha256(sess: &Session, host: &str, path: &Path) -> Result<Option<String>, SshError> {
    let out = super::ssh_session::run(sess, host, &format!("sha256sum -- {}", quote(&path.to_string_lossy())))?;
    let sha = out.output.split_whitespace().next().filter(|s| s.len() == 64 && out.code == 0);
    Ok(sha.map(str::to_ascii_lowercase))
}

/// Ships every item that is missing, stale or damaged on the host behind
/// `sess` (`sftp` is a channel of that session), saying to `warn` which
/// were damaged there.
pub fn ship(
    (sess, sftp): (&Session, &Sftp),
    host: &str,
    root: &Path,
    items: &[ShipItem],
    warn: &dyn Fn(String),
) -> Result<Vec<Shipped>, SshError> {
    let mut report = Vec::with_capacity(items.len());
    let mut todo = Vec::new();
    for item in items {
        let state = remote_state((sess, sftp), host, root, item)?;
        if state == RemoteState::Damaged {
            warn(format!(
                "{host}: {} is damaged (its bytes there do not hash to the sha256 its sidecar and the driver's \
                 copy have): sending the driver's copy again",
                remote_path(root, item).display()
            ));
        }
        let bytes = std::fs::metadata(&item.local)
            .map_err(|source| SshError::Local { path: item.local.clone(), source })?
            .len();
        let sent = state != RemoteState::Current;
        report.push(Shipped {
            host: host.into(),
            remote: remote_path(root, item),
            bytes,
            sha256: local_sha256(&item.local)?,
            sent,
        });
        if sent {
            todo.push(item);
        }
    }
    if todo.is_empty() {
        return Ok(report);
    }
    let dirs: Vec<String> =
        todo.iter().filter_map(|i| remote_path(root, i).parent().map(|d| quote(&d.to_string_lossy()))).collect();
    run_ok(sess, host, &format!("mkdir -p -- {}", dirs.join(" ")))?;
    let tag = temp_tag();
    let mut moves = Vec::new();
    for item in todo {
        let dst = remote_path(root, item);
        let tmp = temp_name(&dst, &tag);
        let side_tmp = temp_name(&sidecar(&dst), &tag);
        let sha = local_sha256(&item.local)?;
        let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let upload = upload(sftp, host, &item.local, &tmp, if item.executable { 0o755 } else { 0o644 })
            .and_then(|_| write_small(sftp, host, &side_tmp, format!("{sha}  {name}\n").as_bytes()));
        if let Err(e) = upload {
            let _ = sftp.unlink(&tmp);
            let _ = sftp.unlink(&side_tmp);
            return Err(e);
        }
        // File first, sidecar last: an interrupted rename leaves a mismatch, which re-sends.
        moves.push(format!("mv -f -- {} {}", quote(&tmp.to_string_lossy()), quote(&dst.to_string_lossy())));
        moves.push(format!(
            "mv -f -- {} {}",
            quote(&side_tmp.to_string_lossy()),
            quote(&sidecar(&dst).to_string_lossy())
        ));
    }
    // SFTP v3 rename refuses to replace an existing file; mv is rename(2), atomic.
    run_ok(sess, host, &moves.join(" && "))?;
    Ok(report)
}

fn upload(sftp: &Sftp, host: &str, local: &Path, remote: &Path, mode: i32) -> Result<(), SshError> {
    let what = format!("uploading {} to {}", local.display(), remote.display());
    let mut src = std::fs::File::open(local).map_err(|source| SshError::Local { path: local.into(), source })?;
    let mut dst = sftp
        .open_mode(remote, OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE, mode, OpenType::File)
        .map_err(SshError::remote(host, what.clone()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf).map_err(|source| SshError::Local { path: local.into(), source })?;
        if n == 0 {
            break;
        }
        dst.write_all(&buf[..n]).map_err(SshError::remote(host, what.clone()))?;
    }
    // fsync@openssh.com: the data is on the remote disk before the rename publishes it.
    let _ = dst.fsync();
    dst.close().map_err(SshError::remote(host, what))
}

fn write_small(sftp: &Sftp, host: &str, remote: &Path, bytes: &[u8]) -> Result<(), SshError> {
    let what = format!("writing {}", remote.display());
    let mut f = sftp.create(remote).map_err(SshError::remote(host, what.clone()))?;
    f.write_all(bytes).map_err(SshError::remote(host, what.clone()))?;
    f.close().map_err(SshError::remote(host, what))
}

fn sidecar(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

fn temp_name(p: &Path, tag: &str) -> PathBuf {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!(".{name}.tmp.{tag}"))
}

/// Unique per upload (driver pid, time, counter): concurrent drivers never share a temp file.
fn temp_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos:x}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hash_matches_sha256sum_and_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.bin");
        std::fs::write(&f, b"abc").unwrap();
        // NIST test vector for "abc".
        assert_eq!(local_sha256(&f).unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        std::fs::write(&f, b"abcd").unwrap();
        assert_ne!(local_sha256(&f).unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let item = binary_item(&f).unwrap();
        assert!(item.executable);
        assert_eq!(item.remote, PathBuf::from(format!("bin/leapgnn-{}", &local_sha256(&f).unwrap()[..16])));
        assert_eq!(temp_name(Path::new("/r/bin/x"), "t"), Path::new("/r/bin/.x.tmp.t"));
        assert_eq!(sidecar(Path::new("/r/x")), Path::new("/r/x.sha256"));
        let files = rank_data_files(&DataDir::new("/d"), "cora", "metis", (4, 4), 2);
        let remote: Vec<_> = files.iter().map(|f| f.remote.to_string_lossy().into_owned()).collect();
        assert_eq!(remote, ["cora/dataset.lgnn", "cora/parts/metis-4/manifest", "cora/parts/metis-4/part-2.lgnn"]);
        assert_eq!(files[2].local, Path::new("/d/cora/parts/metis-4/part-2.lgnn"));
        // 8 parts on 4 workers: rank 2 owns parts 4 and 5.
        let files = rank_data_files(&DataDir::new("/d"), "cora", "metis", (8, 4), 2);
        let remote: Vec<_> = files.iter().map(|f| f.remote.to_string_lossy().into_owned()).collect();
        assert_eq!(
            remote,
            [
                "cora/dataset.lgnn",
                "cora/parts/metis-8/manifest",
                "cora/parts/metis-8/part-4.lgnn",
                "cora/parts/metis-8/part-5.lgnn"
            ]
        );
        // One worker reads no partition: `metis-1` is never cut.
        let files = rank_data_files(&DataDir::new("/d"), "cora", "metis", (1, 1), 0);
        let remote: Vec<_> = files.iter().map(|f| f.remote.to_string_lossy().into_owned()).collect();
        assert_eq!(remote, ["cora/dataset.lgnn"]);
    }

    #[test]
    fn a_gnnpipe_job_ships_the_chunks_its_driver_stored() {
        let data = DataDir::new("/d");
        let files = chunk_files(&data, "cora", Some(4));
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].remote, Path::new("cora/chunks/metis-4/manifest"));
        // Hashed on the host as well; a partition's files are not.
        assert!(files[0].check_bytes);
        assert!(rank_data_files(&data, "cora", "metis", (4, 4), 2).iter().all(|f| !f.check_bytes));
        assert_eq!(files[0].local, crate::format::manifest_path(&crate::paths::chunks_dir(&data, "cora", 4)));
        // One chunk is the whole graph, and another strategy has none: nothing stored, nothing shipped.
        assert!(chunk_files(&data, "cora", Some(1)).is_empty() && chunk_files(&data, "cora", None).is_empty());
        // An archive given by path keeps its chunks beside it, as its partitions (`x.parts/`).
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("x.lgnn");
        std::fs::write(&archive, b"").unwrap();
        let chunks = crate::paths::chunks_dir(&data, archive.to_str().unwrap(), 4);
        assert_eq!(chunks, dir.path().join("x.chunks/metis-4"));
    }
}
