//! Seeded-mutation fuzzing of every reader of user files: each converter
//! (text, edgelist, musae, npz, ogb), the zip reader under them, and the
//! dataset and partition archives. A small valid input is damaged many ways
//! (bit flips, random bytes, truncation, huge numbers, duplicated runs); every
//! result must be Ok or an error, never a panic and never an allocation the
//! file cannot justify (that would abort this process). Bounded: a few
//! hundred inputs per reader, seconds in all.

mod import_support;

use import_support::write_zip;
use leapgnn::datasets::convert::convert;
use leapgnn::datasets::{ConvertOptions, Format};
use leapgnn::format::{DatasetFile, ManifestFile, PartFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

const INPUTS_PER_READER: usize = 250;
const NODES: usize = 40;
const DIM: usize = 6;

type Files = Vec<(String, Vec<u8>)>;

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A small graph: a ring plus chords, 3 classes, sparse binary features.
fn edges() -> Vec<(usize, usize)> {
    (0..NODES).flat_map(|v| [(v, (v + 1) % NODES), (v, (v * 7 + 3) % NODES)]).filter(|(a, b)| a != b).collect()
}
fn label(v: usize) -> usize {
    v % 3
}
fn cols(v: usize) -> Vec<usize> {
    vec![v % DIM, (v / 2) % DIM]
}

fn text_files() -> Files {
    let mut f = String::from("# dim=6\n");
    for v in 0..NODES {
        f += &cols(v).iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ");
        f.push('\n');
    }
    let ids = |r: std::ops::Range<usize>| r.map(|v| format!("{v}\n")).collect::<String>().into_bytes();
    vec![
        ("g.edges.txt".into(), edges().iter().map(|(a, b)| format!("{a} {b}\n")).collect::<String>().into_bytes()),
        ("g.labels.txt".into(), (0..NODES).map(|v| format!("{}\n", label(v))).collect::<String>().into_bytes()),
        ("g.features.txt".into(), f.into_bytes()),
        ("g.train.txt".into(), ids(0..20)),
        ("g.val.txt".into(), ids(20..30)),
        ("g.test.txt".into(), ids(30..40)),
    ]
}

fn edgelist_files() -> Files {
    let body: String = edges().iter().map(|(a, b)| format!("{a}\t{b}\n")).collect();
    vec![("g.txt".into(), format!("# a directed graph\n{body}").into_bytes())]
}

fn musae_files() -> Files {
    let feats: Vec<String> = (0..NODES).map(|v| format!("\"{v}\": {:?}", cols(v))).collect();
    vec![
        (
            "g_edges.csv".into(),
            format!("id_1,id_2\n{}", edges().iter().map(|(a, b)| format!("{a},{b}\n")).collect::<String>())
                .into_bytes(),
        ),
        (
            "g_target.csv".into(),
            format!("id,page_type\n{}", (0..NODES).map(|v| format!("{v},k{}\n", label(v))).collect::<String>())
                .into_bytes(),
        ),
        ("g_features.json".into(), format!("{{{}}}", feats.join(", ")).into_bytes()),
    ]
}

/// A `.npy` file of little-endian values with dtype `descr`.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b
}

fn i64s(v: &[usize]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect()
}

fn npz_files() -> Files {
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); NODES];
    for (a, b) in edges() {
        adj[a].push(b);
    }
    let csr = |rows: &[Vec<usize>]| {
        let mut indptr = vec![0];
        let mut indices = Vec::new();
        for r in rows {
            indices.extend_from_slice(r);
            indptr.push(indices.len());
        }
        (indptr, indices)
    };
    let (ap, ai) = csr(&adj);
    let feats: Vec<Vec<usize>> = (0..NODES)
        .map(cols)
        .map(|mut c| {
            c.sort();
            c.dedup();
            c
        })
        .collect();
    let (fp, fi) = csr(&feats);
    let ones = |n: usize| (0..n).flat_map(|_| 1f32.to_le_bytes()).collect::<Vec<u8>>();
    vec![
        ("adj_data.npy".into(), npy("<f4", &format!("({},)", ai.len()), &ones(ai.len()))),
        ("adj_indices.npy".into(), npy("<i8", &format!("({},)", ai.len()), &i64s(&ai))),
        ("adj_indptr.npy".into(), npy("<i8", &format!("({},)", ap.len()), &i64s(&ap))),
        ("adj_shape.npy".into(), npy("<i8", "(2,)", &i64s(&[NODES, NODES]))),
        ("attr_data.npy".into(), npy("<f4", &format!("({},)", fi.len()), &ones(fi.len()))),
        ("attr_indices.npy".into(), npy("<i8", &format!("({},)", fi.len()), &i64s(&fi))),
        ("attr_indptr.npy".into(), npy("<i8", &format!("({},)", fp.len()), &i64s(&fp))),
        ("attr_shape.npy".into(), npy("<i8", "(2,)", &i64s(&[NODES, DIM]))),
        ("labels.npy".into(), npy("<i8", &format!("({NODES},)"), &i64s(&(0..NODES).map(label).collect::<Vec<_>>()))),
    ]
}

/// OGB's layout before gzip: the mutations hit the CSV text, then it is compressed.
fn ogb_plain_files() -> Files {
    let dense = |v: usize| {
        let c = cols(v);
        (0..DIM).map(|k| if c.contains(&k) { "1.0" } else { "0.0" }).collect::<Vec<_>>().join(",")
    };
    let lines = |it: Vec<String>| (it.join("\n") + "\n").into_bytes();
    let e = edges();
    vec![
        ("g/raw/edge.csv".into(), lines(e.iter().map(|(a, b)| format!("{a},{b}")).collect())),
        ("g/raw/node-feat.csv".into(), lines((0..NODES).map(dense).collect())),
        ("g/raw/node-label.csv".into(), lines((0..NODES).map(|v| label(v).to_string()).collect())),
        ("g/raw/num-node-list.csv".into(), format!("{NODES}\n").into_bytes()),
        ("g/raw/num-edge-list.csv".into(), format!("{}\n", e.len()).into_bytes()),
        ("g/split/random/train.csv".into(), lines((0..20).map(|v: usize| v.to_string()).collect())),
        ("g/split/random/valid.csv".into(), lines((20..30).map(|v: usize| v.to_string()).collect())),
        ("g/split/random/test.csv".into(), lines((30..40).map(|v: usize| v.to_string()).collect())),
    ]
}

fn gzipped(files: &Files) -> Files {
    files.iter().map(|(n, b)| (format!("{n}.gz"), gz(b))).collect()
}

/// Damages `b` in 1 to 4 seeded ways.
fn mutate(rng: &mut StdRng, b: &mut Vec<u8>) {
    const NUMBERS: [&[u8]; 5] = [b"4294967295", b"4294967296", b"18446744073709551615", b"-1", b"99999999999"];
    for _ in 0..rng.random_range(1..=4) {
        let at = if b.is_empty() { 0 } else { rng.random_range(0..b.len()) };
        match rng.random_range(0..7) {
            0 if !b.is_empty() => b[at] ^= 1 << rng.random_range(0..8),
            1 if !b.is_empty() => b[at] = rng.random(),
            2 => b.truncate(at),
            3 => {
                let n = NUMBERS[rng.random_range(0..NUMBERS.len())];
                b.splice(at..at, n.iter().copied());
            }
            4 if !b.is_empty() => {
                // Overwrite with a huge little-endian count, as a doctored header would hold.
                let end = (at + 8).min(b.len());
                let big = u64::MAX - rng.random_range(0..1024u64);
                b[at..end].copy_from_slice(&big.to_le_bytes()[..end - at]);
            }
            5 if !b.is_empty() => {
                let end = (at + rng.random_range(1..64)).min(b.len());
                let run = b[at..end].to_vec();
                b.splice(at..at, run);
            }
            _ => {
                let end = (at + rng.random_range(1..16)).min(b.len());
                b.drain(at..end);
            }
        }
    }
}

#[derive(Default, Debug)]
struct Tally {
    tried: usize,
    ok: usize,
    refused: usize,
    panics: Vec<String>,
}

impl Tally {
    fn run<T, E>(&mut self, what: &str, f: impl FnOnce() -> Result<T, E>) {
        self.tried += 1;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(_)) => self.ok += 1,
            Ok(Err(_)) => self.refused += 1,
            Err(p) => {
                let msg = p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string()));
                self.panics.push(format!("{what}: {}", msg.unwrap_or_default()));
            }
        }
    }

    fn report(&self, reader: &str) {
        println!(
            "{reader}: {} inputs tried, {} read, {} refused, {} panics",
            self.tried,
            self.ok,
            self.refused,
            self.panics.len()
        );
        assert!(self.panics.is_empty(), "{reader} panicked on: {:#?}", self.panics);
        assert!(self.refused > 0, "{reader}: no damaged input was refused: the mutations do not reach it");
    }
}

fn write_tree(dir: &Path, files: &Files) {
    for (name, bytes) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

fn split_opts() -> ConvertOptions {
    ConvertOptions { split: Some(vec![0.5, 0.25, 0.25]), ..Default::default() }
}

/// Where a converter is pointed at: how `files` are laid out for it.
#[derive(Clone, Copy)]
enum Layout {
    /// A directory; the converter gets `dir/<entry>` (a prefix or file).
    Dir(&'static str),
    /// A zip archive of the files.
    Zip,
}

fn place(root: &Path, i: usize, files: &Files, layout: Layout) -> PathBuf {
    let dir = root.join(format!("in{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    match layout {
        Layout::Dir(entry) => {
            write_tree(&dir, files);
            dir.join(entry)
        }
        Layout::Zip => {
            let p = dir.join("src.zip");
            write_zip(&p, files);
            p
        }
    }
}

/// Mutates one file of `files` at a time (before `finish`, e.g. gzip) and converts.
fn fuzz_converter(
    name: &str,
    format: Format,
    files: Files,
    finish: impl Fn(&Files) -> Files,
    layout: Layout,
    opts: &ConvertOptions,
) {
    let root = tempfile::tempdir().unwrap();
    let good = place(root.path(), usize::MAX, &finish(&files), layout);
    convert(format, &good, "g", 0, opts).unwrap_or_else(|e| panic!("{name}: the undamaged input fails: {e}"));
    let mut rng = StdRng::seed_from_u64(0x5eed ^ name.len() as u64);
    let mut t = Tally::default();
    for i in 0..INPUTS_PER_READER {
        let mut damaged = files.clone();
        let k = rng.random_range(0..damaged.len());
        mutate(&mut rng, &mut damaged[k].1);
        let path = place(root.path(), i, &finish(&damaged), layout);
        t.run(&format!("{name} #{i} ({})", damaged[k].0), || convert(format, &path, "g", 0, opts));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
    t.report(name);
}

#[test]
fn converters_never_panic_on_damaged_sources() {
    let same = |f: &Files| f.clone();
    fuzz_converter("text", Format::Text, text_files(), same, Layout::Dir("g"), &ConvertOptions::default());
    fuzz_converter(
        "edgelist",
        Format::Edgelist,
        edgelist_files(),
        same,
        Layout::Dir("g.txt"),
        &ConvertOptions::default(),
    );
    fuzz_converter("musae", Format::Musae, musae_files(), same, Layout::Dir(""), &ConvertOptions::default());
    fuzz_converter("npz", Format::Npz, npz_files(), same, Layout::Zip, &split_opts());
    fuzz_converter("ogb", Format::Ogb, ogb_plain_files(), gzipped, Layout::Zip, &ConvertOptions::default());
    // The gzip streams themselves damaged (the mutation hits the compressed bytes).
    fuzz_converter(
        "ogb gzip",
        Format::Ogb,
        gzipped(&ogb_plain_files()),
        same,
        Layout::Dir(""),
        &ConvertOptions::default(),
    );
}

#[test]
fn the_zip_reader_never_panics_on_damaged_archives() {
    let root = tempfile::tempdir().unwrap();
    for (name, format, files) in
        [("npz zip", Format::Npz, npz_files()), ("ogb zip", Format::Ogb, gzipped(&ogb_plain_files()))]
    {
        let good = root.path().join("good.zip");
        write_zip(&good, &files);
        let bytes = std::fs::read(&good).unwrap();
        let mut rng = StdRng::seed_from_u64(0x21b);
        let mut t = Tally::default();
        for i in 0..INPUTS_PER_READER {
            let mut b = bytes.clone();
            mutate(&mut rng, &mut b);
            let p = root.path().join(format!("bad{i}.zip"));
            std::fs::write(&p, &b).unwrap();
            t.run(&format!("{name} #{i}"), || convert(format, &p, "g", 0, &split_opts()));
            std::fs::remove_file(&p).unwrap();
        }
        t.report(name);
    }
}

#[test]
fn dataset_and_partition_archives_never_panic_when_damaged() {
    let root = tempfile::tempdir().unwrap();
    let src = place(root.path(), 0, &text_files(), Layout::Dir("g"));
    let data = leapgnn::DataDir::new(root.path().join("data"));
    let ds = convert(Format::Text, &src, "g", 0, &ConvertOptions::default()).unwrap();
    let path = data.dataset_path("g");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    ds.write(&path).unwrap();
    let parts = leapgnn::partition::ensure_partition(&data, "g", "random", 2, 0).unwrap();

    let mut rng = StdRng::seed_from_u64(0xa5c);
    let damaged_copy = |rng: &mut StdRng, from: &Path, to: &Path| {
        let mut b = std::fs::read(from).unwrap();
        mutate(rng, &mut b);
        std::fs::write(to, b).unwrap();
    };
    let mut t = Tally::default();
    let bad = root.path().join("bad.lgnn");
    for i in 0..INPUTS_PER_READER {
        damaged_copy(&mut rng, &path, &bad);
        t.run(&format!("dataset #{i}"), || DatasetFile::open(&bad).and_then(|f| f.verify()));
    }
    t.report("dataset archive");

    let mut t = Tally::default();
    let names: Vec<String> = std::fs::read_dir(&parts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".tmp"))
        .collect();
    assert!(names.iter().any(|n| n == "manifest") && names.len() >= 3, "{names:?}");
    let copy = root.path().join("parts-copy");
    for i in 0..INPUTS_PER_READER {
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).unwrap();
        for n in &names {
            std::fs::copy(parts.join(n), copy.join(n)).unwrap();
        }
        let victim = &names[rng.random_range(0..names.len())];
        damaged_copy(&mut rng, &parts.join(victim), &copy.join(victim));
        t.run(&format!("partition #{i} ({victim})"), || {
            ManifestFile::open(&copy).and_then(|m| m.verify())?;
            (0..2).try_for_each(|p| PartFile::open(&copy, p).and_then(|f| f.verify()))
        });
    }
    t.report("partition archives");
}

#[test]
fn known_crashes_are_clear_errors() {
    let root = tempfile::tempdir().unwrap();
    let refuses = |what: &str, format: Format, files: Files, layout: Layout, needle: &str| {
        let p = place(root.path(), what.len(), &files, layout);
        let e = convert(format, &p, "g", 0, &split_opts()).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(needle), "{what}: {e}");
        let _ = std::fs::remove_dir_all(p.parent().unwrap());
    };
    let with = |mut files: Files, name: &str, bytes: Vec<u8>| {
        files.iter_mut().find(|(n, _)| n == name).unwrap().1 = bytes;
        files
    };
    let rows = |first: &str| {
        (0..NODES).map(|v| if v == 0 { first.to_string() } else { "1".into() } + "\n").collect::<String>()
    };
    // A declared feature width of 4e9 (dense: nodes x 16 GB).
    let f = format!("# dim=4000000000\n{}", rows("0"));
    refuses("text dim", Format::Text, with(text_files(), "g.features.txt", f.into_bytes()), Layout::Dir("g"), "exceed");
    // A single column index far beyond any real feature.
    let f = rows("0 4000000000");
    refuses(
        "text column",
        Format::Text,
        with(text_files(), "g.features.txt", f.into_bytes()),
        Layout::Dir("g"),
        "exceed",
    );
    // A CSR feature shape with 4e9 columns (was densified as nodes x 4e9).
    refuses(
        "npz attr shape",
        Format::Npz,
        with(npz_files(), "attr_shape.npy", npy("<i8", "(2,)", &i64s(&[NODES, 4_000_000_000]))),
        Layout::Zip,
        "exceed",
    );
    // A byte-order mark that is not ASCII (sliced mid-character).
    refuses(
        "npy descr",
        Format::Npz,
        with(npz_files(), "labels.npy", npy("é8", &format!("({NODES},)"), &[0; NODES * 8])),
        Layout::Zip,
        "not",
    );
    // A node count from num-node-list far above the labels (labels were allocated by the count).
    refuses(
        "ogb count",
        Format::Ogb,
        gzipped(&with(ogb_plain_files(), "g/raw/num-node-list.csv", b"4294967295\n".to_vec())),
        Layout::Zip,
        "4294967295 nodes",
    );
    // Node counts whose sum leaves 32 bits.
    refuses(
        "ogb count sum",
        Format::Ogb,
        gzipped(&with(ogb_plain_files(), "g/raw/num-node-list.csv", b"4294967295\n4294967295\n".to_vec())),
        Layout::Zip,
        "32 bits",
    );
    // A zip bomb: a gzip of 64 MB of one edge, itself deflated in the zip, expands
    // thousands of times over what is stored.
    let bomb = gz(&b"0,1\n".repeat(16 << 20));
    let files = with(gzipped(&ogb_plain_files()), "g/raw/edge.csv.gz", bomb);
    refuses("zip bomb", Format::Ogb, files, Layout::Zip, "zip bomb");
}
