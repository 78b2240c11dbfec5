//! One training step of GraphSAGE-mean (2 layers, fanout 10,10, 1024 roots,
//! 128-d features, hidden 128, 47 classes, dropout 0.5, Adam) on a 2^20-node
//! graph: sample + gather + forward + backward + optimizer step, exactly as
//! `train` runs it (`Worker::compute`, then the update). Also its parts.
//!
//! `cargo bench --bench train_step`

mod train_common;

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::gather::gather;
use leapgnn::model::{Model, ModelKind, ModelSpec, Params};
use leapgnn::optim::OptimizerKind;
use leapgnn::sample::{Fanouts, NeighborSampler, NodeMap};
use leapgnn::train::{GraphData, Worker};
use std::hint::black_box;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let csr = train_common::graph();
    let feats = train_common::features();
    let labels = train_common::labels();
    let batches = train_common::batches(64);
    let fanouts: Fanouts = "10,10".parse().unwrap();
    let dev = candle_core::Device::Cpu;
    let spec = ModelSpec {
        kind: ModelKind::SageMean,
        in_dim: train_common::DIM,
        hidden: 128,
        classes: train_common::CLASSES as usize,
        layers: 2,
        heads: 4,
        dropout: 0.5,
        aggr: Default::default(),
        softmax_t: 1.0,
        self_loops: true,
        gat_heads: Default::default(),
    };
    let mut params = Params::new(0);
    let model = Model::new(&spec, &mut params, &dev).unwrap();
    let mut opt = OptimizerKind::Adam.build(params.numel(), 0.01, 5e-4);
    let data = GraphData { graph: csr.view(), features: &feats, labels: &labels };
    let mut w = Worker::new((0, 1), data, (&fanouts, &fanouts), 0, (model, params), dev);

    // The machine is shared: also report the fastest of 40 steps, which
    // contention cannot make faster than the code is.
    let mut step = |i: usize| {
        let roots = &batches[i % batches.len()];
        let mut grad = vec![0f32; w.params.numel()];
        let s = w.compute(roots, i as u64, i as u64, roots.len(), &mut grad).unwrap();
        let mut weights = w.params.flat_values().unwrap();
        opt.step(&mut weights, &grad);
        w.params.set_flat(&weights).unwrap();
        s
    };
    let mut best = f64::INFINITY;
    let mut parts = (0.0, 0.0, 0.0);
    for i in 0..40 {
        let t = std::time::Instant::now();
        let s = step(i);
        let e = t.elapsed().as_secs_f64();
        if e < best {
            best = e;
            parts = (s.sample_seconds, s.gather_seconds, s.compute_seconds);
        }
    }
    println!(
        "fastest of 40 steps: {:.1} ms (sample {:.1}, gather {:.1}, forward+backward {:.1})",
        best * 1e3,
        parts.0 * 1e3,
        parts.1 * 1e3,
        parts.2 * 1e3
    );

    let mut group = c.benchmark_group("train_step");
    group.sample_size(20).measurement_time(Duration::from_secs(15));
    let mut i = 0usize;
    group.bench_function("sage_mean_1024_roots_10x10_128d", |b| {
        b.iter(|| {
            i += 1;
            black_box(step(i).loss)
        })
    });

    // One step of every other model on the same batches (the figure per model).
    for kind in [ModelKind::SageMax, ModelKind::Gcn, ModelKind::Gat] {
        let spec = ModelSpec { kind, ..spec.clone() };
        let mut params = Params::new(0);
        let model = Model::new(&spec, &mut params, &candle_core::Device::Cpu).unwrap();
        let data = GraphData { graph: csr.view(), features: &feats, labels: &labels };
        let mut wk = Worker::new((0, 1), data, (&fanouts, &fanouts), 0, (model, params), candle_core::Device::Cpu);
        let mut j = 0usize;
        group.bench_function(format!("{kind}_1024_roots_10x10_128d"), |b| {
            b.iter(|| {
                j += 1;
                let roots = &batches[j % batches.len()];
                let mut grad = vec![0f32; wk.params.numel()];
                black_box(wk.compute(roots, j as u64, j as u64, roots.len(), &mut grad).unwrap().loss)
            })
        });
    }

    // The parts, for the breakdown.
    let sampler = NeighborSampler::new(csr.view(), fanouts.clone(), 0);
    let mut map = NodeMap::new(train_common::NODES);
    let blocks = sampler.sample(&batches[0], 0, &mut map);
    println!(
        "block sizes: {} input rows -> {} -> {} roots, {} edges",
        blocks.input_nodes().len(),
        blocks.layers[1].num_src(),
        blocks.roots().len(),
        blocks.num_edges()
    );
    group.bench_function("part/sample", |b| b.iter(|| black_box(sampler.sample(&batches[1], 0, &mut map))));
    group.bench_function("part/gather_120k_rows", |b| {
        b.iter(|| black_box(gather(&feats, blocks.input_nodes()).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
