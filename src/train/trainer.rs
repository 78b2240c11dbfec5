//! The training loop every worker runs, whatever the number of workers or the
//! strategy: iterate over the epoch's global batches, let the strategy compute
//! this worker's share of the gradient, all-reduce, step the optimizer,
//! checkpoint, evaluate at the end of each epoch.

use super::checkpoint::{self, Progress};
use super::evaluate::{EvalRequest, evaluate};
use super::strategy::{Iteration, StepSink, Strategy};
use super::{Collective, Observer, TrainConfig, TrainError, Worker};
use crate::metrics::{EpochRecord, add_bytes, sub_bytes};
use crate::optim::Optimizer;
use crate::schedule::batches;
use crate::util::rng::hash_of;
use std::path::Path;
use std::time::Instant;

const DROPOUT_TAG: u64 = 0x4452_4f50;

/// The dropout key of iteration `iteration` of `epoch`: the same on every
/// worker, and in every loop that trains the same model (so their gradients
/// can be compared).
pub(crate) fn dropout_key(seed: u64, epoch: u64, iteration: u64) -> u64 {
    hash_of(seed, &[DROPOUT_TAG, epoch, iteration])
}

/// The fixed inputs of one worker's loop.
pub struct LoopInput<'a> {
    pub cfg: &'a TrainConfig,
    /// Labelled, distinct ids of each split.
    pub train: &'a [u32],
    pub val: &'a [u32],
    pub test: &'a [u32],
    /// Where this worker writes checkpoints (rank 0 only).
    pub checkpoint_dir: Option<&'a Path>,
    /// The checkpoint this run resumed from, on every rank: what a strategy
    /// keeps beyond the weights and optimizer state (GNNPipe's history).
    pub resumed_from: Option<&'a Path>,
    /// Stop (after checkpointing) once this many iterations are done in total.
    pub stop_after: Option<u64>,
    /// Tests: the last worker is asked to stop while it evaluates the epoch
    /// that makes this many epochs (RETEXO: rounds) done, as a stop request
    /// that comes during an evaluation reaches one worker.
    pub stop_in_evaluation: Option<u64>,
    /// The partition's vertex -> worker map (who scores which evaluation
    /// node); None: worker 0 owns every vertex.
    pub owners: Option<&'a [u16]>,
    /// Called before every training iteration, after the iteration's byte
    /// count starts (a distributed worker's `--check-replicas`).
    pub before_iteration: Option<&'a BeforeIteration<'a>>,
    /// GNNPipe's stored chunks (`fullgraph::chunks::read_stored`), as the
    /// driver cut them: vertex -> chunk and the count; None with one chunk.
    pub chunks: Option<(&'a [u16], usize)>,
}

impl LoopInput<'_> {
    /// Whether `stop_in_evaluation` asks this worker to stop in the evaluation of `epoch`.
    pub(crate) fn raises_stop_in_evaluation(&self, epoch: u64, coll: &dyn Collective) -> bool {
        self.stop_in_evaluation == Some(epoch + 1) && coll.rank() + 1 == coll.world()
    }
}

/// `LoopInput::before_iteration`.
pub type BeforeIteration<'a> = dyn Fn(&Worker<'_>, &Iteration<'_>) -> Result<(), TrainError> + 'a;

/// Runs from `progress` to the end of the last epoch (or `stop_after`) and
/// returns the final progress.
pub fn run_loop(
    inp: &LoopInput<'_>,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    strategy: &mut dyn Strategy,
    opt: &mut dyn Optimizer,
    mut p: Progress,
    obs: &mut dyn Observer,
) -> Result<Progress, TrainError> {
    let cfg = inp.cfg;
    if cfg.strategy == super::StrategyKind::Retexo {
        // Stages with their own optimizers: its own loop over the same inputs.
        return super::fullgraph::retexo::run(inp, w, coll, &*opt, p, obs);
    }
    if cfg.strategy == super::StrategyKind::Gnnpipe {
        // Each stage trains its own layers with its own optimizer: its own loop.
        return super::fullgraph::gnnpipe::run(inp, w, coll, &*opt, p, obs);
    }
    let save = |p: &Progress, w: &Worker<'_>, opt: &dyn Optimizer| match inp.checkpoint_dir {
        Some(dir) => checkpoint::save(dir, cfg, p, &w.params, opt),
        None => Ok(()),
    };
    // A periodic or a stop's checkpoint, with the event the driver copies it back on.
    // Only rank 0 writes, alone: a periodic one it skips (`may_checkpoint`) leaves its peers in step.
    let checkpoint_now = |p: &mut Progress,
                          w: &Worker<'_>,
                          strategy: &dyn Strategy,
                          opt: &dyn Optimizer,
                          obs: &mut dyn Observer,
                          stop: bool|
     -> Result<(), TrainError> {
        p.auto_steps = strategy.auto_state();
        if stop {
            obs.before_checkpoint(p.global_iteration)?;
        } else if !obs.may_checkpoint(p.global_iteration)? {
            return Ok(());
        }
        save(p, w, opt)?;
        obs.event(&format!("{} {}", checkpoint::WRITTEN, p.global_iteration));
        if inp.checkpoint_dir.is_some() {
            // Tests: the driver is killed with the run held at this checkpoint.
            crate::util::interrupt::test_pause("checkpoint-written");
        }
        Ok(())
    };
    if let Some(s) = &p.auto_steps {
        strategy.restore_auto(s)?;
    }
    let counted_from = coll.bytes().sent;
    if p.global_iteration == 0 && w.model.norm_sums_len() > 0 {
        warm_up_statistics(inp, w, coll, strategy)?;
    }
    let fence = fenced_start(coll)?;
    // What this attempt counts from, for its checkpoints: the sockets as
    // training began (a resumed one sets up again and counts that itself).
    let attempt = Attempt::fenced(&p, counted_from, coll, &fence);
    let mut first_bytes0 = Some(fence);
    let mut carry = None;
    while p.epoch < cfg.epochs {
        let order = batches::epoch_order(inp.train, cfg.seed, p.epoch);
        let sched = batches::Schedule::new(&order, coll.world(), cfg.loop_batch_size(inp.train.len()));
        while (p.iteration as usize) < sched.iterations() {
            let t0 = Instant::now();
            let bytes0 = first_bytes0.take().or(carry.take()).unwrap_or_else(|| coll.bytes());
            let it = Iteration {
                epoch: p.epoch,
                index: p.iteration,
                global_index: p.global_iteration,
                batches: sched.workers(p.iteration as usize),
                global_size: sched.global(p.iteration as usize).len(),
                dropout_key: dropout_key(cfg.seed, p.epoch, p.iteration),
                ahead: (p.iteration as usize + 1..sched.iterations())
                    .take(super::strategy::PREFETCH_DEPTH)
                    .map(|i| sched.workers(i))
                    .collect(),
            };
            // The gradient, then slots summed with it: the batch statistics'
            // sums (BatchNorm), the loss, and the stop vote.
            let n = w.params.numel();
            let mut grad = vec![0f32; n];
            let mut sink = StepSink::new(&mut *obs);
            if let Some(before) = inp.before_iteration {
                before(w, &it)?;
            }
            let loss_share = strategy.iteration(w, coll, &it, &mut grad, &mut sink)?;
            let (last, recorded, rows, sent) = sink.finish();
            w.model.take_norm_sums(&mut grad);
            let stats = n..grad.len();
            grad.extend([0.0, 0.0]);
            let n_stats = grad.len() - 2;

            // Strategies may record their own traffic per time step; whatever the
            // iteration moved beyond that (the gradient all-reduce, model-centric's
            // feature fetches) is billed to its last record, which the sink held back.
            let ts = Instant::now();
            grad[n_stats] = loss_share as f32;
            // A stop request (`q`) reaches one worker; voting in the all-reduce makes
            // every worker stop after this same iteration.
            grad[n_stats + 1] = if obs.stop_requested() { 1.0 } else { 0.0 };
            coll.all_reduce_sum(&mut grad).map_err(TrainError::Comm)?;
            let stop_voted = grad[n_stats + 1] > 0.0;
            w.model.finish_iteration(&grad[stats], false)?;
            obs.gradient(p.global_iteration, &grad[..n]);
            let loss = grad[n_stats] as f64;
            if !loss.is_finite() {
                return Err(TrainError::NonFiniteLoss { epoch: p.epoch, iteration: p.iteration, value: loss });
            }
            let mut weights = w.params.flat_values()?;
            opt.step(&mut weights, &grad[..n]);
            w.params.set_flat(&weights)?;
            let now = coll.bytes();
            let moved = now.since(&bytes0).since(&recorded);
            p.rows += rows;
            add_bytes(&mut p.bytes, &sent);
            if let Some(mut last) = last {
                last.sync_seconds = ts.elapsed().as_secs_f64();
                add_bytes(&mut last.bytes_out, &moved.sent);
                add_bytes(&mut last.bytes_in, &moved.received);
                p.rows += last.rows;
                add_bytes(&mut p.bytes, &last.bytes_out);
                obs.step(&last)?;
            }
            p.epoch_loss_sum += loss;
            p.epoch_iterations += 1;
            p.epoch_seconds += t0.elapsed().as_secs_f64();
            p.iteration += 1;
            p.global_iteration += 1;
            let stop = inp.stop_after == Some(p.global_iteration) || stop_voted;
            let checkpointing =
                stop || (cfg.checkpoint_every > 0 && p.global_iteration.is_multiple_of(cfg.checkpoint_every));
            if checkpointing {
                p.run_counts = gather_counts(coll, &p, &attempt)?;
                // The next record counts from the last one's end: whatever moved
                // between them (the gather, a peer's early request) is in it, as
                // it is in an uninterrupted run's socket totals.
                carry = Some(now);
                checkpoint_now(&mut p, w, strategy, opt, obs, stop)?;
            }
            if stop {
                return stop_now(p, w, coll, strategy);
            }
        }
        let te = Instant::now();
        // The evaluation counts its own bytes.
        carry = None;
        strategy.before_evaluation(w, p.global_iteration);
        let raised = inp.raises_stop_in_evaluation(p.epoch, coll);
        let asked = || raised || obs.stop_requested();
        let req = EvalRequest {
            sets: &[inp.val, inp.test],
            owners: inp.owners,
            epoch: p.epoch,
            batch: cfg.eval_batch_size,
            stop: &asked,
        };
        let eval = evaluate(w, coll, &req)?;
        counted_evaluation(&mut p, obs, &eval.moved.sent);
        let acc = eval.accuracies;
        let rec = EpochRecord {
            epoch: p.epoch,
            loss: p.epoch_loss_sum / p.epoch_iterations.max(1) as f64,
            val_accuracy: acc[0],
            test_accuracy: acc[1],
            seconds: p.epoch_seconds,
            eval_seconds: te.elapsed().as_secs_f64(),
            iterations: p.epoch_iterations,
            layer: None,
        };
        obs.epoch(&rec, cfg.epochs);
        p.history.push(rec);
        p.epoch += 1;
        p.iteration = 0;
        p.epoch_loss_sum = 0.0;
        p.epoch_iterations = 0;
        p.epoch_seconds = 0.0;
        // Asked to stop while evaluating: the run stops at the epoch's end, as
        // after an iteration (a stop at the last epoch's end is its end).
        if eval.stop && p.epoch < cfg.epochs {
            // Gathered (every worker voted alike): the driver may die before it
            // writes this stop's summary, and a resume then has only this count.
            p.run_counts = gather_counts(coll, &p, &attempt)?;
            checkpoint_now(&mut p, w, strategy, opt, obs, true)?;
            return stop_now(p, w, coll, strategy);
        }
    }
    // The final state (a periodic checkpoint at the last iteration predates the last evaluation).
    p.auto_steps = strategy.auto_state();
    // Every worker reaches here (a stop returned above on all of them alike).
    gather_final_counts(coll, &mut p, &attempt, &Default::default(), w)?;
    obs.before_checkpoint(p.global_iteration)?;
    save(&p, w, opt)?;
    obs.event("final checkpoint written");
    if inp.checkpoint_dir.is_some() {
        // Tests: the driver is killed before it writes the run's summary.
        crate::util::interrupt::test_pause("final-checkpoint-written");
    }
    Ok(p)
}

/// Where an attempt (a run's start, or a resume) began counting. Every
/// training loop (this one, GNNPipe's, RETEXO's) counts its checkpoints'
/// `run_counts` from one, through `gather_counts`.
pub(crate) struct Attempt {
    /// The progress it started from (restored from the checkpoint, or new).
    pub progress: Progress,
    /// This worker's socket counts as it began training.
    pub sent: crate::metrics::ByteCounts,
    /// Control bytes of the barrier that starts training.
    pub barrier: u64,
}

impl Attempt {
    /// What this worker's sockets had sent when the attempt began training,
    /// the barrier that starts it, and `left_out`, sent since: the bytes the
    /// attempt's count leaves out.
    fn uncounted(&self, left_out: &crate::metrics::ByteCounts) -> crate::metrics::ByteCounts {
        let mut out = self.sent;
        out.control += self.barrier;
        add_bytes(&mut out, left_out);
        out
    }

    /// An attempt from progress `p` that counts from the sockets at `from`,
    /// less the barrier `fenced_start` passed since (`fence`: the counts it
    /// returned), which a resumed attempt passes again.
    pub(crate) fn fenced(
        p: &Progress,
        from: crate::metrics::ByteCounts,
        coll: &dyn Collective,
        fence: &crate::comm::ByteCounts,
    ) -> Attempt {
        Attempt { progress: p.clone(), sent: from, barrier: coll.bytes().sent.control - fence.sent.control }
    }
}

/// Every worker's rows and bytes up to now (`p`: this worker's progress),
/// summed over the workers and added to the count the run had where this
/// attempt started (the restored checkpoint's): None when that count is
/// unknown. A worker's bytes are what left its sockets since the attempt
/// began training (the records' bytes, and what moved between them: an
/// epoch's end, earlier gathers); its evaluations' share is split off. Every
/// worker sends its counts to every other in a message of one size, so each
/// sends as many bytes as this one: the gather's own bytes are counted as
/// this worker's times the number of workers, as the socket totals of an
/// uninterrupted run count them.
pub(crate) fn gather_counts(
    coll: &mut dyn Collective,
    p: &Progress,
    start: &Attempt,
) -> Result<Option<checkpoint::RunCounts>, TrainError> {
    gather_counts_less(coll, p, start, &Default::default(), true)
}

/// `gather_counts`, leaving out `left_out`: bytes this worker sent since the
/// attempt began that the count does not hold; with `counted` false, sent as
/// an exchange no counter holds, which then counts none of its own bytes.
fn gather_counts_less(
    coll: &mut dyn Collective,
    p: &Progress,
    start: &Attempt,
    left_out: &crate::metrics::ByteCounts,
    counted: bool,
) -> Result<Option<checkpoint::RunCounts>, TrainError> {
    const FIELDS: usize = 4 + 2 * 5;
    let bytes = |b: &crate::metrics::ByteCounts| [b.features, b.gradients, b.migration, b.activations, b.control];
    let mut rows = p.rows;
    rows -= start.progress.rows;
    let eval = sub_bytes(&p.eval_bytes, &start.progress.eval_bytes);
    let sent = sub_bytes(&coll.bytes().sent, &start.uncounted(left_out));
    let train = sub_bytes(&sent, &eval);
    let fields = [rows.requested, rows.local, rows.cache_hit, rows.remote].into_iter();
    let fields: Vec<u64> = fields.chain(bytes(&train)).chain(bytes(&eval)).collect();
    let msg: Vec<u8> = fields.iter().flat_map(|v| v.to_le_bytes()).collect();
    let control0 = coll.bytes().sent.control;
    let out = vec![msg; coll.world()];
    let got =
        if counted { coll.all_to_all(out, crate::comm::Category::Control) } else { coll.all_to_all_uncounted(out) };
    let got = got.map_err(TrainError::Comm)?;
    let own = coll.bytes().sent.control - control0;
    let mut sum = [0u64; FIELDS];
    for (peer, m) in got.iter().enumerate() {
        if m.len() != FIELDS * 8 {
            return Err(TrainError::Comm(
                format!("worker {peer} sent {} bytes of counts for the checkpoint, not {}", m.len(), FIELDS * 8).into(),
            ));
        }
        for (s, c) in sum.iter_mut().zip(m.chunks_exact(8)) {
            *s += u64::from_le_bytes(c.try_into().expect("chunks of 8"));
        }
    }
    let known = start.progress.run_counts.or((start.progress.global_iteration == 0).then(Default::default));
    let Some(mut counts) = known else { return Ok(None) };
    let cat = |s: &[u64]| crate::metrics::ByteCounts {
        features: s[0],
        gradients: s[1],
        migration: s[2],
        activations: s[3],
        control: s[4],
    };
    counts.rows += crate::metrics::RowCounts { requested: sum[0], local: sum[1], cache_hit: sum[2], remote: sum[3] };
    let mut train = cat(&sum[4..9]);
    train.control += own * coll.world() as u64;
    add_bytes(&mut counts.train, &train);
    add_bytes(&mut counts.eval, &cat(&sum[9..14]));
    Ok(Some(counts))
}

/// `gather_counts` for a run's final checkpoint: a driver that dies before
/// it writes the run's summary leaves a resume for more epochs only this
/// count. An uninterrupted longer run takes no gather there, so this one's
/// bytes are left out of the count and of the run's totals: sent where no
/// worker's counter holds them, so a resume from here reports the longer
/// run's totals. Not measured and taken off: a faster peer's count may
/// arrive before this worker's gather begins, so two identical runs'
/// received bytes differed. `state`: what this
/// worker sent for the final checkpoint's state before (GNNPipe's stages,
/// to rank 0), left out of the count only: every run sends it once, at its
/// end, so the resumed attempt's own stands for it and the run's totals keep it.
/// Sets `p.run_counts`, and on rank 0
/// `p.final_reports`: every worker's final report as it stands here (`w`:
/// its fetches and replica checks), which a summary rebuilt from this
/// checkpoint needs to equal the driver's (the setup the count leaves out,
/// `workers.json`); sent after the count, and left out with it.
pub(crate) fn gather_final_counts(
    coll: &mut dyn Collective,
    p: &mut Progress,
    start: &Attempt,
    state: &crate::metrics::ByteCounts,
    w: &Worker<'_>,
) -> Result<(), TrainError> {
    let bytes = coll.bytes();
    let counts = gather_counts_less(coll, p, start, state, false)?;
    let report = checkpoint::FinalReport {
        rank: coll.rank(),
        bytes,
        eval_bytes: sub_bytes(&p.eval_bytes, &start.progress.eval_bytes),
        uncounted: start.uncounted(state),
        fetch: w.features.fetched(),
        peak_rss_bytes: crate::util::peak_rss_bytes(),
        replica_checks: w.replica_checks.map(|n| n.load(std::sync::atomic::Ordering::Relaxed)),
    };
    // Rank 0 writes the checkpoint: only it needs them.
    let mut out = vec![Vec::new(); coll.world()];
    out[0] = serde_json::to_vec(&report).expect("reports serialise");
    let got = coll.all_to_all_uncounted(out).map_err(TrainError::Comm)?;
    p.final_reports = if coll.rank() == 0 {
        let parse = |(peer, m): (usize, &Vec<u8>)| {
            serde_json::from_slice(m).map_err(|e| {
                TrainError::Comm(format!("worker {peer} sent a malformed report for the final checkpoint: {e}").into())
            })
        };
        Some(got.iter().enumerate().map(parse).collect::<Result<_, _>>()?)
    } else {
        None
    };
    p.run_counts = counts;
    Ok(())
}

/// Ends a stopped run where `p` is (checkpointed).
fn stop_now(
    p: Progress,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    strategy: &mut dyn Strategy,
) -> Result<Progress, TrainError> {
    // Every worker takes the answers it asked for ahead before any
    // closes its mesh: a peer gone would leave an answer unsent.
    strategy.settle(w)?;
    coll.barrier().map_err(TrainError::Comm)?;
    Ok(p)
}

/// What this worker sent evaluating epoch `p.epoch`, kept apart from
/// training's bytes and reported as it goes: a driver whose attempt is lost
/// before the workers' final reports counts the evaluations from these.
/// Every loop that evaluates (this one, RETEXO's, GNNPipe's) counts through
/// here, so that none leaves its evaluations out of a restarted run.
pub(crate) fn counted_evaluation(p: &mut Progress, obs: &mut dyn Observer, sent: &crate::metrics::ByteCounts) {
    add_bytes(&mut p.eval_bytes, sent);
    obs.evaluated(p.epoch, sent);
}

/// Where the first training record's byte count starts: this worker's
/// counters, read before a barrier. A peer past the barrier may at once ask
/// this worker's feature server for rows (the full-graph engine's and
/// RETEXO's halo fetch, a first batch's remote rows), and the server answers
/// whatever this worker is doing: read after the barrier, or with none, the
/// count could start after the reply had left, and no record would carry it
/// (on 4 workers a full-graph run's records missed up to half of the fetch).
pub(crate) fn fenced_start(coll: &mut dyn Collective) -> Result<crate::comm::ByteCounts, TrainError> {
    let mark = coll.bytes();
    coll.barrier().map_err(TrainError::Comm)?;
    Ok(mark)
}

/// BatchNorm's statistics before the first step: a training iteration
/// normalises with the previous one's statistics, and before any there are
/// none. Forwards of the first iteration's batches (`warm_up_passes`: one
/// per layer and one more), nothing learned, each pass's statistics
/// all-reduced: pass k's make layer k's inputs those of the initial weights.
fn warm_up_statistics(
    inp: &LoopInput<'_>,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    strategy: &mut dyn Strategy,
) -> Result<(), TrainError> {
    let cfg = inp.cfg;
    let order = batches::epoch_order(inp.train, cfg.seed, 0);
    let sched = batches::Schedule::new(&order, coll.world(), cfg.loop_batch_size(inp.train.len()));
    if sched.iterations() == 0 {
        return Ok(());
    }
    let it = Iteration {
        epoch: 0,
        index: 0,
        global_index: 0,
        batches: sched.workers(0),
        global_size: sched.global(0).len(),
        dropout_key: hash_of(cfg.seed, &[DROPOUT_TAG, 0, 0]),
        ahead: Vec::new(),
    };
    for _ in 0..crate::model::warm_up_passes(w.model.num_layers()) {
        strategy.statistics_pass(w, coll, &it)?;
        let mut sums = Vec::with_capacity(w.model.norm_sums_len());
        w.model.take_norm_sums(&mut sums);
        coll.all_reduce_sum(&mut sums).map_err(TrainError::Comm)?;
        w.model.finish_iteration(&sums, true)?;
    }
    Ok(())
}
