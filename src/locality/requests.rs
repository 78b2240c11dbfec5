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

use super::owners::{OwnerTable, Trainer};
use super::sampler::Sampler;
use crate::sample::{LayerNodes, VertexSet};

/// Requested feature rows and how many of them are remote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub rows: u64,
    pub remote: u64,
}

impl Requests {
    /// The request for `vertices` by each of `who` (owners read once per vertex).
    pub fn of_each(vertices: &[u32], owners: &OwnerTable, who: &[Trainer]) -> Vec<Self> {
        let mut remote = vec![0u64; who.len()];
        for &v in vertices {
            let o = owners.of(v);
            for (r, t) in remote.iter_mut().zip(who) {
                *r += u64::from(o[t.column] != t.home);
            }
        }
        remote.into_iter().map(|remote| Requests { rows: vertices.len() as u64, remote }).collect()
    }
    pub fn add(&mut self, o: Requests) {
        self.rows += o.rows;
        self.remote += o.remote;
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
/// `batches` (b(i, m) for every model m): (micrograph, pregather).
pub fn owner_iteration(
    sampler: &Sampler<'_>,
    batches: &[&[u32]],
    server: u16,
    owners: &OwnerTable,
    column: usize,
    epoch: u64,
    s: &mut GroupScratch,
) -> (Requests, Requests) {
    let owner = owners.column(column);
    let (mut micro, mut pre) = (Requests::default(), Requests::default());
    s.union.clear();
    for batch in batches {
        s.group.clear();
        s.group.extend(batch.iter().filter(|&&r| owner[r as usize] == server));
        if s.group.is_empty() {
            continue;
        }
        sampler.nodes(&s.group, epoch, &mut s.nodes);
        let input = s.nodes.input_nodes();
        micro.rows += input.len() as u64;
        for &v in input {
            let remote = u64::from(owner[v as usize] != server);
            micro.remote += remote;
            if s.union.insert(v) {
                pre.rows += 1;
                pre.remote += remote;
            }
        }
    }
    (micro, pre)
}
