//! The driver of a distributed run: partition (METIS) if needed, start the
//! workers, send the job, write what they report, and build the summary.

use super::{DistJob, Report, WorkerDone};
use crate::cluster::Launcher;
use crate::cluster::driver::{DriverOptions, Event, run_job};
use crate::format::write_atomic;
use crate::metrics::{JsonlSink, RunSummary, add_bytes};
use crate::train::strategy::StrategyEnv;
use crate::train::{Observer, RunOptions, TrainConfig, TrainError, new_run_dir};
use crate::{BadInput, DataDir};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

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
}

/// Starts a new run of `cfg` on `cfg.workers` workers, one partition each.
pub fn train_distributed(
    data: &DataDir,
    cfg: TrainConfig,
    run: &RunOptions,
    opts: &DistOptions<'_>,
    obs: &mut dyn Observer,
) -> anyhow::Result<RunSummary> {
    cfg.check()?;
    let world = cfg.workers;
    let time_steps = crate::train::strategy::build(cfg.strategy, &StrategyEnv::new(&cfg, None)?)?.time_steps();
    let dataset = absolute(&crate::datasets::ensure_dataset(data, &cfg.dataset)?)?;
    let parts_dir = absolute(&crate::partition::ensure_partition(data, &cfg.dataset, "metis", cfg.parts, cfg.seed)?)?;
    let (name, run_dir) = new_run_dir(data, run.run.as_deref(), &cfg)?;
    let run_dir = absolute(&run_dir)?;
    write_atomic(run_dir.join("config.json"), &serde_json::to_vec_pretty(&cfg).expect("config serialises"))?;
    let job_dataset = dataset.clone();
    let job = DistJob {
        config: cfg.clone(),
        dataset,
        parts_dir,
        run_dir: run_dir.clone(),
        resume: false,
        stop_after: run.stop_after,
        dump_grad: opts.dump_grad.as_deref().map(absolute).transpose()?,
        check_replicas: opts.check_replicas,
        comm_timeout_ms: opts.comm_timeout.as_millis() as u64,
    };
    let task = serde_json::json!({ "task": "train", "train": job });
    let train_ids = crate::format::DatasetFile::open(&job_dataset)?.train().len();
    obs.start(&crate::metrics::RunInfo {
        run: name.clone(),
        dataset: cfg.dataset.clone(),
        strategy: cfg.strategy.to_string(),
        model: cfg.model.to_string(),
        workers: world as u32,
        time_steps,
        epochs: cfg.epochs,
        iterations_per_epoch: crate::train::Schedule::new(&vec![0; train_ids], world, cfg.batch_size).iterations()
            as u64,
        start_epoch: 0,
        start_iteration: 0,
    });

    let mut sink = JsonlSink::append(&run_dir.join("metrics.jsonl"))?;
    let mut summary = RunSummary {
        run: name,
        strategy: cfg.strategy.to_string(),
        workers: world,
        dataset: cfg.dataset.clone(),
        model: cfg.model.to_string(),
        time_steps,
        ..Default::default()
    };
    let mut failure: Option<TrainError> = None;
    let driver_opts = DriverOptions {
        silence_timeout: (opts.comm_timeout * 2).max(Duration::from_secs(10)),
        ..DriverOptions::default()
    };
    let result = run_job(opts.launcher, world, &task, &driver_opts, opts.interrupted, |ev| {
        let outcome = match ev {
            Event::Metrics(rank, v) => match serde_json::from_value::<Report>(v) {
                Ok(Report::Step(r)) => {
                    summary.rows += r.rows;
                    sink.write(&r).map_err(TrainError::from).and_then(|()| obs.step(&r))
                }
                Ok(Report::Epoch { record, epochs }) => {
                    let _ = sink.flush();
                    obs.epoch(&record, epochs);
                    Ok(())
                }
                Err(e) => Err(BadInput::new(format!("worker {rank} sent a malformed metrics record: {e}")).into()),
            },
            Event::Log(rank, line) => {
                tracing::info!("[worker {rank}] {line}");
                obs.event(&format!("[worker {rank}] {line}"));
                Ok(())
            }
            Event::Done(..) => Ok(()),
        };
        if let Err(e) = outcome {
            failure.get_or_insert(e);
        }
        // `q` in the dashboard: stop the workers (the last checkpoint stays as written).
        if obs.stop_requested() {
            opts.interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    sink.flush()?;
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
    for d in &done {
        add_bytes(&mut summary.bytes, &d.bytes.sent);
    }
    let first = done.iter().find(|d| d.rank == 0).context("worker 0 sent no final report")?;
    summary.iterations = first.iterations;
    // auto: the T the workers settled on.
    summary.time_steps = first.time_steps.unwrap_or(time_steps);
    let summary = summary.from_history(first.history.clone());
    write_atomic(run_dir.join("workers.json"), &serde_json::to_vec_pretty(&done).expect("reports serialise"))?;
    write_atomic(run_dir.join("summary.json"), &serde_json::to_vec_pretty(&summary).expect("summary serialises"))?;
    Ok(summary)
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot make {} absolute", p.display()))
}
