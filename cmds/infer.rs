use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::cluster::check::ssh_job_launcher;
use leapgnn::cluster::ship::{ShipItem, rank_data_files};
use leapgnn::cluster::{Allocation, Launcher, LauncherKind, LogSink, Profile, SlurmLauncher};
use leapgnn::progress::signals;
use leapgnn::train::DeviceKind;
use leapgnn::train::distributed::{InferLaunch, infer_distributed};
use leapgnn::train::infer::{InferOptions, infer, run_config};
use std::path::PathBuf;

/// Predictions (class and probabilities) and optionally hidden embeddings of every node of a trained run,
/// from layer-wise inference over the whole graph, keyed by node id.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The run (a name under <data-dir>/runs/).
    pub run: String,
    /// Output file [default: runs/<run>/predictions.safetensors, or the directory predictions/ with --format npy].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// safetensors (`node_id`, `prediction`, `probs`, `embeddings`) or npy (a directory of <field>.npy).
    #[arg(long, default_value = "safetensors")]
    pub format: String,
    /// Also write the output of hidden layer LAYER (0 = the first layer's) as `embeddings` (a RETEXO run:
    /// stage LAYER's embedding, the input of stage LAYER + 1).
    #[arg(long, value_name = "LAYER", allow_negative_numbers = true)]
    pub embeddings: Option<usize>,
    /// Only these node ids (whitespace-separated text), in this order; an id listed twice gets its row twice, as
    /// `probs[ids]` would in NumPy or PyTorch.
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<PathBuf>,
    /// Distributed inference on W local worker processes, each scoring the nodes of its METIS part (W parts,
    /// the run's seed: the run's own partition when it trained on W workers). Without it (and without
    /// --cluster) inference runs in this process.
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    pub workers: Option<usize>,
    /// Distributed inference over a cluster profile (TOML): `launcher = "local"` runs --workers local processes
    /// [default: as many as the run trained on]; `launcher = "ssh"` one worker per slot of its hosts, shipping
    /// binary, data and the run's weights over SFTP; `slurm`, inside an allocation: one worker per task.
    #[arg(long, value_name = "PROFILE")]
    pub cluster: Option<PathBuf>,
    /// With an ssh profile: record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long, requires = "cluster")]
    pub accept_new_host_keys: bool,
    /// With an ssh profile: keep the checkpoint shipped to the hosts (in <data_dir>/runs/RUN there) when
    /// inference ends; by default that directory is removed.
    #[arg(long, requires = "cluster")]
    pub keep_remote: bool,
    /// Where the model runs: cpu, cuda (GPU 0) or cuda:N [default: the device the run trained on].
    #[arg(long, value_name = "cpu|cuda[:N]")]
    pub device: Option<DeviceKind>,
    /// Memory in MiB that the processes on this machine (this one, and the local workers) may use together,
    /// checked before inference starts [default: this machine's MemAvailable, and each process within the
    /// address-space limit (ulimit -v) it inherits].
    #[arg(long, allow_negative_numbers = true)]
    pub memory_limit_mb: Option<u64>,
    /// Seconds any worker waits for another before failing with that worker's name.
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub comm_timeout: f64,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    let opts = InferOptions {
        out: a.out.clone(),
        format: a.format.parse()?,
        embeddings: a.embeddings,
        nodes: a.nodes.clone(),
        device: a.device,
        memory_limit: a.memory_limit_mb.map(|m| m.saturating_mul(1 << 20)),
    };
    let r = if a.workers.is_none() && a.cluster.is_none() {
        infer(&g.data(), &a.run, &opts).with_context(|| format!("inference with run {} failed", a.run))?
    } else {
        distributed(g, &a, &opts)?
    };
    if g.json {
        return print_json(&r);
    }
    leapgnn::elog!(
        "{} nodes: predictions written to {} in {:.2} s ({} worker(s), {:.1} MB moved) with the checkpoint of \
         iteration {}; accuracy train {:.4}, val {:.4}, test {:.4}",
        r.nodes,
        r.out.display(),
        r.seconds,
        r.workers,
        r.bytes as f64 / 1e6,
        r.checkpoint_iteration,
        r.accuracy.train,
        r.accuracy.val,
        r.accuracy.test
    );
    Ok(())
}

/// `--workers` / `--cluster`: the driver starts the workers (local processes,
/// or one per slot of an ssh profile's hosts) and writes what they score.
fn distributed(g: &Global, a: &Args, opts: &InferOptions) -> anyhow::Result<leapgnn::train::infer::InferReport> {
    let comm_timeout = crate::train::comm_timeout(a.comm_timeout)?;
    let data = g.data();
    let profile = a.cluster.as_deref().map(Profile::load_or_builtin).transpose()?;
    // A local profile is set aside below, but its `encrypt = true` holds for local workers too (and its
    // `binary` starts them).
    let encrypt = profile.as_ref().is_some_and(|p| p.encrypt);
    let (profile, local_profile) = match profile {
        Some(p) if p.launcher == LauncherKind::Local => (None, Some(p)),
        p => (p, None),
    };
    if let Some(p) = &profile {
        crate::train::warn_profile(p);
    }
    let mut workers = a.workers;
    let mut slurm = None;
    if profile.as_ref().is_some_and(|p| p.launcher == LauncherKind::Slurm) {
        let p = profile.as_ref().expect("a Slurm profile");
        let alloc = Allocation::from_env(a.workers)?;
        let world = alloc.world();
        workers = Some(world);
        let binary = match &p.binary {
            Some(b) => b.clone(),
            None => std::env::current_exe().context("cannot find the leapgnn executable to start workers")?,
        };
        let mut l = SlurmLauncher::new(alloc, binary, crate::train::worker_args(g, &data)?);
        if p.sbcast {
            l = l.with_sbcast(std::path::Path::new(&p.remote_dir), sbcast_items(&data, &a.run, world)?);
        }
        slurm = Some(l);
    } else if let Some(p) = &profile {
        let slots = p.world();
        if let Some(w) = a.workers.filter(|&w| w != slots) {
            return Err(BadInput::new(format!(
                "--workers {w}, but the cluster profile {} has {slots} worker slots (the sum of its hosts' \
                 `workers`): omit --workers or change the profile",
                p.name()
            ))
            .into());
        }
        workers = Some(slots);
    }
    // Ctrl-C stops the workers, then the driver (nothing to finish or checkpoint).
    signals::install(signals::OnForce::Flag, true).context("cannot install the Ctrl-C / SIGTERM handler")?;
    let log: LogSink = leapgnn::cluster::launcher::stderr_log();
    let ssh = match profile.filter(|_| slurm.is_none()) {
        Some(p) => {
            let cfg = run_config(&data, &a.run)?;
            let w = workers.unwrap_or(cfg.workers);
            // The METIS partition the workers score by; `infer_distributed` cuts it after its checks.
            let l = ssh_job_launcher(p, a.accept_new_host_keys, &data, &cfg.dataset, "metis", (w, w), None)?;
            Some(l.with_log(log.clone()))
        }
        None => None,
    };
    let local;
    let launcher: &dyn Launcher = match (&ssh, &slurm) {
        (Some(l), _) => l,
        (_, Some(l)) => l,
        _ => {
            local = crate::train::local_launcher(g, &data, log, local_profile.as_ref())?;
            &local
        }
    };
    let launch = InferLaunch {
        launcher,
        interrupted: signals::forced_flag(),
        stop_requested: &signals::stop_requested,
        comm_timeout,
        driver_bind: match (&ssh, &slurm) {
            (Some(l), _) => l.profile().driver_bind(),
            (_, Some(_)) => Profile::slurm().driver_bind(),
            _ => Profile::local().driver_bind(),
        },
        keep_remote: a.keep_remote,
        encrypt,
    };
    let result = infer_distributed(&data, &a.run, opts, workers, &launch);
    let result = match &ssh {
        Some(l) => result.map_err(|e| crate::train::name_host(l.profile(), e)),
        None => result,
    };
    result.with_context(|| format!("inference with run {} failed", a.run))
}

/// `sbcast = true`: what the workers of an inference on `world` of them read
/// under the data directory: the dataset archive and the METIS partition in
/// `world` parts they score by (`ship::rank_data_files`, as an ssh host is
/// sent them); the weights go with the job, as the driver checked them. The
/// files are copied as the first worker starts: `infer_distributed` cuts a
/// missing partition before that, after its memory checks, so a refused run
/// leaves none behind.
fn sbcast_items(data: &leapgnn::DataDir, run: &str, world: usize) -> anyhow::Result<Vec<ShipItem>> {
    let cfg = run_config(data, run)?;
    let files = |rank| rank_data_files(data, &cfg.dataset, "metis", (world, world), rank);
    Ok((0..world).flat_map(files).collect::<std::collections::BTreeSet<_>>().into_iter().collect())
}
