//! Node-wise sampler throughput: 1024 roots, fanout 10,10, on a 2^20-node
//! graph; reported as sampled edges per second, on one thread (the per-core
//! figure) and on the default pool.
//!
//! `cargo bench --bench sampler`

mod train_common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use leapgnn::sample::{NeighborSampler, NodeMap};
use std::hint::black_box;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let csr = train_common::graph();
    let g = csr.view();
    let sampler = NeighborSampler::new(g, "10,10".parse().unwrap(), 0);
    let batches = train_common::batches(64);
    let mut map = NodeMap::new(g.num_nodes());
    let edges: usize =
        batches.iter().map(|b| sampler.sample(b, 0, &mut map).num_edges()).sum::<usize>() / batches.len();
    let mut group = c.benchmark_group("sampler");
    group.throughput(Throughput::Elements(edges as u64));
    group.measurement_time(Duration::from_secs(8));
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    for (name, pool) in [("1024_roots_10x10/1_thread", Some(&one)), ("1024_roots_10x10/default_pool", None)] {
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let roots = &batches[i as usize % batches.len()];
                let mut run = || black_box(sampler.sample(roots, i, &mut map));
                match pool {
                    Some(p) => p.install(run),
                    None => run(),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
