//! Micrographs: the sampled k-hop tree of a single root. Because draws depend
//! only on (seed, epoch, layer, vertex), a root's micrograph is exactly the
//! part of any batch's blocks that the root reaches.

use super::{Blocks, NeighborSampler, SmallMap};
use rayon::prelude::*;

/// The micrograph of `root` for `epoch`.
pub fn micrograph(sampler: &NeighborSampler<'_>, root: u32, epoch: u64) -> Blocks {
    sampler.sample(&[root], epoch, &mut SmallMap::default())
}

/// The micrographs of many roots, in parallel over roots; `out[i]` belongs to `roots[i]`.
pub fn micrographs(sampler: &NeighborSampler<'_>, roots: &[u32], epoch: u64) -> Vec<Blocks> {
    roots.par_iter().map_init(SmallMap::default, |map, &r| sampler.sample(&[r], epoch, map)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;
    use crate::sample::NodeMap;
    use std::collections::BTreeSet;

    #[test]
    fn batch_blocks_are_the_union_of_micrographs() {
        let n = 4000u32;
        let edges: Vec<(u32, u32)> =
            (0..n).flat_map(|v| (1..=(v % 23)).map(move |j| ((v * 31 + j * 101) % n, v))).collect();
        let csr = Csr::from_edges(n as usize, &edges, true);
        let s = NeighborSampler::new(csr.view(), "6,4".parse().unwrap(), 9);
        let roots: Vec<u32> = (0..64).map(|i| i * 61 % n).collect();
        let batch = s.sample(&roots, 1, &mut NodeMap::new(n as usize));
        let micro = micrographs(&s, &roots, 1);
        assert_eq!(micro[5], micrograph(&s, roots[5], 1));
        for l in 0..2 {
            let union: BTreeSet<u32> = micro.iter().flat_map(|m| m.layers[l].src.iter().copied()).collect();
            let got: BTreeSet<u32> = batch.layers[l].src.iter().copied().collect();
            assert_eq!(union, got, "layer {l}");
            let union_edges: usize = {
                let set: BTreeSet<(u32, u32)> = micro
                    .iter()
                    .flat_map(|m| {
                        let b = &m.layers[l];
                        (0..b.num_dst)
                            .flat_map(move |d| b.edges_of(d).iter().map(move |&p| (b.src[d], b.src[p as usize])))
                    })
                    .collect();
                set.len()
            };
            assert_eq!(union_edges, batch.layers[l].num_edges(), "layer {l} edges");
        }
    }
}
