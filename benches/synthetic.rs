//! Generating the synthetic-arxiv preset (169,343 nodes, 1.17M CSR entries,
//! 128-d features; target <= 20 s on 2 cores).

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::datasets::synthetic::{generate, preset};
use std::hint::black_box;

fn arxiv(c: &mut Criterion) {
    let spec = preset("synthetic-arxiv-easy").expect("preset");
    let mut g = c.benchmark_group("synthetic");
    g.sample_size(10);
    g.bench_function("generate_synthetic_arxiv", |b| {
        b.iter(|| black_box(generate("synthetic-arxiv-easy", &spec, 0).expect("generate")).indices.len())
    });
    g.finish();
}

criterion_group!(benches, arxiv);
criterion_main!(benches);
