//! Neighbourhood sampling shared by every strategy and by `analyze-locality`.
//!
//! Node-wise sampling (GraphSAGE style) draws, for each destination vertex,
//! up to `fanout` in-neighbours uniformly without replacement; the draw for
//! (seed, epoch, layer, vertex) is a pure function of those four values, so a
//! vertex's sample does not depend on which batch or worker handles it.
//! Layers are numbered from the input: `fanouts[0]` belongs to the first GNN
//! layer (the outermost hop), `fanouts[L-1]` to the layer that outputs the roots.

mod block;
mod draw;
mod fanout;
mod layer_nodes;
mod layerwise;
mod micrograph;
mod node_map;
mod nodewise;

pub use block::{Block, Blocks};
pub use draw::{draw_neighbors, layer_key, vertex_key};
pub use fanout::{Fanout, Fanouts};
pub use layer_nodes::{LayerNodes, VertexSet};
pub use layerwise::LayerSampler;
pub use micrograph::{micrograph, micrographs};
pub use node_map::{Interner, NodeMap, SmallMap};
pub use nodewise::NeighborSampler;

/// Added to the epoch for evaluation draws, so they never coincide with training draws.
pub const EVAL_EPOCH_SALT: u64 = 1 << 63;
