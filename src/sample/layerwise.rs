//! Layer-wise sampling (FastGCN / LADIES style): each layer keeps a budget of
//! vertices drawn from the union neighbourhood of its destinations, with
//! importance proportional to how many destinations a candidate feeds (its
//! degree into the layer, LADIES' restriction of FastGCN's degree-based
//! importance to the batch). Used by `analyze-locality --sampling layer`.

use super::{Block, Blocks, Interner, NodeMap, layer_key, vertex_key};
use crate::graph::CsrView;

#[derive(Clone, Debug)]
pub struct LayerSampler<'g> {
    graph: CsrView<'g>,
    /// Vertex budget per layer, input layer first.
    budgets: Vec<usize>,
    seed: u64,
}

impl<'g> LayerSampler<'g> {
    pub fn new(graph: CsrView<'g>, budgets: Vec<usize>, seed: u64) -> Self {
        LayerSampler { graph, budgets, seed }
    }
    pub fn layers(&self) -> usize {
        self.budgets.len()
    }
    pub fn graph(&self) -> CsrView<'g> {
        self.graph
    }
    pub fn budgets(&self) -> &[usize] {
        &self.budgets
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Blocks for `roots` (distinct). Weighted sampling without replacement by
    /// exponential keys (Efraimidis-Spirakis): candidate v with weight w gets
    /// key -ln(u_v)/w and the `budget` smallest keys win. u_v is a pure function
    /// of (seed, epoch, layer, v), so the choice depends on the batch only
    /// through the candidate set and weights.
    pub fn sample(&self, roots: &[u32], epoch: u64, map: &mut NodeMap) -> Blocks {
        let g = self.graph;
        let mut out: Vec<Block> = Vec::with_capacity(self.layers());
        let mut cand: Vec<u32> = Vec::new();
        let mut weight: Vec<u32> = Vec::new();
        let (mut keyed, mut keep) = (Vec::new(), Vec::new());
        for layer in (0..self.layers()).rev() {
            let dst = out.last().map(|b| &b.src[..]).unwrap_or(roots);
            cand.clear();
            weight.clear();
            for &v in dst {
                for &u in g.in_neighbors(v) {
                    let p = map.intern(u, &mut cand) as usize;
                    if p == weight.len() {
                        weight.push(0);
                    }
                    weight[p] += 1;
                }
            }
            let lk = layer_key(self.seed, epoch, layer as u64);
            keep_by_importance(&cand, &weight, lk, self.budgets[layer], &mut keyed, &mut keep);
            let mut indptr = Vec::with_capacity(dst.len() + 1);
            let mut nbrs = Vec::new();
            indptr.push(0u32);
            for &v in dst {
                for &u in g.in_neighbors(v) {
                    if map.get(u).is_some_and(|p| keep[p as usize]) {
                        nbrs.push(u);
                    }
                }
                indptr.push(nbrs.len() as u32);
            }
            map.clear(&cand);
            out.push(Block::relabel(dst, indptr, nbrs, map));
        }
        out.reverse();
        Blocks { layers: out }
    }
}

/// Which candidates a layer keeps: all when they fit the budget, else the
/// `budget` smallest exponential keys -ln(u_v)/w_v (Efraimidis-Spirakis), ties
/// broken by position. `keep[p]` answers for `cand[p]`; both buffers are reused.
pub(super) fn keep_by_importance(
    cand: &[u32],
    weight: &[u32],
    layer_key: u64,
    budget: usize,
    keyed: &mut Vec<(f64, u32)>,
    keep: &mut Vec<bool>,
) {
    keep.clear();
    if cand.len() <= budget {
        keep.resize(cand.len(), true);
        return;
    }
    keep.resize(cand.len(), false);
    keyed.clear();
    keyed.extend(cand.iter().zip(weight).enumerate().map(|(p, (&v, &w))| {
        // Top 53 bits as a uniform in (0, 1].
        let u = ((vertex_key(layer_key, v) >> 11) + 1) as f64 / (1u64 << 53) as f64;
        (-u.ln() / w as f64, p as u32)
    }));
    keyed.select_nth_unstable_by(budget, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for &(_, p) in &keyed[..budget] {
        keep[p as usize] = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;

    #[test]
    fn respects_budget_and_is_deterministic() {
        let n = 3000u32;
        let edges: Vec<(u32, u32)> =
            (0..n).flat_map(|v| (1..=(v % 30)).map(move |j| ((v * 17 + j * 59) % n, v))).collect();
        let csr = Csr::from_edges(n as usize, &edges, true);
        let g = csr.view();
        let s = LayerSampler::new(g, vec![300, 100], 4);
        let mut map = NodeMap::new(n as usize);
        let roots: Vec<u32> = (0..50).map(|i| i * 41 + 7).collect();
        let a = s.sample(&roots, 0, &mut map);
        let b = s.sample(&roots, 0, &mut map);
        assert_eq!(a, b);
        assert_ne!(a, s.sample(&roots, 1, &mut map));
        assert_eq!(a.roots(), &roots[..]);
        for (l, budget) in [300usize, 100].into_iter().enumerate() {
            let blk = &a.layers[l];
            let sampled: std::collections::BTreeSet<u32> = blk.indices.iter().map(|&p| blk.src[p as usize]).collect();
            assert!(sampled.len() <= budget, "layer {l}: {} > {budget}", sampled.len());
            assert!(sampled.len() >= budget / 2, "layer {l} kept only {}", sampled.len());
            for d in 0..blk.num_dst {
                for &p in blk.edges_of(d) {
                    assert!(g.in_neighbors(blk.src[d]).contains(&blk.src[p as usize]));
                }
            }
        }
        assert_eq!(a.layers[0].dst(), &a.layers[1].src[..]);
    }
}
