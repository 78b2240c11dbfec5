//! The two samplings behind one interface, both from `crate::sample` (the
//! samplers training uses): counting-only vertex lists for micrographs and
//! groups, full blocks where the edges matter (naive migration).

use super::Sampling;
use crate::graph::CsrView;
use crate::sample::{Blocks, Fanout, Fanouts, LayerNodes, LayerSampler, NeighborSampler, NodeMap};

pub enum Sampler<'g> {
    Node(NeighborSampler<'g>),
    /// Budgets are per root: a sample of k roots keeps up to k x fanout new
    /// vertices per layer, so a micrograph keeps up to `fanout`.
    Layer(LayerSampler<'g>),
}

impl<'g> Sampler<'g> {
    pub fn new(graph: CsrView<'g>, sampling: Sampling, layers: usize, fanout: u32, seed: u64) -> Self {
        match sampling {
            Sampling::Node => {
                Sampler::Node(NeighborSampler::new(graph, Fanouts(vec![Fanout::Upto(fanout); layers]), seed))
            }
            Sampling::Layer => Sampler::Layer(LayerSampler::new(graph, vec![fanout as usize; layers], seed)),
        }
    }

    /// The vertex lists of the sample of `roots` (allocation-free once `out` is warm).
    pub fn nodes(&self, roots: &[u32], epoch: u64, out: &mut LayerNodes) {
        match self {
            Sampler::Node(s) => s.sample_nodes(roots, epoch, out),
            Sampler::Layer(s) => s.sample_nodes_scaled(roots, epoch, roots.len(), out),
        }
    }

    /// The blocks of the same sample, edges included.
    pub fn blocks(&self, roots: &[u32], epoch: u64, map: &mut NodeMap) -> Blocks {
        match self {
            Sampler::Node(s) => s.sample(roots, epoch, map),
            Sampler::Layer(s) => {
                let budgets = s.budgets().iter().map(|b| b.saturating_mul(roots.len())).collect();
                LayerSampler::new(s.graph(), budgets, s.seed()).sample(roots, epoch, map)
            }
        }
    }
}
