//! Counting-only sampling: the vertex lists of a sample's layers without its
//! edges (no CSR, no relabelling), for analyses that only count feature rows
//! (`analyze-locality`). Draws are the samplers' own, so the lists equal the
//! `src` of the `Blocks` that `sample` builds for the same roots.

use super::layerwise::keep_by_importance;
use super::{LayerSampler, NeighborSampler, draw_neighbors, layer_key, vertex_key};
use crate::graph::CsrView;

/// A set of vertex ids over `0..num_nodes` whose `clear` is O(1): a vertex is
/// in the set when its stamp equals the current generation.
#[derive(Clone, Debug)]
pub struct VertexSet {
    stamp: Vec<u32>,
    now: u32,
}

impl VertexSet {
    pub fn new(num_nodes: usize) -> Self {
        VertexSet { stamp: vec![0; num_nodes], now: 1 }
    }
    pub fn clear(&mut self) {
        self.now = self.now.wrapping_add(1);
        if self.now == 0 {
            // Every 2^32 - 1 clears the stamps could alias: start over.
            self.stamp.fill(0);
            self.now = 1;
        }
    }
    /// Adds `v`; true when it was not in the set.
    #[inline]
    pub fn insert(&mut self, v: u32) -> bool {
        let s = &mut self.stamp[v as usize];
        let new = *s != self.now;
        *s = self.now;
        new
    }
    #[inline]
    pub fn contains(&self, v: u32) -> bool {
        self.stamp[v as usize] == self.now
    }
}

/// Vertex id -> u32 over `0..num_nodes` with an O(1) `clear`, stamp and value
/// side by side so that a lookup touches one cache line.
#[derive(Clone, Debug)]
struct VertexMap {
    slot: Vec<[u32; 2]>,
    now: u32,
}

impl VertexMap {
    fn new(num_nodes: usize) -> Self {
        VertexMap { slot: vec![[0, 0]; num_nodes], now: 1 }
    }
    fn clear(&mut self) {
        self.now = self.now.wrapping_add(1);
        if self.now == 0 {
            self.slot.fill([0, 0]);
            self.now = 1;
        }
    }
    /// The value of `v`, set to `value` first when `v` is absent.
    #[inline]
    fn get_or_insert(&mut self, v: u32, value: u32) -> u32 {
        let s = &mut self.slot[v as usize];
        if s[0] != self.now {
            *s = [self.now, value];
        }
        s[1]
    }
}

/// The vertices of every layer of one sample, and the scratch that builds it;
/// reused across samples so that sampling allocates nothing once warm.
///
/// The list is append-only from the roots outwards: layer `l`'s sources are
/// the prefix `nodes[..end(l)]`, because each layer's sources start with its
/// destinations, which are the next layer's sources.
#[derive(Clone, Debug)]
pub struct LayerNodes {
    nodes: Vec<u32>,
    /// `ends[l]` = number of sources of layer `l`; `ends[L]` = number of roots.
    ends: Vec<usize>,
    seen: VertexSet,
    drawn: Vec<u32>,
    // Layer-wise scratch: candidates, their positions and weights, the selection.
    cand_pos: VertexMap,
    cand: Vec<u32>,
    weight: Vec<u32>,
    keyed: Vec<(f64, u32)>,
    keep: Vec<bool>,
}

impl LayerNodes {
    pub fn new(num_nodes: usize) -> Self {
        LayerNodes {
            nodes: Vec::new(),
            ends: Vec::new(),
            seen: VertexSet::new(num_nodes),
            drawn: Vec::new(),
            cand_pos: VertexMap::new(num_nodes),
            cand: Vec::new(),
            weight: Vec::new(),
            keyed: Vec::new(),
            keep: Vec::new(),
        }
    }

    /// Number of GNN layers of the last sample.
    pub fn layers(&self) -> usize {
        self.ends.len().saturating_sub(1)
    }
    /// Sources of layer `l` (input layer 0): `Blocks::layers[l].src`.
    pub fn layer(&self, l: usize) -> &[u32] {
        &self.nodes[..self.ends[l]]
    }
    /// Vertices whose input features the first layer reads.
    pub fn input_nodes(&self) -> &[u32] {
        &self.nodes[..self.ends[0]]
    }
    pub fn roots(&self) -> &[u32] {
        &self.nodes[..self.ends[self.layers()]]
    }
    /// Where each layer's sources end: `ends()[l] == layer(l).len()`, last entry the roots.
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// Starts a sample of `layers` layers from `roots` (a repeated root is kept once).
    fn start(&mut self, roots: &[u32], layers: usize) {
        self.nodes.clear();
        self.seen.clear();
        for &r in roots {
            if self.seen.insert(r) {
                self.nodes.push(r);
            }
        }
        self.ends.clear();
        self.ends.resize(layers + 1, 0);
        self.ends[layers] = self.nodes.len();
    }
}

/// How many vertices ahead the sampling loops prefetch a vertex's CSR row:
/// far enough to hide a cache miss, near enough to stay in cache.
const AHEAD: usize = 16;

/// Hints the CPU to load `x`'s cache line. Sampling big graphs is bound by
/// random reads of the CSR; issuing them a few vertices early overlaps them
/// (about 2x on a 2.4M-node graph).
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is only a hint: it cannot fault, read into any
    // value or write memory, whatever the address (here a live reference), and
    // its target feature (SSE) is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Prefetches the offsets of `nodes[i + AHEAD]` and the row of `nodes[i + AHEAD / 2]`
/// (whose offsets were fetched earlier).
#[inline(always)]
fn prefetch_rows(g: CsrView<'_>, nodes: &[u32], i: usize) {
    if let Some(&w) = nodes.get(i + AHEAD) {
        prefetch(&g.indptr[w as usize]);
    }
    if let Some(&w) = nodes.get(i + AHEAD / 2)
        && let Some(first) = g.in_neighbors(w).first()
    {
        prefetch(first);
    }
}

impl NeighborSampler<'_> {
    /// The vertex lists of `sample(roots, epoch, ..)` (same draws) without building its blocks.
    pub fn sample_nodes(&self, roots: &[u32], epoch: u64, out: &mut LayerNodes) {
        let g = self.graph();
        let fanouts = &self.fanouts().0;
        out.start(roots, fanouts.len());
        let LayerNodes { nodes, ends, seen, drawn, .. } = out;
        for (layer, &fanout) in fanouts.iter().enumerate().rev() {
            let key = layer_key(self.seed(), epoch, layer as u64);
            let num_dst = nodes.len();
            for i in 0..num_dst {
                prefetch_rows(g, &nodes[..num_dst], i);
                let v = nodes[i];
                let nbrs = g.in_neighbors(v);
                let k = fanout.take(nbrs.len());
                let picked = if k == nbrs.len() {
                    nbrs
                } else {
                    drawn.resize(k, 0);
                    draw_neighbors(nbrs, vertex_key(key, v), drawn);
                    &drawn[..]
                };
                for &u in picked {
                    if seen.insert(u) {
                        nodes.push(u);
                    }
                }
            }
            ends[layer] = nodes.len();
        }
    }
}

impl LayerSampler<'_> {
    /// The vertex lists of `sample(roots, epoch, ..)` without building its blocks.
    pub fn sample_nodes(&self, roots: &[u32], epoch: u64, out: &mut LayerNodes) {
        self.sample_nodes_scaled(roots, epoch, 1, out);
    }

    /// As `sample_nodes` with every layer's budget multiplied by `scale`
    /// (a per-root budget times the number of roots, say).
    pub fn sample_nodes_scaled(&self, roots: &[u32], epoch: u64, scale: usize, out: &mut LayerNodes) {
        let g: CsrView<'_> = self.graph();
        out.start(roots, self.layers());
        for layer in (0..self.layers()).rev() {
            let num_dst = out.nodes.len();
            out.cand.clear();
            out.weight.clear();
            out.cand_pos.clear();
            for i in 0..num_dst {
                prefetch_rows(g, &out.nodes[..num_dst], i);
                for &u in g.in_neighbors(out.nodes[i]) {
                    let p = out.cand_pos.get_or_insert(u, out.cand.len() as u32) as usize;
                    if p == out.cand.len() {
                        out.cand.push(u);
                        out.weight.push(0);
                    }
                    out.weight[p] += 1;
                }
            }
            let lk = layer_key(self.seed(), epoch, layer as u64);
            let budget = self.budgets()[layer].saturating_mul(scale);
            keep_by_importance(&out.cand, &out.weight, lk, budget, &mut out.keyed, &mut out.keep);
            for (p, &u) in out.cand.iter().enumerate() {
                if out.keep[p] && out.seen.insert(u) {
                    out.nodes.push(u);
                }
            }
            out.ends[layer] = out.nodes.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;
    use crate::sample::{Fanouts, NodeMap};

    fn graph(n: u32) -> Csr {
        let mut edges = Vec::new();
        for v in 0..n {
            for j in 1..=(v % 37) {
                edges.push(((v * 13 + j * 7919) % n, v));
            }
        }
        Csr::from_edges(n as usize, &edges, true)
    }

    fn assert_same(blocks: &crate::sample::Blocks, nodes: &LayerNodes) {
        assert_eq!(nodes.layers(), blocks.layers.len());
        for (l, b) in blocks.layers.iter().enumerate() {
            assert_eq!(nodes.layer(l), &b.src[..], "layer {l}");
        }
        assert_eq!(nodes.roots(), blocks.roots());
        assert_eq!(nodes.input_nodes(), blocks.input_nodes());
    }

    #[test]
    fn node_wise_lists_equal_the_blocks() {
        let csr = graph(4000);
        let g = csr.view();
        let mut map = NodeMap::new(g.num_nodes());
        let mut out = LayerNodes::new(g.num_nodes());
        for fan in ["3", "5,3", "2,2,2,2,2,2", "all,4"] {
            let s = NeighborSampler::new(g, fan.parse::<Fanouts>().unwrap(), 7);
            for roots in [vec![5u32], (0..300).map(|i| i * 13 % 4000).collect()] {
                s.sample_nodes(&roots, 3, &mut out);
                assert_same(&s.sample(&roots, 3, &mut map), &out);
            }
        }
    }

    #[test]
    fn layer_wise_lists_equal_the_blocks() {
        let csr = graph(3000);
        let g = csr.view();
        let mut map = NodeMap::new(g.num_nodes());
        let mut out = LayerNodes::new(g.num_nodes());
        for budgets in [vec![4usize, 4], vec![50, 20, 10], vec![2; 10]] {
            let s = LayerSampler::new(g, budgets.clone(), 11);
            for roots in [vec![17u32], (0..40).map(|i| i * 71 % 3000).collect()] {
                s.sample_nodes(&roots, 1, &mut out);
                assert_same(&s.sample(&roots, 1, &mut map), &out);
                let scaled = LayerSampler::new(g, budgets.iter().map(|b| b * roots.len()).collect(), 11);
                s.sample_nodes_scaled(&roots, 1, roots.len(), &mut out);
                assert_same(&scaled.sample(&roots, 1, &mut map), &out);
            }
        }
    }

    #[test]
    fn repeated_roots_count_once_and_sets_clear() {
        let csr = graph(500);
        let s = NeighborSampler::new(csr.view(), "3".parse().unwrap(), 0);
        let mut out = LayerNodes::new(500);
        s.sample_nodes(&[9, 9, 40], 0, &mut out);
        assert_eq!(out.roots(), &[9, 40]);
        let mut set = VertexSet::new(10);
        assert!(set.insert(3) && !set.insert(3) && set.contains(3));
        set.clear();
        assert!(!set.contains(3) && set.insert(3));
    }
}
