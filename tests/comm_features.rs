//! The feature service on real data (Cora, 2,708 nodes x 1,433 features):
//! fetches of shuffled ids with duplicates return exactly the requested rows
//! in order, from in-memory tables and from partition files; the cache holds
//! the rows its policy picks; bad servers are named.

#[path = "support/bounded.rs"]
mod bounded;
mod comm_support;

use comm_support::{no_tweak, with_mesh};
use leapgnn::comm::{
    Category, CommError, FeatureClient, Owners, PartRows, RowSource, TableRows, cache, serve_features, tag,
};
use leapgnn::format::{FeatureStorage, FeatureTable, ManifestFile, PartFeatures, PartManifest};
use leapgnn::gather::Rows;
use leapgnn::graph::Csr;
use leapgnn::util::rng;
use rand::Rng;
use rand::seq::SliceRandom;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(10);
const DIR: &str = "../shared/datasets/planetoid/converted";

struct Cora {
    n: usize,
    d: usize,
    features: Vec<f32>,
    edges: Vec<(u32, u32)>,
}

impl Cora {
    fn row(&self, v: u32) -> &[f32] {
        &self.features[v as usize * self.d..(v as usize + 1) * self.d]
    }
}

fn cora() -> &'static Cora {
    static CORA: OnceLock<Cora> = OnceLock::new();
    CORA.get_or_init(|| {
        let text = std::fs::read_to_string(format!("{DIR}/cora.features.txt")).expect("Cora features");
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        let field = |k: &str| -> usize {
            header.split_whitespace().find_map(|w| w.trim_end_matches(';').strip_prefix(k)).unwrap().parse().unwrap()
        };
        let (n, d) = (field("nodes="), field("dim="));
        let mut features = vec![0f32; n * d];
        for (v, line) in lines.enumerate() {
            for c in line.split_whitespace() {
                features[v * d + c.parse::<usize>().unwrap()] = 1.0;
            }
        }
        let edges = std::fs::read_to_string(format!("{DIR}/cora.edges.txt"))
            .expect("Cora edges")
            .lines()
            .flat_map(|l| {
                let (a, b) = l.split_once(' ').unwrap();
                let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
                [(a, b), (b, a)]
            })
            .collect();
        Cora { n, d, features, edges }
    })
}

/// A seeded random owner for every node.
fn owners(n: usize, w: usize) -> Arc<[u16]> {
    let mut g = rng::stream(w as u64, "comm-test-owners");
    (0..n).map(|_| g.random_range(0..w as u16)).collect()
}

/// The rows of the nodes `rank` owns.
fn own_rows(c: &Cora, owners: &[u16], rank: usize) -> TableRows {
    let ids: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] as usize == rank).collect();
    let rows = ids.iter().flat_map(|&v| c.row(v).iter().copied()).collect();
    TableRows::new(c.n, c.d, &ids, rows).unwrap()
}

/// The rows of the nodes `rank` owns, stored as CSR.
fn own_sparse_rows(c: &Cora, owners: &[u16], rank: usize) -> TableRows {
    let ids: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] as usize == rank).collect();
    let rows = ids.iter().flat_map(|&v| c.row(v).iter().copied()).collect();
    TableRows::from_table(c.n, c.d, &ids, FeatureTable::from_dense(rows, c.d, FeatureStorage::Sparse)).unwrap()
}

/// Random ids with many repeats, in shuffled order, plus every node of `extra`.
fn request(rank: usize, len: usize, n: usize, extra: &[u32]) -> Vec<u32> {
    let mut g = rng::stream(rank as u64, "comm-test-request");
    let mut ids: Vec<u32> = (0..len).map(|_| g.random_range(0..n as u32)).collect();
    ids.extend_from_slice(extra);
    ids.extend_from_within(..len / 10);
    ids.shuffle(&mut g);
    ids
}

fn assert_rows(c: &Cora, ids: &[u32], out: &[f32], who: &str) {
    for (i, &v) in ids.iter().enumerate() {
        assert!(out[i * c.d..(i + 1) * c.d] == *c.row(v), "{who}: row {i} should be node {v}");
    }
}

/// `picked` is sorted, holds only rows remote to `rank` that score at least 1,
/// and no remote row left out scores higher than a picked one.
fn assert_top_remote(picked: &[u32], score: &[usize], owners: &[u16], rank: usize) {
    assert!(picked.windows(2).all(|p| p[0] < p[1]), "sorted, distinct");
    assert!(picked.iter().all(|&v| owners[v as usize] as usize != rank), "only remote rows are cached");
    let lowest = picked.iter().map(|&v| score[v as usize]).min().unwrap();
    assert!(lowest >= 1);
    let left_out =
        (0..owners.len()).filter(|&v| owners[v] as usize != rank && picked.binary_search(&(v as u32)).is_err());
    assert!(left_out.map(|v| score[v]).max().unwrap_or(0) <= lowest);
}

#[test]
fn fetched_rows_come_back_in_the_requested_order() {
    let c = cora();
    let w = 3;
    let owners = owners(c.n, w);
    let out = with_mesh(w, no_tweak, |m| {
        let local: Arc<dyn RowSource> = Arc::new(own_rows(c, &owners, m.rank()));
        serve_features(m, local.clone());
        let client = FeatureClient::new(Owners::Table(owners.clone()), local, LONG);
        let ids = request(m.rank(), 5000, c.n, &[0, c.n as u32 - 1]);
        let mut rows = vec![f32::NAN; ids.len() * c.d];
        let stats = client.fetch(m, &ids, &mut rows).unwrap();
        assert_rows(c, &ids, &rows, &format!("worker {}", m.rank()));
        // Nothing requested is a valid answer too.
        assert_eq!(client.fetch(m, &[], &mut []).unwrap().requested, 0);
        m.barrier(LONG).unwrap();
        (ids, stats, m.bytes())
    });
    let mut wire = 0u64;
    for (r, (ids, stats, _)) in out.iter().enumerate() {
        let local = ids.iter().filter(|&&v| owners[v as usize] as usize == r).count() as u64;
        assert_eq!((stats.requested, stats.local, stats.cache_hit), (ids.len() as u64, local, 0));
        assert_eq!(stats.remote, stats.requested - local);
        // One request (ids) and one reply (status + rows) per remote owner.
        for o in (0..w).filter(|&o| o != r) {
            let rows = ids.iter().filter(|&&v| owners[v as usize] as usize == o).count() as u64;
            wire += 2 * 16 + 4 * rows + 4 + 4 * rows * c.d as u64;
        }
    }
    assert_eq!(out.iter().map(|o| o.2.sent.features).sum::<u64>(), wire);
    assert_eq!(out.iter().map(|o| o.2.received.features).sum::<u64>(), wire);
}

#[test]
fn sparse_rows_cross_the_wire_as_csr_and_only_their_non_zeros_are_counted() {
    let c = cora();
    let w = 3;
    let owners = owners(c.n, w);
    let nnz = |v: u32| c.row(v).iter().filter(|&&x| x != 0.0).count() as u64;
    let out = with_mesh(w, no_tweak, |m| {
        let local: Arc<dyn RowSource> = Arc::new(own_sparse_rows(c, &owners, m.rank()));
        assert!(local.is_sparse());
        serve_features(m, local.clone());
        let client = FeatureClient::new(Owners::Table(owners.clone()), local, LONG);
        let ids = request(m.rank() + 40, 3000, c.n, &[0, c.n as u32 - 1]);
        let (rows, stats) = client.fetch_rows(m, &ids).unwrap();
        let Rows::Sparse(csr) = rows else { panic!("a sparse worker fetched dense rows") };
        assert_rows(c, &ids, &csr.to_dense(), &format!("sparse worker {}", m.rank()));
        // The dense interface densifies the same answer.
        let mut dense = vec![f32::NAN; ids.len() * c.d];
        client.fetch(m, &ids, &mut dense).unwrap();
        assert_rows(c, &ids, &dense, &format!("dense fetch from sparse worker {}", m.rank()));
        m.barrier(LONG).unwrap();
        (ids, stats, m.bytes())
    });
    let (mut wire, mut dense_wire) = (0u64, 0u64);
    for (r, (ids, stats, _)) in out.iter().enumerate() {
        let local = ids.iter().filter(|&&v| owners[v as usize] as usize == r).count() as u64;
        assert_eq!((stats.requested, stats.local, stats.remote), (ids.len() as u64, local, ids.len() as u64 - local));
        // Per remote owner and fetch: a request (ids) and a reply (status, a
        // count per row, then the columns and values of the non-zeros); two fetches.
        for o in (0..w).filter(|&o| o != r) {
            let mine: Vec<u32> = ids.iter().copied().filter(|&v| owners[v as usize] as usize == o).collect();
            let rows = mine.len() as u64;
            wire += 2 * (2 * 16 + 4 * rows + 4 + 4 * rows + 8 * mine.iter().map(|&v| nnz(v)).sum::<u64>());
            dense_wire += 2 * (2 * 16 + 4 * rows + 4 + 4 * rows * c.d as u64);
        }
    }
    assert_eq!(out.iter().map(|o| o.2.sent.features).sum::<u64>(), wire);
    assert_eq!(out.iter().map(|o| o.2.received.features).sum::<u64>(), wire);
    assert!(wire * 20 < dense_wire, "Cora's sparse rows take {wire} bytes, dense {dense_wire}");
}

#[test]
fn a_cache_of_sparse_rows_holds_csr_and_serves_hits() {
    let c = cora();
    let w = 2;
    let owners = owners(c.n, w);
    with_mesh(w, no_tweak, |m| {
        let r = m.rank();
        let local: Arc<dyn RowSource> = Arc::new(own_sparse_rows(c, &owners, r));
        serve_features(m, local.clone());
        let mut client = FeatureClient::new(Owners::Table(owners.clone()), local, LONG);
        let picked: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] as usize != r).take(300).collect();
        assert_eq!(client.fill_cache(m, &picked).unwrap().remote, 300);
        let cache = client.cache().unwrap();
        assert!(cache.is_sparse() && cache.len() == 300);
        assert!(cache.bytes() < 300 * c.d * 4 / 10, "{} bytes for 300 cached CSR rows", cache.bytes() - c.n * 4);
        let ids = request(r + 50, 2000, c.n, &picked);
        let (rows, stats) = client.fetch_rows(m, &ids).unwrap();
        assert_rows(c, &ids, &rows.into_dense(), &format!("sparse worker {r} with a cache"));
        let hits = ids.iter().filter(|v| picked.contains(v)).count() as u64;
        assert_eq!(stats.cache_hit, hits);
        m.barrier(LONG).unwrap();
    });
}

#[test]
fn partition_files_serve_their_rows_zero_copy() {
    let c = cora();
    let w = 2;
    let owners = owners(c.n, w);
    let dir = tempfile::tempdir().unwrap();
    let mut local_index = vec![0u32; c.n];
    let mut part_nodes = vec![0u64; w];
    for (p, count) in part_nodes.iter_mut().enumerate() {
        let owned: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] as usize == p).collect();
        for (i, &v) in owned.iter().enumerate() {
            local_index[v as usize] = i as u32;
        }
        *count = owned.len() as u64;
        let features = FeatureTable::Dense(owned.iter().flat_map(|&v| c.row(v).iter().copied()).collect());
        let part = PartFeatures { part: p as u32, parts: w as u32, feature_dim: c.d as u32, owned, features };
        part.write(dir.path()).unwrap();
    }
    PartManifest {
        dataset: "cora".into(),
        dataset_checksum: 0,
        method: "random".into(),
        parts: w as u32,
        seed: 0,
        constraints: "nodes".into(),
        node_part: owners.to_vec(),
        local_index,
        part_nodes,
        part_train: vec![0; w],
        edge_cut: 0,
        edges: c.edges.len() as u64,
    }
    .write(dir.path())
    .unwrap();
    let manifest = Arc::new(ManifestFile::open(dir.path()).unwrap());
    let beyond = PartRows::open(dir.path(), 2, manifest.clone()).err().unwrap();
    assert!(beyond.to_string().contains("part 2 of a 2-part manifest"), "{beyond}");

    with_mesh(w, no_tweak, |m| {
        let part = PartRows::open(dir.path(), m.rank() as u32, manifest.clone()).unwrap();
        let foreign = (0..c.n as u32).find(|&v| owners[v as usize] as usize != m.rank()).unwrap();
        assert!(!part.is_sparse());
        assert!(part.row(foreign).is_none() && part.row(c.n as u32).is_none());
        let local: Arc<dyn RowSource> = Arc::new(part);
        serve_features(m, local.clone());
        let client = FeatureClient::new(Owners::Manifest(manifest.clone()), local, LONG);
        let ids = request(m.rank() + 10, 3000, c.n, &[]);
        let mut rows = vec![0f32; ids.len() * c.d];
        client.fetch(m, &ids, &mut rows).unwrap();
        assert_rows(c, &ids, &rows, &format!("worker {}", m.rank()));
        m.barrier(LONG).unwrap();
    });
}

#[test]
fn the_degree_cache_holds_the_busiest_remote_rows_and_serves_hits() {
    let c = cora();
    let w = 3;
    let owners = owners(c.n, w);
    let graph = Csr::from_edges(c.n, &c.edges, true);
    let mut degree = vec![0usize; c.n];
    for &(u, _) in &c.edges {
        degree[u as usize] += 1;
    }
    let budget = cache::rows_within(150 * c.d as u64 * 4 + 100, c.d as f64 * 4.0);
    assert_eq!(budget, 150);
    with_mesh(w, no_tweak, |m| {
        let r = m.rank();
        let picked = cache::by_degree(graph.view(), &owners, r, budget);
        assert_eq!(picked.len(), budget);
        assert_top_remote(&picked, &degree, &owners, r);

        let local: Arc<dyn RowSource> = Arc::new(own_rows(c, &owners, r));
        serve_features(m, local.clone());
        let mut client = FeatureClient::new(Owners::Table(owners.clone()), local, LONG);
        let filled = client.fill_cache(m, &picked).unwrap();
        assert_eq!(filled.remote, budget as u64);
        assert_eq!(client.cache().unwrap().len(), budget);

        let ids = request(r + 20, 4000, c.n, &picked);
        let mut rows = vec![0f32; ids.len() * c.d];
        let stats = client.fetch(m, &ids, &mut rows).unwrap();
        assert_rows(c, &ids, &rows, &format!("worker {r} with a cache"));
        let hits = ids.iter().filter(|v| picked.binary_search(v).is_ok()).count() as u64;
        let local = ids.iter().filter(|&&v| owners[v as usize] as usize == r).count() as u64;
        assert_eq!((stats.cache_hit, stats.local), (hits, local));
        assert_eq!(stats.remote, ids.len() as u64 - hits - local);
        m.barrier(LONG).unwrap();
    });
}

#[test]
fn the_presample_policy_picks_the_most_drawn_remote_rows() {
    let c = cora();
    let owners = owners(c.n, 2);
    let graph = Csr::from_edges(c.n, &c.edges, true);
    // The in-neighbours of 300 random roots, as one sampled epoch would touch them.
    let mut g = rng::stream(3, "comm-test-presample");
    let accesses: Vec<u32> =
        (0..300).flat_map(|_| graph.view().in_neighbors(g.random_range(0..c.n as u32)).to_vec()).collect();
    let picked = cache::by_frequency(&accesses, &owners, 0, 40);
    let mut count = vec![0usize; c.n];
    accesses.iter().for_each(|&v| count[v as usize] += 1);
    assert_eq!(picked.len(), 40);
    assert_top_remote(&picked, &count, &owners, 0);
    // Fewer distinct remote rows than the budget: all of them, nothing else.
    let all = cache::by_frequency(&accesses, &owners, 0, usize::MAX);
    let mut distinct: Vec<u32> = accesses.iter().copied().filter(|&v| owners[v as usize] == 1).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(all, distinct);
}

#[test]
fn a_server_that_lacks_rows_or_has_other_dims_is_named() {
    let c = cora();
    let owners = owners(c.n, 2);
    let out = with_mesh(2, no_tweak, |m| {
        let mine = own_rows(c, &owners, m.rank());
        let victim = (0..c.n as u32).find(|&v| owners[v as usize] == 1).unwrap();
        let result = if m.rank() == 1 {
            // First serve a table that lacks `victim`, then one with one feature too many.
            let ids: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] == 1 && v != victim).collect();
            let rows = ids.iter().flat_map(|&v| c.row(v).iter().copied()).collect();
            serve_features(m, Arc::new(TableRows::new(c.n, c.d, &ids, rows).unwrap()));
            m.barrier(LONG).unwrap();
            let ids: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] == 1).collect();
            serve_features(m, Arc::new(TableRows::new(c.n, c.d + 1, &ids, vec![0.0; ids.len() * (c.d + 1)]).unwrap()));
            m.barrier(LONG).unwrap();
            None
        } else {
            let client = FeatureClient::new(Owners::Table(owners.clone()), Arc::new(mine), LONG);
            let mut row = vec![0f32; c.d];
            let lacking = client.fetch(m, &[victim], &mut row).unwrap_err();
            m.barrier(LONG).unwrap();
            m.barrier(LONG).unwrap();
            let wider = client.fetch(m, &[victim], &mut row).unwrap_err();
            let misuse = client.fetch(m, &[victim, 1], &mut row).unwrap_err();
            let beyond = client.fetch(m, &[c.n as u32], &mut row).unwrap_err();
            Some((victim, m.peer(1), [lacking, wider, misuse, beyond]))
        };
        m.barrier(LONG).unwrap();
        result
    });
    let (victim, server, [lacking, wider, misuse, beyond]) = out.into_iter().flatten().next().unwrap();
    let named = format!("worker 1 ({})", server.addr);
    assert!(matches!(lacking, CommError::Protocol { .. }), "{lacking:?}");
    assert!(
        lacking.to_string().contains(&named) && lacking.to_string().contains(&format!("does not hold node {victim}")),
        "{lacking}"
    );
    assert!(wider.to_string().contains(&named) && wider.to_string().contains("same dataset"), "{wider}");
    assert!(matches!(misuse, CommError::Usage(_)), "{misuse:?}");
    assert!(beyond.to_string().contains(&format!("the graph has {} nodes", c.n)), "{beyond}");
}

#[test]
fn requests_that_arrive_before_the_server_starts_are_answered() {
    let c = cora();
    let owners = owners(c.n, 2);
    let out = with_mesh(2, no_tweak, |m| {
        let ids: Vec<u32> = (0..c.n as u32).filter(|&v| owners[v as usize] == 1).take(5).collect();
        if m.rank() == 0 {
            let request: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
            m.send(1, tag::make(tag::FEATURE_REQUEST, 77), Category::Features, request).unwrap();
            m.send(1, 1, Category::Control, b"request sent".to_vec()).unwrap();
            let reply = m.recv(1, tag::make(tag::FEATURE_REPLY, 77), LONG).unwrap();
            m.barrier(LONG).unwrap();
            Some((ids, reply))
        } else {
            // Same peer, same connection: the request was filed before this message.
            assert_eq!(m.recv(0, 1, LONG).unwrap(), b"request sent");
            serve_features(m, Arc::new(own_rows(c, &owners, 1)));
            m.barrier(LONG).unwrap();
            None
        }
    });
    let (ids, reply) = out.into_iter().flatten().next().unwrap();
    assert_eq!(reply[..4], 0u32.to_le_bytes(), "status OK");
    let rows: Vec<f32> = reply[4..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_rows(c, &ids, &rows, "early request");
}
