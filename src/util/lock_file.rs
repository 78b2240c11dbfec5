//! Exclusive OS locks on lock files (`flock` through std's `File::try_lock`),
//! shared by the run lock and the partition lock. The OS releases a lock when
//! its process ends, however it ends; the file itself stays, since removing
//! it would let a waiter lock an unlinked file while a newcomer locks a new one.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

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
