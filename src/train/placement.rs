//! Fitting a run to its cluster profile (`--cluster`): an ssh profile's
//! slots or a Slurm allocation's tasks set the number of workers, and a
//! resumed run's profile must still hold the workers it resumes on.

use super::{Prefetch, TrainConfig};
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
        Some((_, LauncherKind::Slurm)) => Some(Allocation::from_env(workers)?.world()),
        Some((p, LauncherKind::Ssh)) => Some(ssh_slots(p, workers)?),
    };
    if let Some(slots) = slots {
        cfg.workers = slots;
        cfg.parts = parts.unwrap_or(slots);
    }
    settle_prefetch(&mut cfg, profile.as_ref());
    Ok((cfg, profile.filter(|p| p.launcher != LauncherKind::Local)))
}

/// Cores each worker of `profile` (None: local workers without one) can
/// count on: the `RAYON_NUM_THREADS` its workers get (the profile's
/// `[cluster.env]`, else, for local workers, this process's environment),
/// else for local workers this machine's cores shared among `workers`;
/// None where unknown (remote hosts without the setting).
pub fn cores_per_worker(profile: Option<&Profile>, workers: usize) -> Option<f64> {
    let threads = |v: &str| v.trim().parse::<usize>().ok().filter(|&n| n > 0).map(|n| n as f64);
    let set = profile.and_then(|p| p.env.iter().find(|(k, _)| k == "RAYON_NUM_THREADS")).and_then(|(_, v)| threads(v));
    if set.is_some() {
        return set;
    }
    if profile.is_some_and(|p| p.launcher != LauncherKind::Local) {
        return None;
    }
    if let Some(n) = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| threads(&v)) {
        return Some(n);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(cores as f64 / workers.max(1) as f64)
}

/// Prefetching runs the next iteration's sampling and fetch on a second
/// thread: it pays where that thread has a core of its own. On the emulated
/// cluster with half a core per host it cost 1-8 % at every T (README,
/// "Faithful links"), so it pays only where each worker has at least 2
/// cores (or where that is unknown: remote hosts without `RAYON_NUM_THREADS`).
pub fn prefetch_pays(profile: Option<&Profile>, workers: usize) -> bool {
    cores_per_worker(profile, workers).is_none_or(|c| c >= PREFETCH_MIN_CORES)
}

const PREFETCH_MIN_CORES: f64 = 2.0;

/// The prefetch settings `tune-merge --prefetch WHEN` predicts pregather and
/// leapgnn with: `auto` searches both only where prefetching pays, as
/// `train --prefetch auto` decides.
pub fn prefetch_search(when: Prefetch, profile: Option<&Profile>, workers: usize) -> &'static [bool] {
    match when {
        Prefetch::On => &[true],
        Prefetch::Off => &[false],
        Prefetch::Auto if prefetch_pays(profile, workers) => &[false, true],
        Prefetch::Auto => &[false],
    }
}

/// `--prefetch auto` settled off where prefetching does not pay, unless the
/// merge plan decided; the run's config records the outcome.
fn settle_prefetch(cfg: &mut TrainConfig, profile: Option<&Profile>) {
    let planned =
        cfg.merge_plan.as_ref().and_then(|p| crate::schedule::MergePlan::load(p).ok()).and_then(|p| p.prefetch);
    if cfg.prefetch == Prefetch::Auto && planned.is_none() && !prefetch_pays(profile, cfg.workers) {
        cfg.prefetch = Prefetch::Off;
    }
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
/// that many slots. `None` for local workers.
#[allow(clippy::result_large_err)]
pub fn resume_profile(cfg: &TrainConfig, workers: Option<usize>) -> Result<Option<Profile>, PlacementError> {
    let Some(path) = &cfg.cluster else { return Ok(None) };
    let profile = Profile::load_or_builtin(path)
        .map_err(|source| PlacementError::ResumeProfile { path: path.clone(), source })?;
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
        _ => Ok(Some(profile)),
    }
}
