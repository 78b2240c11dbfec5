//! The dashboard's live state: what the records of a run add up to, with
//! bounded history so memory stays flat however long the run is.

use super::ring::Ring;
use crate::comm::Category;
use crate::metrics::{ByteCounts, EpochRecord, RowCounts, RunInfo, StepRecord, add_bytes};

/// (iteration, time step) points kept for the per-step charts.
pub const STEP_HISTORY: usize = 512;
/// Iterations kept for the loss curve and the ETA.
pub const ITERATION_HISTORY: usize = 1024;
/// Epochs kept for the accuracy curves.
pub const EPOCH_HISTORY: usize = 1024;
/// (iteration, time step, worker) cells kept for the time-step grid.
pub const CELL_HISTORY: usize = 4096;
/// Lines kept in the event log.
pub const EVENT_HISTORY: usize = 200;
/// Steps per worker over which bytes/s are averaged.
const RATE_WINDOW: usize = 32;
/// Iterations over which the iteration time (and so the ETA) is averaged.
const ETA_WINDOW: usize = 50;
/// A worker id beyond this is a corrupt record, not a cluster.
const MAX_WORKERS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    bytes_in: ByteCounts,
    bytes_out: ByteCounts,
    seconds: f64,
}

/// One worker's line of the table.
#[derive(Clone, Debug)]
pub struct WorkerRow {
    pub worker: u32,
    /// Where it runs (empty: not known).
    pub host: String,
    /// Whether any record of this worker arrived yet.
    pub seen: bool,
    /// The epoch `rows` belong to.
    pub epoch: u64,
    /// Time step of the latest record.
    pub time_step: u32,
    /// Model whose micrographs the latest step computed: (worker + t) mod W.
    pub model: u32,
    /// This epoch's feature rows so far (reset when an epoch starts).
    pub rows: RowCounts,
    /// Miss rate of the latest time step (None: it requested no rows).
    pub step_miss_rate: Option<f64>,
    recent: Ring<Traffic>,
}

impl WorkerRow {
    fn new(worker: u32) -> Self {
        WorkerRow {
            worker,
            host: String::new(),
            seen: false,
            epoch: 0,
            time_step: 0,
            model: worker,
            rows: RowCounts::default(),
            step_miss_rate: None,
            recent: Ring::new(RATE_WINDOW),
        }
    }

    /// This epoch's miss rate: remote rows / requested rows (None: none requested).
    pub fn miss_rate(&self) -> Option<f64> {
        self.rows.miss_rate()
    }

    /// Bytes per second (received, sent) in category `c` over the latest steps.
    pub fn rate(&self, c: Category) -> (f64, f64) {
        let secs: f64 = self.recent.iter().map(|t| t.seconds).sum();
        if secs <= 0.0 {
            return (0.0, 0.0);
        }
        let sum = |f: fn(&Traffic) -> &ByteCounts| self.recent.iter().map(|t| f(t).get(c)).sum::<u64>() as f64 / secs;
        (sum(|t| &t.bytes_in), sum(|t| &t.bytes_out))
    }

    /// Bytes per second received plus sent in category `c`.
    pub fn traffic(&self, c: Category) -> f64 {
        let (i, o) = self.rate(c);
        i + o
    }
}

/// One (iteration, time step), all workers together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepPoint {
    pub epoch: u64,
    pub iteration: u64,
    pub time_step: u32,
    /// Bytes sent by all workers (each byte on the wire counted once).
    pub bytes: ByteCounts,
    pub rows: RowCounts,
}

impl StepPoint {
    pub fn miss_rate(&self) -> Option<f64> {
        self.rows.miss_rate()
    }
}

/// One worker's share of one (iteration, time step): a cell of the time-step grid.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepCell {
    pub epoch: u64,
    pub iteration: u64,
    pub time_step: u32,
    pub worker: u32,
    pub rows: RowCounts,
    /// Bytes this worker received in the step, every category.
    pub bytes_in: u64,
    /// Bytes this worker sent in the step, every category.
    pub bytes_out: u64,
}

impl StepCell {
    pub fn miss_rate(&self) -> Option<f64> {
        self.rows.miss_rate()
    }
}

/// One iteration, all workers together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IterPoint {
    pub epoch: u64,
    pub iteration: u64,
    /// The iteration loss: the sum of its records' shares.
    pub loss: f64,
    pub roots: u64,
    /// Each worker's sample + gather + compute + sync seconds.
    worker_seconds: Vec<f64>,
}

impl IterPoint {
    /// Workers wait for each other at the all-reduce: the slowest sets the pace.
    pub fn seconds(&self) -> f64 {
        self.worker_seconds.iter().copied().fold(0.0, f64::max)
    }
}

/// Everything the dashboard shows.
#[derive(Clone, Debug)]
pub struct DashboardState {
    pub info: RunInfo,
    workers: Vec<WorkerRow>,
    steps: Ring<StepPoint>,
    cells: Ring<StepCell>,
    iterations: Ring<IterPoint>,
    epochs: Ring<EpochRecord>,
    events: Ring<String>,
    /// Latest (epoch, iteration) a record arrived for.
    position: Option<(u64, u64)>,
    /// All workers' rows in the epoch of `position`.
    epoch_rows: RowCounts,
    /// The user asked to stop; the run is checkpointing.
    pub stopping: bool,
    /// The stop was asked for while the workers evaluated: it takes effect at
    /// the end of the evaluation, not after an iteration.
    pub stop_in_evaluation: bool,
    /// The run ended.
    pub finished: bool,
}

impl Default for DashboardState {
    fn default() -> Self {
        DashboardState {
            info: RunInfo::default(),
            workers: Vec::new(),
            steps: Ring::new(STEP_HISTORY),
            cells: Ring::new(CELL_HISTORY),
            iterations: Ring::new(ITERATION_HISTORY),
            epochs: Ring::new(EPOCH_HISTORY),
            events: Ring::new(EVENT_HISTORY),
            position: None,
            epoch_rows: RowCounts::default(),
            stopping: false,
            stop_in_evaluation: false,
            finished: false,
        }
    }
}

impl DashboardState {
    pub fn new(info: RunInfo) -> Self {
        let mut s = DashboardState::default();
        s.start(info);
        s
    }

    /// A run starts (or resumes): one empty row per worker. A restart
    /// (`--restarts`) starts again from its checkpoint: what was shown from
    /// there on is dropped, as the run trains it again and sends it anew.
    pub fn start(&mut self, info: RunInfo) {
        let from = (info.start_epoch, info.start_iteration);
        if let Some(p) = self.position.filter(|&p| p >= from) {
            // The shown position goes back to the last iteration kept, and the
            // epoch's rows lose the steps to be trained again.
            let kept = self.iterations.iter().rev().map(|i| (i.epoch, i.iteration)).find(|&k| k < from);
            if kept.map(|k| k.0) == Some(p.0) {
                for s in self.steps.iter().filter(|s| s.epoch == p.0 && (s.epoch, s.iteration) >= from) {
                    self.epoch_rows -= s.rows;
                }
            } else {
                let mut rows = RowCounts::default();
                for s in self.steps.iter().filter(|s| Some(s.epoch) == kept.map(|k| k.0)) {
                    rows += s.rows;
                }
                self.epoch_rows = rows;
            }
            self.position = kept;
        }
        self.steps.retain(|s| (s.epoch, s.iteration) < from);
        self.cells.retain(|c| (c.epoch, c.iteration) < from);
        self.iterations.retain(|i| (i.epoch, i.iteration) < from);
        // The epoch the checkpoint is in is evaluated again (an epoch's last iteration included).
        self.epochs.retain(|e| e.epoch < info.start_epoch);
        self.workers = (0..info.workers.min(MAX_WORKERS as u32)).map(WorkerRow::new).collect();
        let hosts = info.hosts.clone();
        self.info = info;
        self.set_hosts(hosts);
    }

    /// Where each worker runs, by rank: the workers were (re)launched, and a
    /// relaunch may have placed them elsewhere than the run's start said.
    pub fn set_hosts(&mut self, hosts: Vec<String>) {
        for (row, host) in self.workers.iter_mut().zip(&hosts) {
            row.host.clone_from(host);
        }
        self.info.hosts = hosts;
    }

    pub fn apply_record(&mut self, r: &StepRecord) {
        let w = r.worker as usize;
        if w >= MAX_WORKERS {
            return;
        }
        if w >= self.workers.len() {
            self.workers.extend((self.workers.len() as u32..=r.worker).map(WorkerRow::new));
        }
        let world = (self.info.workers.max(1)).max(self.workers.len() as u32);
        let row = &mut self.workers[w];
        if !row.seen || r.epoch != row.epoch {
            row.rows = RowCounts::default();
            row.epoch = r.epoch;
        }
        row.seen = true;
        row.time_step = r.time_step;
        row.model = (r.worker + r.time_step) % world;
        row.rows += r.rows;
        row.step_miss_rate = r.rows.miss_rate();
        let seconds = r.sample_seconds + r.gather_seconds + r.compute_seconds + r.sync_seconds;
        row.recent.push(Traffic { bytes_in: r.bytes_in, bytes_out: r.bytes_out, seconds });

        let here = (r.epoch, r.iteration);
        match self.position {
            Some(p) if here <= p => {} // a late record of an iteration already shown
            Some(p) if p.0 == r.epoch => self.position = Some(here),
            _ => {
                // A new epoch: its miss rate starts from zero.
                self.position = Some(here);
                self.epoch_rows = RowCounts::default();
            }
        }
        if self.position.map(|p| p.0) == Some(r.epoch) {
            self.epoch_rows += r.rows;
        }

        // Records of one step or iteration arrive together, give or take
        // other workers' interleaving: look back a little, not through history.
        let depth = 4 * world as usize;
        let key = (r.epoch, r.iteration, r.time_step);
        match self.steps.recent_mut(depth, |s| (s.epoch, s.iteration, s.time_step) == key) {
            Some(s) => {
                add_bytes(&mut s.bytes, &r.bytes_out);
                s.rows += r.rows;
            }
            None => self.steps.push(StepPoint {
                epoch: r.epoch,
                iteration: r.iteration,
                time_step: r.time_step,
                bytes: r.bytes_out,
                rows: r.rows,
            }),
        }
        // Several records of one cell (a full-graph run's layers) add up.
        let cell = (r.epoch, r.iteration, r.time_step, r.worker);
        match self.cells.recent_mut(depth, |c| (c.epoch, c.iteration, c.time_step, c.worker) == cell) {
            Some(c) => {
                c.rows += r.rows;
                c.bytes_in += r.bytes_in.total();
                c.bytes_out += r.bytes_out.total();
            }
            None => self.cells.push(StepCell {
                epoch: r.epoch,
                iteration: r.iteration,
                time_step: r.time_step,
                worker: r.worker,
                rows: r.rows,
                bytes_in: r.bytes_in.total(),
                bytes_out: r.bytes_out.total(),
            }),
        }
        if self.iterations.recent_mut(depth, |i| (i.epoch, i.iteration) == here).is_none() {
            self.iterations.push(IterPoint {
                epoch: r.epoch,
                iteration: r.iteration,
                worker_seconds: vec![0.0; world as usize],
                ..Default::default()
            });
        }
        let it = self.iterations.recent_mut(depth, |i| (i.epoch, i.iteration) == here).expect("present or just pushed");
        it.loss += r.loss;
        it.roots += r.roots;
        if it.worker_seconds.len() <= w {
            it.worker_seconds.resize(w + 1, 0.0);
        }
        it.worker_seconds[w] += seconds;
    }

    /// An epoch ended (training and evaluation).
    pub fn apply_epoch(&mut self, e: &EpochRecord) {
        self.epochs.push(e.clone());
    }

    /// A stop was asked for (`by` whom, if not by a key): the log says when
    /// it takes effect, from the phase the records show. Once only.
    pub fn request_stop(&mut self, by: Option<&str>) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.stop_in_evaluation = self.evaluating();
        let by = by.map_or(String::new(), |b| format!(" by {b}"));
        self.push_event(format!("stop requested{by}: checkpoint {}, then exit", self.stop_when()));
    }

    /// When the requested stop takes effect, in words.
    pub fn stop_when(&self) -> &'static str {
        if self.stop_in_evaluation { "at the end of this epoch's evaluation" } else { "after this iteration" }
    }

    /// Whether the workers are evaluating: the newest epoch's last iteration
    /// has had a record of its last time step, which leaves a worker only
    /// after the iteration's all-reduce (where a stop is voted on), and the
    /// epoch's record has not come yet. A stop asked for then is voted on in
    /// the evaluation's sums and takes effect at the epoch's end.
    pub fn evaluating(&self) -> bool {
        let Some((e, i)) = self.position else { return false };
        if self.finished || i + 1 != self.info.iterations_per_epoch || self.epochs.last().is_some_and(|r| r.epoch >= e)
        {
            return false;
        }
        let last_step = self.time_steps().saturating_sub(1);
        self.cells.iter().rev().take_while(|c| (c.epoch, c.iteration) == (e, i)).any(|c| c.time_step >= last_step)
    }

    pub fn push_event(&mut self, msg: impl Into<String>) {
        self.events.push(msg.into());
    }

    pub fn workers(&self) -> &[WorkerRow] {
        &self.workers
    }

    pub fn steps(&self) -> &Ring<StepPoint> {
        &self.steps
    }

    /// The cells of the newest `n` iterations, newest iteration first: each
    /// (epoch, iteration) with its cells.
    pub fn recent_cells(&self, n: usize) -> Vec<((u64, u64), Vec<StepCell>)> {
        let mut out: Vec<((u64, u64), Vec<StepCell>)> = Vec::new();
        for c in self.cells.iter().rev() {
            let key = (c.epoch, c.iteration);
            match out.iter().position(|(k, _)| *k == key) {
                Some(i) => out[i].1.push(*c),
                None if out.len() < n => out.push((key, vec![*c])),
                None => {}
            }
        }
        out.sort_by_key(|(k, _)| std::cmp::Reverse(*k));
        out
    }

    pub fn iterations(&self) -> &Ring<IterPoint> {
        &self.iterations
    }

    pub fn epochs(&self) -> &Ring<EpochRecord> {
        &self.epochs
    }

    pub fn events(&self) -> &Ring<String> {
        &self.events
    }

    /// Latest (epoch, iteration) with a record, counting from 0.
    pub fn position(&self) -> Option<(u64, u64)> {
        self.position
    }

    /// All workers' rows so far in the current epoch.
    pub fn epoch_rows(&self) -> RowCounts {
        self.epoch_rows
    }

    /// Iterations done (whole run, including those before a resume).
    pub fn iterations_done(&self) -> u64 {
        match self.position {
            Some((e, i)) => e * self.info.iterations_per_epoch + i + 1,
            None => self.info.start_epoch * self.info.iterations_per_epoch + self.info.start_iteration,
        }
    }

    /// Mean seconds per iteration over the latest iterations.
    pub fn iteration_seconds(&self) -> Option<f64> {
        let recent: Vec<f64> = self.iterations.tail(ETA_WINDOW).map(IterPoint::seconds).collect();
        let mean = recent.iter().sum::<f64>() / recent.len().max(1) as f64;
        (!recent.is_empty() && mean > 0.0).then_some(mean)
    }

    /// Roots trained per second over the latest iterations.
    pub fn roots_per_second(&self) -> Option<f64> {
        let (roots, secs) =
            self.iterations.tail(ETA_WINDOW).fold((0u64, 0.0), |(r, s), i| (r + i.roots, s + i.seconds()));
        (secs > 0.0).then(|| roots as f64 / secs)
    }

    /// Seconds left: the remaining iterations at the recent pace, plus one
    /// evaluation per epoch not yet evaluated at the mean evaluation time.
    pub fn eta_seconds(&self) -> Option<f64> {
        if self.finished {
            return Some(0.0);
        }
        let per_iteration = self.iteration_seconds()?;
        let left = self.info.total_iterations().saturating_sub(self.iterations_done());
        let evaluated = self.epochs.last().map_or(self.info.start_epoch, |e| (e.epoch + 1).max(self.info.start_epoch));
        let evals_left = self.info.epochs.saturating_sub(evaluated);
        let eval = self.epochs.iter().map(|e| e.eval_seconds).sum::<f64>() / self.epochs.len().max(1) as f64;
        Some(left as f64 * per_iteration + evals_left as f64 * eval)
    }

    /// The iterations whose every record has arrived, oldest first: all but
    /// the newest while the run goes on (its other workers' or time steps'
    /// records may still come), all of them once it has ended.
    pub fn complete_iterations(&self) -> impl Iterator<Item = &IterPoint> {
        all_but_newest(&self.iterations, self.finished)
    }

    /// The time steps whose every record has arrived, in the same sense: a
    /// step's bytes and rows are sums over its workers' (and, full-graph,
    /// its layers') records, so the newest reads low until they are all in.
    pub fn complete_steps(&self) -> impl Iterator<Item = &StepPoint> {
        all_but_newest(&self.steps, self.finished)
    }

    /// Time steps of the newest complete iteration, as its records say:
    /// `--time-steps auto` changes T from one epoch to the next, and the
    /// run's start (`info`) only knows the first.
    pub fn time_steps(&self) -> u32 {
        let Some(last) = self.complete_iterations().last() else { return self.info.time_steps };
        let key = (last.epoch, last.iteration);
        let seen = self.cells.iter().rev().filter(|c| (c.epoch, c.iteration) == key).map(|c| c.time_step + 1).max();
        seen.unwrap_or(self.info.time_steps)
    }

    /// Loss of the latest complete iteration.
    pub fn last_loss(&self) -> Option<f64> {
        self.complete_iterations().last().map(|i| i.loss)
    }
}

fn all_but_newest<T>(ring: &Ring<T>, finished: bool) -> impl Iterator<Item = &T> {
    ring.iter().take(ring.len() - usize::from(!finished && !ring.is_empty()))
}
