use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::DataDir;
use leapgnn::cluster::check::preflight_with;
use leapgnn::cluster::driver::DriverError;
use leapgnn::cluster::ship::{ShipItem, rank_files};
use leapgnn::cluster::{
    Allocation, Launcher, LauncherKind, LocalLauncher, LogSink, Profile, SlurmLauncher, SshLauncher,
};
use leapgnn::format::write_atomic;
use leapgnn::metrics::{EpochRecord, RunInfo, RunSummary, StepRecord};
use leapgnn::progress::{self, ProgressSink, signals};
use leapgnn::sample::{Fanout, Fanouts};
use leapgnn::train::distributed::{DistOptions, GradDump, resume_distributed, train_distributed};
use leapgnn::train::fullgraph::{gnnpipe, varco};
use leapgnn::train::tensorboard::TensorBoard;
use leapgnn::train::{
    self, EvalMode, MergePlan, Observer, ResumeOverrides, RunOptions, StrategyKind, TrainConfig, TrainError, TrainMode,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Train a GNN with sampled mini-batches. The model has one layer per --fanout
/// entry (the LeapGNN artifact uses one more; we do not).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Dataset name (registry or --data-dir), dataset directory or archive path [default: synthetic-small].
    pub dataset: Option<String>,
    /// Take flags from FILE: TOML `flag = value` pairs (`batch-size = 64`, `fanout = [10, 10]`, `no-tui = true`,
    /// `dataset = "cora"`), or a run's `runs/RUN/config.json` to replay it; flags on the command line override it.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// Worker processes; --batch-size is per worker (global batch = W x B).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Partitions of the features (one per worker).
    #[arg(long)]
    pub parts: Option<usize>,
    /// model-centric, micrograph, pregather, leapgnn, p3, varco (full-graph, compressed halo exchange; unless
    /// given, the authors' run: 3 layers, hidden 256, no dropout, lr 0.01, no weight decay, 300 epochs) or
    /// retexo (lazy message passing: trains one layer at a time on the full graph, --rounds per layer; defaults
    /// 2 layers, hidden 256, 200 rounds, lr 0.003, dropout 0.3, random parts) or gnnpipe (full-graph, each
    /// worker a pipeline stage owning --layers / --workers layers; --chunks); with --dry-run: `naive`
    /// (per-layer model migration) or `neutronstar` (an estimate, not a run).
    #[arg(long)]
    pub strategy: Option<String>,
    /// With --strategy naive: report the bytes naive per-layer model migration would move per epoch for
    /// this run's batches, then exit (nothing is trained). With --strategy neutronstar: train model-centric
    /// with these flags and report the NeutronStar epoch time the LeapGNN paper's formula estimates from
    /// it (an estimate, not a NeutronStar run).
    #[arg(long)]
    pub dry_run: bool,
    /// --strategy varco: variable (the ratio falls from --max-ratio to --min-ratio), fixed (--ratio) or
    /// none [default: variable; fixed when --ratio is given].
    #[arg(long)]
    pub compression: Option<String>,
    /// --strategy varco: the ratio of the first step, r_max [default: 128].
    #[arg(long)]
    pub max_ratio: Option<f64>,
    /// --strategy varco: the ratio it falls to, r_min [default: 1.5].
    #[arg(long)]
    pub min_ratio: Option<f64>,
    /// --strategy varco: how fast the ratio falls, s in r(t) = max(r_max - s t (r_max - r_min) / (T - 2), r_min)
    /// [default: 5].
    #[arg(long)]
    pub slope: Option<f64>,
    /// --strategy varco --compression fixed: the ratio of every step (each layer sends d / ratio columns).
    #[arg(long)]
    pub ratio: Option<f64>,
    /// sage (mean), sage-max, gcn or gat.
    #[arg(long)]
    pub model: Option<String>,
    /// Neighbours per layer, input layer first; the number of entries is the number of layers [default: 10,10].
    #[arg(long)]
    pub fanout: Option<String>,
    /// Number of layers (optional; must match the --fanout entries).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Fanouts for validation and test, or `all` for the full neighbourhood [default: the training ones].
    #[arg(long)]
    pub eval_fanout: Option<String>,
    /// Roots per worker per iteration [default: 1024].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Roots per evaluation batch [default: 1024].
    #[arg(long)]
    pub eval_batch_size: Option<usize>,
    /// Hidden size [default: 128].
    #[arg(long)]
    pub hidden: Option<usize>,
    /// GAT attention heads in hidden layers; must divide --hidden [default: 4].
    #[arg(long)]
    pub heads: Option<usize>,
    /// Epochs [default: 10].
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Learning rate [default: 0.01].
    #[arg(long)]
    pub lr: Option<f32>,
    /// Weight decay [default: 5e-4].
    #[arg(long)]
    pub weight_decay: Option<f32>,
    /// Dropout on hidden layers (also input features for gcn/gat; GAT attention too) [default: 0.5].
    #[arg(long)]
    pub dropout: Option<f32>,
    /// adam (L2 decay, as PyG/DGL examples), adamw (decoupled decay) or sgd [default: adam].
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Seed of every random choice (init, shuffles, sampling, dropout) [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Input feature normalisation: none, or l1 (rows sum to 1, PyG's NormalizeFeatures) [default: none].
    #[arg(long)]
    pub normalize: Option<String>,
    /// Feature cache per worker in MB.
    #[arg(long)]
    pub cache_mb: Option<u64>,
    /// Time steps per iteration, 1..=W, or `auto` (tuned while training) [leapgnn only; default: the
    /// --merge-plan's, else auto]. micrograph and pregather always take W, model-centric 1.
    #[arg(long)]
    pub time_steps: Option<String>,
    /// Merge plan written by `tune-merge` (leapgnn): time steps and per-step shares of each worker's roots.
    #[arg(long)]
    pub merge_plan: Option<PathBuf>,
    /// How micrograph strategies move gradient accumulators between time steps: fused (one per worker,
    /// nothing moves) or ring (each follows its model, as the paper) [default: fused].
    #[arg(long)]
    pub migration: Option<String>,
    /// pregather / leapgnn: fetch iteration i+1's remote rows while computing iteration i.
    #[arg(long)]
    pub prefetch: bool,
    /// Cluster profile (TOML): `launcher = "local"` runs --workers local processes; `launcher = "ssh"` runs
    /// one worker per slot of its hosts (W = the sum of their `workers`), shipping binary and data over SFTP;
    /// `slurm` (or `launcher = "slurm"`), inside a Slurm allocation: one worker per task, started with srun.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// With an ssh profile: record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long, requires = "cluster")]
    pub accept_new_host_keys: bool,
    /// cpu or cuda (needs a build with `--features cuda`) [default: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// Checkpoint every N iterations (always at the end).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Name of the new run under <data-dir>/runs/ [default: <dataset>-<model>-<unix time>].
    #[arg(long, conflicts_with = "resume")]
    pub run: Option<String>,
    /// Continue run RUN from its last checkpoint (only --epochs and --checkpoint-every may change).
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    /// Progress bars on stderr (plain lines when stderr is not a terminal) instead of the dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// Every metrics record as a JSON line on stdout, as it happens (for pipelines; no dashboard).
    #[arg(long)]
    pub json_stream: bool,
    /// Write TensorBoard event files to DIR/<run>/ (per epoch: loss, accuracies, seconds, bytes by category,
    /// miss rate; per iteration: loss and step times); view with `tensorboard --logdir DIR`.
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Stop after N iterations in total, as if interrupted (after checkpointing).
    #[arg(long, hide = true)]
    pub stop_after: Option<u64>,
    /// Which remote rows fill the --cache-mb cache: degree or presample [default: degree].
    #[arg(long)]
    pub cache_policy: Option<String>,
    /// Seconds any worker waits for another before failing with that worker's name.
    #[arg(long, default_value_t = 30.0)]
    pub comm_timeout: f64,
    /// When a worker dies, stops answering or loses its link: stop all, resume from the last
    /// checkpoint, at most N times (local workers; see --checkpoint-every).
    #[arg(long, default_value_t = 0)]
    pub restarts: u32,
    /// With several workers, check every N iterations that all replicas hold the same weights (0: never).
    #[arg(long, default_value_t = 0)]
    pub check_replicas: u64,
    /// minibatch (sampled, the default) or full-graph (one step per epoch over the whole graph, exchanging
    /// halo activations at every layer; the number of layers is --layers, default 2).
    #[arg(long)]
    pub mode: Option<String>,
    /// Same as --mode full-graph.
    #[arg(long, conflicts_with = "mode")]
    pub full_batch: bool,
    /// How validation and test nodes are scored: full (layer-wise inference over all nodes; the default with
    /// --eval-fanout all and in full-graph mode) or sampled (blocks with the --eval-fanout fanouts).
    #[arg(long)]
    pub eval: Option<String>,
    /// Full-graph runs: memory in MiB all workers may use together [default: this machine's MemAvailable].
    #[arg(long, hide = true)]
    pub memory_limit_mb: Option<u64>,
    /// --strategy retexo: training rounds per layer (stage) [default: 200].
    #[arg(long)]
    pub rounds: Option<u64>,
    /// --strategy gnnpipe: graph chunks (METIS) that flow through the pipeline each epoch [default: 8].
    #[arg(long)]
    pub chunks: Option<usize>,
    /// --strategy gnnpipe: on (in-neighbours in chunks not yet computed this epoch read last epoch's rows) or
    /// off (they read zeros; with --chunks 1, exactly full-graph training) [default: on].
    #[arg(long)]
    pub history: Option<String>,
    /// --strategy gnnpipe: graph-parallel groups, each a pipeline of --workers / G stages over its part of the
    /// graph, the groups' matching stages summing their gradients [default: 1].
    #[arg(long)]
    pub pipeline_groups: Option<usize>,
    /// How the workers' parts are cut: metis, random, hash or ldg [default: metis; random with --strategy retexo].
    #[arg(long)]
    pub partition: Option<String>,
    /// Write the first iteration's summed gradient to FILE (raw little-endian f32; for tests).
    #[arg(long, hide = true, value_name = "FILE")]
    pub dump_grad: Option<PathBuf>,
}

/// Hands the run's progress to the chosen display.
struct Watch(Box<dyn ProgressSink>);

impl Observer for Watch {
    fn start(&mut self, info: &RunInfo) {
        self.0.start(info);
    }
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.0.record(r);
        Ok(())
    }
    fn epoch(&mut self, e: &EpochRecord, _epochs: u64) {
        self.0.epoch(e);
    }
    fn event(&mut self, msg: &str) {
        self.0.event(msg);
    }
    /// `q` in the dashboard, a closed `--json-stream` reader, Ctrl-C or SIGTERM.
    fn stop_requested(&self) -> bool {
        self.0.stop_requested() || signals::stop_requested()
    }
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    if a.strategy.as_deref() == Some(NEUTRONSTAR) {
        return neutronstar(g, &a);
    }
    if a.dry_run || a.strategy.as_deref() == Some(NAIVE) {
        return naive(g, &a);
    }
    let data = g.data();
    let opts = RunOptions {
        run: a.run.clone(),
        stop_after: a.stop_after,
        memory_limit: a.memory_limit_mb.map(|m| m.saturating_mul(1 << 20)),
    };
    // Bad flags are reported before the dashboard takes the terminal.
    let (cfg, profile) = match &a.resume {
        Some(run) => {
            reject_on_resume(&a)?;
            (multi_worker_config(&data, run), None)
        }
        None => {
            let (cfg, profile) = with_profile(config(&a)?, &a)?;
            (Some(cfg), profile)
        }
    };
    let tty = progress::interactive();
    let dashboard = progress::uses_dashboard(tty, a.no_tui, g.json, a.json_stream);
    // One worker runs in this process: a second Ctrl-C can only exit. The driver of
    // several stops them first (its `interrupted` flag), then exits 130.
    let several = cfg.as_ref().is_some_and(|c| c.workers > 1) || profile.is_some();
    let on_force = if several { signals::OnForce::Flag } else { signals::OnForce::Exit };
    signals::install(on_force, dashboard).context("cannot install the Ctrl-C / SIGTERM handler")?;
    let mut watch = Watch(progress::choose(tty, a.no_tui, g.json, a.json_stream));
    let mut dump = GradDump { path: a.dump_grad.clone(), inner: &mut watch };
    let mut tb = TensorBoard::new(a.tensorboard.clone(), &mut dump)?;
    let obs: &mut dyn Observer = &mut tb;
    let result = match (cfg, &a.resume) {
        (Some(cfg), Some(run)) => distributed(g, cfg, None, &a, &opts, dashboard, obs, Some(run)),
        (Some(cfg), None) if cfg.workers > 1 || profile.is_some() => {
            distributed(g, cfg, profile, &a, &opts, dashboard, obs, None)
        }
        (Some(cfg), _) => {
            let name = cfg.dataset.clone();
            train::train(&data, cfg, &opts, obs).with_context(|| format!("training on {name} failed"))
        }
        (None, Some(run)) => {
            let over = ResumeOverrides { epochs: a.epochs, checkpoint_every: a.checkpoint_every };
            train::resume(&data, run, &over, &opts, obs).with_context(|| format!("cannot resume run {run}"))
        }
        (None, None) => unreachable!("a config is built unless resuming"),
    };
    tb.finish();
    // The terminal is back before anything else is printed.
    watch.0.finish();
    let summary = result?;
    if watch.stop_requested() {
        let ck = train::checkpoint::dir(&data.run_dir(&summary.run));
        if summary.workers > 1 {
            eprintln!(
                "stopped on request after iteration {}, checkpoint written to {}",
                summary.iterations,
                ck.display()
            );
        } else {
            eprintln!(
                "stopped on request after iteration {}, checkpoint written; continue with `leapgnn train --resume {}`",
                summary.iterations, summary.run
            );
        }
    }
    if g.json {
        return print_json(&summary);
    }
    report(&summary, &data.run_dir(&summary.run));
    Ok(())
}

/// `--cluster`: an ssh profile sets the number of workers (the sum of its
/// hosts' slots); a local one leaves it to `--workers`.
fn with_profile(mut cfg: TrainConfig, a: &Args) -> anyhow::Result<(TrainConfig, Option<Profile>)> {
    let Some(path) = &a.cluster else { return Ok((cfg, None)) };
    let profile = Profile::load_or_builtin(path)?;
    if profile.launcher == LauncherKind::Local {
        return Ok((cfg, None));
    }
    if profile.launcher == LauncherKind::Slurm {
        // One worker per task of the allocation, or the first --workers of them.
        let alloc = Allocation::from_env(a.workers)?;
        cfg.workers = alloc.world();
        cfg.parts = a.parts.unwrap_or(cfg.workers);
        return Ok((cfg, Some(profile)));
    }
    let slots = profile.world();
    if let Some(w) = a.workers.filter(|&w| w != slots) {
        return Err(BadInput::new(format!(
            "--workers {w}, but the cluster profile {} has {slots} worker slots (the sum of its hosts' `workers`): \
             omit --workers or change the profile",
            profile.name()
        ))
        .into());
    }
    if slots < 2 {
        return Err(BadInput::new(format!(
            "the cluster profile {} has {slots} worker slot: training over ssh needs at least 2 (set workers = 2 \
             on a host, or add a host)",
            profile.name()
        ))
        .into());
    }
    cfg.workers = slots;
    cfg.parts = a.parts.unwrap_or(slots);
    Ok((cfg, Some(profile)))
}

/// W > 1: the driver starts the workers, as local processes (in their own
/// process group, so Ctrl-C reaches only the driver, which then stops them)
/// or over ssh (`profile`). While the dashboard owns the terminal, what the
/// workers print goes to its event log.
#[allow(clippy::too_many_arguments)]
fn distributed(
    g: &Global,
    cfg: TrainConfig,
    profile: Option<Profile>,
    a: &Args,
    opts: &RunOptions,
    dashboard: bool,
    obs: &mut dyn Observer,
    resume: Option<&str>,
) -> anyhow::Result<RunSummary> {
    let comm_timeout = comm_timeout(a.comm_timeout)?;
    let data = g.data();
    // A second Ctrl-C: stop the workers at once.
    let interrupted = signals::forced_flag();
    let (tx, rx) = mpsc::channel::<String>();
    let log: LogSink = if dashboard {
        let tx = Mutex::new(tx);
        Arc::new(move |l| {
            let _ = tx.lock().unwrap_or_else(|e| e.into_inner()).send(l);
        })
    } else {
        Arc::new(|l| eprintln!("{l}"))
    };
    let (mut ssh, mut slurm) = (None, None);
    match profile {
        Some(p) if p.launcher == LauncherKind::Slurm => {
            let alloc = Allocation::from_env(Some(cfg.workers))?;
            let binary = std::env::current_exe().context("cannot find the leapgnn executable to start workers")?;
            slurm = Some(SlurmLauncher::new(alloc, binary, worker_args(g, &data)?).with_log(log.clone()));
        }
        Some(p) => ssh = Some(ssh_launcher(&data, &cfg, p, a.accept_new_host_keys, vec![])?.with_log(log.clone())),
        None => {}
    }
    let local;
    let launcher: &dyn Launcher = match (&ssh, &slurm) {
        (Some(l), _) => l,
        (_, Some(l)) => l,
        _ => {
            local = local_launcher(g, &data, log)?;
            &local
        }
    };
    let dist = DistOptions {
        launcher,
        interrupted,
        comm_timeout,
        check_replicas: a.check_replicas,
        dump_grad: a.dump_grad.clone(),
        worker_lines: dashboard.then_some(&rx),
        driver_bind: match (&ssh, &slurm) {
            (Some(l), _) => l.profile().driver_bind(),
            (_, Some(_)) => Profile::slurm().driver_bind(),
            _ => Profile::local().driver_bind(),
        },
        auto_planner: Some(&leapgnn::cost::auto_plans),
        restarts: a.restarts,
    };
    let name = cfg.dataset.clone();
    let result = match resume {
        Some(run) => {
            let over = ResumeOverrides { epochs: a.epochs, checkpoint_every: a.checkpoint_every };
            resume_distributed(&data, run, &over, opts, &dist, obs).with_context(|| format!("cannot resume run {run}"))
        }
        None => train_distributed(&data, cfg, opts, &dist, obs),
    };
    let Some(ssh) = &ssh else { return result.with_context(|| format!("training on {name} failed")) };
    let summary = result
        .map_err(|e| name_host(ssh.profile(), e))
        .with_context(|| format!("training on {name} over ssh failed"))?;
    let shipped = ssh.shipped();
    let path = data.run_dir(&summary.run).join("shipped.json");
    write_atomic(&path, &serde_json::to_vec_pretty(&shipped).expect("shipped serialises"))?;
    let sent: Vec<_> = shipped.iter().filter(|s| s.sent).collect();
    if !g.json {
        eprintln!(
            "ssh: sent {} files ({:.1} MB), {} were already current on the hosts (see {})",
            sent.len(),
            sent.iter().map(|s| s.bytes).sum::<u64>() as f64 / 1e6,
            shipped.len() - sent.len(),
            path.display()
        );
    }
    Ok(summary)
}

/// `--comm-timeout` seconds, checked.
pub(crate) fn comm_timeout(secs: f64) -> anyhow::Result<Duration> {
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(BadInput::new(format!("--comm-timeout {secs}: expected seconds in (0, 86400]")).into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Workers as local processes of this binary, on this data directory; they
/// log at the driver's verbosity (-v, -vv), relayed as `[worker r]` lines.
pub(crate) fn local_launcher(g: &Global, data: &DataDir, log: LogSink) -> anyhow::Result<LocalLauncher> {
    Ok(LocalLauncher::current(worker_args(g, data)?)?.with_log(log))
}

/// Every worker's flags before `worker`: the data directory (absolute: a Slurm step may start
/// elsewhere), and the driver's verbosity (-v, -vv), relayed as `[worker r]` lines.
pub(crate) fn worker_args(g: &Global, data: &DataDir) -> anyhow::Result<Vec<String>> {
    let mut args = vec!["--data-dir".into(), std::path::absolute(&data.root)?.display().to_string()];
    args.extend((0..g.verbose).map(|_| "-v".to_string()));
    Ok(args)
}

/// Checks every host first (the same checks as `cluster check`, failing on
/// the first bad host), partitions here if needed, and ships each rank the
/// dataset archive, the partition manifest and the parts it owns, plus `extra`
/// (files under the data directory, e.g. a checkpoint to infer with).
pub(crate) fn ssh_launcher(
    data: &DataDir,
    cfg: &TrainConfig,
    profile: Profile,
    accept_new: bool,
    extra: Vec<PathBuf>,
) -> anyhow::Result<SshLauncher> {
    let launcher = SshLauncher::new(profile)?.accept_new_host_keys(accept_new);
    preflight_with(&launcher)?;
    let dataset = std::path::absolute(leapgnn::datasets::ensure_dataset(data, &cfg.dataset)?)?;
    let parts = leapgnn::partition::ensure_partition(data, &cfg.dataset, cfg.partition_method(), cfg.parts, cfg.seed)?;
    let parts = std::path::absolute(parts)?;
    let root = std::path::absolute(&data.root)?;
    // Each rank gets the manifest and the parts it owns.
    let (k, w) = (cfg.parts.max(cfg.workers), cfg.workers);
    let extra: Vec<ShipItem> = extra
        .into_iter()
        .map(|p| {
            std::path::absolute(&p).map(|local| ShipItem { remote: relative(&root, &local), local, executable: false })
        })
        .collect::<Result<_, _>>()?;
    let files = Arc::new(move |rank| {
        let mut files = rank_files(&root, &dataset, &parts, leapgnn::format::worker_parts(rank, k, w));
        files.extend(extra.iter().cloned());
        files
    });
    Ok(launcher.with_rank_files(files))
}

/// `local` relative to the data directory `root` (where workers find it), as `rank_files` ships.
fn relative(root: &std::path::Path, local: &std::path::Path) -> PathBuf {
    local.strip_prefix(root).unwrap_or(local).to_path_buf()
}

/// Adds "rank R on user@host:port" to a failure that one worker caused.
pub(crate) fn name_host(profile: &Profile, e: anyhow::Error) -> anyhow::Error {
    match e.chain().find_map(|c| c.downcast_ref::<DriverError>()).and_then(DriverError::rank) {
        Some(rank) => e.context(profile.describe_rank(rank)),
        None => e,
    }
}

/// Costed, never trained: the paper's strawman of moving the model to every vertex's owner at every layer.
const NAIVE: &str = "naive";
/// Estimated, never trained: the LeapGNN paper's NeutronStar formula over a model-centric run.
const NEUTRONSTAR: &str = "neutronstar";

/// `--strategy naive --dry-run`: the bytes naive migration would move, per epoch.
fn naive(g: &Global, a: &Args) -> anyhow::Result<()> {
    if a.strategy.as_deref() != Some(NAIVE) {
        return Err(BadInput::new(
            "--dry-run costs naive model migration or estimates NeutronStar: give it with --strategy naive or neutronstar",
        )
        .into());
    }
    if !a.dry_run {
        return Err(BadInput::new(
            "--strategy naive cannot be trained (it is the per-layer model migration strawman, costed from the sampled batches); add --dry-run to report the bytes it would move per epoch",
        )
        .into());
    }
    if a.resume.is_some() {
        return Err(BadInput::new("--dry-run cannot be combined with --resume: give the run's flags instead").into());
    }
    let cfg = config(a)?;
    let name = cfg.dataset.clone();
    let r = train::naive_dry_run(&g.data(), &cfg).with_context(|| format!("cannot cost naive migration on {name}"))?;
    if g.json {
        return print_json(&r);
    }
    let mb = |b: f64| b / 1e6;
    println!(
        "naive per-layer model migration: {} on {} workers ({}), batch {} per worker, fanout {}, {} params",
        r.dataset, r.workers, r.partition, r.batch_size, r.fanouts, r.params
    );
    println!("epoch  iters      hops   MB total  MB params  MB partial  MB interm.  MB model-centric features");
    for e in &r.epochs {
        println!(
            "{:>5}  {:>5}  {:>8}  {:>9.2}  {:>9.2}  {:>10.2}  {:>10.2}  {:>26.2}",
            e.epoch + 1,
            e.iterations,
            e.hops,
            mb(e.bytes as f64),
            mb(e.bytes_params as f64),
            mb(e.bytes_partial as f64),
            mb(e.bytes_intermediate as f64),
            mb(e.bytes_features_model_centric as f64)
        );
    }
    println!(
        "per epoch: naive {:.2} MB vs model-centric remote features {:.2} MB (not trained: a dry run)",
        mb(r.bytes_per_epoch),
        mb(r.bytes_features_model_centric_per_epoch)
    );
    Ok(())
}

fn report(s: &RunSummary, dir: &std::path::Path) {
    let (Some(test), Some(val)) = (s.test_accuracy, s.best_val_accuracy) else {
        eprintln!(
            "run {}: stopped before its first evaluation, so there is no accuracy to report; {}",
            s.run,
            dir.display()
        );
        return;
    };
    eprintln!(
        "run {}: test accuracy {:.4} at best validation {:.4} (epoch {}), final loss {:.4}; {}",
        s.run,
        test,
        val,
        s.best_epoch + 1,
        s.final_loss,
        dir.display()
    );
    if let Some(n) = s.replica_checks {
        eprintln!(
            "--check-replicas: the {} replicas' weights were compared {n} times, identical every time",
            s.workers
        );
    }
}

/// The saved config of run `run` when it used several workers (resumed by the
/// distributed driver); `None` otherwise, or when unreadable (`train::resume`
/// then says why).
fn multi_worker_config(data: &leapgnn::DataDir, run: &str) -> Option<TrainConfig> {
    let ck = train::checkpoint::dir(&data.run_dir(run));
    train::checkpoint::load_config(&ck).ok().map(|(cfg, _)| cfg).filter(|cfg| cfg.workers > 1)
}

/// A resumed run keeps its config: flags that would change it are refused.
fn reject_on_resume(a: &Args) -> Result<(), BadInput> {
    let given = [
        ("NAME", a.dataset.is_some()),
        ("--workers", a.workers.is_some()),
        ("--parts", a.parts.is_some()),
        ("--strategy", a.strategy.is_some()),
        ("--model", a.model.is_some()),
        ("--fanout", a.fanout.is_some()),
        ("--layers", a.layers.is_some()),
        ("--eval-fanout", a.eval_fanout.is_some()),
        ("--batch-size", a.batch_size.is_some()),
        ("--eval-batch-size", a.eval_batch_size.is_some()),
        ("--hidden", a.hidden.is_some()),
        ("--heads", a.heads.is_some()),
        ("--lr", a.lr.is_some()),
        ("--weight-decay", a.weight_decay.is_some()),
        ("--dropout", a.dropout.is_some()),
        ("--optimizer", a.optimizer.is_some()),
        ("--seed", a.seed.is_some()),
        ("--cache-mb", a.cache_mb.is_some()),
        ("--cache-policy", a.cache_policy.is_some()),
        ("--time-steps", a.time_steps.is_some()),
        ("--merge-plan", a.merge_plan.is_some()),
        ("--migration", a.migration.is_some()),
        ("--prefetch", a.prefetch),
        ("--cluster", a.cluster.is_some()),
        ("--device", a.device.is_some()),
        ("--normalize", a.normalize.is_some()),
        ("--mode", a.mode.is_some()),
        ("--full-batch", a.full_batch),
        ("--eval", a.eval.is_some()),
        ("--partition", a.partition.is_some()),
        ("--compression", a.compression.is_some()),
        ("--max-ratio", a.max_ratio.is_some()),
        ("--min-ratio", a.min_ratio.is_some()),
        ("--slope", a.slope.is_some()),
        ("--ratio", a.ratio.is_some()),
        ("--rounds", a.rounds.is_some()),
        ("--chunks", a.chunks.is_some()),
        ("--history", a.history.is_some()),
        ("--pipeline-groups", a.pipeline_groups.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(BadInput::new(format!(
            "{flag} cannot be given with --resume: a resumed run keeps its saved config (only --epochs and --checkpoint-every may change)"
        ))),
        None => Ok(()),
    }
}

/// Values are parsed here rather than by clap so a bad one is a one-line error.
/// Each names its flag, whatever the value's own parser says.
fn parse<T: std::str::FromStr<Err = BadInput>>(flag: &str, v: &Option<String>, default: T) -> Result<T, BadInput> {
    v.as_deref().map_or(Ok(default), |s| {
        s.parse().map_err(|e: BadInput| if e.0.contains(flag) { e } else { BadInput::new(format!("{flag}: {e}")) })
    })
}

fn config(a: &Args) -> Result<TrainConfig, BadInput> {
    if a.strategy.as_deref() == Some(RETEXO) {
        return retexo_config(a);
    }
    if let Some(r) = a.rounds {
        return Err(BadInput::new(format!(
            "--rounds {r} applies to --strategy retexo only; give the length of other runs with --epochs"
        )));
    }
    // Costed, never trained: both estimate from model-centric's batches.
    let costed = matches!(a.strategy.as_deref(), Some(NAIVE | NEUTRONSTAR));
    let strategy =
        if costed { StrategyKind::ModelCentric } else { parse("--strategy", &a.strategy, StrategyKind::ModelCentric)? };
    let varco = strategy == StrategyKind::Varco;
    let gnnpipe = strategy == StrategyKind::Gnnpipe;
    let d = if varco { varco::defaults(TrainConfig::default()) } else { TrainConfig::default() };
    // VARCO and GNNPipe imply the full-graph engine; an explicit --mode minibatch is refused by the config's check.
    let mode = if a.full_batch || ((varco || gnnpipe) && a.mode.is_none()) {
        TrainMode::FullGraph
    } else {
        parse("--mode", &a.mode, d.mode)?
    };
    if mode == TrainMode::FullGraph {
        return full_graph_config(a, d, mode);
    }
    let fanouts = parse("--fanout", &a.fanout, d.fanouts)?;
    if let Some(l) = a.layers
        && l != fanouts.layers()
    {
        return Err(BadInput::new(format!(
            "--layers {l} does not match --fanout {fanouts} ({} layers): give one fanout per layer",
            fanouts.layers()
        )));
    }
    let eval_fanouts = match a.eval_fanout.as_deref() {
        None => fanouts.clone(),
        Some(s) if s.eq_ignore_ascii_case("all") => Fanouts::all(fanouts.layers()),
        Some(_) => parse("--eval-fanout", &a.eval_fanout, fanouts.clone())?,
    };
    let eval = match &a.eval {
        Some(_) => parse("--eval", &a.eval, EvalMode::Sampled)?,
        None if eval_fanouts.0.iter().all(|f| *f == Fanout::All) => EvalMode::Full,
        None => EvalMode::Sampled,
    };
    let workers = a.workers.unwrap_or(d.workers);
    let time_steps = match a.time_steps.as_deref() {
        // Each strategy's own count; leapgnn follows its plan, else tunes.
        None => match strategy {
            StrategyKind::Micrograph | StrategyKind::Pregather => Some(workers as u32),
            StrategyKind::Leapgnn => a.merge_plan.as_deref().map(MergePlan::load).transpose()?.map(|p| p.time_steps),
            _ => d.time_steps,
        },
        Some("auto") => None,
        Some(s) => {
            let t = s.parse().map_err(|_| BadInput::new(format!("--time-steps `{s}`: expected a number or `auto`")))?;
            if matches!(strategy, StrategyKind::Micrograph | StrategyKind::Pregather) && t as usize != workers {
                return Err(BadInput::new(format!(
                    "--time-steps {t} does not apply to --strategy {strategy}, which always takes one time step per \
                     worker ({workers}); use --strategy leapgnn to choose the number of time steps"
                )));
            }
            Some(t)
        }
    };
    Ok(TrainConfig {
        dataset: a.dataset.clone().unwrap_or(d.dataset),
        strategy,
        workers,
        // One part per worker unless told otherwise.
        parts: a.parts.or(a.workers).unwrap_or(d.parts),
        model: parse("--model", &a.model, d.model)?,
        fanouts,
        eval_fanouts,
        batch_size: a.batch_size.unwrap_or(d.batch_size),
        eval_batch_size: a.eval_batch_size.unwrap_or(d.eval_batch_size),
        hidden: a.hidden.unwrap_or(d.hidden),
        heads: a.heads.unwrap_or(d.heads),
        epochs: a.epochs.unwrap_or(d.epochs),
        lr: a.lr.unwrap_or(d.lr),
        weight_decay: a.weight_decay.unwrap_or(d.weight_decay),
        dropout: a.dropout.unwrap_or(d.dropout),
        optimizer: parse("--optimizer", &a.optimizer, d.optimizer)?,
        seed: a.seed.unwrap_or(d.seed),
        checkpoint_every: a.checkpoint_every.unwrap_or(d.checkpoint_every),
        device: parse("--device", &a.device, d.device)?,
        normalize: parse("--normalize", &a.normalize, d.normalize)?,
        cache_mb: a.cache_mb.unwrap_or(d.cache_mb),
        cache_policy: parse("--cache-policy", &a.cache_policy, d.cache_policy)?,
        time_steps,
        merge_plan: a.merge_plan.clone(),
        migration: parse("--migration", &a.migration, d.migration)?,
        cluster: a.cluster.clone(),
        prefetch: a.prefetch,
        mode,
        eval,
        partition: a.partition.clone(),
        rounds: None,
        varco: varco_config(a, varco)?,
        gnnpipe: gnnpipe_config(a, gnnpipe)?,
    })
}

/// `--strategy varco`'s flags (always a config for varco, so the run's
/// config.json shows them; for another strategy, one if any flag was given,
/// which the config's check then refuses).
fn varco_config(a: &Args, varco: bool) -> Result<Option<varco::VarcoConfig>, BadInput> {
    let given = a.compression.is_some() || a.max_ratio.is_some() || a.min_ratio.is_some() || a.slope.is_some();
    if !varco && !given && a.ratio.is_none() {
        return Ok(None);
    }
    let d = varco::VarcoConfig::default();
    let implied = if a.ratio.is_some() { varco::Compression::Fixed } else { d.compression };
    Ok(Some(varco::VarcoConfig {
        compression: parse("--compression", &a.compression, implied)?,
        max_ratio: a.max_ratio.unwrap_or(d.max_ratio),
        min_ratio: a.min_ratio.unwrap_or(d.min_ratio),
        slope: a.slope.unwrap_or(d.slope),
        ratio: a.ratio,
    }))
}

/// `--strategy gnnpipe`'s flags (always a config for gnnpipe; for another
/// strategy, one if a flag was given, which the config's check refuses).
fn gnnpipe_config(a: &Args, gnnpipe: bool) -> Result<Option<gnnpipe::GnnPipeConfig>, BadInput> {
    if !gnnpipe && a.chunks.is_none() && a.history.is_none() && a.pipeline_groups.is_none() {
        return Ok(None);
    }
    let d = gnnpipe::GnnPipeConfig::default();
    let history = match a.history.as_deref() {
        None => d.history,
        Some("on") => true,
        Some("off") => false,
        Some(h) => return Err(BadInput::new(format!("--history `{h}`: expected on or off"))),
    };
    Ok(Some(gnnpipe::GnnPipeConfig {
        chunks: a.chunks.unwrap_or(d.chunks),
        history,
        groups: a.pipeline_groups.unwrap_or(d.groups),
    }))
}

const RETEXO: &str = "retexo";

/// `--strategy retexo`: the full-graph engine, and the authors' settings
/// wherever the flag is not given (2 layers, hidden 256, 200 rounds per
/// layer, lr 0.003, weight decay 5e-4, dropout 0.3, GAT 8 heads).
fn retexo_config(a: &Args) -> Result<TrainConfig, BadInput> {
    if let Some(m) = a.mode.as_deref().filter(|_| !a.full_batch) {
        let mode: TrainMode = m.parse().map_err(|e: BadInput| BadInput::new(format!("--mode: {e}")))?;
        if mode != TrainMode::FullGraph {
            return Err(BadInput::new(format!(
                "--mode {m} with --strategy retexo: RETEXO trains on the full graph, one layer at a time (it implies \
                 --mode full-graph); omit --mode"
            )));
        }
    }
    if let Some(e) = a.epochs {
        return Err(BadInput::new(format!(
            "--epochs {e} with --strategy retexo: a RETEXO run is --layers x --rounds rounds (one per epoch); give --rounds \
             (rounds per layer) instead"
        )));
    }
    let rounds = a.rounds.unwrap_or(200);
    if rounds == 0 {
        return Err(BadInput::new(
            "--rounds 0: each RETEXO stage (layer) trains at least 1 round; give --rounds 1 or more",
        ));
    }
    let layers = a.layers.unwrap_or(2);
    let full = Args {
        strategy: None,
        mode: Some("full-graph".into()),
        full_batch: false,
        layers: Some(layers),
        hidden: a.hidden.or(Some(256)),
        heads: a.heads.or(Some(8)),
        lr: a.lr.or(Some(0.003)),
        weight_decay: a.weight_decay.or(Some(5e-4)),
        dropout: a.dropout.or(Some(0.3)),
        epochs: Some(rounds.saturating_mul(layers as u64)),
        rounds: None,
        ..a.clone()
    };
    let mut cfg = config(&full)?;
    cfg.strategy = StrategyKind::Retexo;
    cfg.rounds = Some(rounds);
    cfg.check()?;
    Ok(cfg)
}

/// `--mode full-graph`: every layer reads the whole neighbourhood, so sampling
/// flags are refused rather than ignored.
fn full_graph_config(a: &Args, d: TrainConfig, mode: TrainMode) -> Result<TrainConfig, BadInput> {
    for (flag, given) in [
        ("--fanout", a.fanout.is_some()),
        ("--eval-fanout", a.eval_fanout.is_some()),
        ("--batch-size", a.batch_size.is_some()),
        ("--time-steps", a.time_steps.is_some()),
        ("--merge-plan", a.merge_plan.is_some()),
        ("--migration", a.migration.is_some()),
        ("--prefetch", a.prefetch),
    ] {
        if given {
            return Err(BadInput::new(format!(
                "{flag} applies to sampled mini-batch training; --mode full-graph trains on every neighbour of every \
                 node (give the number of layers with --layers), so omit {flag} or use --mode minibatch"
            )));
        }
    }
    // The mini-batch parse of the same flags, then the mode set back.
    let mut m = Args { mode: Some("minibatch".into()), full_batch: false, ..a.clone() };
    let layers = a.layers.unwrap_or(d.fanouts.layers());
    if layers == 0 {
        return Err(BadInput::new("--layers must be at least 1"));
    }
    m.fanout = Some(vec!["all"; layers].join(","));
    m.eval_fanout = Some("all".into());
    m.eval = Some(a.eval.clone().unwrap_or_else(|| "full".into()));
    let mut cfg = config(&m)?;
    cfg.mode = mode;
    Ok(cfg)
}

/// `--strategy neutronstar --dry-run`: trains model-centric with the same
/// flags, then reports the paper's NeutronStar estimate from that run.
fn neutronstar(g: &Global, a: &Args) -> anyhow::Result<()> {
    if !a.dry_run {
        return Err(BadInput::new(
            "--strategy neutronstar cannot be trained here (LeapGNN's paper estimates it from a model-centric run); \
             add --dry-run to train model-centric with these flags and report the estimate",
        )
        .into());
    }
    if a.resume.is_some() {
        return Err(BadInput::new("--dry-run cannot be combined with --resume: give the run's flags instead").into());
    }
    let cfg = config(a)?;
    let name = cfg.dataset.clone();
    let data = g.data();
    let opts = RunOptions { run: a.run.clone(), ..Default::default() };
    let mut quiet = train::Quiet;
    let r = if cfg.workers > 1 {
        let mut args = vec!["--data-dir".into(), data.root.display().to_string()];
        args.extend((0..g.verbose).map(|_| "-v".to_string()));
        let launcher = LocalLauncher::current(args)?.with_log(Arc::new(|l| eprintln!("{l}")));
        let dist = DistOptions {
            launcher: &launcher,
            interrupted: signals::forced_flag(),
            comm_timeout: Duration::from_secs_f64(a.comm_timeout),
            check_replicas: 0,
            dump_grad: None,
            worker_lines: None,
            driver_bind: Profile::local().driver_bind(),
            auto_planner: None,
            restarts: 0,
        };
        train::neutronstar::estimate(&data, cfg, |d, c| train_distributed(d, c, &opts, &dist, &mut quiet))
    } else {
        train::neutronstar::estimate(&data, cfg, |d, c| Ok(train::train(d, c, &opts, &mut quiet)?))
    }
    .with_context(|| format!("cannot estimate NeutronStar on {name}"))?;
    if g.json {
        return print_json(&r);
    }
    println!(
        "NeutronStar estimate (not a run) from model-centric run {}: {} on {} workers ({}), {} epochs",
        r.run, r.dataset, r.workers, r.partition, r.epochs
    );
    println!(
        "computation graph: n {} -> n' {}, e {} -> e' {}; c_fetch {:.3e} s per remote row",
        r.n, r.n_prime, r.e, r.e_prime, r.c_fetch
    );
    println!(
        "per epoch: model-centric {:.3} s (compute {:.3} s) -> NeutronStar estimate {:.3} s ({:.2}x)",
        r.t_total_per_epoch,
        r.t_comp_per_epoch,
        r.estimate_per_epoch,
        r.t_total_per_epoch / r.estimate_per_epoch.max(f64::MIN_POSITIVE)
    );
    Ok(())
}
