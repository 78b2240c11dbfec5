//! Converter throughput on the shared real data: a SNAP edge list (parse,
//! symmetrise, CSR, generated features) and an OGB zip (block-parallel CSV
//! parsing of dense features).

use criterion::{Criterion, criterion_group, criterion_main};
use leapgnn::datasets::convert::{ConvertOptions, Format, convert};
use std::io::Write;
use std::path::{Path, PathBuf};

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets").join(rel)
}

/// An OGB-layout zip of Planetoid Cora with dense 0/1 feature rows.
fn cora_ogb_zip(dir: &Path) -> PathBuf {
    let base = shared("planetoid/converted/cora");
    let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", base.display())).unwrap();
    let gz = |s: &str| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(s.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let mut feat = String::new();
    for l in read("features.txt").lines().skip(1) {
        let mut row = vec!["0"; 1433];
        l.split_whitespace().for_each(|c| row[c.parse::<usize>().unwrap()] = "1");
        feat.push_str(&row.join(","));
        feat.push('\n');
    }
    let labels = read("labels.txt");
    let files = [
        ("cora/raw/edge.csv.gz", gz(&read("edges.txt").replace(' ', ","))),
        ("cora/raw/node-feat.csv.gz", gz(&feat)),
        ("cora/raw/node-label.csv.gz", gz(&labels)),
        ("cora/raw/num-node-list.csv.gz", gz(&format!("{}\n", labels.lines().count()))),
    ];
    let path = dir.join("cora.zip");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (name, bytes) in files {
        z.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(&bytes).unwrap();
    }
    z.finish().unwrap();
    path
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("import");
    g.sample_size(10);
    let slashdot = shared("snap/soc-Slashdot0902.txt.gz");
    let sym = ConvertOptions { symmetrize: Some(true), ..Default::default() };
    g.bench_function("edgelist_slashdot_948k_rows", |b| {
        b.iter(|| convert(Format::Edgelist, &slashdot, "slashdot", 0, &sym).unwrap())
    });
    let dir = tempfile::tempdir().unwrap();
    let zip = cora_ogb_zip(dir.path());
    g.bench_function("ogb_cora_zip_3.9M_feature_values", |b| {
        b.iter(|| convert(Format::Ogb, &zip, "cora", 0, &ConvertOptions::default()).unwrap())
    });
    let fb = shared("musae-facebook");
    g.bench_function("musae_facebook", |b| {
        b.iter(|| convert(Format::Musae, &fb, "facebook", 0, &ConvertOptions::default()).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
