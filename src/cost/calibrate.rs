//! `tune-merge --calibrate`: measure the figures on the real cluster.
//!
//! 1. The probe (`probe.rs`) measures bandwidth and latency of every ordered
//!    pair of workers.
//! 2. A few real iterations of every strategy this build trains (model-centric,
//!    micrograph, pregather, leapgnn at T = ceil(W/2)) run through the normal
//!    `train` path (`--stop-after N`); a strategy the build refuses is skipped
//!    and reported.
//! 3. Each record (worker, time step) of those runs is paired with the exact
//!    counts of its block (`counts.rs`, the same iterations), and the per-unit
//!    figures are fitted by non-negative least squares: sampling against
//!    edges and blocks, gathering (after the probe's network time) against
//!    copied bytes, remote rows, requests and the pre-gather's transfer (its
//!    excess when every worker bursts at once: `contention`), compute against the model's
//!    units. The leapgnn run prefetches: its prefetched first steps hold
//!    only the part of the fetch on the worker's own thread (requests issued,
//!    reply bytes taken in), which the prefetched predictions add. The all-reduce is the slowest worker's sync (it waits for no one).
//!    The run's first iteration is left out (warm-up).
//! 4. Slow outliers are left out, as records a preempted worker or a cold
//!    first run slowed are not what the figures describe and least squares
//!    would follow them: whole iterations by `validate::measure` (so also
//!    from the jitter's runs), single records by every fit
//!    (`fit::nnls_robust`). The figures predict a steady iteration, which
//!    `--validate` compares with the steady iterations of a run.

use super::counts::IterationCounts;
use super::figures::Figures;
use super::fit::{median, nnls_robust};
use super::model::{Shape, compute_units, fetch_parts, fetch_seconds, own_thread_units, predict_iteration};
use super::probe::{ProbeTask, probe_links};
use super::setup::Setup;
use super::validate::{RecordBounds, measure, read_run_metrics};
use super::{ComputeRate, RowSources, layout_of_run};
use crate::DataDir;
use crate::cluster::Launcher;
use crate::metrics::StepRecord;
use crate::train::distributed::{DistOptions, train_distributed};
use crate::train::{Quiet, RunOptions, StrategyKind, TrainConfig};
use anyhow::Context;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub struct CalibrateOptions<'a> {
    pub launcher: &'a dyn Launcher,
    pub interrupted: &'a AtomicBool,
    /// Iterations per strategy run (the first is warm-up).
    pub iterations: u64,
    pub probe: ProbeTask,
    pub comm_timeout: Duration,
    /// Where the control listener binds (the profile's `driver_bind`).
    pub driver_bind: std::net::SocketAddr,
    /// The profile's `encrypt = true`: the probe and the runs seal their traffic
    /// (as the runs the figures predict will).
    pub encrypt: bool,
    /// Told as each stage starts: its index, the number of stages and what
    /// it does (for a progress bar).
    pub stage: &'a dyn Fn(Stage<'_>),
}

/// One stage of the calibration: the link probe, one real run per strategy
/// and batch size, the fit.
#[derive(Clone, Copy, Debug)]
pub struct Stage<'s> {
    pub index: usize,
    pub total: usize,
    pub what: &'s str,
}

/// One real run used by the calibration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CalibrationRun {
    pub strategy: StrategyKind,
    pub time_steps: u32,
    pub batch_size: usize,
    /// Run with `--prefetch on` (the leapgnn run, to measure what a prefetch leaves unhidden).
    pub prefetch: bool,
    pub run: String,
    pub measured_iteration_seconds: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Calibration {
    pub figures: Figures,
    pub runs: Vec<CalibrationRun>,
    /// Strategies this build refused, with the reason.
    pub skipped: Vec<String>,
}

/// What one fitted quantity sees: unknowns' units per record, and seconds.
#[derive(Default)]
struct Samples {
    sample: (Vec<Vec<f64>>, Vec<f64>),
    gather: (Vec<Vec<f64>>, Vec<f64>),
    /// Prefetched first steps: [copied bytes, requests, reply bytes] of the
    /// step's copies and the pre-gather's own-thread work, and seconds.
    own: (Vec<Vec<f64>>, Vec<f64>),
    compute: (Vec<Vec<f64>>, Vec<f64>),
    sync: Vec<f64>,
}

/// Measures the figures for jobs like `base` (dataset, workers, model,
/// batch size, fanouts); `start` supplies what is not measured (memory bound).
pub fn calibrate(
    data: &DataDir,
    base: &TrainConfig,
    start: &Figures,
    o: &CalibrateOptions<'_>,
) -> anyhow::Result<Calibration> {
    let w = base.workers;
    let mut f = start.clone();
    // Model-centric at the job's batch and at a quarter of it: blocks of both
    // sizes (a micrograph group is about B / W roots) separate the per-block
    // costs from the per-unit ones.
    let b = base.batch_size;
    let mut kinds = vec![(StrategyKind::ModelCentric, 1, b, false)];
    if b.div_ceil(4) < b {
        kinds.push((StrategyKind::ModelCentric, 1, b.div_ceil(4), false));
    }
    if w > 1 {
        // The pre-gathers of pregather are timed where they happen; leapgnn's
        // are prefetched, so that its first steps show what a prefetch
        // leaves on the worker's own thread.
        kinds.extend([
            (StrategyKind::Micrograph, w as u32, b, false),
            (StrategyKind::Pregather, w as u32, b, false),
            (StrategyKind::Leapgnn, w.div_ceil(2) as u32, b, true),
        ]);
    }
    let total = usize::from(w > 1) + kinds.len() + 1;
    let mut index = 0;
    let mut stage = |what: &str| {
        (o.stage)(Stage { index, total, what });
        index += 1;
    };
    if w > 1 {
        stage(&format!("probing the links between {w} workers"));
        let links = probe_links(o.launcher, w, &o.probe, o.interrupted, o.driver_bind, o.encrypt)?;
        let bw: Vec<f64> = links.iter().map(|l| l.bandwidth).collect();
        let lat: Vec<f64> = links.iter().map(|l| l.latency).collect();
        f.bandwidth = median(&bw).unwrap_or(f.bandwidth);
        f.latency = median(&lat).unwrap_or(f.latency);
        f.links = links;
    }
    let setup = Setup::open(data, base)?;
    let shape = setup.shape(false);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut samples = Samples::default();
    let mut runs = Vec::new();
    // Per run: its counts and measured seconds, to calibrate the jitter once the rest is fitted.
    let mut measured_runs: Vec<(Vec<IterationCounts>, f64)> = Vec::new();
    let mut skipped = Vec::new();
    for (strategy, t, batch, prefetch) in kinds {
        stage(&format!("{} iterations of {strategy} (T = {t}, batch {batch})", o.iterations.max(2)));
        let mut cfg = base.clone();
        cfg.batch_size = batch;
        cfg.strategy = strategy;
        cfg.time_steps = Some(t);
        cfg.epochs = o.iterations.max(2);
        cfg.checkpoint_every = 0;
        cfg.prefetch = if prefetch { crate::train::Prefetch::On } else { crate::train::Prefetch::Off };
        if let Err(e) = cfg.check() {
            skipped.push(format!("{strategy}: {e}"));
            continue;
        }
        // Two calibrations in the same second must not collide on a run name.
        let base_name = format!("calibrate-{strategy}-t{t}-b{batch}-{stamp}");
        let name = (1..)
            .map(|i| if i == 1 { base_name.clone() } else { format!("{base_name}-{i}") })
            .find(|n| !data.run_dir(n).exists())
            .unwrap_or(base_name);
        let opts = RunOptions { run: Some(name.clone()), stop_after: Some(o.iterations.max(2)), ..Default::default() };
        let dist = DistOptions {
            launcher: o.launcher,
            interrupted: o.interrupted,
            comm_timeout: o.comm_timeout,
            check_replicas: 0,
            dump_grad: None,
            worker_lines: None,
            driver_bind: o.driver_bind,
            auto_planner: Some(&super::auto_plans),
            restarts: 0,
            encrypt: o.encrypt,
            keep_remote: false,
        };
        let summary = if w > 1 {
            train_distributed(data, cfg.clone(), &opts, &dist, &mut Quiet)
        } else {
            crate::train::train(data, cfg.clone(), &opts, &mut Quiet).map_err(anyhow::Error::from)
        };
        // An interrupted run measured nothing and no figures will name it: a
        // leftover run directory (with an empty metrics.jsonl) is all it would leave.
        if summary.is_err() && o.interrupted.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::remove_dir_all(data.run_dir(&name));
        }
        let summary = summary.with_context(|| format!("calibration run of {strategy} (T = {t}) failed"))?;
        let job = super::CountJob { batch_size: batch, ..setup.job() };
        let records = read_run_metrics(&data.run_dir(&summary.run).join("metrics.jsonl"), &RecordBounds::of(&job))?;
        let measured = measure(&records)?;
        let layout = layout_of_run(&cfg, measured.time_steps)?;
        let counts = job.count(&layout, &measured.iterations);
        collect(&mut samples, &records, &counts, &f, &shape, prefetch);
        // The jitter is the job's own: runs at its batch size only, and
        // without prefetch, as before there was a prefetched run (its
        // iterations lean on the prefetch's overlap, which the jitter must
        // not absorb).
        if batch == b && !prefetch {
            measured_runs.push((counts, measured.iteration_seconds));
        }
        runs.push(CalibrationRun {
            strategy,
            batch_size: batch,
            prefetch,
            time_steps: layout.time_steps(w) as u32,
            run: summary.run,
            measured_iteration_seconds: measured.iteration_seconds,
        });
    }
    stage("fitting the figures");
    fit(&mut f, &samples, &shape, w);
    f.jitter = fit_jitter(&f, &measured_runs, &shape);
    f.dataset = base.dataset.clone();
    f.source = format!(
        "calibrated at unix time {stamp} on {w} {} worker(s), {} ({}, batch {}, fanout {}, hidden {}), runs: {}",
        o.launcher.name(),
        base.dataset,
        base.model,
        base.batch_size,
        base.fanouts,
        base.hidden,
        runs.iter()
            .map(|r| {
                format!(
                    "{} T={} B={}{}",
                    r.strategy,
                    r.time_steps,
                    r.batch_size,
                    if r.prefetch { " prefetch" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Calibration { figures: f, runs, skipped })
}

/// Pairs each record of the measured iterations with its block's counts.
/// `prefetched`: the run prefetched its pre-gathers (but for each epoch's
/// first iteration: nothing runs ahead of it).
fn collect(
    s: &mut Samples,
    records: &[StepRecord],
    counts: &[IterationCounts],
    f: &Figures,
    shape: &Shape,
    prefetched: bool,
) {
    let index: BTreeMap<(u64, u64), &IterationCounts> = counts.iter().map(|c| ((c.epoch, c.iteration), c)).collect();
    let row_bytes = shape.row_bytes();
    // The probe's network time only: request and per-row costs are what the fit finds.
    let net = Figures { request_seconds: 0.0, remote_row_seconds: 0.0, ..f.clone() };
    let mut last_sync: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
    let last_step = records.iter().map(|r| r.time_step).max().unwrap_or(0);
    for r in records {
        let Some(c) = index.get(&(r.epoch, r.iteration)) else { continue };
        let Some(wc) = c.workers.get(r.worker as usize) else { continue };
        let Some(b) = wc.steps.get(r.time_step as usize) else { continue };
        if r.time_step == last_step {
            last_sync.entry((r.epoch, r.iteration)).or_default().push(r.sync_seconds);
        }
        if b.is_empty() {
            continue;
        }
        let me = r.worker as usize;
        s.sample.0.push(vec![b.total_edges() as f64, 1.0]);
        s.sample.1.push(r.sample_seconds);
        let [e, rw, i] = compute_units(b, shape);
        s.compute.0.push(vec![e, rw, i, 1.0]);
        s.compute.1.push(r.compute_seconds);
        let mut parts: Vec<&RowSources> = vec![&b.rows];
        if r.time_step == 0
            && let Some(u) = &wc.pregather
        {
            if prefetched && r.iteration > 0 {
                let [requests, bytes] = own_thread_units(u, shape);
                s.own.0.push(vec![(b.rows.local + b.rows.cache) as f64 * row_bytes, requests, bytes]);
                s.own.1.push(r.gather_seconds);
                continue;
            }
            parts.push(u);
        }
        let copied: f64 = parts.iter().map(|p| (p.local + p.cache) as f64 * row_bytes).sum();
        let remote: f64 = parts.iter().map(|p| p.remote_rows() as f64).sum();
        let requests: f64 = parts.iter().filter(|p| p.remote_rows() > 0).count() as f64;
        let network: f64 = parts.iter().map(|p| fetch_seconds(p, me, &net, shape)).sum();
        // The pre-gather's transfer at the probed bandwidth: what all workers
        // bursting at once adds to it is `contention`.
        let burst = if parts.len() > 1 { fetch_parts(parts[1], me, &net, shape).1 } else { 0.0 };
        s.gather.0.push(vec![copied, remote, requests, burst]);
        s.gather.1.push(r.gather_seconds - network);
    }
    // The slowest worker arrives last at the all-reduce: its sync is the all-reduce itself.
    s.sync.extend(last_sync.values().filter_map(|v| v.iter().copied().min_by(f64::total_cmp)));
}

fn fit(f: &mut Figures, s: &Samples, shape: &Shape, workers: usize) {
    if !s.sample.1.is_empty() {
        let c = nnls_robust(&s.sample.0, &s.sample.1);
        (f.sample_edge_seconds, f.sample_block_seconds) = (c[0], c[1]);
    }
    if !s.gather.1.is_empty() {
        // The cost of a copied byte is fitted on the records that only copy
        // (no remote rows, no pre-gather: a pre-gathering run's later steps,
        // or one worker): where a block also fetches, its local rows are
        // copied while the owners' replies travel, so its gather hardly grows
        // with them, and a joint fit set the copy's cost to 0 (every
        // prefetched configuration then predicted a gather of 0).
        let only_copies = |r: &Vec<f64>| r[0] > 0.0 && r[1] == 0.0 && r[2] == 0.0 && r[3] == 0.0;
        let copies: Vec<(f64, f64)> =
            s.gather.0.iter().zip(&s.gather.1).filter(|(r, _)| only_copies(r)).map(|(r, &y)| (r[0], y)).collect();
        if copies.is_empty() {
            let c = nnls_robust(&s.gather.0, &s.gather.1);
            (f.local_byte_seconds, f.remote_row_seconds, f.request_seconds) = (c[0], c[1], c[2]);
            if s.gather.0.iter().any(|r| r[3] > 0.0) {
                f.contention = c[3];
            }
        } else {
            f.local_byte_seconds = nnls_robust(
                &copies.iter().map(|&(x, _)| vec![x]).collect::<Vec<_>>(),
                &copies.iter().map(|&(_, y)| y).collect::<Vec<_>>(),
            )[0];
            // The fetch's terms, on what the copies leave of the fetching records.
            let (x, y): (Vec<Vec<f64>>, Vec<f64>) = s
                .gather
                .0
                .iter()
                .zip(&s.gather.1)
                .filter(|(r, _)| !only_copies(r))
                .map(|(r, &y)| (r[1..].to_vec(), y - r[0] * f.local_byte_seconds))
                .unzip();
            if !x.is_empty() {
                let c = nnls_robust(&x, &y);
                (f.remote_row_seconds, f.request_seconds) = (c[0], c[1]);
                // No pre-gathering run (one worker): the burst was not measured.
                if x.iter().any(|r| r[2] > 0.0) {
                    f.contention = c[2];
                }
            }
        }
    }
    // What a prefetch leaves on the worker's own thread: the prefetched first
    // steps' gathers less their copies. The wait for the replies is taken as
    // hidden by the previous iteration's compute, which it is on links
    // faster than the compute.
    if !s.own.1.is_empty() {
        let (x, y): (Vec<Vec<f64>>, Vec<f64>) =
            s.own.0.iter().zip(&s.own.1).map(|(r, &y)| (r[1..].to_vec(), y - r[0] * f.local_byte_seconds)).unzip();
        let c = nnls_robust(&x, &y);
        (f.issue_request_seconds, f.reply_byte_seconds) = (c[0], c[1]);
    }
    if !s.compute.1.is_empty() {
        let c = nnls_robust(&s.compute.0, &s.compute.1);
        let rate = ComputeRate { edge_seconds: c[0], row_seconds: c[1], input_seconds: c[2], block_seconds: c[3] };
        f.compute.insert(shape.model.clone(), rate);
    }
    let max_latency = f.links.iter().map(|l| l.latency).fold(f.latency, f64::max);
    f.step_seconds = if workers > 1 { 2.0 * max_latency } else { 0.0 };
    if let Some(m) = median(&s.sync) {
        let fixed = if workers > 1 { (2.0 * (workers - 1) as f64 * f.latency).min(m) } else { 0.0 };
        f.sync_seconds = fixed;
        f.sync_param_seconds = (m - fixed).max(0.0) / shape.params.max(1) as f64;
    }
}

/// The jitter that makes the fitted model meet each run's measured iteration
/// time (median over runs, within 0..=2): steps' slowest work scaled by
/// (1 + jitter) plus what does not scale (step ends, sync) = measured.
fn fit_jitter(f: &Figures, runs: &[(Vec<IterationCounts>, f64)], shape: &Shape) -> f64 {
    let flat = Figures { jitter: 0.0, ..f.clone() };
    let js: Vec<f64> = runs
        .iter()
        .filter(|(c, _)| !c.is_empty())
        .filter_map(|(counts, measured)| {
            let mut work = 0.0;
            let mut rest = 0.0;
            for c in counts {
                let p = predict_iteration(c, &flat, shape);
                let ends = flat.step_seconds * p.steps.len().saturating_sub(1) as f64;
                let sync = p.seconds - p.steps.iter().sum::<f64>();
                work += p.steps.iter().sum::<f64>() - ends;
                rest += ends + sync;
            }
            let n = counts.len() as f64;
            (work > 0.0).then(|| ((measured - rest / n) / (work / n) - 1.0).clamp(0.0, 2.0))
        })
        .collect();
    median(&js).unwrap_or(f.jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::counts::{BlockCounts, WorkerCounts};

    fn block(local: u64, remote: Vec<u64>) -> BlockCounts {
        let input_rows = local + remote.iter().sum::<u64>();
        BlockCounts {
            roots: 4,
            edges: vec![40, 4 * input_rows],
            dst: vec![input_rows, 4],
            input_rows,
            rows: RowSources { local, cache: 0, remote },
        }
    }

    /// Records of a prefetched run on 3 workers, T = 2, whose seconds follow
    /// known figures: step 1 only copies; step 0 copies and, but for the
    /// epoch's first iteration, pays only the pre-gather's own-thread part.
    #[test]
    fn prefetched_first_steps_fit_the_unhidden_part_and_the_prediction_pays_it() {
        let shape = Shape {
            model: "sage".into(),
            feature_dim: 8,
            row_bytes: 32.0,
            hidden: 4,
            classes: 2,
            params: 100,
            prefetch: true,
        };
        let truth = Figures {
            local_byte_seconds: 2e-9,
            issue_request_seconds: 40e-6,
            reply_byte_seconds: 1e-9,
            ..Figures::default()
        };
        let mut counts = Vec::new();
        let mut records = Vec::new();
        for i in 0..12u64 {
            let mut it = IterationCounts { epoch: 0, iteration: i, workers: Vec::new() };
            for r in 0..3usize {
                // Some pre-gathers ask one owner, some two; sizes vary.
                let mut remote = vec![0; 3];
                remote[(r + 1) % 3] = 10 + 7 * i + r as u64;
                if (i + r as u64).is_multiple_of(2) {
                    remote[(r + 2) % 3] = 5 + 3 * i;
                }
                let union = RowSources { local: 50, cache: 0, remote };
                let steps = vec![block(20 + i + r as u64, vec![0; 3]), block(30 + 2 * i, vec![0; 3])];
                for (t, b) in steps.iter().enumerate() {
                    let copies = b.rows.local as f64 * shape.row_bytes * truth.local_byte_seconds;
                    let gather = match (t, i) {
                        (0, 0) => copies + 2e-4,
                        (0, _) => {
                            copies
                                + own_thread_units(&union, &shape)[0] * truth.issue_request_seconds
                                + own_thread_units(&union, &shape)[1] * truth.reply_byte_seconds
                        }
                        _ => copies,
                    };
                    records.push(StepRecord {
                        epoch: 0,
                        iteration: i,
                        time_step: t as u32,
                        worker: r as u32,
                        gather_seconds: gather,
                        compute_seconds: 1e-3,
                        ..Default::default()
                    });
                }
                it.workers.push(WorkerCounts { steps, pregather: Some(union) });
            }
            counts.push(it);
        }
        let mut s = Samples::default();
        collect(&mut s, &records, &counts, &Figures::default(), &shape, true);
        let mut f = Figures::default();
        fit(&mut f, &s, &shape, 3);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b;
        assert!(close(f.local_byte_seconds, truth.local_byte_seconds), "copy cost {}", f.local_byte_seconds);
        assert!(
            close(f.issue_request_seconds, truth.issue_request_seconds)
                && close(f.reply_byte_seconds, truth.reply_byte_seconds),
            "fitted {} s per request and {} s per reply byte, recorded with {} and {}",
            f.issue_request_seconds,
            f.reply_byte_seconds,
            truth.issue_request_seconds,
            truth.reply_byte_seconds
        );
        // A prefetched iteration (compute far longer than the fetch) pays its
        // copies and the own-thread part; the epoch's first pays the whole fetch.
        let p = predict_iteration(&counts[5], &f, &shape);
        for (r, wc) in counts[5].workers.iter().enumerate() {
            let copies: f64 =
                wc.steps.iter().map(|b| b.rows.local as f64 * shape.row_bytes * f.local_byte_seconds).sum();
            let own = crate::cost::model::own_thread_seconds(wc.pregather.as_ref().unwrap(), &f, &shape);
            assert!(own > 0.0);
            assert!(
                close(p.workers[r].gather, copies + own),
                "worker {r}: gather {} s, copies {copies} s + own {own} s",
                p.workers[r].gather
            );
        }
        let first = predict_iteration(&counts[0], &f, &shape);
        let whole =
            crate::cost::model::pregather_seconds(counts[0].workers[0].pregather.as_ref().unwrap(), 0, &f, &shape);
        assert!(
            first.workers[0].gather >= whole,
            "epoch's first iteration: gather {} s < its fetch {whole} s",
            first.workers[0].gather
        );
        // The planner samples the first iterations of an epoch of 400: the
        // one whose fetch is whole stands for 1 in 400, not 1 in 12.
        let seconds: Vec<f64> = counts.iter().map(|c| predict_iteration(c, &f, &shape).seconds).collect();
        let rest = seconds[1..].iter().sum::<f64>() / 11.0;
        let expected = seconds[0] / 400.0 + rest * 399.0 / 400.0;
        let planned = crate::cost::model::predict_per_epoch(&counts, &f, &shape, 400).iteration_seconds;
        assert!(close(planned, expected), "planned {planned} s per iteration, expected {expected} s");
        let uniform = crate::cost::model::predict(&counts, &f, &shape).iteration_seconds;
        assert!(uniform > planned, "a uniform mean {uniform} s should exceed the per-epoch one {planned} s");
    }
}
