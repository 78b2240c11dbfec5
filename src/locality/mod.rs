//! `analyze-locality`: before any training, how much would LeapGNN save on
//! this graph and this cluster size?
//!
//! For each (partition method, number of servers S, sampling, depth):
//!
//! - **locality_pct**: the mean, over micrographs (the sampled tree of one
//!   root), of the share of the micrograph's entries that the root's server
//!   owns. Entries are each layer's de-duplicated source vertices, as the
//!   layers of a DGL NodeFlow (a vertex reached at hop h is a source of every
//!   layer below it, as DGL's self loops make it), with every copy of the root
//!   left out. (The artifact counted the root's lower copies as local in the
//!   numerator and its top entry in the denominator, §3.4.1.) Micrographs that
//!   sample nothing besides the root are skipped. The micrographs are those of
//!   the first `--micrographs` roots of the analysed batches.
//!   **r_sub_pct** = 100 / S, what a random placement gives.
//! - **Feature rows per iteration and worker** for three ways of training the
//!   same global mini-batch (`requests`): model-centric, micrograph,
//!   pregather; with miss rates (remote / requested rows) and bytes (rows x
//!   feature dim x 4).
//! - **bytes_naive_migration**: what naive per-layer model migration would
//!   move for the model-centric batches (`naive`, exact accounting).
//!
//! Batching is DGL's (`schedule::Schedule`): W = S workers, B roots per worker,
//! iteration i's W worker batches cut from epoch 0's seeded shuffle of the
//! train ids. `--batches N` worker batches are analysed per row, rounded up to
//! whole iterations (ceil(N / S), at most one epoch). Sampling is the one
//! training uses, seeded by `--seed`: node-wise draws up to `fanout`
//! in-neighbours per vertex and layer; layer-wise keeps up to `fanout` new
//! vertices per root and layer from the union neighbourhood of the whole
//! graph, weighted by how many destinations each candidate feeds.

mod config;
mod micrographs;
mod naive;
mod owners;
mod plot;
mod report;
mod requests;
mod run;
mod sampler;
mod scratch;

pub use config::{Options, Sampling, Setting, default_fanout, parse_list};
pub use micrographs::{LocalitySums, RATIO_ONE, micrograph_locality};
pub use naive::{ModelDims, NaiveCost, NaiveScratch, naive_migration};
pub use owners::{OwnerTable, Trainer};
pub use plot::write_plot;
pub use report::{Report, Row};
pub use requests::{GroupScratch, Requests, owner_iteration};
pub use run::analyze;
pub use sampler::Sampler;
pub use scratch::{Pool, Pooled};
