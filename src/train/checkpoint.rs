//! `runs/<run>/checkpoint/`: the weights (safetensors, PyTorch names and
//! layouts, loadable with `safetensors.torch.load_file`), the optimizer state
//! (safetensors, `exp_avg.<param>` ...), for GNNPipe the layers' embedding
//! history (safetensors, `history.<layer>`: one row per vertex), and
//! `state.json` (config, position, history). The tensor files carry the
//! global iteration in their names and `state.json`, written last and
//! atomically, names the files that belong to it: a crash at any point
//! leaves the previous checkpoint whole. It records each tensor file's
//! sha256 too, checked whenever one is read (a checkpoint written before
//! the record has none and is read unchecked): a damaged or swapped file
//! is refused instead of loaded as a model nobody trained.
//!
//! Every random draw is a pure function of (seed, epoch, iteration, ...), so
//! the RNG position is the (epoch, iteration) position itself.

use super::{TrainConfig, TrainError};
use crate::BadInput;
use crate::format::{sha256_hex, write_atomic};
use crate::metrics::{ByteCounts, EpochRecord, RowCounts};
use crate::model::{ModelSpec, Params};
use crate::optim::{OptimState, Optimizer};
use candle_core::Device;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const STATE: &str = "state.json";
const VERSION: u32 = 1;

/// Where a run is and what it has done so far.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// The epoch to run next (== epochs when the run is complete).
    pub epoch: u64,
    /// The first iteration of `epoch` not done yet.
    pub iteration: u64,
    /// Iterations done over the whole run.
    pub global_iteration: u64,
    pub history: Vec<EpochRecord>,
    /// The current epoch's iterations so far: loss sum, count and seconds.
    pub epoch_loss_sum: f64,
    pub epoch_iterations: u64,
    pub epoch_seconds: f64,
    pub rows: RowCounts,
    /// What the training steps' records billed (sent, by category).
    pub bytes: ByteCounts,
    /// What this worker sent while evaluating (sent, by category).
    #[serde(default)]
    pub eval_bytes: ByteCounts,
    /// leapgnn `--time-steps auto`: the tuning so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_steps: Option<super::minibatch::AutoState>,
    /// Every worker's rows and bytes up to this checkpoint, summed over the
    /// run's attempts: what a resume starts from when the driver that
    /// received the workers' reports died with them. Every loop writes it in
    /// every checkpoint; absent only in checkpoints written before it, and
    /// after a resume that did not know the count it started from (from
    /// such a checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_counts: Option<RunCounts>,
    /// Every worker's final report as it stood at the final checkpoint, by
    /// rank (rank 0's checkpoint only): what a driver that died before the
    /// summary would have written to `workers.json`, and the bytes of the
    /// last attempt's setup that `run_counts` leaves out. Read only from a
    /// finished run's final checkpoint, which always sets it; absent in
    /// final checkpoints of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_reports: Option<Vec<FinalReport>>,
}

/// A worker's final report (`distributed::WorkerDone`), less what its
/// process learns after its final checkpoint.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FinalReport {
    pub rank: usize,
    /// Everything its mesh moved since its process started, as its final report has it.
    pub bytes: crate::comm::ByteCounts,
    /// What it sent evaluating since its process started.
    pub eval_bytes: ByteCounts,
    /// What it sent that the run's count (`run_counts`) leaves out: the
    /// attempt's setup (mesh, cache fill, initial weights, the barrier that
    /// starts training) and GNNPipe's final exchange of its stages.
    pub uncounted: ByteCounts,
    /// Rows read through its fetching source, and fetches that needed a remote
    /// row; `None` where its rows are all at hand.
    pub fetch: Option<(crate::comm::FetchStats, u64)>,
    /// Its peak resident set size up to the final checkpoint.
    pub peak_rss_bytes: Option<u64>,
    /// `--check-replicas`: the checks it passed (every one: they come before
    /// iterations); `None` where the run asked for none, and in the reports
    /// of versions before it, which then read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_checks: Option<u64>,
}

/// Rows and bytes of a run as a restarted run counts them: every worker's
/// step records (training, billed per iteration) and evaluations, not the
/// setup of each attempt (mesh, cache fill, initial weights), which the
/// attempt that resumes does again and counts itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunCounts {
    pub rows: RowCounts,
    /// Sent while training, by category.
    pub train: ByteCounts,
    /// Sent while evaluating, by category.
    pub eval: ByteCounts,
}

impl Progress {
    /// Every one of a run's `epochs` epochs trained and evaluated.
    pub fn complete(&self, epochs: u64) -> bool {
        epochs > 0 && self.epoch >= epochs
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StateFile {
    version: u32,
    config: TrainConfig,
    progress: Progress,
    /// File names (in the checkpoint directory).
    weights: String,
    optimizer: String,
    /// How the RNG position is encoded.
    rng: String,
    /// Rows a strategy reads from the previous step (GNNPipe's history), if
    /// it keeps any: without them it could not go on as the run would have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    history: Option<String>,
    /// Each tensor file's sha256 (file name -> hex) as written; absent in
    /// checkpoints of versions before it, which are read unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<BTreeMap<String, String>>,
}

/// Named row blocks (`rows x width`, f32) saved with a checkpoint.
pub type HistoryRows<'a> = [(String, usize, &'a [f32])];

/// How rank 0's event about a periodic checkpoint starts (the driver of a
/// run without shared files copies each one back when it reads this).
pub const WRITTEN: &str = "checkpoint written after iteration";

pub fn dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoint")
}

/// Writes a checkpoint of `params`, `opt` and `progress` into `dir`.
pub fn save(
    dir: &Path,
    cfg: &TrainConfig,
    progress: &Progress,
    params: &Params,
    opt: &dyn Optimizer,
) -> Result<(), TrainError> {
    save_with_history(dir, cfg, progress, params, opt, None)
}

/// `save`, with the strategy's history rows (name, width, row-major rows).
pub fn save_with_history(
    dir: &Path,
    cfg: &TrainConfig,
    progress: &Progress,
    params: &Params,
    opt: &dyn Optimizer,
    history: Option<&HistoryRows<'_>>,
) -> Result<(), TrainError> {
    let weights = format!("model-{:09}.safetensors", progress.global_iteration);
    let optimizer = format!("optimizer-{:09}.safetensors", progress.global_iteration);
    let mut named = params.named(&params.flat_values()?, "")?;
    named.extend(params.buffers_named()?);
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let bytes = safetensors::tensor::serialize(named.iter().map(|(k, v)| (k.as_str(), v)), Some(meta))
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let mut sha256 = BTreeMap::new();
    let mut write = |name: &str, bytes: &[u8]| -> Result<(), TrainError> {
        sha256.insert(name.to_string(), sha256_hex(bytes));
        Ok(write_atomic(dir.join(name), bytes)?)
    };
    write(&weights, &bytes)?;
    write(&optimizer, &opt.state().to_safetensors(params)?)?;
    let history = match history {
        Some(blocks) => {
            let name = format!("history-{:09}.safetensors", progress.global_iteration);
            write(&name, &history_bytes(blocks)?)?;
            Some(name)
        }
        None => None,
    };
    let state = StateFile {
        version: VERSION,
        config: cfg.clone(),
        progress: progress.clone(),
        weights: weights.clone(),
        optimizer: optimizer.clone(),
        rng: "counter-based: every draw is a hash of (seed, epoch, iteration, ...); position = (epoch, iteration)"
            .into(),
        history,
        sha256: Some(sha256),
    };
    let json = serde_json::to_vec_pretty(&state).expect("state serialises");
    write_atomic(dir.join(STATE), &json)?;
    prune(dir, &state);
    Ok(())
}

fn history_bytes(blocks: &HistoryRows<'_>) -> Result<Vec<u8>, TrainError> {
    let mut views = Vec::with_capacity(blocks.len());
    for (name, width, rows) in blocks {
        let shape = vec![rows.len() / (*width).max(1), *width];
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, bytemuck::cast_slice(rows))
            .map_err(|e| candle_core::Error::Msg(format!("history block {name}: {e}")))?;
        views.push((name.as_str(), view));
    }
    Ok(safetensors::tensor::serialize(views, None).map_err(|e| candle_core::Error::Msg(e.to_string()))?)
}

impl StateFile {
    /// The tensor files this state names, in the order they are written.
    fn tensor_files(&self) -> Vec<&str> {
        [Some(&self.weights), Some(&self.optimizer), self.history.as_ref()]
            .into_iter()
            .flatten()
            .map(|s| s.as_str())
            .collect()
    }

    /// The sha256 recorded for tensor file `name` (None in a checkpoint of
    /// a version before the record).
    fn digest(&self, name: &str) -> Option<&str> {
        self.sha256.as_ref()?.get(name).map(String::as_str)
    }
}

/// Refuses `bytes`, read from checkpoint file `path`, when they are not
/// those whose sha256 (`want`) the checkpoint's state recorded.
fn check_digest(path: &Path, bytes: &[u8], want: Option<&str>) -> Result<(), TrainError> {
    let Some(want) = want else { return Ok(()) };
    let have = sha256_hex(bytes);
    if have.eq_ignore_ascii_case(want) {
        return Ok(());
    }
    let state = path.parent().map_or_else(|| PathBuf::from(STATE), |d| d.join(STATE));
    Err(BadInput::new(format!(
        "checkpoint file {} is corrupt: its sha256 is {have}, but {} recorded {want} when the run wrote it, so the \
         file was damaged or replaced since and would load as a model nobody trained; put back the run's own copy \
         of the file (from a backup, or the host that trained it), or train the run again",
        path.display(),
        state.display()
    ))
    .into())
}

/// Reads checkpoint file `path`, checked against its recorded sha256 `want`.
fn read_checked(path: &Path, want: Option<&str>) -> Result<Vec<u8>, TrainError> {
    let bytes = std::fs::read(path).map_err(|e| unusable(path, e))?;
    check_digest(path, &bytes, want)?;
    Ok(bytes)
}

/// Removes the tensor files of older checkpoints (those `s` does not name),
/// and the temporary files of writes that never finished (a process killed
/// mid-save): one process saves a run's checkpoints, one after the other, so
/// once a save is done no temporary file here is still being written.
fn prune(dir: &Path, s: &StateFile) {
    let keep = s.tensor_files();
    let prefixes = ["model-", "optimizer-", "history-"];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = name.ends_with(".safetensors") && prefixes.iter().any(|p| name.starts_with(p));
            let unfinished = name.strip_prefix('.').is_some_and(|rest| {
                rest.contains(".tmp.") && (rest.starts_with(STATE) || prefixes.iter().any(|p| rest.starts_with(p)))
            });
            if (ours && !keep.contains(&name.as_str())) || unfinished {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Copies a checkpoint that `read` (file name -> contents; e.g. from a
/// worker's host) serves into `dir`, in the order `save` writes it: the
/// tensor files, then `state.json`, each atomically. Returns its progress.
pub fn copy_into(dir: &Path, read: &mut dyn FnMut(&str) -> anyhow::Result<Vec<u8>>) -> anyhow::Result<Progress> {
    let json = read(STATE)?;
    let s = parse_state(&json).map_err(|e| match e {
        StateError::Parse(e) => unusable(&dir.join(STATE), e),
        StateError::Unknown(field) => unknown(&dir.join(STATE), &field),
    })?;
    for name in s.tensor_files() {
        // Names come from another host: plain file names only, never a path.
        if !crate::paths::is_plain_name(name) {
            return Err(unusable(&dir.join(STATE), format!("file name {name:?} is not a plain name")).into());
        }
        let bytes = read(name)?;
        // A file damaged on the way (or on the host) is refused before it replaces a good one here.
        check_digest(&dir.join(name), &bytes, s.digest(name))?;
        write_atomic(dir.join(name), &bytes)?;
    }
    write_atomic(dir.join(STATE), &json)?;
    prune(dir, &s);
    Ok(s.progress)
}

enum StateError {
    Parse(serde_json::Error),
    /// The dotted path of a field this version does not know.
    Unknown(String),
}

/// A state file's `text`. A field this version does not know is refused
/// rather than skipped (as serde would): the state of a newer leapgnn, or a
/// hand edit's typo, would otherwise be half understood, and `version` does
/// not say so (fields are added to it without a new version). A state of an
/// older version, with fewer fields, reads as before.
fn parse_state(text: &[u8]) -> Result<StateFile, StateError> {
    let s: StateFile = serde_json::from_slice(text).map_err(StateError::Parse)?;
    let given: serde_json::Value = serde_json::from_slice(text).map_err(StateError::Parse)?;
    let known = serde_json::to_value(&s).expect("state serialises");
    match unknown_field(&given, &known) {
        None => Ok(s),
        Some(field) => Err(StateError::Unknown(field)),
    }
}

/// What is wrong with a state file that has `field`, which this version does
/// not know, said of "it" (the file).
fn has_unknown(field: &str) -> String {
    format!(
        "has field `{field}`, which this leapgnn does not know: the file was written by a newer leapgnn or edited \
         by hand"
    )
}

/// State file `path` refused for its `field`, which this version does not know.
fn unknown(path: &Path, field: &str) -> TrainError {
    unusable(path, format!("it {}; use the leapgnn that wrote it, or remove the field", has_unknown(field)))
}

/// The first field (dotted path) of `given` that reading it and writing it
/// back (`known`) lost. A field the writer leaves out when empty (`None`,
/// `false`, no entries) and that `given` holds empty carries nothing to lose.
fn unknown_field(given: &serde_json::Value, known: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => g.iter().find_map(|(key, v)| match k.get(key) {
            Some(kv) => unknown_field(v, kv).map(|inner| format!("{key}.{inner}")),
            None if empty(v) => None,
            None => Some(key.clone()),
        }),
        (Value::Array(g), Value::Array(k)) => {
            g.iter().zip(k).enumerate().find_map(|(i, (g, k))| unknown_field(g, k).map(|inner| format!("{i}.{inner}")))
        }
        _ => None,
    }
}

fn unusable(path: &Path, why: impl std::fmt::Display) -> TrainError {
    BadInput::new(format!("checkpoint {} cannot be used: {why}", path.display())).into()
}

/// The global iteration a checkpoint's `state.json` (its bytes, e.g. read
/// from another host) was taken after; when it is not one this version
/// reads, why not, to follow the file's name ("has field `x`, ...": refused
/// as the driver's own copy would be).
pub fn state_iteration(state_json: &[u8]) -> Result<u64, String> {
    let s = parse_state(state_json).map_err(|e| match e {
        StateError::Parse(e) => format!("is not a state this leapgnn reads ({e})"),
        StateError::Unknown(field) => has_unknown(&field),
    })?;
    if s.version != VERSION {
        return Err(format!("is of version {} (this leapgnn reads {VERSION})", s.version));
    }
    Ok(s.progress.global_iteration)
}

/// The config saved with the checkpoint in `dir`.
pub fn load_config(dir: &Path) -> Result<(TrainConfig, Progress), TrainError> {
    let s = read_state(dir)?;
    Ok((s.config, s.progress))
}

/// Refuses the checkpoint in `dir` for a model of `spec` (its config's, on
/// its dataset) when the weights file is too small to be that model's: a
/// `state.json` edited by hand, or another run's, must not make a restore
/// build a model of gigabytes before the tensor shapes are compared.
pub fn check_fits(dir: &Path, spec: &ModelSpec) -> Result<(), TrainError> {
    let s = read_state(dir)?;
    let path = dir.join(&s.weights);
    let have = std::fs::metadata(&path).map_err(|e| unusable(&path, e))?.len();
    weights_fit(dir, &s.weights, have, spec)
}

/// `check_fits` for weights file `name` of `dir`, `have` bytes long (already read).
pub fn weights_fit(dir: &Path, name: &str, have: u64, spec: &ModelSpec) -> Result<(), TrainError> {
    let need = (spec.min_weight_values() as u64).saturating_mul(4);
    if have < need {
        return Err(unusable(
            &dir.join(STATE),
            format!(
                "its config describes a {} model ({} layers, hidden {}) of at least {need} bytes of weights, but {} \
                 holds {have}: the state or that file was edited or belongs to another run; put back the run's own \
                 checkpoint files, or start a new run",
                spec.kind, spec.layers, spec.hidden, name
            ),
        ));
    }
    Ok(())
}

/// Whether checkpoint directory `dir` holds a checkpoint (its state is
/// written last, so its presence marks a complete one).
pub fn exists(dir: &Path) -> bool {
    dir.join(STATE).is_file()
}

/// The run's epoch count when the checkpoint in `dir` is its last: every
/// epoch trained and evaluated. None for a checkpoint taken on the way, or
/// one that cannot be read.
pub fn finished(dir: &Path) -> Option<u64> {
    let (cfg, p) = load_config(dir).ok()?;
    p.complete(cfg.epochs).then_some(cfg.epochs)
}

fn read_state(dir: &Path) -> Result<StateFile, TrainError> {
    let path = dir.join(STATE);
    let text = std::fs::read(&path).map_err(|e| unusable(&path, e))?;
    // leapgnn writes it whole (atomically): what does not parse was damaged or edited since.
    let s = parse_state(&text).map_err(|e| match e {
        StateError::Parse(e) => unusable(
            &path,
            format!(
                "it is not the state leapgnn wrote ({e}): it was damaged or edited since; put back the run's own \
                 state.json (from a backup, or the host that trained it), or train the run again"
            ),
        ),
        StateError::Unknown(field) => unknown(&path, &field),
    })?;
    if s.version != VERSION {
        return Err(unusable(&path, format!("version {} (this binary reads {VERSION})", s.version)));
    }
    // The files it names are read, and shipped to ssh hosts on a resume: never
    // anything outside the checkpoint directory.
    for name in [Some(&s.weights), Some(&s.optimizer), s.history.as_ref()].into_iter().flatten() {
        if Path::new(name).file_name().and_then(|n| n.to_str()) != Some(name.as_str()) {
            return Err(unusable(&path, format!("it names `{name}`, which is not a file of the checkpoint directory")));
        }
    }
    Ok(s)
}

/// Every file of the checkpoint in `dir`, tensors first and `state.json`
/// last (what a worker resuming without the driver's filesystem must be sent).
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, TrainError> {
    let s = read_state(dir)?;
    let mut out: Vec<PathBuf> = s.tensor_files().into_iter().map(|f| dir.join(f)).collect();
    out.push(dir.join(STATE));
    Ok(out)
}

/// Refuses the checkpoint in `dir` when a tensor file it names is not the
/// one it wrote (its sha256 differs from the recorded one): checked before
/// a resume starts any worker or ships any file.
pub fn verify(dir: &Path) -> Result<(), TrainError> {
    let s = read_state(dir)?;
    for name in s.tensor_files() {
        let path = dir.join(name);
        let bytes = read_checked(&path, s.digest(name))?;
        // A checkpoint of a version before the digests is at least a set of
        // well-formed safetensors files (header, dtypes, shapes and offsets
        // covering the file): else a multi-worker resume found the damage
        // only in the workers, after starting them, and failed at run time.
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
            unusable(
                &path,
                format!(
                    "it is not a well-formed safetensors file ({e}); put back the run's own copy of the file (from a \
                     backup, or the host that trained it), or train the run again"
                ),
            )
        })?;
    }
    Ok(())
}

/// Whether the checkpoint in `dir` holds history rows.
pub fn has_history(dir: &Path) -> Result<bool, TrainError> {
    Ok(read_state(dir)?.history.is_some())
}

/// The history rows saved with the checkpoint in `dir`, if it has any.
pub fn read_history(dir: &Path) -> Result<Option<SavedHistory>, TrainError> {
    let s = read_state(dir)?;
    let Some(name) = &s.history else { return Ok(None) };
    let path = dir.join(name);
    let bytes = read_checked(&path, s.digest(name))?;
    Ok(Some(SavedHistory { path, bytes }))
}

/// A checkpoint's history file, read.
pub struct SavedHistory {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl SavedHistory {
    /// Block `name`, which must be `rows x width` f32.
    pub fn rows(&self, name: &str, rows: usize, width: usize) -> Result<Vec<f32>, TrainError> {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).map_err(|e| unusable(&self.path, e))?;
        let t = st.tensor(name).map_err(|e| unusable(&self.path, format!("block `{name}`: {e}")))?;
        if t.dtype() != safetensors::Dtype::F32 || t.shape() != [rows, width] {
            return Err(unusable(
                &self.path,
                format!("block `{name}` is {:?} {:?}, the run needs F32 [{rows}, {width}]", t.dtype(), t.shape()),
            ));
        }
        Ok(t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
}

/// The weights file the checkpoint in `dir` names now, and the sha256 it
/// recorded for it (None in a checkpoint of a version before the record).
/// A run still training names a newer one with each checkpoint (and prunes
/// old ones): inference pins this one, so that every worker scores with the
/// same weights.
pub fn weights_file(dir: &Path) -> Result<(PathBuf, Option<String>), TrainError> {
    let s = read_state(dir)?;
    let sha = s.digest(&s.weights).map(str::to_string);
    Ok((dir.join(&s.weights), sha))
}

/// The weights the checkpoint in `dir` names now, read and checked against
/// their sha256: the file, its recorded sha256, its bytes and the global
/// iteration they were saved after. A run still training replaces its
/// checkpoint (new files, then `state.json`, then the old files removed),
/// so a file gone between reading the state and reading it is followed to
/// the checkpoint that replaced it.
pub fn pinned_weights(dir: &Path) -> Result<(PathBuf, Option<String>, Vec<u8>, u64), TrainError> {
    const ATTEMPTS: usize = 20;
    let mut attempt = 0;
    loop {
        let s = read_state(dir)?;
        let (wpath, sha) = (dir.join(&s.weights), s.digest(&s.weights).map(str::to_string));
        match std::fs::read(&wpath) {
            Ok(bytes) => {
                check_digest(&wpath, &bytes, sha.as_deref())?;
                return Ok((wpath, sha, bytes, s.progress.global_iteration));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt + 1 < ATTEMPTS => {
                // Replaced meanwhile only if the state names another file now.
                if weights_file(dir)?.0 == wpath {
                    return Err(unusable(&wpath, e));
                }
                attempt += 1;
            }
            Err(e) => return Err(unusable(&wpath, e)),
        }
    }
}

/// Reads weights file `wpath` (a checkpoint's `weights_file`), refused
/// unless its sha256 is `sha256` (when one was recorded).
pub fn read_weights(wpath: &Path, sha256: Option<&str>) -> Result<Vec<u8>, TrainError> {
    read_checked(wpath, sha256)
}

/// Loads weights file `wpath` (a checkpoint's `weights_file`, whose sha256
/// it recorded is `sha256`) into `params`.
pub fn load_weights_file(wpath: &Path, sha256: Option<&str>, params: &Params) -> Result<(), TrainError> {
    load_weights(wpath, &read_weights(wpath, sha256)?, params)
}

/// Loads `bytes`, read from weights file `wpath`, into `params`.
pub fn load_weights(wpath: &Path, bytes: &[u8], params: &Params) -> Result<(), TrainError> {
    let mut tensors = candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| unusable(wpath, e))?;
    params.set_buffers(&tensors).map_err(|e| unusable(wpath, e))?;
    tensors.retain(|name, _| !params.is_buffer(name));
    params.set_flat(&params.flat_from(&tensors, "").map_err(|e| unusable(wpath, e))?)?;
    Ok(())
}

/// Loads the weights and optimizer state of the checkpoint in `dir` into
/// `params` and `opt` (built from the saved config) and returns its progress.
pub fn restore(dir: &Path, params: &Params, opt: &mut dyn Optimizer) -> Result<Progress, TrainError> {
    let s = read_state(dir)?;
    load_weights_file(&dir.join(&s.weights), s.digest(&s.weights), params)?;
    let opath = dir.join(&s.optimizer);
    let bytes = read_checked(&opath, s.digest(&s.optimizer))?;
    let state =
        OptimState::from_safetensors(&bytes, params, s.config.optimizer.slots()).map_err(|e| unusable(&opath, e))?;
    opt.load_state(state).map_err(|e| unusable(&opath, e))?;
    // The reports are of the attempt that wrote them: the resumed attempt's
    // checkpoints before its own final one must not pass them on as its.
    Ok(Progress { final_reports: None, ..s.progress })
}
