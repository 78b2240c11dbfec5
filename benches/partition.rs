//! Partitioning speed: METIS into 4 parts on SNAP Slashdot (82K nodes, 948K
//! directed entries; target <= 1.5 s) and on a synthetic-arxiv-sized graph;
//! LDG on the latter for comparison.
//!
//! Slashdot is read by the small reader of tests/common until the library's
//! edge-list importer (`leapgnn::datasets`) can be used here instead.

#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::datasets::synthetic::{generate, preset};
use leapgnn::graph::CsrView;
use leapgnn::partition::{Balance, Method, Problem, assign, train_flags};
use std::hint::black_box;

fn run(c: &mut Criterion, label: &str, method: Method, g: CsrView<'_>, is_train: &[bool]) {
    let p = Problem { graph: g, is_train, parts: 4, balance: Balance::DEFAULT, seed: 0 };
    c.bench_function(label, |b| b.iter(|| black_box(assign(method, &p).expect("partition")).len()));
}

fn partition(c: &mut Criterion) {
    let slashdot = common::slashdot();
    let every_tenth: Vec<bool> = (0..slashdot.view().num_nodes()).map(|v| v % 10 == 0).collect();
    run(c, "metis_4_slashdot", Method::Metis, slashdot.view(), &every_tenth);

    let ds = generate("synthetic-arxiv-easy", &preset("synthetic-arxiv-easy").expect("preset"), 0).expect("generate");
    let g = CsrView { indptr: &ds.indptr, indices: &ds.indices };
    let is_train = train_flags(ds.labels.len(), &ds.train);
    run(c, "metis_4_synthetic_arxiv", Method::Metis, g, &is_train);
    run(c, "ldg_4_synthetic_arxiv", Method::Ldg, g, &is_train);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = partition
}
criterion_main!(benches);
