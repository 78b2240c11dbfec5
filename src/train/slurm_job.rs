//! A run started inside a Slurm job records the job's id
//! (`runs/<run>/slurm_job.json`). Slurm requeues a batch job whose node
//! failed (or on `scontrol requeue`) and runs its script again from the
//! start, in the same job: `train --run NAME` would then be refused, the
//! name being taken, and the job would end FAILED with the run half done.
//! Instead the requeued job resumes its own run from its checkpoint.

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
