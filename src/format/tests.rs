use super::*;
use crate::graph::Csr;

fn tiny() -> Dataset {
    let csr = Csr::from_edges(4, &[(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)], true);
    Dataset {
        meta: DatasetMeta {
            name: "tiny".into(),
            source: "test".into(),
            num_nodes: 4,
            num_edges: csr.indices.len() as u64,
            feature_dim: 2,
            num_classes: 2,
            directed: false,
            generated_features: false,
            seed: 0,
        },
        indptr: csr.indptr,
        indices: csr.indices,
        features: FeatureTable::Dense((0..8).map(|i| i as f32).collect()),
        labels: vec![0, 1, -1, 1],
        train: vec![0, 1],
        val: vec![3],
        test: vec![],
    }
}

#[test]
fn dataset_roundtrip_is_zero_copy_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d/dataset.lgnn");
    let ds = tiny();
    ds.write(&p).unwrap();
    let f = DatasetFile::open_verified(&p).unwrap();
    assert_eq!(f.meta_owned(), ds.meta);
    assert_eq!(f.graph().in_neighbors(1), &[0, 2]);
    assert_eq!(f.feature_row(3), RowRef::Dense(&[6.0, 7.0]));
    assert_eq!(f.labels(), &[0, 1, -1, 1]);
    assert_eq!((f.train(), f.val(), f.test()), (&[0u32, 1][..], &[3u32][..], &[][..]));
    // No temp file is left beside the archive.
    assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
}

#[test]
fn invalid_dataset_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dataset.lgnn");
    let mut ds = tiny();
    ds.indices[0] = 9;
    let e = ds.write(&p).unwrap_err().to_string();
    assert!(e.contains("names node 9"), "{e}");
    assert!(!p.exists());
}

#[test]
fn header_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dataset.lgnn");
    tiny().write(&p).unwrap();
    let good = std::fs::read(&p).unwrap();

    let mut bad = good.clone();
    bad[0] = b'X';
    std::fs::write(&p, &bad).unwrap();
    assert!(matches!(DatasetFile::open(&p), Err(FormatError::BadMagic { .. })));

    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(&p, &newer).unwrap();
    let e = DatasetFile::open(&p).err().unwrap().to_string();
    assert!(e.contains("newer") && e.contains(&format!("{}", FORMAT_VERSION + 1)), "{e}");

    std::fs::write(&p, &good[..good.len() - 3]).unwrap();
    assert!(matches!(DatasetFile::open(&p), Err(FormatError::Truncated { .. })));

    let mut flipped = good.clone();
    let last = flipped.len() - 100;
    flipped[last] ^= 0x40;
    std::fs::write(&p, &flipped).unwrap();
    // Structure may or may not notice one flipped byte; the checksum always does.
    assert!(DatasetFile::open_verified(&p).is_err());

    // A partition manifest is not a dataset.
    std::fs::write(&p, &good).unwrap();
    assert!(matches!(Mapped::<PartManifest>::open(&p, Kind::PartManifest), Err(FormatError::WrongKind { .. })));
}
