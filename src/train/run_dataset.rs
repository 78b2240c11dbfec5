//! Which version of its dataset a run trained on (`runs/<run>/dataset.json`,
//! written when the run starts), so that `--resume` and `infer` refuse a
//! dataset re-imported or replaced since: one of the same shapes would
//! otherwise be trained on, or scored, without a word. It names the
//! dataset too, so that a checkpoint copied in from a run on another
//! dataset is said to be that, not a re-import.

use super::TrainError;
use crate::BadInput;
use crate::format::{DatasetFile, write_atomic};
use std::path::Path;

const FILE: &str = "dataset.json";

#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
struct Version {
    /// The archive's payload checksum (`DatasetFile::checksum`), hex.
    checksum: String,
    nodes: usize,
    features: usize,
    classes: usize,
    /// The dataset's name (absent in records of versions before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dataset: Option<String>,
}

impl Version {
    fn of(name: &str, ds: &DatasetFile) -> Version {
        Version {
            dataset: Some(name.to_string()),
            checksum: format!("{:016x}", ds.checksum()),
            nodes: ds.num_nodes(),
            features: ds.feature_dim(),
            classes: ds.num_classes(),
        }
    }
}

/// Records that the run in `run_dir` trains on `ds` (dataset `name`) as it is now.
pub(crate) fn record(run_dir: &Path, name: &str, ds: &DatasetFile) -> Result<(), TrainError> {
    let json = serde_json::to_vec_pretty(&Version::of(name, ds)).expect("a dataset version serialises");
    Ok(write_atomic(run_dir.join(FILE), &json)?)
}

/// The record of run `run` (in `run_dir`, on dataset `name`); `None` for a
/// run from before it. A record that is there but damaged is refused: it is
/// what keeps a re-imported dataset from meeting the run's weights, and
/// skipping it with a warning let exactly that through.
fn read(run_dir: &Path, run: &str, name: &str, what: &str) -> Result<Option<Version>, TrainError> {
    let path = run_dir.join(FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(crate::format::FormatError::io(path, e).into()),
    };
    serde_json::from_slice(&text).map(Some).map_err(|e| {
        BadInput::new(format!(
            "{what} {run}: {} is damaged ({e}): it records the version of dataset `{name}` that run `{run}` trained              on, so whether the dataset is still that version cannot be checked; put back the run's own copy of the              file (from a backup), or, if dataset `{name}` is unchanged since the run trained, remove the file to              use the run unchecked, as runs from before the record are",
            path.display()
        ))
        .into()
    })
}

/// Refuses `ds` for run `run` (in `run_dir`) when it is not the version the
/// run trained on; `what` is the command (`--resume`, `infer`). A run from
/// before this record is not checked; one whose record is damaged is refused.
/// Returns whether it was (`ds` is then the very version the run trained on).
pub(crate) fn check(run_dir: &Path, run: &str, name: &str, ds: &DatasetFile, what: &str) -> Result<bool, TrainError> {
    let Some(then) = read(run_dir, run, name, what)? else { return Ok(false) };
    let now = Version::of(name, ds);
    if then.checksum == now.checksum {
        return Ok(true);
    }
    Err(BadInput::new(format!(
        "{what} {run}: run `{run}` cannot be used with dataset `{name}` as it is now ({} nodes, {} feature columns, \
         {} classes, checksum {}): it is not the version the run trained on ({} nodes, {} feature columns, {} \
         classes, checksum {}), so it was re-imported or replaced since, and the run's weights would meet other \
         data; put back the data the run trained on, or train a new run",
        now.nodes, now.features, now.classes, now.checksum, then.nodes, then.features, then.classes, then.checksum
    ))
    .into())
}

/// The dataset the run in `run_dir` trains on, and the file that says so: its
/// record, or for a run from before the record, its `config.json`. `None`
/// when neither can be read.
pub(crate) fn trained_on(run_dir: &Path) -> Option<(String, std::path::PathBuf)> {
    let named_in = |file: &str| -> Option<(String, std::path::PathBuf)> {
        let path = run_dir.join(file);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
        Some((v.get("dataset")?.as_str()?.to_string(), path))
    };
    named_in(FILE).or_else(|| named_in("config.json"))
}

/// Refuses the checkpoint of run `run` (in `run_dir`) whose config names
/// dataset `name` when the run trained on another one (its record says so,
/// or for a run from before the record names no dataset, its `config.json`):
/// the checkpoint's files were copied in from a run on that other dataset.
/// Checked before that dataset is opened (or downloaded); `what` is the
/// command. A run whose record and config cannot be read is not checked
/// (a damaged record is refused).
pub(crate) fn check_same_dataset(run_dir: &Path, run: &str, name: &str, what: &str) -> Result<(), TrainError> {
    // A damaged record is refused before the dataset is opened, or downloaded for nothing.
    read(run_dir, run, name, what)?;
    let Some((trained, source)) = trained_on(run_dir) else { return Ok(()) };
    if trained == name {
        return Ok(());
    }
    Err(BadInput::new(format!(
        "{what} {run}: the checkpoint in {} is of a run on dataset `{name}` (its state.json's config), but run \
         `{run}` trained on dataset `{trained}` ({}): the checkpoint's files were copied in from another run, and \
         its weights are not this run's; put back run `{run}`'s own checkpoint, or use the run the checkpoint came \
         from",
        super::checkpoint::dir(run_dir).display(),
        source.display()
    ))
    .into())
}
