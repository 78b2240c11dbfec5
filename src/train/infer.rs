//! `leapgnn infer RUN`: the predictions (class and probabilities) and
//! optionally a hidden layer's embeddings of every node of a trained run,
//! computed with layer-wise inference over the whole graph, written as
//! safetensors (or `.npy` files). Row i is node `node_id[i]`, in the dataset's
//! node order (or the order of `--nodes`). In this process (W = 1), or on W
//! workers (`distributed::infer_distributed`), each scoring the nodes it owns.

use super::{
    Collective, DeviceKind, GraphData, Solo, TrainConfig, TrainError, Worker, build_model, checkpoint,
    checkpointed_run, fullgraph,
};
use crate::cluster::LauncherKind;
use crate::format::{AtomicFile, DatasetFile, write_atomic};
use crate::metrics::ByteCounts;
use crate::model::ModelSpec;
use crate::{BadInput, DataDir};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    #[default]
    Safetensors,
    /// A directory of `<field>.npy` files.
    Npy,
}

impl std::str::FromStr for OutputFormat {
    type Err = BadInput;
    fn from_str(s: &str) -> Result<Self, BadInput> {
        match s {
            "safetensors" => Ok(OutputFormat::Safetensors),
            "npy" => Ok(OutputFormat::Npy),
            _ => Err(BadInput::new(format!("unknown --format `{s}`: expected safetensors or npy"))),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct InferOptions {
    /// Default: `runs/<run>/predictions.safetensors` (`predictions/` with npy).
    pub out: Option<PathBuf>,
    pub format: OutputFormat,
    /// A hidden layer (0-based) whose output to write as `embeddings`.
    pub embeddings: Option<usize>,
    /// Node ids to write (whitespace-separated text), in that order; default every node.
    pub nodes: Option<PathBuf>,
    /// Where the model runs; default the device the run trained on.
    pub device: Option<DeviceKind>,
    /// `--memory-limit-mb` in bytes: what the processes on this machine may
    /// use together; default MemAvailable together and RLIMIT_AS each.
    pub memory_limit: Option<u64>,
}

/// What `infer --json` prints.
#[derive(Clone, Debug, serde::Serialize)]
pub struct InferReport {
    pub run: String,
    pub out: PathBuf,
    pub nodes: u64,
    pub seconds: f64,
    /// Bytes that crossed a socket (0: computed in this process).
    pub bytes: u64,
    /// Processes that computed it (1: this one).
    pub workers: usize,
    /// The global iteration of the checkpoint whose weights scored: of a run
    /// still training, the last checkpoint complete when inference started.
    pub checkpoint_iteration: u64,
    /// `bytes` by category (features: the halo's input rows; activations:
    /// the hidden layers' halo rows; control: the mesh's own traffic).
    pub bytes_by_category: ByteCounts,
    /// The predictions' accuracy on the dataset's labelled train, validation
    /// and test nodes (all of each split, whatever `--nodes` writes).
    pub accuracy: SplitAccuracy,
    /// Peak RSS of each process that scored, in rank order (in-process: this one).
    pub peak_rss_bytes: Vec<u64>,
    /// Peak RSS of the driver that gathered the workers' scores (`--workers`, `--cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_peak_rss_bytes: Option<u64>,
}

/// Accuracy of the predictions on each split's labelled nodes.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SplitAccuracy {
    pub train: f64,
    pub val: f64,
    pub test: f64,
}

impl SplitAccuracy {
    /// Of `scores` (every node scored) against `ds`'s labels.
    pub(crate) fn of(ds: &DatasetFile, name: &str, scores: &Scores) -> Result<SplitAccuracy, TrainError> {
        let labels = ds.labels();
        let c = scores.classes;
        let acc = |ids: &[u32]| {
            let right = ids
                .iter()
                .filter(|&&v| {
                    let v = v as usize;
                    fullgraph::inference::argmax(&scores.logits[v * c..(v + 1) * c]) as i32 == labels[v]
                })
                .count();
            right as f64 / ids.len().max(1) as f64
        };
        let [train, val, test] = super::splits(ds, name)?;
        Ok(SplitAccuracy { train: acc(&train), val: acc(&val), test: acc(&test) })
    }
}

/// A run checked for inference: where it is, how it was trained, which nodes to write.
pub(crate) struct Prepared {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    /// The weights file the checkpoint named when checked: every worker loads
    /// this one, whatever checkpoint a run still training writes meanwhile.
    pub weights: PathBuf,
    /// The sha256 the checkpoint recorded for `weights` (None in one of a
    /// version before the record): every worker checks it as it loads them.
    pub weights_sha256: Option<String>,
    /// The bytes of `weights`, checked against `weights_sha256`: in-process
    /// inference loads these, not the file, which the run may have removed since.
    pub weight_bytes: Vec<u8>,
    /// The global iteration those weights were saved after.
    pub iteration: u64,
    pub cfg: TrainConfig,
    pub dataset: PathBuf,
    pub nodes: Vec<u32>,
    /// Width of the `--embeddings` layer (0 without).
    pub width: usize,
    /// Weights of the model (values).
    pub params: usize,
}

/// Checks run `run` and the options against its dataset and model; returns
/// the run and the opened dataset (checksum-verified with `verify`).
pub(crate) fn prepare(
    data: &DataDir,
    run: &str,
    opts: &InferOptions,
    verify: bool,
) -> Result<(Prepared, DatasetFile), TrainError> {
    check_out(opts)?;
    let (run_dir, ck) = checkpointed_run(data, run, "infer")?;
    super::distributed::infer::remove_stale_copies(&run_dir);
    let (mut cfg, progress) = checkpoint::load_config(&ck)?;
    super::run_dataset::check_same_dataset(&run_dir, run, &cfg.dataset, "infer")?;
    check_stages_complete(run, &cfg, progress.epoch)?;
    // A damaged or swapped weights file is refused as what it is, before the dataset is even opened.
    // Read once: a run still training may replace (and remove) it at any time from here on.
    let (weights, weights_sha256, weight_bytes, iteration) = checkpoint::pinned_weights(&ck)?;
    if let Some(d) = opts.device {
        cfg.device = d;
    }
    let dataset = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = if verify { DatasetFile::open_verified(&dataset)? } else { DatasetFile::open(&dataset)? };
    let trained_on = super::run_dataset::check(&run_dir, run, &cfg.dataset, &ds, "infer")?;
    let mut inputs = checkpoint::files(&ck)?;
    inputs.extend(["config.json", "summary.json", "metrics.jsonl"].map(|f| run_dir.join(f)));
    inputs.push(dataset.clone());
    inputs.extend(opts.nodes.clone());
    check_out_not_input(opts, &inputs)?;
    // The weights must be those of the model this dataset gives the run's config: checked here, before
    // any worker starts or partition is made, and said to be about the dataset, which may have changed;
    // unless it is the very version the run trained on: then the checkpoint's files are not the run's.
    let misfit = |e: TrainError| -> TrainError {
        if trained_on {
            return BadInput::new(format!(
                "the checkpoint of run `{run}` does not fit the model its config builds on dataset `{}`, which is \
                 the version the run trained on: {e}; so the checkpoint's files were edited or copied in from \
                 another run; put back the run's own checkpoint, or train again",
                cfg.dataset
            ))
            .into();
        }
        BadInput::new(format!(
            "the checkpoint of run `{run}` cannot be used with dataset `{}` as it is now ({} nodes, {} feature \
             columns, {} classes in {}): {e}; if the dataset was re-imported or replaced since the run trained, \
             infer with the data the run trained on, or train again",
            cfg.dataset,
            ds.num_nodes(),
            ds.feature_dim(),
            ds.num_classes(),
            dataset.display()
        ))
        .into()
    };
    // Its own message says what to do when the dataset is not in question.
    let name = weights.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    checkpoint::weights_fit(&ck, &name, weight_bytes.len() as u64, &cfg.model_spec(&ds))
        .map_err(|e| if trained_on { e } else { misfit(e) })?;
    // On the CPU: the shapes are the same on any device, and the driver of distributed inference need not
    // have the workers' GPUs.
    let (model, params, ..) = build_model(&TrainConfig { device: DeviceKind::Cpu, ..cfg.clone() }, &ds)?;
    checkpoint::load_weights(&weights, &weight_bytes, &params).map_err(misfit)?;
    let layers = model.num_layers();
    if let Some(l) = opts.embeddings.filter(|&l| l + 1 >= layers) {
        let hidden = match layers {
            // Its only layer is the output layer: there is no hidden layer to offer.
            0 | 1 => "1 layer and no hidden layer, so it has no embeddings; omit --embeddings".to_string(),
            _ => format!("{layers} layers, so its hidden layers are 0..={}", layers - 2),
        };
        return Err(BadInput::new(format!(
            "--embeddings {l}: the run's model has {hidden}; the last layer's output is `probs`"
        ))
        .into());
    }
    let nodes = match &opts.nodes {
        Some(p) => read_nodes(p, ds.num_nodes())?,
        None => (0..ds.num_nodes() as u32).collect(),
    };
    // Every hidden layer (and RETEXO stage: GAT's heads averaged) is `hidden` wide.
    let width = opts.embeddings.map_or(0, |l| model.out_dim(l));
    let prep = Prepared {
        run_dir,
        checkpoint: ck,
        weights,
        weights_sha256,
        weight_bytes,
        iteration,
        cfg,
        dataset,
        nodes,
        width,
        params: params.numel(),
    };
    Ok((prep, ds))
}

/// Refuses a RETEXO run stopped before its last stage ended: its checkpoint
/// (where a stage starts, or at the round a stop came in) holds the stage it
/// stopped in at its initial or current weights, not its best, and every
/// later one at its initial weights: scored, it predicts at or near chance,
/// far from the accuracy the stopped run reported. `epoch` is the
/// checkpoint's round.
fn check_stages_complete(run: &str, cfg: &TrainConfig, epoch: u64) -> Result<(), BadInput> {
    let Some(stages) = cfg.stages().filter(|_| epoch < cfg.epochs) else { return Ok(()) };
    let rounds = cfg.rounds.unwrap_or(1).max(1);
    let stage = epoch / rounds + 1;
    let (at, state) = match epoch % rounds {
        0 => ("where that stage starts".to_string(), "untrained weights"),
        r => (format!("round {r} of that stage's {rounds}"), "untrained or partly trained weights"),
    };
    Err(BadInput::new(format!(
        "run `{run}` is a RETEXO run that stopped in stage {stage} of {stages}: its checkpoint is of round {epoch} of \
         {}, {at}, so stage {stage} and later hold {state} and would predict at or near chance; finish the run \
         with `leapgnn train --resume {run}`, then infer",
        cfg.epochs,
    )))
}

/// The run's saved config, its checkpoint checked as inference will check
/// it: refused before a launcher without the driver's files reaches a host
/// (inference ships the weights it checks itself, `Launcher::ship_with_job`).
pub fn run_config(data: &DataDir, run: &str) -> Result<TrainConfig, TrainError> {
    let (run_dir, ck) = checkpointed_run(data, run, "infer")?;
    let (cfg, progress) = checkpoint::load_config(&ck)?;
    super::run_dataset::check_same_dataset(&run_dir, run, &cfg.dataset, "infer")?;
    // Refused before any host is reached or file shipped.
    check_stages_complete(run, &cfg, progress.epoch)?;
    // Followed to the checkpoint that replaced it, as `prepare` does, when a run still training removes it.
    checkpoint::pinned_weights(&ck)?;
    Ok(cfg)
}

/// The last layer's outputs (and the `--embeddings` layer's) of every node,
/// rows in node-id order, gathered from whichever worker owns each node.
pub(crate) struct Scores {
    pub classes: usize,
    pub width: usize,
    /// `[nodes, classes]`.
    pub logits: Vec<f32>,
    /// `[nodes, width]` with `--embeddings`.
    pub embeddings: Option<Vec<f32>>,
    /// Which nodes have their rows (each exactly once).
    placed: Vec<bool>,
    pub missing: usize,
}

impl Scores {
    pub fn new(nodes: usize, classes: usize, width: usize, embeddings: bool) -> Scores {
        Scores {
            classes,
            width,
            logits: vec![0.0; nodes * classes],
            embeddings: embeddings.then(|| vec![0.0; nodes * width]),
            placed: vec![false; nodes],
            missing: nodes,
        }
    }

    /// Places the rows of nodes `ids` (row i of `logits`/`emb` is `ids[i]`'s).
    /// A node id out of range or placed twice is refused.
    pub fn place(&mut self, ids: &[u32], logits: &[f32], emb: Option<&[f32]>) -> Result<(), String> {
        let (c, d) = (self.classes, self.width);
        if logits.len() != ids.len() * c {
            return Err(format!("{} node ids but {} logits (expected {c} per node)", ids.len(), logits.len()));
        }
        match (emb, &self.embeddings) {
            (Some(e), Some(_)) if e.len() != ids.len() * d => {
                return Err(format!("{} node ids but {} embedding values (expected {d} per node)", ids.len(), e.len()));
            }
            (None, Some(_)) => return Err(format!("{} node ids came without their embeddings", ids.len())),
            _ => {}
        }
        for (i, &v) in ids.iter().enumerate() {
            let v = v as usize;
            match self.placed.get_mut(v) {
                Some(p) if !*p => *p = true,
                Some(_) => return Err(format!("node {v} was scored twice")),
                None => return Err(format!("node {v} is not a node of the dataset ({} nodes)", self.placed.len())),
            }
            self.missing -= 1;
            self.logits[v * c..(v + 1) * c].copy_from_slice(&logits[i * c..(i + 1) * c]);
            if let (Some(dst), Some(src)) = (&mut self.embeddings, emb) {
                dst[v * d..(v + 1) * d].copy_from_slice(&src[i * d..(i + 1) * d]);
            }
        }
        Ok(())
    }
}

/// Runs inference with run `run`'s last checkpoint in this process (W = 1) and writes the outputs.
pub fn infer(data: &DataDir, run: &str, opts: &InferOptions) -> Result<InferReport, TrainError> {
    let t0 = Instant::now();
    let (prep, ds) = prepare(data, run, opts, true)?;
    check_memory(&prep, &ds, opts, None, (1, None, LauncherKind::Local))?;
    let cfg = &prep.cfg;
    let (model, params, _, device) = build_model(cfg, &ds).map_err(|e| match (opts.device, cfg.device) {
        // The saved device, not one the user asked for: say where it came from and how to run elsewhere.
        (None, DeviceKind::Cuda(_)) => BadInput::new(format!(
            "run `{run}` trained with --device {}, which infer uses unless given --device: {e}; or give infer \
             --device cpu (the weights are the same on any device)",
            cfg.device
        ))
        .into(),
        _ => e,
    })?;
    checkpoint::load_weights(&prep.weights, &prep.weight_bytes, &params)?;
    let view = GraphData { graph: ds.graph(), features: &ds, labels: ds.labels() };
    let mut w = Worker::new((0, 1), view, (&cfg.fanouts, &cfg.eval_fanouts), cfg.seed, (model, params), device);
    w.norm = cfg.normalize;
    let mut solo = Solo;
    let out = score(cfg, &mut w, &mut solo, opts.embeddings)?;
    let mut scores = Scores::new(ds.num_nodes(), out.classes, prep.width, opts.embeddings.is_some());
    scores.place(&out.nodes, &out.logits, out.embeddings.as_deref()).map_err(TrainError::Rows)?;
    let out_path = write_outputs(&prep, opts, &scores)?;
    let bytes = solo.bytes().sent;
    let accuracy = SplitAccuracy::of(&ds, &cfg.dataset, &scores)?;
    Ok(InferReport {
        run: run.to_string(),
        out: out_path,
        nodes: prep.nodes.len() as u64,
        seconds: t0.elapsed().as_secs_f64(),
        bytes: bytes.total(),
        workers: 1,
        checkpoint_iteration: prep.iteration,
        bytes_by_category: bytes,
        accuracy,
        peak_rss_bytes: crate::util::peak_rss_bytes().into_iter().collect(),
        driver_peak_rss_bytes: None,
    })
}

/// Bytes of f32 rows per chunk a worker of distributed inference sends
/// (well under the control channel's frame limit once base64-encoded).
pub(crate) const CHUNK_BYTES: usize = 8 << 20;

/// Refuses an inference whose processes on this machine will not fit, as
/// `train` refuses a full-graph run (`fullgraph::memory::preflight`), before
/// any of them allocates its rows: the layer-wise pass aborted the process
/// on a failed allocation instead. Each worker's pass over its share is held
/// to the estimate of a pass without gradients (`memory::infer_estimate`; a
/// training step's was 3 times GAT's peak) and the chunks it sends; the
/// process that gathers the scores adds
/// every node's logits (and embeddings), the rows written out and their
/// serialised copy. `owners`: node -> worker of `world` workers (None: one
/// worker scores every node); `local`: None when this process scores, else
/// how many of the workers it drives run on this machine, beside it;
/// `launcher`: what starts them, so that the advice names where that
/// launcher finds more machines (a job over Slurm already gives `--cluster`).
pub(crate) fn check_memory(
    prep: &Prepared,
    ds: &DatasetFile,
    opts: &InferOptions,
    owners: Option<&[u16]>,
    (world, local, launcher): (usize, Option<usize>, LauncherKind),
) -> Result<(), BadInput> {
    use crate::util::mib;
    use fullgraph::memory::{PROCESS_BYTES, budgets, exceeded, infer_estimate, shapes, sparse_input};
    let cfg = TrainConfig { workers: world, ..prep.cfg.clone() };
    let spec = cfg.model_spec(ds);
    let (sparse_rows, sparse) = sparse_input(ds, &cfg, &spec);
    let row = 4 * (spec.classes + prep.width) as u64;
    // Every node's scores as gathered, and the rows written with their serialised copy.
    let gathered = ds.num_nodes() as u64 * row + 2 * prep.nodes.len() as u64 * row;
    let shares = shapes(ds.graph(), sparse_rows, owners, world.max(1));
    // The run's --hidden is fixed: its shares or its device are what infer can change.
    let advice = "give infer more --workers (a smaller share of the graph each), or --device cpu";
    fullgraph::memory::check_csr_edges(
        &shares,
        spec.adds_self_loops(),
        "give infer more --workers (a smaller share of the graph each)",
    )?;
    fullgraph::memory::check_cuda_elements(&shares, &spec, cfg.device, advice)?;
    let driven = local.is_some();
    let mut per_worker: Vec<u64> = shares
        .iter()
        .map(|s| match driven {
            true => worker_need(*s, &spec, prep.params, sparse, row),
            // Its rows, and what a driver would gather, in this one process.
            false => infer_estimate(*s, &spec, prep.params, sparse) + s.owned * row + gathered,
        })
        .collect();
    let largest_share = shares.iter().map(|s| s.owned * row).max().unwrap_or(0);
    // A chunk arrives encoded, is parsed, decoded, and placed.
    let driver = PROCESS_BYTES + gathered + 4 * largest_share.min(CHUNK_BYTES as u64);
    per_worker.sort_unstable_by(|a, b| b.cmp(a));
    let on_this_machine = local.map_or(1, |l| l.min(world));
    let mut held: Vec<u64> = per_worker.iter().copied().take(on_this_machine).collect();
    if driven {
        held.push(driver);
    }
    let limit = fullgraph::memory::Limit { bytes: opts.memory_limit, launcher, ..Default::default() };
    let budgets = budgets(limit);
    let Some(b) = exceeded(&budgets, &held) else {
        fullgraph::memory::warn_address_space();
        return Ok(());
    };
    let what = match driven {
        false => format!(
            "the layer-wise pass over all {} nodes of `{}` (hidden {}) and their scores",
            ds.num_nodes(),
            cfg.dataset,
            spec.hidden
        ),
        true => format!(
            "{world} worker(s) over `{}`'s {} nodes (hidden {}), the largest {} MiB, and {} MiB for the driver, \
             which gathers every node's scores{}",
            cfg.dataset,
            ds.num_nodes(),
            spec.hidden,
            mib(per_worker[0]),
            mib(driver),
            b.together(&held, on_this_machine)
        ),
    };
    let to = if b.each { " to each process" } else { "" };
    Err(BadInput::new(format!(
        "infer needs an estimated {} MiB ({what}) but {} MiB are available{to} ({}); {}, spread the graph over \
         more --workers or {}{}, or infer on a machine with more memory",
        mib(b.need(&held)),
        mib(b.bytes),
        b.source,
        b.room(),
        limit.more_machines(),
        omit_embeddings(opts.embeddings),
    )))
}

/// A refusal's advice to leave out `--embeddings`, when given.
fn omit_embeddings(embeddings: Option<usize>) -> String {
    match embeddings {
        Some(l) => format!(", omit --embeddings {l}"),
        None => String::new(),
    }
}

/// Peak bytes of a worker of distributed inference over its share `s`: the
/// pass (`check_memory`'s figure), its rows of `row` bytes, then each chunk
/// encoded and framed as it is sent.
fn worker_need(s: fullgraph::memory::Shape, spec: &ModelSpec, params: usize, sparse: bool, row: u64) -> u64 {
    fullgraph::memory::infer_estimate(s, spec, params, sparse)
        + s.owned * row
        + 3 * (s.owned * row).min(CHUNK_BYTES as u64)
}

/// Refuses, in worker `rank` of `world`, its share of an inference (`owners`:
/// node -> worker, None for one worker) that this host cannot hold, before
/// it loads the weights and joins the mesh: the driver holds only the
/// workers on its own machine, so an ssh host or a Slurm node over its
/// memory aborted on an allocation instead. As train's workers do, it holds
/// the shares of `host_ranks` (the ranks placed on this host, `rank` among
/// them) together against MemAvailable, its own against the address-space
/// limit, as `limit` says (`Placement::limit`), and words the advice for its
/// launcher. `width`: the embeddings'
/// width (0 without `--embeddings`). Advises what an inference can change:
/// the run's model is fixed.
pub(crate) fn check_worker(
    ds: &DatasetFile,
    cfg: &TrainConfig,
    owners: Option<&[u16]>,
    (rank, world): (usize, usize),
    (host_ranks, limit): (&[usize], fullgraph::memory::Limit),
    (spec, params): (&ModelSpec, usize),
    (width, embeddings): (usize, Option<usize>),
) -> Result<(), BadInput> {
    use fullgraph::memory::{check_share, shapes, sparse_input};
    let (sparse_rows, sparse) = sparse_input(ds, cfg, spec);
    let shapes = shapes(ds.graph(), sparse_rows, owners, world.max(1));
    let row = 4 * (spec.classes + width) as u64;
    let need = |r: usize| worker_need(shapes[r], spec, params, sparse, row);
    let others: Vec<u64> = host_ranks.iter().filter(|&&r| r != rank && r < shapes.len()).map(|&r| need(r)).collect();
    let alone = format!(
        "spread the graph over more --workers or {}{}, or infer on hosts with more memory",
        limit.more_machines(),
        omit_embeddings(embeddings)
    );
    // Where this host's workers are over together, more of them is no remedy:
    // the advice to run fewer here (or spread them over machines) stands alone.
    let omit = embeddings.map_or(String::new(), |l| format!("omit --embeddings {l}, "));
    let shared = format!("{omit}or infer on hosts with more memory");
    check_share((rank, shapes[rank], need(rank)), &others, limit, "infer", [&alone, &shared], "")
}

/// This worker's owned vertices scored with the run's model: layer-wise
/// inference, or RETEXO's stages for a RETEXO run (its checkpoint holds them).
pub(crate) fn score(
    cfg: &TrainConfig,
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    embeddings: Option<usize>,
) -> Result<fullgraph::inference::Scored, TrainError> {
    match cfg.strategy {
        super::StrategyKind::Retexo => fullgraph::retexo::score(w, coll, embeddings),
        _ => Ok(fullgraph::inference::run(w, coll, embeddings)?.into()),
    }
}

/// Writes `node_id`, `prediction`, `probs` (and `embeddings`) of `prep.nodes`,
/// in that order; returns the path written.
pub(crate) fn write_outputs(prep: &Prepared, opts: &InferOptions, scores: &Scores) -> Result<PathBuf, TrainError> {
    let nodes = &prep.nodes;
    let (c, width) = (scores.classes, scores.width);
    let mut probs = Vec::with_capacity(nodes.len() * c);
    let mut prediction = Vec::with_capacity(nodes.len());
    let mut emb = Vec::with_capacity(nodes.len() * width);
    for &v in nodes {
        let v = v as usize;
        let row = &scores.logits[v * c..(v + 1) * c];
        prediction.push(fullgraph::inference::argmax(row) as u32);
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
        probs.extend(row.iter().map(|&x| (x - max).exp() / sum));
        if let Some(e) = &scores.embeddings {
            emb.extend_from_slice(&e[v * width..(v + 1) * width]);
        }
    }
    let n = nodes.len();
    let mut fields: Vec<Field<'_>> = vec![
        Field { name: "node_id", dtype: Dtype::U32, shape: vec![n], data: bytemuck::cast_slice(nodes) },
        Field { name: "prediction", dtype: Dtype::U32, shape: vec![n], data: bytemuck::cast_slice(&prediction) },
        Field { name: "probs", dtype: Dtype::F32, shape: vec![n, c], data: bytemuck::cast_slice(&probs) },
    ];
    if scores.embeddings.is_some() {
        fields.push(Field {
            name: "embeddings",
            dtype: Dtype::F32,
            shape: vec![n, width],
            data: bytemuck::cast_slice(&emb),
        });
    }
    let out_path = out_path(opts, &prep.run_dir);
    match opts.format {
        OutputFormat::Safetensors => write_safetensors(&out_path, &fields)?,
        OutputFormat::Npy => write_npy_dir(&out_path, &fields)?,
    }
    // Reported absolute, whatever the form of --out, so a script that reads
    // it from another directory finds the file.
    Ok(crate::paths::in_canonical_dir(&out_path))
}

/// Where the outputs go: `--out`, else beside the run's checkpoint.
fn out_path(opts: &InferOptions, run_dir: &Path) -> PathBuf {
    match (&opts.out, opts.format) {
        (Some(p), _) => p.clone(),
        (None, OutputFormat::Safetensors) => run_dir.join("predictions.safetensors"),
        (None, OutputFormat::Npy) => run_dir.join("predictions"),
    }
}

/// Refuses, before any scoring, an `--out` that cannot take the outputs: of
/// the wrong kind for the format, `-` (there is no stream to write to), under
/// a file, in a directory this process cannot create files in, or (npy) with
/// a field's file name taken by a directory.
fn check_out(opts: &InferOptions) -> Result<(), BadInput> {
    use crate::paths::Uncreatable;
    let Some(p) = &opts.out else { return Ok(()) };
    let bad = |why: String| Err(BadInput::new(format!("--out {}: {why}", p.display())));
    if p.as_os_str() == "-" {
        return bad("infer writes a file (safetensors) or a directory of .npy files, not standard output; give a \
                    path (./- for a file named -), then read it, e.g. with safetensors.numpy.load_file"
            .into());
    }
    match opts.format {
        OutputFormat::Safetensors if p.is_dir() => {
            return bad(format!(
                "a directory, and --format safetensors writes one file; give a file path (e.g. {})",
                p.join("predictions.safetensors").display()
            ));
        }
        OutputFormat::Npy if p.exists() && !p.is_dir() => {
            return bad("a file, and --format npy writes a directory of <field>.npy files; give a directory path \
                        (created if missing)"
                .into());
        }
        _ => {}
    }
    // The directory the files go in: the safetensors file's, or the npy directory itself.
    let dir = match opts.format {
        OutputFormat::Safetensors => p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")),
        OutputFormat::Npy => p.as_path(),
    };
    match crate::paths::can_create_in(dir) {
        Ok(()) => {}
        Err(Uncreatable::NotADirectory(file)) => {
            return bad(format!(
                "{} is a file, not a directory, so nothing can be written under it; give a path in a directory",
                file.display()
            ));
        }
        Err(Uncreatable::Refused(existing, e)) => {
            return bad(format!("cannot create files in {} ({e}); give a writable location", existing.display()));
        }
    }
    if opts.format == OutputFormat::Npy {
        for f in npy_fields(opts.embeddings.is_some()) {
            let file = p.join(format!("{f}.npy"));
            if file.is_dir() {
                return bad(format!(
                    "{} is a directory, where --format npy writes field `{f}`; remove or rename it, or give another \
                     --out",
                    file.display()
                ));
            }
        }
    }
    Ok(())
}

/// Refuses an `--out` file that is one of `inputs` (the run's checkpoint and
/// records, its dataset's archive, the `--nodes` list), by any name: the
/// predictions written over it would destroy it.
fn check_out_not_input(opts: &InferOptions, inputs: &[PathBuf]) -> Result<(), BadInput> {
    use std::os::unix::fs::MetadataExt;
    // npy writes <field>.npy files in a directory, none of them an input.
    let Some(p) = opts.out.as_ref().filter(|_| opts.format == OutputFormat::Safetensors) else { return Ok(()) };
    // Not there yet: nothing to lose.
    let Ok(out) = std::fs::metadata(p) else { return Ok(()) };
    for f in inputs {
        if std::fs::metadata(f).is_ok_and(|m| (m.dev(), m.ino()) == (out.dev(), out.ino())) {
            return Err(BadInput::new(format!(
                "--out {}: that is {}, which the predictions written over it would destroy; give another path",
                p.display(),
                f.display()
            )));
        }
    }
    Ok(())
}

/// The fields `--format npy` writes, as `<field>.npy`.
fn npy_fields(embeddings: bool) -> impl Iterator<Item = &'static str> {
    ["node_id", "prediction", "probs"].into_iter().chain(embeddings.then_some("embeddings"))
}

/// Node ids, whitespace-separated; each must be a node of the dataset.
fn read_nodes(path: &Path, num_nodes: usize) -> Result<Vec<u32>, TrainError> {
    // A file that is not there (or not readable) is a wrong flag value, not a failure of the run.
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput::new(format!("--nodes {}: {e}; give a text file of node ids", path.display())))?;
    let mut out = Vec::new();
    for (line, l) in text.lines().enumerate() {
        for tok in l.split_whitespace() {
            match tok.parse::<u32>() {
                Ok(v) if (v as usize) < num_nodes => out.push(v),
                _ => {
                    // A token is quoted whole only when short: a binary file given by mistake is one huge token.
                    let shown: String = tok.chars().take(40).collect();
                    let cut = if shown.len() < tok.len() { "..." } else { "" };
                    return Err(BadInput::new(format!(
                        "--nodes {}, line {}: `{shown}{cut}` is not a node id of the dataset (0..{num_nodes})",
                        path.display(),
                        line + 1
                    ))
                    .into());
                }
            }
        }
    }
    if out.is_empty() {
        return Err(BadInput::new(format!("--nodes {} lists no node ids", path.display())).into());
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Dtype {
    U32,
    F32,
}

struct Field<'a> {
    name: &'static str,
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

fn write_safetensors(path: &Path, fields: &[Field<'_>]) -> Result<(), TrainError> {
    use safetensors::tensor::{Dtype as St, TensorView};
    let views = fields
        .iter()
        .map(|f| {
            let dtype = match f.dtype {
                Dtype::U32 => St::U32,
                Dtype::F32 => St::F32,
            };
            TensorView::new(dtype, f.shape.clone(), f.data).map(|v| (f.name, v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TrainError::Rows(format!("cannot lay out {}: {e}", path.display())))?;
    let bytes = safetensors::tensor::serialize(views, None)
        .map_err(|e| TrainError::Rows(format!("cannot serialise {}: {e}", path.display())))?;
    Ok(write_atomic(path, &bytes)?)
}

/// `<dir>/<field>.npy` for every field (NumPy format 1.0, little-endian).
/// Every file is written and synced under a temporary name first and only
/// then are they renamed into place, so an error (or a kill) while writing
/// leaves the directory's previous files as they were, not some fields new
/// and the others of an earlier `infer`; an `embeddings.npy` that this call
/// does not write (no `--embeddings`) is removed first, as it would describe
/// other nodes.
fn write_npy_dir(dir: &Path, fields: &[Field<'_>]) -> Result<(), TrainError> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).map_err(|e| TrainError::Io { path: dir.to_path_buf(), source: e })?;
    let mut staged = Vec::with_capacity(fields.len());
    for f in fields {
        let descr = match f.dtype {
            Dtype::U32 => "<u4",
            Dtype::F32 => "<f4",
        };
        let shape: Vec<String> = f.shape.iter().map(|d| d.to_string()).collect();
        let shape = if shape.len() == 1 { format!("({},)", shape[0]) } else { format!("({})", shape.join(", ")) };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes and ended by a newline.
        let pad = 64 - (10 + header.len() + 1) % 64;
        header.push_str(&" ".repeat(pad % 64));
        header.push('\n');
        let path = dir.join(format!("{}.npy", f.name));
        let io = |e: std::io::Error| TrainError::Io { path: path.clone(), source: e };
        let mut file = AtomicFile::create(&path)?;
        let w = file.writer();
        w.write_all(b"\x93NUMPY\x01\x00").map_err(io)?;
        w.write_all(&(header.len() as u16).to_le_bytes()).map_err(io)?;
        w.write_all(header.as_bytes()).map_err(io)?;
        w.write_all(f.data).map_err(io)?;
        w.flush().map_err(io)?;
        w.get_ref().sync_all().map_err(io)?;
        staged.push(file);
    }
    for f in npy_fields(true).filter(|f| !fields.iter().any(|x| x.name == *f)) {
        let stale = dir.join(format!("{f}.npy"));
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(TrainError::Io { path: stale, source: e });
            }
            _ => {}
        }
    }
    for file in staged {
        file.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Scores;

    /// A worker's reply that does not fit is refused, naming what is short.
    #[test]
    fn rows_that_do_not_fit_are_refused_naming_what_is_wrong() {
        let mut s = Scores::new(3, 2, 4, true);
        let e = s.place(&[0, 1], &[0.0; 4], Some(&[0.0; 7])).unwrap_err();
        assert_eq!(e, "2 node ids but 7 embedding values (expected 4 per node)");
        let e = s.place(&[0, 1], &[0.0; 3], Some(&[0.0; 8])).unwrap_err();
        assert_eq!(e, "2 node ids but 3 logits (expected 2 per node)");
        let e = s.place(&[0], &[0.0; 2], None).unwrap_err();
        assert_eq!(e, "1 node ids came without their embeddings");
        s.place(&[2, 0], &[1.0, 2.0, 3.0, 4.0], Some(&[5.0; 8])).unwrap();
        assert_eq!(s.place(&[0], &[0.0; 2], Some(&[0.0; 4])).unwrap_err(), "node 0 was scored twice");
        assert_eq!(
            s.place(&[3], &[0.0; 2], Some(&[0.0; 4])).unwrap_err(),
            "node 3 is not a node of the dataset (3 nodes)"
        );
    }
}
