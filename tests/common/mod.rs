//! Real graphs and generated datasets shared by the partition tests and benches.
//! Each test binary uses only some of these helpers.
#![allow(dead_code)]

use leapgnn::graph::Csr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// `../shared/datasets/<rel>` (tests and benches run from the package root).
pub fn shared(rel: &str) -> PathBuf {
    Path::new("../shared/datasets").join(rel)
}

fn pairs(lines: impl Iterator<Item = String>) -> Vec<(u32, u32)> {
    lines
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace().map(|x| x.parse::<u32>().expect("node id"));
            (it.next().expect("source"), it.next().expect("target"))
        })
        .collect()
}

fn nodes_of(edges: &[(u32, u32)]) -> usize {
    edges.iter().map(|&(a, b)| a.max(b) as usize + 1).max().unwrap_or(0)
}

/// SNAP soc-Slashdot0902 as stored: directed (from -> to), self loops kept.
/// (Until the library's edge-list importer lands, this small reader stands in.)
pub fn slashdot() -> Csr {
    let gz = std::fs::File::open(shared("snap/soc-Slashdot0902.txt.gz")).expect("shared Slashdot copy");
    let lines = BufReader::new(flate2::read::GzDecoder::new(gz)).lines().map(|l| l.expect("gzip text"));
    let edges = pairs(lines);
    Csr::from_edges(nodes_of(&edges), &edges, false)
}

/// Cora (Planetoid order), both directions stored, and its public train ids
/// (the first 140 nodes: a train set concentrated in one corner of the id space).
pub fn cora() -> (Csr, Vec<u32>) {
    let text = std::fs::read_to_string(shared("planetoid/converted/cora.edges.txt")).expect("shared Cora copy");
    let one_way = pairs(text.lines().map(str::to_string));
    let both: Vec<(u32, u32)> = one_way.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
    let train = std::fs::read_to_string(shared("planetoid/converted/cora.train.txt")).expect("Cora train split");
    let train = train.lines().map(|l| l.trim().parse().expect("train id")).collect();
    (Csr::from_edges(2_708, &both, true), train)
}

/// Generates the synthetic-small preset (seed 0) as `<data_dir>/synthetic-small/dataset.lgnn`.
pub fn write_synthetic_small(data_dir: &Path) -> leapgnn::format::Dataset {
    let spec = leapgnn::datasets::synthetic::preset("synthetic-small").expect("preset");
    let ds = leapgnn::datasets::synthetic::generate("synthetic-small", &spec, 0).expect("generate");
    ds.write(&data_dir.join("synthetic-small/dataset.lgnn")).expect("write dataset");
    ds
}
