//! `train --strategy naive --dry-run`: the bytes naive per-layer model
//! migration would move per epoch, against `analyze-locality`'s count for the
//! same batches, and the flags it refuses.

mod dist_support;

use dist_support::{cora, fails, json};

#[test]
fn dry_run_bytes_equal_analyze_localitys_for_the_same_batches() {
    let tmp = cora();
    let d = tmp.path();
    // 140 train roots = one iteration of 4 x 35 per epoch.
    let r = json(
        d,
        &["train", "cora", "--workers", "4", "--strategy", "naive", "--dry-run", "--batch-size", "35", "--epochs", "2"],
    );
    assert_eq!(r["strategy"], "naive");
    assert_eq!(r["partition"], "metis-4");
    let epochs = r["epochs"].as_array().unwrap();
    assert_eq!(epochs.len(), 2);
    let field = |e: &serde_json::Value, k: &str| e[k].as_u64().unwrap();
    for e in epochs {
        assert_eq!(field(e, "iterations"), 1);
        let parts = ["bytes_params", "bytes_partial", "bytes_intermediate"].map(|k| field(e, k));
        assert_eq!(field(e, "bytes"), parts.iter().sum::<u64>());
        assert!(parts.iter().all(|&p| p > 0), "{e}");
        assert!(field(e, "bytes") > field(e, "bytes_features_model_centric"), "{e}");
    }
    assert_ne!(epochs[0]["bytes"], epochs[1]["bytes"], "each epoch has its own shuffle and samples");
    // Nothing was trained.
    assert!(!d.join("runs").exists() || std::fs::read_dir(d.join("runs")).unwrap().next().is_none());

    // analyze-locality costs epoch 0's first iteration per worker with the same sampler and partition.
    let a = json(
        d,
        &[
            "analyze-locality",
            "cora",
            "--parts",
            "4",
            "--method",
            "metis",
            "--layers",
            "2",
            "--sampling",
            "node",
            "--batch-size",
            "35",
            "--batches",
            "4",
        ],
    );
    let row = &a["rows"][0];
    assert_eq!(row["iterations"], 1);
    let per_worker = row["bytes_naive_migration"].as_f64().unwrap();
    assert_eq!(field(&epochs[0], "bytes") as f64, 4.0 * per_worker);
    let remote = row["remote_bytes_model_centric"].as_f64().unwrap();
    assert_eq!(field(&epochs[0], "bytes_features_model_centric") as f64, 4.0 * remote);
}

#[test]
fn naive_needs_dry_run_and_dry_run_needs_naive() {
    let tmp = cora();
    let d = tmp.path();
    let e = fails(d, &["train", "cora", "--workers", "4", "--strategy", "naive"], 2);
    assert!(e.contains("--strategy naive") && e.contains("add --dry-run"), "{e}");
    let e = fails(d, &["train", "cora", "--dry-run"], 2);
    assert!(e.contains("--dry-run") && e.contains("--strategy naive"), "{e}");
    let e = fails(d, &["train", "cora", "--strategy", "naive", "--dry-run", "--batch-size", "0"], 2);
    assert!(e.contains("--batch-size"), "{e}");
}
