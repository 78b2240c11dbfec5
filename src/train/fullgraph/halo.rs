//! The halo plan of one worker: the vertices it owns, the in-neighbours of
//! those it does not own (its halo) grouped by owner, and, for every peer, the
//! owned rows that peer holds as halo. Derived from the topology and the
//! partition map at start: one pass over the in-edges, no file to keep in sync
//! with the partition.

use super::memory::{Shape, csr_edges_within};
use crate::BadInput;
use crate::graph::CsrView;
use crate::sample::Block;

/// Not a row of this worker.
const NONE: u32 = u32::MAX;

#[derive(Debug)]
pub struct HaloPlan {
    pub rank: usize,
    pub world: usize,
    /// dst = the owned vertices (ascending), src = owned ++ halo, edges = every
    /// in-edge of the owned vertices: the block every full-graph layer reads.
    pub block: Block,
    /// `halo()[halo_from[p]..halo_from[p + 1]]` are owned by worker `p`
    /// (ascending ids within a peer).
    pub halo_from: Vec<usize>,
    /// `send[p]`: positions among the owned rows of what peer `p` holds as
    /// halo from this worker, in `p`'s halo order.
    pub send: Vec<Vec<u32>>,
    /// Row of each vertex in `block.src`, or NONE.
    row: Vec<u32>,
}

/// Refuses share `rank` of `world` of the graph, `s`, whose block could not
/// count its edges in 32-bit offsets (`HaloPlan::derive`): also the driver's
/// check of GNNPipe's stored chunks before launch, with the same message.
pub(crate) fn check_share_edges(s: Shape, (rank, world): (usize, usize), self_loops: bool) -> Result<(), BadInput> {
    csr_edges_within(
        &[s],
        self_loops,
        "give more workers, chunks or groups (a smaller share of the graph each)",
        |_| format!("share {rank} of {world} of the graph"),
    )
}

impl HaloPlan {
    /// The plan of worker `rank` of `world`; `owners` maps vertex -> worker
    /// (None: worker 0 owns every vertex).
    /// Refuses a share whose block could not count its edges, with a self
    /// loop per owned vertex where `self_loops` (the model's aggregation
    /// graph adds them: `ModelSpec::adds_self_loops`), in 32-bit offsets
    /// (`memory::CSR_MAX_EDGES`): the checks before a run
    /// (`memory::check_device`) hold each worker to it, but GNNPipe's chunks
    /// are cut later.
    pub fn derive(
        graph: CsrView<'_>,
        owners: Option<&[u16]>,
        (rank, world): (usize, usize),
        self_loops: bool,
    ) -> Result<HaloPlan, BadInput> {
        let n = graph.num_nodes();
        let owner = |v: u32| owners.map_or(0, |o| o[v as usize] as usize);
        let owned: Vec<u32> = (0..n as u32).filter(|&v| owner(v) == rank).collect();
        let edges = owned.iter().map(|&v| graph.in_neighbors(v).len() as u64).sum();
        check_share_edges(Shape { owned: owned.len() as u64, edges, ..Shape::default() }, (rank, world), self_loops)?;
        let mut row = vec![NONE; n];
        for (i, &v) in owned.iter().enumerate() {
            row[v as usize] = i as u32;
        }
        // The halo, grouped by owner; `row` marks the vertices already listed.
        let mut need: Vec<Vec<u32>> = vec![Vec::new(); world];
        for &v in &owned {
            for &u in graph.in_neighbors(v) {
                if row[u as usize] == NONE {
                    row[u as usize] = NONE - 1;
                    need[owner(u)].push(u);
                }
            }
        }
        let mut src = owned.clone();
        let mut halo_from = Vec::with_capacity(world + 1);
        for ids in &mut need {
            ids.sort_unstable();
            halo_from.push(src.len() - owned.len());
            for &u in ids.iter() {
                row[u as usize] = src.len() as u32;
                src.push(u);
            }
        }
        halo_from.push(src.len() - owned.len());

        // What each peer needs from here: owned in-neighbours of its vertices.
        let mut send: Vec<Vec<u32>> = vec![Vec::new(); world];
        if world > 1 {
            for u in 0..n as u32 {
                let q = owner(u);
                if q == rank {
                    continue;
                }
                let out = &mut send[q];
                out.extend(graph.in_neighbors(u).iter().filter(|&&v| owner(v) == rank));
            }
            for s in &mut send {
                s.sort_unstable();
                s.dedup();
                // Ascending ids of owned vertices are ascending owned positions.
                s.iter_mut().for_each(|v| *v = row[*v as usize]);
            }
        }

        let mut indptr = Vec::with_capacity(owned.len() + 1);
        let mut indices = Vec::new();
        indptr.push(0u32);
        for &v in &owned {
            indices.extend(graph.in_neighbors(v).iter().map(|&u| row[u as usize]));
            indptr.push(u32::try_from(indices.len()).expect("the edges were checked against CSR_MAX_EDGES"));
        }
        let block = Block { src, num_dst: owned.len(), indptr, indices };
        Ok(HaloPlan { rank, world, block, halo_from, send, row })
    }

    pub fn owned(&self) -> &[u32] {
        self.block.dst()
    }

    pub fn halo(&self) -> &[u32] {
        &self.block.src[self.block.num_dst..]
    }

    /// Rows of the layer inputs: owned + halo.
    pub fn rows(&self) -> usize {
        self.block.src.len()
    }

    /// Position of `v` among the owned rows, if this worker owns it.
    pub fn owned_position(&self, v: u32) -> Option<usize> {
        self.row_of(v).map(|r| r as usize).filter(|&r| r < self.block.num_dst)
    }

    /// Row of `v` among the layer inputs (owned + halo), if this worker holds it.
    pub fn row_of(&self, v: u32) -> Option<u32> {
        self.row.get(v as usize).copied().filter(|&r| r != NONE)
    }

    /// Halo rows this worker receives from peer `p` per exchange.
    pub fn halo_of(&self, p: usize) -> std::ops::Range<usize> {
        self.halo_from[p]..self.halo_from[p + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;

    #[test]
    fn halos_and_send_lists_mirror_each_other() {
        // A ring of 12 with chords, split over 3 workers by v % 3.
        let mut edges = Vec::new();
        for v in 0..12u32 {
            edges.push((v, (v + 1) % 12));
            edges.push(((v + 1) % 12, v));
            edges.push((v, (v + 5) % 12));
        }
        let csr = Csr::from_edges(12, &edges, true);
        let owners: Vec<u16> = (0..12).map(|v| (v % 3) as u16).collect();
        let plans: Vec<HaloPlan> =
            (0..3).map(|r| HaloPlan::derive(csr.view(), Some(&owners), (r, 3), true).unwrap()).collect();
        for p in &plans {
            assert!(p.owned().iter().all(|&v| owners[v as usize] as usize == p.rank));
            // Every in-neighbour of an owned vertex is a row, and the block's edges are exactly the in-edges.
            for (d, &v) in p.owned().iter().enumerate() {
                let mut got: Vec<u32> = p.block.edges_of(d).iter().map(|&s| p.block.src[s as usize]).collect();
                let mut want = csr.view().in_neighbors(v).to_vec();
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want);
            }
            for (q, from) in plans.iter().enumerate() {
                if q == p.rank {
                    assert!(p.halo_of(q).is_empty() && p.send[q].is_empty());
                    continue;
                }
                // What q sends p is p's halo from q, in the same order.
                let sent: Vec<u32> = from.send[p.rank].iter().map(|&i| from.owned()[i as usize]).collect();
                assert_eq!(sent, p.halo()[p.halo_of(q)].to_vec());
                assert!(sent.iter().all(|&v| owners[v as usize] as usize == q));
            }
        }
        let solo = HaloPlan::derive(csr.view(), None, (0, 1), true).unwrap();
        assert_eq!(solo.owned().len(), 12);
        assert!(solo.halo().is_empty());
    }
}
