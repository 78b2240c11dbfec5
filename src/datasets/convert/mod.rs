//! Format converters: one file per source layout, each reading into a `Raw`
//! that `build::finish` turns into a `format::Dataset`.
//!
//! Storage conventions (all formats): CSR by destination; self loops are
//! dropped unless `self_loops = true` (GNN layers add their own self term);
//! undirected inputs (text, musae, npz, ogb by default) are stored with both
//! directions; edge lists keep their direction unless `symmetrize` is set.

pub mod build;
pub mod edgelist;
pub mod lines;
pub mod musae;
pub mod npy;
pub mod npz;
pub mod ogb;
pub mod split;
pub mod text;

use super::DatasetError;
use crate::format::Dataset;
use std::path::Path;

/// A source layout (`format = ...` in datasets.toml, `--format` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Ogb,
    Npz,
    Edgelist,
    Musae,
    Text,
    Synthetic,
}

impl Format {
    pub const ALL: [Format; 6] =
        [Format::Ogb, Format::Npz, Format::Edgelist, Format::Musae, Format::Text, Format::Synthetic];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Ogb => "ogb",
            Format::Npz => "npz",
            Format::Edgelist => "edgelist",
            Format::Musae => "musae",
            Format::Text => "text",
            Format::Synthetic => "synthetic",
        }
    }

    /// Whether edges are stored in both directions unless `symmetrize` says otherwise.
    pub fn undirected_by_default(self) -> bool {
        !matches!(self, Format::Edgelist)
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Format::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
            format!("unknown format `{s}` (one of: {})", names.join(", "))
        })
    }
}

/// By name, through `FromStr`: the derived one called any value but a string
/// (`format = 5` in a registry) "invalid type: unit variant, expected string
/// only", naming neither what was found nor the formats.
impl<'de> serde::Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Format;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
                write!(f, "a format name, one of: {}", names.join(", "))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Format, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Name)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Converter knobs: the keys of a datasets.toml entry, overridden by flags.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ConvertOptions {
    /// Store every edge in both directions (default: per format, see the module doc).
    pub symmetrize: Option<bool>,
    /// Keep self loops (dropped by default).
    pub self_loops: bool,
    /// Dimension of the seeded uniform [0,1) features generated when the source has none.
    pub feature_dim: Option<u32>,
    /// Generate seeded uniform labels with this many classes when the source has none
    /// (split 65/10/25, as the paper did for web graphs).
    pub generated_classes: Option<u32>,
    /// Split fractions or percentages (train, val, test) replacing the format's own.
    pub split: Option<Vec<f64>>,
    /// Planetoid-style random split replacing the format's own: train nodes
    /// per class, then val and test nodes from the rest (`[20, 500, 1000]`).
    pub split_per_class: Option<Vec<u64>>,
    /// text: file prefix inside a directory; musae: dataset prefix (`facebook`, `DE`)
    /// when a directory holds several.
    pub prefix: Option<String>,
    /// musae: columns of the target CSV holding the node id and the label.
    pub id_column: Option<String>,
    pub label_column: Option<String>,
    /// edgelist: number of nodes (default: largest id + 1).
    pub num_nodes: Option<u64>,
    /// ogb: which directory under split/ (default: the first).
    pub split_name: Option<String>,
    /// Dense or CSR feature storage (`auto`: CSR below 10 % non-zero values).
    pub features: crate::format::FeatureStorage,
}

/// Reads the source at `path` in `format` and builds the dataset `name`.
pub fn convert(
    format: Format,
    path: &Path,
    name: &str,
    seed: u64,
    opts: &ConvertOptions,
) -> Result<Dataset, DatasetError> {
    let raw = match format {
        Format::Text => text::read(path, opts)?,
        Format::Musae => musae::read(path, opts)?,
        Format::Edgelist => edgelist::read(path, opts)?,
        Format::Ogb => ogb::read(path, opts)?,
        Format::Npz => npz::read(path, opts)?,
        Format::Synthetic => {
            return Err(DatasetError::input(format!(
                "{name}: synthetic datasets are generated, not converted; drop --from"
            )));
        }
    };
    build::finish(raw, format, name, &path.display().to_string(), seed, opts)
}
