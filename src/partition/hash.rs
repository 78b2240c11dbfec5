//! Hash partitioning: part = mix64(v) mod K. Stateless (any process can compute
//! a node's owner from its id alone) and blind to the graph; the seed is unused.

use super::Problem;
use crate::util::rng::mix64;
use rayon::prelude::*;

pub fn assign(p: &Problem<'_>) -> Vec<u16> {
    let k = p.parts as u64;
    (0..p.graph.num_nodes() as u64).into_par_iter().map(|v| (mix64(v) % k) as u16).collect()
}
