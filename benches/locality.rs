//! `analyze-locality` speed: the full default table (metis and random x S in
//! {2, 4, 8, 16} x node and layer sampling x 2 and 10 layers; 20 worker
//! batches of 1024 roots, 4096 micrographs per row) on SNAP Slashdot, with
//! the partitions built beforehand (target <= 15 s on 2 cores).
//!
//! With `LEAPGNN_BENCH_DATA=DIR`, where DIR holds `synthetic-products` and
//! its metis and random partitions into 2, 4, 8 and 16 parts (made by
//! `leapgnn --data-dir DIR partition ...`), the same table on it is timed
//! too (target <= 5 minutes; criterion's 10 runs take the better part of an hour).

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::DataDir;
use leapgnn::datasets::{DownloadRequest, Registry, download};
use leapgnn::locality::{Options, analyze};
use leapgnn::partition::ensure_partition;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets").join(rel)
}

fn default_table(c: &mut Criterion, label: &str, data: &DataDir, name: &str, seconds: u64) {
    let opts = Options::default();
    for method in ["metis", "random"] {
        for parts in [2, 4, 8, 16] {
            ensure_partition(data, name, method, parts, 0).expect("partition");
        }
    }
    let mut g = c.benchmark_group("locality");
    g.sample_size(10).measurement_time(Duration::from_secs(seconds)).warm_up_time(Duration::from_secs(1));
    g.bench_function(label, |b| b.iter(|| black_box(analyze(data, name, &opts, false).expect("analyze")).rows.len()));
    g.finish();
}

fn locality(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = DataDir::new(dir.path());
    let req = DownloadRequest {
        name: "slashdot".into(),
        from: Some(shared("snap/soc-Slashdot0902.txt.gz")),
        ..Default::default()
    };
    download(&data, &Registry::resolve(None).expect("registry"), &req).expect("import Slashdot");
    default_table(c, "default_table_slashdot", &data, "slashdot", 150);

    if let Some(dir) = std::env::var_os("LEAPGNN_BENCH_DATA") {
        default_table(c, "default_table_synthetic_products", &DataDir::new(dir), "synthetic-products", 3000);
    }
}

criterion_group!(benches, locality);
criterion_main!(benches);
