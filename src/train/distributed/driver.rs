//! The driver of a distributed run: partition (METIS) if needed, start the
//! workers, send the job, write what they report, and build the summary.

use super::ledger::Ledger;
use super::{DistJob, Report, WorkerDone};
use crate::cluster::Launcher;
use crate::cluster::control::ToWorker;
use crate::cluster::driver::{DriverError, DriverOptions, Event, run_job_stoppable};
use crate::cluster::launcher::{Cleaned, named_in};
use crate::format::write_atomic;
use crate::metrics::{JsonlSink, RestartRecord, RunBytes, RunSummary, add_bytes};
use crate::schedule::MergePlan;
use crate::train::RunLock;
use crate::train::fullgraph::memory::{Held, Limit};
use crate::train::strategy::{StrategyEnv, StrategyKind};
use crate::train::{Observer, Progress, ResumeOverrides, RunOptions, TrainConfig, TrainError, checkpoint, new_run_dir};
use crate::{BadInput, DataDir};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How the workers are started and watched.
pub struct DistOptions<'a> {
    pub launcher: &'a dyn Launcher,
    /// Set by the Ctrl-C handler: stops the workers and the run.
    pub interrupted: &'a AtomicBool,
    /// Bound of every wait between workers (a peer silent this long is named in the error).
    pub comm_timeout: Duration,
    /// Compare replica weights every N iterations (0: never).
    pub check_replicas: u64,
    /// Write the first iteration's summed gradient here (tests).
    pub dump_grad: Option<PathBuf>,
    /// Lines the workers print, to show in the event log (when a dashboard
    /// owns the terminal, the launcher's log sink feeds this instead of stderr).
    pub worker_lines: Option<&'a mpsc::Receiver<String>>,
    /// Where the control listener binds (the profile's `driver_bind`).
    pub driver_bind: std::net::SocketAddr,
    /// `--time-steps auto`'s starting plans, one per T (the cost model's
    /// `cost::auto_plans`; passed in because the cost model sits above
    /// training). None: every T is tried, one epoch each.
    pub auto_planner: Option<&'a AutoPlanner>,
    /// `--restarts`: when a worker dies, stops answering or its link fails, stop
    /// them all and resume from the last checkpoint, at most this many times.
    pub restarts: u32,
    /// `--encrypt`: control connections and mesh carry sealed records (`comm::seal`).
    pub encrypt: bool,
    /// `--keep-remote`: leave the run's directory on the hosts (a launcher
    /// without shared files) when the run ends; by default it is removed
    /// once the driver holds everything in it.
    pub keep_remote: bool,
}

/// Predicts a `leapgnn` merge plan for every T that fits, for a run of the config.
pub type AutoPlanner = dyn Fn(&DataDir, &TrainConfig) -> anyhow::Result<Vec<MergePlan>>;

/// Starts a new run of `cfg` on `cfg.workers` workers, each owning a contiguous
/// range of the `cfg.parts` parts (`format::worker_parts`).
pub fn train_distributed(
    data: &DataDir,
    cfg: TrainConfig,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    cfg.check()?;
    crate::train::check_new_run(data, run)?;
    // Whatever a worker would reject is refused here, before anything is created or started.
    let dataset = crate::datasets::ensure_dataset(data, &cfg.dataset)?;
    // Verified here, once: a corrupt archive fails as bad input before any worker starts.
    let ds = crate::format::DatasetFile::open_verified(&dataset)?;
    cfg.check_all(&ds)?;
    // Refused before a partitioning that can take minutes when even a
    // full-graph run's lower bound (no halo) does not fit; the partition's
    // own halo is checked once it is cut, before it is written.
    check_memory(&ds, None, &cfg, run, opts, false)?;
    // Partitioned before the run's directory exists, so a partitioning that
    // fails leaves no run behind to block the name.
    let parts_dir = crate::partition::ensure_partition_checked(
        data,
        &cfg.dataset,
        cfg.partition_method(),
        cfg.parts,
        cfg.seed,
        &mut |node_part| check_memory(&ds, Some(node_part), &cfg, run, opts, false),
    )?;
    // GNNPipe's chunks, cut here once for every worker, and held to what
    // each stage's blocks can count before any worker starts.
    let owners = crate::format::ManifestFile::open(&parts_dir)?.node_worker(cfg.workers);
    ensure_chunks(data, &ds, &cfg, &owners, (run, opts), Some(false))?;
    let (name, run_dir) = new_run_dir(data, run.run.as_deref(), &cfg)?;
    // Held through every restart: this process trains the run until it returns.
    let _lock = RunLock::acquire(&run_dir, &name)?;
    crate::train::run_dataset::record(&run_dir, &cfg.dataset, &ds)?;
    crate::train::slurm_job::record(&run_dir)?;
    let mut ledger = Ledger::default();
    let result = execute(data, cfg.clone(), name.clone(), run_dir, (None, None), &mut ledger, run, opts, obs);
    let result = recover(data, &name, Some(&cfg), result, &mut ledger, run, opts, obs);
    tidy_hosts(data, &name, result.is_ok(), opts, obs);
    result
}

/// Whether the workers fit this machine's memory, where they run on it:
/// each builds the whole model and trains one iteration (all of them
/// together; each ssh or Slurm host checks its own), and a full-graph run's
/// share of the graph (`preflight`). Checked before anything is started,
/// for a new run and for a `--resume` alike (its `--workers` or
/// `--memory-limit-mb` may differ from the run's first start; its refusal
/// advises only what a resume can change): before the graph is partitioned
/// as if ownership were even, and with the partition's `node_part` (node ->
/// part, of `cfg.parts` parts), each worker with its own share.
fn check_memory(
    ds: &crate::format::DatasetFile,
    node_part: Option<&[u16]>,
    cfg: &TrainConfig,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    resume: bool,
) -> anyhow::Result<()> {
    let limit = limit_of(run, opts, resume);
    let owners = node_part.map(|p| crate::format::node_worker(p, cfg.parts, cfg.workers));
    let local = opts.launcher.local_workers(cfg.workers);
    if local > 0 {
        crate::train::check_model_memory(cfg, ds, Held::Largest(local), true, limit, owners.as_deref())?;
    }
    // Before `preflight` opens the device; the driver knows every share, wherever its worker runs.
    crate::train::fullgraph::memory::check_device(ds, cfg, owners.as_deref(), &cfg.model_spec(ds), resume)?;
    preflight(ds, owners.as_deref(), cfg, limit, opts)?;
    crate::train::fullgraph::memory::warn_address_space();
    Ok(())
}

/// The memory a run of `run` by `opts` is held to on this machine.
fn limit_of(run: &RunOptions, opts: &DistOptions<'_>, resume: bool) -> Limit {
    Limit { bytes: run.memory_limit, resume, launcher: opts.launcher.kind(), available: None }
}

/// GNNPipe's stored chunks for a run of `cfg` on `ds` (`chunks::ensure_stored`)
/// whose workers own the vertices as `owners` says; with `check` (whether
/// the run is a resume), held before anything is written or started to what
/// each stage can build and, for the stages on this machine, to its memory
/// over the chunks as cut (`preflight`'s check, which skipped them).
fn ensure_chunks(
    data: &DataDir,
    ds: &crate::format::DatasetFile,
    cfg: &TrainConfig,
    owners: &[u16],
    (run, opts): (&RunOptions, &DistOptions<'_>),
    check: Option<bool>,
) -> anyhow::Result<Option<(PathBuf, crate::partition::chunks::Stored)>> {
    use crate::train::fullgraph::chunks::{StoredCheck, ensure_stored, stored_dir};
    let Some(resume) = check else { return ensure_stored(data, ds, cfg, Some(owners), None) };
    let local = opts.launcher.local_workers(cfg.workers);
    let held = local > 0 && cfg.mode == crate::train::TrainMode::FullGraph && stored_dir(data, cfg).is_some();
    let params = match held {
        true => Some(crate::train::build_model(cfg, ds)?.1),
        false => None,
    };
    let check = StoredCheck { limit: limit_of(run, opts, resume), memory: params.as_ref().map(|p| (p, local)) };
    ensure_stored(data, ds, cfg, Some(owners), Some(check))
}

/// Full-graph runs: the workers that run on this machine (all local
/// processes; under Slurm the batch step's node's ranks) are checked together
/// before anything is started or created, with this process beside them:
/// with the partition's `owners` (node -> worker), or without them a lower
/// bound. Workers on other hosts check their own share as they start.
fn preflight(
    ds: &crate::format::DatasetFile,
    owners: Option<&[u16]>,
    cfg: &TrainConfig,
    limit: Limit,
    opts: &DistOptions<'_>,
) -> anyhow::Result<()> {
    let local = opts.launcher.local_workers(cfg.workers);
    if cfg.mode != crate::train::TrainMode::FullGraph || local == 0 {
        return Ok(());
    }
    // GNNPipe's stages are held to their chunks as cut (`ensure_chunks`),
    // which the partition does not tell: only its lower bound comes first.
    if owners.is_some() && cfg.gnnpipe.as_ref().is_some_and(|g| g.chunks > 1) {
        return Ok(());
    }
    let (model, params, _, _) = crate::train::build_model(cfg, ds)?;
    crate::train::fullgraph::memory::preflight(ds, cfg, owners, model.spec(), &params, local, limit)?;
    Ok(())
}

/// Continues the multi-worker run `run` from its last checkpoint, on as many
/// workers as it had (the partition, the seeded schedule and the optimizer
/// state are those of the run, so it ends as the uninterrupted run would).
pub fn resume_distributed(
    data: &DataDir,
    run: &str,
    over: &ResumeOverrides,
    run_opts: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    let _lock = crate::train::lock_run(data, run, "--resume")?;
    // Without a count it says itself that the finished run's counts are unknown.
    let counted = |run_dir: &Path, p: &Progress| counted_before(run_dir, p);
    fetch_newer_checkpoint(opts.launcher, data, run, obs);
    if let Some(summary) = crate::train::finished::write_missing_summary(data, run, over, obs, &counted)? {
        tidy_hosts(data, run, true, opts, obs);
        return Ok(summary);
    }
    let mut ledger = Ledger::default();
    let result = resume_once(data, run, over, &mut ledger, run_opts, opts, obs, None);
    let result = recover(data, run, None, result, &mut ledger, run_opts, opts, obs);
    tidy_hosts(data, run, result.is_ok(), opts, obs);
    result
}

/// Once run `name` has ended, its directory on the hosts (rank 0's
/// checkpoints, the copies a resume shipped) is redundant: `--resume` and
/// `infer` read only the driver's copy, and ship it again. So it is removed
/// from every host, unless `--keep-remote`, or a host's checkpoint is newer
/// than the driver's (it could not be copied back: kept, and said). A run
/// that failed first gets a last try at copying rank 0's checkpoint back;
/// one stopped by force gets nothing (the user wants out; `cluster clean`
/// tidies later).
fn tidy_hosts(data: &DataDir, name: &str, ended_ok: bool, opts: &DistOptions<'_>, obs: &mut dyn Observer) {
    if opts.launcher.shares_files() {
        // The workers wrote in this very directory; those stopped by force left their marks.
        crate::cluster::run_busy::remove_stale(&data.run_dir(name));
        return;
    }
    if opts.keep_remote {
        return;
    }
    let run_dir = data.run_dir(name);
    if opts.interrupted.load(Ordering::SeqCst) {
        let clean = opts.launcher.clean_command(name).unwrap_or_else(|| "leapgnn cluster clean".into());
        let msg = format!("run {name}: stopped by force, so its directory on the hosts was left; `{clean}` removes it");
        tracing::warn!("{msg}");
        obs.event(&msg);
        return;
    }
    if !ended_ok && let Ok(rel) = checkpoint_rel(opts.launcher, data, &run_dir) {
        // Nothing to copy (no checkpoint yet, or rank 0's host gone) is no news here: the guard below decides.
        if let Err(e) = fetch_checkpoint(opts.launcher, &rel, &run_dir, obs) {
            tracing::info!("{e:#}");
        }
    }
    for (warn, msg) in remove_remote_run(opts.launcher, data, name) {
        if warn {
            tracing::warn!("{msg}");
        } else {
            tracing::info!("{msg}");
        }
        obs.event(&msg);
    }
}

/// Removes run `name`'s directory from the hosts `launcher` started workers
/// on, where the driver's checkpoint is at least as new as the host's.
/// Returns what happened, one line per host: (a warning?, the line).
pub(super) fn remove_remote_run(launcher: &dyn Launcher, data: &DataDir, name: &str) -> Vec<(bool, String)> {
    let local = checkpoint::load_config(&checkpoint::dir(&data.run_dir(name))).ok().map(|(_, p)| p.global_iteration);
    let clean = launcher.clean_command(name).unwrap_or_else(|| "leapgnn cluster clean".into());
    let clean = format!("`{clean}` removes it (copying a newer checkpoint back first)");
    let copy_back = clean.clone();
    let redundant = move |remote: Option<&[u8]>| -> Result<(), String> {
        let Some(state) = remote else { return Ok(()) };
        match (checkpoint::state_iteration(state), local) {
            (Ok(there), Some(here)) if there <= here => Ok(()),
            (Ok(there), Some(here)) => Err(format!(
                "its checkpoint (after iteration {there}) is newer than the driver's (after iteration {here}); {copy_back}"
            )),
            (Ok(there), None) => Err(format!("its checkpoint (after iteration {there}) is the only one; {copy_back}")),
            // `cluster clean` of this leapgnn would keep it too.
            (Err(why), _) => Err(format!(
                "its checkpoint/state.json {why}; remove it with the leapgnn that wrote it, or by hand if you do \
                 not need it"
            )),
        }
    };
    launcher
        .remove_run_dir(name, &redundant)
        .into_iter()
        .filter_map(|c| match c.outcome {
            Ok(Cleaned::Absent) => None,
            Ok(Cleaned::Removed { files, bytes }) => Some((
                false,
                format!(
                    "removed {} from {} ({files} files, {:.1} MB): the driver holds the run",
                    c.path.display(),
                    c.host,
                    bytes as f64 / 1e6
                ),
            )),
            Ok(Cleaned::Kept(why)) => Some((true, format!("kept {} on {}: {why}", c.path.display(), c.host))),
            Err(e) => Some((true, format!("could not remove {} from {}: {e:#}; {clean}", c.path.display(), c.host))),
        })
        .collect()
}

/// `--restarts`: while `result` is a worker's failure (not an interrupt, not
/// bad input) and restarts are left, resume run `name` from its last
/// checkpoint, or, for a new run (`fresh`, its config) that failed before its
/// first checkpoint, train it again from the start, as `torchrun
/// --max-restarts` would. Each restart is an event in the dashboard and a
/// warning. `ledger` holds what the attempts so far reported. A refusal of
/// files shipped to a host is first relaunched once with them checked there
/// (`resend_refused`), which restarts do not count.
#[allow(clippy::too_many_arguments)]
fn recover(
    data: &DataDir,
    name: &str,
    fresh: Option<&TrainConfig>,
    result: anyhow::Result<RunSummary>,
    ledger: &mut Ledger,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    let mut result = result.or_else(|err| resend_refused(data, (name, fresh), err, ledger, run, opts, obs));
    for attempt in 1..=opts.restarts {
        let err = match result {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let failed = Instant::now();
        let worker_lost = driver_errors(&err).any(|e| {
            matches!(
                e,
                DriverError::Exited { .. }
                    | DriverError::Silent { .. }
                    | DriverError::Unresponsive { .. }
                    | DriverError::WorkerFailed { .. }
                    | DriverError::Control(_)
                    | DriverError::StartTimeout { .. }
                    // A relaunch that cannot reach a host yet (it reboots, its
                    // sshd restarts) is one more failure to wait out, not the end.
                    // Not ThreadRefused nor NoRoom, nor a launch this host refused (below):
                    // a relaunch meets the same limit on the same host.
                    | DriverError::Launch { .. }
            )
        });
        if !worker_lost || opts.interrupted.load(Ordering::SeqCst) {
            return Err(err);
        }
        // This host's OS refused the driver a thread or a worker process
        // under a limit no wait frees: a relaunch from here meets it again.
        use crate::util::threads::SpawnError;
        if err.chain().filter_map(|e| e.downcast_ref::<SpawnError>()).any(SpawnError::lasts) {
            return Err(err.context("not restarted, as a restart on this host would meet the same limit"));
        }
        // Ctrl-C, SIGTERM or `q` came before the relaunch: the run stops where its checkpoint is.
        if obs.stop_requested() {
            return stopped_before_restart(data, name, err, ledger, opts, obs);
        }
        let delay = restart_delay(attempt);
        if !delay.is_zero() {
            // Before the line announcing the pause: a Ctrl-C that answers it is told what it does.
            let _pause = crate::progress::signals::restart_wait();
            let msg = format!("restart {attempt} of {} in {} s: {err:#}", opts.restarts, delay.as_secs());
            tracing::warn!("{msg}");
            obs.event(&msg);
            match wait_unless_interrupted(delay, opts.interrupted, &|| obs.stop_requested()) {
                Waited::Out => {}
                Waited::Forced => return Err(err.context("interrupted while waiting to restart")),
                Waited::Stop => return stopped_before_restart(data, name, err, ledger, opts, obs),
            }
        }
        let said = format!("restart {attempt} of {}: {err:#}", opts.restarts);
        let restart = Restart { count: Some((attempt, opts.restarts)), reason: format!("{err:#}"), since: failed };
        result = relaunch(data, (name, fresh), err, (restart, &said), ledger, run, opts, obs);
    }
    result
}

/// A worker refused its job naming files the launcher shipped to its host
/// (`Launcher::recheck_refused`: a copy damaged there in place keeps its size
/// and sidecar, so it was found current, and every `--restarts` attempt met
/// the same refusal). Once per run, every file shipped to that host is then
/// hashed there as the job is launched again (`relaunch`, as a restart, not
/// counted as one: the run itself did nothing wrong) and the damaged ones are
/// sent again. A second refusal of those files says they were.
fn resend_refused(
    data: &DataDir,
    (name, fresh): (&str, Option<&TrainConfig>),
    err: anyhow::Error,
    ledger: &mut Ledger,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    let failed = Instant::now();
    let Some((rank, message)) = refusal(&err) else { return Err(err) };
    if opts.interrupted.load(Ordering::SeqCst) {
        return Err(err);
    }
    let named = opts.launcher.recheck_refused(rank, &message);
    if named.is_empty() {
        return Err(err);
    }
    if obs.stop_requested() {
        return stopped_before_restart(data, name, err, ledger, opts, obs);
    }
    let files = named.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    let said = format!(
        "worker {rank} refused {files} on {}: {err:#}; every file shipped there is checked by its bytes as the job is \
         launched again (not counted as a restart), and those damaged there are sent again",
        opts.launcher.host_of(rank)
    );
    let restart = Restart { count: None, reason: format!("{err:#}"), since: failed };
    relaunch(data, (name, fresh), err, (restart, &said), ledger, run, opts, obs).map_err(|e| match refusal(&e) {
        Some((again, m)) if !named_in(&m, &named).is_empty() => e.context(format!(
            "worker {again} refused {files} again after the driver checked them on its host and sent again those \
             damaged there, so its own copy (the same path under its data directory) is likely damaged too: delete \
             it there and re-create it"
        )),
        _ => e,
    })
}

/// The driver's errors among `err` and its causes.
fn driver_errors(err: &anyhow::Error) -> impl Iterator<Item = &DriverError> {
    err.chain().filter_map(|e| e.downcast_ref::<DriverError>())
}

/// The rank and message of a worker's refusal of its job, if `err` is one.
fn refusal(err: &anyhow::Error) -> Option<(usize, String)> {
    driver_errors(err).find_map(|e| match e {
        DriverError::WorkerRefused { rank, message } => Some((*rank, message.clone())),
        _ => None,
    })
}

/// Launches run `name` again after the failure `err`, `said` (a warning,
/// with what comes next): from its last checkpoint (fetched from rank 0's
/// host first), or from the start for a new run (`fresh`, its config) that
/// had none yet. A resumed run without one, or one that had trained every
/// epoch, is not launched again: `err` is returned.
#[allow(clippy::too_many_arguments)]
fn relaunch(
    data: &DataDir,
    (name, fresh): (&str, Option<&TrainConfig>),
    err: anyhow::Error,
    (restart, said): (Restart, &str),
    ledger: &mut Ledger,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    // The relaunch after refused files were sent again is no restart, and is not called one.
    let goes_on = if restart.count.is_some() { "the restart uses" } else { "the relaunch uses" };
    let run_dir = fetch_or_warn(data, name, goes_on, opts, obs)?;
    let ck = checkpoint::dir(&run_dir);
    // No checkpoint: a new run starts again, a resumed one (which had one) cannot go on.
    let from_start = match (checkpoint::exists(&ck), fresh) {
        (true, _) => None,
        (false, Some(cfg)) => Some(cfg),
        (false, None) => return Err(err),
    };
    if let Some(epochs) = checkpoint::finished(&ck) {
        // Lost while the job wound down: a restart would have nothing to train.
        return Err(err.context(format!(
            "run {name} had trained all {epochs} epochs before the failure, so it was not restarted: its final \
             weights are in {}, and `leapgnn infer {name}` scores with them",
            ck.display()
        )));
    }
    let how = match from_start {
        Some(_) => "it had no checkpoint yet, so training it again from the start",
        None => "resuming it from its last checkpoint",
    };
    let msg = format!("{said}; run {name}: {how}");
    tracing::warn!("{msg}");
    obs.event(&msg);
    match from_start {
        Some(cfg) => {
            execute(data, cfg.clone(), name.to_string(), run_dir, (None, Some(restart)), ledger, run, opts, obs)
        }
        None => resume_once(data, name, &ResumeOverrides::default(), ledger, run, opts, obs, Some(restart)),
    }
}

#[allow(clippy::too_many_arguments)]
fn resume_once(
    data: &DataDir,
    run: &str,
    over: &ResumeOverrides,
    ledger: &mut Ledger,
    run_opts: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
    restart: Option<Restart>,
) -> anyhow::Result<RunSummary> {
    // A restart was never typed as `--resume`: its refusal names the restart.
    let what = match restart.as_ref().map(|r| r.count) {
        None => "--resume".into(),
        Some(Some((attempt, of))) => format!("restart {attempt} of {of}, resuming run"),
        Some(None) => "the relaunch with refused files sent again, resuming run".into(),
    };
    let (run_dir, cfg, progress) = crate::train::resumable(data, run, over, &what)?;
    if !opts.launcher.shares_files() {
        // Every worker restores the weights and the optimizer state: each host gets the checkpoint.
        let root = absolute(&data.root)?;
        let files = checkpoint::files(&checkpoint::dir(&absolute(&run_dir)?))?;
        let rel = files.iter().map(|f| Ok((f.clone(), worker_path(opts.launcher, &root, f)?)));
        opts.launcher.ship_with_job(rel.collect::<anyhow::Result<_>>()?);
    }
    execute(data, cfg, run.to_string(), run_dir, (Some(progress), restart), ledger, run_opts, opts, obs)
}

/// The pause before restart `attempt`: none for the first (a crashed worker
/// on a healthy host is relaunched at once), then 2, 4, 8 ... s up to a
/// minute, so that a host that is briefly away (a reboot, an sshd restart)
/// is not spent through every restart within a second.
fn restart_delay(attempt: u32) -> Duration {
    match attempt {
        0 | 1 => Duration::ZERO,
        k => Duration::from_secs(1u64 << (k - 1).min(6)).min(Duration::from_secs(60)),
    }
}

/// How a wait before a restart ended.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    /// The whole delay passed.
    Out,
    /// A first Ctrl-C, SIGTERM or `q` (`stop`): the run stops from its checkpoint.
    Stop,
    /// A second Ctrl-C (`interrupted`): the run ends at once.
    Forced,
}

/// Sleeps `delay` in short steps, ending at once on a stop request or a
/// forced stop.
fn wait_unless_interrupted(delay: Duration, interrupted: &AtomicBool, stop: &dyn Fn() -> bool) -> Waited {
    let until = Instant::now() + delay;
    loop {
        if interrupted.load(Ordering::SeqCst) {
            return Waited::Forced;
        }
        if stop() {
            return Waited::Stop;
        }
        if Instant::now() >= until {
            return Waited::Out;
        }
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// A stop was asked for after a worker was lost and before the relaunch:
/// the workers are not started again, and the run ends as any stopped run,
/// at its last checkpoint (fetched from rank 0's host first). Its records
/// after that checkpoint, of the attempt that failed, are dropped as a
/// resume would drop them, and the summary is the checkpoint's: its
/// iterations and epochs, and the rows and bytes of the training up to it
/// (`restarted_before`: the checkpoint's count, as a restart takes it).
/// Without a checkpoint there is nothing to keep: the failure is returned,
/// saying so.
fn stopped_before_restart(
    data: &DataDir,
    name: &str,
    err: anyhow::Error,
    ledger: &mut Ledger,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    let run_dir = fetch_or_warn(data, name, "the stop keeps", opts, obs)?;
    let ck = checkpoint::dir(&run_dir);
    if !checkpoint::exists(&ck) {
        return Err(err.context(format!(
            "stopped on request before the restart; run {name} has no checkpoint yet, so nothing of it is kept: \
             start it again (--checkpoint-every N keeps one every N iterations)"
        )));
    }
    let (cfg, p) = checkpoint::load_config(&ck)?;
    let path = run_dir.join("metrics.jsonl");
    drop(JsonlSink::append_before(&path, (p.epoch, p.iteration))?);
    let counted = restarted_before(ledger, name, &run_dir, &p, obs);
    let iteration = p.global_iteration;
    let summary = crate::train::finished::checkpoint_summary(name, &cfg, p, counted)?;
    let msg = format!(
        "run {name}: stopped on request before restarting it ({err:#}); the workers were not started again, and the \
         run ends at its checkpoint after iteration {iteration}"
    );
    tracing::warn!("{msg}");
    obs.event(&msg);
    write_atomic(run_dir.join("summary.json"), &serde_json::to_vec_pretty(&summary).expect("summary serialises"))?;
    Ok(summary)
}

/// Copies rank 0's checkpoint of run `name` back from its host (without
/// shared files the newest is there) before the driver goes on from its run
/// directory, which it returns; a copy that fails is a warning saying what
/// `goes_on` (the restart uses, the stop keeps) instead.
fn fetch_or_warn(
    data: &DataDir,
    name: &str,
    goes_on: &str,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<PathBuf> {
    let run_dir = data.run_dir(name);
    if let Err(e) = fetch_checkpoint(opts.launcher, &checkpoint_rel(opts.launcher, data, &run_dir)?, &run_dir, obs) {
        let msg = format!("{e:#}; {goes_on} the driver's copy of the last checkpoint, if it has one");
        tracing::warn!("{msg}");
        obs.event(&msg);
    }
    Ok(run_dir)
}

/// A restart under way: what the `RestartRecord` says once training runs again.
struct Restart {
    /// (attempt, of) of `--restarts`; none for the relaunch after refused
    /// files were sent again (`resend_refused`), which is no restart and
    /// leaves no record.
    count: Option<(u32, u32)>,
    reason: String,
    since: Instant,
}

impl Restart {
    fn record(self, (epoch, iteration): (u64, u64)) -> Option<RestartRecord> {
        let (restart, of) = self.count?;
        let seconds = self.since.elapsed().as_secs_f64();
        Some(RestartRecord { restart, of, reason: self.reason, epoch, iteration, seconds })
    }
}

#[allow(clippy::too_many_arguments)]
fn execute(
    data: &DataDir,
    cfg: TrainConfig,
    name: String,
    run_dir: PathBuf,
    (resume, restart): (Option<Progress>, Option<Restart>),
    ledger: &mut Ledger,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    let dataset = absolute(&crate::datasets::ensure_dataset(data, &cfg.dataset)?)?;
    let ds = crate::format::DatasetFile::open(&dataset)?;
    let world = cfg.workers;
    // --time-steps auto starts from the cost model's plans (and re-plans from measured times).
    let auto = cfg.strategy == StrategyKind::Leapgnn && cfg.time_steps.is_none() && cfg.merge_plan.is_none();
    // A resumed run keeps the plans it was tuning from (the workers restore the rest).
    let saved = resume.as_ref().and_then(|p| p.auto_steps.as_ref()).filter(|s| s.workers == world);
    let auto_plans = match (opts.auto_planner, saved) {
        (_, Some(s)) => s.plans.clone(),
        (Some(plan), None) if auto && world > 1 => plan(data, &cfg).unwrap_or_else(|e| {
            // A warning too: events reach neither a pipe nor --json's stderr.
            let msg = format!("--time-steps auto: no cost model prediction ({e:#}); trying every T, one epoch each");
            tracing::warn!("{msg}");
            obs.event(&msg);
            Vec::new()
        }),
        _ => Vec::new(),
    };
    let mut env = StrategyEnv::new(&cfg, None)?;
    env.auto_plans = auto_plans.clone();
    let time_steps = saved.map_or(crate::train::strategy::build(cfg.strategy, &env)?.time_steps(), |s| s.current);
    // A typed `--resume` is checked as a new run is (a restart goes on from a run that was).
    let typed = resume.is_some() && restart.is_none();
    let parts_dir = absolute(&crate::partition::ensure_partition_checked(
        data,
        &cfg.dataset,
        cfg.partition_method(),
        cfg.parts,
        cfg.seed,
        &mut |node_part| match typed {
            true => check_memory(&ds, Some(node_part), &cfg, run, opts, true),
            false => Ok(()),
        },
    )?)?;
    let manifest = crate::format::ManifestFile::open(&parts_dir)?;
    let partition_checksum = Some(manifest.checksum());
    let owners = manifest.node_worker(world);
    // A new run's were checked before its directory was made; a typed --resume's are here.
    let chunks = ensure_chunks(data, &ds, &cfg, &owners, (run, opts), typed.then_some(true))?;
    crate::util::interrupt::test_hold("chunks-stored");
    let run_dir = absolute(&run_dir)?;
    tracing::info!(
        "run {name}: {} ({} nodes) on {world} workers, partition {}, {} time step(s) per iteration",
        dataset.display(),
        ds.num_nodes(),
        parts_dir.display(),
        time_steps
    );
    write_atomic(run_dir.join("config.json"), &serde_json::to_vec_pretty(&cfg).expect("config serialises"))?;
    let root = absolute(&data.root)?;
    let on_worker = |p: &Path| worker_path(opts.launcher, &root, p);
    let job = DistJob {
        config: cfg.clone(),
        dataset: on_worker(&dataset)?,
        parts_dir: on_worker(&parts_dir)?,
        run_dir: on_worker(&run_dir)?,
        resume: resume.is_some(),
        stop_after: run.stop_after,
        stop_in_evaluation: run.stop_in_evaluation,
        dump_grad: opts.dump_grad.as_deref().map(absolute).transpose()?,
        check_replicas: opts.check_replicas,
        comm_timeout_ms: opts.comm_timeout.as_millis() as u64,
        auto_plans,
        partition_checksum,
        chunks_dir: chunks.as_ref().map(|(d, _)| absolute(d).and_then(|d| on_worker(&d))).transpose()?,
        chunks_checksum: chunks.as_ref().map(|(_, s)| s.checksum),
        placement: super::Placement::of(opts.launcher, world, run.memory_limit),
    };
    let task = serde_json::json!({ "task": "train", "train": job });
    let train_ids = ds.train().len();
    let hosts_now = || -> Vec<String> { (0..world).map(|rank| opts.launcher.host_of(rank)).collect() };
    // Where the launcher expects the workers; it may place them otherwise as it launches them.
    let mut expected_hosts = Some(hosts_now());
    obs.start(&crate::metrics::RunInfo {
        run: name.clone(),
        dataset: cfg.dataset.clone(),
        strategy: cfg.strategy.to_string(),
        mode: cfg.reported_mode(),
        model: cfg.model.to_string(),
        workers: world as u32,
        time_steps,
        epochs: cfg.epochs,
        iterations_per_epoch: crate::train::Schedule::new(&vec![0; train_ids], world, cfg.loop_batch_size(train_ids))
            .iterations() as u64,
        start_epoch: resume.as_ref().map_or(0, |p| p.epoch),
        start_iteration: resume.as_ref().map_or(0, |p| p.iteration),
        stages: cfg.stages(),
        hosts: expected_hosts.clone().unwrap_or_default(),
    });

    // Resuming: the records after the checkpoint are dropped, to be written again.
    let at = resume.as_ref().map_or((0, 0), |p| (p.epoch, p.iteration));
    let mut sink = JsonlSink::append_before(&run_dir.join("metrics.jsonl"), at)?;
    let earlier = match (&restart, &resume) {
        (Some(_), Some(p)) => restarted_before(ledger, &name, &run_dir, p, obs),
        (_, Some(p)) => ledger.resume_at(at, || before(&name, &run_dir, p, obs)),
        (_, None) => ledger.resume_at(at, || Some(Default::default())),
    };
    let mut restart = restart;
    let mut summary = RunSummary {
        run: name,
        strategy: cfg.strategy.to_string(),
        workers: world,
        dataset: cfg.dataset.clone(),
        model: cfg.model.to_string(),
        time_steps,
        mode: cfg.reported_mode(),
        prefetch: cfg.prefetches(),
        ..Default::default()
    };
    let mut rows = crate::metrics::RowCounts::default();
    let mut failure: Option<TrainError> = None;
    let mut stragglers = super::stragglers::Stragglers::default();
    let mut gate = super::epoch_gate::EpochGate::new(world);
    let mut checkpoints = super::checkpoint_gate::CheckpointGate::new(world);
    let driver_opts = DriverOptions {
        silence_timeout: (opts.comm_timeout * 2).max(Duration::from_secs(10)),
        bind: opts.driver_bind,
        // A run that was started encrypted stays so, whichever path resumes it.
        encrypt: opts.encrypt || cfg.encrypt,
        ..DriverOptions::default()
    };
    let stop = AtomicBool::new(false);
    let remote_run_dir = job.run_dir.clone();
    // Without shared files each periodic checkpoint is copied back while training
    // goes on, so a restart that cannot reach rank 0's host loses at most
    // --checkpoint-every iterations. One request waits at most: the copy reads the latest.
    let (fetch_tx, fetch_rx) = mpsc::sync_channel::<()>(1);
    let result = std::thread::scope(|scope| {
        if !opts.launcher.shares_files() {
            let (launcher, remote, local) = (opts.launcher, &remote_run_dir, &run_dir);
            let copier = crate::util::threads::spawn_scoped(scope, "leapgnn-checkpoint-copy", move || {
                while fetch_rx.recv().is_ok() {
                    // A copy that races rank 0's next checkpoint fails; the next one succeeds.
                    if let Err(e) = copy_checkpoint(launcher, remote, local) {
                        tracing::info!("{e:#}");
                    }
                }
            });
            // Before any worker starts: nothing else to stop.
            if let Err(e) = copier {
                return Err(e.into());
            }
        }
        let result = run_job_stoppable(opts.launcher, world, &task, &driver_opts, opts.interrupted, &stop, |ev| {
            for line in opts.worker_lines.iter().flat_map(|rx| rx.try_iter()) {
                obs.event(&line);
            }
            // Every worker is launched before the first event: where they run now is known.
            if let Some(expected) = expected_hosts.take() {
                let placed = hosts_now();
                if placed != expected {
                    obs.hosts(&placed);
                }
            }
            let mut answer = None;
            let outcome = match ev {
                Event::Metrics(rank, v) => match serde_json::from_value::<Report>(v) {
                    Ok(Report::Step(r)) => {
                        if rank == 1 && (r.epoch, r.iteration, r.time_step) == (0, 0, 0) {
                            // Tests: a record on its way while rank 0 reaches its checkpoint.
                            crate::util::interrupt::test_pause("record-of-worker-1");
                        }
                        if let Some(rec) = restart.take().and_then(|re| re.record(at)) {
                            // The step's own position: a checkpoint taken at an epoch's
                            // last iteration resumes with that epoch's evaluation, and
                            // its position would name an iteration the epoch does not have.
                            let msg = format!(
                                "restart {} of {}: training again {:.2} s after the failure, at epoch {} iteration {}",
                                rec.restart,
                                rec.of,
                                rec.seconds,
                                r.epoch + 1,
                                r.iteration + 1
                            );
                            tracing::warn!("{msg}");
                            obs.event(&msg);
                            if let Err(e) = sink.write_restart(&rec) {
                                failure.get_or_insert(e.into());
                            }
                            obs.restart(&rec);
                        }
                        crate::train::trace_step(&r);
                        rows += r.rows;
                        ledger.step(&r);
                        stragglers.step(&r);
                        sink.write(&r).map_err(TrainError::from).and_then(|()| obs.step(&r))
                    }
                    Ok(Report::Epoch { record, epochs }) => {
                        for (record, epochs) in gate.epoch(record, epochs) {
                            hand_on_epoch(obs, &mut stragglers, &record, epochs);
                        }
                        Ok(())
                    }
                    Ok(Report::Eval { epoch, sent }) => {
                        ledger.eval(epoch, sent);
                        for (record, epochs) in gate.evaluated(epoch) {
                            hand_on_epoch(obs, &mut stragglers, &record, epochs);
                        }
                        Ok(())
                    }
                    // Not confirmed if the records may not be on disk: rank 0 then fails its wait, naming it.
                    Ok(Report::Sent { through }) => {
                        // Tests: how many a checkpoint took.
                        crate::util::interrupt::test_point("records-sent");
                        match checkpoints.sent(rank, through) {
                            Some(n) => {
                                // Tests: the driver away (Ctrl-Z) just as a checkpoint is due.
                                crate::util::interrupt::test_hold("records-due");
                                sink.sync().map(|()| answer = Some((0, ToWorker::Held(n)))).map_err(Into::into)
                            }
                            None => Ok(()),
                        }
                    }
                    Err(e) => Err(BadInput::new(format!("worker {rank} sent a malformed metrics record: {e}")).into()),
                },
                Event::Log(rank, line) => {
                    obs.event(&super::log_worker_line(rank, &line));
                    if rank == 0 && line.starts_with(checkpoint::WRITTEN) {
                        let _ = fetch_tx.try_send(());
                    }
                    // Slurm is ending the job (a driver under salloc hears of it only so).
                    if line.starts_with(crate::cluster::worker_session::STEP_SIGNALLED)
                        && !stop.swap(true, Ordering::SeqCst)
                    {
                        tracing::warn!(
                            "worker {rank}: {line}; stopping every worker after this iteration: `leapgnn train \
                             --resume {}` goes on from the checkpoint",
                            summary.run
                        );
                    }
                    Ok(())
                }
                Event::Done(..) | Event::Idle => Ok(()),
            };
            if let Err(e) = outcome {
                failure.get_or_insert(e);
            }
            // `q` in the dashboard: the workers finish the iteration, checkpoint and report.
            if obs.stop_requested() {
                stop.store(true, Ordering::SeqCst);
            }
            answer
        });
        drop(fetch_tx);
        result
    });
    for (record, epochs) in gate.drain() {
        hand_on_epoch(obs, &mut stragglers, &record, epochs);
    }
    for line in opts.worker_lines.iter().flat_map(|rx| rx.try_iter()) {
        obs.event(&line);
    }
    let values =
        result.with_context(|| format!("distributed training of {} on {world} workers failed", cfg.dataset))?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let done: Vec<WorkerDone> = values
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .context("a worker's final report is malformed")?;
    let (mut total, mut eval) = Default::default();
    for d in &done {
        add_bytes(&mut total, &d.bytes.sent);
        add_bytes(&mut eval, &d.eval_bytes);
    }
    // Unknown before the checkpoint (one without a count): unknown for the
    // run, as a count from the checkpoint on would read as the whole run's.
    if let Some((rows_before, bytes_before)) = earlier {
        let mut bytes = RunBytes::split(total, eval);
        bytes.add(&bytes_before);
        summary.bytes = Some(bytes);
        rows += rows_before;
        summary.rows = Some(rows);
    }
    let mut by_rank: Vec<&WorkerDone> = done.iter().collect();
    by_rank.sort_by_key(|d| d.rank);
    summary.peak_rss_bytes = by_rank.iter().filter_map(|d| d.peak_rss_bytes).collect();
    fetch_checkpoint(opts.launcher, &remote_run_dir, &run_dir, obs)?;
    let first = done.iter().find(|d| d.rank == 0).context("worker 0 sent no final report")?;
    summary.iterations = first.iterations;
    // auto: the T the workers settled on.
    summary.time_steps = first.time_steps.unwrap_or(time_steps);
    summary.replica_checks = (opts.check_replicas > 0).then_some(first.replica_checks);
    let summary = summary.from_history(first.history.clone());
    write_atomic(run_dir.join("workers.json"), &serde_json::to_vec_pretty(&done).expect("reports serialise"))?;
    write_atomic(run_dir.join("summary.json"), &serde_json::to_vec_pretty(&summary).expect("summary serialises"))?;
    Ok(summary)
}

/// Where a worker finds `local`: the same path when it shares this machine's
/// files, else the path relative to the data directory (each worker resolves
/// it against its own `--data-dir`, where the launcher shipped it).
pub(super) fn worker_path(launcher: &dyn Launcher, root: &Path, local: &Path) -> anyhow::Result<PathBuf> {
    if launcher.shares_files() {
        return Ok(local.to_path_buf());
    }
    match local.strip_prefix(root) {
        Ok(rel) => Ok(rel.to_path_buf()),
        Err(_) => Err(BadInput::new(format!(
            "{} is outside the data directory {}: the {} launcher ships files from the data directory only; import \
             the dataset there first (`leapgnn download NAME --from ...`)",
            local.display(),
            root.display(),
            launcher.name()
        ))
        .into()),
    }
}

/// The run directory `run_dir` as the workers name it.
fn checkpoint_rel(launcher: &dyn Launcher, data: &DataDir, run_dir: &Path) -> anyhow::Result<PathBuf> {
    worker_path(launcher, &absolute(&data.root)?, &absolute(run_dir)?)
}

/// Without a shared filesystem rank 0 checkpoints on its own host: copy that
/// checkpoint into the driver's run directory (atomically, state last).
fn fetch_checkpoint(
    launcher: &dyn Launcher,
    remote_run_dir: &Path,
    run_dir: &Path,
    obs: &mut dyn Observer,
) -> anyhow::Result<()> {
    let Some(p) = copy_checkpoint(launcher, remote_run_dir, run_dir)? else { return Ok(()) };
    obs.event(&format!(
        "checkpoint after iteration {} fetched from rank 0 into {}",
        p.global_iteration,
        checkpoint::dir(run_dir).display()
    ));
    Ok(())
}

/// Without shared files, a driver killed after rank 0 wrote a checkpoint
/// on its host and before it copied it back holds an older one (or none),
/// and a resume from it would train again what rank 0's held: a final
/// checkpoint even finishes the run. So the resume takes rank 0's when it is
/// strictly newer, never an older one over the driver's. A host that has
/// no checkpoint (its run directory was tidied) is no news; one that cannot
/// be reached, or whose copy is refused, is said, and the resume goes on
/// from the driver's copy, as a restart does.
fn fetch_newer_checkpoint(launcher: &dyn Launcher, data: &DataDir, name: &str, obs: &mut dyn Observer) {
    let run_dir = data.run_dir(name);
    let ck = checkpoint::dir(&run_dir);
    let here = checkpoint::load_config(&ck).ok().map(|(_, p)| p.global_iteration);
    let fetched = (|| -> anyhow::Result<Option<Progress>> {
        let remote = checkpoint::dir(&checkpoint_rel(launcher, data, &run_dir)?);
        let Some(dir) = launcher.open_dir(0, &remote) else { return Ok(None) };
        let what = || format!("cannot look for a newer checkpoint in {} on rank 0's host", remote.display());
        let mut dir = dir.with_context(what)?;
        let Some(state) = dir.read_if_present(checkpoint::STATE).with_context(what)? else { return Ok(None) };
        let there = checkpoint::state_iteration(&state)
            .map_err(|why| anyhow::anyhow!("its {} {why}", checkpoint::STATE))
            .with_context(what)?;
        if here.is_some_and(|h| h >= there) {
            return Ok(None);
        }
        checkpoint::copy_into(&ck, &mut |file| dir.read(file)).with_context(what).map(Some)
    })();
    let msg = match fetched {
        Ok(None) => return,
        Ok(Some(p)) => format!(
            "run {name}: rank 0's host held a newer checkpoint (after iteration {}) than the driver's copy ({}); \
             fetched it into {}",
            p.global_iteration,
            here.map_or_else(|| "none".to_string(), |h| format!("after iteration {h}")),
            ck.display()
        ),
        Err(e) => format!("{e:#}; the resume goes on from the driver's copy of the last checkpoint, if it has one"),
    };
    tracing::warn!("{msg}");
    obs.event(&msg);
}

/// Rank 0's record of an epoch, once `EpochGate` lets it go: to the log,
/// the observers, and the stragglers' report of that epoch.
fn hand_on_epoch(
    obs: &mut dyn Observer,
    stragglers: &mut super::stragglers::Stragglers,
    r: &crate::metrics::EpochRecord,
    epochs: u64,
) {
    crate::train::trace_epoch(r, epochs);
    obs.epoch(r, epochs);
    for line in stragglers.epoch_end(r.epoch) {
        obs.event(&line);
    }
}

/// What run `run_dir`'s files say it counted before the checkpoint `p`: the
/// count the checkpoint carries, or else (a checkpoint without one)
/// `summary_before` it. The count comes first, whether or not the driver
/// wrote a summary: the summary also holds the setup of the attempt that
/// wrote it (its mesh, initial weights, cache fill, the barrier that starts
/// training, a stop's closing barrier), which the resumed attempt does again
/// and counts itself, so a stop resumed from its summary reported more than
/// the same stop resumed after its driver was killed.
fn counted_before(run_dir: &Path, p: &Progress) -> Option<(crate::metrics::RowCounts, RunBytes)> {
    let Some(c) = p.run_counts else {
        return crate::train::finished::summary_before(run_dir, p.global_iteration).and_then(|s| s.rows.zip(s.bytes));
    };
    let mut total = c.train;
    add_bytes(&mut total, &c.eval);
    Some((c.rows, RunBytes::split(total, c.eval)))
}

/// What a restart (or a stop before one) counts before the checkpoint `p`
/// it goes on from: what the run's files say, as a hand `--resume` counts,
/// since the checkpoint's count holds every byte that left the failed
/// attempt's sockets up to it, where the step records leave out what moved
/// between them (the checkpoint's own exchange of counts, a peer's early
/// request) and lose the records of the checkpoint's iteration that lost
/// workers never sent. Without one, what `ledger` kept of the records.
fn restarted_before(
    ledger: &mut Ledger,
    name: &str,
    run_dir: &Path,
    p: &Progress,
    obs: &mut dyn Observer,
) -> Option<crate::metrics::Counted> {
    // Read once: the ledger's base (taken at its first attempt) and the answer are the same count.
    let counted = counted_before(run_dir, p);
    let kept = ledger.resume_at((p.epoch, p.iteration), || warn_if_uncounted(name, run_dir, p, counted.clone(), obs));
    counted.or(kept)
}

/// What run `run_dir` counted before the checkpoint `p`, as a `Ledger`'s
/// base: `counted_before` it.
fn before(
    name: &str,
    run_dir: &Path,
    p: &Progress,
    obs: &mut dyn Observer,
) -> Option<(crate::metrics::RowCounts, RunBytes)> {
    warn_if_uncounted(name, run_dir, p, counted_before(run_dir, p), obs)
}

/// `counted`, the count before checkpoint `p`; a checkpoint without one
/// (written before it was recorded) past the run's start leaves it unknown,
/// with a warning, in the log and among the dashboard's events as a
/// finished run's summary rebuilt from such a checkpoint says it.
fn warn_if_uncounted(
    name: &str,
    run_dir: &Path,
    p: &Progress,
    counted: Option<(crate::metrics::RowCounts, RunBytes)>,
    obs: &mut dyn Observer,
) -> Option<(crate::metrics::RowCounts, RunBytes)> {
    if p.global_iteration == 0 {
        return Some(counted.unwrap_or_default());
    }
    if counted.is_none() {
        let msg = crate::train::finished::unknown_counts(name, run_dir);
        tracing::warn!("{msg}");
        obs.event(&msg);
    }
    counted
}

/// Copies rank 0's checkpoint into the driver's run directory; `None` when files are shared.
fn copy_checkpoint(launcher: &dyn Launcher, remote_run_dir: &Path, run_dir: &Path) -> anyhow::Result<Option<Progress>> {
    let remote = checkpoint::dir(remote_run_dir);
    let Some(dir) = launcher.open_dir(0, &remote) else { return Ok(None) };
    let what = || format!("cannot fetch the checkpoint {} from rank 0's host", remote.display());
    let mut dir = dir.with_context(what)?;
    let p = checkpoint::copy_into(&checkpoint::dir(run_dir), &mut |name| dir.read(name)).with_context(what)?;
    Ok(Some(p))
}

pub(super) fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot make {} absolute", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_wait_longer_each_time_up_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|a| restart_delay(a).as_secs()).collect();
        assert_eq!(secs, [0, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn a_wait_ends_at_once_when_interrupted_or_asked_to_stop() {
        // An hour's wait that only the flags can end in time: a wait that ran its course would
        // still be going when the guard gives up, however slowly a loaded machine runs it,
        // where a bound on the elapsed time also counts the time the test was not scheduled.
        const HOUR: Duration = Duration::from_secs(3600);
        let (done, waited) = mpsc::channel();
        std::thread::spawn(move || {
            let flag = AtomicBool::new(true);
            let forced = wait_unless_interrupted(HOUR, &flag, &|| true);
            flag.store(false, Ordering::SeqCst);
            let _ = done.send((forced, wait_unless_interrupted(HOUR, &flag, &|| true)));
        });
        let ended = waited.recv_timeout(Duration::from_secs(120)).expect("a wait asked to end went on");
        assert_eq!(ended, (Waited::Forced, Waited::Stop));
        let flag = AtomicBool::new(false);
        assert_eq!(wait_unless_interrupted(Duration::from_millis(10), &flag, &|| false), Waited::Out);
    }
}
