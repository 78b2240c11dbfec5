//! Feature rows each training strategy requests in one iteration.
//!
//! - model-centric (DGL): worker w samples its own batch b(i, w) as one block
//!   and requests the block's input vertices;
//! - micrograph (LeapGNN +MG): worker r trains, for every model m, the roots
//!   of b(i, m) that it owns, as one block per (m, r) as the artifact did;
//! - pregather (+PG): worker r fetches the input vertices of all its blocks of
//!   the iteration as one de-duplicated request.
//!
//! A row is remote when a server other than the requesting worker owns it.
//! Its bytes are those it takes in a feature service reply
//! (`RowRef::wire_bytes`): 4 x dim when the dataset stores its features
//! dense, a count plus a column and a value per non-zero when sparse, as
//! `train` sends them.

use super::owners::{OwnerTable, Trainer};
use super::sampler::Sampler;
use crate::format::FeatureView;
use crate::sample::{LayerNodes, VertexSet};

/// Requested feature rows and how many of them are remote, with their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub rows: u64,
    pub remote: u64,
    pub bytes: u64,
    pub remote_bytes: u64,
}

/// Bytes of row `v` as the feature service sends it.
fn wire(features: &FeatureView<'_>, v: u32) -> u64 {
    features.row(v as usize).wire_bytes()
}

impl Requests {
    /// The request for `vertices` by each of `who` (owners read once per vertex).
    pub fn of_each(vertices: &[u32], owners: &OwnerTable, who: &[Trainer], features: &FeatureView<'_>) -> Vec<Self> {
        let mut out = vec![Requests::default(); who.len()];
        for &v in vertices {
            let (o, b) = (owners.of(v), wire(features, v));
            for (r, t) in out.iter_mut().zip(who) {
                r.count(b, o[t.column] != t.home);
            }
        }
        out
    }
    /// One requested row of `bytes`.
    fn count(&mut self, bytes: u64, remote: bool) {
        self.rows += 1;
        self.bytes += bytes;
        if remote {
            self.remote += 1;
            self.remote_bytes += bytes;
        }
    }
    pub fn add(&mut self, o: Requests) {
        self.rows += o.rows;
        self.remote += o.remote;
        self.bytes += o.bytes;
        self.remote_bytes += o.remote_bytes;
    }
    /// Remote rows / requested rows (0 for no request).
    pub fn miss_rate(&self) -> f64 {
        if self.rows == 0 { 0.0 } else { self.remote as f64 / self.rows as f64 }
    }
}

/// Reused buffers of one worker-iteration.
pub struct GroupScratch {
    nodes: LayerNodes,
    union: VertexSet,
    group: Vec<u32>,
}

impl GroupScratch {
    pub fn new(num_nodes: usize) -> Self {
        GroupScratch { nodes: LayerNodes::new(num_nodes), union: VertexSet::new(num_nodes), group: Vec::new() }
    }
}

/// What worker `server` requests in one iteration whose worker batches are
/// `batches` (b(i, m) for every model m): (micrograph, pregather). `owner`
/// is each node's server (a column of the `OwnerTable`).
pub fn owner_iteration(
    sampler: &Sampler<'_>,
    batches: &[&[u32]],
    server: u16,
    owner: &[u16],
    epoch: u64,
    features: &FeatureView<'_>,
    s: &mut GroupScratch,
) -> (Requests, Requests) {
    let (mut micro, mut pre) = (Requests::default(), Requests::default());
    s.union.clear();
    for batch in batches {
        s.group.clear();
        s.group.extend(batch.iter().filter(|&&r| owner[r as usize] == server));
        if s.group.is_empty() {
            continue;
        }
        sampler.nodes(&s.group, epoch, &mut s.nodes);
        for &v in s.nodes.input_nodes() {
            let (b, remote) = (wire(features, v), owner[v as usize] != server);
            micro.count(b, remote);
            if s.union.insert(v) {
                pre.count(b, remote);
            }
        }
    }
    (micro, pre)
}
