//! A worker holds a lock file in its run directory for as long as it runs
//! (`.worker-<rank>.lock`, an OS lock the kernel drops however the process
//! ends), so that `cluster clean`, run from any machine, can tell a run in
//! progress on a host (a driver elsewhere is training it) from what an ended
//! run left there: it asks the host with `flock -n`.

use crate::util::lock_file::{self, Lock};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Held by a running worker; removes its lock file when dropped (a worker
/// killed leaves the file unlocked, which reads as "not running").
pub struct RunBusy {
    path: PathBuf,
    _file: File,
}

impl Drop for RunBusy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub fn lock_name(rank: usize) -> String {
    format!(".worker-{rank}.lock")
}

/// Marks run directory `run_dir` (made if missing) as in use by training
/// worker `rank`. `None`, with a warning, when it cannot: the mark only
/// protects the run from a `cluster clean` elsewhere, never a reason to fail it.
pub fn mark(run_dir: &Path, rank: usize) -> Option<RunBusy> {
    mark_as(run_dir, rank, lock_name(rank))
}

/// `mark`, for inference worker `rank`: a mark of its own (this process's),
/// since `infer` of a run still training runs beside that run's workers of
/// the same ranks, which hold theirs.
pub fn mark_infer(run_dir: &Path, rank: usize) -> Option<RunBusy> {
    mark_as(run_dir, rank, format!(".worker-{rank}.infer-{}.lock", std::process::id()))
}

fn mark_as(run_dir: &Path, rank: usize, name: String) -> Option<RunBusy> {
    let path = run_dir.join(name);
    let held = std::fs::create_dir_all(run_dir).and_then(|_| lock_file::try_exclusive(&path));
    match held {
        Ok(Lock::Held(file)) => Some(RunBusy { path, _file: file }),
        Ok(Lock::Busy(_)) => {
            tracing::warn!(
                "{} is held by another worker of rank {rank}: two drivers run this run at once?",
                path.display()
            );
            None
        }
        Err(e) => {
            tracing::warn!("cannot mark {} as in use ({e}): a cluster clean elsewhere could remove it", path.display());
            None
        }
    }
}

/// Removes the marks in run directory `run_dir` that no process holds:
/// those of workers killed (stopped by force, or lost), which could not
/// remove their own. Called by the driver once its workers are gone.
pub fn remove_stale(run_dir: &Path) {
    remove_unheld(run_dir, |name| name.starts_with(".worker-") && name.ends_with(".lock"));
}

/// Removes the files of `run_dir` named as `ours` accepts whose OS lock no
/// process holds: their owner ended without removing them (SIGKILL).
pub fn remove_unheld(run_dir: &Path, ours: impl Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(run_dir) else { return };
    for e in entries.flatten() {
        if !ours(&e.file_name().to_string_lossy()) {
            continue;
        }
        // Held for the removal, so a file its owner still holds is left alone.
        if let Ok(Lock::Held(_file)) = lock_file::try_exclusive(&e.path()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The `/bin/sh` script that prints the rank of every worker running in
/// directory `dir` (already quoted), one per line, or fails when the host
/// cannot tell (no `flock(1)`).
pub fn running_ranks_script(dir: &str) -> String {
    format!(
        "command -v flock >/dev/null 2>&1 || {{ echo 'flock(1) is not installed, so whether workers are running \
         there cannot be told'; exit 1; }}; cd -P -- {dir} || exit 1; for f in .worker-*.lock; do \
         [ -f \"$f\" ] || continue; flock -n \"$f\" true || echo \"$f\"; done"
    )
}

/// The ranks in `running_ranks_script`'s output.
pub fn parse_running(out: &str) -> Vec<usize> {
    // `.worker-<rank>.lock`, or `.worker-<rank>.infer-<pid>.lock` (`mark_infer`).
    let rank = |l: &str| l.trim().strip_prefix(".worker-")?.strip_suffix(".lock")?.split('.').next()?.parse().ok();
    let mut ranks: Vec<usize> = out.lines().filter_map(rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's check sees exactly the locks a live process holds, through
    /// the real flock(1) and sh.
    #[test]
    fn the_shell_check_sees_the_workers_that_hold_their_mark() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let check = || {
            let script = running_ranks_script(&format!("'{}'", dir.display()));
            let out = std::process::Command::new("/bin/sh").args(["-c", &script]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
            parse_running(&String::from_utf8_lossy(&out.stdout))
        };
        let (a, b) = (mark(&dir, 3).unwrap(), mark(&dir, 0).unwrap());
        assert!(mark(&dir, 3).is_none(), "a second holder of one rank's mark");
        std::fs::write(dir.join(lock_name(7)), b"").unwrap(); // left by a worker killed
        assert_eq!(check(), [0, 3]);
        drop(a);
        assert!(!dir.join(lock_name(3)).exists());
        assert_eq!(check(), [0]);
        drop(b);
        assert_eq!(check(), Vec::<usize>::new());
        // An inference worker beside a training worker of its rank: both marked, the rank listed once.
        let (t, i) = (mark(&dir, 1).unwrap(), mark_infer(&dir, 1).unwrap());
        assert_eq!(check(), [1]);
        drop(t);
        assert_eq!(check(), [1]);
        drop(i);
        assert_eq!(check(), Vec::<usize>::new());
        // What killed workers leave goes; a live worker's mark stays.
        let live = mark(&dir, 2).unwrap();
        std::fs::write(dir.join(".worker-5.infer-99.lock"), b"").unwrap();
        remove_stale(&dir);
        let left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, [lock_name(2)]);
        drop(live);
    }
}
