//! A run started inside a Slurm job records the job's id
//! (`runs/<run>/slurm_job.json`). Slurm requeues a batch job whose node
//! failed (or on `scontrol requeue`) and runs its script again from the
//! start, in the same job: `train --run NAME` would then be refused, the
//! name being taken, and the job would end FAILED with the run half done.
//! Instead the requeued job resumes its own run from its checkpoint.

use crate::cluster::slurm::JobTarget;
use crate::datasets::Located;
use crate::format::write_atomic;
use crate::{BadInput, DataDir};
use std::path::Path;

const FILE: &str = "slurm_job.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    job_id: String,
}

/// This process's Slurm job, if it runs in one.
fn job_id() -> Option<String> {
    std::env::var("SLURM_JOB_ID").ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// Records, inside a Slurm job, that the run in `run_dir` is this job's.
pub(crate) fn record(run_dir: &Path) -> Result<(), super::TrainError> {
    let Some(job_id) = job_id() else { return Ok(()) };
    let json = serde_json::to_vec_pretty(&Record { job_id }).expect("a job record serialises");
    Ok(write_atomic(run_dir.join(FILE), &json)?)
}

/// A run that this Slurm job started before Slurm requeued it.
#[derive(Debug, Clone, PartialEq)]
pub struct Requeued {
    pub run: String,
    pub job_id: String,
    /// `SLURM_RESTART_COUNT`: how many times the job was requeued.
    pub restarts: u64,
}

impl Requeued {
    /// What the driver says as it resumes.
    pub fn describe(&self) -> String {
        format!(
            "Slurm requeued job {} (restart {}): resuming run {}, which this job started, from its last checkpoint",
            self.job_id, self.restarts, self.run
        )
    }
}

/// `train --run RUN` in a job that Slurm requeued (`SLURM_RESTART_COUNT` of 1
/// or more), where run RUN exists and was started by this same job: the run
/// to resume. A run of another job, or outside Slurm, is none (the name is
/// taken, as ever). Refused when the run has no checkpoint yet.
pub fn requeued_run(data: &DataDir, run: Option<&str>) -> Result<Option<Requeued>, BadInput> {
    let Some(run) = run else { return Ok(None) };
    let restarts = std::env::var("SLURM_RESTART_COUNT").ok().and_then(|n| n.trim().parse::<u64>().ok());
    let (Some(restarts), Some(job_id)) = (restarts.filter(|&n| n > 0), job_id()) else { return Ok(None) };
    if super::check_name(run, "--run").is_err() {
        return Ok(None);
    }
    let run_dir = data.run_dir(run);
    let Ok(text) = std::fs::read(run_dir.join(FILE)) else { return Ok(None) };
    let Ok(rec) = serde_json::from_slice::<Record>(&text) else { return Ok(None) };
    if rec.job_id != job_id {
        return Ok(None);
    }
    if !super::checkpoint::exists(&super::checkpoint::dir(&run_dir)) {
        return Err(BadInput::new(format!(
            "--run {run}: Slurm requeued job {job_id} (restart {restarts}), but run `{run}`, which this job started \
             ({}), has no checkpoint to go on from: it stopped before its first one. Remove that directory to train \
             it again from the start, and give --checkpoint-every N so that a requeued job resumes where it was",
            run_dir.display()
        )));
    }
    Ok(Some(Requeued { run: run.to_string(), job_id, restarts }))
}

/// What a `slurm-script` job of `train` with `flags` (its `--config` file
/// already read) trains on, resolved as `train` would resolve it in the
/// batch step: the dataset named, or in `--config`'s file, or the built-in
/// default; for `--resume RUN` the run's own, the run checked as a resume
/// checks it. A dataset that must be downloaded first is bad input; a
/// synthetic one not made yet is left to the job, which generates it.
pub fn train_target(data: &DataDir, flags: &super::flags::TrainFlags) -> anyhow::Result<JobTarget> {
    use super::flags::Action;
    data.check()?;
    match flags.action()? {
        Action::Resume { run, overrides } => {
            let (_, cfg, _) = super::resumable(data, &run, &overrides, "--resume")?;
            target(data, cfg.dataset, false, Some(run))
        }
        Action::Train(cfg) | Action::Naive(cfg) | Action::Neutronstar(cfg) => {
            target(data, cfg.dataset, flags.dataset.is_none(), None)
        }
    }
}

/// What a `slurm-script` job of `infer RUN` infers with: the run, checked as
/// `infer` checks it (it exists and has a complete checkpoint), and its dataset.
pub fn infer_target(data: &DataDir, run: &str) -> anyhow::Result<JobTarget> {
    data.check()?;
    let cfg = super::infer::run_config(data, run)?;
    target(data, cfg.dataset, false, Some(run.to_string()))
}

fn target(data: &DataDir, dataset: String, default: bool, run: Option<String>) -> anyhow::Result<JobTarget> {
    let generated = matches!(crate::datasets::locate_dataset(data, &dataset)?, Located::Synthetic { .. });
    Ok(JobTarget { dataset, default_dataset: default, generated_in_job: generated, run })
}
