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

/// How many times `acquire` tries a busy lock (5 ms apart) before it
/// takes the run for one in use.
const PROBE_TRIES: usize = 20;

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
        // `check_free` holds it for an instant: a lock still busy after a
        // few tries has a real holder.
        let mut tries = 0;
        let mut file = loop {
            match try_exclusive(&path).map_err(io)? {
                Lock::Held(f) => break f,
                Lock::Busy(_) if tries < PROBE_TRIES => tries += 1,
                Lock::Busy(f) => return Err(in_use(f, run)),
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        // Who holds it, for the message another process gives.
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(RunLock { _file: file })
    }
}

/// Refuses run `run` (directory `run_dir`, which exists) while another
/// process trains it, for a `--run` of its name: a run still before its
/// first checkpoint must not be taken for one that died before it, whose
/// directory the message says to remove. The probe holds the lock for an
/// instant only when nobody does; a holder that comes for it in that instant
/// tries again (`acquire`).
pub fn check_free(run_dir: &Path, run: &str) -> Result<(), TrainError> {
    let path = run_dir.join(".lock");
    if !path.is_file() {
        return Ok(());
    }
    match try_exclusive(&path).map_err(|source| TrainError::Io { path: path.clone(), source })? {
        Lock::Held(_) => Ok(()),
        Lock::Busy(f) => Err(in_use(f, run)),
    }
}

/// The refusal of a run whose lock file `f` another process holds.
fn in_use(mut f: File, run: &str) -> TrainError {
    // The holder wrote its pid after locking; it may not have yet.
    let mut text = String::new();
    let holder = f.read_to_string(&mut text).ok().and_then(|_| text.trim().parse::<u32>().ok());
    TrainError::RunInUse { run: run.to_string(), holder }
}

/// A run being trained now on dataset `name` of `data`, and who trains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingRun {
    pub run: String,
    /// The process holding the run's lock, when it wrote its pid yet.
    pub holder: Option<u32>,
}

/// The runs of `data` that a process trains now (their lock is held) on
/// dataset `name`, by name: a `download --force` of that dataset replaces the
/// data under them. A run whose dataset cannot be told is left out.
pub fn training_on(data: &crate::DataDir, name: &str) -> Vec<TrainingRun> {
    let Ok(entries) = std::fs::read_dir(data.runs_dir()) else { return Vec::new() };
    let mut runs: Vec<TrainingRun> = entries
        .flatten()
        .filter_map(|e| {
            let run = e.file_name().to_str()?.to_string();
            let dir = e.path();
            if super::run_dataset::trained_on(&dir)?.0 != name {
                return None;
            }
            match check_free(&dir, &run) {
                Err(TrainError::RunInUse { holder, .. }) => Some(TrainingRun { run, holder }),
                _ => None,
            }
        })
        .collect();
    runs.sort_by(|a, b| a.run.cmp(&b.run));
    runs
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

    #[test]
    fn check_free_refuses_while_held_and_leaves_a_free_run_free() {
        let dir = tempfile::tempdir().unwrap();
        check_free(dir.path(), "r").unwrap();
        assert!(!dir.path().join(".lock").exists(), "the probe made a lock file");
        let held = RunLock::acquire(dir.path(), "r").unwrap();
        let e = check_free(dir.path(), "r").unwrap_err();
        assert!(matches!(e, TrainError::RunInUse { holder: Some(p), .. } if p == std::process::id()), "{e:?}");
        drop(held);
        check_free(dir.path(), "r").unwrap();
        // The probe let go of it.
        RunLock::acquire(dir.path(), "r").unwrap();
    }
}
