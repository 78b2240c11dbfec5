//! How good a node -> part map is: edge cut and per-part counts.

use crate::graph::CsrView;
use rayon::prelude::*;

#[derive(Debug, Clone, PartialEq)]
pub struct Quality {
    /// Stored CSR entries whose two endpoints are in different parts.
    pub edge_cut: u64,
    /// All stored CSR entries.
    pub edges: u64,
    pub part_nodes: Vec<u64>,
    pub part_train: Vec<u64>,
}

impl Quality {
    pub fn measure(g: CsrView<'_>, part: &[u16], is_train: &[bool], parts: usize) -> Quality {
        let edge_cut = (0..g.num_nodes() as u32)
            .into_par_iter()
            .map(|v| {
                let pv = part[v as usize];
                g.in_neighbors(v).iter().filter(|&&u| part[u as usize] != pv).count() as u64
            })
            .sum();
        let mut part_nodes = vec![0u64; parts];
        let mut part_train = vec![0u64; parts];
        for (&q, &t) in part.iter().zip(is_train) {
            part_nodes[q as usize] += 1;
            part_train[q as usize] += t as u64;
        }
        Quality { edge_cut, edges: g.num_edges() as u64, part_nodes, part_train }
    }

    pub fn edge_cut_fraction(&self) -> f64 {
        if self.edges == 0 { 0.0 } else { self.edge_cut as f64 / self.edges as f64 }
    }
}
