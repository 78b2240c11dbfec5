//! Linear Deterministic Greedy (Stanton & Kliot, KDD'12): one pass over the
//! nodes in a seeded random order; each node goes to the part holding most of
//! its already-placed in-neighbours, discounted by how full that part is:
//! argmax_i |N(v) ∩ P_i| · (1 - load_i / capacity).
//!
//! For graphs too large for METIS' memory: besides the (mmapped) graph it
//! keeps O(n) state (the order and the map) and O(K) per node.
//!
//! Capacity is `IMBALANCE · n / K` nodes per part, a hard limit; with the train
//! constraint, train vertices also respect `IMBALANCE · T / K` per part and the
//! discount uses the fuller of the two loads. Near the end of the stream the
//! two limits can exclude every part for a train vertex; it then goes where
//! there is node room (the report shows the resulting train balance).

use super::{IMBALANCE, Problem};
use crate::util::rng::stream;
use rand::seq::SliceRandom;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const UNPLACED: u16 = u16::MAX;

pub fn assign(p: &Problem<'_>) -> Vec<u16> {
    let n = p.graph.num_nodes();
    let k = p.parts;
    let cap_nodes = capacity(n, k);
    let train_total = if p.balance.train { p.num_train() } else { 0 };
    let cap_train = capacity(train_total, k);

    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut stream(p.seed, "partition-ldg"));

    let mut part = vec![UNPLACED; n];
    let mut nodes = vec![0u64; k];
    let mut train = vec![0u64; k];
    let mut shared = vec![0u32; k];
    let mut touched: Vec<u16> = Vec::new();
    // (load, part), least loaded on top; entries go stale as loads grow and are skipped.
    let mut lightest: BinaryHeap<Reverse<(u64, u16)>> = (0..k as u16).map(|i| Reverse((0, i))).collect();

    for &v in &order {
        for &u in p.graph.in_neighbors(v) {
            let q = part[u as usize];
            if q != UNPLACED {
                if shared[q as usize] == 0 {
                    touched.push(q);
                }
                shared[q as usize] += 1;
            }
        }
        let is_train = train_total > 0 && p.is_train[v as usize];
        let fill = |i: usize| {
            let f = nodes[i] as f64 / cap_nodes as f64;
            if is_train { f.max(train[i] as f64 / cap_train as f64) } else { f }
        };
        let fits = |i: usize| nodes[i] < cap_nodes && (!is_train || train[i] < cap_train);

        // Score ties go to the lighter part, then the lower id.
        let best_touched = touched
            .iter()
            .map(|&q| q as usize)
            .filter(|&i| fits(i))
            .map(|i| (shared[i] as f64 * (1.0 - fill(i)), Reverse(nodes[i]), Reverse(i)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)))
            .map(|(_, _, Reverse(i))| i);
        let chosen = match best_touched {
            Some(i) => i,
            None => lightest_fitting(&mut lightest, &nodes, &fits)
                .or_else(|| (0..k).filter(|&i| nodes[i] < cap_nodes).min_by_key(|&i| (nodes[i], i)))
                .unwrap_or_else(|| (0..k).min_by_key(|&i| (nodes[i], i)).unwrap_or(0)),
        };

        part[v as usize] = chosen as u16;
        nodes[chosen] += 1;
        if p.is_train[v as usize] {
            train[chosen] += 1;
        }
        lightest.push(Reverse((nodes[chosen], chosen as u16)));
        for &q in &touched {
            shared[q as usize] = 0;
        }
        touched.clear();
    }
    part
}

/// ceil(IMBALANCE · total / k), at least 1.
fn capacity(total: usize, k: usize) -> u64 {
    ((IMBALANCE * total as f64 / k as f64).ceil() as u64).max(1)
}

/// The least-loaded part that can take the node: the heap top when it fits
/// (the usual case), else a scan.
fn lightest_fitting(
    heap: &mut BinaryHeap<Reverse<(u64, u16)>>,
    nodes: &[u64],
    fits: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    while let Some(&Reverse((load, i))) = heap.peek() {
        if nodes[i as usize] == load {
            break;
        }
        heap.pop();
    }
    match heap.peek() {
        Some(&Reverse((_, i))) if fits(i as usize) => Some(i as usize),
        _ => (0..nodes.len()).filter(|&i| fits(i)).min_by_key(|&i| (nodes[i], i)),
    }
}
