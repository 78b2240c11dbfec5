//! Exclusive OS locks on lock files (`flock` through std's `File::try_lock`),
//! shared by the run lock, the download lock and the partition lock. The OS
//! releases a lock when its process ends, however it ends. A `try_exclusive`
//! file stays; a `Removable` one is there only while held.

use crate::util::interrupt::Registered;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The lock file, and whether this process now holds its lock.
pub enum Lock {
    Held(File),
    /// Another process holds it.
    Busy(File),
}

/// Opens (creating) lock file `path` and tries its exclusive lock once.
pub fn try_exclusive(path: &Path) -> std::io::Result<Lock> {
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Lock::Held(file)),
        Err(TryLockError::WouldBlock) => Ok(Lock::Busy(file)),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// A held lock whose file exists only while someone holds it: the holder
/// removes it as it lets go (and an interrupt's exit does, `Registered`).
/// Removing it alone would let a waiter lock the unlinked file while a
/// newcomer locks a new one; so `acquire`, once it has the lock, checks that
/// the path still names the file it locked, and locks again when not.
pub struct Removable {
    path: PathBuf,
    registered: Option<Registered>,
    _file: File,
}

impl Removable {
    /// Waits for the lock at `path`, calling `waiting` first when another process holds it.
    pub fn acquire(path: &Path, waiting: impl FnOnce()) -> std::io::Result<Removable> {
        let mut waiting = Some(waiting);
        loop {
            let file = match try_exclusive(path)? {
                Lock::Held(f) => f,
                Lock::Busy(f) => {
                    if let Some(say) = waiting.take() {
                        say();
                    }
                    f.lock()?;
                    f
                }
            };
            let locked = file.metadata()?;
            match std::fs::metadata(path) {
                Ok(now) if (now.dev(), now.ino()) == (locked.dev(), locked.ino()) => {
                    let registered = Some(Registered::new(path));
                    return Ok(Removable { path: path.to_path_buf(), registered, _file: file });
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Removable {
    /// Removed while still locked (the file is closed after this). Untracked
    /// first: an interrupt's exit after the removal would otherwise remove
    /// the file of the next holder.
    fn drop(&mut self) {
        drop(self.registered.take());
        let _ = std::fs::remove_file(&self.path);
    }
}
