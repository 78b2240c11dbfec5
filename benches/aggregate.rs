//! The CSR aggregation op (GraphSAGE's [mean of neighbours | self], and the
//! element-wise max that sage-max and deepgcn's GENConv use) forward and
//! forward+backward on the first layer of a real sampled block (1024 roots,
//! fanout 10,10, 128-d rows), against candle's own index_add / scatter path.
//! Prints the figure the issues speak in: input rows aggregated per second.
//!
//! `cargo bench --bench aggregate`

mod train_common;

use candle_core::{Tensor, Var};
use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::model::csr_op::{Reduce, aggregate_with_self};
use leapgnn::model::{AggGraph, Kernel};
use leapgnn::sample::{Fanouts, NeighborSampler, NodeMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let csr = train_common::graph();
    let batches = train_common::batches(1);
    let fanouts: Fanouts = "10,10".parse().unwrap();
    let sampler = NeighborSampler::new(csr.view(), fanouts, 0);
    let mut map = NodeMap::new(train_common::NODES);
    let blocks = sampler.sample(&batches[0], 0, &mut map);
    let g = Arc::new(AggGraph::from_block(&blocks.layers[0], false).with_mean_weights());
    let dev = candle_core::Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (g.num_src(), train_common::DIM), &dev).unwrap()).unwrap();
    println!("layer-1 block: {} sources -> {} destinations, {} edges", g.num_src(), g.num_dst(), g.num_edges());

    for (group, reduce) in [("aggregate_mean_with_self", Reduce::Sum), ("aggregate_max_with_self", Reduce::Max)] {
        let mut grp = c.benchmark_group(group);
        grp.sample_size(20).measurement_time(Duration::from_secs(8));
        for (name, k) in [("fast", Kernel::Fast), ("candle_reference", Kernel::Reference)] {
            let fwd = || aggregate_with_self(x.as_tensor(), &g, reduce, k).unwrap();
            let fwd_bwd = || fwd().sum_all().unwrap().backward().unwrap();
            let t = Instant::now();
            for _ in 0..10 {
                black_box(fwd_bwd());
            }
            let per = t.elapsed().as_secs_f64() / 10.0;
            let rate = g.num_edges() as f64 / per / 1e6;
            println!("{group} {name}: forward+backward {:.2} ms = {rate:.1} M edges/s", per * 1e3);
            grp.bench_function(format!("{name}/forward"), |b| b.iter(|| black_box(fwd())));
            grp.bench_function(format!("{name}/forward_backward"), |b| b.iter(|| black_box(fwd_bwd())));
        }
        grp.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
