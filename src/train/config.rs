//! Everything that defines a training run; saved as `runs/<run>/config.json`.

use super::StrategyKind;
use crate::BadInput;
use crate::comm::CachePolicy;
use crate::format::DatasetFile;
use crate::gather::RowNorm;
use crate::model::{GatHeads, GenAggr, ModelKind, ModelSpec};
use crate::optim::OptimizerKind;
use crate::sample::Fanouts;
use candle_core::Device;
use std::path::PathBuf;

/// `--device cpu|cuda[:N]`: where the model runs; N picks the GPU (0 when
/// left out). Saved as the flag spells it (`"cuda"` for GPU 0, so configs
/// written before the index existed still read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    /// Needs a build with `--features cuda`.
    Cuda(usize),
}

impl std::str::FromStr for DeviceKind {
    type Err = BadInput;
    fn from_str(s: &str) -> Result<Self, BadInput> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" => Ok(DeviceKind::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .map(DeviceKind::Cuda)
                .ok_or_else(|| {
                    BadInput::new(format!(
                        "--device {s}: unknown value; expected cpu, cuda or cuda:N (N: the GPU's index, from 0)"
                    ))
                }),
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKind::Cpu => f.write_str("cpu"),
            DeviceKind::Cuda(0) => f.write_str("cuda"),
            DeviceKind::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl serde::Serialize for DeviceKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DeviceKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl DeviceKind {
    pub fn open(self) -> Result<Device, BadInput> {
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda(n) => Device::new_cuda(n).map_err(|e| {
                // candle appends a backtrace to some errors: its first line says what failed.
                let what = e.to_string();
                let what = what.lines().next().unwrap_or_default().split("    0: ").next().unwrap_or_default().trim();
                BadInput::new(if cfg!(feature = "cuda") {
                    format!(
                        "--device {self}: cannot open CUDA device {n}: {what} (is an NVIDIA driver installed and \
                         that GPU visible? `nvidia-smi` should list it)"
                    )
                } else {
                    format!(
                        "--device {self}: this leapgnn was built without CUDA; build one with \
                         `scripts/build-cuda.sh` (README: Building) and run it on a host with an NVIDIA driver"
                    )
                })
            }),
        }
    }
}

/// How gradient accumulators move between workers in micrograph strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Migration {
    /// One accumulator per worker; nothing moves.
    Fused,
    /// Each accumulator follows its model round the ring, as the paper.
    Ring,
}

crate::value_names!(Migration, "--migration");

/// `--prefetch`: whether pregather and leapgnn sample iteration i+1 and ask
/// for its remote rows as iteration i starts, so that the answers travel
/// while iteration i computes and sums its gradient. `auto` follows the
/// `--merge-plan`'s choice, else turns it on for those two strategies on more
/// than one worker (one worker has nothing remote).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Prefetch {
    On,
    Off,
    #[default]
    Auto,
}

crate::value_names!(Prefetch, "--prefetch");

impl Prefetch {
    /// The settings `tune-merge --prefetch` predicts pregather and leapgnn
    /// with: `auto` searches both and lets the cost model choose.
    pub fn search(self) -> &'static [bool] {
        match self {
            Prefetch::On => &[true],
            Prefetch::Off => &[false],
            Prefetch::Auto => &[false, true],
        }
    }
}

/// Runs recorded before `auto` existed wrote `"prefetch": true|false`.
impl<'de> serde::Deserialize<'de> for Prefetch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Either {
            Bool(bool),
            Word(String),
        }
        match Either::deserialize(d)? {
            Either::Bool(true) => Ok(Prefetch::On),
            Either::Bool(false) => Ok(Prefetch::Off),
            Either::Word(w) => w.parse().map_err(|e: BadInput| serde::de::Error::custom(e.0)),
        }
    }
}

/// Which engine trains: sampled mini-batches, or the whole graph with a halo
/// exchange per layer (one gradient step per epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TrainMode {
    /// Sampled mini-batches.
    #[default]
    #[value(alias = "mini-batch")]
    Minibatch,
    /// The whole graph, one step per epoch, a halo exchange per layer.
    #[value(alias = "full-batch")]
    FullGraph,
}

crate::value_names!(TrainMode, "--mode");

/// How validation and test nodes are scored: sampled blocks with the
/// evaluation fanouts, or layer-wise inference over all nodes (one halo
/// exchange per layer, as PyG/DGL `inference()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum EvalMode {
    /// Blocks sampled with the --eval-fanout fanouts.
    #[default]
    Sampled,
    /// Layer-wise inference over all nodes.
    Full,
}

crate::value_names!(EvalMode, "--eval");

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    /// Dataset name, directory or archive path, as given.
    pub dataset: String,
    pub strategy: StrategyKind,
    pub workers: usize,
    /// Parts of the partitioning (>= workers; each worker owns a contiguous range
    /// of them, `format::worker_parts`); 1 = every worker sees all rows.
    pub parts: usize,
    pub model: ModelKind,
    /// One entry per layer, input layer first.
    pub fanouts: Fanouts,
    /// Fanouts used for validation and test (default: the training ones).
    pub eval_fanouts: Fanouts,
    /// Roots per worker per iteration (the global batch is workers x batch_size).
    pub batch_size: usize,
    pub eval_batch_size: usize,
    pub hidden: usize,
    /// GAT attention heads.
    pub heads: usize,
    /// deepgcn's GENConv aggregation (None: max).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggr: Option<GenAggr>,
    /// deepgcn's softmax temperature (None: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub softmax_t: Option<f32>,
    /// GCN's self loops (None: on, but off with `--strategy retexo`, as its authors').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_loops: Option<bool>,
    /// GAT's heads (None: concatenated, but averaged with `--strategy retexo`, whose GAT that is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gat_heads: Option<GatHeads>,
    pub epochs: u64,
    pub lr: f32,
    pub weight_decay: f32,
    pub dropout: f32,
    pub optimizer: OptimizerKind,
    pub seed: u64,
    /// Checkpoint every this many iterations (0: only at the end).
    pub checkpoint_every: u64,
    pub device: DeviceKind,
    /// Input feature normalisation, applied as rows are gathered.
    #[serde(default)]
    pub normalize: RowNorm,
    pub cache_mb: u64,
    /// Which remote rows fill the cache.
    #[serde(default = "default_cache_policy")]
    pub cache_policy: CachePolicy,
    /// Time steps per iteration (leapgnn strategy); None = chosen by the cost model.
    pub time_steps: Option<u32>,
    pub merge_plan: Option<PathBuf>,
    pub migration: Migration,
    pub cluster: Option<PathBuf>,
    /// `--encrypt`: kept with the run, so that `--resume` (and the resume a
    /// Slurm script runs) goes on encrypted without the flag given again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypt: bool,
    /// pregather / leapgnn: fetch iteration i+1's rows while computing i
    /// (`prefetches` says whether this run does).
    #[serde(default)]
    pub prefetch: Prefetch,
    #[serde(default)]
    pub mode: TrainMode,
    #[serde(default)]
    pub eval: EvalMode,
    /// How the workers' parts are cut (`metis`, `random`, ...); None: the
    /// strategy's default (`partition_method`).
    #[serde(default)]
    pub partition: Option<String>,
    /// RETEXO: training rounds per stage (one stage per layer); `epochs` is
    /// layers x rounds, one round per epoch.
    #[serde(default)]
    pub rounds: Option<u64>,
    /// RETEXO: whether a stage's gradient may cross as its factors (the
    /// training rows once per stage, the gradients of their logits or conv
    /// outputs every round) where that is fewer bytes than all-reducing it
    /// (`--factored-grads`; None: on). Off: every gradient is all-reduced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factored_grads: Option<bool>,
    /// `--strategy varco`'s compression (None: the authors' defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varco: Option<super::fullgraph::varco::VarcoConfig>,
    /// `--strategy gnnpipe`'s chunks and history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gnnpipe: Option<super::fullgraph::gnnpipe::GnnPipeConfig>,
}

impl Default for TrainConfig {
    /// Every flag at its default (`flags::defaults`).
    fn default() -> Self {
        use super::flags::defaults as d;
        TrainConfig {
            dataset: d::DATASET.into(),
            strategy: d::STRATEGY,
            workers: d::WORKERS,
            parts: d::WORKERS,
            model: d::MODEL,
            eval_fanouts: d::fanouts(),
            fanouts: d::fanouts(),
            batch_size: d::BATCH_SIZE,
            eval_batch_size: d::EVAL_BATCH_SIZE,
            hidden: d::HIDDEN,
            heads: d::HEADS,
            aggr: None,
            softmax_t: None,
            self_loops: None,
            gat_heads: None,
            epochs: d::EPOCHS,
            lr: d::LR,
            weight_decay: d::WEIGHT_DECAY,
            dropout: d::DROPOUT,
            optimizer: d::OPTIMIZER,
            seed: d::SEED,
            checkpoint_every: d::CHECKPOINT_EVERY,
            device: d::DEVICE,
            normalize: d::NORMALIZE,
            cache_mb: d::CACHE_MB,
            cache_policy: d::CACHE_POLICY,
            time_steps: Some(1),
            merge_plan: None,
            migration: d::MIGRATION,
            cluster: None,
            encrypt: false,
            prefetch: d::PREFETCH,
            mode: d::MODE,
            eval: EvalMode::Sampled,
            partition: None,
            rounds: None,
            factored_grads: None,
            varco: None,
            gnnpipe: None,
        }
    }
}

fn default_cache_policy() -> CachePolicy {
    super::flags::defaults::CACHE_POLICY
}

impl TrainConfig {
    /// The partition method of the workers' parts: `--partition`, else random
    /// for RETEXO (its authors' setting) and METIS for everything else.
    pub fn partition_method(&self) -> &str {
        self.partition.as_deref().unwrap_or(match self.strategy {
            StrategyKind::Retexo => "random",
            _ => "metis",
        })
    }

    /// RETEXO's stages (one per layer), for `RunInfo::stages`.
    pub fn stages(&self) -> Option<u32> {
        (self.strategy == StrategyKind::Retexo).then(|| self.fanouts.layers() as u32)
    }

    /// The mode as the run summary and the dashboard name it: `full-graph`,
    /// or None for mini-batch, the default, which older summaries left out.
    pub fn reported_mode(&self) -> Option<String> {
        (self.mode == TrainMode::FullGraph).then(|| self.mode.to_string())
    }

    /// Whether this run gathers the next iteration's rows during the current
    /// one (`--prefetch auto` resolved: see `Prefetch`). A merge plan that
    /// cannot be read counts as silent here; `check` reports it.
    pub fn prefetches(&self) -> bool {
        let plan = self.merge_plan.as_ref().and_then(|p| crate::schedule::MergePlan::load(p).ok());
        self.prefetches_with(plan.as_ref())
    }

    /// `prefetches` with the run's merge plan already loaded.
    pub fn prefetches_with(&self, plan: Option<&crate::schedule::MergePlan>) -> bool {
        let pregathers = matches!(self.strategy, StrategyKind::Pregather | StrategyKind::Leapgnn)
            && self.mode == TrainMode::Minibatch;
        match self.prefetch {
            Prefetch::On => pregathers,
            Prefetch::Off => false,
            Prefetch::Auto => pregathers && self.workers > 1 && plan.and_then(|p| p.prefetch).unwrap_or(true),
        }
    }

    /// This mini-batch run continued on `workers` workers (`--resume RUN
    /// --workers N`): the same global batch (W x `--batch-size`) split N ways,
    /// the same partition (its K parts in contiguous ranges per worker), so
    /// every iteration trains the same roots and sums the same gradient, up
    /// to float summation order. The run's own number of workers is no move:
    /// the config as it was, whatever the run (full-graph, `--merge-plan`).
    pub fn on_workers(&self, workers: usize) -> Result<TrainConfig, BadInput> {
        if workers == self.workers {
            return Ok(self.clone());
        }
        let refuse = |why: String| {
            Err(BadInput::new(format!(
                "--workers {workers} with --resume: {why}; resume on the run's own {} workers (omit --workers)",
                self.workers
            )))
        };
        let global = self.batch_size * self.workers;
        if self.workers < 2 || workers < 2 {
            return refuse(format!(
                "only a multi-worker run moves to another number of workers, and to 2 or more (it ran on {})",
                self.workers
            ));
        }
        if self.mode != TrainMode::Minibatch {
            return refuse(format!("a {} run's batches are cut per worker", self.mode));
        }
        if !global.is_multiple_of(workers) {
            return refuse(format!(
                "the run's global batch of {global} roots ({} workers x --batch-size {}) does not split evenly into {workers}",
                self.workers, self.batch_size
            ));
        }
        if self.parts < workers {
            return refuse(format!("its partition has {} parts, fewer than {workers} workers", self.parts));
        }
        if self.merge_plan.is_some() {
            return refuse("its --merge-plan was written for its own number of workers".into());
        }
        // micrograph and pregather take one time step per worker: the saved
        // count is the old W's, not a choice the new W must honour.
        let time_steps = match self.strategy {
            StrategyKind::Micrograph | StrategyKind::Pregather => Some(workers as u32),
            _ => self.time_steps,
        };
        if let Some(t) = time_steps.filter(|&t| t as usize > workers) {
            return refuse(format!("its --time-steps {t} needs at least {t} workers"));
        }
        Ok(TrainConfig { workers, batch_size: global / workers, time_steps, ..self.clone() })
    }

    /// Roots per worker per iteration as the loop schedules them: the whole
    /// train set in one iteration in full-graph mode.
    pub fn loop_batch_size(&self, train: usize) -> usize {
        match self.mode {
            TrainMode::Minibatch => self.batch_size,
            TrainMode::FullGraph => train.div_ceil(self.workers.max(1)).max(1),
        }
    }

    /// The model this config builds for `ds`.
    pub fn model_spec(&self, ds: &DatasetFile) -> ModelSpec {
        ModelSpec {
            kind: self.model,
            in_dim: ds.feature_dim(),
            hidden: self.hidden,
            classes: ds.num_classes(),
            layers: self.fanouts.layers(),
            heads: self.heads,
            dropout: self.dropout,
            aggr: self.aggr.unwrap_or_default(),
            softmax_t: self.softmax_t.unwrap_or(1.0),
            self_loops: self.self_loops.unwrap_or(self.strategy != StrategyKind::Retexo),
            gat_heads: self.gat_heads.unwrap_or(match self.strategy {
                StrategyKind::Retexo => GatHeads::Mean,
                _ => GatHeads::Concat,
            }),
        }
    }

    /// Everything a worker would reject, checked before a run is created (so a
    /// driver of many workers fails as one worker does, with nothing left
    /// behind): the flags (`check`), then against the dataset its labels and
    /// splits, the model (`ModelSpec::check`) and the device.
    pub fn check_all(&self, ds: &DatasetFile) -> Result<(), BadInput> {
        self.check()?;
        if self.parts > 1 {
            // Partitioning comes after the run directory; its refusals come before it.
            crate::partition::check_parts(self.parts, ds.num_nodes(), &self.dataset).map_err(|e| {
                if self.parts == self.workers {
                    BadInput::new(format!("{} (one part per worker: --parts is --workers unless given)", e.0))
                } else {
                    e
                }
            })?;
        }
        if let Some(g) = &self.gnnpipe {
            g.check_graph(ds.num_nodes())?;
        }
        super::splits(ds, &self.dataset)?;
        let spec = self.model_spec(ds);
        spec.check()?;
        // Before the device is opened: a run that would hang on a GPU is refused on any build.
        crate::train::fullgraph::memory::check_device(ds, self, None, &spec, false)?;
        self.device.open()?;
        Ok(())
    }

    /// Rejects values that cannot work, naming the flag and what to give instead.
    pub fn check(&self) -> Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(m));
        if self.batch_size == 0 {
            return bad("--batch-size must be at least 1".into());
        }
        if self.eval_batch_size == 0 {
            return bad("--eval-batch-size must be at least 1".into());
        }
        if self.workers == 0 {
            return bad("--workers must be at least 1".into());
        }
        if self.epochs == 0 {
            return bad("--epochs must be at least 1".into());
        }
        if self.cache_mb.checked_mul(1 << 20).is_none() {
            return bad(format!(
                "--cache-mb {} is more bytes than a 64-bit size can hold; give the cache's size per worker in MiB (e.g. 256)",
                self.cache_mb
            ));
        }
        if self.fanouts.layers() == 0 {
            return bad("--fanout needs one entry per layer, e.g. 10,10".into());
        }
        if self.eval_fanouts.layers() != self.fanouts.layers() {
            return bad(format!(
                "--eval-fanout {} has {} layers but the model has {} (--fanout {}); give one entry per layer or `all`",
                self.eval_fanouts,
                self.eval_fanouts.layers(),
                self.fanouts.layers(),
                self.fanouts
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("--lr {} must be a positive number", self.lr));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!("--weight-decay {} must be zero or positive", self.weight_decay));
        }
        if self.strategy == StrategyKind::P3 && !self.model.splits_by_column() {
            return bad(format!(
                "--strategy p3 splits the first layer by feature column, which --model {} cannot do (its first layer reads whole rows); use --model sage, sage-max, gcn or deepgcn with p3, or another --strategy",
                self.model
            ));
        }
        self.check_model_flags()?;
        if self.parts < self.workers {
            return bad(format!(
                "--parts {} must be at least --workers {}: each worker owns one or more whole parts \
                 (a contiguous range of them); give --parts {} or more, or omit --parts",
                self.parts, self.workers, self.workers
            ));
        }
        if self.workers == 1 && self.parts > 1 {
            return bad(format!(
                "--parts {} with --workers 1: one worker trains on the whole graph without a partition; omit --parts",
                self.parts
            ));
        }
        if let Some(m) = &self.partition {
            m.parse::<crate::partition::Method>().map_err(|_| {
                BadInput::new(format!("--partition {m}: unknown method; use metis, random, hash or ldg"))
            })?;
        }
        self.check_retexo()?;
        self.check_varco()?;
        self.check_gnnpipe()?;
        if self.mode == TrainMode::FullGraph {
            if !matches!(
                self.strategy,
                StrategyKind::ModelCentric | StrategyKind::Retexo | StrategyKind::Varco | StrategyKind::Gnnpipe
            ) {
                return bad(format!(
                    "--strategy {} samples mini-batches; --mode full-graph trains the whole graph with a halo exchange \
                     per layer (graph parallelism, the default strategy): omit --strategy or use --mode minibatch",
                    self.strategy
                ));
            }
            if self.eval == EvalMode::Sampled {
                return bad("--eval sampled with --mode full-graph: the full-graph engine evaluates with layer-wise \
                            inference over all nodes; omit --eval or give --eval full"
                    .into());
            }
        }
        self.check_strategy_flags()?;
        Ok(())
    }

    /// --aggr and --softmax-t shape deepgcn's GENConv and nothing else.
    fn check_model_flags(&self) -> Result<(), BadInput> {
        if self.model != ModelKind::Gcn
            && let Some(on) = self.self_loops
        {
            return Err(BadInput::new(format!(
                "--self-loops {} applies to --model gcn only (not {}): the other models' self terms are part of their layers",
                if on { "on" } else { "off" },
                self.model
            )));
        }
        if let Some(h) = self.gat_heads {
            if self.model != ModelKind::Gat {
                return Err(BadInput::new(format!(
                    "--gat-heads {h} applies to --model gat only (not {}); omit it",
                    self.model
                )));
            }
            if self.strategy == StrategyKind::Retexo && h != GatHeads::Mean {
                return Err(BadInput::new(format!(
                    "--gat-heads {h}: RETEXO's GAT averages its heads in every stage (--gat-heads mean); omit the flag"
                )));
            }
        }
        if self.model != ModelKind::DeepGcn
            && let Some(a) = self.aggr
        {
            return Err(BadInput::new(format!(
                "--aggr {a} applies to --model deepgcn only (not {}); omit --aggr{}",
                self.model,
                if self.model == ModelKind::SageMean { ", or use --model sage-max for max aggregation" } else { "" }
            )));
        }
        if let Some(t) = self.softmax_t
            && !(t.is_finite() && t > 0.0)
        {
            return Err(BadInput::new(format!("--softmax-t {t} must be a positive number (the softmax temperature)")));
        }
        if let Some(t) = self.softmax_t
            && self.aggr != Some(GenAggr::Softmax)
        {
            return Err(BadInput::new(format!(
                "--softmax-t {t} is the temperature of deepgcn's softmax aggregation: give it with --model deepgcn --aggr softmax, or omit it"
            )));
        }
        if self.strategy == StrategyKind::Retexo && self.model.is_deep() {
            return Err(BadInput::new(format!(
                "--strategy retexo trains sage, sage-max, gcn or gat one layer at a time; --model {} is not built for its stages",
                self.model
            )));
        }
        Ok(())
    }

    /// `--strategy varco` trains the full graph; its flags apply to it alone.
    fn check_varco(&self) -> Result<(), BadInput> {
        match (&self.varco, self.strategy) {
            (_, StrategyKind::Varco) if self.mode == TrainMode::Minibatch => Err(BadInput::new(
                "--mode minibatch with --strategy varco: VARCO compresses the full-graph engine's halo exchange, \
                 so it always trains the whole graph; omit --mode",
            )),
            (Some(v), StrategyKind::Varco) => v.check(),
            (Some(_), s) => Err(BadInput::new(format!(
                "--compression, --max-ratio, --min-ratio, --slope and --ratio apply to --strategy varco only (not {s})"
            ))),
            (None, _) => Ok(()),
        }
    }

    /// `--strategy gnnpipe` pipelines the full graph over the workers' layers;
    /// its flags apply to it alone.
    fn check_gnnpipe(&self) -> Result<(), BadInput> {
        match (&self.gnnpipe, self.strategy) {
            (_, StrategyKind::Gnnpipe) if self.mode == TrainMode::Minibatch => Err(BadInput::new(
                "--mode minibatch with --strategy gnnpipe: GNNPipe pipelines the full graph through the workers' \
                 layers, so it always trains the whole graph; omit --mode",
            )),
            (Some(g), StrategyKind::Gnnpipe) => g.check(self.fanouts.layers(), self.workers),
            (None, StrategyKind::Gnnpipe) => {
                Err(BadInput::new("--strategy gnnpipe needs --chunks (graph chunks per pipeline), e.g. 8"))
            }
            (Some(_), s) => Err(BadInput::new(format!(
                "--chunks, --history, --history-smoothing and --pipeline-groups apply to --strategy gnnpipe only (not {s})"
            ))),
            (None, _) => Ok(()),
        }
    }

    /// RETEXO trains the whole graph a stage (layer) at a time, `rounds` rounds
    /// each: one round per epoch, checkpoints at stage boundaries and at a stop.
    fn check_retexo(&self) -> Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(m));
        let Some(rounds) = self.rounds else {
            if self.strategy == StrategyKind::Retexo {
                return bad("--strategy retexo needs --rounds (training rounds per layer), e.g. 200".into());
            }
            return Ok(());
        };
        if self.strategy != StrategyKind::Retexo {
            return bad(format!(
                "--rounds {rounds} applies to --strategy retexo only (not {}); give the length of other runs with --epochs",
                self.strategy
            ));
        }
        if rounds == 0 {
            return bad("--rounds 0: each RETEXO stage (layer) trains at least 1 round; give --rounds 1 or more".into());
        }
        if self.mode != TrainMode::FullGraph {
            return bad(
                "--mode minibatch with --strategy retexo: RETEXO trains on the full graph, one layer at a time \
                        (it implies --mode full-graph); omit --mode"
                    .into(),
            );
        }
        let layers = self.fanouts.layers() as u64;
        if rounds.checked_mul(layers) != Some(self.epochs) {
            return bad(format!(
                "--epochs {} with --strategy retexo: a RETEXO run is {layers} layers x --rounds {rounds} rounds = {} rounds \
                 (one per epoch); omit --epochs and give --rounds",
                self.epochs,
                rounds.saturating_mul(layers)
            ));
        }
        if self.checkpoint_every > 0 {
            return bad(format!(
                "--checkpoint-every {} with --strategy retexo: RETEXO checkpoints at every stage (layer) boundary; omit --checkpoint-every",
                self.checkpoint_every
            ));
        }
        Ok(())
    }

    /// --time-steps, --merge-plan, --migration and --prefetch against the
    /// strategy: each applies to some strategies only.
    fn check_strategy_flags(&self) -> Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(m));
        let (s, w) = (self.strategy, self.workers);
        let micro = matches!(s, StrategyKind::Micrograph | StrategyKind::Pregather | StrategyKind::Leapgnn);
        match (s, self.time_steps) {
            (_, Some(0)) => return bad("--time-steps 0: an iteration takes at least 1 time step".into()),
            (StrategyKind::Leapgnn, Some(t)) if t as usize > w => {
                return bad(format!(
                    "--time-steps {t} with --workers {w}: an iteration has at most one time step per worker; give 1..={w} or `auto`"
                ));
            }
            (StrategyKind::Leapgnn, _) => {}
            // 1 is the default of every strategy; micrograph and pregather always take W steps.
            (StrategyKind::Micrograph | StrategyKind::Pregather, Some(t)) if t == 1 || t as usize == w => {}
            (_, Some(1)) => {}
            (_, t) => {
                let t = t.map_or("auto".to_string(), |t| t.to_string());
                let steps = if micro { format!("{w} (one per worker)") } else { "1".into() };
                return bad(format!(
                    "--time-steps {t} does not apply to --strategy {s}, which always takes {steps} time step(s) per iteration; \
                     use --strategy leapgnn to choose the number of time steps"
                ));
            }
        }
        if let Some(p) = &self.merge_plan {
            if s != StrategyKind::Leapgnn {
                return bad(format!("--merge-plan {} applies to --strategy leapgnn only (not {s})", p.display()));
            }
            let plan = crate::schedule::MergePlan::load(p)?;
            plan.check(w, &p.display().to_string())?;
            if let Some(t) = self.time_steps.filter(|&t| t != plan.time_steps) {
                return bad(format!(
                    "--time-steps {t} disagrees with --merge-plan {} (time_steps = {}); give one of them",
                    p.display(),
                    plan.time_steps
                ));
            }
        }
        if self.migration == Migration::Ring && !micro {
            return bad(format!(
                "--migration ring moves the gradient accumulators of micrograph strategies; --strategy {s} has none \
                 (use micrograph, pregather or leapgnn)"
            ));
        }
        if self.prefetch == Prefetch::On && !matches!(s, StrategyKind::Pregather | StrategyKind::Leapgnn) {
            return bad(format!("--prefetch applies to --strategy pregather and leapgnn (not {s})"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceKind;

    #[test]
    fn device_spellings_round_trip_and_old_configs_still_read() {
        for (s, d) in [("cpu", DeviceKind::Cpu), ("cuda", DeviceKind::Cuda(0)), ("cuda:3", DeviceKind::Cuda(3))] {
            assert_eq!(s.parse::<DeviceKind>().unwrap(), d);
            assert_eq!(serde_json::to_value(d).unwrap(), s);
            assert_eq!(serde_json::from_value::<DeviceKind>(s.into()).unwrap(), d);
        }
        assert_eq!("cuda:0".parse::<DeviceKind>().unwrap().to_string(), "cuda");
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "CUDA", "cuda:99999999999999999999999"] {
            let e = bad.parse::<DeviceKind>().unwrap_err().to_string();
            assert!(e.contains(&format!("--device {bad}:")), "{e}");
        }
    }
}
