//! Malformed sources: each gives exit code 2 and one `error:` line naming the
//! file (and line) and what is wrong; nothing is left at the archive path.

mod import_support;

use import_support::bounded::{Bounded, QUICK_LIMIT, RUN_LIMIT};
use import_support::*;
use leapgnn::datasets::convert::{ConvertOptions, Format, convert};
use leapgnn::error::Blame;
use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

/// Imports `from` as `format` and expects exit 2 with `needles` in the error line.
fn rejects(from: &str, format: &str, needles: &[&str]) {
    let d = tempfile::tempdir().unwrap();
    let out = leapgnn(d.path(), &["download", "bad", "--from", from, "--format", format]);
    out.assert_error(2, needles);
    assert!(!d.path().join("bad/dataset.lgnn").exists(), "an archive was written for bad input");
}

#[test]
fn bad_edge_list_lines_name_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let f = write(d.path(), "e.txt", "# comment\n0 1\n2 x\n");
    rejects(&f, "edgelist", &[&format!("{f}:3:"), "`x` is not a non-negative integer"]);
    let f = write(d.path(), "n.txt", "0 1\n\n0 -4\n");
    rejects(&f, "edgelist", &[&format!("{f}:3:"), "negative node id -4"]);
    let f = write(d.path(), "one.txt", "0 1\n5\n");
    rejects(&f, "edgelist", &[&format!("{f}:2:"), "expected an edge"]);
    let f = write(d.path(), "big.txt", "0 99999999999\n");
    rejects(&f, "edgelist", &[&format!("{f}:1:"), "too large"]);
    // An id that fits in u32 but that a one-edge file cannot back (it asked for 34 GB).
    let f = write(d.path(), "far.txt", "0 4294967294\n");
    rejects(&f, "edgelist", &[&f, "node id 4294967294 is far past what its 1 edges name"]);
    write(d.path(), "far.edges.txt", "0 4294967294\n");
    let prefix = d.path().join("far");
    rejects(prefix.to_str().unwrap(), "text", &["node id 4294967294 is far past", "far.labels.txt"]);
    // Ids with gaps are fine within bounds: 1,000 edges naming ids up to 30,000.
    let gaps: String = (0..1000).map(|i| format!("{} {}\n", i * 30, i * 30 + 1)).collect();
    let f = write(d.path(), "gaps.txt", &gaps);
    let out = leapgnn(d.path(), &["download", "gaps", "--from", &f, "--format", "edgelist", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // A text dataset without its edges file is a wrong --from (it was an I/O failure, exit 1).
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = leapgnn(d.path(), &["download", "cora-planetoid", "--from", empty.to_str().unwrap()]);
    out.assert_error(2, &["cora.edges.txt", "PREFIX.edges.txt"]);
}

#[test]
fn text_ids_beyond_the_node_count_and_bad_rows_are_caught() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "g.labels.txt", "0\n1\n-1\n");
    let edges = write(d.path(), "g.edges.txt", "0 1\n1 7\n");
    let prefix = d.path().join("g");
    let prefix = prefix.to_str().unwrap();
    rejects(prefix, "text", &[&format!("{edges}:2:"), "node id 7 is beyond the node count 3"]);
    write(d.path(), "g.edges.txt", "0 1\n1 2\n");
    let feats = write(d.path(), "g.features.txt", "# dim=4\n1 2\n9\n\n");
    rejects(prefix, "text", &[&format!("{feats}:3:"), "feature column 9 is beyond the header's dim=4"]);
    write(d.path(), "g.features.txt", "# dim=4\n1 2\n3\n");
    rejects(prefix, "text", &["2 feature rows", "3 labels"]);
    std::fs::remove_file(d.path().join("g.features.txt")).unwrap();
    let labels = write(d.path(), "g.labels.txt", "0\nfoo\n1\n");
    rejects(prefix, "text", &[&format!("{labels}:2:"), "label `foo`"]);
    write(d.path(), "g.labels.txt", "0\n1\n1\n");
    let train = write(d.path(), "g.train.txt", "0\n3\n");
    rejects(prefix, "text", &[&format!("{train}:2:"), "beyond the node count 3"]);
}

#[test]
fn musae_csv_and_json_errors_name_the_file() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "x_target.csv", "id,name,page_type\n0,a,tv\n1,\"b, c\",gov\n2,d,tv\n");
    write(d.path(), "x_features.json", "{\"0\": [1, 2], \"2\": [0]}");
    let edges = write(d.path(), "x_edges.csv", "id_1,id_2\n0,1\n1,3\n");
    let dir = d.path().to_str().unwrap();
    rejects(dir, "musae", &[&format!("{edges}:3:"), "node id 3 is beyond the node count 3"]);
    write(d.path(), "x_edges.csv", "id_1,id_2\n0,1\n1,2\n");
    let feats = write(d.path(), "x_features.json", "{\"0\": [1, 2], \"2\": [0]");
    rejects(dir, "musae", &[&feats, "JSON"]);
    write(d.path(), "x_features.json", "{\"0\": [1, 2], \"2\": [0]}");
    let target = write(d.path(), "x_target.csv", "id,name,page_type\n0,a,tv\n1,b,c,gov\n2,d,tv\n");
    rejects(dir, "musae", &[&format!("{target}:3:"), "4 fields, the header has 3"]);
    // And the fixed files import: 3 nodes, classes gov=0, tv=1.
    write(d.path(), "x_target.csv", "id,name,page_type\n0,a,tv\n1,\"b, c\",gov\n2,d,tv\n");
    let j = ok_json(d.path(), &["download", "ok", "--from", dir, "--format", "musae", "--json"]);
    assert_eq!((j["nodes"].as_u64(), j["edges"].as_u64(), j["classes"].as_u64()), (Some(3), Some(4), Some(2)));
}

#[test]
fn ogb_errors_point_into_the_zip() {
    let d = tempfile::tempdir().unwrap();
    let mut files = ogb_files_from_text(&cora_text(), "cora");
    let edge = files.iter_mut().find(|(n, _)| n.ends_with("edge.csv.gz")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"0,633\n0,1862\n5,oops\n").unwrap();
    edge.1 = gz.finish().unwrap();
    let zip = d.path().join("c.zip");
    write_zip(&zip, &files);
    let z = zip.to_str().unwrap();
    rejects(z, "ogb", &[&format!("{z}/cora/raw/edge.csv.gz:3:"), "`oops`"]);
    let z2 = d.path().join("no-edges.zip");
    write_zip(&z2, &files[1..]);
    rejects(z2.to_str().unwrap(), "ogb", &["raw/edge.csv.gz", "right format"]);
}

#[test]
fn truncated_and_flipped_sources_never_panic() {
    // gzip cut short: an error naming the file, at the line reached.
    let d = tempfile::tempdir().unwrap();
    let gz = std::fs::read(shared("snap/soc-Slashdot0902.txt.gz")).unwrap();
    let cut = d.path().join("cut.txt.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let c = cut.to_str().unwrap();
    rejects(c, "edgelist", &[c, "corrupt"]);

    // npz (a zip) cut anywhere or with bytes flipped: an error or, when the
    // damage hits bytes nothing reads, a valid dataset; never a panic.
    let npz = std::fs::read(shared("gnn-benchmark/cora.npz")).unwrap();
    let p = d.path().join("x.npz");
    let opts = ConvertOptions::default();
    for i in 0..16 {
        std::fs::write(&p, &npz[..npz.len() * i / 16]).unwrap();
        let e = convert(Format::Npz, &p, "x", 0, &opts).unwrap_err();
        assert!(e.is_bad_input(), "cut at {i}/16: {e}");
        assert!(e.to_string().contains("x.npz"), "{e}");
    }
    let mut rng = leapgnn::util::rng::stream(7, "flips");
    let mut failed = 0;
    for _ in 0..40 {
        let mut b = npz.clone();
        let at = rand::Rng::random_range(&mut rng, 0..b.len());
        b[at] ^= 1 << rand::Rng::random_range(&mut rng, 0..8);
        std::fs::write(&p, &b).unwrap();
        if let Err(e) = convert(Format::Npz, &p, "x", 0, &opts) {
            assert!(e.is_bad_input(), "flip at {at}: {e}");
            failed += 1;
        }
    }
    assert!(failed > 30, "CRC checks should catch most flips, caught {failed}/40");
}

#[test]
fn unknown_names_formats_and_paths_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    leapgnn(d.path(), &["download", "no-such-set"]).assert_error(2, &["no-such-set", "--list"]);
    let cora = cora_text();
    let c = cora.to_str().unwrap();
    leapgnn(d.path(), &["download", "new-set", "--from", c]).assert_error(2, &["--format"]);
    leapgnn(d.path(), &["download", "../up", "--from", c, "--format", "text"]).assert_error(2, &["../up"]);
    leapgnn(d.path(), &["download", "x", "--from", "/no/such/file", "--format", "edgelist"])
        .assert_error(2, &["/no/such/file"]);
    leapgnn(d.path(), &["download", "cora-planetoid"]).assert_error(2, &["no download URL", "--from"]);
    let out = leapgnn(d.path(), &["download", "x", "--from", c, "--format", "csv"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let reg = d.path().join("bad.toml");
    std::fs::write(&reg, "[a]\nformat = \"text\"\nurls = 3\n").unwrap();
    leapgnn(d.path(), &["download", "a", "--registry", reg.to_str().unwrap()]).assert_error(2, &["bad.toml", "[a]"]);
}

/// A NaN or infinite feature value is refused at import, naming where it is:
/// it was stored, and the first training iteration's loss came out NaN.
#[test]
fn non_finite_features_are_refused_at_import() {
    let d = tempfile::tempdir().unwrap();
    // OGB: `nan`, `inf` and a value past f32's range in node 5's row (line 6).
    for bad in ["nan", "-inf", "1e39"] {
        let mut files = ogb_files_from_text(&cora_text(), "cora");
        let feat = files.iter_mut().find(|(n, _)| n.ends_with("node-feat.csv.gz")).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&feat.1[..]), &mut text).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[5] = lines[5].replacen('0', bad, 1);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, (lines.join("\n") + "\n").as_bytes()).unwrap();
        feat.1 = gz.finish().unwrap();
        let tree = d.path().join(format!("ogb-{bad}"));
        write_tree(&tree, &files);
        let t = tree.to_str().unwrap();
        rejects(t, "ogb", &[&format!("{t}/cora/raw/node-feat.csv.gz:6:"), &format!("`{bad}` is not a finite number")]);
    }

    // npz: gnn-benchmark Cora with its first stored feature value made NaN.
    let src = std::fs::read(shared("gnn-benchmark/cora.npz")).unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(src)).unwrap();
    let mut files = Vec::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let name = f.name().unwrap().to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes).unwrap();
        if name == "attr_data.npy" {
            assert!(String::from_utf8_lossy(&bytes[..64]).contains("'<f4'"), "attr_data is not float32");
            let start = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            bytes[start..start + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        files.push((name, bytes));
    }
    let npz = d.path().join("nan.npz");
    write_zip(&npz, &files);
    let n = npz.to_str().unwrap();
    rejects(n, "npz", &[n, "feature value NaN at node 0", "features must be finite numbers"]);
}

/// `--from <(zcat edges.gz)` hands a pipe: the format sniff read its first
/// bytes (the first edge, lost), and with no size to bound decompression by
/// anything past 64 KiB was "a zip bomb". A FIFO nobody writes blocked the
/// open forever. Both are refused at once, saying to save the data to a file.
#[test]
fn a_pipe_or_fifo_source_is_refused_not_half_read() {
    let d = tempfile::tempdir().unwrap();
    let edges: String = (0..1000).map(|i| format!("{i} {}\n", i + 1)).collect();
    let file = write(d.path(), "e.txt", &edges);
    let data = d.path().join("data");
    // As a shell's process substitution gives it: /dev/fd/N, a pipe with a writer.
    let mut bash = std::process::Command::new("bash");
    bash.arg("-c")
        .arg(r#""$0" --data-dir "$1" download piped --from <(cat "$2") --format edgelist --feature-dim 4 --generated-classes 2"#)
        .arg(env!("CARGO_BIN_EXE_leapgnn"))
        .arg(&data)
        .arg(&file);
    let out =
        import_support::bounded::run_within(&mut bash, import_support::bounded::RUN_LIMIT, "download from a pipe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a pipe was imported: {stderr}");
    assert!(
        stderr.contains("is a pipe (FIFO), not a regular file") && stderr.contains("save it to a file"),
        "{stderr}"
    );
    assert!(!data.join("piped/dataset.lgnn").exists());

    // A named FIFO with no writer: refused without opening it (coreutils timeout bounds the old hang).
    let fifo = d.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status_in(QUICK_LIMIT, "mkfifo").success());
    let out = std::process::Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir"])
        .arg(&data)
        .args(["download", "fifo", "--format", "edgelist", "--from"])
        .arg(&fifo)
        .output_in(RUN_LIMIT, "leapgnn download of a FIFO");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code (124: it blocked opening the FIFO): {stderr}");
    assert!(stderr.contains(&format!("{}: is a pipe (FIFO)", fifo.display())), "{stderr}");

    // The same edges from the file import whole.
    let j = ok_json(
        &data,
        &[
            "download",
            "filed",
            "--from",
            &file,
            "--format",
            "edgelist",
            "--feature-dim",
            "4",
            "--generated-classes",
            "2",
            "--json",
        ],
    );
    assert_eq!(j["edges"], 1000);
}
