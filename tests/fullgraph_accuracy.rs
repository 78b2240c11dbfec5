//! Full-batch GCN reaches the published Planetoid accuracies (Kipf & Welling's
//! setting, as PyG's example: hidden 16, 200 epochs, dropout 0.5, lr 0.01,
//! weight decay 5e-4, row-normalised features, public split, test accuracy at
//! the best validation epoch): Cora >= 0.81, CiteSeer >= 0.70 as the mean over
//! five seeds (PyG: 0.819 +- 0.009 and 0.707 +- 0.009; majority class: 0.319
//! and 0.211).

mod dist_support;

use dist_support::json;
use std::path::Path;

fn mean_accuracy(dataset: &str, seeds: u64) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/planetoid/converted").join(dataset);
    json(d, &["download", dataset, "--from", from.to_str().unwrap(), "--format", "text"]);
    let accs: Vec<f64> = (0..seeds)
        .map(|seed| {
            let s = json(
                d,
                &[
                    "train",
                    dataset,
                    "--no-tui",
                    "--full-batch",
                    "--model",
                    "gcn",
                    "--hidden",
                    "16",
                    "--epochs",
                    "200",
                    "--dropout",
                    "0.5",
                    "--lr",
                    "0.01",
                    "--weight-decay",
                    "5e-4",
                    "--normalize",
                    "l1",
                    "--seed",
                    &seed.to_string(),
                ],
            );
            assert_eq!(s["iterations"], 200, "one step per epoch");
            s["test_accuracy"].as_f64().unwrap()
        })
        .collect();
    let mean = accs.iter().sum::<f64>() / accs.len() as f64;
    eprintln!("{dataset}: test accuracy {accs:?}, mean {mean:.4}");
    mean
}

#[test]
fn full_batch_gcn_reaches_the_published_cora_accuracy() {
    let m = mean_accuracy("cora", 5);
    assert!(m >= 0.81, "Cora mean test accuracy {m}");
}

#[test]
fn full_batch_gcn_reaches_the_published_citeseer_accuracy() {
    let m = mean_accuracy("citeseer", 5);
    assert!(m >= 0.70, "CiteSeer mean test accuracy {m}");
}
