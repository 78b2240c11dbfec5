//! The cost model: predicted seconds of an iteration from its counts and the
//! cluster's figures.
//!
//! A block (one worker, one time step) costs
//! - sample: edges x `sample_edge_seconds` + `sample_block_seconds`;
//! - gather: its local and cached rows copied (bytes x `local_byte_seconds`)
//!   plus, when it has remote rows, the fetch: requests go to every owner at
//!   once, so the slowest round trip (2 x latency + `request_seconds`) counts
//!   once, while the replies share this worker's link (sum of bytes /
//!   bandwidth per owner) and each remote row costs `remote_row_seconds`;
//! - compute: per layer, edges x input width x `edge_seconds` + destination
//!   rows x input width x output width x `row_seconds`, plus input rows x
//!   feature dim x `input_seconds` and `block_seconds`.
//!
//! Pre-gathering strategies fetch the union of the iteration's rows before
//! step 0 (the same gather formula, its transfer x (1 + `contention`): every
//! worker bursts at once, as calibration on shaped links measured) and then
//! copy each step's rows locally; with prefetch the fetch overlaps the
//! previous iteration's compute, so only what exceeds that compute is paid,
//! plus what the worker's own thread does (`issue_request_seconds` per owner
//! asked, `reply_byte_seconds` per byte taken in); an epoch's first
//! iteration, which nothing runs ahead of, pays its whole fetch. The worker
//! holds 1 + `PREFETCH_DEPTH` iterations' rows. A time step lasts as long as its
//! slowest worker (times 1 + `jitter`: workers fluctuate, and the expected
//! maximum of several exceeds the maximum of their expectations), plus
//! `step_seconds` between steps; the iteration ends with
//! the all-reduce and optimizer step (`sync_seconds` + parameters x
//! `sync_param_seconds`).

use super::counts::{BlockCounts, IterationCounts, RowSources};
use super::figures::{ComputeRate, Figures};

/// What the model needs to know about the network trained.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Key of `Figures::compute` (`sage`, `sage-max`, `gcn`, `gat`).
    pub model: String,
    pub feature_dim: usize,
    /// Bytes one input row takes as stored and sent: 4 x dim dense; a count
    /// plus column and value per non-zero (on average) when sparse.
    pub row_bytes: f64,
    pub hidden: usize,
    pub classes: usize,
    /// Parameters of the model (the all-reduced gradient's length).
    pub params: u64,
    /// Pre-gathering overlaps the previous iteration's compute.
    pub prefetch: bool,
}

impl Shape {
    /// Input and output width of layer `l` of `layers` (input layer first).
    fn widths(&self, l: usize, layers: usize) -> (f64, f64) {
        let i = if l == 0 { self.feature_dim } else { self.hidden };
        let o = if l + 1 == layers { self.classes } else { self.hidden };
        (i as f64, o as f64)
    }
    pub fn row_bytes(&self) -> f64 {
        self.row_bytes
    }
}

/// Seconds by kind of work.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Components {
    pub sample: f64,
    pub gather: f64,
    pub compute: f64,
    pub sync: f64,
}

impl Components {
    pub fn total(&self) -> f64 {
        self.sample + self.gather + self.compute + self.sync
    }
    pub fn work(&self) -> f64 {
        self.sample + self.gather + self.compute
    }
    pub fn add(&mut self, o: &Components) {
        self.sample += o.sample;
        self.gather += o.gather;
        self.compute += o.compute;
        self.sync += o.sync;
    }
    pub fn scale(&self, k: f64) -> Components {
        Components { sample: self.sample * k, gather: self.gather * k, compute: self.compute * k, sync: self.sync * k }
    }
}

/// The prediction for one iteration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IterationPrediction {
    pub seconds: f64,
    /// Seconds of each time step (slowest worker, plus the step end).
    pub steps: Vec<f64>,
    /// Per worker, its own work by kind; `sync` is the rest of the iteration
    /// (waiting for slower workers, then the all-reduce), so each worker's
    /// components add up to `seconds`.
    pub workers: Vec<Components>,
    /// The largest memory any worker needs (bytes): pre-gathered rows + one step's block.
    pub peak_memory_bytes: u64,
}

/// Mean over sampled iterations.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prediction {
    pub iteration_seconds: f64,
    /// Mean over workers and iterations; they add up to `iteration_seconds`.
    pub components: Components,
    pub peak_memory_bytes: u64,
}

/// The round trip (slowest owner) and the transfer (replies sharing this
/// worker's link) of fetching `rows` on worker `me`, at the probed bandwidth.
pub fn fetch_parts(rows: &RowSources, me: usize, f: &Figures, s: &Shape) -> (f64, f64) {
    let mut round_trip: f64 = 0.0;
    let mut transfer = 0.0;
    for (p, &n) in rows.remote.iter().enumerate().filter(|&(_, &n)| n > 0) {
        let (bw_in, lat_in) = f.link(p, me);
        let (_, lat_out) = f.link(me, p);
        round_trip = round_trip.max(lat_out + lat_in + f.request_seconds);
        transfer += n as f64 * s.row_bytes() / bw_in;
    }
    (round_trip, transfer)
}

/// The network part of fetching `rows` on worker `me`: 0 without remote rows.
pub fn fetch_seconds(rows: &RowSources, me: usize, f: &Figures, s: &Shape) -> f64 {
    let (round_trip, transfer) = fetch_parts(rows, me, f, s);
    round_trip + transfer + rows.remote_rows() as f64 * f.remote_row_seconds
}

/// The pre-gather of `rows` on worker `me`, which every worker does at once:
/// the gather with its transfer slowed by `contention`.
pub fn pregather_seconds(rows: &RowSources, me: usize, f: &Figures, s: &Shape) -> f64 {
    gather_seconds(rows, me, f, s) + f.contention * fetch_parts(rows, me, f, s).1
}

/// The part of fetching `rows` a prefetch cannot hide: issuing one request
/// per owner and taking the replies' bytes in, on the worker's own thread.
pub fn own_thread_seconds(rows: &RowSources, f: &Figures, s: &Shape) -> f64 {
    let [requests, bytes] = own_thread_units(rows, s);
    requests * f.issue_request_seconds + bytes * f.reply_byte_seconds
}

/// (requests, reply bytes) of fetching `rows`: the units of `own_thread_seconds`.
pub fn own_thread_units(rows: &RowSources, s: &Shape) -> [f64; 2] {
    let requests = rows.remote.iter().filter(|&&n| n > 0).count() as f64;
    [requests, rows.remote_rows() as f64 * s.row_bytes()]
}

/// Seconds to gather `rows` on worker `me`: local copies plus the fetch.
pub fn gather_seconds(rows: &RowSources, me: usize, f: &Figures, s: &Shape) -> f64 {
    (rows.local + rows.cache) as f64 * s.row_bytes() * f.local_byte_seconds + fetch_seconds(rows, me, f, s)
}

/// The compute units of a block: (edge, row, input), see the module doc.
pub fn compute_units(b: &BlockCounts, s: &Shape) -> [f64; 3] {
    let layers = b.edges.len();
    let (mut edge, mut row) = (0.0, 0.0);
    for l in 0..layers {
        let (i, o) = s.widths(l, layers);
        edge += b.edges[l] as f64 * i;
        row += b.dst[l] as f64 * i * o;
    }
    [edge, row, b.input_rows as f64 * s.feature_dim as f64]
}

fn compute_seconds(b: &BlockCounts, c: &ComputeRate, s: &Shape) -> f64 {
    if b.is_empty() {
        return 0.0;
    }
    let [e, r, i] = compute_units(b, s);
    e * c.edge_seconds + r * c.row_seconds + i * c.input_seconds + c.block_seconds
}

/// Sample, gather and compute of one block on worker `me`.
pub fn block_seconds(b: &BlockCounts, me: usize, f: &Figures, s: &Shape) -> Components {
    if b.is_empty() {
        return Components::default();
    }
    Components {
        sample: b.total_edges() as f64 * f.sample_edge_seconds + f.sample_block_seconds,
        gather: gather_seconds(&b.rows, me, f, s),
        compute: compute_seconds(b, &f.compute_of(&s.model), s),
        sync: 0.0,
    }
}

/// Bytes one block holds while it trains: input rows, activations and their
/// gradients, edge lists.
fn block_memory(b: &BlockCounts, s: &Shape) -> f64 {
    let layers = b.edges.len();
    let mut bytes = b.input_rows as f64 * s.row_bytes();
    for l in 0..layers {
        let (_, o) = s.widths(l, layers);
        // Output, its gradient and the aggregate of each destination; 8 bytes per edge.
        bytes += 3.0 * 4.0 * b.dst[l] as f64 * o + 8.0 * b.edges[l] as f64;
    }
    bytes
}

pub fn predict_iteration(c: &IterationCounts, f: &Figures, s: &Shape) -> IterationPrediction {
    let w = c.workers.len();
    let t_steps = c.workers.iter().map(|wc| wc.steps.len()).max().unwrap_or(0);
    let mut per: Vec<Components> = vec![Components::default(); w];
    let mut work = vec![vec![0.0; t_steps]; w];
    let mut peak: f64 = 0.0;
    for (r, wc) in c.workers.iter().enumerate() {
        let mut compute = 0.0;
        let mut step_peak: f64 = 0.0;
        for (t, b) in wc.steps.iter().enumerate() {
            let k = block_seconds(b, r, f, s);
            work[r][t] = k.work();
            compute += k.compute;
            per[r].add(&k);
            step_peak = step_peak.max(block_memory(b, s));
        }
        let mut held = 0.0;
        if let Some(rows) = &wc.pregather {
            let fetch = pregather_seconds(rows, r, f, s);
            // Nothing runs ahead of an epoch's first iteration: its fetch is paid whole.
            let paid = if s.prefetch && c.iteration > 0 {
                // Asking the owners and taking their replies in happen on this
                // worker's thread: only the rest of the fetch (the wait) can
                // overlap the previous iteration's compute.
                let own = own_thread_seconds(rows, f, s);
                own + (fetch - own - compute).max(0.0)
            } else {
                fetch
            };
            if let Some(first) = work[r].first_mut() {
                *first += paid;
            }
            per[r].gather += paid;
            // Prefetching fills the next iterations' rows while this one's are read.
            let copies = if s.prefetch { 1.0 + crate::train::PREFETCH_DEPTH as f64 } else { 1.0 };
            held = copies * rows.rows() as f64 * s.row_bytes();
        }
        peak = peak.max(held + step_peak);
    }
    let steps: Vec<f64> = (0..t_steps)
        .map(|t| {
            let slowest = work.iter().map(|w| w[t]).fold(0.0, f64::max);
            slowest * (1.0 + f.jitter) + if t + 1 < t_steps { f.step_seconds } else { 0.0 }
        })
        .collect();
    let sync = f.sync_seconds + s.params as f64 * f.sync_param_seconds;
    let seconds = steps.iter().sum::<f64>() + sync;
    for p in &mut per {
        p.sync = seconds - p.work();
    }
    IterationPrediction { seconds, steps, workers: per, peak_memory_bytes: peak.ceil() as u64 }
}

/// Mean prediction over `iterations`, each weighing the same: what the
/// measured iterations of a run are compared with.
pub fn predict(iterations: &[IterationCounts], f: &Figures, s: &Shape) -> Prediction {
    let w = 1.0 / iterations.len().max(1) as f64;
    weighted(iterations, f, s, |_| w)
}

/// Mean prediction per iteration of an epoch of `per_epoch` iterations, from
/// a sample of `iterations`: the sample's epoch-first iterations (which a
/// prefetch cannot run ahead of, so they pay their whole fetch) stand for one
/// iteration in `per_epoch`, the rest for the others. A sample of the first
/// few iterations of a long epoch would otherwise charge the unhidden fetch
/// far more often than training does.
pub fn predict_per_epoch(iterations: &[IterationCounts], f: &Figures, s: &Shape, per_epoch: usize) -> Prediction {
    let first = iterations.iter().filter(|c| c.iteration == 0).count();
    let rest = iterations.len() - first;
    if first == 0 || rest == 0 {
        return predict(iterations, f, s);
    }
    let share = 1.0 / per_epoch.max(1) as f64;
    weighted(iterations, f, s, |c| if c.iteration == 0 { share / first as f64 } else { (1.0 - share) / rest as f64 })
}

/// The prediction averaged over `iterations` with `weight` (weights sum to 1).
fn weighted(
    iterations: &[IterationCounts],
    f: &Figures,
    s: &Shape,
    weight: impl Fn(&IterationCounts) -> f64,
) -> Prediction {
    let mut out = Prediction::default();
    for c in iterations {
        let p = predict_iteration(c, f, s);
        let w = weight(c);
        out.iteration_seconds += w * p.seconds;
        let mut mean = Components::default();
        for wc in &p.workers {
            mean.add(wc);
        }
        out.components.add(&mean.scale(w / p.workers.len().max(1) as f64));
        out.peak_memory_bytes = out.peak_memory_bytes.max(p.peak_memory_bytes);
    }
    out
}
