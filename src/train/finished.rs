//! A run's summary taken from its checkpoint: for a stop before a restart,
//! and for a finished run whose summary was never written (its process
//! died after the final checkpoint).

use super::checkpoint::{self, FinalReport, Progress};
use super::distributed::WorkerDone;
use super::{Observer, ResumeOverrides, TrainConfig, TrainError};
use crate::DataDir;
use crate::format::write_atomic;
use crate::metrics::{ByteCounts, Counted, EpochRecord, RunBytes, RunSummary, add_bytes};
use std::path::Path;

/// The summary of run `name` as its checkpoint `p` (of config `cfg`) has
/// it: its iterations, its epochs' records (losses, accuracies, times) and
/// `counted`, its rows and bytes (`None`: unknown). What only the workers'
/// final reports hold (their peak memory, the replica checks) is left out.
pub(crate) fn checkpoint_summary(
    name: &str,
    cfg: &TrainConfig,
    p: Progress,
    counted: Option<Counted>,
) -> Result<RunSummary, TrainError> {
    let (rows, bytes) = counted.unzip();
    let summary = RunSummary {
        run: name.to_string(),
        strategy: cfg.strategy.to_string(),
        workers: cfg.workers,
        dataset: cfg.dataset.clone(),
        model: cfg.model.to_string(),
        time_steps: match &p.auto_steps {
            Some(a) => a.current,
            None => super::strategy::build(cfg.strategy, &super::strategy::StrategyEnv::new(cfg, None)?)?.time_steps(),
        },
        mode: cfg.reported_mode(),
        prefetch: cfg.prefetches(),
        iterations: p.global_iteration,
        rows,
        bytes,
        ..Default::default()
    };
    Ok(summary.from_history(p.history))
}

/// What run `run_dir` moved and fetched before the checkpoint a resume starts
/// from (`iteration`): its last summary, when that run ended there (it was
/// stopped there or finished) or after it: RETEXO checkpoints at the start
/// of a stage, so a run stopped in mid-stage ends past its checkpoint, and
/// its summary holds every byte it moved (the stage's rounds it trains again
/// cross the sockets again, and are counted again). An attempt that failed
/// after a later checkpoint wrote no summary, so its bytes and rows are
/// unknown: `None`, and so are the resumed run's (`unknown_counts`). Read
/// only for a checkpoint without a count of its own (the driver's `counted_before`):
/// every loop's checkpoints carry one (periodic, stops and final), so that
/// is a checkpoint an older version wrote, or one written by a run resumed
/// from such a checkpoint; kept so that those still resume with their
/// earlier epochs counted.
/// Also what tells a finished run's own summary from an earlier stop's.
pub(crate) fn summary_before(run_dir: &Path, iteration: u64) -> Option<RunSummary> {
    let text = std::fs::read(run_dir.join("summary.json")).ok()?;
    let before: RunSummary = serde_json::from_slice(&text).ok()?;
    (before.iterations >= iteration).then_some(before)
}

/// `--resume` of run `run` whose process (a driver, or the one that trained
/// a single worker) died after the final checkpoint was written and before
/// the summary (`kill -9`, a crash, its node lost): the run had finished, so
/// nothing is trained and no worker started; the summary is written from
/// that checkpoint, which holds every epoch's records (so the accuracies:
/// no evaluation is needed), with `counted` its rows and bytes (`None`, a
/// checkpoint without the run's count, gives them as unknown, with a
/// warning: zeros would read as measured). `None` when
/// the run has its summary (refused as complete, as before; an earlier
/// stop's is not it), has epochs left (or `--epochs` asks for more), or its
/// checkpoint cannot be read (`resumable` says why).
pub(crate) fn write_missing_summary(
    data: &DataDir,
    run: &str,
    over: &ResumeOverrides,
    obs: &mut dyn Observer,
    counted: &dyn Fn(&Path, &Progress) -> Option<Counted>,
) -> Result<Option<RunSummary>, TrainError> {
    let run_dir = data.run_dir(run);
    let Ok((cfg, mut p)) = checkpoint::load_config(&checkpoint::dir(&run_dir)) else { return Ok(None) };
    if !p.complete(cfg.epochs) || over.epochs.is_some_and(|e| e > p.epoch) {
        return Ok(None);
    }
    if summary_before(&run_dir, p.global_iteration).is_some() {
        return Ok(None);
    }
    let path = run_dir.join("summary.json");
    let iteration = p.global_iteration;
    let counts = counted(&run_dir, &p);
    if counts.is_none() {
        let msg = unknown_counts(run, &run_dir);
        tracing::warn!("{msg}");
        obs.event(&msg);
    }
    let reports = p.final_reports.take().filter(|_| cfg.workers > 1);
    let history = p.history.clone();
    let mut summary = checkpoint_summary(run, &cfg, p, counts)?;
    if let Some(reports) = reports {
        let done = with_reports(&mut summary, reports, history);
        write_atomic(run_dir.join("workers.json"), &serde_json::to_vec_pretty(&done).expect("reports serialise"))?;
    }
    write_atomic(&path, &serde_json::to_vec_pretty(&summary).expect("summary serialises"))?;
    let msg = format!(
        "run {run}: the run had finished; its summary was missing and is written from its final checkpoint (after \
         iteration {iteration}) to {}; nothing was trained",
        path.display()
    );
    tracing::warn!("{msg}");
    obs.event(&msg);
    Ok(Some(summary))
}

/// Why the summary of run `run` (in `run_dir`) gives its rows and bytes as
/// unknown, and how to measure them, after "run NAME:" as every warning
/// about a run begins: its checkpoint holds no count of them (and no
/// summary reaches it), so what a resumed attempt counts is only the run's
/// end.
pub(crate) fn unknown_counts(run: &str, run_dir: &Path) -> String {
    format!(
        "run {run}: {} holds no count of the run's rows and bytes (an older leapgnn wrote it, or a run resumed from such a \
         checkpoint), so its summary gives them as unknown (null); train the run again (`leapgnn train --config {} \
         --run NEW_NAME` replays it) to measure them",
        checkpoint::dir(run_dir).join(checkpoint::STATE).display(),
        run_dir.join("config.json").display()
    )
}

/// Adds the workers' final reports at the final checkpoint (`reports`) to
/// `summary`, taken from that checkpoint's count: the bytes the count
/// leaves out (the last attempt's setup) and the workers' peak memory.
/// Returns what the driver would have written to `workers.json`, each worker
/// with the run's `history`, as rank 0's; the summary's replica checks are
/// rank 0's, as the driver takes them.
fn with_reports(summary: &mut RunSummary, mut reports: Vec<FinalReport>, history: Vec<EpochRecord>) -> Vec<WorkerDone> {
    reports.sort_by_key(|r| r.rank);
    let mut uncounted = ByteCounts::default();
    for r in &reports {
        add_bytes(&mut uncounted, &r.uncounted);
    }
    if let Some(bytes) = &mut summary.bytes {
        bytes.add(&RunBytes::split(uncounted, ByteCounts::default()));
    }
    summary.peak_rss_bytes = reports.iter().filter_map(|r| r.peak_rss_bytes).collect();
    summary.replica_checks = reports.first().and_then(|r| r.replica_checks);
    let done = |r: FinalReport| {
        let (fetch, remote_fetches) = r.fetch.unwrap_or_default();
        WorkerDone {
            rank: r.rank,
            iterations: summary.iterations,
            history: history.clone(),
            bytes: r.bytes,
            eval_bytes: r.eval_bytes,
            fetch,
            remote_fetches,
            time_steps: Some(summary.time_steps),
            peak_rss_bytes: r.peak_rss_bytes,
            replica_checks: r.replica_checks.unwrap_or_default(),
        }
    };
    reports.into_iter().map(done).collect()
}
