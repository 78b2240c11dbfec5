//! One full-graph training step (`--mode full-graph`, W = 1: forward over
//! every vertex, backward layer by layer through the engine's per-layer
//! seeds, as `train` runs it) on an imported dataset, for each model:
//!
//!     leapgnn download synthetic-arxiv
//!     FULLGRAPH_DATA_DIR=<data dir> cargo bench --bench fullgraph_step
//!
//! `FULLGRAPH_DATASET` (default synthetic-arxiv), `FULLGRAPH_LAYERS` (3),
//! `FULLGRAPH_HIDDEN` (64), `FULLGRAPH_MODELS` (sage,gcn,gat). The machine
//! is shared: besides criterion's figures it prints the fastest of 8 steps,
//! which contention cannot make faster than the code is.

use candle_core::Device;
use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::format::DatasetFile;
use leapgnn::model::{Model, ModelKind, Params};
use leapgnn::sample::Fanouts;
use leapgnn::train::fullgraph::FullGraph;
use leapgnn::train::strategy::StepSink;
use leapgnn::train::{GraphData, Iteration, Quiet, Solo, Strategy, TrainConfig, Worker};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

fn bench(c: &mut Criterion) {
    let Ok(dir) = std::env::var("FULLGRAPH_DATA_DIR") else {
        eprintln!("skipping: set FULLGRAPH_DATA_DIR to a data dir holding an imported dataset");
        return;
    };
    let name = env("FULLGRAPH_DATASET", "synthetic-arxiv");
    let layers: usize = env("FULLGRAPH_LAYERS", "3").parse().expect("FULLGRAPH_LAYERS");
    let hidden: usize = env("FULLGRAPH_HIDDEN", "64").parse().expect("FULLGRAPH_HIDDEN");
    let ds = DatasetFile::open(std::path::Path::new(&dir).join(&name).join("dataset.lgnn")).expect("dataset");
    let train = ds.train().to_vec();
    let fanouts: Fanouts = vec!["all"; layers].join(",").parse().expect("fanouts");
    let mut group = c.benchmark_group("fullgraph_step");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    for kind in env("FULLGRAPH_MODELS", "sage,gcn,gat").split(',') {
        let kind = <ModelKind as clap::ValueEnum>::from_str(kind, true).expect("FULLGRAPH_MODELS");
        // The model `train --mode full-graph --model KIND --hidden H` builds, other flags at their defaults.
        let cfg = TrainConfig { model: kind, hidden, fanouts: fanouts.clone(), ..TrainConfig::default() };
        let spec = cfg.model_spec(&ds);
        let mut params = Params::new(0);
        let model = Model::new(&spec, &mut params, &Device::Cpu).expect("model");
        let data = GraphData { graph: ds.graph(), features: &ds, labels: ds.labels() };
        let mut w = Worker::new((0, 1), data, (&fanouts, &fanouts), 0, (model, params), Device::Cpu);
        w.all_rows = Some(&ds);
        let mut strategy = FullGraph;
        let mut step = |i: u64| {
            let it = Iteration {
                epoch: i,
                index: 0,
                global_index: i,
                batches: vec![&train[..]],
                global_size: train.len(),
                dropout_key: i,
                ahead: Vec::new(),
            };
            let mut grad = vec![0f32; w.params.numel()];
            let mut quiet = Quiet;
            let mut sink = StepSink::new(&mut quiet);
            let loss = strategy.iteration(&mut w, &mut Solo, &it, &mut grad, &mut sink).expect("step");
            black_box((loss, grad))
        };
        step(0); // builds the engine's state (inputs, halo plan, graph)
        let mut best = f64::INFINITY;
        for i in 1..=8 {
            let t = Instant::now();
            step(i);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{name} {kind} {layers} layers, hidden {hidden}: fastest of 8 steps {:.1} ms", best * 1e3);
        let mut i = 100;
        group.bench_function(format!("{name}/{kind}_{layers}x{hidden}"), |b| {
            b.iter(|| {
                i += 1;
                step(i)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
