//! On random partitions a micrograph is no more local than any vertex set:
//! locality_pct stays within 1.5 points of R_sub = 100/S, for both samplings
//! and depths, on the real Slashdot graph.

mod import_support;
mod locality_support;

use locality_support::*;

#[test]
fn random_partitions_give_r_sub_locality() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    slashdot(data);
    let report = analyze(data, "slashdot", &["--method", "random", "--batches", "2", "--micrographs", "2000"]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4 * 2 * 2);
    for r in rows {
        let (locality, r_sub) = (r["locality_pct"].as_f64().unwrap(), r["r_sub_pct"].as_f64().unwrap());
        assert_eq!(r_sub, 100.0 / r["parts"].as_f64().unwrap());
        assert!((locality - r_sub).abs() < 1.5, "locality {locality} vs R_sub {r_sub}: {r}");
        assert_eq!(r["micrographs"], 2000, "{r}");
        // Owner-routed roots help little without locality; model-centric misses (S-1)/S.
        let miss = r["miss_model_centric"].as_f64().unwrap();
        assert!((miss - (1.0 - r_sub / 100.0)).abs() < 0.02, "{r}");
    }
}
