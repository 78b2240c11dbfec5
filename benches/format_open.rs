//! Opening a ~1 GB dataset archive: mmap + header check + rkyv validation +
//! O(1) shape checks (target: <= 5 ms). `open_verified` (payload hash and
//! O(n + m) invariants) is measured alongside for reference.

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::datasets::synthetic::{SyntheticSpec, generate};
use leapgnn::format::DatasetFile;
use std::hint::black_box;

fn open(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("big/dataset.lgnn");
    // 2M nodes x 128 f32 features = 1 GiB of features, plus 16M CSR entries.
    let spec =
        SyntheticSpec { nodes: 2_097_152, edges: 8_000_000, feature_dim: 128, classes: 40, ..Default::default() };
    generate("big", &spec, 0).expect("generate").write(&path).expect("write");
    let bytes = std::fs::metadata(&path).expect("archive").len();
    eprintln!("archive: {:.2} GB", bytes as f64 / 1e9);

    let mut g = c.benchmark_group("format_open_1GB");
    g.bench_function("open", |b| b.iter(|| black_box(DatasetFile::open(&path).expect("open")).num_nodes()));
    g.sample_size(10);
    g.bench_function("open_verified", |b| {
        b.iter(|| black_box(DatasetFile::open_verified(&path).expect("open")).num_nodes())
    });
    g.finish();
}

criterion_group!(benches, open);
criterion_main!(benches);
