//! The synthetic generator: deterministic, exact sizes, a valid undirected
//! graph with power-law degrees and homophily, and features from which the
//! neighbourhood predicts the label much better than the node alone.

use leapgnn::datasets::synthetic::{SyntheticSpec, generate, preset};
use leapgnn::format::{Dataset, DatasetFile};

fn small(seed: u64) -> Dataset {
    generate("synthetic-small", &preset("synthetic-small").unwrap(), seed).unwrap()
}

fn row(ds: &Dataset, v: usize) -> &[u32] {
    &ds.indices[ds.indptr[v] as usize..ds.indptr[v + 1] as usize]
}

#[test]
fn same_seed_gives_the_same_dataset_whatever_the_thread_count() {
    let a = small(7);
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let b = one_thread.install(|| small(7));
    assert!(a == b, "seed 7 gave two different datasets");
    let c = small(8);
    assert_ne!(a.indices, c.indices);
    assert_ne!(a.features, c.features);
}

#[test]
fn small_preset_has_exact_sizes_and_a_valid_undirected_graph() {
    let ds = small(0);
    let n = 20_000;
    assert_eq!(ds.meta.num_nodes, n as u64);
    assert_eq!(ds.indices.len(), 200_000, "100,000 undirected edges stored both ways");
    assert_eq!(ds.meta.num_edges, 200_000);
    assert_eq!(ds.features.view(64).to_dense().len(), n * 64);
    assert!(!ds.meta.directed && ds.meta.generated_features);
    ds.check().unwrap();
    for v in 0..n {
        let nb = row(&ds, v);
        assert!(nb.windows(2).all(|w| w[0] < w[1]), "row {v} not sorted and distinct");
        for &u in nb {
            assert_ne!(u as usize, v, "self loop at {v}");
            assert!(row(&ds, u as usize).binary_search(&(v as u32)).is_ok(), "{u}->{v} stored but not {v}->{u}");
        }
    }
    assert_eq!((ds.train.len(), ds.val.len(), ds.test.len()), (12_000, 4_000, 4_000));
    let mut all: Vec<u32> = ds.train.iter().chain(&ds.val).chain(&ds.test).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "splits overlap");
    assert!(ds.labels.iter().all(|&l| (0..10).contains(&l)));
}

#[test]
fn dense_small_spec_still_gets_exactly_the_edges_asked_for() {
    // 10 % of all pairs: many draws are duplicates, so top-up rounds and trimming both run.
    let spec = SyntheticSpec {
        nodes: 300,
        edges: 4_485,
        feature_dim: 4,
        classes: 3,
        split: [0.5, 0.25, 0.25],
        ..Default::default()
    };
    let ds = generate("dense", &spec, 3).unwrap();
    assert_eq!(ds.indices.len(), 2 * 4_485);
    ds.check().unwrap();
}

#[test]
fn degrees_are_heavy_tailed_and_edges_mostly_join_same_labels() {
    let ds = small(0);
    let n = ds.meta.num_nodes as usize;
    let mut deg: Vec<usize> = (0..n).map(|v| row(&ds, v).len()).collect();
    deg.sort_unstable();
    let mean = ds.indices.len() as f64 / n as f64;
    assert!(deg[n - 1] as f64 >= 15.0 * mean, "max degree {} vs mean {mean}: no hubs", deg[n - 1]);
    assert!((deg[n / 2] as f64) < mean, "median {} >= mean {mean}: not right-skewed", deg[n / 2]);
    let same: usize =
        (0..n).map(|v| row(&ds, v).iter().filter(|&&u| ds.labels[u as usize] == ds.labels[v]).count()).sum();
    let homophily = same as f64 / ds.indices.len() as f64;
    assert!(homophily > 0.8, "edge homophily {homophily}");
}

/// Test accuracy of the nearest class mean (means fitted on the train split):
/// the best a linear model can do on isotropic Gaussian classes.
fn nearest_mean_accuracy(ds: &Dataset, feat: &dyn Fn(usize) -> Vec<f64>) -> f64 {
    let (c, d) = (ds.meta.num_classes as usize, ds.meta.feature_dim as usize);
    let mut means = vec![0.0; c * d];
    let mut count = vec![0usize; c];
    for &v in &ds.train {
        let l = ds.labels[v as usize] as usize;
        count[l] += 1;
        for (m, x) in means[l * d..(l + 1) * d].iter_mut().zip(feat(v as usize)) {
            *m += x;
        }
    }
    for (l, &k) in count.iter().enumerate() {
        means[l * d..(l + 1) * d].iter_mut().for_each(|m| *m /= k.max(1) as f64);
    }
    let dist = |f: &[f64], l: usize| -> f64 { f.iter().zip(&means[l * d..]).map(|(x, m)| (x - m) * (x - m)).sum() };
    let right = ds
        .test
        .iter()
        .filter(|&&v| {
            let f = feat(v as usize);
            let best = (0..c).min_by(|&a, &b| dist(&f, a).total_cmp(&dist(&f, b))).unwrap();
            best as i32 == ds.labels[v as usize]
        })
        .count();
    right as f64 / ds.test.len() as f64
}

#[test]
fn neighbourhood_mean_predicts_labels_far_better_than_own_features() {
    let ds = small(0);
    let d = ds.meta.feature_dim as usize;
    let feats = ds.features.view(d).to_dense();
    let own = |v: usize| feats[v * d..(v + 1) * d].iter().map(|&x| x as f64).collect::<Vec<_>>();
    let with_neighbours = |v: usize| {
        let mut s = own(v);
        for &u in row(&ds, v) {
            s.iter_mut().zip(&feats[u as usize * d..]).for_each(|(a, &b)| *a += b as f64);
        }
        s
    };
    let mlp_like = nearest_mean_accuracy(&ds, &own);
    let gnn_like = nearest_mean_accuracy(&ds, &with_neighbours);
    assert!((0.3..0.7).contains(&mlp_like), "own features alone: {mlp_like} (should be a weak clue)");
    assert!(gnn_like > mlp_like + 0.25, "neighbourhood {gnn_like} vs own {mlp_like}");
}

#[test]
fn bad_specs_are_refused_naming_the_field() {
    let ok = preset("synthetic-small").unwrap();
    let cases: [(SyntheticSpec, &str); 6] = [
        (SyntheticSpec { nodes: 1, ..ok.clone() }, "nodes"),
        (SyntheticSpec { classes: 0, ..ok.clone() }, "classes"),
        (SyntheticSpec { classes: 30_000, ..ok.clone() }, "classes"),
        (SyntheticSpec { feature_dim: 0, ..ok.clone() }, "feature_dim"),
        (SyntheticSpec { nodes: 100, edges: 2_000, ..ok.clone() }, "edges"),
        (SyntheticSpec { split: [0.7, 0.2, 0.2], ..ok.clone() }, "split"),
    ];
    for (spec, field) in cases {
        let e = generate("x", &spec, 0).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("`x`"), "{spec:?}: {e}");
    }
    assert!(preset("synthetic-huge").is_none());
}

#[test]
fn registry_table_without_split_deserialises_with_the_default() {
    let spec: SyntheticSpec = toml::from_str("nodes = 500\nedges = 2000\nfeature_dim = 8\nclasses = 4\n").unwrap();
    assert_eq!(spec.split, leapgnn::datasets::synthetic::DEFAULT_SPLIT);
    let ds = generate("tiny", &spec, 1).unwrap();
    assert_eq!(ds.train.len(), 300);
}

#[test]
fn generated_archive_round_trips_through_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synthetic-small/dataset.lgnn");
    let ds = small(0);
    ds.write(&path).unwrap();
    let f = DatasetFile::open_verified(&path).unwrap();
    assert_eq!(f.meta_owned(), ds.meta);
    assert_eq!(f.graph().indices, &ds.indices[..]);
    assert_eq!(f.features().to_dense(), ds.features.view(ds.meta.feature_dim as usize).to_dense());
    assert_eq!(f.train(), &ds.train[..]);
}
