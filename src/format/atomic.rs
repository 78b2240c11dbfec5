use super::FormatError;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A file written under a temporary name next to its target and renamed into
/// place after fsync, so a crash or error never leaves a half-written file at
/// the target path. Dropped without `commit`, the temp file is removed.
///
/// The writer holds an OS lock on its temp file, so the temp file of a writer
/// that was killed (kill -9, OOM, power loss) is recognisable: nobody holds
/// its lock. The next write of the same target removes such leftovers, which
/// for a dataset or an `infer --out` can be gigabytes.
pub struct AtomicFile {
    /// As the caller named it, for messages.
    target: PathBuf,
    /// Where the bytes go: `target`, or the file it links to (`resolve`).
    dest: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
    committed: bool,
    /// Removed by an interrupt of `partition`, `tune-merge`, ... (`util::interrupt`).
    _temp: crate::util::interrupt::Registered,
}

impl AtomicFile {
    pub fn create(target: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::open(target.as_ref(), None)
    }

    /// `create`, the file having exactly the permission bits `mode` (umask
    /// or not) from before its first byte is written: for a file that must
    /// never be readable or writable by others, not even for a moment.
    pub fn create_with_mode(target: impl AsRef<Path>, mode: u32) -> Result<Self, FormatError> {
        Self::open(target.as_ref(), Some(mode))
    }

    fn open(target: &Path, mode: Option<u32>) -> Result<Self, FormatError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dest = resolve(target)?;
        let target = target.to_path_buf();
        let dir = parent_dir(&dest);
        fs::create_dir_all(&dir).map_err(|e| FormatError::io(&dir, e))?;
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
        // Before the file exists: an interrupt after its creation finds it registered.
        let temp = crate::util::interrupt::Registered::new(&tmp);
        // Errors name the file being written, not its temporary name.
        let file = match mode {
            None => File::create(&tmp),
            // Owner-only as it is made (a leftover temp keeps its bits: set them again, still empty).
            Some(m) => {
                fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).and_then(|f| {
                    f.set_permissions(fs::Permissions::from_mode(m))?;
                    Ok(f)
                })
            }
        }
        .map_err(|e| FormatError::io(&target, e))?;
        // Where the file system has no locks, the write goes on unlocked and
        // leftovers are kept (an unlocked temp file may be a live writer's).
        let _ = file.lock();
        remove_abandoned(&dir, &name, &tmp);
        Ok(AtomicFile {
            target,
            dest,
            tmp,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            committed: false,
            _temp: temp,
        })
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
    pub fn commit(self) -> Result<PathBuf, FormatError> {
        self.commit_held().map(|(path, _)| path)
    }

    /// `commit`, returning the file still open: the OS lock its writer took
    /// goes with the file to its target name and lasts as long as the
    /// handle, so that others tell a file in use from one a process killed
    /// left behind (nobody holds its lock).
    pub fn commit_held(mut self) -> Result<(PathBuf, File), FormatError> {
        let w = self.file.take().expect("commit twice");
        let f = w.into_inner().map_err(|e| FormatError::io(&self.target, e.into_error()))?;
        f.sync_all().map_err(|e| FormatError::io(&self.target, e))?;
        crate::util::interrupt::settle(|| fs::rename(&self.tmp, &self.dest))
            .map_err(|e| FormatError::io(&self.target, e))?;
        self.committed = true;
        if let Ok(d) = File::open(parent_dir(&self.dest)) {
            let _ = d.sync_all();
        }
        Ok((self.target.clone(), f))
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

/// The file a write of `target` replaces. A symbolic link is written
/// through: a profile kept in a shared directory and linked into place (as
/// dotfile managers do) was replaced by a regular file of its own, so the
/// shared file never saw the update. The temp file goes next to the real
/// file, so the rename stays in one directory and atomic, and the link stays.
fn resolve(target: &Path) -> Result<PathBuf, FormatError> {
    let is_link = fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(target.to_path_buf());
    }
    fs::canonicalize(target).map_err(|e| {
        let why = match fs::read_link(target) {
            Ok(to) if e.kind() == std::io::ErrorKind::NotFound => format!(
                "to {}, which does not exist; create it, or remove the link to write a file of its own there",
                to.display()
            ),
            _ => format!("that cannot be followed ({e}); point it at a file, or remove it"),
        };
        FormatError::Link { path: target.to_path_buf(), why }
    })
}

/// Refuses `target` as `write_atomic` and `AtomicFile` would (a symbolic
/// link to nothing, or in a circle), without writing: a command whose output
/// comes after minutes of work (`tune-merge --calibrate`) says so first.
pub fn check_target(target: &Path) -> Result<(), FormatError> {
    resolve(target).map(drop)
}

/// How long a temp file is left alone after its last write whatever its lock
/// says: a writer locks its file just after creating it.
const CREATE_GRACE: Duration = Duration::from_secs(2);

/// Removes the temp files of earlier writes of `name` in `dir` whose writer is
/// gone: regular files named `.{name}.tmp.<pid>` whose lock can be taken.
fn remove_abandoned(dir: &Path, name: &str, ours: &Path) {
    let prefix = format!(".{name}.tmp.");
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let n = e.file_name();
        let is_temp = n
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        let path = e.path();
        if !is_temp || path == ours {
            continue;
        }
        // Never through a link, never a directory (the partition writer's
        // staging directories share the naming and clean up after themselves).
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let settled = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= CREATE_GRACE);
        if !meta.is_file() || !settled {
            continue;
        }
        if let Ok(f) = File::open(&path)
            && f.try_lock().is_ok()
        {
            let _ = fs::remove_file(&path);
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
    write_all(AtomicFile::create(target.as_ref())?, target.as_ref(), bytes).map(drop)
}

/// `write_atomic`, the file held as `AtomicFile::commit_held` holds it.
pub fn write_atomic_held(target: impl AsRef<Path>, bytes: &[u8]) -> Result<File, FormatError> {
    write_all(AtomicFile::create(target.as_ref())?, target.as_ref(), bytes)
}

/// `write_atomic` of a file whose permission bits are exactly `mode` from its
/// first byte on (`AtomicFile::create_with_mode`).
pub fn write_atomic_mode(target: impl AsRef<Path>, bytes: &[u8], mode: u32) -> Result<(), FormatError> {
    write_all(AtomicFile::create_with_mode(target.as_ref(), mode)?, target.as_ref(), bytes).map(drop)
}

fn write_all(mut f: AtomicFile, target: &Path, bytes: &[u8]) -> Result<File, FormatError> {
    f.writer().write_all(bytes).map_err(|e| FormatError::io(target, e))?;
    Ok(f.commit_held()?.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn aged(path: &Path) {
        let f = File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    }

    #[test]
    fn a_write_removes_abandoned_temp_files_of_its_target_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let temp = |n: &str| d.join(n);
        // Unlocked and settled: a writer that died.
        let dead = temp(".x.json.tmp.4242");
        fs::write(&dead, b"half").unwrap();
        aged(&dead);
        // Locked: a live writer, however old its last write.
        let live = temp(".x.json.tmp.4343");
        fs::write(&live, b"half").unwrap();
        aged(&live);
        let holder = File::open(&live).unwrap();
        holder.lock().unwrap();
        // Unlocked but just written: maybe a writer between create and lock.
        let fresh = temp(".x.json.tmp.4444");
        fs::write(&fresh, b"half").unwrap();
        // Not ours to judge: another target's, a directory, a link, other names.
        let others = [".y.json.tmp.4242", ".x.json.tmp.", ".x.json.tmp.12a", ".x.json.part"].map(temp);
        for p in &others {
            fs::write(p, b"keep").unwrap();
            aged(p);
        }
        let staging = temp(".x.json.tmp.4545");
        fs::create_dir(&staging).unwrap();
        let link = temp(".x.json.tmp.4646");
        std::os::unix::fs::symlink(&others[0], &link).unwrap();

        write_atomic(d.join("x.json"), b"{}").unwrap();
        assert_eq!(fs::read(d.join("x.json")).unwrap(), b"{}");
        assert!(!dead.exists(), "the dead writer's temp file stayed");
        for p in [&live, &fresh, &staging, &link].into_iter().chain(&others) {
            assert!(fs::symlink_metadata(p).is_ok(), "{} was removed", p.display());
        }
        // Once its writer is gone, the old one goes with the next write.
        drop(holder);
        write_atomic(d.join("x.json"), b"[]").unwrap();
        assert!(!live.exists());
        assert!(fresh.exists(), "fresh files stay until they settle");
    }

    /// No `.NAME.tmp.PID` file left in `dir`.
    fn no_temp_files(dir: &Path) {
        let left: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "temp files left in {}: {left:?}", dir.display());
    }

    #[test]
    fn a_write_onto_a_symbolic_link_replaces_the_file_it_points_to_and_keeps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, profiles) = (dir.path().join("shared"), dir.path().join("profiles"));
        fs::create_dir_all(&shared).unwrap();
        fs::create_dir_all(&profiles).unwrap();
        fs::write(shared.join("lab.toml"), b"old").unwrap();
        // Relative, as dotfile managers make them; and a link to that link.
        let link = profiles.join("lab.toml");
        std::os::unix::fs::symlink("../shared/lab.toml", &link).unwrap();
        let chained = dir.path().join("lab.toml");
        std::os::unix::fs::symlink(&link, &chained).unwrap();
        for (via, bytes) in [(&link, &b"new"[..]), (&chained, b"newer")] {
            write_atomic(via, bytes).unwrap();
            assert_eq!(fs::read(shared.join("lab.toml")).unwrap(), bytes);
            assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
            assert_eq!(fs::read_link(&link).unwrap(), Path::new("../shared/lab.toml"));
            assert!(fs::symlink_metadata(&chained).unwrap().file_type().is_symlink());
            for d in [dir.path(), &shared, &profiles] {
                no_temp_files(d);
            }
        }
        // The writer's own path is what its errors and its result name.
        let w = AtomicFile::create(&link).unwrap();
        assert_eq!(w.commit().unwrap(), link);
    }

    #[test]
    fn a_write_onto_a_dangling_or_looping_link_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let dangling = d.join("lab.toml");
        std::os::unix::fs::symlink("gone/lab.toml", &dangling).unwrap();
        let looped = d.join("loop.toml");
        std::os::unix::fs::symlink("loop.toml", &looped).unwrap();
        for (link, said) in [(&dangling, "to gone/lab.toml, which does not exist"), (&looped, "cannot be followed")] {
            let e = write_atomic(link, b"x").unwrap_err();
            assert!(matches!(e, FormatError::Link { .. }), "{e}");
            let e = e.to_string();
            assert!(e.starts_with(&format!("{}: a symbolic link", link.display())) && e.contains(said), "{e}");
            assert!(fs::symlink_metadata(link).unwrap().file_type().is_symlink(), "the link was replaced");
        }
        assert!(!d.join("gone").exists(), "a directory was made for the dangling link");
        no_temp_files(d);
    }

    #[test]
    fn a_writer_holds_the_lock_on_its_temp_file_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = AtomicFile::create(dir.path().join("x.bin")).unwrap();
        w.writer().write_all(b"data").unwrap();
        let probe = File::open(&w.tmp).unwrap();
        assert!(probe.try_lock().is_err(), "a writer's temp file must be locked while it writes");
        aged(&w.tmp);
        // Another writer of the same target leaves a live writer's file alone.
        remove_abandoned(dir.path(), "x.bin", &dir.path().join(".x.bin.tmp.1"));
        assert!(w.tmp.exists());
        w.commit().unwrap();
        assert_eq!(fs::read(dir.path().join("x.bin")).unwrap(), b"data");
    }
}
