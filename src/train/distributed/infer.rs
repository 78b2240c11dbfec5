//! `infer RUN --workers W | --cluster PROFILE`: the distributed layer-wise
//! inference on W worker processes, started by the same launchers as `train`.
//! Every worker owns one METIS part (W parts, the run's seed: the run's own
//! partition when it trained on W workers), loads the checkpoint's weights,
//! scores its owned nodes with one halo exchange per layer, and streams their
//! rows to the driver in bounded chunks; the driver places them by node id
//! and writes the file `infer` writes in-process.

use super::worker::join_mesh;
use super::{FetchingRows, driver};
use crate::cluster::driver::{DriverOptions, Event, run_job};
use crate::cluster::worker_session::{Job, Reporter};
use crate::cluster::{Launcher, ToDriver};
use crate::comm::{ByteCounts, FeatureClient, FetchStats, Owners, PartRows, RowSource, serve_features};
use crate::format::{DatasetFile, ManifestFile};
use crate::metrics::add_bytes;
use crate::train::infer::{
    CHUNK_BYTES, InferOptions, InferReport, Scores, SplitAccuracy, check_memory, prepare, score, write_outputs,
};
use crate::train::{Collective, FeatureSource, GraphData, MeshCollective, TrainConfig, TrainError, Worker, checkpoint};
use crate::{BadInput, DataDir};
use anyhow::Context;
use base64::Engine as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How the inference workers are started and watched.
pub struct InferLaunch<'a> {
    pub launcher: &'a dyn Launcher,
    /// Set by the Ctrl-C handler: stops the workers.
    pub interrupted: &'a AtomicBool,
    /// A first Ctrl-C: inference has no iteration to finish, so it stops the
    /// workers at once too (sets `interrupted`).
    pub stop_requested: &'a dyn Fn() -> bool,
    /// Bound of every wait between workers.
    pub comm_timeout: Duration,
    /// Where the control listener binds (the profile's `driver_bind`).
    pub driver_bind: SocketAddr,
    /// `--keep-remote`: leave the checkpoint shipped to the hosts there.
    pub keep_remote: bool,
    /// The profile's `encrypt = true`: control connections and mesh carry sealed records.
    pub encrypt: bool,
}

/// The `infer` task of a job, as every worker receives it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct InferJob {
    pub config: TrainConfig,
    /// Paths as in `DistJob`: absolute, or relative to the worker's data directory.
    pub dataset: PathBuf,
    /// None with one worker (it owns every node).
    pub parts_dir: Option<PathBuf>,
    pub checkpoint: PathBuf,
    /// The weights file in `checkpoint` the driver checked (`Prepared::weights`).
    pub weights: PathBuf,
    /// As `Prepared::weights_sha256` (a driver of a version before it sends none).
    #[serde(default)]
    pub weights_sha256: Option<String>,
    pub embeddings: Option<usize>,
    pub comm_timeout_ms: u64,
    /// As `DistJob::partition_checksum`.
    #[serde(default)]
    pub partition_checksum: Option<u64>,
    /// As `DistJob::placement`.
    #[serde(flatten)]
    pub placement: super::Placement,
}

/// One chunk of a worker's rows (`ToDriver::Metrics`): f32 little-endian, base64.
#[derive(serde::Serialize, serde::Deserialize)]
struct InferRows {
    nodes: Vec<u32>,
    logits: String,
    embeddings: Option<String>,
}

/// What an inference worker sends as `ToDriver::Done`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct InferDone {
    pub rank: usize,
    /// Nodes this worker owns (and scored).
    pub nodes: u64,
    /// Everything this worker's mesh moved.
    pub bytes: ByteCounts,
    pub seconds: f64,
    /// This worker's peak RSS (a worker of a version before it sends none).
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
}

/// Runs inference with run `run`'s last checkpoint on `workers` workers
/// (default: as many as the run trained on) and writes what `infer` writes.
pub fn infer_distributed(
    data: &DataDir,
    run: &str,
    opts: &InferOptions,
    workers: Option<usize>,
    launch: &InferLaunch<'_>,
) -> anyhow::Result<InferReport> {
    let result = infer_on_workers(data, run, opts, workers, launch);
    // The hosts' copies of the checkpoint were shipped from the driver's: nothing of them is lost.
    let forced = launch.interrupted.load(Ordering::SeqCst);
    if launch.launcher.shares_files() {
        // Workers stopped by force left their marks in the run's directory.
        crate::cluster::run_busy::remove_stale(&data.run_dir(run));
    }
    if !launch.keep_remote && !forced && !launch.launcher.shares_files() {
        for (warn, line) in driver::remove_remote_run(launch.launcher, data, run) {
            if warn {
                tracing::warn!("{line}");
            } else {
                tracing::info!("{line}");
            }
        }
    }
    result
}

fn infer_on_workers(
    data: &DataDir,
    run: &str,
    opts: &InferOptions,
    workers: Option<usize>,
    launch: &InferLaunch<'_>,
) -> anyhow::Result<InferReport> {
    let t0 = Instant::now();
    let (prep, ds) = prepare(data, run, opts, false)?;
    let cfg = &prep.cfg;
    let world = workers.unwrap_or(cfg.workers);
    if world == 0 || world > ds.num_nodes() || world > usize::from(u16::MAX) {
        return Err(BadInput::new(format!(
            "--workers {world}: expected 1 to {} workers (one METIS part of {}'s {} nodes each)",
            ds.num_nodes().min(usize::from(u16::MAX)),
            cfg.dataset,
            ds.num_nodes()
        ))
        .into());
    }
    // Held here: the workers that share this machine's memory (every local process; under Slurm the batch
    // step's node's ranks, whether or not they share its files), as `train`'s driver holds them.
    let local = launch.launcher.local_workers(world);
    let check =
        |owners: Option<&[u16]>| check_memory(&prep, &ds, opts, owners, (world, Some(local), launch.launcher.kind()));
    // One worker owns every node: no partition. Else the shares are checked
    // on the partition once it is cut, before it is written: a refused run leaves none.
    let parts_dir = match world {
        1 => {
            check(None)?;
            None
        }
        _ => {
            Some(crate::partition::ensure_partition_checked(data, &cfg.dataset, "metis", world, cfg.seed, &mut |p| {
                Ok(check(Some(&crate::format::node_worker(p, world, world)))?)
            })?)
        }
    };
    let mut partition_checksum = None;
    if let Some(p) = &parts_dir {
        // A partition of another version of the dataset is refused here, before any worker starts.
        let m = ManifestFile::open(p)?;
        m.check_matches(&ds, world)?;
        partition_checksum = Some(m.checksum());
    }
    let root = driver::absolute(&data.root)?;
    let on_worker = |p: &std::path::Path| driver::worker_path(launch.launcher, &root, &driver::absolute(p)?);
    let pinned = WeightsCopy::write(&prep);
    let checked = pinned.as_ref().map_or(&prep.weights, |c| &c.path);
    let weights = if launch.launcher.shares_files() {
        on_worker(checked)?
    } else {
        // The hosts get the bytes checked here, under the checkpoint's own name, whatever the run has
        // written or removed since. Only these: the checkpoint's state.json is read here, and what a
        // worker needs of it travels in the job (the config, the weights' name and sha256); no worker
        // reads it, and a host left without it holds no checkpoint that cleanup must keep.
        let there = on_worker(&prep.weights)?;
        launch.launcher.ship_with_job(vec![(driver::absolute(checked)?, there.clone())]);
        there
    };
    crate::util::interrupt::test_pause("infer-weights-copied");
    let job = InferJob {
        config: cfg.clone(),
        dataset: on_worker(&prep.dataset)?,
        parts_dir: parts_dir.as_deref().map(on_worker).transpose()?,
        checkpoint: on_worker(&prep.checkpoint)?,
        weights,
        weights_sha256: prep.weights_sha256.clone(),
        embeddings: opts.embeddings,
        comm_timeout_ms: launch.comm_timeout.as_millis() as u64,
        partition_checksum,
        placement: super::Placement::of(launch.launcher, world, opts.memory_limit),
    };
    let task = serde_json::json!({ "task": "infer", "infer": job });
    let part = parts_dir.as_ref().map_or_else(|| "none".into(), |p| p.display().to_string());
    tracing::info!("infer {run}: {} nodes of {} on {world} workers, partition {part}", ds.num_nodes(), cfg.dataset);

    let classes = ds.num_classes();
    let mut scores = Scores::new(ds.num_nodes(), classes, prep.width, opts.embeddings.is_some());
    let mut failure: Option<anyhow::Error> = None;
    let driver_opts = DriverOptions {
        silence_timeout: (launch.comm_timeout * 2).max(Duration::from_secs(10)),
        bind: launch.driver_bind,
        // A run trained with --encrypt keeps it (config.json), as `train --resume` does:
        // its features and embeddings cross the network sealed here too.
        encrypt: launch.encrypt || cfg.encrypt,
        ..DriverOptions::default()
    };
    let values = run_job(launch.launcher, world, &task, &driver_opts, launch.interrupted, |ev| {
        let outcome = match ev {
            Event::Metrics(rank, v) => place(&mut scores, v).with_context(|| format!("worker {rank} sent bad rows")),
            Event::Log(rank, line) => {
                super::log_worker_line(rank, &line);
                Ok(())
            }
            Event::Done(..) | Event::Idle => Ok(()),
        };
        if let Err(e) = outcome {
            failure.get_or_insert(e);
        }
        if (launch.stop_requested)() {
            launch.interrupted.store(true, Ordering::SeqCst);
        }
    })
    .with_context(|| format!("distributed inference of run {run} on {world} workers failed"))?;
    if let Some(e) = failure {
        return Err(e);
    }
    let done: Vec<InferDone> = values
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .context("a worker's final report is malformed")?;
    if scores.missing > 0 {
        return Err(TrainError::Rows(format!(
            "the {world} workers scored {} of {} nodes (are driver and workers the same version?)",
            ds.num_nodes() - scores.missing,
            ds.num_nodes()
        ))
        .into());
    }
    let mut bytes = crate::metrics::ByteCounts::default();
    let mut peaks: Vec<(usize, u64)> = done.iter().filter_map(|d| Some((d.rank, d.peak_rss_bytes?))).collect();
    peaks.sort_unstable();
    for d in &done {
        add_bytes(&mut bytes, &d.bytes.sent);
    }
    let out = write_outputs(&prep, opts, &scores)?;
    let accuracy = SplitAccuracy::of(&ds, &cfg.dataset, &scores)?;
    Ok(InferReport {
        run: run.to_string(),
        out,
        nodes: prep.nodes.len() as u64,
        seconds: t0.elapsed().as_secs_f64(),
        bytes: bytes.total(),
        workers: world,
        checkpoint_iteration: prep.iteration,
        bytes_by_category: bytes,
        accuracy,
        peak_rss_bytes: peaks.into_iter().map(|(_, p)| p).collect(),
        driver_peak_rss_bytes: crate::util::peak_rss_bytes(),
    })
}

/// The weights the driver checked, copied for the workers (or, without
/// shared files, to be shipped to them): a run still training writes a new
/// checkpoint at every save and removes the files of the one before, so the
/// checkpoint's own file could be gone, or another, by the time a worker
/// reads it. Removed on drop; held locked while it exists, so that a copy an
/// infer killed left behind is told from a live one (`remove_stale_copies`)
/// without trusting a pid that may have been reused.
struct WeightsCopy {
    path: PathBuf,
    _held: std::fs::File,
}

/// The name of every copy starts so.
const COPY_PREFIX: &str = ".infer-";

/// Removes the weights copies in run directory `run_dir` whose infer is
/// gone (killed before it could remove its own): called by every infer and
/// train of the run as it starts.
pub(crate) fn remove_stale_copies(run_dir: &std::path::Path) {
    crate::cluster::run_busy::remove_unheld(run_dir, |name| name.starts_with(COPY_PREFIX));
}

impl WeightsCopy {
    /// `None` when the run's directory takes no file (read-only): the
    /// workers then read the checkpoint's own file, as good for a run that has ended.
    fn write(prep: &crate::train::infer::Prepared) -> Option<WeightsCopy> {
        static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COPIES.fetch_add(1, Ordering::Relaxed);
        let name = prep.weights.file_name()?.to_string_lossy();
        let path = prep.run_dir.join(format!("{COPY_PREFIX}{}-{n}.{name}", std::process::id()));
        match crate::format::write_atomic_held(&path, &prep.weight_bytes) {
            Ok(held) => Some(WeightsCopy { path, _held: held }),
            Err(e) => {
                tracing::warn!("cannot copy the checked weights for the workers ({e}): they read {}", name);
                None
            }
        }
    }
}

impl Drop for WeightsCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn place(scores: &mut Scores, v: serde_json::Value) -> anyhow::Result<()> {
    let r: InferRows = serde_json::from_value(v).context("malformed rows")?;
    let logits = decode(&r.logits)?;
    let emb = r.embeddings.as_deref().map(decode).transpose()?;
    scores.place(&r.nodes, &logits, emb.as_deref()).map_err(|e| anyhow::anyhow!(e))
}

fn encode(rows: &[f32]) -> String {
    let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode(s: &str) -> anyhow::Result<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).context("rows are not base64")?;
    anyhow::ensure!(bytes.len() % 4 == 0, "{} bytes of rows is not a whole number of f32", bytes.len());
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Runs the `infer` task of `job`; returns the `InferDone` value for the driver.
pub fn run_infer_worker(job: Job, reporter: &Reporter, data: &DataDir) -> anyhow::Result<serde_json::Value> {
    let t0 = Instant::now();
    let mut spec: InferJob = serde_json::from_value(job.config.get("infer").cloned().unwrap_or_default())
        .context("the driver sent a malformed infer job (are driver and worker the same version?)")?;
    let paths = [Some(&mut spec.dataset), spec.parts_dir.as_mut(), Some(&mut spec.checkpoint), Some(&mut spec.weights)];
    for p in paths.into_iter().flatten() {
        if p.is_relative() {
            *p = data.root.join(&*p);
        }
    }
    let (rank, world) = (job.rank, job.world);
    // The checkpoint shipped here is in the run's directory on this host.
    let _busy = spec.checkpoint.parent().and_then(|run_dir| crate::cluster::run_busy::mark_infer(run_dir, rank));
    let cfg = &spec.config;
    let timeout = Duration::from_millis(spec.comm_timeout_ms.max(1));

    let ds = DatasetFile::open_verified(&spec.dataset)?;
    let manifest = match &spec.parts_dir {
        Some(p) => {
            let m = Arc::new(ManifestFile::open(p)?);
            super::check_partition(&m, p, spec.partition_checksum)?;
            m.verify()?;
            m.check_matches(&ds, world)?;
            Some((p.clone(), m))
        }
        None if world == 1 => None,
        None => anyhow::bail!("the driver sent an infer job for {world} workers without a partition"),
    };
    let (model, params, _, device) = crate::train::build_model(cfg, &ds)?;
    let owners = manifest.as_ref().map(|(_, m)| Owners::of_workers(m.clone(), world));
    let width = spec.embeddings.map_or(0, |l| model.out_dim(l));
    crate::train::infer::check_worker(
        &ds,
        cfg,
        owners.as_ref().map(Owners::as_slice),
        (rank, world),
        (&spec.placement.host_ranks(rank), spec.placement.limit(rank, false)),
        (model.spec(), params.numel()),
        (width, spec.embeddings),
    )?;
    spec.placement.warn_address_space(rank, reporter);
    checkpoint::load_weights_file(&spec.weights, spec.weights_sha256.as_deref(), &params).map_err(|e| {
        anyhow::anyhow!(
            "{e}: the driver checked this checkpoint's weights as it started; if the run is still training, \
             it may have written a newer checkpoint and removed these meanwhile: infer again"
        )
    })?;

    let mesh = join_mesh(job, (&ds, cfg), timeout, reporter)?;
    // Own part's rows, the rest from their owners; one worker reads the archive.
    let fetching;
    let features: &dyn FeatureSource = match &manifest {
        Some((dir, m)) => {
            let local: Arc<dyn RowSource> = Arc::new(PartRows::open_worker(dir, rank, world, m.clone())?);
            serve_features(&mesh, local.clone());
            let client = FeatureClient::new(Owners::of_workers(m.clone(), world), local, timeout);
            fetching = FetchingRows::new(client, &mesh, FetchStats::default());
            &fetching
        }
        None => &ds,
    };
    let view = GraphData { graph: ds.graph(), features, labels: ds.labels() };
    let mut w = Worker::new((rank, world), view, (&cfg.fanouts, &cfg.eval_fanouts), cfg.seed, (model, params), device);
    w.norm = cfg.normalize;
    w.owners = owners;
    let mut coll = MeshCollective { mesh: &mesh, timeout };
    let out = score(cfg, &mut w, &mut coll, spec.embeddings)?;

    let owned = &out.nodes;
    let d = out.embeddings.as_ref().map_or(0, |e| e.len() / owned.len().max(1));
    let c = out.classes;
    let per_chunk = (CHUNK_BYTES / (4 * (c + d)).max(1)).max(1);
    for start in (0..owned.len()).step_by(per_chunk) {
        let end = (start + per_chunk).min(owned.len());
        let chunk = InferRows {
            nodes: owned[start..end].to_vec(),
            logits: encode(&out.logits[start * c..end * c]),
            embeddings: out.embeddings.as_ref().map(|e| encode(&e[start * d..end * d])),
        };
        reporter.send(&ToDriver::Metrics(serde_json::to_value(chunk)?))?;
    }
    // No worker leaves the mesh while a peer may still fetch its rows.
    coll.barrier().map_err(TrainError::Comm)?;
    let done = InferDone {
        rank,
        nodes: owned.len() as u64,
        bytes: mesh.bytes(),
        seconds: t0.elapsed().as_secs_f64(),
        peak_rss_bytes: crate::util::peak_rss_bytes(),
    };
    Ok(serde_json::to_value(done)?)
}
