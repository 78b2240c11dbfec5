//! The cost model behind `tune-merge` and `train --time-steps auto`.
//!
//! - `counts`: exact per-worker, per-time-step counts of sampled iterations
//!   (roots, block sizes, local / cached / remote rows per owner), from the
//!   sampler training uses;
//! - `figures`: what each unit of work costs on a cluster (the `[cost]` table
//!   of a cluster profile; rough defaults until `--calibrate`);
//! - `model`: predicted seconds of an iteration (sample, gather, compute, sync);
//! - `planner`: every strategy and T = 1..W predicted, the `leapgnn` merge
//!   plan chosen within the memory bound; `next_time_steps` for `--time-steps auto`;
//! - `assign`: which roots a worker trains at each step (shared with training);
//! - `validate`: prediction against a measured run's `metrics.jsonl`;
//! - `calibrate` (+ `fit`, `probe`): figures measured on the real cluster.

pub mod assign;
pub mod calibrate;
pub mod counts;
pub mod figures;
pub mod fit;
pub mod model;
pub mod planner;
pub mod probe;
pub mod setup;
pub mod validate;

pub use crate::schedule::next_time_steps;
pub use assign::{merged_steps, own_groups};
pub use counts::{BlockCounts, CountJob, IterationCounts, Layout, RowSources, WorkerCounts};
pub use figures::{ComputeRate, Figures, Link};
pub use model::{Components, IterationPrediction, Prediction, Shape, predict, predict_iteration};
pub use planner::{Candidate, PlanInput, Tuning, balanced_shares, layout_of, tune};
pub use setup::Setup;
pub use validate::{Errors, Measured, RecordBounds, measure, read_metrics, read_run_metrics};

use crate::schedule::MergePlan;
use crate::train::{StrategyKind, TrainConfig, TrainMode};
use crate::{BadInput, DataDir};
use anyhow::Context;

/// The prediction table and the `leapgnn` plan for jobs like `cfg` (its
/// dataset, workers, model, batch size, fanouts, cache), averaged over the
/// first `iterations` iterations. What `tune-merge` prints and what `train
/// --time-steps auto` asks at start (then `next_time_steps` with measured
/// times at epoch boundaries).
pub fn plan_for(
    data: &DataDir,
    cfg: &TrainConfig,
    figures: &Figures,
    iterations: usize,
    prefetch: &[bool],
) -> anyhow::Result<Tuning> {
    let setup = Setup::open(data, cfg).with_context(|| format!("cannot read {} for the prediction", cfg.dataset))?;
    let job = setup.job();
    let its = job.first_iterations(iterations.max(1));
    let shape = setup.shape(false);
    Ok(tune(&PlanInput { job: &job, shape: &shape, figures, iterations: &its, prefetch })?)
}

/// Iterations the model counts for `train --time-steps auto`.
const AUTO_ITERATIONS: usize = 4;

/// `train --time-steps auto`: the model's `leapgnn` plan for every T that
/// fits the memory bound, each with its predicted iteration seconds. The
/// figures are those of `cfg.cluster`, else of `<data-dir>/profiles/local.toml`
/// (what `tune-merge --calibrate` writes), else the rough built-in ones.
pub fn auto_plans(data: &DataDir, cfg: &TrainConfig) -> anyhow::Result<Vec<MergePlan>> {
    let local = data.root.join("profiles").join("local.toml");
    let profile = cfg.cluster.clone().or_else(|| local.is_file().then_some(local));
    let figures = figures_of(profile.as_deref())?;
    let tuning = plan_for(data, cfg, &figures, AUTO_ITERATIONS, &[cfg.prefetches()])?;
    Ok(tuning
        .candidates
        .iter()
        .filter(|c| c.strategy == StrategyKind::Leapgnn && c.fits_memory)
        .map(|c| MergePlan {
            workers: cfg.workers,
            time_steps: c.time_steps,
            balance: c.balance.clone(),
            predicted_iteration_seconds: Some(c.iteration_seconds),
            prefetch: Some(c.prefetch),
        })
        .collect())
}

/// The cost figures of the profile at `path` (`None`: the built-in local profile's rough defaults).
pub fn figures_of(path: Option<&std::path::Path>) -> anyhow::Result<Figures> {
    let profile = match path {
        Some(p) => crate::cluster::Profile::load(p)?,
        None => crate::cluster::Profile::local(),
    };
    Ok(Figures::of_profile(&profile)?)
}

/// The layout a run of `cfg` trained with; `seen_steps` = time steps in its records.
pub fn layout_of_run(cfg: &TrainConfig, seen_steps: u32) -> Result<Layout, BadInput> {
    let mut shares = Vec::new();
    let mut t = seen_steps.max(1);
    if cfg.strategy == StrategyKind::Leapgnn {
        if let Some(p) = &cfg.merge_plan {
            let plan = MergePlan::load(p)?;
            plan.check(cfg.workers, &p.display().to_string())?;
            if plan.time_steps == t {
                shares = (0..cfg.workers).map(|w| plan.shares(w)).collect();
            }
        } else if let Some(n) = cfg.time_steps {
            t = n;
        }
    }
    Ok(layout_of(cfg.strategy, cfg.workers, t, &shares))
}

/// A measured run next to its prediction.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Validation {
    pub run: String,
    pub strategy: StrategyKind,
    pub workers: usize,
    pub time_steps: u32,
    /// The steady iterations compared (`validate::measure`).
    pub iterations: usize,
    pub predicted: Prediction,
    /// Mean over the steady iterations.
    pub measured_iteration_seconds: f64,
    pub measured: Components,
    pub error: Errors,
    /// Iterations past the warm-up left out as slow outliers.
    pub slow_iterations: usize,
    /// Mean over every iteration past the warm-up, slow ones included.
    pub all_iteration_seconds: f64,
}

/// The config of run `run`, checked to be one the cost model predicts:
/// refused (before any work) when it trained in full-graph mode.
pub fn validatable_run(data: &DataDir, run: &str) -> Result<TrainConfig, BadInput> {
    let cfg_path = data.run_dir(run).join("config.json");
    let text = std::fs::read(&cfg_path).map_err(|e| {
        BadInput::new(format!(
            "--validate {run}: cannot read {}: {e}; give the name of a run under {}",
            cfg_path.display(),
            data.runs_dir().display()
        ))
    })?;
    let cfg: TrainConfig = serde_json::from_slice(&text)
        .map_err(|e| BadInput::new(format!("{}: not a run config: {e}", cfg_path.display())))?;
    if cfg.mode == TrainMode::FullGraph {
        // Its iterations are whole-graph steps (RETEXO, VARCO and GNNPipe are
        // full-graph too): compared with sampled blocks, the "error" was
        // +150 % to +1100 %, about nothing.
        return Err(BadInput::new(format!(
            "--validate {run}: run `{run}` trained in full-graph mode (--strategy {}), one whole-graph step per \
             epoch; the cost model predicts sampled mini-batch iterations only (model-centric, micrograph, \
             pregather, leapgnn, p3): give a mini-batch run",
            cfg.strategy
        )));
    }
    Ok(cfg)
}

/// Refuses to validate run `run` (of config `run_cfg`) with figures
/// `--calibrate` measures on `dataset` when the run trained on another: the
/// figures would be that dataset's (compute and gather rates differ between
/// graphs), and the errors printed about nothing. Checked before any
/// calibration starts.
pub fn check_calibrated_for(run: &str, run_cfg: &TrainConfig, dataset: &str, calibrate: bool) -> Result<(), BadInput> {
    if !calibrate || run_cfg.dataset == dataset {
        return Ok(());
    }
    Err(BadInput::new(format!(
        "--validate {run} with --calibrate: run `{run}` trained on {}, but --calibrate measures the figures of \
         {dataset}, which would not predict it; validate it with `tune-merge {} ... --validate {run}` (calibrated \
         on {} with --calibrate)",
        run_cfg.dataset, run_cfg.dataset, run_cfg.dataset
    )))
}

/// Predicts exactly the iterations run `run` measured (its config, its
/// partition, its batches) and compares.
pub fn validate_run(data: &DataDir, run: &str, figures: &Figures) -> anyhow::Result<Validation> {
    let dir = data.run_dir(run);
    let cfg = validatable_run(data, run)?;
    let setup = Setup::open(data, &cfg).with_context(|| format!("cannot set up the prediction of run {run}"))?;
    let bounds = RecordBounds::of(&setup.job());
    let measured = measure(&read_run_metrics(&dir.join("metrics.jsonl"), &bounds)?)
        .map_err(|e| BadInput::new(format!("--validate {run}: {e}")))?;
    let layout = layout_of_run(&cfg, measured.time_steps)?;
    let counts = setup.job().count(&layout, &measured.iterations);
    let predicted = predict(&counts, figures, &setup.shape(cfg.prefetches()));
    let error = validate::errors(
        predicted.iteration_seconds,
        &predicted.components,
        measured.iteration_seconds,
        &measured.components,
    );
    Ok(Validation {
        run: run.to_string(),
        strategy: cfg.strategy,
        workers: cfg.workers,
        time_steps: layout.time_steps(cfg.workers) as u32,
        iterations: measured.iterations.len(),
        predicted,
        measured_iteration_seconds: measured.iteration_seconds,
        measured: measured.components,
        error,
        slow_iterations: measured.slow_iterations,
        all_iteration_seconds: measured.all_iteration_seconds,
    })
}
