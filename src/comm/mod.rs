//! The data plane of the distributed runtime: a full TCP mesh between the
//! workers of a job (authenticated by the job secret, length-prefixed frames,
//! one sender and one receiver thread per peer, every byte counted by
//! category), collectives over it (ring all-reduce, barrier, broadcast), and
//! the feature service with its per-worker cache.
//!
//! Typical use by a worker:
//! ```no_run
//! # use leapgnn::comm::*;
//! # use std::{net::TcpListener, sync::Arc, time::Duration};
//! # fn f(addrs: Vec<std::net::SocketAddr>, secret: Vec<u8>, listener: TcpListener,
//! #      owners: Owners, mine: Arc<dyn RowSource>, ids: &[u32], grads: &mut [f32]) -> Result<(), CommError> {
//! let mesh = Mesh::establish(listener, &MeshConfig::new(1, addrs, secret))?;
//! serve_features(&mesh, mine.clone());
//! let client = FeatureClient::new(owners, mine, Duration::from_secs(30));
//! let mut rows = vec![0.0; ids.len() * client.dim()];
//! let stats = client.fetch(&mesh, ids, &mut rows)?;
//! mesh.all_reduce_sum(grads, Category::Gradients, Duration::from_secs(30))?;
//! # Ok(()) }
//! ```

pub mod auth;
pub mod cache;
mod collectives;
pub use collectives::{add_from_le, chunk, le_bytes};
mod counters;
mod deadline;
mod error;
mod establish;
mod features;
pub mod frame;
mod mesh;
mod rows;
pub mod seal;
pub mod tag;

pub use cache::CachePolicy;
pub use counters::{ByteCounts, Category, Counters, PerCategory};
pub use deadline::Deadline;
pub use error::{CommError, PeerId};
pub use establish::{MAX_UNAUTHENTICATED, Refusal};
pub use features::{FeatureClient, FetchStats, Owners, RowsInFlight, serve_features};
pub use mesh::{Mesh, MeshConfig, Message, Service};
pub use rows::{NotHeld, PartRows, RowSource, TableRows};

/// A key or job secret in `Debug` output: its length, never its bytes (a
/// `{:?}` of a struct that holds one may end up in an error or a `-vv` log).
pub struct Redacted<'a>(pub &'a [u8]);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes, not shown>", self.0.len())
    }
}
