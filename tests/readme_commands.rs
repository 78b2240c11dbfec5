//! Every command line of README.md's ```sh blocks, run as written and in
//! README order (later commands use what earlier ones made), by bash, with
//! `leapgnn` on PATH being the binary under test. A command must exit 0;
//! with `--json` and no pipe, its stdout must be one JSON object.
//!
//! What stands in for the user's world, all on this machine:
//! - the working directory is a temp dir laid out like the repository:
//!   `profiles/`, `scripts/`, `configs/`, `target/release/leapgnn`, and `../shared/datasets`
//!   (the shared copies; `musae-facebook` is a BFS-connected 3,000-node
//!   subgraph of it written in the same MUSAE layout, so that the README's
//!   dozen default-length Facebook runs finish in seconds: every command still
//!   imports, partitions and trains "facebook" as written);
//! - the network: `LEAPGNN_REGISTRY` is the built-in registry with every URL
//!   pointing at an HTTP server on 127.0.0.1 started here, serving the shared
//!   Cora npz as `cora`, the shared Slashdot edge list cut to its first 20,000
//!   node ids as `slashdot` (the full graph's locality grid takes 100 s
//!   here, twice in the README), and an
//!   OGB-layout zip of Planetoid Cora as `ogbn-arxiv` (other names: 404); and
//!   `synthetic-products` shrunk to synthetic-small's size;
//! - the cluster: `profiles/lab-example.toml` (and the `profiles/lab.toml` the
//!   overview already uses) is an ssh profile of 4 workers on a real sshd on
//!   127.0.0.1 (tests/support/sshd.rs), as a user's would be with their
//!   addresses put in; `edges.txt.gz` (the user's edge list) is SNAP's
//!   ego-Facebook, `ids.txt` (the user's node list) 100 node ids; HOME is a
//!   temp dir; `sudo` is dropped (CI runs as root).
//!
//! Key presses: a command whose comment mentions Ctrl-C gets SIGINT once its
//! first `epoch` line is on stderr, as a user pressing it would.
//! A command that cannot run in CI carries `# not run in CI: <why>` in the
//! README; `cargo test --release` is CI's own command (checked to be in
//! `.ci/run`).

#[path = "import_support/mod.rs"]
mod import_support;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/sshd.rs"]
mod sshd;

// sshd.rs finds it as `super::bounded`.
use import_support::bounded;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// No single README command takes this long here; one that does is hung.
const COMMAND_LIMIT: Duration = Duration::from_secs(300);
const NOT_RUN: &str = "# not run in CI:";

struct Line {
    /// 1-based line in README.md.
    at: usize,
    command: String,
    comment: String,
}

/// The command lines of the ```sh blocks (a trailing `\` joins the next line).
fn commands(readme: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in readme.lines().enumerate() {
        let t = raw.trim_end();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh || t.trim().is_empty() {
            continue;
        }
        let (at, mut text) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = t.strip_suffix('\\') {
            text.push_str(head);
            pending = Some((at, text));
            continue;
        }
        text.push_str(t);
        let (command, comment) = split_comment(&text);
        out.push(Line { at, command, comment });
    }
    out
}

/// A `#` after whitespace and outside quotes starts the comment.
fn split_comment(s: &str) -> (String, String) {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in s.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => {
                return (s[..i].trim().to_string(), s[i..].trim().to_string());
            }
            _ => {}
        }
        prev = c;
    }
    (s.trim().to_string(), String::new())
}

/// A static file server on 127.0.0.1: GET of a known path is 200 with the
/// bytes, anything else 404. Stops when the test ends (the thread is detached;
/// nothing outside the test connects to it).
fn serve(files: HashMap<String, Vec<u8>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let files = Arc::new(files);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let files = files.clone();
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut r = BufReader::new(&conn);
                let mut first = String::new();
                r.read_line(&mut first)?;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
                        break;
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut w = &conn;
                match files.get(&path) {
                    Some(b) => {
                        write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", b.len())?;
                        w.write_all(b)
                    }
                    None => w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                }
            });
        }
    });
    port
}

/// The built-in registry with every URL on the local server (`served`: entry
/// name -> file name there; the rest get a path that answers 404) and
/// synthetic-products at synthetic-small's size.
fn registry(port: u16, served: &BTreeMap<&str, &str>) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets.toml")).unwrap();
    let mut section = String::new();
    let mut out = String::new();
    for l in text.lines() {
        if l.starts_with('[') && !l.starts_with("[[") {
            section = l.trim_matches(|c| c == '[' || c == ']' || c == '"').to_string();
        }
        let line = if l.starts_with("urls = ") {
            let file = served.get(section.as_str()).copied().unwrap_or("not-served");
            format!("urls = [\"http://127.0.0.1:{port}/{file}\"]")
        } else if section == "slashdot" && (l.starts_with("sha256 = ") || l.starts_with("size = ")) {
            continue; // served cut down: another file
        } else if section == "synthetic-products" && l.starts_with("nodes = ") {
            "nodes = 20_000".into()
        } else if section == "synthetic-products" && l.starts_with("edges = ") {
            "edges = 100_000".into()
        } else {
            l.to_string()
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A gzipped SNAP edge list cut to the edges between its first `n` node ids
/// (comment lines kept).
fn small_edge_list(from: &Path, n: u64) -> Vec<u8> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(from).unwrap()).read_to_string(&mut text).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| l.starts_with('#') || l.split_whitespace().all(|v| v.parse::<u64>().is_ok_and(|v| v < n)))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(kept.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// The MUSAE Facebook files cut to the first `n` nodes a BFS from node 0
/// reaches, renumbered in that order (same layout: edges CSV, features JSON,
/// target CSV).
fn small_facebook(from: &Path, to: &Path, n: usize) {
    let edges_csv = std::fs::read_to_string(from.join("facebook_edges.csv")).unwrap();
    let edges: Vec<(usize, usize)> = edges_csv
        .lines()
        .skip(1)
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    let nodes = edges.iter().map(|&(a, b)| a.max(b)).max().unwrap() + 1;
    let mut adj = vec![Vec::new(); nodes];
    for &(a, b) in &edges {
        adj[a].push(b);
        adj[b].push(a);
    }
    let mut id = vec![usize::MAX; nodes];
    let (mut next, mut queue) = (0, VecDeque::from([0usize]));
    id[0] = 0;
    next += 1;
    while let Some(v) = queue.pop_front() {
        for &u in &adj[v] {
            if id[u] == usize::MAX && next < n {
                id[u] = next;
                next += 1;
                queue.push_back(u);
            }
        }
    }
    assert_eq!(next, n, "node 0's component has {n} nodes");
    std::fs::create_dir_all(to).unwrap();
    let mut e = String::from("id_1,id_2\n");
    for &(a, b) in &edges {
        if id[a] != usize::MAX && id[b] != usize::MAX {
            e.push_str(&format!("{},{}\n", id[a], id[b]));
        }
    }
    std::fs::write(to.join("facebook_edges.csv"), e).unwrap();
    let feats: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(from.join("facebook_features.json")).unwrap()).unwrap();
    let kept: BTreeMap<String, serde_json::Value> = feats
        .into_iter()
        .filter_map(|(k, v)| {
            let i = id[k.parse::<usize>().unwrap()];
            (i != usize::MAX).then(|| (i.to_string(), v))
        })
        .collect();
    std::fs::write(to.join("facebook_features.json"), serde_json::to_vec(&kept).unwrap()).unwrap();
    let target = std::fs::read_to_string(from.join("facebook_target.csv")).unwrap();
    let mut lines = target.lines();
    let mut rows = vec![String::new(); n];
    for l in lines.by_ref().skip(1) {
        let (k, rest) = l.split_once(',').unwrap();
        let i = id[k.parse::<usize>().unwrap()];
        if i != usize::MAX {
            rows[i] = format!("{i},{rest}\n");
        }
    }
    let header = target.lines().next().unwrap();
    std::fs::write(to.join("facebook_target.csv"), format!("{header}\n{}", rows.concat())).unwrap();
}

/// The working directory, laid out like the repository and its `../shared`.
struct World {
    _tmp: tempfile::TempDir,
    cwd: PathBuf,
    home: PathBuf,
    bin_dir: PathBuf,
    registry: PathBuf,
    _sshd: sshd::Sshd,
}

fn world() -> World {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = repo.join("../shared/datasets");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (cwd, home, bin_dir) = (root.join("leapgnn"), root.join("home"), root.join("bin"));
    for d in [&cwd, &home, &bin_dir, &root.join("shared/datasets"), &cwd.join("profiles"), &cwd.join("target/release")]
    {
        std::fs::create_dir_all(d).unwrap();
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_leapgnn"));
    std::os::unix::fs::symlink(bin, bin_dir.join("leapgnn")).unwrap();
    std::os::unix::fs::symlink(bin, cwd.join("target/release/leapgnn")).unwrap();
    std::os::unix::fs::symlink(repo.join("scripts"), cwd.join("scripts")).unwrap();
    std::os::unix::fs::symlink(repo.join("configs"), cwd.join("configs")).unwrap();
    for e in std::fs::read_dir(&shared).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "musae-facebook" {
            std::os::unix::fs::symlink(e.path(), root.join("shared/datasets").join(e.file_name())).unwrap();
        }
    }
    small_facebook(&shared.join("musae-facebook"), &root.join("shared/datasets/musae-facebook"), 3000);
    std::fs::copy(shared.join("snap/facebook_combined.txt.gz"), cwd.join("edges.txt.gz")).unwrap();
    std::fs::write(cwd.join("ids.txt"), (0..100).map(|i| format!("{}\n", i * 7)).collect::<String>()).unwrap();
    std::fs::copy(repo.join("profiles/local.toml"), cwd.join("profiles/local.toml")).unwrap();

    let sshd = sshd::Sshd::start();
    let lab = std::fs::read_to_string(sshd.profile(4, "")).unwrap();
    std::fs::write(cwd.join("profiles/lab-example.toml"), &lab).unwrap();
    std::fs::write(cwd.join("profiles/lab.toml"), &lab).unwrap();

    let ogb = import_support::ogb_files_from_text(&import_support::cora_text(), "arxiv");
    let zip = root.join("arxiv.zip");
    import_support::write_zip(&zip, &ogb);
    let files = HashMap::from([
        ("/arxiv.zip".to_string(), std::fs::read(&zip).unwrap()),
        ("/cora.npz".to_string(), std::fs::read(shared.join("gnn-benchmark/cora.npz")).unwrap()),
        ("/soc-Slashdot0902.txt.gz".to_string(), small_edge_list(&shared.join("snap/soc-Slashdot0902.txt.gz"), 20_000)),
    ]);
    let port = serve(files);
    let served =
        BTreeMap::from([("ogbn-arxiv", "arxiv.zip"), ("cora", "cora.npz"), ("slashdot", "soc-Slashdot0902.txt.gz")]);
    let registry_file = root.join("registry.toml");
    std::fs::write(&registry_file, registry(port, &served)).unwrap();
    World { _tmp: tmp, cwd, home, bin_dir, registry: registry_file, _sshd: sshd }
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
}

/// Runs `command` with bash in the world; SIGINT (to its process group, as
/// a terminal's Ctrl-C) once an `epoch` line is on stderr when `ctrl_c`.
fn run(w: &World, command: &str, ctrl_c: bool) -> Ran {
    let t0 = Instant::now();
    let path = format!("{}:{}", w.bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("bash")
        .args(["-o", "pipefail", "-c", command])
        .current_dir(&w.cwd)
        .env("PATH", path)
        .env("HOME", &w.home)
        .env("LEAPGNN_REGISTRY", &w.registry)
        .env_remove("LEAPGNN_DATA")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = t0 + COMMAND_LIMIT;
    let (mut stderr, mut pressed) = (String::new(), false);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => {
                if ctrl_c && !pressed && l.trim_start().starts_with("epoch") {
                    pressed = true;
                    let _ = Command::new("kill").args(["-s", "INT", "--", &format!("-{pid}")]).status();
                }
                stderr.push_str(&l);
                stderr.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{pid}")]).status();
                let _ = child.wait();
                panic!("`{command}` ran past {COMMAND_LIMIT:?}; stderr so far:\n{stderr}");
            }
        }
    }
    // Its stderr closed is not its end: a command may close or redirect it first.
    let status = import_support::bounded::wait_within(
        &mut child,
        COMMAND_LIMIT,
        &format!("`{command}` after its stderr closed"),
    );
    if ctrl_c {
        assert!(pressed, "`{command}`: no `epoch` line to press Ctrl-C at:\n{stderr}");
        assert!(
            stderr.contains("stopped on request after iteration"),
            "`{command}`: Ctrl-C did not stop it:\n{stderr}"
        );
    }
    let stdout = import_support::bounded::join_within(
        stdout,
        import_support::bounded::PIPE_LIMIT,
        &format!("`{command}`'s stdout to close"),
    );
    Ran { code: status.code(), stdout, stderr, seconds: t0.elapsed().as_secs_f64() }
}

fn namespaces_allowed() -> bool {
    use bounded::Bounded;
    let listed = Command::new("ip").args(["netns", "list"]).try_output_in(bounded::QUICK_LIMIT, "ip netns list");
    listed.is_ok_and(|o| o.status.success())
}

#[test]
fn every_readme_command_runs_as_written() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let lines = commands(&readme);
    assert!(lines.len() > 60, "only {} command lines found: is the extraction broken?", lines.len());
    let w = world();
    let mut skipped = Vec::new();
    let mut times = Vec::new();
    for l in &lines {
        if let Some(why) = l.comment.find(NOT_RUN).map(|i| l.comment[i + NOT_RUN.len()..].trim()) {
            assert!(!why.is_empty(), "README.md:{}: `{NOT_RUN}` without a reason", l.at);
            skipped.push(format!("README.md:{}: {} ({why})", l.at, l.command));
            continue;
        }
        if l.command == "cargo test --release" {
            let ci = std::fs::read_to_string(repo.join(".ci/run")).unwrap();
            assert!(ci.lines().any(|c| c.trim() == l.command), ".ci/run does not run `{}`", l.command);
            continue;
        }
        // The test builds leapgnn as `cargo run --release` would; as root, sudo is a no-op.
        let mut command = l.command.replacen("cargo run --release --", "leapgnn", 1);
        if let Some(rest) = command.strip_prefix("sudo ") {
            if command.contains("emulated-cluster") && !namespaces_allowed() {
                println!("README.md:{}: skipped here: network namespaces are not allowed (CI runs as root)", l.at);
                continue;
            }
            command = rest.to_string();
        }
        // `VAR=value cargo bench` is a cargo command too.
        let program = command.split_whitespace().find(|w| !w.contains('=')).unwrap_or("");
        assert!(
            program != "cargo",
            "README.md:{}: `{}`: cargo commands other than run/test need `{NOT_RUN} <why>`",
            l.at,
            l.command
        );
        let r = run(&w, &command, l.comment.contains("Ctrl-C"));
        println!("{:>7.1} s  README.md:{}: {}", r.seconds, l.at, l.command);
        assert_eq!(
            r.code,
            Some(0),
            "README.md:{}: `{}` failed\n--- stdout\n{}\n--- stderr\n{}",
            l.at,
            l.command,
            r.stdout,
            r.stderr
        );
        if command.contains("--json") && !command.contains("--json-stream") && !command.contains('|') {
            let v: Result<serde_json::Value, _> = serde_json::from_str(r.stdout.trim());
            assert!(
                v.is_ok_and(|v| v.is_object()),
                "README.md:{}: `{}`: stdout is not one JSON object:\n{}",
                l.at,
                l.command,
                r.stdout
            );
        }
        times.push(r.seconds);
    }
    println!(
        "{} commands ran in {:.0} s; not run in CI ({}):\n{}",
        times.len(),
        times.iter().sum::<f64>(),
        skipped.len(),
        skipped.join("\n")
    );
    assert!(skipped.len() <= 8, "the not-run list grew to {}: {skipped:#?}", skipped.len());
}
