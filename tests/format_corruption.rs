//! A real dataset archive (Cora), damaged every way a disk or a copy can
//! damage it: `info` exits 2 with one `error:` line naming the file, never
//! panics (101); the library's open + verify rejects every case.

mod import_support;

use import_support::*;
use leapgnn::format::{DatasetFile, FORMAT_VERSION};
use rand::Rng;
use std::path::{Path, PathBuf};

fn cora_archive(dir: &Path) -> (PathBuf, Vec<u8>) {
    let j =
        ok_json(&dir.join("data"), &["download", "cora-planetoid", "--from", cora_text().to_str().unwrap(), "--json"]);
    let path = PathBuf::from(j["path"].as_str().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// `leapgnn info FILE` on damaged bytes: exit 2, an `error:` line naming the file.
fn info_rejects(dir: &Path, bytes: &[u8], what: &str, needles: &[&str]) {
    let p = dir.join("bad.lgnn");
    std::fs::write(&p, bytes).unwrap();
    let out = leapgnn(dir, &["info", p.to_str().unwrap()]);
    assert_ne!(out.code, 101, "{what}: panicked: {}", out.stderr);
    let mut all = vec![p.to_str().unwrap()];
    all.extend_from_slice(needles);
    out.assert_error(2, &all);
    assert!(out.stderr.starts_with("error:"), "{what}: {}", out.stderr);
}

fn library_rejects(dir: &Path, bytes: &[u8]) -> String {
    let p = dir.join("lib.lgnn");
    std::fs::write(&p, bytes).unwrap();
    match DatasetFile::open(&p).and_then(|f| f.verify()) {
        Ok(()) => panic!("damaged archive accepted"),
        Err(e) => {
            let s = e.to_string();
            assert!(s.contains(p.to_str().unwrap()), "error does not name the file: {s}");
            s
        }
    }
}

#[test]
fn truncation_at_every_64th_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let (path, bytes) = cora_archive(d.path());
    let ok = leapgnn(d.path(), &["info", path.to_str().unwrap(), "--json"]);
    assert_eq!(ok.json()["nodes"], 2708, "the undamaged archive reads");
    for i in 0..64 {
        let cut = bytes.len() * i / 64;
        info_rejects(d.path(), &bytes[..cut], &format!("cut at {i}/64"), &["truncated"]);
    }
    // One byte short and one byte long.
    info_rejects(d.path(), &bytes[..bytes.len() - 1], "one short", &["truncated"]);
    let mut long = bytes.clone();
    long.push(0);
    info_rejects(d.path(), &long, "one long", &["trailing"]);
}

#[test]
fn random_byte_flips_are_all_caught() {
    let d = tempfile::tempdir().unwrap();
    let (_, bytes) = cora_archive(d.path());
    let mut rng = leapgnn::util::rng::stream(11, "corruption");
    let mut flips = Vec::new();
    // Every header byte, then random positions over the whole file.
    flips.extend(0..64);
    flips.extend((0..200).map(|_| rng.random_range(0..bytes.len())));
    for (k, &at) in flips.iter().enumerate() {
        let mut b = bytes.clone();
        b[at] ^= 1 << rng.random_range(0..8);
        library_rejects(d.path(), &b);
        // The binary on a sample of them (each run hashes 15 MB).
        if k % 16 == 0 {
            info_rejects(d.path(), &b, &format!("flip at byte {at}"), &[]);
        }
    }
}

#[test]
fn an_archive_of_the_previous_version_is_refused_with_the_conversion_command() {
    let d = tempfile::tempdir().unwrap();
    let (path, bytes) = cora_archive(d.path());
    let mut old = bytes.clone();
    old[8..12].copy_from_slice(&(FORMAT_VERSION - 1).to_le_bytes());
    std::fs::write(&path, &old).unwrap();
    let data = d.path().join("data");
    let out = leapgnn(&data, &["info", path.to_str().unwrap()]);
    let convert = "leapgnn download cora-planetoid --force --features auto";
    out.assert_error(2, &[path.to_str().unwrap(), &format!("format version {}", FORMAT_VERSION - 1), convert]);
    // The command it names converts the dataset again (here from the local source it came from).
    let j =
        ok_json(&data, &["download", "cora-planetoid", "--from", cora_text().to_str().unwrap(), "--force", "--json"]);
    assert_eq!(j["feature_storage"], "sparse");
    assert!(DatasetFile::open_verified(&path).is_ok());
}

#[test]
fn wrong_magic_and_newer_version_are_named() {
    let d = tempfile::tempdir().unwrap();
    let (_, bytes) = cora_archive(d.path());
    let mut b = bytes.clone();
    b[..8].copy_from_slice(b"PK\x03\x04abcd");
    info_rejects(d.path(), &b, "magic", &["not a leapgnn archive"]);
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let newer = format!("format version {}", FORMAT_VERSION + 1);
    info_rejects(d.path(), &b, "version", &[&newer, &format!("reads {FORMAT_VERSION}"), "upgrade"]);
    info_rejects(d.path(), b"", "empty", &["truncated"]);
    info_rejects(
        d.path(),
        b"hello, not an archive, but long enough to hold a header..........",
        "text",
        &["not a leapgnn archive"],
    );
}

/// Bytes flipped all over the archive, as bit rot would: `train` (one worker
/// and the driver of two) and `analyze-locality` refuse it as bad input
/// (exit 2), never panic and never train or measure on it. A flipped split id
/// once panicked `train`, which checked the splits before the checksum.
#[test]
fn train_and_analyze_locality_refuse_a_damaged_archive() {
    let d = tempfile::tempdir().unwrap();
    let (path, bytes) = cora_archive(d.path());
    let data = d.path().join("data");
    let mut rng = leapgnn::util::rng::stream(7, "train-corruption");
    for case in 0..24 {
        let mut bad = bytes.clone();
        // Past the header, anywhere; the last case hits the split ids the panic came from.
        let at = if case == 23 { bytes.len() - 64 } else { rng.random_range(64..bytes.len() - 4) };
        bad[at..at + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0x00]);
        std::fs::write(&path, &bad).unwrap();
        for args in [
            &["train", "cora-planetoid", "--epochs", "1", "--no-tui"][..],
            &["train", "cora-planetoid", "--epochs", "1", "--no-tui", "--workers", "2"],
            &["analyze-locality", "cora-planetoid", "--parts", "2", "--json"],
        ] {
            let out = leapgnn(&data, args);
            assert_ne!(out.code, 101, "flip at {at}, {args:?}: panicked: {}", out.stderr);
            assert_eq!(out.code, 2, "flip at {at}, {args:?}: {}", out.stderr);
            assert!(out.stderr.starts_with("error:"), "flip at {at}, {args:?}: {}", out.stderr);
        }
    }
}
