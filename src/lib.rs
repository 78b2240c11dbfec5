//! leapgnn: distributed sampling-based GNN training that brings the model to
//! the features (LeapGNN, FAST'25). The binary in `cmds/` is a thin CLI over
//! this library.

pub mod bench;
pub mod cluster;
pub mod comm;
pub mod cost;
pub mod datasets;
pub mod error;
pub mod format;
pub mod gather;
pub mod graph;
pub mod locality;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod partition;
pub mod paths;
pub mod progress;
pub mod sample;
pub mod schedule;
pub mod train;
pub mod tui;
pub mod util;

pub use error::{BadInput, NotImplemented};
pub use paths::DataDir;

/// This build: the package version and a hash of the sources (`build.rs`).
/// Driver and workers must share it: two builds of one version may still
/// speak different control and mesh messages.
pub const BUILD_ID: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("LEAPGNN_SOURCE_HASH"));
