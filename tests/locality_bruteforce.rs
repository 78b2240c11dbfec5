//! Every figure of `analyze-locality` on Cora equals an independent, naive
//! recomputation (ordered vectors and hash sets, one sample at a time). Only
//! the samplers' per-vertex draw (node-wise: `draw_neighbors` keyed by
//! `vertex_key(layer_key(..))`; layer-wise: the same key as a uniform) and the
//! epoch's shuffle (`epoch_order`) are shared with the library: they define
//! what is sampled; everything built from them is recomputed here.

mod import_support;
mod locality_support;

use leapgnn::DataDir;
use leapgnn::format::{DatasetFile, ManifestFile, RowRef};
use leapgnn::graph::CsrView;
use leapgnn::locality::{Options, Row, Sampling, analyze};
use leapgnn::partition::Method;
use leapgnn::sample::{draw_neighbors, layer_key, vertex_key};
use leapgnn::train::epoch_order;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One sampled layer: its sources (destinations first) and each destination's sampled neighbours.
struct Layer {
    src: Vec<u32>,
    num_dst: usize,
    nbrs: Vec<Vec<u32>>,
}

/// The layers (input first) of the sample of `roots`.
fn sample(g: CsrView<'_>, sampling: Sampling, roots: &[u32], layers: usize, fanout: usize, seed: u64) -> Vec<Layer> {
    let mut dst: Vec<u32> = roots.to_vec();
    let mut out = Vec::new();
    for l in (0..layers).rev() {
        let lk = layer_key(seed, 0, l as u64);
        let nbrs: Vec<Vec<u32>> = match sampling {
            Sampling::Node => dst
                .iter()
                .map(|&v| {
                    let all = g.in_neighbors(v);
                    if all.len() <= fanout {
                        return all.to_vec();
                    }
                    let mut o = vec![0; fanout];
                    draw_neighbors(all, vertex_key(lk, v), &mut o);
                    o
                })
                .collect(),
            Sampling::Layer => {
                // Candidates in order of first appearance, weighted by how many destinations they feed.
                let mut cand: Vec<u32> = Vec::new();
                let mut weight: HashMap<u32, u32> = HashMap::new();
                for &v in &dst {
                    for &u in g.in_neighbors(v) {
                        let w = weight.entry(u).or_insert(0);
                        if *w == 0 {
                            cand.push(u);
                        }
                        *w += 1;
                    }
                }
                let budget = fanout * roots.len();
                let kept: HashSet<u32> = if cand.len() <= budget {
                    cand.iter().copied().collect()
                } else {
                    let mut keyed: Vec<(f64, usize, u32)> = cand
                        .iter()
                        .enumerate()
                        .map(|(p, &u)| {
                            let uniform = ((vertex_key(lk, u) >> 11) + 1) as f64 / (1u64 << 53) as f64;
                            (-uniform.ln() / weight[&u] as f64, p, u)
                        })
                        .collect();
                    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    keyed[..budget].iter().map(|k| k.2).collect()
                };
                dst.iter().map(|&v| g.in_neighbors(v).iter().copied().filter(|u| kept.contains(u)).collect()).collect()
            }
        };
        let mut src = dst.clone();
        let mut seen: HashSet<u32> = dst.iter().copied().collect();
        for &u in nbrs.iter().flatten() {
            if seen.insert(u) {
                src.push(u);
            }
        }
        out.push(Layer { num_dst: dst.len(), src, nbrs });
        dst = out.last().unwrap().src.clone();
    }
    out.reverse();
    out
}

/// The worker batches of iteration `i`, cut as DGL does with W workers and B roots each.
fn worker_batches(order: &[u32], w: usize, b: usize, i: usize) -> Vec<Vec<u32>> {
    let all = &order[i * w * b..((i + 1) * w * b).min(order.len())];
    let (base, extra) = (all.len() / w, all.len() % w);
    let mut out = Vec::new();
    let mut start = 0;
    for k in 0..w {
        let len = base + usize::from(k < extra);
        out.push(all[start..start + len].to_vec());
        start += len;
    }
    out
}

struct Dims {
    in_dim: u64,
    hidden: u64,
    classes: u64,
    layers: usize,
}

impl Dims {
    fn d_in(&self, l: usize) -> u64 {
        if l == 0 { self.in_dim } else { self.hidden }
    }
    fn d_out(&self, l: usize) -> u64 {
        if l + 1 == self.layers { self.classes } else { self.hidden }
    }
}

/// Words moved by naive per-layer migration, simulated hop by hop.
fn naive_words(s: &[Layer], part: &[u16], servers: usize, home: u16, d: &Dims) -> (u64, u64) {
    let params: u64 = (0..d.layers).map(|l| 2 * d.d_in(l) * d.d_out(l) + d.d_out(l)).sum();
    let (mut hops, mut words, mut tape) = (0u64, 0u64, 0u64);
    let mut at = home as usize;
    for (l, layer) in s.iter().enumerate() {
        let owners: BTreeSet<usize> = layer.src.iter().map(|&v| part[v as usize] as usize).collect();
        let mut tour: Vec<usize> = owners.into_iter().collect();
        tour.sort_by_key(|&p| (p + servers - at) % servers);
        if tour.is_empty() {
            continue; // an empty batch: nothing to visit
        }
        if tour[0] != at {
            hops += 1;
            words += params + tape;
        }
        let mut touched: HashSet<usize> = HashSet::new();
        for (j, &p) in tour.iter().enumerate() {
            for dst in 0..layer.num_dst {
                let own = part[layer.src[dst] as usize] as usize == p;
                if own || layer.nbrs[dst].iter().any(|&u| part[u as usize] as usize == p) {
                    touched.insert(dst);
                }
            }
            if j + 1 < tour.len() {
                hops += 1;
                words += params + tape + touched.len() as u64 * d.d_in(l);
            }
        }
        at = *tour.last().unwrap();
        let n_dst = layer.num_dst as u64;
        if l + 1 < s.len() {
            let away = layer.src[..layer.num_dst].iter().filter(|&&v| part[v as usize] as usize != at).count();
            words += away as u64 * d.d_out(l);
        }
        let edges: usize = layer.nbrs.iter().map(Vec::len).sum();
        tape += n_dst * (2 * d.d_in(l) + d.d_out(l)) + n_dst + 1 + edges as u64;
    }
    if at != home as usize {
        hops += 1;
        words += params;
    }
    (hops, words)
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * want.abs().max(1.0), "{what}: library {got}, brute force {want}");
}

/// Recomputes `row` from scratch.
fn check_row(row: &Row, g: CsrView<'_>, part: &[u16], order: &[u32], opts: &Options, ds: &DatasetFile) {
    let (s, b) = (row.parts, opts.batch_size);
    let fanout = row.fanout as usize;
    let seed = opts.seed;
    let iterations = opts.batches.div_ceil(s).min(order.len().div_ceil(s * b));
    assert_eq!(row.iterations, iterations);
    let roots = (iterations * s * b).min(order.len());
    assert_eq!(row.roots, roots);
    let tag = format!("{} S={s} {} {}L", row.method, row.sampling, row.layers);

    // Locality over the micrographs of the first roots.
    let (mut sum, mut count) = (0.0f64, 0u64);
    for &root in &order[..opts.micrographs.min(roots)] {
        let m = sample(g, row.sampling, &[root], row.layers, fanout, seed);
        let (mut entries, mut local) = (0u64, 0u64);
        for layer in &m {
            for &v in layer.src.iter().filter(|&&v| v != root) {
                entries += 1;
                local += u64::from(part[v as usize] == part[root as usize]);
            }
        }
        if entries > 0 {
            sum += local as f64 / entries as f64;
            count += 1;
        }
    }
    assert_eq!(row.micrographs, count, "{tag}");
    close(&format!("{tag} locality"), row.locality_pct, 100.0 * sum / count as f64, 1e-6);
    assert_eq!(row.r_sub_pct, 100.0 / s as f64);

    // Requests of the three strategies and the naive migration of the model-centric batches.
    let dims = Dims {
        in_dim: ds.feature_dim() as u64,
        hidden: opts.hidden as u64,
        classes: ds.num_classes() as u64,
        layers: row.layers,
    };
    // [rows, remote rows, bytes, remote bytes]; a row's bytes are what the
    // feature service sends: its floats when dense, a count plus a column and
    // a value per non-zero when stored sparse (Cora's import: sparse).
    let wire = |v: u32| match ds.features().row(v as usize) {
        RowRef::Dense(r) => 4 * r.len() as u64,
        RowRef::Sparse { values, .. } => 4 + 8 * values.len() as u64,
    };
    let count = |c: &mut [u64; 4], v: u32, remote: bool| {
        let b = wire(v);
        c[0] += 1;
        c[2] += b;
        if remote {
            c[1] += 1;
            c[3] += b;
        }
    };
    let (mut mc, mut mg, mut pg) = ([0u64; 4], [0u64; 4], [0u64; 4]);
    let (mut hops, mut words) = (0u64, 0u64);
    for i in 0..iterations {
        let batches = worker_batches(order, s, b, i);
        for (w, batch) in batches.iter().enumerate() {
            let blocks = sample(g, row.sampling, batch, row.layers, fanout, seed);
            for &v in &blocks[0].src {
                count(&mut mc, v, part[v as usize] as usize != w);
            }
            let (h, wd) = naive_words(&blocks, part, s, w as u16, &dims);
            hops += h;
            words += wd;
        }
        for r in 0..s {
            let mut union: HashSet<u32> = HashSet::new();
            for batch in &batches {
                let group: Vec<u32> = batch.iter().copied().filter(|&v| part[v as usize] as usize == r).collect();
                if group.is_empty() {
                    continue;
                }
                let blocks = sample(g, row.sampling, &group, row.layers, fanout, seed);
                for &v in &blocks[0].src {
                    let remote = part[v as usize] as usize != r;
                    count(&mut mg, v, remote);
                    if union.insert(v) {
                        count(&mut pg, v, remote);
                    }
                }
            }
        }
    }
    let per = (iterations * s) as f64;
    for (name, [rows, remote, bytes, remote_bytes], got, got_bytes) in [
        (
            "model-centric",
            mc,
            [row.rows_model_centric, row.remote_rows_model_centric, row.miss_model_centric],
            [row.bytes_model_centric, row.remote_bytes_model_centric],
        ),
        (
            "micrograph",
            mg,
            [row.rows_micrograph, row.remote_rows_micrograph, row.miss_micrograph],
            [row.bytes_micrograph, row.remote_bytes_micrograph],
        ),
        (
            "pregather",
            pg,
            [row.rows_pregather, row.remote_rows_pregather, row.miss_pregather],
            [row.bytes_pregather, row.remote_bytes_pregather],
        ),
    ] {
        close(&format!("{tag} {name} rows"), got[0], rows as f64 / per, 1e-12);
        close(&format!("{tag} {name} remote rows"), got[1], remote as f64 / per, 1e-12);
        close(&format!("{tag} {name} miss"), got[2], remote as f64 / rows as f64, 1e-12);
        close(&format!("{tag} {name} bytes"), got_bytes[0], bytes as f64 / per, 1e-12);
        close(&format!("{tag} {name} remote bytes"), got_bytes[1], remote_bytes as f64 / per, 1e-12);
    }
    close(&format!("{tag} naive hops"), row.naive_hops, hops as f64 / per, 1e-12);
    close(&format!("{tag} naive bytes"), row.bytes_naive_migration, 4.0 * words as f64 / per, 1e-12);
    let parts_sum = row.naive_bytes_params + row.naive_bytes_partial + row.naive_bytes_intermediate;
    close(&format!("{tag} naive breakdown"), parts_sum, row.bytes_naive_migration, 1e-12);
}

fn check_all(data: &DataDir, opts: &Options, rows: usize) {
    let report = analyze(data, "cora-planetoid", opts, false).unwrap();
    assert_eq!(report.rows.len(), rows);
    let ds = DatasetFile::open(data.dataset_path("cora-planetoid")).unwrap();
    let g = ds.graph();
    let order = epoch_order(ds.train(), opts.seed, 0);
    for row in &report.rows {
        let m = ManifestFile::open(data.parts_dir("cora-planetoid", &row.method, row.parts)).unwrap();
        check_row(row, g, m.node_part(), &order, opts, &ds);
    }
    // The figures are not degenerate: METIS keeps micrographs local, and strategies differ.
    if let Some(metis) = report.rows.iter().find(|r| r.method == "metis" && r.parts == 2) {
        assert!(metis.locality_pct > 60.0, "{metis:?}");
        assert!(metis.miss_micrograph < metis.miss_model_centric, "{metis:?}");
        assert!(metis.rows_pregather < metis.rows_micrograph, "{metis:?}");
        assert!(metis.bytes_naive_migration > 0.0);
    }
}

#[test]
fn every_figure_matches_a_brute_force_recomputation_on_cora() {
    let dir = tempfile::tempdir().unwrap();
    locality_support::cora(dir.path());
    let data = DataDir::new(dir.path());
    let opts = Options {
        methods: vec![Method::Metis, Method::Random],
        parts: vec![2, 3],
        samplings: vec![Sampling::Node, Sampling::Layer],
        layers: vec![2, 3],
        fanout: Some(3),
        batch_size: 16,
        // Covers the whole epoch, including its uneven last iteration.
        batches: 50,
        micrographs: 60,
        hidden: 16,
        seed: 7,
        keep: true,
    };
    check_all(&data, &opts, 16);
    // 140 train roots, 16 workers of 8: the second iteration's 12 roots leave 4 workers without a batch.
    let tail = Options { methods: vec![Method::Random], parts: vec![16], layers: vec![2], batch_size: 8, ..opts };
    check_all(&data, &tail, 2);
}
