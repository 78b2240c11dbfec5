//! Shared by the import, download and corruption tests: running the real
//! binary, paths to the shared datasets, and an OGB-layout copy of Planetoid
//! Cora written straight from its text files (independently of the converters).
#![allow(dead_code)]

#[path = "../support/bounded.rs"]
pub mod bounded;

use bounded::{RUN_LIMIT, output_within, run_within};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `../shared/datasets/<rel>` from the repository root.
pub fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets").join(rel)
}

pub fn cora_text() -> PathBuf {
    shared("planetoid/converted/cora")
}

/// A child process that is killed and waited for when dropped, so that a
/// test failing while it runs leaves no process behind.
pub struct Reaped(Option<std::process::Child>);

impl Reaped {
    pub fn new(child: std::process::Child) -> Reaped {
        Reaped(Some(child))
    }
    pub fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not yet waited for")
    }
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    /// Waits for it to end on its own, reading what is left of its piped output.
    pub fn wait_with_output(mut self) -> std::process::Output {
        output_within(self.0.take().expect("not yet waited for"), RUN_LIMIT, "leapgnn")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
    /// Exit code `code`, one `error:` line on stderr that contains every `needle`.
    pub fn assert_error(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, code, "exit code; stderr: {}", self.stderr);
        let line = self.stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| {
            panic!("no `error:` line in stderr: {}", self.stderr);
        });
        for n in needles {
            assert!(line.contains(n), "`{n}` not in: {line}");
        }
    }
}

/// Runs `leapgnn --data-dir DATA ARGS...` with a clean environment.
pub fn leapgnn(data: &Path, args: &[&str]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("--data-dir").arg(data).args(args).env_remove("LEAPGNN_REGISTRY").env_remove("LEAPGNN_DATA");
    let out = run_within(&mut cmd, RUN_LIMIT, &format!("leapgnn {args:?}"));
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn ok_json(data: &Path, args: &[&str]) -> serde_json::Value {
    let out = leapgnn(data, args);
    assert_eq!(out.code, 0, "leapgnn {args:?} failed: {}", out.stderr);
    out.json()
}

fn read_lines(p: PathBuf) -> Vec<String> {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).lines().map(str::to_owned).collect()
}

fn gz(text: &str) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// The files of an OGB node-property dataset `NAME/raw/*.csv.gz`,
/// `NAME/split/planetoid/*.csv.gz` built from Planetoid text at `prefix`:
/// edges written once per undirected pair, dense 0/1 features.
pub fn ogb_files_from_text(prefix: &Path, name: &str) -> Vec<(String, Vec<u8>)> {
    let p = |ext: &str| PathBuf::from(format!("{}.{ext}", prefix.display()));
    let labels = read_lines(p("labels.txt"));
    let feat_lines = read_lines(p("features.txt"));
    let dim: usize = feat_lines[0]
        .split("dim=")
        .nth(1)
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut feat = String::new();
    for l in &feat_lines[1..] {
        let mut row = vec!["0"; dim];
        for c in l.split_whitespace() {
            row[c.parse::<usize>().unwrap()] = "1";
        }
        feat.push_str(&row.join(","));
        feat.push('\n');
    }
    let edges: String = read_lines(p("edges.txt")).iter().map(|l| l.replace(' ', ",") + "\n").collect();
    let ids = |ext: &str| read_lines(p(ext)).join("\n") + "\n";
    vec![
        (format!("{name}/raw/edge.csv.gz"), gz(&edges)),
        (format!("{name}/raw/node-feat.csv.gz"), gz(&feat)),
        (format!("{name}/raw/node-label.csv.gz"), gz(&(labels.join("\n") + "\n"))),
        (format!("{name}/raw/num-node-list.csv.gz"), gz(&format!("{}\n", labels.len()))),
        (format!("{name}/raw/num-edge-list.csv.gz"), gz(&format!("{}\n", edges.lines().count()))),
        (format!("{name}/split/planetoid/train.csv.gz"), gz(&ids("train.txt"))),
        (format!("{name}/split/planetoid/valid.csv.gz"), gz(&ids("val.txt"))),
        (format!("{name}/split/planetoid/test.csv.gz"), gz(&ids("test.txt"))),
    ]
}

/// Writes `files` as a zip archive (deflate, as OGB's zips are).
pub fn write_zip(path: &Path, files: &[(String, Vec<u8>)]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in files {
        z.start_file(name.as_str(), opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}

/// Writes `files` under `dir` (the extracted form).
pub fn write_tree(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (name, bytes) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Graph, features, labels and split of an archive: what must agree between
/// two conversions of the same data (the metadata's source differs).
pub type Content = (Vec<u64>, Vec<u32>, Vec<f32>, Vec<i32>, [Vec<u32>; 3]);

pub fn content(path: &Path) -> Content {
    let f = leapgnn::format::DatasetFile::open_verified(path).unwrap();
    let g = f.graph();
    (
        g.indptr.to_vec(),
        g.indices.to_vec(),
        f.features().to_dense(),
        f.labels().to_vec(),
        [f.train().to_vec(), f.val().to_vec(), f.test().to_vec()],
    )
}
