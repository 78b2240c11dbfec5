//! One process trains a run at a time. Two `train --resume` of one run, or a
//! resume of a run still training, would both append to its `metrics.jsonl`
//! and overwrite its checkpoint, leaving records lost or twice over. The
//! process that trains a run holds an exclusive lock on `runs/<run>/.lock`
//! from before its first write to its end (restarts included); the OS drops
//! the lock when the process ends, however it ends (`util::lock_file`).

use super::TrainError;
use crate::util::lock_file::{Lock, try_exclusive};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Held while this process trains the run; released on drop.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Locks run `run` in `run_dir` (which exists), or says who holds it.
    pub fn acquire(run_dir: &Path, run: &str) -> Result<RunLock, TrainError> {
        let path = run_dir.join(".lock");
        let io = |source| TrainError::Io { path: path.clone(), source };
        let mut file = match try_exclusive(&path).map_err(io)? {
            Lock::Held(f) => f,
            Lock::Busy(mut f) => {
                // The holder wrote its pid after locking; it may not have yet.
                let mut text = String::new();
                let holder = f.read_to_string(&mut text).ok().and_then(|_| text.trim().parse::<u32>().ok());
                return Err(TrainError::RunInUse { run: run.to_string(), holder });
            }
        };
        // Who holds it, for the message another process gives.
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(RunLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_naming_the_first_and_the_lock_is_free_again_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(dir.path(), "r").unwrap();
        let e = RunLock::acquire(dir.path(), "r").unwrap_err();
        assert!(matches!(e, TrainError::RunInUse { holder: Some(p), .. } if p == std::process::id()), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("run `r`") && msg.contains(&std::process::id().to_string()), "{msg}");
        drop(first);
        RunLock::acquire(dir.path(), "r").unwrap();
    }
}
