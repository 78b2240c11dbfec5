//! Owner-scored sampled evaluation and the train/eval byte split, on Cora
//! with real worker processes: the evaluation's feature bytes equal a
//! brute-force count of the remote input rows of the owner-scored blocks
//! (whatever the training strategy), and train + eval = the totals.

mod dist_support;

use dist_support::{cora, json};
use leapgnn::DataDir;
use leapgnn::format::{DatasetFile, ManifestFile};
use leapgnn::sample::{EVAL_EPOCH_SALT, Fanouts, NeighborSampler, NodeMap};

const DIM: u64 = 1433;
/// Feature-service framing per fetch with two workers (one request, one
/// reply): two 16-byte frame headers and a 4-byte status; plus 4 bytes per
/// requested id (see `dist_train::feature_bytes_on_the_socket_match_the_remote_rows`).
const PER_FETCH: u64 = 16 + 16 + 4;
const SEED: &str = "5";
const EVAL_BATCH: usize = 256;

const CATEGORIES: [&str; 5] = ["features", "gradients", "migration", "activations", "control"];

fn count(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The feature bytes a sampled evaluation moves when worker `scorer(v, r)`
/// scores node v: remote input rows x (dim x 4 + 4) + framing per fetch.
fn brute_force_eval_bytes(d: &std::path::Path, owner: &[u16], split: impl Fn(&[u32], usize) -> Vec<u32>) -> u64 {
    let data = DataDir::new(d);
    let ds = DatasetFile::open(data.dataset_path("cora")).unwrap();
    let labels = ds.labels();
    let sampler = NeighborSampler::new(ds.graph(), "5,5".parse::<Fanouts>().unwrap(), SEED.parse().unwrap());
    let mut map = NodeMap::new(ds.num_nodes());
    let mut bytes = 0;
    for set in [ds.val(), ds.test()] {
        let ids: Vec<u32> = set.iter().copied().filter(|&v| labels[v as usize] >= 0).collect();
        for rank in 0..2 {
            for chunk in split(&ids, rank).chunks(EVAL_BATCH) {
                let blocks = sampler.sample(chunk, EVAL_EPOCH_SALT, &mut map);
                let remote =
                    blocks.input_nodes().iter().filter(|&&v| owner[v as usize] as usize != rank).count() as u64;
                if remote > 0 {
                    bytes += remote * (DIM * 4 + 4) + PER_FETCH;
                }
            }
        }
    }
    bytes
}

fn assert_split_adds_up(s: &serde_json::Value) {
    let b = &s["bytes"];
    for c in CATEGORIES {
        assert_eq!(count(&b["train"][c]) + count(&b["eval"][c]), count(&b[c]), "{c}: {b}");
    }
}

#[test]
fn owner_scored_evaluation_moves_exactly_the_remote_rows_of_owned_blocks() {
    let tmp = cora();
    let d = tmp.path();
    let common = [
        "train",
        "cora",
        "--no-tui",
        "--fanout",
        "5,5",
        "--batch-size",
        "64",
        "--epochs",
        "1",
        "--seed",
        SEED,
        "--cache-mb",
        "0",
        "--eval-batch-size",
        "256",
    ];
    let one = json(d, &common);
    assert_split_adds_up(&one);
    for c in CATEGORIES {
        assert_eq!(count(&one["bytes"]["eval"][c]), 0, "one worker sends nothing: {}", one["bytes"]);
    }

    let mut evals = Vec::new();
    for strategy in ["model-centric", "leapgnn"] {
        let s = json(d, &[&common[..], &["--workers", "2", "--strategy", strategy]].concat());
        assert_split_adds_up(&s);
        let eval = &s["bytes"]["eval"];
        assert_eq!((count(&eval["gradients"]), count(&eval["migration"])), (0, 0), "{strategy}: {eval}");
        assert!(count(&s["bytes"]["train"]["gradients"]) > 0);
        assert!(s["test_accuracy"].as_f64().unwrap() > 0.5, "{strategy}: {s}");
        evals.push(count(&eval["features"]));
    }
    let manifest = ManifestFile::open(DataDir::new(d).parts_dir("cora", "metis", 2)).unwrap();
    let owner = manifest.node_part();
    let owned = |ids: &[u32], r: usize| ids.iter().copied().filter(|&v| owner[v as usize] as usize == r).collect();
    let expected = brute_force_eval_bytes(d, owner, owned);
    assert_eq!(
        evals,
        vec![expected; 2],
        "evaluation feature bytes = the owner-scored blocks' remote rows, for every strategy"
    );
    // What splitting the ids by rank (the old, model-centric evaluation) would move.
    let by_rank = |ids: &[u32], r: usize| ids[r * ids.len() / 2..(r + 1) * ids.len() / 2].to_vec();
    let rank_split = brute_force_eval_bytes(d, owner, by_rank);
    assert!(expected * 2 < rank_split, "owner-scored {expected} B, rank-split {rank_split} B");
}
