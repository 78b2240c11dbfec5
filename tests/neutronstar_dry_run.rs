//! `train --strategy neutronstar --dry-run`: trains model-centric with the
//! given flags and reports the LeapGNN paper's NeutronStar estimate with its
//! inputs; the pruned computation graph is checked against a brute-force
//! count of the same batches' full neighbourhoods.

mod dist_support;

use dist_support::{cora, json};
use leapgnn::format::{DatasetFile, ManifestFile};
use leapgnn::train::{Schedule, epoch_order};
use std::collections::BTreeSet;

#[test]
fn the_estimate_carries_its_inputs_and_prunes_exactly_the_remote_destinations() {
    let tmp = cora();
    let d = tmp.path();
    let (workers, batch, epochs) = (4usize, 35usize, 2u64);
    let r = json(
        d,
        &[
            "train",
            "cora",
            "--no-tui",
            "--strategy",
            "neutronstar",
            "--dry-run",
            "--workers",
            "4",
            "--fanout",
            "all,all",
            "--batch-size",
            "35",
            "--epochs",
            "2",
            "--hidden",
            "16",
        ],
    );
    assert_eq!(r["strategy"], "neutronstar");
    assert_eq!(r["estimate"], true);
    assert_eq!(r["partition"], "metis-4");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no {k} in {r}"));
    let (n, e, n1, e1) = (f("n"), f("e"), f("n_prime"), f("e_prime"));
    assert!(n1 < n && e1 < e, "{r}");
    assert!(f("c_fetch") > 0.0 && f("remote_rows") > 0.0, "{r}");
    assert!(f("t_comp") > 0.0 && f("t_comp") < f("t_total"), "{r}");
    // The paper's formula over the reported inputs.
    let want = f("t_total") - f("t_comp")
        + f("t_comp") * (n1 + e1) / (n + e)
        + f("c_fetch") * (n - n1) * f("hidden") / f("feature_dim");
    assert!((f("t_ns") - want).abs() <= 1e-9 * want.abs(), "{r}");
    assert!((f("estimate_per_epoch") - want / epochs as f64).abs() <= 1e-9 * want.abs());
    // The model-centric run it came from is a real run.
    assert!(d.join("runs").join(r["run"].as_str().unwrap()).join("summary.json").is_file());

    // Brute force: with every neighbour sampled, layer 1's destinations are the
    // roots, layer 0's are the roots and their in-neighbours, and the input
    // layer adds those vertices' in-neighbours.
    let ds = DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    let m = ManifestFile::open(d.join("cora/parts/metis-4")).unwrap();
    let (g, part) = (ds.graph(), m.node_part());
    let train: Vec<u32> = ds.train().to_vec();
    let grow = |s: &BTreeSet<u32>| -> BTreeSet<u32> {
        s.iter().flat_map(|&v| g.in_neighbors(v).iter().copied().chain([v])).collect()
    };
    let (mut nodes, mut edges, mut removed, mut removed_edges) = (0u64, 0u64, 0u64, 0u64);
    for epoch in 0..epochs {
        let order = epoch_order(&train, 0, epoch);
        let sched = Schedule::new(&order, workers, batch);
        for i in 0..sched.iterations() {
            for (w, roots) in sched.workers(i).into_iter().enumerate() {
                let d1: BTreeSet<u32> = roots.iter().copied().collect();
                let d0 = grow(&d1);
                nodes += grow(&d0).len() as u64;
                for dst in [&d0, &d1] {
                    for &v in dst.iter() {
                        let deg = g.in_neighbors(v).len() as u64;
                        nodes += 1;
                        edges += deg;
                        if part[v as usize] as usize != w {
                            removed += 1;
                            removed_edges += deg;
                        }
                    }
                }
            }
        }
    }
    assert_eq!((n as u64, e as u64), (nodes, edges), "the computation graphs of every batch");
    assert_eq!((n - n1) as u64, removed, "destinations owned by another worker");
    assert_eq!((e - e1) as u64, removed_edges, "their in-edges");
}
