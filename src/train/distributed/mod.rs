//! Training with W > 1 worker processes. The driver (`driver.rs`) partitions
//! the dataset if needed, starts the workers through a `cluster::Launcher`,
//! sends each the job (`DistJob`), and turns what they report into
//! `metrics.jsonl`, progress and the run summary. Each worker (`worker.rs`)
//! joins the TCP mesh, serves its part's feature rows, and runs the same
//! `run_loop` as a single worker: only the `Collective` (`MeshCollective`) and
//! the row source (`FetchingRows`: own part, cache, remote owners) differ.
//!
//! Checkpoints: rank 0 writes them into the run directory named in the job.
//! With the `local` launcher that is the driver's own run directory; a
//! launcher without a shared filesystem (`ssh`) gets job paths relative to
//! each worker's data directory, and the driver copies rank 0's final
//! checkpoint back (`Launcher::open_dir`); when the run ends it removes the
//! run's directory from the hosts (`Launcher::remove_run_dir`), since resume
//! and infer read only its own copy. `hosts.rs` is the driver's side of
//! `cluster clean`, which removes what runs that could not do so left.

mod checkpoint_gate;
mod driver;
mod epoch_gate;
mod grad_dump;
mod hosts;
pub(crate) mod infer;
mod ledger;
mod replicas;
mod rows;
mod stragglers;
mod worker;

pub use driver::{AutoPlanner, DistOptions, resume_distributed, train_distributed};
pub use grad_dump::GradDump;
pub use hosts::clean_hosts;
pub use infer::{InferDone, InferJob, InferLaunch, infer_distributed, run_infer_worker};
pub use replicas::ReplicaCheck;
pub use rows::FetchingRows;
pub use worker::run_worker;

use super::TrainConfig;
use crate::comm::{ByteCounts, FetchStats};
use crate::metrics::{EpochRecord, StepRecord};
use std::path::PathBuf;

/// The `train` task of a job, as every worker receives it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DistJob {
    pub config: TrainConfig,
    /// Paths on the worker's host: absolute (shared filesystem), or relative
    /// to the worker's `--data-dir` (where the launcher shipped the files).
    pub dataset: PathBuf,
    pub parts_dir: PathBuf,
    pub run_dir: PathBuf,
    /// Continue from the checkpoint in `run_dir`.
    pub resume: bool,
    pub stop_after: Option<u64>,
    /// `RunOptions::stop_in_evaluation`.
    #[serde(default)]
    pub stop_in_evaluation: Option<u64>,
    /// Rank 0 writes the first iteration's summed gradient here (tests).
    pub dump_grad: Option<PathBuf>,
    /// Compare the replicas' weights every this many iterations (0: never).
    pub check_replicas: u64,
    /// Bound of every wait on another worker.
    pub comm_timeout_ms: u64,
    /// leapgnn `--time-steps auto`: the cost model's plan for every T.
    #[serde(default)]
    pub auto_plans: Vec<crate::schedule::MergePlan>,
    /// The checksum of the partition manifest the driver read
    /// (`ManifestFile::checksum`): workers refuse another partitioning that
    /// replaced it meanwhile (`check_partition`).
    #[serde(default)]
    pub partition_checksum: Option<u64>,
    /// GNNPipe's stored chunks (`fullgraph::chunks::ensure_stored`), a path
    /// as `parts_dir`, and the checksum of their manifest as the driver read
    /// it; None with one chunk, or another strategy.
    #[serde(default)]
    pub chunks_dir: Option<PathBuf>,
    #[serde(default)]
    pub chunks_checksum: Option<u64>,
    /// Where the workers run and what starts them.
    #[serde(flatten)]
    pub placement: Placement,
}

/// Where a job's workers run, as each worker receives it (`DistJob` and
/// `InferJob` alike): the workers on one host share its memory, so each
/// checks their shares together (`host_ranks`), and one of them speaks
/// for the host (`warn_address_space`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    /// Where the launcher places each rank. A spare that takes an
    /// unreachable host's place takes all of its ranks, so which ranks share
    /// a host holds wherever they are started.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The launcher that starts the workers, for what a refusal advises.
    #[serde(default)]
    pub launcher: crate::cluster::profile::LauncherKind,
    /// The driver's machine's MemAvailable, read before it started the
    /// workers there, for local workers; None for those it starts over ssh
    /// or Slurm, which read their own host's.
    #[serde(default)]
    pub available: Option<u64>,
    /// The driver's `--memory-limit-mb`, for its local workers: the memory
    /// the workers and the driver on its machine may use together.
    #[serde(default)]
    pub memory_limit: Option<u64>,
}

impl Placement {
    /// Where `launcher` places each of `world` ranks.
    pub(crate) fn of(launcher: &dyn crate::cluster::Launcher, world: usize, memory_limit: Option<u64>) -> Placement {
        let kind = launcher.kind();
        // One reading for all the workers sharing this machine: each reading
        // its own as it started, a worker that started after its neighbours
        // had loaded their share saw MemAvailable already lowered by them, and
        // held it against their shares a second time.
        let local = kind == crate::cluster::profile::LauncherKind::Local;
        let available = local.then(crate::util::mem_available).flatten();
        let memory_limit = memory_limit.filter(|_| local);
        let hosts = (0..world).map(|rank| launcher.host_of(rank)).collect();
        Placement { hosts, launcher: kind, available, memory_limit }
    }

    /// What worker `rank`'s memory checks hold its host to: on the driver's
    /// machine, the driver's `--memory-limit-mb` or else its one reading of
    /// MemAvailable (`available`), which the driver held all of them to
    /// before it started them; on another host (ssh, Slurm), that host's
    /// own. A worker given `LEAPGNN_TEST_MEM_AVAILABLE` stands for a host
    /// the driver cannot read (tests), and takes that for MemAvailable.
    pub(crate) fn limit(&self, rank: usize, resume: bool) -> crate::train::fullgraph::memory::Limit {
        let own = std::env::var_os(crate::util::MEM_AVAILABLE_TEST_VAR).is_some();
        let available = self.available.filter(|_| !own);
        let limit = crate::train::fullgraph::memory::Limit {
            bytes: self.memory_limit,
            resume,
            launcher: self.launcher,
            available,
        };
        if let Some(b) = crate::train::fullgraph::memory::budgets(limit).iter().find(|b| !b.each) {
            let mib = crate::util::mib(b.bytes);
            tracing::debug!("worker {rank}: this host's workers are held together to {mib} MiB ({})", b.source);
        }
        limit
    }

    /// The ranks on `rank`'s host (`hosts`), `rank` among them; only `rank`
    /// when the driver said nothing of where they run.
    pub(crate) fn host_ranks(&self, rank: usize) -> Vec<usize> {
        match self.hosts.get(rank) {
            Some(here) => (0..self.hosts.len()).filter(|&r| r == rank || self.hosts[r] == *here).collect(),
            None => vec![rank],
        }
    }

    /// Says, from the first of `host_ranks` only (once per host, not once per
    /// rank), what a check that passed under this host's address-space limit
    /// did not cover (`memory::address_space_warning`): a limit set on an ssh
    /// host's or a Slurm node's shell alone is not the driver's to see. The
    /// driver prints it as a warning (`log_worker_line`).
    pub(crate) fn warn_address_space(&self, rank: usize, reporter: &crate::cluster::worker_session::Reporter) {
        if self.host_ranks(rank).first() != Some(&rank) {
            return;
        }
        if let Some(line) = address_space_line(rank) {
            let _ = reporter.send(&crate::cluster::ToDriver::Log(format!("{ADDRESS_SPACE}{line}")));
        }
    }
}

/// How a worker's `Placement::warn_address_space` line begins.
const ADDRESS_SPACE: &str = "address-space warning ";

/// What worker `rank` says of the address-space limit this process runs
/// under, on this host and naming both; None without a limit.
fn address_space_line(rank: usize) -> Option<String> {
    use crate::train::fullgraph::memory::{address_space_warning, worker_rlimit_source};
    let host = crate::util::host_name();
    address_space_warning(&worker_rlimit_source(rank, &host)).map(|text| format!("on {host}: {text}"))
}

/// How a worker's line that the driver prints as a warning begins (rank 0's
/// skipped checkpoint, which default log levels would otherwise hide).
pub(crate) const WARNING: &str = "warning: ";

/// Prints a worker's log line, and returns it as the event log shows it: a
/// host's address-space warning as a warning naming the worker and its host,
/// a `WARNING` as a warning naming the worker, the rest as information.
/// Workers beside the driver under its own limit (local workers inherit it)
/// repeat what it said of its machine: that one is only a debug line.
pub(crate) fn log_worker_line(rank: usize, line: &str) -> String {
    if let Some(text) = line.strip_prefix(WARNING) {
        let shown = format!("worker {rank}: {text}");
        tracing::warn!("{shown}");
        return shown;
    }
    let Some(on_host) = line.strip_prefix(ADDRESS_SPACE) else {
        tracing::info!("[worker {rank}] {line}");
        return format!("[worker {rank}] {line}");
    };
    let shown = format!("worker {rank} {on_host}");
    // What the worker would have said under the driver's own limit, on its machine.
    let drivers_own = address_space_line(rank);
    match drivers_own.as_deref() == Some(on_host) {
        true => tracing::debug!("{shown}"),
        false => tracing::warn!("{shown}"),
    }
    shown
}

/// Refuses the partition a worker opened when it is not the one its driver
/// read: another leapgnn process re-partitioned the same dataset into as many
/// parts with other settings (another `--seed`, `--balance`) in between, and
/// workers that read different partitionings would disagree on who owns
/// which node.
pub(crate) fn check_partition(
    manifest: &crate::format::ManifestFile,
    dir: &std::path::Path,
    driver_read: Option<u64>,
) -> Result<(), crate::BadInput> {
    match driver_read {
        Some(c) if c != manifest.checksum() => Err(crate::BadInput::new(format!(
            "the partition in {} was replaced after this run's driver read it (manifest checksum {:016x}, the driver's \
             {c:016x}): another leapgnn process partitioned the dataset into as many parts with other settings (--seed, \
             --balance) meanwhile; run one after the other, or give runs sharing a dataset the same --seed",
            dir.display(),
            manifest.checksum()
        ))),
        _ => Ok(()),
    }
}

/// What a worker sends as `ToDriver::Metrics`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Report {
    Step(StepRecord),
    /// Rank 0 only: the epoch's evaluation (the same on every worker).
    Epoch {
        record: EpochRecord,
        epochs: u64,
    },
    /// Every worker: what it sent while evaluating `epoch`.
    Eval {
        epoch: u64,
        sent: crate::metrics::ByteCounts,
    },
    /// Every worker, before a checkpoint: its step records through global
    /// iteration `through` all came before this (`Observer::before_checkpoint`).
    Sent {
        through: u64,
    },
}

/// What a worker sends as `ToDriver::Done`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WorkerDone {
    pub rank: usize,
    /// Iterations done over the whole run.
    pub iterations: u64,
    pub history: Vec<EpochRecord>,
    /// Everything this worker's mesh moved since this process started (socket
    /// counts; a resumed run's driver adds what the run moved before).
    pub bytes: ByteCounts,
    /// What this worker sent while evaluating since it started, by category (part of `bytes.sent`).
    #[serde(default)]
    pub eval_bytes: crate::metrics::ByteCounts,
    /// Every row this worker read through its fetching source (training,
    /// evaluation and the cache fill).
    pub fetch: FetchStats,
    /// Fetches that needed at least one remote row.
    pub remote_fetches: u64,
    /// Time steps per iteration at the end of the run (what `auto` chose).
    #[serde(default)]
    pub time_steps: Option<u32>,
    /// Peak resident set size (VmHWM) of the worker process.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// `--check-replicas`: comparisons of every replica's weights that found them identical.
    #[serde(default)]
    pub replica_checks: u64,
}
