//! gnn-benchmark npz files (stub, filled in next).

use super::ConvertOptions;
use super::build::Raw;
use crate::datasets::DatasetError;
use std::path::Path;

pub fn read(path: &Path, _opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    Err(DatasetError::input(format!("{}: the npz converter is not built yet", path.display())))
}
