//! `leapgnn partition` end to end: the real binary on a generated dataset.

mod common;
#[path = "support/interrupt.rs"]
mod interrupt;
#[path = "train_support/mod.rs"]
mod train_support;
use bounded::{
    Bounded, PIPE_LIMIT, QUICK_LIMIT, RUN_LIMIT, STOP_LIMIT, join_all_scoped_within, kill_after, output_within,
    run_within, wait_within,
};
use train_support::bounded;
use train_support::names_in;

use leapgnn::format::{DatasetFile, ManifestFile, PartFile};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long a thread that runs `leapgnn` to its end may take: the run's own
/// limit, and its two pipes' after it. Past those the run's own wait has
/// killed it and panicked naming it: the join, which would only abort the
/// binary, waits a minute longer.
const RUN_THREAD_LIMIT: Duration = Duration::from_secs(RUN_LIMIT.as_secs() + 2 * PIPE_LIMIT.as_secs() + 60);

fn leapgnn(data: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    run_within(cmd.arg("--data-dir").arg(data).args(args), RUN_LIMIT, &format!("leapgnn {args:?}"))
}

fn partition_json(data: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["partition", "synthetic-small", "--json"];
    args.extend_from_slice(extra);
    let out = leapgnn(data, &args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {:?}", out.stdout))
}

#[test]
fn metis_cuts_at_most_half_as_many_edges_as_random() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let metis = partition_json(dir.path(), &["--parts", "4"]);
    let random = partition_json(dir.path(), &["--parts", "4", "--method", "random"]);
    for (r, method) in [(&metis, "metis"), (&random, "random")] {
        assert_eq!(r["name"], "synthetic-small");
        assert_eq!(r["parts"], 4);
        assert_eq!(r["method"], method);
        assert!(r["path"].as_str().unwrap().ends_with(&format!("parts/{method}-4")));
        let frac = r["edge_cut_fraction"].as_f64().unwrap();
        assert!((frac - r["edge_cut"].as_f64().unwrap() / 200_000.0).abs() < 1e-9);
        assert!(r["balance"]["nodes"].as_f64().unwrap() >= 1.0 && r["balance"]["train"].as_f64().unwrap() >= 1.0);
        assert!(r["seconds"].as_f64().unwrap() > 0.0);
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
    }
    let (m, r) = (metis["edge_cut"].as_u64().unwrap(), random["edge_cut"].as_u64().unwrap());
    assert!(m * 2 <= r, "METIS cut {m} vs random {r}");
    // Both constraints held (METIS is given 5 % slack; allow rounding on small parts).
    assert!(metis["balance"]["nodes"].as_f64().unwrap() <= 1.06, "{metis}");
    assert!(metis["balance"]["train"].as_f64().unwrap() <= 1.06, "{metis}");
}

#[test]
fn partition_files_agree_with_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = common::write_synthetic_small(dir.path());
    for method in ["metis", "ldg"] {
        let r = partition_json(dir.path(), &["--parts", "3", "--method", method]);
        let pdir = Path::new(r["path"].as_str().unwrap());
        let m = ManifestFile::open(pdir).unwrap();
        m.verify().unwrap();
        let dsf = DatasetFile::open(dir.path().join("synthetic-small/dataset.lgnn")).unwrap();
        assert_eq!(m.dataset_checksum(), dsf.checksum());
        assert_eq!((m.parts(), m.method(), m.seed(), m.constraints()), (3, method, 0, "nodes,train"));

        let n = ds.meta.num_nodes as usize;
        let d = ds.meta.feature_dim as usize;
        let mut seen = vec![false; n];
        for part in 0..3u32 {
            let f = PartFile::open(pdir, part).unwrap();
            f.verify().unwrap();
            assert_eq!(f.owned().len() as u64, m.part_nodes()[part as usize]);
            assert!(f.owned().windows(2).all(|w| w[0] < w[1]), "owned ids not sorted");
            for (row, &v) in f.owned().iter().enumerate() {
                assert!(!seen[v as usize], "node {v} owned twice");
                seen[v as usize] = true;
                assert_eq!(m.node_part()[v as usize] as u32, part);
                assert_eq!(m.local_index()[v as usize] as usize, row);
                assert_eq!(f.row(row as u32).to_dense(d), ds.features.view(d).row(v as usize).to_dense(d));
            }
        }
        assert!(seen.iter().all(|&s| s), "a node is in no part");
        let cut: u64 = (0..n)
            .map(|v| {
                let nb = &ds.indices[ds.indptr[v] as usize..ds.indptr[v + 1] as usize];
                nb.iter().filter(|&&u| m.node_part()[u as usize] != m.node_part()[v]).count() as u64
            })
            .sum();
        assert_eq!(cut, r["edge_cut"].as_u64().unwrap());
        assert_eq!(cut, m.edge_cut());
    }
}

#[test]
fn existing_partition_is_kept_unless_forced_or_stale() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let first = partition_json(dir.path(), &["--parts", "2", "--method", "ldg"]);
    assert_eq!(first["reused"], false);
    let again = leapgnn(dir.path(), &["partition", "synthetic-small", "--parts", "2", "--method", "ldg", "--json"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"), "no word about the kept partition");
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["reused"], true);
    assert_eq!(again["edge_cut"], first["edge_cut"]);
    assert_eq!(partition_json(dir.path(), &["--parts", "2", "--method", "ldg", "--force"])["reused"], false);
    let reseeded = partition_json(dir.path(), &["--parts", "2", "--method", "ldg", "--seed", "5"]);
    assert_eq!(reseeded["reused"], false);
    assert_ne!(reseeded["edge_cut"], first["edge_cut"], "seed did not change the LDG stream order");
    assert_eq!(
        partition_json(dir.path(), &["--parts", "2", "--method", "ldg", "--seed", "5", "--balance", "nodes"])["reused"],
        false
    );

    // A regenerated dataset (other seed) makes the partition stale.
    let spec = leapgnn::datasets::synthetic::preset("synthetic-small").unwrap();
    let other = leapgnn::datasets::synthetic::generate("synthetic-small", &spec, 9).unwrap();
    other.write(&dir.path().join("synthetic-small/dataset.lgnn")).unwrap();
    let stale = partition_json(dir.path(), &["--parts", "2", "--method", "ldg", "--seed", "5", "--balance", "nodes"]);
    assert_eq!(stale["reused"], false);

    // A damaged manifest is rewritten, not trusted.
    let manifest = Path::new(stale["path"].as_str().unwrap()).join("manifest");
    std::fs::write(&manifest, b"LEAPGNN\0garbage").unwrap();
    let repaired =
        partition_json(dir.path(), &["--parts", "2", "--method", "ldg", "--seed", "5", "--balance", "nodes"]);
    assert_eq!(repaired["reused"], false);
    ManifestFile::open(repaired["path"].as_str().unwrap()).unwrap().verify().unwrap();

    let left = names_in(&dir.path().join("synthetic-small/parts"));
    // The partition alone: its lock file is there only while a partitioner holds it.
    assert_eq!(left, ["ldg-2"], "staging directories or the lock file left behind");
}

#[test]
fn bad_parts_methods_and_names_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let cases: [(&[&str], &str); 9] = [
        (&["synthetic-small", "--parts", "1"], "--parts 1"),
        (&["synthetic-small", "--parts", "0"], "--parts 0"),
        (&["synthetic-small", "--parts", "-2"], "--parts -2"),
        (&["synthetic-small", "--parts", "70000"], "--parts 70000"),
        (&["synthetic-small", "--parts", "20001"], "20000 nodes"),
        (&["synthetic-small", "--parts", "4", "--method", "spectral"], "--method spectral"),
        (&["synthetic-small", "--parts", "4", "--balance", "edges"], "--balance edges"),
        (&["no-such-dataset", "--parts", "4"], "leapgnn download no-such-dataset"),
        (&["../synthetic-small", "--parts", "4"], "no dataset archive at `../synthetic-small`"),
    ];
    for (args, says) in cases {
        let mut full = vec!["partition"];
        full.extend_from_slice(args);
        let out = leapgnn(dir.path(), &full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{full:?}: {err}");
        assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{full:?}: {err}");
        assert!(err.contains(says), "{full:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    assert!(!dir.path().join("synthetic-small/parts").exists(), "a refused run wrote something");
}

#[test]
fn corrupt_dataset_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let path = dir.path().join("synthetic-small/dataset.lgnn");
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55; // inside the feature block: structure still valid, checksum not
    std::fs::write(&path, &bytes).unwrap();
    let out = leapgnn(dir.path(), &["partition", "synthetic-small", "--parts", "2", "--method", "hash"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("checksum") && err.contains("dataset.lgnn"), "{err}");
}

#[test]
fn hash_and_human_output() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let r = partition_json(dir.path(), &["--parts", "5", "--method", "hash"]);
    let nodes: u64 = r["part_nodes"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum();
    assert_eq!(nodes, 20_000);
    let out = leapgnn(dir.path(), &["partition", "synthetic-small", "--parts", "5", "--method", "random"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("edge cut") && text.contains("random-5"), "{text}");
}

#[test]
fn ensure_partition_creates_once_then_reuses() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let data = leapgnn::DataDir::new(dir.path());
    let p = leapgnn::partition::ensure_partition(&data, "synthetic-small", "metis", 2, 0).unwrap();
    assert_eq!(p, data.parts_dir("synthetic-small", "metis", 2));
    let inode = std::fs::metadata(p.join("manifest")).unwrap().ino();
    let again = leapgnn::partition::ensure_partition(&data, "synthetic-small", "metis", 2, 0).unwrap();
    assert_eq!(again, p);
    assert_eq!(std::fs::metadata(p.join("manifest")).unwrap().ino(), inode, "a matching partition was rewritten");
    let e = leapgnn::partition::ensure_partition(&data, "synthetic-small", "kmeans", 2, 0).unwrap_err();
    assert!(e.chain().any(leapgnn::error::is_bad_input), "{e:#}");
}

#[test]
fn concurrent_partitions_of_one_target_take_turns_and_leftovers_of_killed_writers_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let parts = dir.path().join("synthetic-small/parts");
    // What a writer killed mid-way leaves: its staging directory, and an old partition set aside.
    for stale in [".random-2.tmp.999999", ".random-2.old.999999"] {
        std::fs::create_dir_all(parts.join(stale)).unwrap();
        std::fs::write(parts.join(stale).join("manifest"), b"half").unwrap();
    }
    for round in 0..4 {
        // Two forced rewrites with different seeds at once: without turns, one renamed the
        // other's directory away mid-write ("No such file or directory", "Directory not empty").
        let spawn = |seed: &str| {
            let args =
                ["partition", "synthetic-small", "--parts", "2", "--method", "random", "--force", "--seed", seed];
            leapgnn(dir.path(), &args)
        };
        let both = std::thread::scope(|s| {
            let runs = vec![s.spawn(|| spawn("1")), s.spawn(|| spawn("2"))];
            join_all_scoped_within(runs, RUN_THREAD_LIMIT, |i| format!("round {round}: the writer with seed {}", i + 1))
        });
        for out in both {
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let m = ManifestFile::open(parts.join("random-2")).unwrap();
        m.verify().unwrap();
        assert!([1, 2].contains(&m.seed()), "round {round}: seed {}", m.seed());
        assert_eq!(names_in(&parts), ["random-2"], "round {round}");
    }
}

#[test]
fn a_made_partition_in_a_read_only_data_directory_is_used_as_it_is() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    partition_json(dir.path(), &["--parts", "2", "--method", "random"]);
    // Another user, who may read but not write: nothing to create, not even the partition's lock file.
    let bin = dir.path().join("leapgnn");
    std::fs::copy(env!("CARGO_BIN_EXE_leapgnn"), &bin).unwrap();
    let set = |mode: u32| {
        for e in walk(dir.path()) {
            let m = if e.is_dir() || e == bin { mode | 0o111 } else { mode };
            std::fs::set_permissions(&e, std::fs::Permissions::from_mode(m)).unwrap();
        }
    };
    set(0o444);
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(&bin)
        .arg("--data-dir")
        .arg(dir.path())
        .args(["partition", "synthetic-small", "--parts", "2", "--method", "random", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|c| output_within(c, RUN_LIMIT, "partition as `nobody`"));
    set(0o644);
    let out = match out {
        Ok(o) if !String::from_utf8_lossy(&o.stderr).contains("runuser:") => o,
        other => {
            eprintln!("skipped: cannot run as `nobody` here (needs root and runuser; CI has both): {other:?}");
            return;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["reused"], true, "{r}");
}

/// A file of a partition already made that cannot be read for a reason a
/// rewrite would not cure is reported (exit 1, naming the file), and the
/// partition is left byte for byte as it was. In the field that is ENOMEM
/// under `prlimit --as`, EMFILE or EACCES; here a directory or a FIFO in the
/// file's place, which root meets alike on every machine. `partition` and a
/// run's on-demand partitioning took any failure to open a file for a stale
/// partition and cut it again (`infer fb` under `prlimit --as`: "no
/// up-to-date metis-2 partition of facebook: creating ..."), and a FIFO
/// blocked the open for ever.
#[test]
fn an_unreadable_partition_file_is_reported_and_the_partition_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let data = leapgnn::DataDir::new(dir.path());
    let parts = dir.path().join("synthetic-small/parts/ldg-2");
    let args = ["partition", "synthetic-small", "--parts", "2", "--method", "ldg", "--json"];
    for (file, what) in [("part-1.lgnn", "a directory"), ("manifest", "a pipe (FIFO)")] {
        assert!(leapgnn(dir.path(), &[&args[..], &["--force"]].concat()).status.success());
        let path = parts.join(file);
        std::fs::remove_file(&path).unwrap();
        match file {
            "manifest" => assert!(Command::new("mkfifo").arg(&path).status_in(QUICK_LIMIT, "mkfifo").success()),
            _ => std::fs::create_dir(&path).unwrap(),
        }
        let before = contents(&parts);
        let out = leapgnn(dir.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {err}");
        assert!(err.contains(&format!("{}: is {what}", path.display())) && err.contains("left as it is"), "{err}");
        assert!(out.stdout.is_empty(), "{file}: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(contents(&parts), before, "{file}: `partition` rewrote the partition");
        let e = leapgnn::partition::ensure_partition(&data, "synthetic-small", "ldg", 2, 0).unwrap_err();
        assert_eq!(leapgnn::error::exit_code(e.chain()), 1, "{e:#}");
        assert!(format!("{e:#}").contains(&path.display().to_string()), "{e:#}");
        assert_eq!(contents(&parts), before, "{file}: a run's on-demand partitioning rewrote the partition");
    }
}

/// Each entry below `root` with its bytes (None for what is not a regular
/// file), never opening a FIFO.
fn contents(root: &Path) -> Vec<(std::path::PathBuf, Option<Vec<u8>>)> {
    let regular = |p: &Path| std::fs::symlink_metadata(p).unwrap().is_file();
    walk(root).into_iter().map(|p| (p.clone(), regular(&p).then(|| std::fs::read(&p).unwrap()))).collect()
}

/// `root` and everything below it.
fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![root.to_path_buf()];
    let mut i = 0;
    while i < all.len() {
        if all[i].is_dir() {
            let children: Vec<_> = std::fs::read_dir(&all[i]).unwrap().map(|e| e.unwrap().path()).collect();
            all.extend(children);
        }
        i += 1;
    }
    all
}

/// METIS at a K too large for Cora leaves parts without a node and prints its
/// complaints (`***Cannot bisect a graph with 0 vertices!`) with printf: such a
/// partitioning is refused (exit 2, one line, fewer parts suggested), and
/// `--json` stdout is the JSON document alone, or nothing.
#[test]
fn metis_parts_left_empty_are_refused_and_json_stdout_stays_pure() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let from = common::shared("planetoid/converted/cora");
    let out = leapgnn(d, &["download", "cora", "--from", from.to_str().unwrap(), "--format", "text"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for args in [
        &["partition", "cora", "--parts", "600", "--json"][..],
        &["analyze-locality", "cora", "--parts", "600", "--method", "metis", "--json"],
    ] {
        let out = leapgnn(d, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err} / stdout {}", String::from_utf8_lossy(&out.stdout));
        assert!(out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stdout));
        // analyze-locality says first that it partitions on demand.
        let errors: Vec<&str> = err.lines().filter(|l| !l.starts_with("no up-to-date metis-600 partition")).collect();
        assert!(errors.len() == 1 && errors[0].starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains("--parts 600") && err.contains("without a node") && err.contains("fewer parts"), "{err}");
        assert!(!err.contains("Cannot bisect"), "METIS' own complaints are not the error: {err}");
    }
    assert!(!d.join("cora/parts/metis-600").exists(), "a refused partition is not written");
    let out = leapgnn(d, &["partition", "cora", "--parts", "8", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["parts"], 8);
}

/// `partition` says "kept" only of files it has checked whole: a part or a
/// manifest with a flipped byte (its structure intact, only the checksum can
/// tell) is written again, and a damaged dataset is refused (exit 2). It
/// used to answer "kept the existing partition" with exit 0 for all three.
#[test]
fn a_damaged_partition_is_not_kept_and_a_damaged_dataset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let first = partition_json(dir.path(), &["--parts", "2", "--method", "ldg"]);
    let parts = dir.path().join("synthetic-small/parts/ldg-2");
    let flip = |path: &Path| {
        let mut b = std::fs::read(path).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        std::fs::write(path, b).unwrap();
    };
    for file in ["part-1.lgnn", "manifest"] {
        flip(&parts.join(file));
        let again = partition_json(dir.path(), &["--parts", "2", "--method", "ldg"]);
        assert_eq!(again["reused"], false, "a damaged {file} was kept");
        assert_eq!(again["edge_cut"], first["edge_cut"]);
        PartFile::open(&parts, 1).unwrap().verify().unwrap();
        ManifestFile::open(&parts).unwrap().verify().unwrap();
        assert_eq!(partition_json(dir.path(), &["--parts", "2", "--method", "ldg"])["reused"], true);
    }
    flip(&dir.path().join("synthetic-small/dataset.lgnn"));
    let out = leapgnn(dir.path(), &["partition", "synthetic-small", "--parts", "2", "--method", "ldg", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("checksum mismatch") && err.contains("dataset.lgnn"), "{err}");
}

/// Ctrl-C or SIGTERM while `partition --force` replaces an existing
/// partition: exit 130 / 143, no staging directory left beside it, and the
/// previous partition still there and whole. The signal's default killed the
/// process where it stood (no exit code) and left `.metis-2.tmp.PID`, a copy
/// of every feature row, until the next partition of the same K.
#[test]
fn an_interrupted_repartition_exits_130_or_143_and_keeps_the_previous_partition() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    partition_json(dir.path(), &["--parts", "2"]);
    let parts = dir.path().join("synthetic-small/parts");
    let manifest = std::fs::read(parts.join("metis-2/manifest")).unwrap();
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let args = ["partition", "synthetic-small", "--parts", "2", "--seed", "7", "--force"];
        let pause = [("LEAPGNN_TEST_PAUSE", "partition-staged")];
        let ended = interrupt::interrupt_at(dir.path(), &args, &pause, "test pause: partition-staged", sig);
        assert_eq!(ended.code, Some(code), "SIG{sig}: {}", ended.stderr);
        assert_eq!(interrupt::temporaries(&parts), Vec::<String>::new(), "SIG{sig}: left in {}", parts.display());
        assert_eq!(names_in(&parts), ["metis-2"], "SIG{sig}: the lock file was left");
        assert_eq!(std::fs::read(parts.join("metis-2/manifest")).unwrap(), manifest, "SIG{sig}");
        ManifestFile::open(parts.join("metis-2")).unwrap();
    }
    // Still the partition of seed 0, whole: a plain run keeps it rather than cutting it again.
    let kept = partition_json(dir.path(), &["--parts", "2"]);
    assert_eq!(kept["reused"], true, "{kept}");
}

/// A run refused once its partition is cut (here: the workers' shares, with
/// the cut's halo, do not fit `--memory-limit-mb`, which the even lower bound
/// checked before the cut does) left the partitioner's empty lock file,
/// `parts/.metis-2.lock`, for good. Now nothing is left in `parts/`.
#[test]
fn a_run_refused_on_its_cut_leaves_no_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let total = lower_bound(dir.path());
    let out = leapgnn(dir.path(), &refused_on_its_cut(&total));
    let refused = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "--memory-limit-mb {total}: {refused}");
    assert!(refused.contains("--mode full-graph needs an estimated"), "not refused on the cut: {refused}");
    let parts = dir.path().join("synthetic-small/parts");
    // Made by the refused run and left empty (no lock file, no partition): gone with its lock.
    assert!(!parts.exists(), "left {}: {:?}", parts.display(), parts.exists().then(|| names_in(&parts)));
}

/// A train of synthetic-small on 2 full-graph workers within `mb` MiB.
fn refused_on_its_cut(mb: &str) -> [&str; 8] {
    ["train", "synthetic-small", "--workers", "2", "--mode", "full-graph", "--memory-limit-mb", mb]
}

/// The lower bound, in MiB, that a full-graph train of synthetic-small on 2
/// workers checks before its cut, as the run refused below it states it:
/// within it, the run is refused only on its cut.
fn lower_bound(d: &Path) -> String {
    let out = leapgnn(d, &refused_on_its_cut("1"));
    let below = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "--memory-limit-mb 1: {below}");
    let total = below.split(" MiB for the 2 workers and the driver").next().and_then(|s| s.rsplit(' ').next());
    let total = total.unwrap_or_else(|| panic!("no lower bound stated: {below}"));
    assert!(!d.join("synthetic-small/parts").exists(), "refused before the cut, yet partitioned: {below}");
    total.to_string()
}

/// A run that made `parts/` and is refused on its cut removes it, empty,
/// with its lock (`TargetLock`). A second run that found `parts/` there, and
/// is about to open its lock file in it, must make it again rather than fail
/// on "No such file or directory". The refused run is held with its lock
/// (`partition-locked`) until the second is held at that very point
/// (`partition-dir-made`); the refused run then ends, and the second goes on.
#[test]
fn a_partition_run_whose_parts_directory_vanishes_before_its_lock_makes_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::write_synthetic_small(d);
    let total = lower_bound(d);
    let parts = d.join("synthetic-small/parts");
    let mut refused = Held::start(d, &refused_on_its_cut(&total), "partition-locked");
    refused.until("test hold: partition-locked");
    assert!(parts.join(".metis-2.lock").exists(), "held with its lock, yet no lock file: {:?}", names_in(&parts));
    let mut second = Held::start(d, &["partition", "synthetic-small", "--parts", "2", "--json"], "partition-dir-made");
    second.until("test hold: partition-dir-made");
    refused.go();
    let (code, _, err) = refused.end();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--mode full-graph needs an estimated"), "not refused on the cut: {err}");
    assert!(!parts.exists(), "the refused run left {:?}", names_in(&parts));
    second.go();
    // Back at the same point: it found the directory gone and made it again.
    second.until("test hold: partition-dir-made");
    second.go();
    let (code, out, err) = second.end();
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out} / {err}"));
    assert_eq!(r["parts"], 2, "{r}");
    ManifestFile::open(parts.join("metis-2")).unwrap().verify().unwrap();
    assert_eq!(names_in(&parts), ["metis-2"]);
}

/// A leapgnn command held at test point `point` (`LEAPGNN_TEST_PAUSE`), each
/// time it gets there, until the test writes it a line.
struct Held {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
    stderr: String,
}

impl Held {
    fn start(data: &Path, args: &[&str], point: &str) -> Held {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env("LEAPGNN_TEST_PAUSE", point)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start leapgnn");
        let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
        Held { child, lines, stderr: String::new() }
    }

    /// Reads its stderr up to a line containing `at`.
    fn until(&mut self, at: &str) {
        let watch = kill_after(self.child.id(), STOP_LIMIT, &format!("a line containing `{at}`"));
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            self.stderr.push_str(&line);
            self.stderr.push('\n');
            if line.contains(at) {
                return;
            }
        }
        drop(watch);
        let status = wait_within(&mut self.child, STOP_LIMIT, "leapgnn after its stderr ended");
        panic!("ended ({status}) without a line containing `{at}`: {}", self.stderr);
    }

    /// Lets it go on from where it is held.
    fn go(&mut self) {
        std::io::Write::write_all(self.child.stdin.as_mut().unwrap(), b"\n").unwrap();
    }

    /// Waits for it to end: its exit code, stdout and stderr.
    fn end(mut self) -> (Option<i32>, String, String) {
        drop(self.child.stdin.take());
        let watch = kill_after(self.child.id(), RUN_LIMIT, "the end of leapgnn's stderr");
        for line in self.lines.by_ref() {
            self.stderr.push_str(&line.unwrap());
            self.stderr.push('\n');
        }
        drop(watch);
        let out = output_within(self.child, STOP_LIMIT, "leapgnn after its stderr ended");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), self.stderr)
    }
}

/// A partition writer killed (SIGKILL, power loss) between its two renames
/// left the old partition set aside (`.metis-2.old.PID`) and none in place;
/// the next writer's clean-up deleted that whole partition as a leftover and
/// cut it again. It is put back instead, and kept.
#[test]
fn a_partition_set_aside_by_a_killed_writer_is_put_back() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    partition_json(dir.path(), &["--parts", "2"]);
    let parts = dir.path().join("synthetic-small/parts");
    let manifest = std::fs::read(parts.join("metis-2/manifest")).unwrap();
    std::fs::rename(parts.join("metis-2"), parts.join(".metis-2.old.4194304")).unwrap();
    let kept = partition_json(dir.path(), &["--parts", "2"]);
    assert_eq!(kept["reused"], true, "{kept}");
    assert_eq!(std::fs::read(parts.join("metis-2/manifest")).unwrap(), manifest);
    assert_eq!(interrupt::temporaries(&parts), Vec::<String>::new());
}

/// SIGTERM or Ctrl-C while METIS partitions. GKlib installed its own SIGTERM
/// handler, process-wide, for the length of every METIS call: a SIGTERM that
/// the kernel handed to a thread other than METIS' (any thread may take a
/// process's signal; another one does whenever the main thread has one
/// pending already, as with a second signal) jumped through GKlib's unset
/// jump buffer there: SIGSEGV, exit by signal, nothing cleaned; one on
/// METIS' thread abandoned METIS, which was then run again in full before
/// the exit. Now the command's own handler takes every such signal at once:
/// exit 143 or 130, no partition and no temporaries left.
#[test]
fn a_signal_while_metis_partitions_ends_partition_at_once_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Random edges: METIS takes seconds on them, long enough to be caught in the act.
    train_support::write_tiny(d, "wide", train_support::Tiny { nodes: 200_000, dim: 4, ..Default::default() });
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
            .arg("--data-dir")
            .arg(d)
            .args(["partition", "wide", "--parts", "8"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        // METIS' printf is set aside while it runs: fd 1 then points at an unlinked
        // `.leapgnn-stdout-*` file (util::c_stdout), the sign that the METIS call is under way.
        let fd1 = format!("/proc/{pid}/fd/1");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !std::fs::read_link(&fd1).is_ok_and(|p| p.to_string_lossy().contains(".leapgnn-stdout-")) {
            if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("SIG {sig}: METIS never seen running: {:?}", child.wait().unwrap());
            }
            std::thread::yield_now();
        }
        // The signal goes to the thread that reads signals, not METIS' own: where
        // the kernel delivers a process's signal when the main thread has one pending.
        let tid = thread_named(pid, "leapgnn-interru");
        // SAFETY: tgkill takes three numbers and no memory; `pid` is our child, not yet reaped.
        let sent = unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::c_int, tid as libc::c_int, sig) };
        assert_eq!(sent, 0, "tgkill {pid} {tid} {sig}");
        let status = wait_within(&mut child, STOP_LIMIT, &format!("partition after SIG {sig}"));
        assert_eq!(status.code(), Some(code), "SIG {sig}: {status}");
        let parts = d.join("wide/parts");
        assert!(!parts.join("metis-8").exists(), "SIG {sig}: a partition was written");
        assert_eq!(interrupt::temporaries(&parts), Vec::<String>::new(), "SIG {sig}");
    }
    // Nothing half-made stands in the way of the next partition.
    let out = leapgnn(d, &["partition", "wide", "--parts", "8", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The id of the thread of `pid` called `name` (as /proc shows it: 15 bytes at most).
fn thread_named(pid: u32, name: &str) -> u32 {
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap();
        if std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name) {
            return t.file_name().to_string_lossy().parse().unwrap();
        }
    }
    panic!("no thread `{name}` in process {pid}");
}

/// A cut takes minutes on a large graph, and writing the parts seconds more:
/// on a terminal (here the pseudo-terminal `script` gives it) a spinner says
/// what is being cut, then what is being written, each line within 79
/// columns, a name too long for it elided (the cut's line took 80 columns
/// on synthetic-small, more on a longer name, and wrapped on an 80-column
/// terminal; the writing showed nothing); with stderr a pipe,
/// nothing of it reaches stderr, and stdout carries the JSON alone either way.
#[test]
fn the_cut_and_the_writing_show_a_spinner_within_79_columns_on_a_terminal_and_nothing_on_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    common::write_synthetic_small(dir.path());
    let ds = DatasetFile::open(dir.path().join("synthetic-small/dataset.lgnn")).unwrap();
    let cut = format!("metis-2 cut of synthetic-small ({} nodes, {} edges)", ds.num_nodes(), ds.graph().num_edges());
    let json = dir.path().join("report.json");
    // A dataset given as a long path: its name does not fit the line, and is elided.
    let long = dir.path().join("a-directory-name-long-enough-to-pass-eighty-columns-on-its-own/synthetic-small");
    std::fs::create_dir_all(long.parent().unwrap()).unwrap();
    std::fs::rename(dir.path().join("synthetic-small"), &long).unwrap();
    std::fs::create_dir(dir.path().join("synthetic-small")).unwrap();
    std::fs::hard_link(long.join("dataset.lgnn"), dir.path().join("synthetic-small/dataset.lgnn")).unwrap();
    for (name, says) in [
        ("synthetic-small", vec![cut.as_str(), "writing metis-2 of synthetic-small (2 part files)"]),
        (long.to_str().unwrap(), vec!["metis-2 cut of /", "writing metis-2 of /"]),
    ] {
        let cmd = format!(
            "'{}' --data-dir '{}' partition '{name}' --parts 2 --json > '{}'",
            env!("CARGO_BIN_EXE_leapgnn"),
            dir.path().display(),
            json.display()
        );
        let mut script = Command::new("script");
        script.args(["-qec", &cmd, "/dev/null"]).env("TERM", "xterm");
        let out = run_within(&mut script, RUN_LIMIT, &format!("partition {name} under script"));
        let tty = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{tty}");
        let lines = screen_lines(&tty);
        for what in says {
            assert!(lines.iter().any(|l| l.contains(what)), "no spinner `{what}` on the terminal: {lines:#?}");
        }
        let spinners: Vec<_> = lines.iter().filter(|l| l.contains(" cut of ") || l.contains("writing ")).collect();
        // Trailing blanks are indicatif's filler over what the previous draw left.
        for l in spinners.iter().map(|l| l.trim_end()) {
            assert!(leapgnn::tui::fmt::width(l) <= 79, "{} columns: {l:?}", leapgnn::tui::fmt::width(l));
        }
        let report: Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("stdout holds the JSON alone");
        assert_eq!(report["reused"], false);
    }
    assert!(screen_lines("\x1b[2Kx\r\x1b[1Ay\n").iter().any(|l| l == "y"), "the escape sequences are stripped");

    let out = leapgnn(dir.path(), &["partition", "synthetic-small", "--parts", "2", "--force", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("stdout holds the JSON alone");
}

/// What a terminal shows of `tty` line by line: escape sequences (CSI:
/// cursor moves, clears) taken out, split at carriage returns and newlines.
fn screen_lines(tty: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut chars = tty.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
            plain.push('\r');
            continue;
        }
        plain.push(c);
    }
    plain.split(['\r', '\n']).filter(|l| !l.is_empty()).map(str::to_string).collect()
}
