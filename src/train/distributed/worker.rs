//! One worker of a distributed run: open the dataset's topology and labels,
//! the rows of the parts it owns and the partition map, join the mesh, serve features,
//! fill the cache, then run the common training loop.

use super::{DistJob, FetchingRows, GradDump, ReplicaCheck, Report, WARNING, WorkerDone};
use crate::DataDir;
use crate::cluster::ToDriver;
use crate::cluster::worker_session::{Job, Reporter};
use crate::comm::{
    CachePolicy, Category, FeatureClient, FetchStats, Mesh, MeshConfig, Owners, PartRows, RowSource, cache,
    serve_features,
};
use crate::format::{DatasetFile, ManifestFile};
use crate::metrics::{EpochRecord, StepRecord};
use crate::sample::{NeighborSampler, NodeMap};
use crate::schedule::batches;
use crate::train::{
    GraphData, LoopInput, MeshCollective, Observer, Progress, TrainError, Worker, checkpoint, strategy,
};
use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;

/// Epochs sampled to rank vertices for `--cache-policy presample`.
const PRESAMPLE_EPOCHS: u64 = 2;

/// Runs the `train` task of `job`; returns the `WorkerDone` value for the driver.
/// Relative paths in the job are taken from this worker's data directory
/// (where a launcher without a shared filesystem shipped the files).
pub fn run_worker(job: Job, reporter: &Reporter, data: &DataDir) -> anyhow::Result<serde_json::Value> {
    let mut spec: DistJob = serde_json::from_value(job.config.get("train").cloned().unwrap_or_default())
        .context("the driver sent a malformed train job (are driver and worker the same version?)")?;
    for p in [&mut spec.dataset, &mut spec.parts_dir, &mut spec.run_dir] {
        if p.is_relative() {
            *p = data.root.join(&*p);
        }
    }
    if let Some(p) = spec.chunks_dir.as_mut().filter(|p| p.is_relative()) {
        *p = data.root.join(&*p);
    }
    let (rank, world) = (job.rank, job.world);
    let _busy = crate::cluster::run_busy::mark(&spec.run_dir, rank);
    let cfg = &spec.config;
    let timeout = Duration::from_millis(spec.comm_timeout_ms.max(1));

    let ds = DatasetFile::open_verified(&spec.dataset)?;
    let [train, val, test] = crate::train::splits(&ds, &cfg.dataset)?;
    let manifest = Arc::new(ManifestFile::open(&spec.parts_dir)?);
    let chunks = match (&spec.chunks_dir, cfg.gnnpipe.as_ref()) {
        (Some(dir), Some(g)) => {
            let read = crate::train::fullgraph::chunks::read_stored(dir, &ds, g.chunks, spec.chunks_checksum);
            Some(read.context(
                "the GNNPipe chunks this run's driver stored are unreadable here, and a worker never cuts them; \
                 start the run again (the driver cuts missing chunks again)",
            )?)
        }
        _ => None,
    };
    super::check_partition(&manifest, &spec.parts_dir, spec.partition_checksum)?;
    // Checksums on first use by this run: a damaged partition is refused before training.
    manifest.verify()?;
    // The worker owns a contiguous range of the parts (`format::worker_parts`);
    // everything that asks who owns a node asks `owners`, the node -> worker map.
    manifest.check_serves(&ds, cfg.parts, world)?;
    let owners = Owners::of_workers(manifest.clone(), world);
    // A model too big for this host's memory is refused before its allocation
    // aborts the process: this worker's share of the partition and those of
    // the run's other workers on this host, which share its memory.
    use crate::train::fullgraph::memory::{Held, check_worker};
    let limit = spec.placement.limit(rank, spec.resume);
    let host_ranks = spec.placement.host_ranks(rank);
    crate::train::check_model_memory(cfg, &ds, Held::Ranks(&host_ranks), false, limit, Some(owners.as_slice()))?;
    let (model, params, mut opt, device) = crate::train::build_model(cfg, &ds)?;
    if cfg.mode == crate::train::TrainMode::FullGraph {
        // The stages are held to the chunks as the driver stored them, as it held them.
        let cut = chunks.as_ref().and_then(|(of, count)| {
            let shapes =
                crate::train::fullgraph::chunks::stored_shapes(&ds, cfg, model.spec(), owners.as_slice(), (of, *count));
            shapes.map(|c| (c, *count))
        });
        let cut = cut.as_ref().map(|(c, n)| (&c[..], *n));
        check_worker(&ds, cfg, (owners.as_slice(), cut), (rank, &host_ranks), model.spec(), &params, limit)?;
    }
    spec.placement.warn_address_space(rank, reporter);
    let local: Arc<dyn RowSource> = Arc::new(PartRows::open_worker(&spec.parts_dir, rank, world, manifest.clone())?);

    let mesh = join_mesh(job, (&ds, cfg), timeout, reporter)?;
    serve_features(&mesh, local.clone());

    let mut client = FeatureClient::new(owners.clone(), local, timeout);
    let budget = cache::rows_within(cfg.cache_mb.saturating_mul(1 << 20), ds.features().mean_row_bytes());
    let filled = if budget > 0 {
        let ids = match cfg.cache_policy {
            CachePolicy::Degree => cache::by_degree(ds.graph(), owners.as_slice(), rank, budget),
            CachePolicy::Presample => {
                let accesses = presample(&ds, cfg, &train, owners.as_slice(), (rank, world));
                cache::by_frequency(&accesses, owners.as_slice(), rank, budget)
            }
        };
        client.fill_cache(&mesh, &ids)?
    } else {
        FetchStats::default()
    };
    let rows = FetchingRows::new(client, &mesh, filled);

    // Replicas start from rank 0's weights (the seeded init already agrees; this makes it so).
    let mut weights = params.flat_values()?;
    mesh.broadcast_f32(0, &mut weights, Category::Control, timeout)?;
    params.set_flat(&weights)?;

    let replicas = ReplicaCheck { mesh: &mesh, every: spec.check_replicas, timeout, passed: Default::default() };
    let data = GraphData { graph: ds.graph(), features: &rows, labels: ds.labels() };
    let mut worker =
        Worker::new((rank, world), data, (&cfg.fanouts, &cfg.eval_fanouts), cfg.seed, (model, params), device);
    worker.norm = cfg.normalize;
    worker.eval = cfg.eval;
    worker.owners = Some(owners.clone());
    let mut env = strategy::StrategyEnv::new(cfg, Some(owners.clone()))?;
    env.auto_plans = spec.auto_plans.clone();
    // p3 reads its column slice of every row from the archive this process already maps.
    worker.all_rows = Some(&ds);
    let mut strat = strategy::build(cfg.strategy, &env)?;
    worker.replica_checks = (spec.check_replicas > 0).then_some(&replicas.passed);
    let check_replicas = |w: &Worker<'_>, it: &strategy::Iteration<'_>| replicas.before(w, it);
    let ck = checkpoint::dir(&spec.run_dir);
    let progress =
        if spec.resume { checkpoint::restore(&ck, &worker.params, opt.as_mut())? } else { Progress::default() };
    // The checkpoint's count (rank 0's, before it): this process reports what it moved itself.
    let eval_before = progress.eval_bytes;
    let inp = LoopInput {
        cfg,
        train: &train,
        val: &val,
        test: &test,
        checkpoint_dir: (rank == 0).then_some(ck.as_path()),
        resumed_from: spec.resume.then_some(ck.as_path()),
        stop_after: spec.stop_after,
        stop_in_evaluation: spec.stop_in_evaluation,
        owners: Some(owners.as_slice()),
        before_iteration: Some(&check_replicas),
        chunks: chunks.as_ref().map(|(of, count)| (&of[..], *count)),
    };
    let mut reporting = Reporting { reporter, rank, timeout };
    let mut obs = GradDump { path: spec.dump_grad.clone().filter(|_| rank == 0), inner: &mut reporting };
    let mut coll = MeshCollective { mesh: &mesh, timeout };
    let p = crate::train::run_loop(&inp, &mut worker, &mut coll, &mut *strat, opt.as_mut(), progress, &mut obs)?;

    let (fetch, remote_fetches) = rows.totals();
    let done = WorkerDone {
        rank,
        iterations: p.global_iteration,
        history: p.history,
        // Without the final checkpoint's gather of counts, which no counter holds.
        bytes: mesh.bytes(),
        eval_bytes: crate::metrics::sub_bytes(&p.eval_bytes, &eval_before),
        fetch,
        remote_fetches,
        time_steps: Some(strat.time_steps()),
        peak_rss_bytes: crate::util::peak_rss_bytes(),
        replica_checks: replicas.passed.load(std::sync::atomic::Ordering::Relaxed),
    };
    Ok(serde_json::to_value(done)?)
}

/// Joins the job's worker mesh (every wait bounded by `timeout`); refused
/// strangers are reported to the driver's log.
pub(super) fn join_mesh(
    job: Job,
    (ds, cfg): (&DatasetFile, &crate::train::TrainConfig),
    timeout: Duration,
    reporter: &Reporter,
) -> anyhow::Result<Mesh> {
    let mut mc = MeshConfig::new(job.rank, job.peers, job.secret);
    mc.encrypt = job.encrypt;
    // The full-graph engines and inference send a layer of every vertex they
    // own at once (a gnnpipe stage on synthetic-arxiv held the whole 87 MB
    // layer before the next stage read it), and gradients travel back the
    // same way: the cap must hold that twice on any dataset, not only fit
    // the sampled runs' few MB.
    let widest = ds.feature_dim().max(cfg.hidden.saturating_mul(cfg.heads.max(1))).max(ds.num_classes());
    mc.max_inbox = mc.max_inbox.max(ds.num_nodes().saturating_mul(widest).saturating_mul(2 * 4));
    mc.write_timeout = timeout;
    mc.connect_timeout = mc.connect_timeout.max(timeout);
    // Sole owner: once the mesh is built the port closes, so a late stranger is refused by the kernel.
    let listener =
        Arc::try_unwrap(job.listener).or_else(|shared| shared.try_clone()).context("cannot use the mesh listener")?;
    let mesh = Mesh::establish(listener, &mc)?;
    for r in mesh.refused() {
        reporter.send(&ToDriver::Log(format!("refused a mesh connection from {}: {}", r.from, r.reason)))?;
    }
    Ok(mesh)
}

/// The input rows this worker's training draws in the first epochs: its own
/// batches b(i, rank) (model-centric, p3), or, where a micrograph strategy
/// routes every batch's roots to their owner, the roots of the iteration it
/// owns (sampled as one set: a root's neighbours do not depend on its
/// company). Sampling model-centric's batches for those filled their caches
/// with the neighbourhoods of roots other workers train.
fn presample(
    ds: &DatasetFile,
    cfg: &crate::train::TrainConfig,
    train: &[u32],
    owners: &[u16],
    (rank, world): (usize, usize),
) -> Vec<u32> {
    use crate::train::StrategyKind::{Leapgnn, Micrograph, Pregather};
    let routed = matches!(cfg.strategy, Micrograph | Pregather | Leapgnn);
    let sampler = NeighborSampler::new(ds.graph(), cfg.fanouts.clone(), cfg.seed);
    let mut map = NodeMap::new(ds.num_nodes());
    let (mut accesses, mut roots) = (Vec::new(), Vec::new());
    for epoch in 0..PRESAMPLE_EPOCHS.min(cfg.epochs) {
        let order = batches::epoch_order(train, cfg.seed, epoch);
        let sched = batches::Schedule::new(&order, world, cfg.batch_size);
        for i in 0..sched.iterations() {
            let mine = if routed {
                roots.clear();
                crate::schedule::routing::owned_by(sched.global(i), Some(owners), rank, &mut roots);
                &roots[..]
            } else {
                sched.worker(i, rank)
            };
            accesses.extend_from_slice(sampler.sample(mine, epoch, &mut map).input_nodes());
        }
    }
    accesses
}

/// How many waits for the driver's `Held` a checkpoint that cannot be
/// skipped gets: ten minutes at the least, for an operator's Ctrl-Z.
const HELD_TRIES: u32 = 10;
/// Milliseconds that take the place of one wait for `Held` (tests: shorter
/// than the time they keep the driver from listening).
const HELD_WAIT_TEST_VAR: &str = "LEAPGNN_TEST_HELD_WAIT_MS";

/// Sends every step record (and rank 0's epoch records) to the driver.
struct Reporting<'a> {
    reporter: &'a Reporter,
    rank: usize,
    timeout: Duration,
}

impl Reporting<'_> {
    fn send(&self, r: Report) -> Result<(), TrainError> {
        let v = serde_json::to_value(r).expect("reports serialise");
        self.reporter.send(&ToDriver::Metrics(v)).map_err(|e| TrainError::Comm(e.into()))
    }

    /// Says this worker's records through `through` are sent (once per
    /// checkpoint: the driver keeps what each worker said); rank 0 then
    /// waits for the driver's `Held` (`held_again`).
    fn held(&self, through: u64, within: Duration) -> Result<bool, TrainError> {
        self.send(Report::Sent { through })?;
        Ok(self.held_again(through, within))
    }

    /// Rank 0 waits, `within` at most, for the driver's `Held`, which follows
    /// every worker's `Sent`. Whether it came (the other ranks write no checkpoint).
    fn held_again(&self, through: u64, within: Duration) -> bool {
        if self.rank != 0 {
            return true;
        }
        crate::util::interrupt::test_point("records-awaited");
        let held = self.reporter.wait_held(through, within);
        if !held {
            crate::util::interrupt::test_point("records-unconfirmed");
        }
        held
    }

    /// One wait for `Held`. Generously: a driver that is merely slow to write
    /// (a loaded host, a stalled terminal) should not cost a checkpoint.
    fn held_within(&self) -> Duration {
        let test = std::env::var(HELD_WAIT_TEST_VAR).ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
        test.unwrap_or_else(|| (self.timeout * 4).max(Duration::from_secs(60)))
    }
}

impl Observer for Reporting<'_> {
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.send(Report::Step(r.clone()))
    }
    fn epoch(&mut self, e: &EpochRecord, epochs: u64) {
        if self.rank == 0 {
            let _ = self.send(Report::Epoch { record: e.clone(), epochs });
        }
    }
    fn evaluated(&mut self, epoch: u64, sent: &crate::metrics::ByteCounts) {
        let _ = self.send(Report::Eval { epoch, sent: *sent });
    }
    /// A checkpoint the run ends or stops at cannot be skipped: rank 0 waits
    /// again, `HELD_TRIES` times in all, saying so each time, then fails the
    /// run naming the wait (a driver gone for good ends this process sooner,
    /// by the watchdog).
    fn before_checkpoint(&mut self, through: u64) -> Result<(), TrainError> {
        let within = self.held_within();
        for tries in 1..=HELD_TRIES {
            let held = if tries == 1 { self.held(through, within)? } else { self.held_again(through, within) };
            if held {
                return Ok(());
            }
            if tries < HELD_TRIES {
                self.event(&format!(
                    "{WARNING}the driver has not confirmed within {} s that it holds every worker's records through \
                     iteration {through}; waiting again before this last checkpoint ({} of {HELD_TRIES})",
                    within.as_secs_f64(),
                    tries + 1
                ));
            }
        }
        let secs = (within * HELD_TRIES).as_secs();
        Err(TrainError::RecordsNotHeld { through, secs, tries: HELD_TRIES })
    }
    /// A driver stopped by Ctrl-Z just as a periodic checkpoint came used to
    /// fail the run here although `fg` would have let it go on: the
    /// checkpoint is now skipped, said through the driver's event log (read
    /// once it listens again), and the next one tries again.
    fn may_checkpoint(&mut self, through: u64) -> Result<bool, TrainError> {
        let within = self.held_within();
        let held = self.held(through, within)?;
        if !held {
            self.event(&format!(
                "{WARNING}checkpoint after iteration {through} skipped: the driver did not confirm within {} s that \
                 it holds every worker's records through there (was it stopped, Ctrl-Z?); training goes on and the \
                 next checkpoint tries again",
                within.as_secs_f64()
            ));
        }
        Ok(held)
    }
    /// Rank 0's events (checkpoints written) go to the driver's event log.
    fn event(&mut self, msg: &str) {
        if self.rank == 0 {
            let _ = self.reporter.send(&ToDriver::Log(msg.to_string()));
        }
    }
    fn stop_requested(&self) -> bool {
        self.reporter.stop_requested()
    }
}
