//! Fitting a run to its cluster profile (`--cluster`): an ssh profile's
//! slots or a Slurm allocation's tasks set the number of workers, and a
//! resumed run's profile must still hold the workers it resumes on.

use super::TrainConfig;
use crate::BadInput;
use crate::cluster::slurm::SlurmError;
use crate::cluster::{Allocation, LauncherKind, Profile, ProfileError};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error("{0}")]
    Slurm(#[from] SlurmError),
    #[error("{0}")]
    Input(#[from] BadInput),
    #[error("--resume: the run was started with --cluster {}: {source}", path.display())]
    ResumeProfile {
        path: PathBuf,
        #[source]
        source: ProfileError,
    },
}

/// `cfg` placed on its `--cluster` profile: the profile the driver launches
/// with (`None` for local workers) and the number of workers and parts it
/// gives. `workers` and `parts` are the flags' values when given.
// Placement fails once, before a run starts; the errors stay unboxed so that
// the exit code's chain sees ProfileError itself (a bad profile exits 2).
#[allow(clippy::result_large_err)]
pub fn place(
    mut cfg: TrainConfig,
    workers: Option<usize>,
    parts: Option<usize>,
) -> Result<(TrainConfig, Option<Profile>), PlacementError> {
    let profile = cfg.cluster.as_deref().map(Profile::load_or_builtin).transpose()?;
    // Local workers keep --workers; a cluster's slots or tasks set them.
    let slots = match profile.as_ref().map(|p| (p, p.launcher)) {
        None | Some((_, LauncherKind::Local)) => None,
        // One worker per task of the allocation, or the first --workers of them.
        Some((_, LauncherKind::Slurm)) => Some(slurm_tasks(workers)?),
        Some((p, LauncherKind::Ssh)) => Some(ssh_slots(p, workers)?),
    };
    if let Some(slots) = slots {
        cfg.workers = slots;
        cfg.parts = parts.unwrap_or(slots);
    }
    if let Some(p) = profile.as_ref().filter(|_| cfg.workers < 2) {
        one_local_worker(p)?;
    }
    Ok((cfg, profile.filter(|p| p.launcher != LauncherKind::Local)))
}

/// One worker trains inside the driver (the distributed driver needs a
/// partition of 2 parts or more), so a local profile that sets up worker
/// processes is refused rather than silently not applied: a wrapper that
/// pins CPUs or sets a library path would otherwise never run.
fn one_local_worker(profile: &Profile) -> Result<(), BadInput> {
    let keys = profile.local_worker_keys();
    if keys.is_empty() {
        return Ok(());
    }
    let keys = keys.join(" and ");
    Err(BadInput::new(format!(
        "--workers 1 with the local profile {}: one worker trains inside this process, so the profile's {keys} \
         (for worker processes) would not be used: give --workers 2 or more to start worker processes with them, \
         or run `leapgnn train` itself that way without --cluster",
        profile.name()
    )))
}

/// A Slurm allocation runs one worker per task (or the first --workers of
/// them): at least 2, as a run over Slurm is a multi-worker run.
#[allow(clippy::result_large_err)]
fn slurm_tasks(workers: Option<usize>) -> Result<usize, PlacementError> {
    let tasks = Allocation::from_env(workers)?.world();
    if tasks >= 2 {
        return Ok(tasks);
    }
    let (what, fix) = match workers {
        Some(w) => (format!("--workers {w}"), "give --workers 2 or more, or omit it (one worker per task)"),
        None => (
            format!("the Slurm allocation has {tasks} task (SLURM_NTASKS)"),
            "submit the job with 2 tasks or more (sbatch --ntasks=2, or the script of `slurm-script --tasks-per-node 2`)",
        ),
    };
    Err(BadInput::new(format!(
        "--cluster slurm: {what}, but a run over Slurm has one worker per task and at least 2: {fix}, or train on \
         one worker without --cluster"
    ))
    .into())
}

/// An ssh profile runs one worker per slot: --workers, when given, must agree.
fn ssh_slots(profile: &Profile, workers: Option<usize>) -> Result<usize, BadInput> {
    let slots = profile.world();
    if let Some(w) = workers.filter(|&w| w != slots) {
        return Err(BadInput::new(format!(
            "--workers {w}, but the cluster profile {} has {slots} worker slots (the sum of its hosts' `workers`): \
             omit --workers or change the profile",
            profile.name()
        )));
    }
    if slots < 2 {
        return Err(BadInput::new(format!(
            "the cluster profile {} has {slots} worker slot: training over ssh needs at least 2 (set workers = 2 \
             on a host, or add a host)",
            profile.name()
        )));
    }
    Ok(slots)
}

/// The profile a multi-worker run `cfg` was started with, for its resume on
/// `workers` (the flag, else the run's own): an ssh profile must still have
/// that many slots, a Slurm allocation at least that many tasks. `None` for
/// local workers.
#[allow(clippy::result_large_err)]
pub fn resume_profile(cfg: &TrainConfig, workers: Option<usize>) -> Result<Option<Profile>, PlacementError> {
    let Some(path) = &cfg.cluster else { return Ok(None) };
    let profile = Profile::load_or_builtin(path)
        .map_err(|source| PlacementError::ResumeProfile { path: path.clone(), source })?;
    let given = workers;
    let workers = workers.unwrap_or(cfg.workers);
    match profile.launcher {
        LauncherKind::Local => Ok(None),
        LauncherKind::Ssh if profile.world() != workers => Err(BadInput::new(format!(
            "--resume: the run's cluster profile {} now has {} worker slots, but the run resumes on {workers} workers: \
             give its hosts {workers} slots in all (spare hosts aside)",
            profile.name(),
            profile.world()
        ))
        .into()),
        LauncherKind::Slurm => {
            let tasks = Allocation::from_env(None)?.world();
            if tasks < workers {
                let asked = match given {
                    Some(w) => format!("--workers {w}"),
                    None => format!("the run trains on {workers} workers (its own number)"),
                };
                let fewer = if tasks >= 2 {
                    format!(
                        ", or give --workers {tasks} (a mini-batch run goes on with the same global batch split over them)"
                    )
                } else {
                    String::new()
                };
                return Err(BadInput::new(format!(
                    "--resume: {asked}, but this Slurm allocation has {tasks} task(s) (SLURM_NTASKS): submit the \
                     job with {workers} tasks (`slurm-script --nodes N --tasks-per-node M` with N x M = {workers}){fewer}"
                ))
                .into());
            }
            Ok(Some(profile))
        }
        _ => Ok(Some(profile)),
    }
}
