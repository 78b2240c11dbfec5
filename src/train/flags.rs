//! `leapgnn train`'s flags, and the rules that turn them into a `TrainConfig`.
//!
//! Each flag's default and allowed values are declared once, here: a fixed
//! default is a constant of `defaults` that clap shows in `--help` (its
//! `default_value_t`) and `TrainConfig::default()` reads; a choice is a
//! library enum's `ValueEnum` names (`value_enum`), which also give its
//! `FromStr` and `Display` (`util::value_names`). A config file becomes flags
//! before the command line's (`config_file`), so it meets the same parser and
//! defaults. Defaults that depend on other flags (the strategy's authors'
//! settings, `--parts` following `--workers`) are rules of `TrainFlags::config`,
//! which asks which flags were given (`given`).

use super::fullgraph::{gnnpipe, retexo, varco};
use super::{EvalMode, MergePlan, ResumeOverrides, StrategyKind, TrainConfig, TrainMode};
use crate::BadInput;
use crate::comm::CachePolicy;
use crate::gather::RowNorm;
use crate::model::{GatHeads, GenAggr, ModelKind};
use crate::optim::OptimizerKind;
use crate::partition::Method;
use crate::sample::{Fanout, Fanouts};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use clap::parser::ValueSource;
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::DeviceKind;
use super::Migration;
use super::Prefetch;

/// The fixed defaults of `train`'s flags (`--help` shows them; `TrainConfig::default()` is made of them).
pub mod defaults {
    use super::*;
    pub const DATASET: &str = "synthetic-small";
    pub const WORKERS: usize = 1;
    pub const STRATEGY: StrategyKind = StrategyKind::ModelCentric;
    pub const MODEL: ModelKind = ModelKind::SageMean;
    /// Neighbours per layer: one entry per layer.
    pub const FANOUT: &str = "10,10";
    pub const BATCH_SIZE: usize = 1024;
    pub const EVAL_BATCH_SIZE: usize = 1024;
    pub const HIDDEN: usize = 128;
    pub const HEADS: usize = 4;
    pub const EPOCHS: u64 = 10;
    pub const LR: f32 = 0.01;
    pub const WEIGHT_DECAY: f32 = 5e-4;
    pub const DROPOUT: f32 = 0.5;
    pub const OPTIMIZER: OptimizerKind = OptimizerKind::Adam;
    pub const SEED: u64 = 0;
    pub const NORMALIZE: RowNorm = RowNorm::None;
    pub const CACHE_MB: u64 = 0;
    pub const CACHE_POLICY: CachePolicy = CachePolicy::Degree;
    pub const MIGRATION: Migration = Migration::Fused;
    pub const PREFETCH: Prefetch = Prefetch::Auto;
    pub const DEVICE: DeviceKind = DeviceKind::Cpu;
    pub const CHECKPOINT_EVERY: u64 = 0;
    pub const MODE: TrainMode = TrainMode::Minibatch;
    pub const COMM_TIMEOUT_S: f64 = 30.0;

    pub fn fanouts() -> Fanouts {
        FANOUT.parse().expect("the default fanout parses")
    }
}

/// A strategy's own settings (its authors' run), taken by every flag of
/// these that is not given.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthorDefaults {
    pub layers: Option<usize>,
    pub hidden: Option<usize>,
    pub heads: Option<usize>,
    pub lr: Option<f32>,
    pub weight_decay: Option<f32>,
    pub dropout: Option<f32>,
    pub epochs: Option<u64>,
}

impl AuthorDefaults {
    /// "3 layers, hidden 256, ..." for `--help`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |v: Option<String>, what: &str| {
            if let Some(v) = v {
                parts.push(format!("{what} {v}"));
            }
        };
        add(self.layers.map(|v| v.to_string()), "layers");
        add(self.hidden.map(|v| v.to_string()), "hidden");
        add(self.heads.map(|v| v.to_string()), "heads");
        add(self.lr.map(|v| v.to_string()), "lr");
        add(self.weight_decay.map(|v| v.to_string()), "weight decay");
        add(self.dropout.map(|v| v.to_string()), "dropout");
        add(self.epochs.map(|v| v.to_string()), "epochs");
        parts.join(", ")
    }
}

/// What `--strategy` accepts: a strategy that trains, or one that is only
/// costed or estimated (`--dry-run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyFlag {
    Train(StrategyKind),
    /// Per-layer model migration, costed from model-centric's batches.
    Naive,
    /// The LeapGNN paper's NeutronStar estimate from a model-centric run.
    Neutronstar,
}

impl ValueEnum for StrategyFlag {
    fn value_variants<'a>() -> &'a [Self] {
        use StrategyKind::*;
        &[
            StrategyFlag::Train(ModelCentric),
            StrategyFlag::Train(Micrograph),
            StrategyFlag::Train(Pregather),
            StrategyFlag::Train(Leapgnn),
            StrategyFlag::Train(P3),
            StrategyFlag::Train(Varco),
            StrategyFlag::Train(Retexo),
            StrategyFlag::Train(Gnnpipe),
            StrategyFlag::Naive,
            StrategyFlag::Neutronstar,
        ]
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            StrategyFlag::Train(k) => {
                let p = k.to_possible_value()?;
                match k {
                    StrategyKind::Varco => p.help(format!("{} [defaults: {}]", k_help(*k), varco::AUTHORS.describe())),
                    StrategyKind::Retexo => p.help(format!(
                        "{} [defaults: {}, --rounds {} per layer, --partition random]",
                        k_help(*k),
                        retexo::AUTHORS.describe(),
                        retexo::ROUNDS
                    )),
                    _ => p,
                }
            }
            StrategyFlag::Naive => {
                PossibleValue::new("naive").help("with --dry-run: bytes naive per-layer model migration would move")
            }
            StrategyFlag::Neutronstar => PossibleValue::new("neutronstar")
                .help("with --dry-run: NeutronStar's epoch time estimated from a model-centric run"),
        })
    }
}

fn k_help(k: StrategyKind) -> String {
    k.to_possible_value().and_then(|p| p.get_help().map(|h| h.to_string())).unwrap_or_default()
}

/// Train a GNN: sampled mini-batches (the model has one layer per --fanout
/// entry; the LeapGNN artifact uses one more, we do not) or the full graph.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainFlags {
    /// Dataset name (registry or --data-dir), dataset directory or archive path [default: synthetic-small].
    pub dataset: Option<String>,
    /// Take flags from FILE: TOML `flag = value` pairs (`batch-size = 64`, `fanout = [10, 10]`, `no-tui = true`,
    /// `dataset = "cora"`), or a run's `runs/RUN/config.json` to replay it; flags on the command line override it.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// Worker processes; --batch-size is per worker (global batch = W x B) [default: 1; with an ssh or Slurm
    /// --cluster, its slots or tasks].
    #[arg(long, allow_negative_numbers = true)]
    pub workers: Option<usize>,
    /// Parts of the partitioning, at least --workers (each worker owns a contiguous range) [default: --workers].
    #[arg(long, allow_negative_numbers = true)]
    pub parts: Option<usize>,
    /// How the workers split the work. `varco` and `retexo` train on the full graph with their authors' settings
    /// wherever a flag is not given; `naive` and `neutronstar` are only costed (--dry-run).
    #[arg(long, value_enum, default_value_t = StrategyFlag::Train(defaults::STRATEGY))]
    pub strategy: StrategyFlag,
    /// With --strategy naive: report the bytes naive per-layer model migration would move per epoch for
    /// this run's batches, then exit (nothing is trained). With --strategy neutronstar: train model-centric
    /// with these flags and report the NeutronStar epoch time the LeapGNN paper's formula estimates from
    /// it (an estimate, not a NeutronStar run).
    #[arg(long)]
    pub dry_run: bool,
    /// --strategy varco: how the halo exchange is compressed [default: variable; fixed when --ratio is given].
    #[arg(long, value_enum)]
    pub compression: Option<varco::Compression>,
    /// --strategy varco: the ratio of the first step, r_max.
    #[arg(long, default_value_t = varco::VarcoConfig::DEFAULT.max_ratio, allow_negative_numbers = true)]
    pub max_ratio: f64,
    /// --strategy varco: the ratio it falls to, r_min.
    #[arg(long, default_value_t = varco::VarcoConfig::DEFAULT.min_ratio, allow_negative_numbers = true)]
    pub min_ratio: f64,
    /// --strategy varco: how fast the ratio falls, s in r(t) = max(r_max - s t (r_max - r_min) / (T - 2), r_min).
    #[arg(long, default_value_t = varco::VarcoConfig::DEFAULT.slope, allow_negative_numbers = true)]
    pub slope: f64,
    /// --strategy varco --compression fixed: the ratio of every step (each layer sends d / ratio columns).
    #[arg(long, allow_negative_numbers = true)]
    pub ratio: Option<f64>,
    /// The GNN.
    #[arg(long, value_enum, default_value_t = defaults::MODEL)]
    pub model: ModelKind,
    /// --model deepgcn: GENConv's aggregation [default: max].
    #[arg(long, value_enum)]
    pub aggr: Option<GenAggr>,
    /// --model deepgcn --aggr softmax: the softmax temperature t [default: 1.0].
    #[arg(long, allow_negative_numbers = true)]
    pub softmax_t: Option<f32>,
    /// --model gcn: a self loop per vertex, counted in the normalisation (on, as PyG's GCNConv), or
    /// in-neighbours only (off, as DGL's GraphConv on a graph without self loops) [default: on;
    /// --strategy retexo: off, as its authors'].
    #[arg(long, value_enum)]
    pub self_loops: Option<Switch>,
    /// --model gat: hidden layers' --heads heads split --hidden and are concatenated, the output
    /// layer has one (concat, the GAT paper's); or every layer has --heads heads of its full width,
    /// averaged (mean: PyG's GATConv(concat=False), RETEXO's GAT) [default: concat; --strategy
    /// retexo: mean].
    #[arg(long, value_enum)]
    pub gat_heads: Option<GatHeads>,
    /// Neighbours per layer, input layer first (`all`: every neighbour); one entry per layer (deepgcn and
    /// film: 2 per layer unless given, the LeapGNN paper's).
    #[arg(long, default_value_t = defaults::fanouts(), allow_hyphen_values = true)]
    pub fanout: Fanouts,
    /// Number of layers (must match the --fanout entries; full-graph runs: the depth) [default: 2; deepgcn 6,
    /// film 10].
    #[arg(long, allow_negative_numbers = true)]
    pub layers: Option<usize>,
    /// Fanouts for validation and test, or `all` for the full neighbourhood [default: the training ones].
    #[arg(long, allow_hyphen_values = true)]
    pub eval_fanout: Option<String>,
    /// Roots per worker per iteration.
    #[arg(long, default_value_t = defaults::BATCH_SIZE, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Roots per evaluation batch (sampled evaluation only: --eval full and --mode full-graph take no batches).
    #[arg(long, default_value_t = defaults::EVAL_BATCH_SIZE, allow_negative_numbers = true)]
    pub eval_batch_size: usize,
    /// Hidden size.
    #[arg(long, default_value_t = defaults::HIDDEN, allow_negative_numbers = true)]
    pub hidden: usize,
    /// GAT attention heads in hidden layers; must divide --hidden.
    #[arg(long, default_value_t = defaults::HEADS, allow_negative_numbers = true)]
    pub heads: usize,
    /// Epochs.
    #[arg(long, default_value_t = defaults::EPOCHS, allow_negative_numbers = true)]
    pub epochs: u64,
    /// Learning rate.
    #[arg(long, default_value_t = defaults::LR, allow_negative_numbers = true)]
    pub lr: f32,
    /// Weight decay.
    #[arg(long, default_value_t = defaults::WEIGHT_DECAY, allow_negative_numbers = true)]
    pub weight_decay: f32,
    /// Dropout on hidden layers (also input features for gcn/gat; GAT attention too).
    #[arg(long, default_value_t = defaults::DROPOUT, allow_negative_numbers = true)]
    pub dropout: f32,
    /// The optimizer (adam adds L2 decay to the gradient, as the PyG/DGL examples).
    #[arg(long, value_enum, default_value_t = defaults::OPTIMIZER)]
    pub optimizer: OptimizerKind,
    /// Seed of every random choice (init, shuffles, sampling, dropout).
    #[arg(long, default_value_t = defaults::SEED, allow_negative_numbers = true)]
    pub seed: u64,
    /// Input feature normalisation.
    #[arg(long, value_enum, default_value_t = defaults::NORMALIZE)]
    pub normalize: RowNorm,
    /// Feature cache per worker in MiB.
    #[arg(long, default_value_t = defaults::CACHE_MB, allow_negative_numbers = true)]
    pub cache_mb: u64,
    /// Time steps per iteration, 1..=W, or `auto` (tuned while training) [leapgnn only; default: the
    /// --merge-plan's, else auto]. micrograph and pregather always take W, model-centric 1.
    #[arg(long, value_parser = time_steps_value, allow_negative_numbers = true)]
    pub time_steps: Option<String>,
    /// Merge plan written by `tune-merge` (leapgnn): time steps and per-step shares of each worker's roots.
    #[arg(long)]
    pub merge_plan: Option<PathBuf>,
    /// How micrograph strategies move gradient accumulators between time steps.
    #[arg(long, value_enum, default_value_t = defaults::MIGRATION)]
    pub migration: Migration,
    /// pregather / leapgnn: ask for iteration i+1's remote rows as iteration i starts, so they travel while i
    /// computes. `auto`: as the --merge-plan says, else on for those two on more than one worker; `--prefetch`
    /// alone means on.
    #[arg(long, value_enum, value_name = "WHEN", num_args = 0..=1, default_missing_value = "on", default_value_t = defaults::PREFETCH)]
    pub prefetch: Prefetch,
    /// Cluster profile (TOML): `launcher = "local"` runs --workers local processes; `launcher = "ssh"` runs
    /// one worker per slot of its hosts (W = the sum of their `workers`), shipping binary and data over SFTP;
    /// `slurm` (or `launcher = "slurm"`), inside a Slurm allocation: one worker per task, started with srun.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// With an ssh profile: record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long, requires = "cluster")]
    pub accept_new_host_keys: bool,
    /// With an ssh profile: keep the run's directory on the hosts when it ends (rank 0's checkpoint, the
    /// copies a resume shipped). By default it is removed once the driver has copied the checkpoint back.
    #[arg(long)]
    pub keep_remote: bool,
    /// Where the model runs: cpu, cuda (GPU 0) or cuda:N (cuda needs a build with `--features cuda`).
    #[arg(long, value_name = "cpu|cuda[:N]", default_value_t = defaults::DEVICE)]
    pub device: DeviceKind,
    /// Checkpoint every N iterations (0: only at the end, which is always written).
    #[arg(long, default_value_t = defaults::CHECKPOINT_EVERY, allow_negative_numbers = true)]
    pub checkpoint_every: u64,
    /// Name of the new run under <data-dir>/runs/ [default: <dataset>-<model>-<unix time>].
    #[arg(long, conflicts_with = "resume")]
    pub run: Option<String>,
    /// Continue run RUN from its last checkpoint (only --epochs, --checkpoint-every and --workers may change;
    /// another --workers splits the same global batch over the same parts).
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
    #[arg(long, hide = true, allow_negative_numbers = true)]
    pub stop_after: Option<u64>,
    /// Ask the last worker to stop while it evaluates epoch N (RETEXO: round N), as if a stop
    /// request came then.
    #[arg(long, hide = true, allow_negative_numbers = true)]
    pub stop_in_evaluation: Option<u64>,
    /// Which remote rows fill the --cache-mb cache.
    #[arg(long, value_enum, default_value_t = defaults::CACHE_POLICY)]
    pub cache_policy: CachePolicy,
    /// Seconds any worker waits for another before failing with that worker's name.
    #[arg(long, default_value_t = defaults::COMM_TIMEOUT_S, allow_negative_numbers = true)]
    pub comm_timeout: f64,
    /// Encrypt the control connections and the workers' mesh (AES-256-GCM records, keys per job,
    /// connection and direction; also `[cluster] encrypt = true` in the profile).
    #[arg(long)]
    pub encrypt: bool,
    /// When a worker dies, stops answering or loses its link: stop all, resume from the last
    /// checkpoint (from the start before the first one), at most N times (local or ssh workers;
    /// ssh: spare hosts replace unreachable ones; see --checkpoint-every).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub restarts: u32,
    /// With several workers, check every N iterations that all replicas hold the same weights (0: never).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub check_replicas: u64,
    /// The engine: sampled mini-batches, or the whole graph (one step per epoch, a halo exchange of
    /// activations at every layer; the number of layers is --layers) [varco and retexo: full-graph].
    #[arg(long, value_enum, default_value_t = defaults::MODE)]
    pub mode: TrainMode,
    /// Same as --mode full-graph.
    #[arg(long, conflicts_with = "mode")]
    pub full_batch: bool,
    /// How validation and test nodes are scored [default: full with --eval-fanout all and in full-graph mode,
    /// else sampled].
    #[arg(long, value_enum)]
    pub eval: Option<EvalMode>,
    /// Memory in MiB that the workers on this machine may use together, checked before the run starts (the
    /// model, and one iteration's sampled layers or the full graph's activations) [default: this machine's
    /// MemAvailable, and each worker within the address-space limit (ulimit -v) it inherits].
    #[arg(long, allow_negative_numbers = true)]
    pub memory_limit_mb: Option<u64>,
    /// --strategy retexo: training rounds per layer (stage).
    #[arg(long, default_value_t = retexo::ROUNDS, allow_negative_numbers = true)]
    pub rounds: u64,
    /// --strategy retexo: a stage's gradient crosses as its factors (the training rows once per stage, the
    /// gradients of their logits each round, every worker recomputing the stage for all training vertices;
    /// CPU only) where that is fewer bytes than all-reducing it (on), or is all-reduced (off) [default: on].
    #[arg(long, value_enum)]
    pub factored_grads: Option<Switch>,
    /// --strategy gnnpipe: graph chunks (METIS) that flow through the pipeline each epoch [default: 8].
    #[arg(long, allow_negative_numbers = true)]
    pub chunks: Option<usize>,
    /// --strategy gnnpipe: in-neighbours in chunks not yet computed this epoch read last epoch's rows (on) or
    /// zeros (off; with --chunks 1, exactly full-graph training) [default: on].
    #[arg(long, value_enum)]
    pub history: Option<Switch>,
    /// --strategy gnnpipe: the rows read from the history are smoothed over the epochs, each epoch's row
    /// weighing 1 - G and the smoothed history before it G (PipeGCN's smoothing; it removed the 8-layer
    /// GCN's oscillation on synthetic-arxiv); 0 = last epoch's rows as they were [default: 0.8; 0 with --history off].
    #[arg(long, value_name = "G", allow_negative_numbers = true)]
    pub history_smoothing: Option<f32>,
    /// --strategy gnnpipe: graph-parallel groups, each a pipeline of --workers / G stages over its part of the
    /// graph, the groups' matching stages summing their gradients [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub pipeline_groups: Option<usize>,
    /// How the workers' parts are cut [default: metis; random with --strategy retexo].
    #[arg(long, value_enum)]
    pub partition: Option<Method>,
    /// Write the first iteration's summed gradient to FILE (raw little-endian f32; for tests).
    #[arg(long, hide = true, value_name = "FILE")]
    pub dump_grad: Option<PathBuf>,
    /// The flags given (on the command line or in --config's file), by id (`batch_size`); filled by
    /// `note_given`. Rules that depend on whether a flag was given read it.
    #[arg(skip)]
    pub given: BTreeSet<String>,
}

/// What a `train` invocation asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A new run of this config.
    Train(Box<TrainConfig>),
    /// Continue run RUN from its checkpoint.
    Resume { run: String, overrides: ResumeOverrides },
    /// Report naive migration's bytes for this config's batches.
    Naive(Box<TrainConfig>),
    /// Train model-centric with this config and report NeutronStar's estimate.
    Neutronstar(Box<TrainConfig>),
}

/// An `on`/`off` flag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// Flags that define a run: a resumed run keeps its saved ones.
const DEFINE_THE_RUN: &[&str] = &[
    "dataset",
    "parts",
    "strategy",
    "model",
    "fanout",
    "layers",
    "eval_fanout",
    "batch_size",
    "eval_batch_size",
    "hidden",
    "heads",
    "aggr",
    "softmax_t",
    "self_loops",
    "gat_heads",
    "lr",
    "weight_decay",
    "dropout",
    "optimizer",
    "seed",
    "cache_mb",
    "cache_policy",
    "time_steps",
    "merge_plan",
    "migration",
    "prefetch",
    "cluster",
    "device",
    "normalize",
    "mode",
    "full_batch",
    "eval",
    "partition",
    "compression",
    "max_ratio",
    "min_ratio",
    "slope",
    "ratio",
    "rounds",
    "factored_grads",
    "chunks",
    "history",
    "history_smoothing",
    "pipeline_groups",
    "dry_run",
];

/// `batch_size` -> `--batch-size` (`dataset` -> `NAME`).
fn flag_of(id: &str) -> String {
    if id == "dataset" { "NAME".into() } else { format!("--{}", id.replace('_', "-")) }
}

impl TrainFlags {
    /// Records which flags `m` (the `train` subcommand's matches) got from the command line.
    pub fn note_given(&mut self, m: &clap::ArgMatches) {
        self.given = m
            .ids()
            .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
            .map(|id| id.as_str().to_string())
            .collect();
    }

    /// Whether flag `id` (field name, `batch_size`) was given.
    pub fn given(&self, id: &str) -> bool {
        self.given.contains(id)
    }

    /// The flags given on the command line, as clap parses them, with
    /// `given` filled (for tests and library callers).
    pub fn parse_from<I, T>(args: I) -> Result<TrainFlags, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cmd = <TrainFlags as clap::Args>::augment_args(clap::Command::new("train").args_override_self(true));
        let m = cmd.try_get_matches_from(args)?;
        let mut f = <TrainFlags as clap::FromArgMatches>::from_arg_matches(&m)?;
        f.note_given(&m);
        Ok(f)
    }

    /// The invocation's action, every rule between flags checked.
    pub fn action(&self) -> Result<Action, BadInput> {
        match self.strategy {
            StrategyFlag::Naive | StrategyFlag::Neutronstar => {
                let what = if self.strategy == StrategyFlag::Naive {
                    "--strategy naive cannot be trained (it is the per-layer model migration strawman, costed from \
                     the sampled batches); add --dry-run to report the bytes it would move per epoch"
                } else {
                    "--strategy neutronstar cannot be trained here (LeapGNN's paper estimates it from a model-centric \
                     run); add --dry-run to train model-centric with these flags and report the estimate"
                };
                if !self.dry_run {
                    return Err(BadInput::new(what));
                }
                if self.resume.is_some() {
                    return Err(BadInput::new(
                        "--dry-run cannot be combined with --resume: give the run's flags instead",
                    ));
                }
                let cfg = Box::new(self.config()?);
                Ok(if self.strategy == StrategyFlag::Naive { Action::Naive(cfg) } else { Action::Neutronstar(cfg) })
            }
            StrategyFlag::Train(_) if self.dry_run => Err(BadInput::new(
                "--dry-run costs naive model migration or estimates NeutronStar: give it with --strategy naive or neutronstar",
            )),
            StrategyFlag::Train(_) => match &self.resume {
                Some(run) => {
                    self.reject_on_resume()?;
                    let overrides = ResumeOverrides {
                        epochs: self.given("epochs").then_some(self.epochs),
                        checkpoint_every: self.given("checkpoint_every").then_some(self.checkpoint_every),
                        workers: self.workers,
                    };
                    Ok(Action::Resume { run: run.clone(), overrides })
                }
                None => Ok(Action::Train(Box::new(self.config()?))),
            },
        }
    }

    /// A resumed run keeps its config: flags that would change it are refused.
    pub fn reject_on_resume(&self) -> Result<(), BadInput> {
        match DEFINE_THE_RUN.iter().find(|id| self.given(id)) {
            Some(id) => Err(BadInput::new(format!(
                "{} cannot be given with --resume: a resumed run keeps its saved config (only --epochs, \
                 --checkpoint-every and --workers may change)",
                flag_of(id)
            ))),
            None => Ok(()),
        }
    }

    /// The run these flags define (naive and neutronstar: the model-centric
    /// run they cost). `TrainConfig::check` follows once a cluster profile has
    /// set the number of workers.
    pub fn config(&self) -> Result<TrainConfig, BadInput> {
        let strategy = match self.strategy {
            StrategyFlag::Train(k) => k,
            StrategyFlag::Naive | StrategyFlag::Neutronstar => StrategyKind::ModelCentric,
        };
        let full_graph_strategy =
            matches!(strategy, StrategyKind::Varco | StrategyKind::Retexo | StrategyKind::Gnnpipe);
        if self.given("mode") && self.mode == TrainMode::Minibatch && full_graph_strategy {
            let why = match strategy {
                StrategyKind::Retexo => {
                    "RETEXO trains on the full graph, one layer at a time (it implies --mode full-graph)"
                }
                StrategyKind::Gnnpipe => {
                    "GNNPipe pipelines the full graph through the workers' layers, so it always trains the whole graph"
                }
                _ => "VARCO compresses the full-graph engine's halo exchange, so it always trains the whole graph",
            };
            return Err(BadInput::new(format!("--mode minibatch with --strategy {strategy}: {why}; omit --mode")));
        }
        let mode = if self.full_batch || full_graph_strategy { TrainMode::FullGraph } else { self.mode };
        let authors = match strategy {
            StrategyKind::Varco => varco::AUTHORS,
            StrategyKind::Retexo => retexo::AUTHORS,
            _ => AuthorDefaults::default(),
        };
        let pick =
            |id: &str, flag: f32, author: Option<f32>| if self.given(id) { flag } else { author.unwrap_or(flag) };
        let rounds = self.retexo_rounds(strategy)?;
        self.check_replicas_apply(strategy)?;
        if self.cache_policy != defaults::CACHE_POLICY && self.cache_mb == 0 && mode == TrainMode::Minibatch {
            return Err(BadInput::new(format!(
                "--cache-policy {} chooses the rows that fill the --cache-mb cache, but --cache-mb is 0 (no cache); \
                 give --cache-mb M (MiB per worker) or omit --cache-policy",
                self.cache_policy
            )));
        }
        let epochs = match rounds {
            Some(_) if self.given("epochs") => {
                return Err(BadInput::new(format!(
                    "--epochs {} with --strategy retexo: a RETEXO run is --layers x --rounds rounds (one per epoch); \
                     give --rounds (rounds per layer) instead",
                    self.epochs
                )));
            }
            _ if self.given("epochs") => self.epochs,
            _ => authors.epochs.unwrap_or(self.epochs),
        };
        // Either engine: no layers is refused as such, not as a fanout mismatch.
        if self.layers == Some(0) {
            return Err(BadInput::new("--layers must be at least 1"));
        }
        let (fanouts, eval_fanouts, eval) = match mode {
            TrainMode::FullGraph => self.full_graph_fanouts(authors.layers)?,
            TrainMode::Minibatch => self.sampled_fanouts()?,
        };
        if eval == EvalMode::Full && self.given("eval_batch_size") {
            // Layer-wise inference computes every node's layer at once, in no batches.
            let why = match mode {
                TrainMode::FullGraph => "--mode full-graph evaluates",
                TrainMode::Minibatch => "--eval full (the default with --eval-fanout all) evaluates",
            };
            return Err(BadInput::new(format!(
                "--eval-batch-size {} sizes sampled evaluation's batches, but {why} with layer-wise inference over \
                 all nodes, in no batches; omit --eval-batch-size, or give --eval sampled with --mode minibatch",
                self.eval_batch_size
            )));
        }
        let epochs = match rounds {
            Some(r) => r.checked_mul(fanouts.layers() as u64).ok_or_else(|| {
                BadInput::new(format!(
                    "--rounds {r}: {} layers x {r} rounds is more rounds than a run can count; give fewer --rounds",
                    fanouts.layers()
                ))
            })?,
            None => epochs,
        };
        let workers = self.workers.unwrap_or(defaults::WORKERS);
        let hidden = if self.given("hidden") { self.hidden } else { authors.hidden.unwrap_or(self.hidden) };
        let heads = if self.given("heads") { self.heads } else { authors.heads.unwrap_or(self.heads) };
        let cfg = TrainConfig {
            dataset: self.dataset.clone().unwrap_or_else(|| defaults::DATASET.into()),
            strategy,
            workers,
            // One part per worker unless told otherwise.
            parts: self.parts.unwrap_or(workers),
            model: self.model,
            fanouts,
            eval_fanouts,
            batch_size: self.batch_size,
            eval_batch_size: self.eval_batch_size,
            hidden,
            heads,
            aggr: self.aggr,
            softmax_t: self.softmax_t,
            self_loops: self.self_loops.map(|s| s == Switch::On),
            gat_heads: self.gat_heads,
            epochs,
            lr: pick("lr", self.lr, authors.lr),
            weight_decay: pick("weight_decay", self.weight_decay, authors.weight_decay),
            dropout: pick("dropout", self.dropout, authors.dropout),
            optimizer: self.optimizer,
            seed: self.seed,
            checkpoint_every: self.checkpoint_every,
            device: self.device,
            normalize: self.normalize,
            cache_mb: self.cache_mb,
            cache_policy: self.cache_policy,
            time_steps: self.time_steps(strategy, workers)?,
            merge_plan: self.merge_plan.clone(),
            migration: self.migration,
            cluster: self.cluster.clone(),
            encrypt: self.encrypt,
            prefetch: self.prefetch,
            mode,
            eval,
            partition: self.partition.map(|m| m.to_string()),
            rounds,
            factored_grads: self.retexo_factored_grads(strategy)?,
            varco: self.varco(strategy),
            gnnpipe: self.gnnpipe(strategy),
        };
        Ok(cfg)
    }

    /// `--check-replicas` compares the replicas of one model between
    /// iterations; a GNNPipe worker holds its own layers (no replicas), and
    /// RETEXO's stages are not checked: refused there rather than ignored.
    fn check_replicas_apply(&self, strategy: StrategyKind) -> Result<(), BadInput> {
        let why = match strategy {
            _ if self.check_replicas == 0 => return Ok(()),
            StrategyKind::Gnnpipe => {
                "each GNNPipe worker is a pipeline stage holding its own block of layers, so \
                                      there are no replicas to compare"
            }
            StrategyKind::Retexo => {
                "RETEXO's stages are not checked (its rounds run outside the iterations the \
                                     check runs in)"
            }
            _ => return Ok(()),
        };
        Err(BadInput::new(format!(
            "--check-replicas {} with --strategy {strategy}: {why}; omit --check-replicas",
            self.check_replicas
        )))
    }

    /// `--factored-grads` for RETEXO; refused elsewhere.
    fn retexo_factored_grads(&self, strategy: StrategyKind) -> Result<Option<bool>, BadInput> {
        match (self.factored_grads, strategy) {
            (Some(s), StrategyKind::Retexo) => Ok(Some(s == Switch::On)),
            (Some(_), other) => Err(BadInput::new(format!(
                "--factored-grads applies to --strategy retexo only (not {other}): other strategies all-reduce every gradient"
            ))),
            (None, _) => Ok(None),
        }
    }

    /// `--rounds` for RETEXO (its default when not given); refused elsewhere.
    fn retexo_rounds(&self, strategy: StrategyKind) -> Result<Option<u64>, BadInput> {
        match strategy {
            StrategyKind::Retexo if self.rounds == 0 => Err(BadInput::new(
                "--rounds 0: each RETEXO stage (layer) trains at least 1 round; give --rounds 1 or more",
            )),
            StrategyKind::Retexo => Ok(Some(self.rounds)),
            _ if self.given("rounds") => Err(BadInput::new(format!(
                "--rounds {} applies to --strategy retexo only; give the length of other runs with --epochs",
                self.rounds
            ))),
            _ => Ok(None),
        }
    }

    /// `--strategy varco`'s flags: always a config for varco (so the run's
    /// config.json shows them); for another strategy one if any was given,
    /// which the config's check then refuses.
    fn varco(&self, strategy: StrategyKind) -> Option<varco::VarcoConfig> {
        let given = ["compression", "max_ratio", "min_ratio", "slope", "ratio"].iter().any(|id| self.given(id));
        if strategy != StrategyKind::Varco && !given {
            return None;
        }
        let implied =
            if self.ratio.is_some() { varco::Compression::Fixed } else { varco::VarcoConfig::DEFAULT.compression };
        Some(varco::VarcoConfig {
            compression: self.compression.unwrap_or(implied),
            max_ratio: self.max_ratio,
            min_ratio: self.min_ratio,
            slope: self.slope,
            ratio: self.ratio,
        })
    }

    /// `--strategy gnnpipe`'s flags: always a config for gnnpipe; for another
    /// strategy one if any was given, which the config's check then refuses.
    fn gnnpipe(&self, strategy: StrategyKind) -> Option<gnnpipe::GnnPipeConfig> {
        let given = ["chunks", "history", "history_smoothing", "pipeline_groups"].iter().any(|id| self.given(id));
        if strategy != StrategyKind::Gnnpipe && !given {
            return None;
        }
        let d = gnnpipe::GnnPipeConfig::default();
        let history = self.history.map_or(d.history, |h| h == Switch::On);
        Some(gnnpipe::GnnPipeConfig {
            chunks: self.chunks.unwrap_or(d.chunks),
            history,
            // With the history off there is nothing to smooth; only an explicit G is refused there.
            history_smoothing: self.history_smoothing.unwrap_or(if history { d.history_smoothing } else { 0.0 }),
            groups: self.pipeline_groups.unwrap_or(d.groups),
        })
    }

    /// Mini-batch training: --fanout, --layers (checked against it), --eval-fanout and --eval.
    fn sampled_fanouts(&self) -> Result<(Fanouts, Fanouts, EvalMode), BadInput> {
        let fanouts = if self.model.is_deep() && !self.given("fanout") {
            // The deep models' default: the paper's fanout of 2 per layer.
            let layers = self.layers.unwrap_or(self.model.default_layers());
            vec!["2"; layers].join(",").parse()?
        } else {
            self.fanout.clone()
        };
        if let Some(l) = self.layers
            && l != fanouts.layers()
        {
            return Err(BadInput::new(format!(
                "--layers {l} does not match --fanout {fanouts} ({} layers): give one fanout per layer",
                fanouts.layers()
            )));
        }
        let eval_fanouts = match self.eval_fanout.as_deref() {
            None => fanouts.clone(),
            Some(s) if s.eq_ignore_ascii_case("all") => Fanouts::all(fanouts.layers()),
            Some(s) => s.parse().map_err(|e: BadInput| BadInput::new(format!("--eval-fanout: {e}")))?,
        };
        let eval = match self.eval {
            Some(e) => e,
            None if eval_fanouts.0.iter().all(|f| *f == Fanout::All) => EvalMode::Full,
            None => EvalMode::Sampled,
        };
        Ok((fanouts, eval_fanouts, eval))
    }

    /// The full-graph engine: every layer reads the whole neighbourhood, so
    /// sampling flags are refused rather than ignored.
    fn full_graph_fanouts(&self, author_layers: Option<usize>) -> Result<(Fanouts, Fanouts, EvalMode), BadInput> {
        for id in ["fanout", "eval_fanout", "batch_size", "time_steps", "merge_plan", "migration", "prefetch"] {
            if self.given(id) || (id == "prefetch" && self.prefetch != Prefetch::Auto) {
                let flag = flag_of(id);
                return Err(BadInput::new(format!(
                    "{flag} applies to sampled mini-batch training; --mode full-graph trains on every neighbour of every \
                     node (give the number of layers with --layers), so omit {flag} or use --mode minibatch"
                )));
            }
        }
        // The feature cache holds remote rows for sampled batches; the full-graph
        // engine moves whole layers of activations and has none to fill.
        if self.cache_mb > 0 || self.cache_policy != defaults::CACHE_POLICY {
            let flag =
                if self.cache_mb > 0 { format!("--cache-mb {}", self.cache_mb) } else { "--cache-policy".into() };
            return Err(BadInput::new(format!(
                "{flag}: the feature cache holds remote rows for sampled mini-batches; --mode full-graph exchanges \
                 each layer's activations (a halo exchange) and has no feature cache, so omit --cache-mb and \
                 --cache-policy or use --mode minibatch"
            )));
        }
        let depth = if self.model.is_deep() { self.model.default_layers() } else { defaults::fanouts().layers() };
        let layers = self.layers.or(author_layers).unwrap_or(depth);
        let all = Fanouts::all(layers);
        Ok((all.clone(), all, self.eval.unwrap_or(EvalMode::Full)))
    }

    /// `--time-steps`: each strategy's own count unless given; leapgnn
    /// follows its merge plan, else tunes (`None`).
    fn time_steps(&self, strategy: StrategyKind, workers: usize) -> Result<Option<u32>, BadInput> {
        let micro_w = matches!(strategy, StrategyKind::Micrograph | StrategyKind::Pregather);
        match self.time_steps.as_deref() {
            None => Ok(match strategy {
                _ if micro_w => Some(workers as u32),
                StrategyKind::Leapgnn => {
                    self.merge_plan.as_deref().map(MergePlan::load).transpose()?.map(|p| p.time_steps)
                }
                _ => Some(1),
            }),
            Some("auto") => Ok(None),
            Some(s) => {
                let t: u32 =
                    s.parse().map_err(|_| BadInput::new(format!("--time-steps `{s}`: expected a number or `auto`")))?;
                if micro_w && t as usize != workers {
                    return Err(BadInput::new(format!(
                        "--time-steps {t} does not apply to --strategy {strategy}, which always takes one time step per \
                         worker ({workers}); use --strategy leapgnn to choose the number of time steps"
                    )));
                }
                Ok(Some(t))
            }
        }
    }
}

/// `--time-steps`' parser: `auto` or a count of 1 or more, checked where
/// clap reads the value, so that a `--config` file's wrong value is put to
/// its key, and a negative one is refused as a value, not taken for a flag.
fn time_steps_value(s: &str) -> Result<String, String> {
    match s.parse::<u32>() {
        Ok(t) if t >= 1 => Ok(s.to_string()),
        _ if s == "auto" => Ok(s.to_string()),
        _ => Err("expected `auto` or a whole number of time steps, 1 or more".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> TrainFlags {
        TrainFlags::parse_from(std::iter::once("train").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn no_flags_give_the_library_default_config() {
        assert_eq!(flags(&[]).config().unwrap(), TrainConfig::default());
    }

    #[test]
    fn a_strategy_takes_its_authors_settings_where_no_flag_is_given() {
        let r = flags(&["--strategy", "retexo"]).config().unwrap();
        assert_eq!((r.hidden, r.heads, r.lr, r.dropout, r.fanouts.layers()), (256, 8, 0.003, 0.3, 2));
        assert_eq!(
            (r.rounds, r.epochs, r.mode, r.partition_method()),
            (Some(200), 400, TrainMode::FullGraph, "random")
        );
        let r = flags(&["--strategy", "retexo", "--hidden", "64", "--rounds", "5", "--layers", "3"]).config().unwrap();
        assert_eq!((r.hidden, r.epochs, r.lr), (64, 15, 0.003));
        let v = flags(&["--strategy", "varco"]).config().unwrap();
        assert_eq!((v.hidden, v.fanouts.layers(), v.epochs, v.dropout, v.weight_decay), (256, 3, 300, 0.0, 0.0));
        assert_eq!(v.varco, Some(varco::VarcoConfig::DEFAULT));
        // A flag given at its common default still wins over the authors' value.
        let v = flags(&["--strategy", "varco", "--hidden", "128", "--ratio", "4"]).config().unwrap();
        assert_eq!(v.hidden, 128);
        assert_eq!(v.varco.unwrap().compression, varco::Compression::Fixed);
    }

    #[test]
    fn a_resumed_run_refuses_the_flags_that_define_it() {
        let a = flags(&["--resume", "r1", "--epochs", "4"]).action().unwrap();
        let overrides = ResumeOverrides { epochs: Some(4), checkpoint_every: None, workers: None };
        assert_eq!(a, Action::Resume { run: "r1".into(), overrides });
        let e = flags(&["--resume", "r1", "--lr", "0.01"]).action().unwrap_err();
        assert!(e.0.starts_with("--lr cannot be given with --resume"), "{e}");
        let e = flags(&["cora", "--resume", "r1"]).action().unwrap_err();
        assert!(e.0.starts_with("NAME cannot"), "{e}");
    }

    #[test]
    fn rules_between_flags_name_the_flag() {
        let e = |args: &[&str]| flags(args).action().unwrap_err().0;
        assert!(e(&["--full-batch", "--fanout", "5,5"]).starts_with("--fanout applies to sampled"));
        assert!(e(&["--strategy", "retexo", "--epochs", "3"]).starts_with("--epochs 3 with --strategy retexo"));
        assert!(e(&["--strategy", "retexo", "--rounds", "0"]).starts_with("--rounds 0"));
        assert!(e(&["--rounds", "3"]).starts_with("--rounds 3 applies to --strategy retexo only"));
        assert!(e(&["--factored-grads", "off"]).starts_with("--factored-grads applies to --strategy retexo only"));
        assert!(
            e(&["--strategy", "varco", "--mode", "minibatch"]).starts_with("--mode minibatch with --strategy varco")
        );
        assert!(e(&["--strategy", "naive"]).contains("add --dry-run"));
        assert!(e(&["--dry-run"]).starts_with("--dry-run costs naive"));
        assert!(e(&["--layers", "3"]).starts_with("--layers 3 does not match --fanout 10,10"));
        // No layers is refused as such, not as a fanout mismatch, in both engines.
        for model in ["sage", "deepgcn", "film"] {
            assert_eq!(e(&["--model", model, "--layers", "0"]), "--layers must be at least 1");
            assert_eq!(e(&["--model", model, "--layers", "0", "--full-batch"]), "--layers must be at least 1");
        }
        let max = u64::MAX.to_string();
        assert!(e(&["--strategy", "retexo", "--rounds", &max]).starts_with(&format!("--rounds {max}: 2 layers x")));
    }

    #[test]
    fn negative_numbers_reach_the_checks_that_name_the_flag() {
        // Parsed as values (not as unknown short flags), so the config's own check explains the range.
        for (flag, v) in [("--lr", "-1"), ("--dropout", "-0.5"), ("--weight-decay", "-0.0001"), ("--slope", "-1")] {
            let f = flags(&[flag, v]);
            let given: f32 = v.parse().unwrap();
            let seen = match flag {
                "--lr" => f.lr,
                "--dropout" => f.dropout,
                "--weight-decay" => f.weight_decay,
                _ => f.slope as f32,
            };
            assert_eq!(seen, given, "{flag}");
        }
        assert_eq!(flags(&["--history-smoothing", "-0.1"]).history_smoothing, Some(-0.1));
        assert_eq!(flags(&["--softmax-t", "-2"]).softmax_t, Some(-2.0));
        assert_eq!(flags(&["--comm-timeout", "-3"]).comm_timeout, -3.0);
        let e = |args: &[&str]| flags(args).config().and_then(|c| c.check()).unwrap_err().0;
        assert!(e(&["--lr", "-1"]).starts_with("--lr -1 must be a positive number"));
        assert!(e(&["--strategy", "varco", "--slope", "-1"]).starts_with("--slope -1 must be zero or positive"));
        assert!(
            e(&["--strategy", "gnnpipe", "--layers", "4", "--history-smoothing", "-0.1"])
                .starts_with("--history-smoothing -0.1")
        );
        assert!(e(&["--model", "deepgcn", "--aggr", "softmax", "--softmax-t", "-2"]).starts_with("--softmax-t -2"));
    }

    #[test]
    fn bad_values_are_refused_by_the_parser_naming_the_flag() {
        let e = TrainFlags::parse_from(["train", "--model", "gin"]).unwrap_err().to_string();
        assert!(e.contains("'gin'") && e.contains("--model") && e.contains("sage-max"), "{e}");
        let e = TrainFlags::parse_from(["train", "--fanout", "5,x"]).unwrap_err().to_string();
        assert!(e.contains("--fanout"), "{e}");
    }
}
