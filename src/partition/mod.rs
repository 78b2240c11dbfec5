//! Partitioners (METIS, random, hash, LDG streaming) and the partition
//! directory writer.
//!
//! Every method maps a `Problem` (graph, train vertices, K, constraints, seed)
//! to a node -> part map; `run` opens the dataset, measures the cut and
//! balance, and writes `<data-dir>/<name>/parts/<method>-<k>/`.

pub mod chunks;
mod gk_signals;
pub mod hash;
pub mod ldg;
pub mod metis;
pub mod quality;
pub mod random;
mod run;
mod writer;

pub use run::{BalanceFigures, PartitionReport, ensure_partition, ensure_partition_checked, partition_dataset};

use crate::BadInput;
use crate::format::FormatError;
use crate::graph::CsrView;

use std::str::FromStr;

/// Part ids are u16 on disk.
pub const MAX_PARTS: usize = u16::MAX as usize;

/// `--parts k` of a graph of `nodes` nodes named `name`: at least 2, ids that
/// fit on disk, and no part left without a node.
pub fn check_parts(k: usize, nodes: usize, name: &str) -> Result<(), BadInput> {
    if k < 2 {
        return Err(BadInput::new(format!("--parts {k}: need at least 2 parts")));
    }
    if k > MAX_PARTS {
        return Err(BadInput::new(format!("--parts {k}: at most {MAX_PARTS} parts (part ids are 16-bit)")));
    }
    if k > nodes {
        return Err(BadInput::new(format!("--parts {k}: more parts than the {nodes} nodes of {name}")));
    }
    Ok(())
}

/// Allowed imbalance per constraint (max/avg), for the methods that can honour one.
pub const IMBALANCE: f64 = 1.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Method {
    /// METIS k-way, balanced by --balance (few cut edges).
    Metis,
    /// Seeded uniform random assignment.
    Random,
    /// Node id modulo the number of parts.
    Hash,
    /// Linear deterministic greedy streaming.
    Ldg,
}

crate::value_names!(Method, "--method");

impl Method {
    pub const ALL: [Method; 4] = [Method::Metis, Method::Random, Method::Hash, Method::Ldg];

    pub fn name(self) -> &'static str {
        match self {
            Method::Metis => "metis",
            Method::Random => "random",
            Method::Hash => "hash",
            Method::Ldg => "ldg",
        }
    }
}

/// Which counts each part should hold evenly (`--balance nodes,train`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    pub nodes: bool,
    pub train: bool,
}

impl Balance {
    pub const DEFAULT: Balance = Balance { nodes: true, train: true };

    /// The canonical spelling, as stored in the manifest.
    pub fn name(self) -> &'static str {
        match (self.nodes, self.train) {
            (true, true) => "nodes,train",
            (true, false) => "nodes",
            (false, true) => "train",
            (false, false) => "none",
        }
    }
}

impl Default for Balance {
    fn default() -> Self {
        Balance::DEFAULT
    }
}

impl FromStr for Balance {
    type Err = BadInput;
    fn from_str(s: &str) -> Result<Balance, BadInput> {
        let mut b = Balance { nodes: false, train: false };
        for c in s.split(',').map(str::trim) {
            match c {
                "nodes" => b.nodes = true,
                "train" => b.train = true,
                _ => {
                    return Err(BadInput::new(format!(
                        "--balance {s}: unknown constraint `{c}`; use nodes, train or nodes,train"
                    )));
                }
            }
        }
        Ok(b)
    }
}

/// What `partition` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOptions {
    pub parts: usize,
    pub method: Method,
    pub balance: Balance,
    pub seed: u64,
    /// Recompute even when a matching partition exists.
    pub force: bool,
}

impl PartitionOptions {
    pub fn new(method: Method, parts: usize) -> Self {
        PartitionOptions { parts, method, balance: Balance::DEFAULT, seed: 0, force: false }
    }
}

/// The input every method sees.
#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    /// CSR by destination; neighbours are in-neighbours (methods that need a
    /// symmetric graph symmetrise it themselves).
    pub graph: CsrView<'a>,
    pub is_train: &'a [bool],
    pub parts: usize,
    pub balance: Balance,
    pub seed: u64,
}

impl Problem<'_> {
    pub fn num_train(&self) -> usize {
        self.is_train.iter().filter(|&&t| t).count()
    }
}

/// node -> part with the chosen method.
pub fn assign(method: Method, p: &Problem<'_>) -> Result<Vec<u16>, PartitionError> {
    let part = match method {
        Method::Metis => metis::assign(p)?,
        Method::Random => random::assign(p),
        Method::Hash => hash::assign(p),
        Method::Ldg => ldg::assign(p),
    };
    // A part without a node is a worker without work and a server without
    // features; METIS leaves such parts when K is large for the graph.
    let mut sizes = vec![0usize; p.parts];
    for &q in &part {
        if let Some(s) = sizes.get_mut(q as usize) {
            *s += 1;
        }
    }
    let empty = sizes.iter().filter(|&&s| s == 0).count();
    if empty > 0 {
        let (k, n) = (p.parts, part.len());
        return Err(BadInput::new(format!(
            "--parts {k}: --method {} left {empty} of the {k} parts without a node ({n} nodes); give fewer parts",
            method.name()
        ))
        .into());
    }
    Ok(part)
}

/// Whether the stored manifest `m` is a cut of `ds` by `method` into
/// `parts` with `seed` and `balance`: a partition or GNNPipe's chunks kept
/// on disk are reused only when it is (else cut again).
pub(crate) fn cut_alike(
    m: &crate::format::ManifestFile,
    ds: &crate::format::DatasetFile,
    (method, parts, seed): (&str, usize, u64),
    balance: Balance,
) -> bool {
    m.method() == method
        && m.parts() == parts
        && m.seed() == seed
        && m.constraints() == balance.name()
        && m.dataset_checksum() == ds.checksum()
        && m.node_part().len() == ds.num_nodes()
}

/// `train` ids as a per-node flag (duplicates in the list count once).
pub fn train_flags(num_nodes: usize, train: &[u32]) -> Vec<bool> {
    let mut f = vec![false; num_nodes];
    for &v in train {
        f[v as usize] = true;
    }
    f
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// The user's flags or dataset are at fault (exit 2).
    #[error("{0}")]
    BadInput(#[from] BadInput),
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("METIS failed on {nodes} nodes and {entries} adjacency entries ({detail}); try --method ldg")]
    Metis { nodes: usize, entries: usize, detail: String },
    /// A file of the partition already there could not be read, for a reason
    /// that cutting it again would not cure: it is reported, and left alone.
    #[error("cannot check the existing partition in {}, left as it is: {source}", dir.display())]
    Existing {
        dir: std::path::PathBuf,
        #[source]
        source: FormatError,
    },
}
