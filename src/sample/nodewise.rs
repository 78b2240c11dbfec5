use super::{Block, Blocks, Fanouts, Interner, draw_neighbors, layer_key, vertex_key};
use crate::graph::CsrView;
use rayon::prelude::*;

/// Below this many sampled edges a layer is drawn on the calling thread:
/// splitting costs more than it saves (and micrographs parallelise over roots).
const PAR_MIN_EDGES: usize = 16_384;
/// Destinations per parallel task.
const PAR_CHUNK: usize = 1024;

/// Node-wise uniform neighbour sampler (GraphSAGE / DGL `NeighborSampler`).
#[derive(Clone, Debug)]
pub struct NeighborSampler<'g> {
    graph: CsrView<'g>,
    fanouts: Fanouts,
    seed: u64,
}

impl<'g> NeighborSampler<'g> {
    pub fn new(graph: CsrView<'g>, fanouts: Fanouts, seed: u64) -> Self {
        NeighborSampler { graph, fanouts, seed }
    }
    pub fn graph(&self) -> CsrView<'g> {
        self.graph
    }
    pub fn fanouts(&self) -> &Fanouts {
        &self.fanouts
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The blocks of `roots` (distinct vertex ids) for `epoch`. `map` is scratch,
    /// reused across calls: a `NodeMap::new(num_nodes)` for batches, a `SmallMap`
    /// for single micrographs.
    pub fn sample(&self, roots: &[u32], epoch: u64, map: &mut impl Interner) -> Blocks {
        let layers = self.fanouts.layers();
        let mut out: Vec<Block> = Vec::with_capacity(layers);
        for layer in (0..layers).rev() {
            let dst = out.last().map(|b| &b.src[..]).unwrap_or(roots);
            let (indptr, nbrs) = self.sample_layer(dst, layer, epoch);
            let block = Block::relabel(dst, indptr, nbrs, map);
            out.push(block);
        }
        out.reverse();
        Blocks { layers: out }
    }

    /// Draws layer `layer`'s neighbours of each vertex in `dst`: returns the CSR
    /// offsets and the neighbours' global ids.
    pub fn sample_layer(&self, dst: &[u32], layer: usize, epoch: u64) -> (Vec<u32>, Vec<u32>) {
        let fanout = self.fanouts.0[layer];
        let g = self.graph;
        let mut indptr = Vec::with_capacity(dst.len() + 1);
        let mut total = 0usize;
        indptr.push(0u32);
        for &v in dst {
            total += fanout.take(g.in_degree(v));
            indptr.push(u32::try_from(total).expect("a sampled layer has more than 2^32 edges"));
        }
        let mut nbrs = vec![0u32; total];
        let key = layer_key(self.seed, epoch, layer as u64);
        let fill = |dst: &[u32], offs: &[u32], out: &mut [u32]| {
            let base = offs[0] as usize;
            for (i, &v) in dst.iter().enumerate() {
                let (lo, hi) = (offs[i] as usize - base, offs[i + 1] as usize - base);
                draw_neighbors(g.in_neighbors(v), vertex_key(key, v), &mut out[lo..hi]);
            }
        };
        if total < PAR_MIN_EDGES {
            fill(dst, &indptr, &mut nbrs);
        } else {
            // Cut the output at chunk boundaries so each task owns its slice.
            let mut tasks = Vec::with_capacity(dst.len().div_ceil(PAR_CHUNK));
            let mut rest = &mut nbrs[..];
            for (c, d) in dst.chunks(PAR_CHUNK).enumerate() {
                let offs = &indptr[c * PAR_CHUNK..c * PAR_CHUNK + d.len() + 1];
                let (mine, tail) = rest.split_at_mut((offs[d.len()] - offs[0]) as usize);
                rest = tail;
                tasks.push((d, offs, mine));
            }
            tasks.into_par_iter().for_each(|(d, offs, out)| fill(d, offs, out));
        }
        (indptr, nbrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;
    use crate::sample::{Fanout, NodeMap};

    /// Ring-of-cliques style graph with degrees from 0 to ~40.
    fn graph(n: u32) -> Csr {
        let mut edges = Vec::new();
        for v in 0..n {
            for j in 1..=(v % 41) {
                edges.push(((v * 7 + j * 13) % n, v));
            }
        }
        Csr::from_edges(n as usize, &edges, true)
    }

    fn fan(f: &str) -> Fanouts {
        f.parse().unwrap()
    }

    #[test]
    fn blocks_are_consistent_and_respect_fanouts() {
        let csr = graph(5000);
        let g = csr.view();
        let s = NeighborSampler::new(g, fan("5,3"), 11);
        let mut map = NodeMap::new(g.num_nodes());
        let roots: Vec<u32> = (0..200).map(|i| i * 17 % 5000).collect();
        let b = s.sample(&roots, 0, &mut map);
        assert_eq!(b.layers.len(), 2);
        assert_eq!(b.roots(), &roots[..]);
        assert_eq!(b.layers[0].dst(), &b.layers[1].src[..]);
        for (l, blk) in b.layers.iter().enumerate() {
            let k = [5usize, 3][l];
            let mut seen = blk.src.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), blk.src.len(), "src not de-duplicated");
            for d in 0..blk.num_dst {
                let v = blk.src[d];
                let e = blk.edges_of(d);
                assert_eq!(e.len(), g.in_degree(v).min(k));
                for &p in e {
                    assert!(g.in_neighbors(v).contains(&blk.src[p as usize]), "not a neighbour");
                }
            }
        }
    }

    #[test]
    fn a_vertex_draw_does_not_depend_on_the_batch() {
        let csr = graph(3000);
        let g = csr.view();
        let s = NeighborSampler::new(g, fan("4,4"), 5);
        let mut map = NodeMap::new(g.num_nodes());
        let a = s.sample(&[10, 20, 30], 2, &mut map);
        let b = s.sample(&[30, 999, 10, 2000], 2, &mut map);
        let neigh = |bl: &Blocks, v: u32| -> Vec<u32> {
            let blk = &bl.layers[1];
            let d = blk.dst().iter().position(|&x| x == v).unwrap();
            blk.edges_of(d).iter().map(|&p| blk.src[p as usize]).collect()
        };
        assert_eq!(neigh(&a, 10), neigh(&b, 10));
        assert_eq!(neigh(&a, 30), neigh(&b, 30));
        // A different epoch draws differently for a high-degree vertex (degree 40 > 4).
        let c = s.sample(&[40], 3, &mut map);
        let d = s.sample(&[40], 2, &mut map);
        assert_ne!(neigh(&c, 40), neigh(&d, 40));
    }

    #[test]
    fn parallel_and_sequential_layers_agree() {
        let csr = graph(50_000);
        let g = csr.view();
        let s = NeighborSampler::new(g, Fanouts(vec![Fanout::Upto(10)]), 3);
        let dst: Vec<u32> = (0..30_000).collect();
        let (ip, nb) = s.sample_layer(&dst, 0, 1);
        assert!(nb.len() >= PAR_MIN_EDGES);
        for (i, &v) in dst.iter().enumerate().step_by(97) {
            let (_, one) = s.sample_layer(&[v], 0, 1);
            assert_eq!(&nb[ip[i] as usize..ip[i + 1] as usize], &one[..]);
        }
    }

    #[test]
    fn full_fanout_keeps_whole_neighbourhood() {
        let csr = graph(1000);
        let g = csr.view();
        let s = NeighborSampler::new(g, Fanouts::all(1), 0);
        let mut map = NodeMap::new(g.num_nodes());
        let b = s.sample(&[40, 81], 0, &mut map);
        let blk = &b.layers[0];
        for d in 0..2 {
            let mut got: Vec<u32> = blk.edges_of(d).iter().map(|&p| blk.src[p as usize]).collect();
            got.sort_unstable();
            assert_eq!(got, g.in_neighbors(blk.src[d]));
        }
    }
}
