//! Deterministic synthetic graphs with power-law degrees and planted
//! communities (labels = communities, features = class signal + noise), so
//! METIS finds locality as in real graphs and a GNN can learn.

use crate::format::Dataset;

/// Parameters of a synthetic graph; the `[NAME]` tables of datasets.toml with
/// `format = "synthetic"` deserialise into this.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct SyntheticSpec {
    pub nodes: u64,
    /// Target number of undirected edges (each stored in both directions).
    pub edges: u64,
    pub feature_dim: u32,
    pub classes: u32,
}

/// Generates the dataset `name` from `spec`; the same (spec, seed) gives the same bytes.
pub fn generate(name: &str, spec: &SyntheticSpec, seed: u64) -> Result<Dataset, crate::BadInput> {
    let _ = (name, spec, seed);
    Err(crate::BadInput::new("synthetic generator not implemented yet"))
}
