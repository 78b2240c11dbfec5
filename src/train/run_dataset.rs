//! Which version of its dataset a run trained on (`runs/<run>/dataset.json`,
//! written when the run starts), so that `--resume` and `infer` refuse a
//! dataset re-imported or replaced since: one of the same shapes would
//! otherwise be trained on, or scored, without a word.

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
}

impl Version {
    fn of(ds: &DatasetFile) -> Version {
        Version {
            checksum: format!("{:016x}", ds.checksum()),
            nodes: ds.num_nodes(),
            features: ds.feature_dim(),
            classes: ds.num_classes(),
        }
    }
}

/// Records that the run in `run_dir` trains on `ds` as it is now.
pub(crate) fn record(run_dir: &Path, ds: &DatasetFile) -> Result<(), TrainError> {
    let json = serde_json::to_vec_pretty(&Version::of(ds)).expect("a dataset version serialises");
    Ok(write_atomic(run_dir.join(FILE), &json)?)
}

/// Refuses `ds` for run `run` (in `run_dir`) when it is not the version the
/// run trained on; `what` is the command (`--resume`, `infer`). A run from
/// before this record, or whose record cannot be read, is not checked.
pub(crate) fn check(run_dir: &Path, run: &str, name: &str, ds: &DatasetFile, what: &str) -> Result<(), TrainError> {
    let Ok(text) = std::fs::read(run_dir.join(FILE)) else { return Ok(()) };
    let Ok(then) = serde_json::from_slice::<Version>(&text) else {
        tracing::warn!("{}: not a dataset record; the dataset's version is not checked", run_dir.join(FILE).display());
        return Ok(());
    };
    let now = Version::of(ds);
    if then.checksum == now.checksum {
        return Ok(());
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
