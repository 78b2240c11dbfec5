//! Synthetic presets through `download` and `ensure_dataset` (what `train` calls).

mod import_support;

use import_support::*;
use leapgnn::DataDir;
use leapgnn::datasets::ensure_dataset;

/// The generator lives in another branch until merged; its stub says this.
const STUB: &str = "synthetic generator not implemented yet";

#[test]
fn download_synthetic_small_prints_valid_json() {
    let d = tempfile::tempdir().unwrap();
    let out = leapgnn(d.path(), &["download", "synthetic-small", "--json"]);
    if out.code != 0 && out.stderr.contains(STUB) {
        eprintln!("skipped: the synthetic generator is not merged into this branch yet");
        return;
    }
    let j = out.json();
    for key in ["name", "path", "nodes", "edges", "feature_dim", "classes", "train", "val", "test", "sha256", "seconds"]
    {
        assert!(j.get(key).is_some(), "`{key}` missing from {j}");
    }
    assert_eq!(
        (j["nodes"].as_u64(), j["feature_dim"].as_u64(), j["classes"].as_u64()),
        (Some(20_000), Some(64), Some(10))
    );
    assert_eq!(j["action"], "generated");
    let again = ok_json(d.path(), &["download", "synthetic-small", "--json"]);
    assert_eq!((again["action"].as_str(), &again["sha256"]), (Some("present"), &j["sha256"]));
}

#[test]
fn ensure_dataset_finds_imports_and_asks_for_downloads() {
    let d = tempfile::tempdir().unwrap();
    let data = DataDir::new(d.path());
    let e = ensure_dataset(&data, "cora-planetoid").unwrap_err();
    assert!(e.chain().any(leapgnn::error::is_bad_input));
    assert!(e.to_string().contains("leapgnn download cora-planetoid"), "{e}");
    let e = ensure_dataset(&data, "no-such-set").unwrap_err();
    assert!(e.to_string().contains("--list"), "{e}");

    ok_json(d.path(), &["download", "cora-planetoid", "--from", cora_text().to_str().unwrap(), "--json"]);
    let p = ensure_dataset(&data, "cora-planetoid").unwrap();
    assert_eq!(p, data.dataset_path("cora-planetoid"));
    // A path to an archive is taken as is.
    assert_eq!(ensure_dataset(&data, p.to_str().unwrap()).unwrap(), p);

    match ensure_dataset(&data, "synthetic-small") {
        Ok(p) => assert_eq!(leapgnn::format::DatasetFile::open_verified(&p).unwrap().num_nodes(), 20_000),
        Err(e) if e.to_string().contains(STUB) => eprintln!("skipped: generator not merged"),
        Err(e) => panic!("{e}"),
    }
}
