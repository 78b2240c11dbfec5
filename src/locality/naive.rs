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

/// Reused buffers, sized by the number of servers.
pub struct NaiveScratch {
    /// Position of each server in the current tour (UNSEEN outside it).
    rank: Vec<u32>,
    tour: Vec<u16>,
    /// Destinations first touched at each tour position.
    first: Vec<u64>,
}

impl NaiveScratch {
    pub fn new(servers: usize) -> Self {
        NaiveScratch { rank: vec![UNSEEN; servers], tour: Vec::new(), first: Vec::new() }
    }
    /// Re-sizes for `servers` servers.
    pub fn resize(&mut self, servers: usize) {
        self.rank.clear();
        self.rank.resize(servers, UNSEEN);
    }
}

/// The naive-migration cost of `blocks`, trained by the model of server `home`.
pub fn naive_migration(
    blocks: &Blocks,
    owner: impl Fn(u32) -> u16,
    home: u16,
    dims: &ModelDims,
    s: &mut NaiveScratch,
) -> NaiveCost {
    let servers = s.rank.len();
    let params = dims.params();
    let mut cost = NaiveCost::default();
    let mut at = home as usize;
    let mut tape = 0u64;
    for (l, b) in blocks.layers.iter().enumerate() {
        let (d_in, d_out) = (dims.d_in(l), dims.d_out(l));
        s.tour.clear();
        for &v in &b.src {
            let p = owner(v);
            if s.rank[p as usize] == UNSEEN {
                s.rank[p as usize] = 0;
                s.tour.push(p);
            }
        }
        s.tour.sort_unstable_by_key(|&p| (p as usize + servers - at) % servers);
        for (j, &p) in s.tour.iter().enumerate() {
            s.rank[p as usize] = j as u32;
        }
        s.first.clear();
        s.first.resize(s.tour.len(), 0);
        for d in 0..b.num_dst {
            let own = s.rank[owner(b.src[d]) as usize];
            let f = b.edges_of(d).iter().fold(own, |f, &e| f.min(s.rank[owner(b.src[e as usize]) as usize]));
            s.first[f as usize] += 1;
        }
        let hops = (s.tour.len() - 1) as u64 + u64::from(s.tour[0] as usize != at);
        cost.hops += hops;
        cost.params += hops * params;
        cost.intermediate += hops * tape;
        let mut touched = 0;
        for &f in &s.first[..s.tour.len() - 1] {
            touched += f;
            cost.partial += touched * d_in;
        }
        let last = *s.tour.last().expect("a block has at least one source");
        at = last as usize;
        for &p in &s.tour {
            s.rank[p as usize] = UNSEEN;
        }
        let n_dst = b.num_dst as u64;
        if l + 1 < blocks.layers.len() {
            cost.intermediate += b.dst().iter().filter(|&&v| owner(v) != last).count() as u64 * d_out;
        }
        tape += n_dst * (2 * d_in + d_out) + n_dst + 1 + b.num_edges() as u64;
    }
    if at != home as usize {
        cost.hops += 1;
        cost.params += params;
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Block;

    /// One layer: roots 0 and 1, sources 0..4; 0 <- {2, 3}, 1 <- {3}.
    fn one_layer() -> Blocks {
        Blocks { layers: vec![Block { src: vec![0, 1, 2, 3], num_dst: 2, indptr: vec![0, 2, 3], indices: vec![2, 3, 3] }] }
    }

    #[test]
    fn a_batch_on_one_server_moves_nothing() {
        let dims = ModelDims { in_dim: 8, hidden: 4, classes: 2, layers: 1 };
        let c = naive_migration(&one_layer(), |_| 1, 1, &dims, &mut NaiveScratch::new(3));
        assert_eq!(c, NaiveCost::default());
        assert_eq!(dims.params(), 2 * 8 * 2 + 2);
    }

    #[test]
    fn hand_counted_tour() {
        // Owners: 0 -> s0, 1 -> s1, 2 -> s2, 3 -> s1; home s1. Tour from s1: s1, s2, s0.
        let owner = |v: u32| [0u16, 1, 2, 1][v as usize];
        let dims = ModelDims { in_dim: 8, hidden: 4, classes: 2, layers: 1 };
        let c = naive_migration(&one_layer(), owner, 1, &dims, &mut NaiveScratch::new(3));
        // s1 touches dst 0 (via 3) and dst 1 (own row): 2 rows move s1 -> s2, 2 rows s2 -> s0;
        // the model ends on s0 and returns home.
        assert_eq!(c.hops, 3);
        assert_eq!(c.params, 3 * dims.params());
        assert_eq!(c.partial, (2 + 2) * 8);
        assert_eq!(c.intermediate, 0);
    }
}
