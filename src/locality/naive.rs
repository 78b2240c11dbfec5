//! What naive per-layer model migration would move for a model-centric batch.
//!
//! The artifact's "cha1" simulation (reference §3.4.3) estimated this with
//! random numbers; here every term is counted from the sampled blocks and the
//! partition. The protocol costed, for worker w's batch b(i, w):
//!
//! - Vertex data is owner-resident: the input features of v, and every hidden
//!   state h_l(v), live on the server that owns v. No feature row moves.
//! - Layer l (input layer first) is computed by a model that tours the
//!   servers owning the layer's source vertices, in cyclic id order starting
//!   from where it stands (w for layer 0, else where layer l-1 ended). On
//!   each server it adds the local sources' contributions to the
//!   destinations' running aggregates.
//! - Every hop (a change of server) carries:
//!   - the parameters (`params` floats; GraphSAGE-mean as `train` builds it:
//!     per layer lin_l with bias and lin_r without). Optimizer state never
//!     moves: the model returns to w, where the optimizer steps once per
//!     iteration (like every strategy, on the all-reduced gradient);
//!   - within a layer's tour, the partial aggregates built so far: one row of
//!     d_in floats per destination already touched (a destination is touched
//!     by the owner of its own row and by the owners of its sampled
//!     neighbours);
//!   - the backward tape of the layers already computed, which backward needs
//!     wherever the model ends: per layer, its mean aggregates and self rows
//!     (n_dst x d_in each), its pre-activations (n_dst x d_out) and its block
//!     (n_dst + 1 offsets and one index per edge, 4 bytes each) to route
//!     gradients to the layer below.
//! - After layer l < L-1, the new hidden states of the destinations are
//!   written to their owners (n_dst rows of d_out floats, except those the
//!   last server of the tour owns), so that layer l+1 finds them there.
//! - After the last layer the loss and backward run where the model stands
//!   (the tape is there; root labels, 4 bytes each, are not counted) and the
//!   model returns to w with its parameters: one more hop unless it is there.
//!
//! Everything is counted in 4-byte words (f32 or u32), summed over batches.

use super::owners::{OwnerTable, Trainer};
use crate::sample::Blocks;

/// Layer widths of the costed model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDims {
    pub in_dim: usize,
    pub hidden: usize,
    pub classes: usize,
    pub layers: usize,
}

impl ModelDims {
    pub fn d_in(&self, l: usize) -> u64 {
        (if l == 0 { self.in_dim } else { self.hidden }) as u64
    }
    pub fn d_out(&self, l: usize) -> u64 {
        (if l + 1 == self.layers { self.classes } else { self.hidden }) as u64
    }
    /// Parameters of GraphSAGE-mean: per layer 2 x d_in x d_out weights + d_out bias.
    pub fn params(&self) -> u64 {
        (0..self.layers).map(|l| 2 * self.d_in(l) * self.d_out(l) + self.d_out(l)).sum()
    }
}

/// Words moved, by kind, and the number of hops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NaiveCost {
    pub hops: u64,
    pub params: u64,
    pub partial: u64,
    /// Backward tape carried along, plus hidden states written to their owners.
    pub intermediate: u64,
}

impl NaiveCost {
    pub fn add(&mut self, o: NaiveCost) {
        self.hops += o.hops;
        self.params += o.params;
        self.partial += o.partial;
        self.intermediate += o.intermediate;
    }
    pub fn words(&self) -> u64 {
        self.params + self.partial + self.intermediate
    }
}

const UNSEEN: u32 = u32::MAX;

/// One trainer's tour through the servers of the current layer.
#[derive(Default)]
struct Tour {
    /// Position of each server in the tour (UNSEEN outside it).
    rank: Vec<u32>,
    servers: Vec<u16>,
    /// Destinations first touched at each tour position.
    first: Vec<u64>,
    /// Where the model stands.
    at: usize,
}

/// Reused buffers, one tour per trainer.
#[derive(Default)]
pub struct NaiveScratch {
    tours: Vec<Tour>,
    reach: Vec<u32>,
}

/// The naive-migration cost of `blocks` for each of `who` (the same batch
/// trained by the model of `home` under different partitions). One pass over
/// the blocks serves every trainer: each vertex's owners are read once.
pub fn naive_migration(
    blocks: &Blocks,
    owners: &OwnerTable,
    who: &[Trainer],
    dims: &ModelDims,
    s: &mut NaiveScratch,
) -> Vec<NaiveCost> {
    let params = dims.params();
    let mut cost = vec![NaiveCost::default(); who.len()];
    if blocks.roots().is_empty() {
        // An empty worker batch (the tail of an epoch with fewer roots than workers): nothing runs.
        return cost;
    }
    s.tours.resize_with(who.len(), Tour::default);
    for (t, tour) in who.iter().zip(&mut s.tours) {
        tour.rank.clear();
        tour.rank.resize(t.servers, UNSEEN);
        tour.at = t.home as usize;
    }
    s.reach.resize(who.len(), 0);
    let mut tape = 0u64;
    for (l, b) in blocks.layers.iter().enumerate() {
        let (d_in, d_out) = (dims.d_in(l), dims.d_out(l));
        for tour in &mut s.tours {
            tour.servers.clear();
        }
        for &v in &b.src {
            let o = owners.of(v);
            for (t, tour) in who.iter().zip(&mut s.tours) {
                let p = o[t.column];
                if tour.rank[p as usize] == UNSEEN {
                    tour.rank[p as usize] = 0;
                    tour.servers.push(p);
                }
            }
        }
        for (t, tour) in who.iter().zip(&mut s.tours) {
            let at = tour.at;
            tour.servers.sort_unstable_by_key(|&p| (p as usize + t.servers - at) % t.servers);
            for (j, &p) in tour.servers.iter().enumerate() {
                tour.rank[p as usize] = j as u32;
            }
            tour.first.clear();
            tour.first.resize(tour.servers.len(), 0);
        }
        for d in 0..b.num_dst {
            let o = owners.of(b.src[d]);
            for ((t, tour), r) in who.iter().zip(&s.tours).zip(&mut s.reach) {
                *r = tour.rank[o[t.column] as usize];
            }
            for &e in b.edges_of(d) {
                let o = owners.of(b.src[e as usize]);
                for ((t, tour), r) in who.iter().zip(&s.tours).zip(&mut s.reach) {
                    *r = (*r).min(tour.rank[o[t.column] as usize]);
                }
            }
            for (tour, &r) in s.tours.iter_mut().zip(&s.reach) {
                tour.first[r as usize] += 1;
            }
        }
        let last_layer = l + 1 == blocks.layers.len();
        for (k, (t, tour)) in who.iter().zip(&mut s.tours).enumerate() {
            let c = &mut cost[k];
            let hops = (tour.servers.len() - 1) as u64 + u64::from(tour.servers[0] as usize != tour.at);
            c.hops += hops;
            c.params += hops * params;
            c.intermediate += hops * tape;
            let mut touched = 0;
            for &f in &tour.first[..tour.servers.len() - 1] {
                touched += f;
                c.partial += touched * d_in;
            }
            let last = *tour.servers.last().expect("a block has at least one source");
            tour.at = last as usize;
            for &p in &tour.servers {
                tour.rank[p as usize] = UNSEEN;
            }
            if !last_layer {
                let away = b.dst().iter().filter(|&&v| owners.owner(v, t.column) != last).count() as u64;
                c.intermediate += away * d_out;
            }
        }
        let n_dst = b.num_dst as u64;
        tape += n_dst * (2 * d_in + d_out) + n_dst + 1 + b.num_edges() as u64;
    }
    for ((t, tour), c) in who.iter().zip(&s.tours).zip(&mut cost) {
        if tour.at != t.home as usize {
            c.hops += 1;
            c.params += params;
        }
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Block;

    /// One layer: roots 0 and 1, sources 0..4; 0 <- {2, 3}, 1 <- {3}.
    fn one_layer() -> Blocks {
        Blocks {
            layers: vec![Block { src: vec![0, 1, 2, 3], num_dst: 2, indptr: vec![0, 2, 3], indices: vec![2, 3, 3] }],
        }
    }

    #[test]
    fn a_batch_on_one_server_moves_nothing() {
        let dims = ModelDims { in_dim: 8, hidden: 4, classes: 2, layers: 1 };
        let owners = OwnerTable::new(&[&[1, 1, 1, 1]]);
        let who = [Trainer { column: 0, home: 1, servers: 3 }];
        let c = naive_migration(&one_layer(), &owners, &who, &dims, &mut NaiveScratch::default());
        assert_eq!(c, vec![NaiveCost::default()]);
        assert_eq!(dims.params(), 2 * 8 * 2 + 2);
    }

    #[test]
    fn hand_counted_tour() {
        // Column 0: 0 -> s0, 1 -> s1, 2 -> s2, 3 -> s1; home s1. Tour from s1: s1, s2, s0.
        // Column 1 puts everything on s0: from home s0 nothing moves.
        let owners = OwnerTable::new(&[&[0, 1, 2, 1], &[0, 0, 0, 0]]);
        let dims = ModelDims { in_dim: 8, hidden: 4, classes: 2, layers: 1 };
        let who = [Trainer { column: 0, home: 1, servers: 3 }, Trainer { column: 1, home: 0, servers: 3 }];
        let all = naive_migration(&one_layer(), &owners, &who, &dims, &mut NaiveScratch::default());
        assert_eq!(all[1], NaiveCost::default());
        let c = all[0];
        // s1 touches dst 0 (via 3) and dst 1 (own row): 2 rows move s1 -> s2, 2 rows s2 -> s0;
        // the model ends on s0 and returns home.
        assert_eq!(c.hops, 3);
        assert_eq!(c.params, 3 * dims.params());
        assert_eq!(c.partial, (2 + 2) * 8);
        assert_eq!(c.intermediate, 0);
    }
}
