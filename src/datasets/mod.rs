//! Dataset registry (`datasets.toml`), downloaders, format converters and
//! synthetic generators. Everything ends as a `format::Dataset` archive.

pub mod synthetic;

use crate::DataDir;
use std::path::PathBuf;

/// Path of the dataset archive `name`, creating it first when it is missing and
/// can be made without the network (synthetic presets). Other missing datasets
/// are an error that says which `leapgnn download` to run.
pub fn ensure_dataset(data: &DataDir, name: &str) -> anyhow::Result<PathBuf> {
    let _ = (data, name);
    Err(crate::NotImplemented.into())
}
