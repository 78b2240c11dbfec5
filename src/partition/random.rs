//! Random balanced partitioning: nodes dealt round robin in a seeded shuffled
//! order, train vertices first, so both the node and the train counts of any
//! two parts differ by at most one. The baseline METIS is judged against.

use super::Problem;
use crate::util::rng::stream;
use rand::seq::SliceRandom;

pub fn assign(p: &Problem<'_>) -> Vec<u16> {
    let n = p.graph.num_nodes();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut stream(p.seed, "partition-random"));
    let mut part = vec![0u16; n];
    let mut next = 0usize;
    for train_pass in [true, false] {
        for &v in order.iter().filter(|&&v| p.is_train[v as usize] == train_pass) {
            part[v as usize] = next as u16;
            next = if next + 1 == p.parts { 0 } else { next + 1 };
        }
    }
    part
}
