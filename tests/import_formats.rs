//! Every converter on real data: the counts the issue demands, and the
//! structure (symmetry, no self loops, split sizes) checked on the archive.

mod import_support;

use import_support::*;
use leapgnn::format::DatasetFile;
use std::path::Path;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn counts(j: &serde_json::Value) -> [u64; 7] {
    ["nodes", "edges", "feature_dim", "classes", "train", "val", "test"].map(|k| j[k].as_u64().unwrap())
}

fn assert_symmetric_without_self_loops(f: &DatasetFile) {
    let g = f.graph();
    for v in 0..f.num_nodes() as u32 {
        for &u in g.in_neighbors(v) {
            assert_ne!(u, v, "self loop at {v}");
            assert!(g.in_neighbors(u).binary_search(&v).is_ok(), "{u}->{v} without {v}->{u}");
        }
    }
}

#[test]
fn text_cora_has_the_planetoid_counts_and_split() {
    let d = tempfile::tempdir().unwrap();
    let j = ok_json(d.path(), &["download", "cora-planetoid", "--from", p(&cora_text()), "--json"]);
    assert_eq!(counts(&j), [2708, 10556, 1433, 7, 140, 500, 1000]);
    assert_eq!(j["action"], "imported");
    let f = DatasetFile::open_verified(j["path"].as_str().unwrap()).unwrap();
    assert_symmetric_without_self_loops(&f);
    assert_eq!(f.train(), (0..140).collect::<Vec<u32>>(), "public split: the first 140 nodes");
    // Row 0 of the features file lists the columns that are 1.
    let row0: Vec<usize> =
        f.feature_row(0).to_dense(1433).iter().enumerate().filter(|(_, x)| **x == 1.0).map(|(i, _)| i).collect();
    assert_eq!(row0, [19, 81, 146, 315, 774, 877, 1194, 1247, 1274]);
    assert_eq!(f.features().to_dense().iter().filter(|x| **x != 0.0).count(), 49_216);
    // 1.3 % of the values are non-zero: `--features auto` stores exactly those.
    assert_eq!((j["feature_storage"].as_str(), j["feature_values"].as_u64()), (Some("sparse"), Some(49_216)));
    let dense = ok_json(
        d.path(),
        &["download", "cora-dense", "--from", p(&cora_text()), "--format", "text", "--features", "dense", "--json"],
    );
    assert_eq!(
        (dense["feature_storage"].as_str(), dense["feature_values"].as_u64()),
        (Some("dense"), Some(2708 * 1433))
    );
    let g = DatasetFile::open_verified(dense["path"].as_str().unwrap()).unwrap();
    assert_eq!(g.features().to_dense(), f.features().to_dense());
    // A second run finds the valid archive and leaves it alone.
    let again = ok_json(d.path(), &["download", "cora-planetoid", "--from", p(&cora_text()), "--json"]);
    assert_eq!((again["action"].as_str(), &again["sha256"]), (Some("present"), &j["sha256"]));
}

#[test]
fn text_citeseer_keeps_unlabelled_featureless_nodes() {
    let d = tempfile::tempdir().unwrap();
    let prefix = shared("planetoid/converted/citeseer");
    let j = ok_json(d.path(), &["download", "citeseer-planetoid", "--from", p(&prefix), "--json"]);
    assert_eq!(counts(&j), [3327, 9104, 3703, 6, 120, 500, 1000]);
    let f = DatasetFile::open_verified(j["path"].as_str().unwrap()).unwrap();
    let unlabelled: Vec<u32> = (0..3327).filter(|&v| f.labels()[v as usize] == -1).collect();
    assert_eq!(unlabelled.len(), 15);
    assert!(unlabelled.iter().all(|&v| f.feature_row(v).to_dense(3703).iter().all(|&x| x == 0.0)));
}

#[test]
fn musae_facebook_has_4_classes_and_a_seeded_60_20_20_split() {
    let d = tempfile::tempdir().unwrap();
    let j = ok_json(d.path(), &["download", "facebook", "--from", p(&shared("musae-facebook")), "--json"]);
    // 170,823 undirected pairs after dropping 179 self loops, stored both ways.
    assert_eq!(counts(&j), [22_470, 341_646, 4_714, 4, 13_482, 4_494, 4_494]);
    let f = DatasetFile::open_verified(j["path"].as_str().unwrap()).unwrap();
    assert_symmetric_without_self_loops(&f);
    let mut all: Vec<u32> = [f.train(), f.val(), f.test()].concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 22_470, "the split covers every node once");
    // Sorted page types: company, government, politician, tvshow (README counts).
    let per_class: Vec<usize> = (0..4).map(|c| f.labels().iter().filter(|&&l| l == c).count()).collect();
    assert_eq!(per_class, [6_495, 6_880, 5_768, 3_327]);
}

#[test]
fn edgelist_slashdot_symmetrised_without_self_loops() {
    let d = tempfile::tempdir().unwrap();
    let src = shared("snap/soc-Slashdot0902.txt.gz");
    let j = ok_json(d.path(), &["download", "slashdot", "--from", p(&src), "--json"]);
    assert_eq!(j["nodes"], 82_168);
    assert_eq!(j["edges"], 1_008_460);
    assert_eq!((j["feature_dim"].as_u64(), j["classes"].as_u64()), (Some(128), Some(60)));
    assert_eq!(j["generated_features"], true);
    let f = DatasetFile::open_verified(j["path"].as_str().unwrap()).unwrap();
    assert_symmetric_without_self_loops(&f);
    assert_eq!(j["feature_storage"], "dense", "generated uniform features are dense");
    assert!(f.features().to_dense().iter().all(|x| (0.0..1.0).contains(x)));
    // The same file as a plain directed import keeps 948,464 - 78,303 self loops.
    let j = ok_json(d.path(), &["download", "sd-directed", "--from", p(&src), "--format", "edgelist", "--json"]);
    assert_eq!(
        (j["edges"].as_u64(), j["directed"].as_bool(), j["classes"].as_u64()),
        (Some(870_161), Some(true), Some(0))
    );
}

#[test]
fn npz_cora_gets_a_seeded_planetoid_style_split() {
    let d = tempfile::tempdir().unwrap();
    let src = shared("gnn-benchmark/cora.npz");
    let j = ok_json(d.path(), &["download", "cora", "--from", p(&src), "--json"]);
    assert_eq!(counts(&j), [2708, 10556, 1433, 7, 140, 500, 1000]);
    let f = DatasetFile::open_verified(j["path"].as_str().unwrap()).unwrap();
    for c in 0..7 {
        assert_eq!(f.train().iter().filter(|&&v| f.labels()[v as usize] == c).count(), 20);
    }
    let split = |f: &DatasetFile| [f.train().to_vec(), f.val().to_vec(), f.test().to_vec()];
    let s0 = split(&f);
    let j1 = ok_json(d.path(), &["download", "cora", "--from", p(&src), "--json", "--force", "--seed", "1"]);
    let s1 = split(&DatasetFile::open_verified(j1["path"].as_str().unwrap()).unwrap());
    assert_ne!(s0, s1, "another seed, another split");
    let j0 = ok_json(d.path(), &["download", "cora", "--from", p(&src), "--json", "--force", "--seed", "0"]);
    assert_eq!(j0["sha256"], j["sha256"], "same seed, same bytes");
    // CiteSeer's npz has 124 self loops: dropped unless asked for.
    let cs = shared("gnn-benchmark/citeseer.npz");
    let j = ok_json(d.path(), &["download", "citeseer", "--from", p(&cs), "--json"]);
    assert_eq!((j["nodes"].as_u64(), j["edges"].as_u64()), (Some(3312), Some(9072)));
    let j = ok_json(d.path(), &["download", "citeseer", "--from", p(&cs), "--json", "--force", "--self-loops"]);
    assert_eq!(j["edges"], 9072 + 124);
}

#[test]
fn ogb_zip_and_directory_match_the_text_import() {
    let d = tempfile::tempdir().unwrap();
    let files = ogb_files_from_text(&cora_text(), "cora");
    let zip = d.path().join("cora-ogb.zip");
    write_zip(&zip, &files);
    let tree = d.path().join("extracted");
    write_tree(&tree, &files);
    let text = ok_json(d.path(), &["download", "t", "--from", p(&cora_text()), "--format", "text", "--json"]);
    let from_zip = ok_json(d.path(), &["download", "z", "--from", p(&zip), "--format", "ogb", "--json"]);
    let from_dir = ok_json(d.path(), &["download", "x", "--from", p(&tree), "--format", "ogb", "--json"]);
    assert_eq!(counts(&from_zip), [2708, 10556, 1433, 7, 140, 500, 1000]);
    let want = content(Path::new(text["path"].as_str().unwrap()));
    assert!(content(Path::new(from_zip["path"].as_str().unwrap())) == want, "zip import differs from text import");
    assert!(content(Path::new(from_dir["path"].as_str().unwrap())) == want, "dir import differs from text import");
}

#[test]
fn split_and_feature_dim_flags_override_the_format() {
    let d = tempfile::tempdir().unwrap();
    let cora = cora_text();
    let args = ["download", "c", "--from", p(&cora), "--format", "text", "--split", "50,25,25", "--json"];
    let j = ok_json(d.path(), &args);
    assert_eq!([j["train"].as_u64(), j["val"].as_u64(), j["test"].as_u64()], [Some(1354), Some(677), Some(677)]);
    let e =
        leapgnn(d.path(), &["download", "c2", "--from", p(&cora_text()), "--format", "text", "--feature-dim", "16"]);
    e.assert_error(2, &["--feature-dim", "1433"]);
    let sd = shared("snap/facebook_combined.txt.gz");
    let j = ok_json(
        d.path(),
        &["download", "ego", "--from", p(&sd), "--format", "edgelist", "--symmetrize", "--feature-dim", "8", "--json"],
    );
    assert_eq!(
        (j["nodes"].as_u64(), j["edges"].as_u64(), j["feature_dim"].as_u64()),
        (Some(4039), Some(176_468), Some(8))
    );
}

/// A process holding the lock on `path` the way an import's writer holds its
/// temporary file's (flock(2)) until it is killed.
struct LockHolder(Reaped);

impl LockHolder {
    fn start(path: &Path) -> LockHolder {
        use std::io::BufRead;
        let mut h = LockHolder(Reaped::new(
            std::process::Command::new("sh")
                .args(["-c", "exec 9>>\"$1\" && flock 9 && echo held && exec sleep 600", "sh", p(path)])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        ));
        let mut line = String::new();
        // flock(1) waits for a lock another process holds: bounded, its end ends the read.
        let watch = bounded::kill_after(h.0.child().id(), bounded::QUICK_LIMIT, "flock(1)'s `held`");
        std::io::BufReader::new(h.0.child().stdout.take().unwrap()).read_line(&mut line).unwrap();
        drop(watch);
        assert_eq!(line, "held\n", "flock(1) could not lock {}", path.display());
        h
    }

    fn kill(&mut self) {
        self.0.kill();
    }
}

#[test]
fn an_import_removes_the_temp_file_a_killed_import_left_and_not_a_live_ones() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("cora-planetoid");
    std::fs::create_dir_all(&dir).unwrap();
    // What an import killed with SIGKILL mid-write leaves: its temp file, unlocked.
    let killed = dir.join(".dataset.lgnn.tmp.4000000");
    LockHolder::start(&killed).kill();
    let live = dir.join(".dataset.lgnn.tmp.4000001");
    let _writer = LockHolder::start(&live);
    for f in [&killed, &live] {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options().write(true).open(f).unwrap().set_modified(old).unwrap();
    }
    let j = ok_json(d.path(), &["download", "cora-planetoid", "--from", p(&cora_text()), "--json"]);
    assert_eq!(j["action"], "imported");
    assert!(!killed.exists(), "the killed import's temp file is still there");
    assert!(live.exists(), "a live writer's temp file was removed");
}

/// `text` as a Windows tool saves it: a UTF-8 byte-order mark first and CRLF line ends.
fn windows_text(text: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(text.to_vec()).unwrap();
    let crlf = text.lines().map(|l| format!("{l}\r\n")).collect::<String>();
    [b"\xef\xbb\xbf".as_slice(), crlf.as_bytes()].concat()
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out).unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, bytes).unwrap();
    e.finish().unwrap()
}

/// Sources saved by Windows tools (a byte-order mark before the first line,
/// CRLF line ends) import to the same archive as the originals, in every text
/// format: the mark made the first id `\u{feff}0`, "not a non-negative integer".
#[test]
fn byte_order_marks_and_crlf_import_like_the_originals() {
    let d = tempfile::tempdir().unwrap();
    let import = |name: &str, from: &Path, format: &str| {
        let j = ok_json(d.path(), &["download", name, "--from", p(from), "--format", format, "--json"]);
        content(Path::new(j["path"].as_str().unwrap()))
    };
    let windows_copy = |dir: &Path, files: &[(String, Vec<u8>)], gz: bool| {
        let files: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(n, b)| (n.clone(), if gz { gzip(&windows_text(&gunzip(b))) } else { windows_text(b) }))
            .collect();
        write_tree(dir, &files);
    };

    // text: every Planetoid file of Cora (edges, features with its `# dim=` header, labels, splits).
    let text_files: Vec<(String, Vec<u8>)> = ["edges", "features", "labels", "train", "val", "test"]
        .iter()
        .map(|ext| {
            let name = format!("cora.{ext}.txt");
            let bytes = std::fs::read(shared("planetoid/converted").join(&name)).unwrap();
            (name, bytes)
        })
        .collect();
    let win_text = d.path().join("win-text");
    windows_copy(&win_text, &text_files, false);
    assert!(import("wt", &win_text.join("cora"), "text") == import("t", &cora_text(), "text"), "text differs");

    // musae: the CSV header lines and the JSON object.
    let musae = shared("musae-facebook");
    let musae_files: Vec<(String, Vec<u8>)> = ["facebook_edges.csv", "facebook_features.json", "facebook_target.csv"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(musae.join(n)).unwrap()))
        .collect();
    let win_musae = d.path().join("win-musae");
    windows_copy(&win_musae, &musae_files, false);
    assert!(import("wm", &win_musae, "musae") == import("m", &musae, "musae"), "musae differs");

    // ogb: gzipped CSVs, read line by line (labels, splits) and in parallel blocks (edges, features).
    let ogb_files = ogb_files_from_text(&cora_text(), "cora");
    let (plain, win_ogb) = (d.path().join("ogb"), d.path().join("win-ogb"));
    write_tree(&plain, &ogb_files);
    windows_copy(&win_ogb, &ogb_files, true);
    assert!(import("wo", &win_ogb, "ogb") == import("o", &plain, "ogb"), "ogb differs");

    // edgelist: a gzipped SNAP file.
    let snap = shared("snap/facebook_combined.txt.gz");
    let win_snap = d.path().join("win-ego.txt.gz");
    std::fs::write(&win_snap, gzip(&windows_text(&gunzip(&std::fs::read(&snap).unwrap())))).unwrap();
    assert!(import("we", &win_snap, "edgelist") == import("e", &snap, "edgelist"), "edgelist differs");
}

/// A present archive is kept as it is; an import asking for something else
/// (another source, a split, a seed) says it was not done and how to do it,
/// where it used to report `present` alone and leave the old data in place.
#[test]
fn a_kept_archive_says_which_requested_changes_were_not_made() {
    let d = tempfile::tempdir().unwrap();
    let cora = cora_text();
    let first = ok_json(d.path(), &["download", "c", "--from", p(&cora), "--format", "text", "--json"]);
    let again = |extra: &[&str]| {
        let mut args = vec!["download", "c", "--format", "text", "--json"];
        args.extend_from_slice(extra);
        let out = leapgnn(d.path(), &args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let j = out.json();
        (j["action"].as_str().unwrap().to_owned(), j["sha256"].clone(), out.stderr)
    };
    // The same source, spelled another way: kept without a word.
    let dotted = cora.parent().unwrap().join(".").join(cora.file_name().unwrap());
    let (action, sha, stderr) = again(&["--from", p(&dotted)]);
    assert_eq!((action.as_str(), &sha), ("present", &first["sha256"]));
    assert!(!stderr.contains("warning"), "{stderr}");

    let citeseer = shared("planetoid/converted/citeseer");
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--from", p(&citeseer)], &["--from", "citeseer", "it was made from", "cora"]),
        (&["--from", p(&cora), "--split", "50,25,25"], &["the conversion flags given"]),
        (&["--from", p(&cora), "--seed", "3"], &["--seed 3 (it was made with 0)"]),
    ];
    for (extra, needles) in cases {
        let (action, sha, stderr) = again(extra);
        assert_eq!((action.as_str(), &sha), ("present", &first["sha256"]), "{extra:?}");
        let line = stderr.lines().find(|l| l.starts_with("warning:")).unwrap_or_else(|| panic!("{extra:?}: {stderr}"));
        for n in needles.iter().chain(&["was kept as it is", "--force"]) {
            assert!(line.contains(n), "{extra:?}: `{n}` not in {line}");
        }
    }
    // --force makes the import asked for.
    let (action, _, _) = again(&["--from", p(&citeseer), "--force"]);
    assert_eq!(action, "imported");
    let j = ok_json(d.path(), &["info", "c", "--json"]);
    assert_eq!(j["nodes"], 3327);
}

/// A split that leaves val or test (or train) without a labelled node is
/// said at import, and `train`'s refusal gives the command that fixes it
/// (with --force: without it the present archive is kept as it is).
#[test]
fn an_import_whose_split_leaves_a_set_empty_says_so() {
    let d = tempfile::tempdir().unwrap();
    let cora = cora_text();
    let import = |extra: &[&str]| {
        let mut args = vec!["download", "c", "--from", p(&cora), "--format", "text", "--json"];
        args.extend_from_slice(extra);
        let out = leapgnn(d.path(), &args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    let out = import(&["--split", "100,0,0"]);
    assert_eq!(out.json()["train"], 2708);
    let line = out.stderr.lines().find(|l| l.starts_with("warning:")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(line.contains("c has no labelled val or test nodes") && line.contains("--force"), "{line}");
    let t = leapgnn(d.path(), &["train", "c", "--epochs", "1"]);
    t.assert_error(2, &["no labelled val nodes", "leapgnn download c --force --split 60,20,20"]);
    let out = import(&["--force", "--split", "60,20,20"]);
    assert_eq!(out.json()["action"], "imported");
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}
