//! Workers as separate processes: this test binary re-executes itself as the
//! peers (ranks 1 and 2), so a worker can really be killed.

#[path = "support/bounded.rs"]
mod bounded;
mod comm_support;

use leapgnn::comm::{Category, CommError, Mesh, MeshConfig};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROLE: &str = "LEAPGNN_COMM_TEST_PEER";
const SECRET: &str = "LEAPGNN_COMM_TEST_SECRET";
const TIMEOUT: Duration = Duration::from_secs(10);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The peer side, run in a child process. Protocol on stdin/stdout, one line each:
/// prints `ADDR a`; reads `ADDRS a0,a1,..`; joins the mesh; all-reduces and prints
/// `SUM x`; reads `GO`; all-reduces again and prints `ERR secs message` or `OK`.
#[test]
#[ignore = "a helper: runs only as the child process of a_killed_worker_is_named_by_the_survivors"]
fn peer_process() {
    let Ok(rank) = std::env::var(ROLE) else { return };
    let rank: usize = rank.parse().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("ADDR {}", listener.local_addr().unwrap());
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    let addrs: Vec<SocketAddr> =
        line.trim().strip_prefix("ADDRS ").unwrap().split(',').map(|a| a.parse().unwrap()).collect();
    let mut cfg = MeshConfig::new(rank, addrs, unhex(&std::env::var(SECRET).unwrap()));
    cfg.connect_timeout = TIMEOUT;
    let mesh = Mesh::establish(listener, &cfg).unwrap();
    let mut g = vec![rank as f32 + 1.0; 1000];
    mesh.all_reduce_sum(&mut g, Category::Gradients, TIMEOUT).unwrap();
    println!("SUM {}", g[999]);
    line.clear();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO");
    let t = Instant::now();
    match mesh.all_reduce_sum(&mut g, Category::Gradients, TIMEOUT) {
        Ok(()) => println!("OK"),
        Err(e) => println!("ERR {:.3} {e}", t.elapsed().as_secs_f64()),
    }
}

/// Child processes that are killed when the test ends, however it ends.
struct Peers(Vec<(Child, ChildStdin)>);

impl Drop for Peers {
    fn drop(&mut self) {
        for (c, _) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_killed_worker_is_named_by_the_survivors_within_the_timeout() {
    let secret = comm_support::secret();
    let mut peers = Peers(Vec::new());
    let mut lines = vec![None];
    for rank in 1..=2 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "peer_process", "--nocapture", "--test-threads=1"])
            .env(ROLE, rank.to_string())
            .env(SECRET, hex(&secret))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || out.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        lines.push(Some(rx));
        let stdin = child.stdin.take().unwrap();
        peers.0.push((child, stdin));
    }
    // What follows `prefix` in the next line of worker `rank` that has it.
    let next = |rank: usize, prefix: &str| -> String {
        let from = lines[rank].as_ref().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = from.recv_timeout(left).unwrap_or_else(|_| panic!("no {prefix:?} line from worker {rank}"));
            // libtest's "test peer_process ... " may share the first line.
            if let Some(at) = l.find(prefix) {
                return l[at + prefix.len()..].trim().to_string();
            }
        }
    };

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut addrs = vec![listener.local_addr().unwrap()];
    for rank in 1..=2 {
        addrs.push(next(rank, "ADDR ").parse().unwrap());
    }
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    for (_, stdin) in &mut peers.0 {
        writeln!(stdin, "ADDRS {list}").unwrap();
    }
    let mut cfg = MeshConfig::new(0, addrs.clone(), secret);
    cfg.connect_timeout = TIMEOUT;
    let mesh = Mesh::establish(listener, &cfg).unwrap();
    let mut g = vec![1.0f32; 1000];
    mesh.all_reduce_sum(&mut g, Category::Gradients, TIMEOUT).unwrap();
    assert_eq!(g[999], 6.0);
    assert_eq!(next(1, "SUM "), "6");
    assert_eq!(next(2, "SUM "), "6");

    // Kill worker 2, then ask the survivors for another all-reduce.
    let (victim, _) = &mut peers.0[1];
    victim.kill().unwrap();
    victim.wait().unwrap();
    writeln!(peers.0[0].1, "GO").unwrap();
    let e = mesh.all_reduce_sum(&mut g, Category::Gradients, TIMEOUT).unwrap_err();
    let named = format!("worker 2 ({})", addrs[2]);
    assert!(e.to_string().contains(&named), "{e}");
    // Noticed from the closed connection, not by waiting out TIMEOUT: what
    // that means is the kind of error, not how long a loaded machine took.
    assert!(!matches!(e, CommError::Timeout { .. }), "worker 0 waited out the {TIMEOUT:?} timeout: {e}");

    let report = next(1, "ERR ");
    let (_secs, msg) = report.split_once(' ').unwrap();
    assert!(msg.contains(&named), "worker 1 said: {msg}");
    assert!(!msg.starts_with("timed out"), "worker 1 waited out the {TIMEOUT:?} timeout: {msg}");
    eprintln!("worker 0: {e}\nworker 1: {msg}");
    drop(mesh);
    let (survivor, _) = &mut peers.0[0];
    let ended = bounded::wait_within(survivor, bounded::STOP_LIMIT, "worker 1's exit after reporting");
    assert!(ended.success(), "worker 1 must exit cleanly after reporting");
}
