//! Data-plane speed over loopback: ring all-reduce of gradient buffers, and
//! feature fetches from three peers. Also the lookup structure of the feature
//! cache (dense id -> slot table vs hashing vs binary search), which decided
//! `TableRows`.
//!
//! Fetches also run with `--encrypt`'s sealed records (`_encrypted`), whose
//! cost is the README's encryption overhead.
//!
//! `cargo bench --bench comm`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use leapgnn::comm::{Category, FeatureClient, Mesh, MeshConfig, Owners, RowSource, TableRows, serve_features};
use leapgnn::util::rng;
use rand::Rng;
use std::collections::HashMap;
use std::hint::black_box;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

// As in the leapgnn binary: glibc malloc returns big buffers to the OS and page-faults them back.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TIMEOUT: Duration = Duration::from_secs(120);

/// W meshes, one per worker, built concurrently and handed back by rank.
fn meshes(w: usize) -> Vec<Mesh> {
    meshes_sealed(w, false)
}

fn meshes_sealed(w: usize, encrypt: bool) -> Vec<Mesh> {
    let ls: Vec<TcpListener> = (0..w).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let mut cfg = MeshConfig::new(r, addrs.clone(), vec![7u8; 32]);
                cfg.encrypt = encrypt;
                s.spawn(move || Mesh::establish(l, &cfg).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn all_reduce(c: &mut Criterion) {
    let mut g = c.benchmark_group("all_reduce");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(12));
    for w in [2, 4] {
        let ms = meshes(w);
        for (label, n) in [("45k", 45_000), ("1MB", 1 << 18), ("16M", 16 << 20)] {
            let mut bufs: Vec<Vec<f32>> = (0..w).map(|r| vec![r as f32 * 1e-6; n]).collect();
            g.throughput(Throughput::Bytes(n as u64 * 4));
            g.bench_function(BenchmarkId::new(format!("w{w}"), label), |b| {
                b.iter_custom(|iters| {
                    std::thread::scope(|s| {
                        let mut it = ms.iter().zip(bufs.iter_mut());
                        let (m0, b0) = it.next().unwrap();
                        for (m, buf) in it {
                            s.spawn(move || {
                                for _ in 0..iters {
                                    m.all_reduce_sum(buf, Category::Gradients, TIMEOUT).unwrap();
                                }
                            });
                        }
                        let t = Instant::now();
                        for _ in 0..iters {
                            m0.all_reduce_sum(b0, Category::Gradients, TIMEOUT).unwrap();
                        }
                        t.elapsed()
                    })
                })
            });
        }
    }
    g.finish();
}

fn feature_fetch(c: &mut Criterion) {
    let mut grp = c.benchmark_group("feature_fetch");
    grp.sample_size(20).measurement_time(Duration::from_secs(8));
    // 1 peer = two workers (the loopback figure); 3 peers = four workers.
    for (peers, encrypt) in [(1usize, false), (1, true), (3, false), (3, true)] {
        let (n, d, rows) = (240_000usize, 128usize, 100_000usize);
        // Worker 0 owns nothing: every row comes from one of its peers.
        let mut g = rng::stream(1, "bench-owners");
        let owners: Arc<[u16]> = (0..n).map(|_| g.random_range(1..=peers as u16)).collect();
        let ms = meshes_sealed(peers + 1, encrypt);
        for (r, m) in ms.iter().enumerate().skip(1) {
            let ids: Vec<u32> = (0..n as u32).filter(|&v| owners[v as usize] as usize == r).collect();
            let table = ids.iter().flat_map(|&v| (0..d).map(move |j| (v as usize * d + j) as f32)).collect();
            serve_features(m, Arc::new(TableRows::new(n, d, &ids, table).unwrap()));
        }
        let nothing: Arc<dyn RowSource> = Arc::new(TableRows::new(n, d, &[], Vec::new()).unwrap());
        let client = FeatureClient::new(Owners::Table(owners), nothing, TIMEOUT);
        let ids: Vec<u32> = (0..rows).map(|_| g.random_range(0..n as u32)).collect();
        let mut out = vec![0f32; rows * d];
        client.fetch(&ms[0], &ids, &mut out).unwrap();
        assert_eq!(out[d + 5], (ids[1] as usize * d + 5) as f32, "rows in request order");

        for (unit, tp) in
            [("rows", Throughput::Elements(rows as u64)), ("bytes", Throughput::Bytes((rows * d * 4) as u64))]
        {
            grp.throughput(tp);
            let sealed = if encrypt { "_encrypted" } else { "" };
            grp.bench_function(BenchmarkId::new(format!("100k_rows_128d_{peers}_peers{sealed}"), unit), |b| {
                b.iter(|| client.fetch(&ms[0], black_box(&ids), &mut out).unwrap())
            });
        }
    }
    grp.finish();
}

fn cache_lookup(c: &mut Criterion) {
    // An ogbn-products-sized graph with 10% of its rows cached.
    let n = 2_449_029usize;
    let mut g = rng::stream(2, "bench-cache");
    let cached: Vec<u32> = {
        let mut v: Vec<u32> = (0..n as u32).filter(|_| g.random_bool(0.1)).collect();
        v.sort_unstable();
        v
    };
    let probes: Vec<u32> = (0..100_000).map(|_| g.random_range(0..n as u32)).collect();
    let dense = TableRows::new(n, 1, &cached, vec![1.0; cached.len()]).unwrap();
    let sip: HashMap<u32, u32> = cached.iter().enumerate().map(|(i, &v)| (v, i as u32)).collect();
    let mut xxh = HashMap::with_hasher(xxhash_rust::xxh3::Xxh3DefaultBuilder);
    xxh.extend(cached.iter().enumerate().map(|(i, &v)| (v, i as u32)));

    let mut grp = c.benchmark_group("cache_lookup");
    grp.throughput(Throughput::Elements(probes.len() as u64));
    grp.bench_function("dense_slot_table", |b| {
        b.iter(|| probes.iter().filter(|&&v| dense.row(black_box(v)).is_some()).count())
    });
    grp.bench_function("hashmap_sip", |b| {
        b.iter(|| probes.iter().filter(|&&v| sip.contains_key(&black_box(v))).count())
    });
    grp.bench_function("hashmap_xxh3", |b| {
        b.iter(|| probes.iter().filter(|&&v| xxh.contains_key(&black_box(v))).count())
    });
    grp.bench_function("sorted_binary_search", |b| {
        b.iter(|| probes.iter().filter(|&&v| cached.binary_search(&black_box(v)).is_ok()).count())
    });
    grp.finish();
}

criterion_group!(benches, all_reduce, feature_fetch, cache_lookup);
criterion_main!(benches);
