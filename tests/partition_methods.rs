//! The partitioners on real graphs (SNAP Slashdot, Cora).

#[path = "support/bounded.rs"]
mod bounded;
mod common;

use leapgnn::graph::CsrView;
use leapgnn::partition::quality::Quality;
use leapgnn::partition::{Balance, Method, Problem, assign, train_flags};

fn problem<'a>(g: CsrView<'a>, is_train: &'a [bool], parts: usize, seed: u64) -> Problem<'a> {
    Problem { graph: g, is_train, parts, balance: Balance::DEFAULT, seed }
}

fn quality(p: &Problem<'_>, part: &[u16]) -> Quality {
    Quality::measure(p.graph, part, p.is_train, p.parts)
}

fn balance(counts: &[u64]) -> f64 {
    leapgnn::format::PartManifest::balance(counts)
}

/// Every 10th node, so the train constraint has something to balance.
fn every_tenth(n: usize) -> Vec<bool> {
    (0..n).map(|v| v % 10 == 0).collect()
}

#[test]
fn slashdot_every_method_is_deterministic_and_graph_aware_ones_beat_random() {
    let g = common::slashdot();
    let is_train = every_tenth(g.view().num_nodes());
    let p = problem(g.view(), &is_train, 4, 1);
    let mut cut = std::collections::HashMap::new();
    for m in Method::ALL {
        let part = assign(m, &p).unwrap();
        assert_eq!(part.len(), g.view().num_nodes());
        assert!(part.iter().all(|&q| q < 4), "{m}: part id out of range");
        assert_eq!(part, assign(m, &p).unwrap(), "{m}: same seed, different map");
        let q = quality(&p, &part);
        println!(
            "{m}: cut {:.3} nodes {:.3} train {:.3}",
            q.edge_cut_fraction(),
            balance(&q.part_nodes),
            balance(&q.part_train)
        );
        cut.insert(m, q.edge_cut_fraction());
    }
    // A graph-blind 4-way map cuts ~3/4 of the non-loop entries (Slashdot stores
    // 8 % self loops, never cut); a graph-aware one must do clearly better.
    let loops = (0..g.view().num_nodes() as u32).filter(|&v| g.view().in_neighbors(v).contains(&v)).count();
    let blind = 0.75 * (1.0 - loops as f64 / g.view().num_edges() as f64);
    for m in [Method::Random, Method::Hash] {
        assert!((cut[&m] - blind).abs() < 0.01, "{m}: {} vs {blind}", cut[&m]);
    }
    assert!(cut[&Method::Metis] < 0.7 * cut[&Method::Random], "{cut:?}");
    assert!(cut[&Method::Ldg] < 0.85 * cut[&Method::Random], "{cut:?}");
}

#[test]
fn seeds_change_random_and_ldg_but_not_hash() {
    let (g, train) = common::cora();
    let is_train = train_flags(g.view().num_nodes(), &train);
    for m in [Method::Random, Method::Ldg, Method::Hash] {
        let a = assign(m, &problem(g.view(), &is_train, 4, 1)).unwrap();
        let b = assign(m, &problem(g.view(), &is_train, 4, 2)).unwrap();
        assert_eq!(a == b, m == Method::Hash, "{m}");
    }
}

#[test]
fn random_balances_nodes_and_train_exactly() {
    let (g, train) = common::cora();
    let is_train = train_flags(g.view().num_nodes(), &train);
    for k in [2, 3, 7] {
        let p = problem(g.view(), &is_train, k, 0);
        let q = quality(&p, &assign(Method::Random, &p).unwrap());
        for counts in [&q.part_nodes, &q.part_train] {
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "k={k}: {counts:?}");
        }
    }
}

#[test]
fn ldg_never_overfills_a_part() {
    let g = common::slashdot();
    let n = g.view().num_nodes();
    let is_train = every_tenth(n);
    for k in [3, 8] {
        let p = problem(g.view(), &is_train, k, 0);
        let q = quality(&p, &assign(Method::Ldg, &p).unwrap());
        let cap = (1.05 * n as f64 / k as f64).ceil() as u64;
        assert!(q.part_nodes.iter().all(|&c| c <= cap), "k={k}: {:?} > {cap}", q.part_nodes);
        assert!(balance(&q.part_train) <= 1.1, "k={k}: train {:?}", q.part_train);
    }
}

/// Train vertices packed in one region of the graph: a BFS ball around node 0.
fn train_ball(g: CsrView<'_>, size: usize) -> Vec<bool> {
    let mut is_train = vec![false; g.num_nodes()];
    let mut queue = std::collections::VecDeque::from([0u32]);
    let mut taken = 0;
    while let Some(v) = queue.pop_front() {
        if is_train[v as usize] || taken == size {
            continue;
        }
        is_train[v as usize] = true;
        taken += 1;
        queue.extend(g.in_neighbors(v));
    }
    is_train
}

#[test]
fn metis_train_constraint_spreads_a_concentrated_train_set() {
    let g = common::slashdot();
    let is_train = train_ball(g.view(), 8_000);
    let mut p = problem(g.view(), &is_train, 4, 0);
    p.balance = "nodes".parse().unwrap();
    let nodes_only = quality(&p, &assign(Method::Metis, &p).unwrap());
    p.balance = Balance::DEFAULT;
    let both = quality(&p, &assign(Method::Metis, &p).unwrap());
    println!(
        "nodes only: train {:?}; both: train {:?} nodes {:?}",
        nodes_only.part_train, both.part_train, both.part_nodes
    );
    assert!(balance(&both.part_train) <= 1.06, "{:?}", both.part_train);
    assert!(balance(&both.part_nodes) <= 1.06, "{:?}", both.part_nodes);
    assert!(balance(&nodes_only.part_train) > balance(&both.part_train) + 0.1, "{:?}", nodes_only.part_train);
}

#[test]
fn metis_gives_the_same_map_when_called_from_several_threads() {
    let (g, train) = common::cora();
    let is_train = train_flags(g.view().num_nodes(), &train);
    let p = problem(g.view(), &is_train, 4, 3);
    let reference = assign(Method::Metis, &p).unwrap();
    // 5 calls of well under a second each per thread; only calls that deadlock
    // take minutes (past which the binary aborts naming the threads).
    let limit = std::time::Duration::from_secs(300);
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..5).map(|_| assign(Method::Metis, &p).unwrap()).collect::<Vec<_>>()))
            .collect();
        for r in bounded::join_all_scoped_within(runs, limit, |i| format!("METIS caller {i}")) {
            assert!(r.iter().all(|m| *m == reference), "concurrent METIS calls changed the result");
        }
    });
}
