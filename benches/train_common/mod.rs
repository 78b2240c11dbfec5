//! The benchmark graph of `sampler` and `train_step`: 2^20 nodes, in-degrees
//! uniform in 10..=30 from seeded random sources, 128-d features, 47 classes,
//! built in memory (a GB-sized archive file is not what these benches measure).

#![allow(dead_code)]

use leapgnn::comm::TableRows;
use leapgnn::graph::Csr;
use leapgnn::util::rng::{SplitMix, hash_of};
use rayon::prelude::*;

pub const NODES: usize = 1 << 20;
pub const DIM: usize = 128;
pub const CLASSES: u32 = 47;

pub fn graph() -> Csr {
    let degs: Vec<u64> = (0..NODES as u64).map(|v| 10 + hash_of(1, &[v]) % 21).collect();
    let mut indptr = vec![0u64; NODES + 1];
    for v in 0..NODES {
        indptr[v + 1] = indptr[v] + degs[v];
    }
    let mut indices = vec![0u32; indptr[NODES] as usize];
    let mut rest = &mut indices[..];
    let mut rows = Vec::with_capacity(NODES);
    for &d in &degs {
        let (row, tail) = rest.split_at_mut(d as usize);
        rows.push(row);
        rest = tail;
    }
    rows.into_par_iter().enumerate().for_each(|(v, row)| {
        let mut rng = SplitMix(hash_of(2, &[v as u64]));
        // Distinct sources: draw, sort, and replace duplicates by stepping forward.
        for u in row.iter_mut() {
            *u = rng.below(NODES) as u32;
        }
        row.sort_unstable();
        for i in 1..row.len() {
            if row[i] <= row[i - 1] {
                row[i] = row[i - 1] + 1;
            }
        }
        if *row.last().unwrap() as usize >= NODES {
            // Wrapped past the end (rare): fall back to consecutive ids.
            let start = (v % (NODES - row.len())) as u32;
            row.iter_mut().enumerate().for_each(|(i, u)| *u = start + i as u32);
        }
    });
    let csr = Csr { indptr, indices };
    csr.view().check().expect("benchmark graph is a valid CSR");
    csr
}

pub fn features() -> TableRows {
    let mut rows = vec![0f32; NODES * DIM];
    rows.par_chunks_mut(DIM).enumerate().for_each(|(v, r)| {
        let mut rng = SplitMix(hash_of(3, &[v as u64]));
        r.iter_mut().for_each(|x| *x = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5);
    });
    TableRows::all(NODES, DIM, rows).expect("table")
}

pub fn labels() -> Vec<i32> {
    (0..NODES as u64).map(|v| (hash_of(4, &[v]) % CLASSES as u64) as i32).collect()
}

/// `count` batches of 1024 distinct roots.
pub fn batches(count: usize) -> Vec<Vec<u32>> {
    (0..count)
        .map(|b| {
            let mut r: Vec<u32> = (0..1024u64).map(|i| (hash_of(5, &[b as u64, i]) % NODES as u64) as u32).collect();
            r.sort_unstable();
            r.dedup();
            r
        })
        .collect()
}
