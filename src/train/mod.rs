//! `leapgnn train`: the training loop and its strategies.
//!
//! One code path for any number of workers: a `Worker` (sampler, features,
//! model, parameters) runs `trainer::run_loop` with a `Collective` (here
//! `Solo`, W = 1) and a `Strategy` (here `model-centric`). Runs live under
//! `<data-dir>/runs/<run>/`: `config.json`, `metrics.jsonl`, `summary.json`
//! and `checkpoint/`.

pub mod checkpoint;
mod collective;
mod config;
pub mod config_file;
pub mod distributed;
mod evaluate;
pub(crate) mod finished;
pub mod flags;
pub mod fullgraph;
pub mod infer;
pub mod minibatch;
mod naive;
pub mod neutronstar;
pub mod placement;
pub(crate) mod run_dataset;
mod run_lock;
pub mod slurm_job;
pub mod strategy;
pub mod tensorboard;
mod trainer;
mod worker;

// Moved below `train`, `cost` and `locality`; re-exported for existing callers.
pub use crate::schedule::{MergePlan, Schedule, epoch_order};
pub use checkpoint::Progress;
pub use collective::{Collective, CommError, MeshCollective, Solo, read_u64_slots, u64_slots};
pub use config::{DeviceKind, EvalMode, Migration, Prefetch, TrainConfig, TrainMode};
pub use evaluate::{EvalRequest, Evaluation, evaluate};
pub use naive::{NaiveEpoch, NaiveReport, naive_dry_run};
pub(crate) use run_lock::RunLock;
pub use run_lock::{TrainingRun, training_on};
pub use strategy::{Iteration, PREFETCH_DEPTH, Strategy, StrategyKind};
pub use trainer::{LoopInput, run_loop};
pub use worker::{FeatureSource, GraphData, RowsAsked, StepStats, Worker};

use crate::format::{DatasetFile, FormatError, write_atomic};
use crate::metrics::{ByteCounts, EpochRecord, JsonlSink, RunBytes, RunInfo, RunSummary, StepRecord, add_bytes};
use crate::model::{Model, Params};
use crate::{BadInput, DataDir};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{0}")]
    Input(#[from] BadInput),
    /// `epoch` and `iteration` count from 0; the message counts from 1, as the progress lines do.
    #[error(
        "loss became {value} at epoch {}, iteration {}: training diverged; lower --lr or check the dataset's features for NaN/inf",
        .epoch + 1,
        .iteration + 1
    )]
    NonFiniteLoss { epoch: u64, iteration: u64, value: f64 },
    #[error("model computation failed: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("{0}")]
    Dataset(#[source] anyhow::Error),
    /// A feature row the worker needed is in none of its sources.
    #[error("feature rows unavailable: {0}")]
    Rows(String),
    #[error("collective operation failed: {0}")]
    Comm(#[source] CommError),
    /// Another process trains the run (`run_lock`).
    #[error(
        "run `{run}` is being trained by another leapgnn process{}; wait for it to end, or stop it (Ctrl-C in its \
         terminal, or kill -TERM {}), then `leapgnn train --resume {run}`",
        .holder.map_or(String::new(), |p| format!(" (pid {p})")),
        .holder.map_or("<pid>".to_string(), |p| p.to_string())
    )]
    RunInUse { run: String, holder: Option<u32> },
    /// Rank 0 of a distributed run, before a checkpoint (`Observer::before_checkpoint`).
    #[error(
        "the driver did not confirm within {secs} s ({tries} waits) that it holds every worker's records through \
         iteration {through}, so the checkpoint after it was not written (a resume from it would lack those \
         records); was the driver stopped (Ctrl-Z) that long, or is it overloaded? `leapgnn train --resume` goes on \
         from the last checkpoint"
    )]
    RecordsNotHeld { through: u64, secs: u64, tries: u32 },
    #[error("{path}: {source}{}", crate::format::io_advice(source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Its sources are asked too (the chain is walked); this answers for the
/// variants that are themselves the verdict.
impl crate::error::Blame for TrainError {
    fn is_bad_input(&self) -> bool {
        match self {
            TrainError::Input(_) => true,
            TrainError::Format(f) => crate::error::Blame::is_bad_input(f),
            _ => false,
        }
    }
}

/// Receives what the loop produces (progress lines, the TUI, the driver).
pub trait Observer {
    /// Before the first iteration: what runs, and from where.
    fn start(&mut self, _info: &RunInfo) {}
    /// The workers were launched, each attempt's: where each rank runs
    /// (`RunInfo::hosts`), which `start` could only say as the launcher
    /// expected it. A relaunch may place them elsewhere: the ssh launcher
    /// moves an unreachable host's ranks to a spare as it launches them.
    fn hosts(&mut self, _hosts: &[String]) {}
    fn step(&mut self, _r: &StepRecord) -> Result<(), TrainError> {
        Ok(())
    }
    fn epoch(&mut self, _e: &EpochRecord, _epochs: u64) {}
    /// What this process sent while evaluating epoch `epoch` (before `epoch`
    /// reports it): a driver counts every worker's from these when an
    /// attempt that evaluated is lost before its workers' final reports.
    fn evaluated(&mut self, _epoch: u64, _sent: &crate::metrics::ByteCounts) {}
    /// Every worker, before a checkpoint after `through` global iterations,
    /// all its records through there given to `step`: returns once the
    /// checkpoint may be written. A resume keeps the records before its
    /// checkpoint and trains the rest again, so a checkpoint must not run
    /// ahead of the records on disk: a distributed worker tells the driver,
    /// and rank 0, which writes the checkpoint, waits until the driver holds
    /// every worker's records through there.
    fn before_checkpoint(&mut self, _through: u64) -> Result<(), TrainError> {
        Ok(())
    }
    /// `before_checkpoint` for a periodic checkpoint, which the run can do
    /// without: false (the driver did not confirm in time) skips it, and the
    /// next one tries again. A checkpoint the run ends or stops at waits
    /// longer instead (`before_checkpoint`): nothing comes after it.
    fn may_checkpoint(&mut self, through: u64) -> Result<bool, TrainError> {
        self.before_checkpoint(through).map(|()| true)
    }
    /// Something worth a log line (a checkpoint was written).
    fn event(&mut self, _msg: &str) {}
    /// `--restarts`: the workers were relaunched and train again from
    /// `r.epoch`, `r.iteration`; comes just before that step's first record
    /// (the records since that position, of the failed attempt, are stale).
    fn restart(&mut self, _r: &crate::metrics::RestartRecord) {}
    /// Polled in every iteration and evaluation: true stops the run after a
    /// checkpoint, at the end of that iteration or epoch.
    fn stop_requested(&self) -> bool {
        false
    }
    /// The iteration's summed gradient (all workers), before the optimizer step.
    fn gradient(&mut self, _global_iteration: u64, _grad: &[f32]) {}
    /// Whether `gradient` is wanted: a loop that never sums the whole gradient
    /// (gnnpipe: each stage keeps its own layers') assembles it only then.
    fn wants_gradient(&self) -> bool {
        false
    }
}

/// Observes nothing.
pub struct Quiet;
impl Observer for Quiet {}

/// Flags that are not part of a run's config.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Name of a new run (default: `<dataset>-<model>-<unix time>`).
    pub run: Option<String>,
    /// Stop after this many iterations in total, checkpointing first (tests
    /// use it to interrupt a run at a known point).
    pub stop_after: Option<u64>,
    /// Ask the last worker to stop while it evaluates the epoch that makes
    /// this many done (tests: a stop request that comes during an evaluation).
    pub stop_in_evaluation: Option<u64>,
    /// The memory the workers on this machine may use in all, instead of its
    /// MemAvailable and the address-space limit (tests and capped jobs).
    pub memory_limit: Option<u64>,
}

/// What `--resume` may change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResumeOverrides {
    pub epochs: Option<u64>,
    /// Another number of workers (`TrainConfig::on_workers`).
    pub workers: Option<usize>,
    pub checkpoint_every: Option<u64>,
}

/// Starts a new run of `cfg`.
pub fn train(
    data: &DataDir,
    cfg: TrainConfig,
    opts: &RunOptions,
    obs: &mut dyn Observer,
) -> Result<RunSummary, TrainError> {
    cfg.check()?;
    check_new_run(data, opts)?;
    let path = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = DatasetFile::open(&path)?;
    cfg.check_all(&ds)?;
    let (run, run_dir) = new_run_dir(data, opts.run.as_deref(), &cfg)?;
    let lock = RunLock::acquire(&run_dir, &run)?;
    run_dataset::record(&run_dir, &cfg.dataset, &ds)?;
    slurm_job::record(&run_dir)?;
    execute(data, cfg, (&run, &run_dir, lock), false, opts, obs)
}

/// Continues run `run` from its last checkpoint.
pub fn resume(
    data: &DataDir,
    run: &str,
    over: &ResumeOverrides,
    opts: &RunOptions,
    obs: &mut dyn Observer,
) -> Result<RunSummary, TrainError> {
    let lock = lock_run(data, run, "--resume")?;
    // One process held every count: the checkpoint's own progress is the run's.
    let counted = |_: &Path, p: &Progress| Some((p.rows, RunBytes::split(total_bytes(p), p.eval_bytes)));
    if let Some(summary) = finished::write_missing_summary(data, run, over, obs, &counted)? {
        return Ok(summary);
    }
    let (run_dir, cfg, _) = resumable(data, run, over, "--resume")?;
    execute(data, cfg, (run, &run_dir, lock), true, opts, obs)
}

/// Run `run`'s directory, its config with `over` applied (checked), and the
/// progress of its last checkpoint. `what` starts every refusal: the flag
/// the user typed, or the restart that resumes the run without one.
pub fn resumable(
    data: &DataDir,
    run: &str,
    over: &ResumeOverrides,
    what: &str,
) -> Result<(std::path::PathBuf, TrainConfig, Progress), TrainError> {
    let (run_dir, ck) = checkpointed_run(data, run, what)?;
    let (mut cfg, progress) = checkpoint::load_config(&ck)?;
    run_dataset::check_same_dataset(&run_dir, run, &cfg.dataset, what)?;
    let dataset = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = DatasetFile::open(&dataset)?;
    run_dataset::check(&run_dir, run, &cfg.dataset, &ds, what)?;
    checkpoint::check_fits(&ck, &cfg.model_spec(&ds))?;
    check_progress(&ck, &cfg, &progress, ds.train().len())?;
    // Before any worker starts or file is shipped: a damaged checkpoint would train on from a model nobody trained.
    checkpoint::verify(&ck)?;
    let keeps_history = cfg.gnnpipe.as_ref().is_some_and(|g| g.history);
    if cfg.strategy == StrategyKind::Gnnpipe && keeps_history && !checkpoint::has_history(&ck)? {
        return Err(BadInput::new(format!(
            "{what} {run}: run `{run}` (--strategy gnnpipe) ended without --checkpoint-every, so its final checkpoint \
             holds the weights but not the embedding history the next epoch reads; start a new run (with \
             --checkpoint-every N to be able to go on from it), or use its weights with `infer`"
        ))
        .into());
    }
    // A resume that would train nothing says so rather than exiting quietly.
    if progress.complete(cfg.epochs) && cfg.strategy == StrategyKind::Retexo {
        // Its length is its layers x --rounds, which a resume keeps: no --epochs goes further.
        return Err(BadInput::new(format!(
            "run `{run}` (--strategy retexo) has trained every round of its {} stages: nothing to \
             resume, and a RETEXO run cannot be made longer (its length is --layers x --rounds); train a new run with \
             more --rounds, or use this one's weights with `infer {run}`",
            cfg.fanouts.layers()
        ))
        .into());
    }
    if let Some(e) = over.epochs {
        cfg.epochs = e;
    }
    if progress.complete(cfg.epochs) {
        let asked = over.epochs.map_or(String::new(), |e| format!(" and --epochs {e} asks for no more"));
        return Err(BadInput::new(format!(
            "run `{run}` has already trained {} epochs{asked}: nothing to resume; give --epochs above {} to train further",
            progress.epoch, progress.epoch
        ))
        .into());
    }
    if let Some(c) = over.checkpoint_every {
        cfg.checkpoint_every = c;
    }
    if let Some(w) = over.workers {
        cfg = cfg.on_workers(w)?;
    }
    cfg.check()?;
    Ok((run_dir, cfg, progress))
}

/// Refuses a checkpoint whose position cannot be one its run reached: an
/// epoch count without a record per epoch, or an iteration past the epoch's
/// last (a `state.json` edited by hand or mixed with another run's). Resumed
/// as it was, the loop skipped the rest of the epoch and reported an epoch
/// of no iterations (loss 0) as trained.
fn check_progress(ck: &Path, cfg: &TrainConfig, p: &Progress, train_ids: usize) -> Result<(), TrainError> {
    // Iterations of one epoch: the schedule's, one step for GNNPipe, none
    // counted within an epoch by RETEXO (each round is its own epoch).
    let per_epoch = match cfg.strategy {
        StrategyKind::Retexo => 0,
        StrategyKind::Gnnpipe => 1,
        _ => Schedule::new(&vec![0; train_ids], cfg.workers.max(1), cfg.loop_batch_size(train_ids)).iterations() as u64,
    };
    let why = if p.history.len() as u64 != p.epoch {
        Some(format!("it says {} epoch(s) are done but holds the records of {}", p.epoch, p.history.len()))
    } else if p.iteration > per_epoch {
        Some(format!(
            "it says iteration {} of epoch {} is next, but an epoch of this run has {per_epoch} iteration(s)",
            p.iteration, p.epoch
        ))
    } else if p.global_iteration < p.iteration {
        Some(format!("its global iteration {} is below its iteration {} in the epoch", p.global_iteration, p.iteration))
    } else {
        None
    };
    match why {
        Some(why) => Err(BadInput::new(format!(
            "checkpoint {} cannot be used: {why}, so it is not a position the run reached: the state was edited or \
             belongs to another run; put back the run's own checkpoint files, or start a new run",
            ck.join("state.json").display()
        ))
        .into()),
        None => Ok(()),
    }
}

/// The directory of run `run` (named by `flag`) and its checkpoint directory,
/// or why there is nothing to continue from.
pub(crate) fn checkpointed_run(data: &DataDir, run: &str, flag: &str) -> Result<(PathBuf, PathBuf), TrainError> {
    check_name(run, flag)?;
    let run_dir = data.run_dir(run);
    let ck = checkpoint::dir(&run_dir);
    if !checkpoint::exists(&ck) {
        let why = if run_dir.is_dir() { never_checkpointed(&run_dir, run) } else { no_such_run(data, run) };
        return Err(BadInput::new(format!("{flag} {run}: {why}")).into());
    }
    Ok((run_dir, ck))
}

fn no_such_run(data: &DataDir, run: &str) -> String {
    format!("run `{run}` does not exist in {}; list the runs there, or start a new run", data.runs_dir().display())
}

/// Locks run `run` (named by `flag`) to train it on, before anything of it
/// is read: while another process trains it, its checkpoint may be
/// replaced under the reader, and a run before its first checkpoint looks
/// like one that died; the refusal says the run is in training instead.
pub(crate) fn lock_run(data: &DataDir, run: &str, flag: &str) -> Result<RunLock, TrainError> {
    check_name(run, flag)?;
    let run_dir = data.run_dir(run);
    if !run_dir.is_dir() {
        return Err(BadInput::new(format!("{flag} {run}: {}", no_such_run(data, run))).into());
    }
    let lock = RunLock::acquire(&run_dir, run)?;
    distributed::infer::remove_stale_copies(&run_dir);
    Ok(lock)
}

/// Train, validation and test ids that have a label, checked.
pub(crate) fn splits(ds: &DatasetFile, name: &str) -> Result<[Vec<u32>; 3], BadInput> {
    if ds.num_classes() == 0 {
        return Err(BadInput::new(format!(
            "dataset `{name}` has no labels (0 classes); import it with labels, or generate some (`leapgnn download ... --generated-classes K`)"
        )));
    }
    let labels = ds.labels();
    let mut out: [Vec<u32>; 3] = Default::default();
    for ((split, ids), o) in ["train", "val", "test"].iter().zip([ds.train(), ds.val(), ds.test()]).zip(&mut out) {
        // Checked before the archive's checksum is (`open_verified` comes later): an id
        // past the nodes is corruption to report, not an index to follow.
        if let Some(&v) = ids.iter().find(|&&v| v as usize >= labels.len()) {
            return Err(BadInput::new(format!(
                "dataset `{name}` is corrupt: its {split} split names node {v} of {}; download or import it again \
                 (`leapgnn download {name} --force`)",
                labels.len()
            )));
        }
        *o = ids.iter().copied().filter(|&v| labels[v as usize] >= 0).collect();
        if o.is_empty() {
            return Err(BadInput::new(format!(
                "dataset `{name}` has no labelled {split} nodes; re-import it with a split (`leapgnn download {name} --force --split 60,20,20`, adding the --from and --format it was imported with, if any)"
            )));
        }
        let mut sorted = o.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(BadInput::new(format!("dataset `{name}`: node {} is listed twice in the {split} split", w[0])));
        }
    }
    Ok(out)
}

fn execute(
    data: &DataDir,
    cfg: TrainConfig,
    (run, run_dir, _lock): (&str, &Path, RunLock),
    resuming: bool,
    opts: &RunOptions,
    obs: &mut dyn Observer,
) -> Result<RunSummary, TrainError> {
    let (stop_after, memory_limit) = (opts.stop_after, opts.memory_limit);
    let path = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = DatasetFile::open_verified(&path)?;
    let [train, val, test] = splits(&ds, &cfg.dataset)?;
    let limit = fullgraph::memory::Limit { bytes: memory_limit, resume: resuming, ..Default::default() };
    check_model_memory(&cfg, &ds, fullgraph::memory::Held::Largest(1), false, limit, None)?;
    // A resumed run comes here without `check_all`, which checks a new run's.
    fullgraph::memory::check_device(&ds, &cfg, None, &cfg.model_spec(&ds), resuming)?;
    let (model, params, mut opt, device) = build_model(&cfg, &ds)?;
    // A full-graph run is its own driver (0 workers beside it); GNNPipe's
    // stages are held to their chunks as cut, where there are several.
    let memory = (cfg.mode == TrainMode::FullGraph).then_some((&params, 0));
    let check = fullgraph::chunks::StoredCheck { limit, memory };
    let chunks = match fullgraph::chunks::ensure_stored(data, &ds, &cfg, None, Some(check)) {
        Ok(stored) => stored.map(|(_, s)| (s.of, s.count)),
        Err(e) => return Err(e.downcast::<BadInput>().map_or_else(TrainError::Dataset, TrainError::Input)),
    };
    if cfg.mode == TrainMode::FullGraph && chunks.is_none() {
        fullgraph::memory::preflight(&ds, &cfg, None, model.spec(), &params, 0, limit)?;
    }
    fullgraph::memory::warn_address_space();
    let ck = checkpoint::dir(run_dir);
    let progress = if resuming { checkpoint::restore(&ck, &params, opt.as_mut())? } else { Progress::default() };
    write_atomic(run_dir.join("config.json"), &serde_json::to_vec_pretty(&cfg).expect("config serialises"))?;

    let metrics = run_dir.join("metrics.jsonl");
    let at = (progress.epoch, progress.iteration);
    let sink = JsonlSink::append_before(&metrics, at)?;
    let mut obs = Recording { sink, inner: obs };

    let data_view = GraphData { graph: ds.graph(), features: &ds, labels: ds.labels() };
    let mut worker =
        Worker::new((0, 1), data_view, (&cfg.fanouts, &cfg.eval_fanouts), cfg.seed, (model, params), device);
    worker.norm = cfg.normalize;
    worker.eval = cfg.eval;
    worker.all_rows = Some(&ds);
    let mut strategy = strategy::build(cfg.strategy, &strategy::StrategyEnv::new(&cfg, None)?)?;
    let inp = LoopInput {
        cfg: &cfg,
        train: &train,
        val: &val,
        test: &test,
        checkpoint_dir: Some(&ck),
        resumed_from: resuming.then_some(ck.as_path()),
        stop_after,
        stop_in_evaluation: opts.stop_in_evaluation,
        owners: None,
        before_iteration: None,
        chunks: chunks.as_ref().map(|(of, count)| (&of[..], *count)),
    };
    obs.start(&RunInfo {
        run: run.to_string(),
        dataset: cfg.dataset.clone(),
        strategy: cfg.strategy.to_string(),
        mode: cfg.reported_mode(),
        model: cfg.model.to_string(),
        workers: Solo.world() as u32,
        time_steps: strategy.time_steps(),
        epochs: cfg.epochs,
        iterations_per_epoch: Schedule::new(&train, Solo.world(), cfg.loop_batch_size(train.len())).iterations() as u64,
        start_epoch: progress.epoch,
        start_iteration: progress.iteration,
        stages: cfg.stages(),
        hosts: vec!["local".into()],
    });
    obs.event("worker 0 started in this process");
    let p = run_loop(&inp, &mut worker, &mut Solo, strategy.as_mut(), opt.as_mut(), progress, &mut obs)?;

    let summary = RunSummary {
        run: run.to_string(),
        strategy: cfg.strategy.to_string(),
        workers: cfg.workers,
        rows: Some(p.rows),
        bytes: Some(RunBytes::split(total_bytes(&p), p.eval_bytes)),
        time_steps: strategy.time_steps(),
        dataset: cfg.dataset.clone(),
        model: cfg.model.to_string(),
        iterations: p.global_iteration,
        mode: cfg.reported_mode(),
        peak_rss_bytes: crate::util::peak_rss_bytes().into_iter().collect(),
        prefetch: cfg.prefetches(),
        ..Default::default()
    }
    .from_history(p.history);
    write_atomic(run_dir.join("summary.json"), &serde_json::to_vec_pretty(&summary).expect("summary serialises"))?;
    Ok(summary)
}

/// Everything a single-process run billed: its steps and its evaluations.
fn total_bytes(p: &Progress) -> ByteCounts {
    let mut t = p.bytes;
    add_bytes(&mut t, &p.eval_bytes);
    t
}

/// Refuses, before anything is allocated, to train a model whose weights,
/// gradient and optimizer state cannot fit in the memory this process may use
/// (MemAvailable, or the address-space limit when one is set; `limit` bytes,
/// `--memory-limit-mb`, instead of both): an absurd `--hidden` x `--layers`
/// would otherwise abort the process on a failed allocation (or bring the OOM
/// killer) deep inside the model's set-up or its first backward pass. The
/// weights' figure is a lower bound (the layers' dense matrices only), so a
/// model that fits is never refused for them; a mini-batch run on the CPU
/// then adds an estimate of one iteration's activations
/// (`sampled_activation_bytes`), an upper bound. The `held` workers run on
/// this machine: they share its memory, so they are held against it
/// together (as the full-graph preflight holds its workers), each within the
/// address-space limit it inherits; with `driver`, this process drives them
/// and stays beside them, so a mini-batch run counts it with them. With
/// `owners` (node -> worker, once the graph is partitioned) each worker's
/// activations are those of the roots it can be routed (`RootsHeld`), and
/// the workers held are the largest of the run's or the ranks named; without,
/// every worker's are a batch's, as with even ownership.
pub(crate) fn check_model_memory(
    cfg: &TrainConfig,
    ds: &DatasetFile,
    held: fullgraph::memory::Held<'_>,
    driver: bool,
    limit: fullgraph::memory::Limit,
    owners: Option<&[u16]>,
) -> Result<(), BadInput> {
    let spec = cfg.model_spec(ds);
    spec.check()?;
    let budgets = fullgraph::memory::budgets(limit);
    let local = held.count();
    // Values, gradient and the optimizer's slots, f32 each; on a GPU only the
    // values drawn here pass through this machine's memory.
    let copies = match cfg.device {
        DeviceKind::Cpu => 2 + cfg.optimizer.slots().len() as u64,
        DeviceKind::Cuda(_) => 1,
    };
    let need = (spec.min_weight_values() as u64).saturating_mul(4).saturating_mul(copies);
    use crate::util::mib;
    let fewer = if local > 1 { format!(", {}", limit.fewer_here()) } else { String::new() };
    // A resume moves a run of several workers only to 2 or more.
    let fewer_resumed = if local > 1 && cfg.workers > 2 { ", resume on fewer --workers (at least 2)" } else { "" };
    let weights = vec![need; local];
    if let Some(b) = fullgraph::memory::exceeded(&budgets, &weights) {
        return Err(BadInput::new(format!(
            "--hidden {} --layers {}: the {} model has at least {} weights (with {} input features and {} classes), \
             which ({}) need at least {} MiB{}, but {} MiB are available ({}); {}",
            spec.hidden,
            spec.layers,
            spec.kind,
            spec.min_weight_values(),
            spec.in_dim,
            spec.classes,
            match copies {
                1 => "their values, drawn on this machine".to_string(),
                _ => format!("with their gradient and the optimizer's {} state slot(s)", copies - 2),
            },
            mib(need),
            b.together_on(&weights, local, &held.place()),
            mib(b.bytes),
            b.source,
            b.advice(
                format!("give a smaller --hidden or fewer --layers{fewer}, or train on a machine with more memory"),
                fewer_resumed,
                "a smaller --hidden or fewer --layers"
            )
        )));
    }
    if cfg.mode == TrainMode::FullGraph || cfg.device != DeviceKind::Cpu {
        return Ok(()); // the full-graph preflight counts its own; a GPU holds them
    }
    let cache = feature_cache_bytes(cfg, ds);
    // The held workers' figures, the largest first.
    let figures: Vec<(u64, u64, RootsHeld)> = RootsHeld::per_worker(cfg, ds, owners)?
        .into_iter()
        .map(|roots| {
            let (rows, activations) = sampled_activation_bytes(cfg, ds, &spec, roots);
            (activations, rows, roots)
        })
        .collect();
    let figures = held.pick(&figures);
    let Some(&(activations, rows, roots)) = figures.first() else { return Ok(()) };
    let own = |activations: u64| {
        need.saturating_add(activations).saturating_add(cache).saturating_add(fullgraph::memory::PROCESS_BYTES)
    };
    let mut per_worker: Vec<u64> = (0..local).map(|w| own(figures.get(w).map_or(activations, |f| f.0))).collect();
    // Sampling reads the mapped archive (topology and feature rows) all over:
    // in every worker's address space, but in this machine's memory once.
    per_worker[0] = per_worker[0].saturating_add(ds.file_len());
    let per_worker = fullgraph::memory::with_driver(per_worker, driver);
    tracing::debug!(
        "memory estimate: {} MiB per worker ({} of weights, {} of activations over up to {rows} rows, {} of feature cache, {} resident), {local} on this machine",
        per_worker[0] >> 20,
        need >> 20,
        activations >> 20,
        cache >> 20,
        (per_worker[0] - need - activations - cache) >> 20,
    );
    let Some(b) = fullgraph::memory::exceeded(&budgets, &per_worker) else { return Ok(()) };
    let cache_flag = if cache > 0 { ", --cache-mb" } else { "" };
    Err(BadInput::new(format!(
        "--batch-size {} --hidden {}: one iteration's sampled layers (up to {rows} rows{}) need an estimated {} MiB beside the model's {} MiB \
         ({} MiB per worker{}{}), but {} MiB are available ({}); {}",
        cfg.batch_size,
        spec.hidden,
        roots.uneven(cfg.batch_size as u64),
        mib(activations),
        mib(need),
        mib(per_worker[0]),
        match cache {
            0 => String::new(),
            c => format!(" with {} MiB of --cache-mb feature cache", mib(c)),
        },
        b.together_on(&per_worker, local, &held.place()),
        mib(b.bytes),
        b.source,
        b.advice(
            format!("give a smaller --batch-size, --hidden{cache_flag} or --fanout{fewer}, or train on a machine with more memory"),
            fewer_resumed,
            &format!("a smaller --batch-size, --hidden{cache_flag} or --fanout")
        ),
    )))
}

/// What a worker's `--cache-mb` feature cache holds (the rows fetched once
/// before training): at most its budget, and never more than the graph's
/// rows; with its id -> slot table, 4 bytes per node. Only the workers of a
/// run of several fetch remote rows to cache.
fn feature_cache_bytes(cfg: &TrainConfig, ds: &DatasetFile) -> u64 {
    if cfg.workers < 2 || cfg.cache_mb == 0 {
        return 0;
    }
    let n = ds.num_nodes() as u64;
    let rows = crate::comm::cache::rows_within(cfg.cache_mb.saturating_mul(1 << 20), ds.features().mean_row_bytes());
    let rows = (rows as u64).min(n);
    (rows as f64 * ds.features().mean_row_bytes()) as u64 + 4 * n
}

/// Copies of every sampled layer's `[rows, width]` output alive at an
/// iteration's peak: the projections of its source rows, their aggregate,
/// the activation and dropout, and the gradient of each on the way back.
/// Measured (peak RSS, Facebook, hidden 128 to 2048, batch 1024 to 8192): 4.5
/// to 7 per value.
const SAMPLED_LAYER_COPIES: u64 = 8;

/// Upper bound on one mini-batch iteration's activations (training, or
/// evaluation when it takes bigger blocks), with the most rows a layer reads:
/// each layer reads at most its roots times (fanout + 1) rows (a self loop
/// each), and never more than the graph has; `--eval full` computes every
/// node at every layer.
fn sampled_activation_bytes(
    cfg: &TrainConfig,
    ds: &DatasetFile,
    spec: &crate::model::ModelSpec,
    roots: RootsHeld,
) -> (u64, u64) {
    let n = ds.num_nodes() as u64;
    let row_bytes = ds.features().mean_row_bytes() as u64;
    // What Model::input_rows_of keeps sparse (on the CPU, as here).
    let sparse_input = ds.features().is_sparse() && spec.kind != crate::model::ModelKind::SageMax;
    // Returns the most rows a layer reads, the bytes, and the first layer's output rows.
    let bytes = |batch: u64, fanouts: &[crate::sample::Fanout]| {
        let (mut out_rows, mut b, mut widest, mut first_out) = (batch.min(n), 0u64, 0u64, 0u64);
        for (l, f) in fanouts.iter().enumerate().rev() {
            // Sampled edges, a self loop per root included, and the rows they read.
            let edges = match *f {
                crate::sample::Fanout::All => ds.graph().num_edges() as u64 + out_rows,
                crate::sample::Fanout::Upto(k) => out_rows.saturating_mul(k as u64 + 1),
            };
            let in_rows = edges.min(n);
            let width = if l + 1 == fanouts.len() { spec.classes } else { spec.hidden } as u64;
            // Sparse input rows are multiplied before they are aggregated, so
            // the first layer then holds projections of every row it reads.
            let projected = if l == 0 && sparse_input { in_rows + out_rows } else { out_rows };
            b = b.saturating_add(SAMPLED_LAYER_COPIES.saturating_mul(projected).saturating_mul(width * 4));
            if spec.kind == crate::model::ModelKind::Gat {
                // Every head's attention over the sampled edges.
                b = b.saturating_add(fullgraph::memory::GAT_EDGE_COPIES * edges * spec.heads as u64 * 4);
            }
            if l == 0 {
                // The gathered input rows and their dropped-out copy; dense
                // rows are aggregated at their own width first.
                b = b.saturating_add(2 * in_rows * row_bytes);
                if !sparse_input {
                    b = b.saturating_add(3 * out_rows * spec.in_dim as u64 * 4);
                }
            }
            widest = widest.max(in_rows);
            first_out = out_rows;
            out_rows = in_rows;
        }
        (widest, b, first_out)
    };
    let mut train = bytes(roots.step, &cfg.fanouts.0);
    // pregather and leapgnn hold the input rows of all the roots routed to
    // this worker in the iteration in a store beside the steps' own copies,
    // and `--prefetch` the next PREFETCH_DEPTH iterations' stores too.
    let pregathers = matches!(cfg.strategy, StrategyKind::Pregather | StrategyKind::Leapgnn);
    let stores = pregathers as u64 + if cfg.prefetches() { PREFETCH_DEPTH as u64 } else { 0 };
    let stored = if stores > 0 { bytes(roots.iteration, &cfg.fanouts.0).0 } else { 0 };
    train.1 = train.1.saturating_add(stores.saturating_mul(stored).saturating_mul(row_bytes));
    if cfg.strategy == StrategyKind::P3 {
        train.1 = train.1.saturating_add(p3_bytes(cfg, ds, spec, train.0, train.2));
    }
    let eval = match cfg.eval {
        EvalMode::Full => bytes(n, &vec![crate::sample::Fanout::All; spec.layers]),
        EvalMode::Sampled => bytes(cfg.eval_batch_size as u64, &cfg.eval_fanouts.0),
    };
    let (rows, b, _) = if eval.1 > train.1 { eval } else { train };
    (rows, b)
}

/// The roots a worker trains at once (`step`) and holds the input rows of in
/// one iteration (`iteration`). Model-centric and P3 workers train their own
/// batch of B; the micrograph strategies train the roots they own, routed
/// from every worker's batch: at most B per time step while there is one
/// step per model, but a leapgnn step merges the steps it drops, so with
/// uneven ownership (a hand-made or unbalanced partition) one worker can get
/// up to W x B in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RootsHeld {
    step: u64,
    iteration: u64,
}

impl RootsHeld {
    /// Every worker's, from the roots it owns in each iteration of the run's
    /// seeded schedule (`owners`: node -> worker); without `owners`, one
    /// batch each.
    fn per_worker(cfg: &TrainConfig, ds: &DatasetFile, owners: Option<&[u16]>) -> Result<Vec<RootsHeld>, BadInput> {
        let batch = cfg.batch_size as u64;
        let world = cfg.workers.max(1);
        let micro = matches!(cfg.strategy, StrategyKind::Micrograph | StrategyKind::Pregather | StrategyKind::Leapgnn);
        let Some(owners) = owners.filter(|_| micro && world > 1) else {
            return Ok(vec![RootsHeld { step: batch, iteration: batch }; world]);
        };
        let [train, _, _] = splits(ds, &cfg.dataset)?;
        let most = crate::schedule::batches::most_owned_per_iteration(
            &train,
            owners,
            world,
            cfg.batch_size,
            cfg.seed,
            cfg.epochs,
        );
        Ok(most.into_iter().map(|iteration| RootsHeld { step: Self::step(cfg, world, iteration), iteration }).collect())
    }

    /// The most roots of one time step, for a worker routed `iteration`
    /// roots in an iteration: its share of one model's batch per step with a
    /// step per model; with T < W steps (`routing::merge`), each kept step
    /// keeps its own model's roots or is topped up to about 1/T of them all
    /// (one root over, from rounding); with a merge plan's uneven shares or
    /// `--time-steps auto`, which may merge all into one, all of them.
    fn step(cfg: &TrainConfig, world: usize, iteration: u64) -> u64 {
        let batch = (cfg.batch_size as u64).min(iteration);
        if cfg.strategy != StrategyKind::Leapgnn {
            return batch;
        }
        match (&cfg.merge_plan, cfg.time_steps) {
            (None, Some(t)) if t as usize >= world => batch,
            (None, Some(t)) => batch.max(iteration.div_ceil(t.max(1) as u64) + 1).min(iteration),
            _ => iteration,
        }
    }

    /// What a refusal adds to its rows when a worker's roots are not one batch's.
    fn uneven(&self, batch: u64) -> String {
        match self.iteration > batch {
            true => format!(
                ", for up to {} roots one worker owns in an iteration and {} in one time step",
                self.iteration, self.step
            ),
            false => String::new(),
        }
    }
}

/// P3's copies of a batch's `[first layer's output rows, column slice]`
/// held until its gradient comes back: the aggregate and the own rows side by
/// side, which the partial's backward reads. Measured with the copies below
/// (peak RSS, 2 workers, Cora, Facebook and synthetic-arxiv, hidden 16 and
/// 1024, batch 1024 and 4096): 1.2 to 2.2 times under the estimate.
const P3_SLICE_COPIES: u64 = 2;

/// P3's copies of a batch's first-layer partial `[rows, width]` at the peak:
/// the partial, the bytes sent for it, those received, and the gradient sent
/// back (the owner's sum and its gradient are among the layers it runs).
const P3_PARTIAL_COPIES: u64 = 4;

/// What P3 holds beside the layers the owner of a batch runs (see
/// `minibatch::p3`): every worker's batch, until its gradient comes back, with
/// its input rows' column slice (made dense, sparse rows too) aggregated,
/// and its partial first layer; and the L1 norm of every row.
/// `in_rows` and `out_rows` bound the first layer's input and output rows.
fn p3_bytes(cfg: &TrainConfig, ds: &DatasetFile, spec: &crate::model::ModelSpec, in_rows: u64, out_rows: u64) -> u64 {
    let world = cfg.workers.max(1) as u64;
    let cols = (spec.in_dim as u64).div_ceil(world);
    let width = if spec.layers == 1 { spec.classes } else { spec.hidden } as u64;
    let held = P3_SLICE_COPIES.saturating_mul(cols).saturating_add(P3_PARTIAL_COPIES.saturating_mul(width));
    // One batch's dense slice of input rows at a time, until it is aggregated.
    let slice = in_rows.saturating_mul(cols);
    let values = world.saturating_mul(out_rows).saturating_mul(held).saturating_add(slice);
    values.saturating_mul(4).saturating_add(4 * ds.num_nodes() as u64)
}

/// The model of `cfg` for `ds` (seeded initial weights), its optimizer, and the device.
pub(crate) fn build_model(
    cfg: &TrainConfig,
    ds: &DatasetFile,
) -> Result<(Model, Params, Box<dyn crate::optim::Optimizer>, candle_core::Device), TrainError> {
    let device = cfg.device.open()?;
    let spec = cfg.model_spec(ds);
    spec.check()?;
    let mut params = Params::new(cfg.seed);
    let model = Model::new(&spec, &mut params, &device)?;
    if cfg.strategy == StrategyKind::Retexo {
        // The worker's parameters are RETEXO's stages (`model` only describes the layers).
        params = Params::new(cfg.seed);
        fullgraph::retexo::RetexoModel::new(&spec, &mut params, &device)?;
    }
    let opt = cfg.optimizer.build(params.numel(), cfg.lr, cfg.weight_decay);
    Ok((model, params, opt, device))
}

/// `-vv`: one line per step record.
pub(crate) fn trace_step(r: &StepRecord) {
    tracing::debug!(
        "worker {}: epoch {} iteration {} step {}: loss {:.4}, {} rows ({} remote), {:.3} s",
        r.worker,
        r.epoch + 1,
        r.iteration + 1,
        r.time_step,
        r.loss,
        r.rows.requested,
        r.rows.remote,
        r.sample_seconds + r.gather_seconds + r.compute_seconds + r.sync_seconds
    );
}

/// `-v`: one line per epoch.
pub(crate) fn trace_epoch(e: &EpochRecord, epochs: u64) {
    tracing::info!(
        "epoch {}/{epochs}: loss {:.4}, val {:.4}, test {:.4}, {:.2} s",
        e.epoch + 1,
        e.loss,
        e.val_accuracy,
        e.test_accuracy,
        e.seconds
    );
}

/// Appends every step record to `metrics.jsonl`, then passes it on.
struct Recording<'a> {
    sink: JsonlSink,
    inner: &'a mut dyn Observer,
}

impl Observer for Recording<'_> {
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        trace_step(r);
        self.sink.write(r)?;
        self.inner.step(r)
    }
    fn epoch(&mut self, e: &EpochRecord, epochs: u64) {
        trace_epoch(e, epochs);
        self.inner.epoch(e, epochs);
    }
    fn start(&mut self, info: &RunInfo) {
        self.inner.start(info);
    }
    fn hosts(&mut self, hosts: &[String]) {
        self.inner.hosts(hosts);
    }
    fn event(&mut self, msg: &str) {
        self.inner.event(msg);
    }
    fn before_checkpoint(&mut self, through: u64) -> Result<(), TrainError> {
        self.inner.before_checkpoint(through)
    }
    fn may_checkpoint(&mut self, through: u64) -> Result<bool, TrainError> {
        self.inner.may_checkpoint(through)
    }
    fn restart(&mut self, r: &crate::metrics::RestartRecord) {
        self.inner.restart(r);
    }
    fn stop_requested(&self) -> bool {
        self.inner.stop_requested()
    }
    fn gradient(&mut self, i: u64, g: &[f32]) {
        self.inner.gradient(i, g);
    }
    fn wants_gradient(&self) -> bool {
        self.inner.wants_gradient()
    }
}

/// A run name becomes a directory under `runs/`: one plain path component.
fn check_name(name: &str, flag: &str) -> Result<(), BadInput> {
    if crate::paths::is_plain_name(name) {
        Ok(())
    } else {
        Err(BadInput::new(format!("{flag} `{name}`: a run name is letters, digits, `-`, `_` or `.`")))
    }
}

/// Refuses a `--run` name that `new_run_dir` would refuse, before anything is created.
pub(crate) fn check_new_run(data: &DataDir, opts: &RunOptions) -> Result<(), TrainError> {
    let Some(name) = opts.run.as_deref() else { return Ok(()) };
    check_name(name, "--run")?;
    if data.run_dir(name).exists() {
        return Err(run_taken(data, name));
    }
    Ok(())
}

fn run_taken(data: &DataDir, name: &str) -> TrainError {
    let dir = data.run_dir(name);
    // A run in training is said to be one: its directory is no leftover to remove, nor one to resume now.
    if let Err(e) = run_lock::check_free(&dir, name) {
        return e;
    }
    if !checkpoint::exists(&checkpoint::dir(&dir)) {
        return BadInput::new(format!("--run {name}: {}", never_checkpointed(&dir, name))).into();
    }
    BadInput::new(format!(
        "run `{name}` already exists in {}; continue it with --resume {name} or choose another --run",
        data.runs_dir().display()
    ))
    .into()
}

/// A run directory without a checkpoint: its run ended (killed, failed) or
/// is still starting; either way there is nothing to resume, and only its
/// removal frees the name.
fn never_checkpointed(dir: &Path, name: &str) -> String {
    format!(
        "run `{name}` exists ({}) but has no checkpoint: it stopped before its first one, or is starting now; \
         nothing can be resumed from it. Remove that directory to use the name again, or choose another --run",
        dir.display()
    )
}

/// Creates `runs/<run>/`: the requested name (which must be new), or
/// `<dataset>-<model>-<unix time>[-n]`.
pub(crate) fn new_run_dir(
    data: &DataDir,
    requested: Option<&str>,
    cfg: &TrainConfig,
) -> Result<(String, PathBuf), TrainError> {
    let runs = data.runs_dir();
    std::fs::create_dir_all(&runs).map_err(|e| TrainError::Io { path: runs.clone(), source: e })?;
    if let Some(name) = requested {
        check_name(name, "--run")?;
        let dir = data.run_dir(name);
        return match std::fs::create_dir(&dir) {
            Ok(()) => Ok((name.to_string(), dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(run_taken(data, name)),
            Err(e) => Err(TrainError::Io { path: dir, source: e }),
        };
    }
    let stem: String = Path::new(&cfg.dataset)
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .rfind(|s| *s != "dataset.lgnn" && !s.is_empty() && *s != "." && *s != "..")
        .unwrap_or("run")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '_' })
        .collect();
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let base = format!("{stem}-{}-{secs}", cfg.model);
    for n in 0.. {
        let name = if n == 0 { base.clone() } else { format!("{base}-{n}") };
        let dir = data.run_dir(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((name, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(TrainError::Io { path: dir, source: e }),
        }
    }
    unreachable!("an unbounded range always yields a fresh name")
}
