//! How worker processes are started. One small trait so `local` and `ssh`
//! launchers are interchangeable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Where a worker's output lines go (default: the driver's stderr), already
/// prefixed with the worker's name.
pub type LogSink = std::sync::Arc<dyn Fn(String) + Send + Sync>;

/// The default sink: each line to the driver's stderr, dropped once its reader has gone.
pub fn stderr_log() -> LogSink {
    std::sync::Arc::new(|l| crate::elog!("{l}"))
}

/// What a launcher needs to start one worker.
#[derive(Clone)]
pub struct WorkerSpec {
    pub rank: usize,
    /// The driver's control listener the worker connects back to.
    pub driver: SocketAddr,
    /// Per-job token from which the worker derives the job's keys (`job_key`).
    /// Passed on stdin (inside SSH for remote workers), never on argv, where
    /// other users could read it, nor on the control connection.
    pub token: String,
    /// Workers in the job, over every host: a launcher shares a host's cores
    /// among the job's workers on it (`threads_per_worker`).
    pub world: usize,
    /// Extra environment for the worker (e.g. RAYON_NUM_THREADS).
    pub env: Vec<(String, String)>,
}

/// Everything but the token, so that a `{:?}` in a log or an error message
/// never prints the secret.
impl std::fmt::Debug for WorkerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSpec")
            .field("rank", &self.rank)
            .field("driver", &self.driver)
            .field("token", &"<redacted>")
            .field("world", &self.world)
            .field("env", &self.env)
            .finish()
    }
}

/// The variable that sets a worker's compute threads: rayon's pool and
/// candle's matrix kernels both read it.
pub const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// Compute threads for each of `workers` workers sharing `cores` cores: an
/// equal share, at least one. Left to themselves, each would start a thread
/// per core, and the spinning threads of co-located workers slow them all
/// (torchrun and DGL's launcher divide a machine the same way).
pub fn threads_per_worker(cores: usize, workers: usize) -> usize {
    (cores / workers.max(1)).max(1)
}

/// "1 compute thread", "4 compute threads": how workers and checks say it.
pub fn describe_threads(n: usize) -> String {
    format!("{n} compute thread{}", if n == 1 { "" } else { "s" })
}

/// `THREADS_VAR` as the environment gives it, if set (an operator's choice,
/// which launchers keep).
pub fn threads_preset() -> Option<std::ffi::OsString> {
    std::env::var_os(THREADS_VAR).filter(|v| !v.is_empty())
}

/// A started worker. Dropping it stops the worker (no orphans).
pub trait WorkerProcess: Send {
    fn rank(&self) -> usize;
    /// Non-blocking: `Some(code)` once the process has exited; a death by
    /// signal N reads 128 + N, as shells report it.
    fn try_exit_code(&mut self) -> Option<i32>;
    /// Stop the worker and everything it started; idempotent.
    fn kill(&mut self);
}

/// `Sync`: the driver reads results back (`open_dir`) from a thread of its own.
pub trait Launcher: Sync {
    fn name(&self) -> &'static str;
    /// Which kind of launcher this is, so that advice names what can move
    /// workers off this machine (more nodes, more hosts) rather than the
    /// `--cluster` a run over one already gives.
    fn kind(&self) -> crate::cluster::profile::LauncherKind {
        crate::cluster::profile::LauncherKind::Local
    }
    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>>;
    /// Where `rank` runs, for an operator looking for a slow or lost worker.
    fn host_of(&self, _rank: usize) -> String {
        "local".into()
    }
    /// True when workers see the driver's files at the driver's paths (local
    /// processes). Otherwise a job names files relative to each worker's data
    /// directory, and results are read back with `open_dir`.
    fn shares_files(&self) -> bool {
        true
    }
    /// How many of `world` workers run on this machine, sharing its memory
    /// with each other and the driver (all local processes; none of those on
    /// other hosts, which check their own memory).
    fn local_workers(&self, world: usize) -> usize {
        world
    }
    /// The directory `rel` (relative to the data directory) on the host of
    /// `rank`, for reading results back; `None` when files are shared.
    fn open_dir(&self, _rank: usize, _rel: &Path) -> Option<anyhow::Result<Box<dyn RemoteDir>>> {
        None
    }
    /// Files every worker launched from now on must find under its data
    /// directory (a checkpoint to resume from), as (local path, path
    /// relative to the data directory); replaces the previous set. Nothing
    /// to do when files are shared.
    fn ship_with_job(&self, _files: Vec<(PathBuf, PathBuf)>) {}
    /// Worker `rank` refused its job with `message`: when that names files
    /// this launcher shipped to its host (a copy damaged in place there keeps
    /// its size and sidecar, so it was found current), every file shipped
    /// there is hashed on the host at its next launch and the damaged ones
    /// sent again. Returns the files named, once per run (none after the
    /// first time, and none when files are shared, as nothing was shipped).
    fn recheck_refused(&self, _rank: usize, _message: &str) -> Vec<PathBuf> {
        Vec::new()
    }
    /// Removes run `run`'s directory (`<data_dir>/runs/<run>`) from every
    /// host this launcher started workers on, unless `redundant`, given that
    /// host's `checkpoint/state.json` (if it has one), says why it must stay
    /// (`Err(reason)`). One outcome per host; none when files are shared.
    fn remove_run_dir(&self, _run: &str, _redundant: &Redundant) -> Vec<RunDirCleanup> {
        vec![]
    }
    /// The command that removes what `remove_run_dir` could not, for messages.
    fn clean_command(&self, _run: &str) -> Option<String> {
        None
    }
}

/// Whether a host's copy of a run directory holds nothing the driver lacks,
/// judged from its `checkpoint/state.json` (`None`: it has no checkpoint).
pub type Redundant = dyn Fn(Option<&[u8]>) -> Result<(), String> + Sync;

/// What became of a run directory on one host.
#[derive(Debug)]
pub struct RunDirCleanup {
    /// `user@address:port`.
    pub host: String,
    /// Its path there.
    pub path: PathBuf,
    pub outcome: anyhow::Result<Cleaned>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Cleaned {
    Removed {
        files: u64,
        bytes: u64,
    },
    /// There was none.
    Absent,
    /// Kept, and why (it holds what the driver has no copy of).
    Kept(String),
}

/// The files of `paths` a worker's refusal `message` names (by their paths
/// on its host), as `Launcher::recheck_refused` finds them and the driver
/// checks a second refusal against them.
pub fn named_in<'a>(message: &str, paths: impl IntoIterator<Item = &'a PathBuf>) -> Vec<&'a PathBuf> {
    paths.into_iter().filter(|p| message.contains(&*p.to_string_lossy())).collect()
}

/// A directory on a worker's host, read file by file.
pub trait RemoteDir {
    /// The whole file `name` in this directory.
    fn read(&mut self, name: &str) -> anyhow::Result<Vec<u8>>;
    /// `read`, or `None` when there is no file `name` (where the
    /// directory can tell absence from a failure; else `read`'s error).
    fn read_if_present(&mut self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.read(name).map(Some)
    }
}

/// Linux signal numbers by name (the ones a worker may die of).
const SIGNALS: [(i32, &str); 11] = [
    (1, "HUP"),
    (2, "INT"),
    (3, "QUIT"),
    (4, "ILL"),
    (6, "ABRT"),
    (7, "BUS"),
    (8, "FPE"),
    (9, "KILL"),
    (11, "SEGV"),
    (13, "PIPE"),
    (15, "TERM"),
];

/// The number of signal `name` (`KILL`, `SIGKILL`), if known.
pub fn signal_number(name: &str) -> Option<i32> {
    let name = name.strip_prefix("SIG").unwrap_or(name);
    SIGNALS.iter().find(|(_, n)| *n == name).map(|(s, _)| *s)
}

/// What `try_exit_code` gives for a remote worker whose connection broke: its
/// exit is unknown (ssh(1) says 255), and saying it "exited" would send the
/// operator to the wrong place.
pub const LINK_LOST: i32 = -255;

/// An exit code as `try_exit_code` gives it, in words: "exited with code 1",
/// "was killed by SIGKILL".
pub fn describe_exit(code: i32) -> String {
    if code == LINK_LOST {
        return "was cut off: the driver's SSH session to its host broke (the host went down or rebooted, its sshd \
                stopped, or the network failed)"
            .into();
    }
    match SIGNALS.iter().find(|(s, _)| 128 + s == code) {
        Some((_, name)) => format!("was killed by SIG{name}"),
        None => format!("exited with code {code}"),
    }
}

/// `try_exit_code` of a local process's status.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

/// A worker that is a child process of the driver (a local worker, or the
/// `srun` that runs one); stopped when dropped.
pub struct ChildWorker {
    rank: usize,
    child: Child,
    done: Option<i32>,
    /// How long a SIGTERM gets before SIGKILL; `None` kills at once.
    term_grace: Option<Duration>,
}

impl ChildWorker {
    pub fn new(rank: usize, child: Child, term_grace: Option<Duration>) -> Self {
        ChildWorker { rank, child, done: None, term_grace }
    }
}

impl WorkerProcess for ChildWorker {
    fn rank(&self) -> usize {
        self.rank
    }

    fn try_exit_code(&mut self) -> Option<i32> {
        if self.done.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.done = Some(exit_code(status));
        }
        self.done
    }

    fn kill(&mut self) {
        if self.try_exit_code().is_some() {
            return;
        }
        if let Some(grace) = self.term_grace {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let deadline = Instant::now() + grace;
            while self.try_exit_code().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if self.try_exit_code().is_none() {
            let _ = self.child.kill();
            if let Ok(status) = self.child.wait() {
                self.done = Some(exit_code(status));
            }
        }
    }
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_an_equal_share_of_the_cores_and_never_none() {
        assert_eq!(threads_per_worker(16, 4), 4);
        assert_eq!(threads_per_worker(16, 3), 5);
        assert_eq!(threads_per_worker(2, 4), 1);
        assert_eq!(threads_per_worker(8, 0), 8);
        assert_eq!(describe_threads(1), "1 compute thread");
        assert_eq!(describe_threads(4), "4 compute threads");
    }

    #[test]
    fn a_worker_specs_debug_form_leaves_the_token_out() {
        let token = crate::cluster::job_key::random_hex(crate::cluster::job_key::TOKEN_BYTES);
        let spec = WorkerSpec {
            rank: 1,
            driver: "127.0.0.1:9".parse().unwrap(),
            token: token.clone(),
            world: 2,
            env: vec![("RAYON_NUM_THREADS".into(), "3".into())],
        };
        let shown = format!("{spec:?} {spec:#?}");
        assert!(!shown.contains(&token) && shown.contains("<redacted>"), "{shown}");
        assert!(shown.contains("rank: 1") && shown.contains("RAYON_NUM_THREADS"), "{shown}");
    }
}
