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

/// This build: the package version, a hash of the sources and the device
/// features enabled (`build.rs`): `0.1.0+<16 hex digits>`, then `+cuda` in a
/// CUDA build. Driver and workers must share it: two builds of one version
/// may still speak different control and mesh messages, and a CPU build
/// cannot run the stages a CUDA driver planned for the GPU.
pub const BUILD_ID: &str =
    concat!(env!("CARGO_PKG_VERSION"), "+", env!("LEAPGNN_SOURCE_HASH"), env!("LEAPGNN_DEVICE_FEATURES"));

/// What sets the build `other` apart from this one (`BUILD_ID`) when only
/// their device features do, said of `who` (`the worker`), with what to do;
/// None when the sources differ too (or either id is not one `BUILD_ID`
/// writes), for which the caller's own advice holds.
pub fn other_device_features(other: &str, who: &str) -> Option<String> {
    // The version and the sources' hash, then the features (`cuda`) if any.
    fn split(id: &str) -> Option<(&str, Option<&str>)> {
        let mut parts = id.splitn(3, '+');
        let sources = parts.next()?.len() + 1 + parts.next()?.len();
        Some((&id[..sources], parts.next()))
    }
    let built = |features: Option<&str>| match features {
        Some(f) => format!("a +{f} build"),
        None => "a CPU build (no device features)".to_string(),
    };
    let ((mine, my_features), (theirs, their_features)) = (split(BUILD_ID)?, split(other)?);
    (mine == theirs && my_features != their_features).then(|| {
        format!(
            "the same sources, but the driver is {} and {who} {}: build both alike (`scripts/build-cuda.sh` \
             makes the +cuda build, `cargo build --release` the CPU one)",
            built(my_features),
            built(their_features)
        )
    })
}
