//! How the workers split an iteration's work: the interface every strategy
//! implements, whichever engine it runs on. The strategies themselves are one
//! file each under their engine: `minibatch/` (sampled mini-batches) and
//! `fullgraph/` (the whole graph, halo exchange per layer).

pub use super::minibatch::{MicroSteps, ModelCentric, P3};

use super::minibatch;
use super::{Collective, Migration, StepStats, TrainConfig, TrainError, TrainMode, Worker};
use crate::BadInput;
use crate::comm::{ByteCounts, Owners};
use crate::metrics::StepRecord;
use crate::schedule::MergePlan;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// DGL: worker w trains its own batch b(i, w).
    ModelCentric,
    /// LeapGNN +MG: micrographs routed to the owner of their root.
    Micrograph,
    /// +PG: pre-gather each iteration's remote rows in one request per peer.
    Pregather,
    /// The full system: micrographs, pre-gathering and merged time steps.
    Leapgnn,
    /// P3: features split by column, layer 1 model-parallel.
    P3,
    /// VARCO: full-graph, halo exchange compressed by a falling ratio.
    Varco,
    /// RETEXO: lazy message passing, one layer trained at a time on the full graph.
    Retexo,
    /// GNNPipe: each worker a pipeline stage owning a block of layers, graph chunks pipelined through the
    /// stages on the full graph (--chunks, --history, --pipeline-groups).
    Gnnpipe,
}

crate::value_names!(StrategyKind, "--strategy");

/// One iteration as every worker sees it.
pub struct Iteration<'a> {
    pub epoch: u64,
    /// Index within the epoch.
    pub index: u64,
    /// Iterations completed before this one, over the whole run.
    pub global_index: u64,
    /// b(i, w) for every worker w.
    pub batches: Vec<&'a [u32]>,
    /// Roots over all workers: the loss is their sum divided by this.
    pub global_size: usize,
    /// Seeds this iteration's dropout masks (the same on every worker).
    pub dropout_key: u64,
    /// b(i + 1, w), b(i + 2, w), ... for every worker, as far as
    /// `PREFETCH_DEPTH` and the epoch go (what `--prefetch` gathers ahead).
    pub ahead: Vec<Vec<&'a [u32]>>,
}

/// How many iterations `--prefetch` asks for ahead of the one computing.
/// Two measured no faster than one on 4 emulated hosts at 500 Mb/s with half
/// a core each (3.42 s and 3.43 s per epoch): the hosts' CPU, not the wait,
/// bounds the iteration there, and each more costs a store of rows.
pub const PREFETCH_DEPTH: usize = 1;

pub trait Strategy {
    fn kind(&self) -> StrategyKind;
    /// Time steps per iteration.
    fn time_steps(&self) -> u32 {
        1
    }
    /// Adds this worker's share of the iteration's gradient into `grad` and
    /// returns its share of the loss; pushes one record per time step (epoch,
    /// iteration, worker and timings filled). `coll` reaches the other workers
    /// (every worker calls the same collectives in the same order); the loop
    /// all-reduces `grad` afterwards and bills traffic a record does not claim
    /// to the last record.
    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError>;
    /// One of BatchNorm's warm-up passes before the first step
    /// (`trainer::warm_up_statistics`): the iteration's forwards in training
    /// mode, nothing learned. By default the whole iteration with its gradient
    /// dropped; a strategy whose backward crosses the network runs the
    /// forwards alone.
    fn statistics_pass(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
    ) -> Result<(), TrainError> {
        let mut scratch = vec![0f32; w.params.numel()];
        self.iteration(w, coll, it, &mut scratch, &mut StepSink::new(&mut super::Quiet))?;
        Ok(())
    }
    /// Before the end-of-epoch evaluation, after `done` iterations in all
    /// (also when a resumed run evaluates an epoch it trained before stopping).
    fn before_evaluation(&mut self, _w: &mut Worker<'_>, _done: u64) {}
    /// A run stopping mid-epoch: takes the answers to whatever the strategy
    /// asked other workers for ahead of time, so that none is still on its
    /// way when the mesh closes.
    fn settle(&mut self, _w: &mut Worker<'_>) -> Result<(), TrainError> {
        Ok(())
    }
    /// What a checkpoint keeps of the strategy's own state (`--time-steps auto`'s tuning).
    fn auto_state(&self) -> Option<minibatch::AutoState> {
        None
    }
    /// Continues from a checkpoint's `auto_state`.
    fn restore_auto(&mut self, _s: &minibatch::AutoState) -> Result<(), TrainError> {
        Ok(())
    }
}

/// What a strategy needs beyond its kind: who owns each vertex and the
/// time-step flags.
#[derive(Clone)]
pub struct StrategyEnv {
    pub world: usize,
    /// The partition's vertex -> worker map; None: worker 0 owns every vertex (W = 1).
    pub owners: Option<Owners>,
    /// leapgnn's time steps per iteration; None = tuned while training (`auto`).
    pub time_steps: Option<u32>,
    /// leapgnn's merge plan (overrides `time_steps`).
    pub plan: Option<MergePlan>,
    pub migration: Migration,
    pub prefetch: bool,
    /// `--time-steps auto`: the cost model's plan for every T (from the driver; may be empty).
    pub auto_plans: Vec<MergePlan>,
    pub mode: TrainMode,
    /// VARCO's compression and the run's steps (its schedule's T).
    pub varco: (crate::train::fullgraph::varco::VarcoConfig, u64),
}

impl StrategyEnv {
    /// The environment of `cfg` (checked) with `owners`; loads the merge plan.
    pub fn new(cfg: &TrainConfig, owners: Option<Owners>) -> Result<Self, BadInput> {
        let plan = match &cfg.merge_plan {
            Some(p) => {
                let plan = MergePlan::load(p)?;
                plan.check(cfg.workers, &p.display().to_string())?;
                Some(plan)
            }
            None => None,
        };
        let prefetch = cfg.prefetches_with(plan.as_ref());
        Ok(StrategyEnv {
            world: cfg.workers,
            owners,
            time_steps: cfg.time_steps,
            plan,
            migration: cfg.migration,
            prefetch,
            auto_plans: Vec::new(),
            mode: cfg.mode,
            varco: (cfg.varco.clone().unwrap_or_default(), cfg.epochs),
        })
    }
}

/// The strategy `kind` in `env`.
pub fn build(kind: StrategyKind, env: &StrategyEnv) -> Result<Box<dyn Strategy>, TrainError> {
    match kind {
        StrategyKind::Varco => {
            let (cfg, steps) = env.varco.clone();
            Ok(Box::new(crate::train::fullgraph::varco::Varco::new(cfg, steps)))
        }
        _ if env.mode == TrainMode::FullGraph => Ok(Box::new(crate::train::fullgraph::FullGraph)),
        StrategyKind::ModelCentric => Ok(Box::new(ModelCentric)),
        StrategyKind::Micrograph => Ok(Box::new(minibatch::micrograph::build(env))),
        StrategyKind::Pregather => Ok(Box::new(minibatch::pregather::build(env))),
        StrategyKind::Leapgnn => Ok(Box::new(minibatch::leapgnn::build(env))),
        StrategyKind::P3 => Ok(Box::new(P3::default())),
        // Always full-graph (answered above); their stages run in `fullgraph::retexo::run`
        // and `fullgraph::gnnpipe::run`.
        StrategyKind::Retexo | StrategyKind::Gnnpipe => Ok(Box::new(crate::train::fullgraph::FullGraph)),
    }
}

/// The record of one time step: what `s` did and what crossed this worker's
/// sockets during it (`moved`).
pub(crate) fn step_record(
    it: &Iteration<'_>,
    (time_step, worker, model): (u32, usize, usize),
    s: &StepStats,
    moved: &ByteCounts,
) -> StepRecord {
    StepRecord {
        epoch: it.epoch,
        iteration: it.index,
        time_step,
        worker: worker as u32,
        model: model as u32,
        roots: s.roots,
        edges: s.edges,
        rows: s.rows,
        miss_rate: s.rows.miss_rate().unwrap_or(0.0),
        bytes_in: moved.received,
        bytes_out: moved.sent,
        sample_seconds: s.sample_seconds,
        gather_seconds: s.gather_seconds,
        compute_seconds: s.compute_seconds,
        sync_seconds: 0.0,
        loss: s.loss,
        layer: None,
        columns: None,
    }
}

/// Where a strategy puts its per-time-step records. Only the iteration's last
/// record is billed the gradient all-reduce, so every other one is final as
/// soon as its step ends and goes to the observer at once (`push_final`): a
/// watcher sees each time step as it ends rather than each iteration. A
/// record pushed without knowing whether more follow (`push`) is held back
/// until the next one arrives.
pub struct StepSink<'a> {
    obs: &'a mut dyn super::Observer,
    last: Option<StepRecord>,
    /// Traffic the records claim, the final ones and the last alike.
    claimed: ByteCounts,
    /// Rows and bytes sent of the records already handed to the observer.
    rows: crate::metrics::RowCounts,
    sent: crate::metrics::ByteCounts,
}

impl<'a> StepSink<'a> {
    pub fn new(obs: &'a mut dyn super::Observer) -> Self {
        Self { obs, last: None, claimed: ByteCounts::default(), rows: Default::default(), sent: Default::default() }
    }

    /// Adds the record of the time step that just ended; hands the previous
    /// one to the observer.
    pub fn push(&mut self, r: StepRecord) -> Result<(), TrainError> {
        crate::metrics::add_bytes(&mut self.claimed.sent, &r.bytes_out);
        crate::metrics::add_bytes(&mut self.claimed.received, &r.bytes_in);
        match self.last.replace(r) {
            Some(prev) => self.emit(&prev),
            None => Ok(()),
        }
    }

    /// Adds the record of a time step that is not the iteration's last: it
    /// goes to the observer now, while the next step computes.
    pub fn push_final(&mut self, r: StepRecord) -> Result<(), TrainError> {
        crate::metrics::add_bytes(&mut self.claimed.sent, &r.bytes_out);
        crate::metrics::add_bytes(&mut self.claimed.received, &r.bytes_in);
        if let Some(prev) = self.last.take() {
            self.emit(&prev)?;
        }
        self.emit(&r)
    }

    /// A line for the event log (rank 0's reach the driver's dashboard).
    pub fn event(&mut self, msg: &str) {
        self.obs.event(msg);
    }

    pub(crate) fn emit(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.rows += r.rows;
        crate::metrics::add_bytes(&mut self.sent, &r.bytes_out);
        self.obs.step(r)
    }

    /// The record still held back, the traffic every record claims, and the
    /// rows and bytes of those already sent.
    pub(crate) fn finish(
        self,
    ) -> (Option<StepRecord>, ByteCounts, crate::metrics::RowCounts, crate::metrics::ByteCounts) {
        (self.last, self.claimed, self.rows, self.sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps the time steps it is shown, in order.
    #[derive(Default)]
    struct Seen(Vec<u32>);

    impl super::super::Observer for Seen {
        fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
            self.0.push(r.time_step);
            Ok(())
        }
    }

    #[test]
    fn each_step_but_the_last_reaches_the_observer_as_the_next_one_starts() {
        let mut seen = Seen::default();
        let mut sink = StepSink::new(&mut seen);
        let mut want_sent = crate::metrics::ByteCounts::default();
        for t in 0..3u32 {
            let mut r = StepRecord { time_step: t, ..Default::default() };
            r.rows.local = 10 + t as u64;
            r.bytes_out.features = 100 * (t as u64 + 1);
            r.bytes_in.features = 7;
            if t < 2 {
                want_sent.features += r.bytes_out.features;
            }
            sink.push(r).unwrap();
        }
        let (last, claimed, rows, sent) = sink.finish();
        assert_eq!(seen.0, [0, 1], "steps 0 and 1 are final once step 2 exists");
        assert_eq!(last.map(|r| r.time_step), Some(2), "the last step waits for the all-reduce's bytes");
        assert_eq!((claimed.sent.features, claimed.received.features), (600, 21));
        assert_eq!((rows.local, sent), (21, want_sent));
    }

    #[test]
    fn a_step_known_not_to_be_last_reaches_the_observer_when_it_ends() {
        let mut seen = Seen::default();
        let mut sink = StepSink::new(&mut seen);
        sink.push_final(StepRecord { time_step: 0, ..Default::default() }).unwrap();
        sink.push(StepRecord { time_step: 1, ..Default::default() }).unwrap();
        let (last, ..) = sink.finish();
        assert_eq!(seen.0, [0], "step 0 went out before step 1 was pushed");
        assert_eq!(last.map(|r| r.time_step), Some(1));
    }
}
