//! The job's secrets never cross the control connection, and strangers on the
//! driver's port cannot stall the admission of the real workers.

#[path = "support/bounded.rs"]
mod bounded;
#[path = "support/capture.rs"]
mod capture;
#[path = "support/dropped.rs"]
mod dropped;

use bounded::{Bounded, QUICK_LIMIT, STOP_LIMIT, join_within};
use capture::Capture;
use leapgnn::cluster::driver::{DriverOptions, run_job};
use leapgnn::cluster::job_key;
use leapgnn::cluster::{Launcher, LocalLauncher, WorkerProcess, WorkerSpec};
use leapgnn::comm::{Deadline, auth};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

fn opts() -> DriverOptions {
    // Before any driver runs: see `logged`.
    log_subscriber();
    DriverOptions {
        start_timeout: Duration::from_secs(30),
        silence_timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

/// Two workers that build the mesh and measure each link (small messages).
fn probe_job() -> serde_json::Value {
    serde_json::json!({"task": "probe", "probe": {"bytes": 4096, "repeats": 1, "timeout_ms": 20000}})
}

/// Copies bytes from `a` to `b`, appending them to `record`, until either side closes.
fn pump(mut a: TcpStream, mut b: TcpStream, record: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 16 << 10];
    while let Ok(n) = a.read(&mut buf) {
        if n == 0 {
            break;
        }
        record.lock().unwrap().extend_from_slice(&buf[..n]);
        if b.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// Starts the workers with a recording proxy between them and the driver, and
/// keeps the tokens the driver handed out (which a network observer never sees).
struct ViaProxy {
    inner: LocalLauncher,
    proxy: Mutex<Option<SocketAddr>>,
    record: Arc<Mutex<Vec<u8>>>,
    tokens: Mutex<Vec<String>>,
}

impl ViaProxy {
    fn proxy_to(&self, driver: SocketAddr) -> SocketAddr {
        *self.proxy.lock().unwrap().get_or_insert_with(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let record = self.record.clone();
            thread::spawn(move || {
                for down in l.incoming().map_while(Result::ok) {
                    let up = TcpStream::connect(driver).unwrap();
                    let (d2, u2, r) = (down.try_clone().unwrap(), up.try_clone().unwrap(), record.clone());
                    thread::spawn(move || pump(down, up, r));
                    let r = record.clone();
                    thread::spawn(move || pump(u2, d2, r));
                }
            });
            addr
        })
    }
}

impl Launcher for ViaProxy {
    fn name(&self) -> &'static str {
        "via-proxy"
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        self.tokens.lock().unwrap().push(spec.token.clone());
        let spec = WorkerSpec { driver: self.proxy_to(spec.driver), ..spec.clone() };
        self.inner.launch(&spec)
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every run of at least 16 hex digits in the recording, decoded.
fn hex_runs(rec: &[u8]) -> Vec<Vec<u8>> {
    rec.split(|b| !b.is_ascii_hexdigit())
        .filter(|r| r.len() >= 32)
        .filter_map(|r| job_key::from_hex(std::str::from_utf8(r).ok()?))
        .collect()
}

#[test]
fn a_recording_of_the_control_connection_holds_no_secret_and_admits_no_one() {
    let l = ViaProxy {
        inner: LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![]).with_log(Arc::new(|l| eprintln!("{l}"))),
        proxy: Mutex::new(None),
        record: Arc::new(Mutex::new(Vec::new())),
        tokens: Mutex::new(Vec::new()),
    };
    let done = run_job(&l, 2, &probe_job(), &opts(), &AtomicBool::new(false), |_| {}).unwrap();
    // The workers built the mesh with the derived key and measured their link.
    assert!(done.iter().any(|d| d["links"].as_array().is_some_and(|l| !l.is_empty())), "{done:?}");

    let rec = l.record.lock().unwrap().clone();
    let text = String::from_utf8_lossy(&rec);
    let tokens = l.tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0], tokens[1], "one token per job");
    let token = &tokens[0];
    let salt_hex = text.split("\"mesh_salt\":\"").nth(1).and_then(|s| s.split('"').next()).expect("a job was sent");
    let mesh_key = job_key::mesh_key(token, &job_key::from_hex(salt_hex).unwrap());
    assert!(rec.len() > 1000, "the proxy recorded the whole exchange ({} bytes)", rec.len());
    for (what, needle) in [
        ("the token", token.as_bytes().to_vec()),
        ("the token's bytes", job_key::from_hex(token).unwrap()),
        ("the mesh key", mesh_key.clone()),
        ("the mesh key in hex", job_key::to_hex(&mesh_key).into_bytes()),
    ] {
        assert!(!contains(&rec, &needle), "the recording contains {what}");
    }

    // Nothing recorded (nonces, proofs, the salt) works as the mesh secret: a
    // newcomer offering any of it is refused by a worker holding the real key.
    let candidates = hex_runs(&rec);
    let n = candidates.len();
    assert!(n >= 6, "nonces, proofs and salt were recorded: {n}");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = thread::spawn(move || {
        let mut refused = 0;
        for s in listener.incoming().take(n) {
            let s = s.unwrap();
            refused += auth::accept(&s, &mesh_key, 2, 0, &Deadline::after(Duration::from_secs(10))).is_err() as usize;
        }
        refused
    });
    for c in &candidates {
        let s = TcpStream::connect(addr).unwrap();
        let r = auth::connect(&s, c, 2, 1, 0, &Deadline::after(Duration::from_secs(10)));
        assert!(r.is_err(), "a recorded value was accepted as the mesh secret");
    }
    assert_eq!(join_within(acceptor, STOP_LIMIT, "the acceptor of the recorded values"), n);
}

#[test]
fn with_encrypt_the_control_connection_shows_nothing_after_the_handshake() {
    let l = ViaProxy {
        inner: LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![]).with_log(Arc::new(|_| {})),
        proxy: Mutex::new(None),
        record: Arc::new(Mutex::new(Vec::new())),
        tokens: Mutex::new(Vec::new()),
    };
    let sealed = DriverOptions { encrypt: true, ..opts() };
    let done = run_job(&l, 2, &probe_job(), &sealed, &AtomicBool::new(false), |_| {}).unwrap();
    assert!(done.iter().any(|d| d["links"].as_array().is_some_and(|l| !l.is_empty())), "{done:?}");
    let rec = l.record.lock().unwrap().clone();
    assert!(rec.len() > 1000, "the proxy recorded the whole exchange ({} bytes)", rec.len());
    // The handshake (hello, challenge, proof) is in clear; the job, the mesh
    // addresses, the reports and the results are not.
    assert!(contains(&rec, b"\"Hello\"") && contains(&rec, b"\"Proof\""), "the handshake is recorded");
    for needle in ["mesh_salt", "Listening", "probe", "Heartbeat", "Done", "links"] {
        assert!(!contains(&rec, needle.as_bytes()), "{needle} crossed the control connection in clear");
    }
    assert!(l.tokens.lock().unwrap().iter().all(|t| job_key::wants_encryption(t)));
}

type Crowd = (Vec<TcpStream>, Arc<AtomicBool>);

/// Opens `silent` connections that say nothing and `dribbling` ones that send
/// a byte a second to `addr`; they live until the returned flag is set.
fn strangers(addr: SocketAddr, silent: usize, dribbling: usize) -> Crowd {
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..dribbling {
        let Ok(mut s) = TcpStream::connect(addr) else { continue };
        let stop = stop.clone();
        thread::spawn(move || {
            // A plausible frame length, then a byte at a time.
            let _ = s.write_all(&200u32.to_le_bytes());
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && s.write_all(b"{").is_ok() {
                thread::sleep(Duration::from_secs(1));
            }
        });
    }
    let quiet = (0..silent).filter_map(|_| TcpStream::connect(addr).ok()).collect();
    (quiet, stop)
}

/// Crowds the driver's port with strangers while the real workers start
/// (the driver only accepts once all are launched, so the crowd connects aside).
struct Crowded {
    inner: LocalLauncher,
    crowd: Mutex<Option<thread::JoinHandle<Crowd>>>,
}

impl Launcher for Crowded {
    fn name(&self) -> &'static str {
        "crowded"
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let driver = spec.driver;
        self.crowd.lock().unwrap().get_or_insert_with(|| thread::spawn(move || strangers(driver, 200, 10)));
        self.inner.launch(spec)
    }
}

/// Held by the test that measures the driver's memory, which another's
/// workers and threads in this process would grow.
static MEASURING: Mutex<()> = Mutex::new(());

#[test]
fn strangers_on_the_driver_port_do_not_delay_the_workers() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let l = Crowded {
        inner: LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![]).with_log(Arc::new(|l| eprintln!("{l}"))),
        crowd: Mutex::new(None),
    };
    // A stranger now holds its handshake for an hour, far past the workers'
    // start timeout: had a worker waited behind one, the job would fail with
    // a start timeout. No stopwatch: the run's own deadline is the judge.
    let patient =
        DriverOptions { start_timeout: Duration::from_secs(120), admit_deadline: Duration::from_secs(3600), ..opts() };
    let rss0 = leapgnn::util::rss_bytes().unwrap();
    let done = run_job(&l, 2, &probe_job(), &patient, &AtomicBool::new(false), |_| {})
        .expect("the workers were admitted before their start timeout despite the strangers");
    assert_eq!(done.len(), 2);
    // A few KiB read per stranger at most: the driver's memory stays flat
    // (other tests of this binary share the process, hence the margin).
    let grew = leapgnn::util::rss_bytes().unwrap().saturating_sub(rss0);
    eprintln!("admission with 210 strangers: driver RSS grew {} KiB", grew >> 10);
    assert!(grew < 32 << 20, "the driver's memory grew {} MiB with strangers at the door", grew >> 20);
    let crowd = l.crowd.lock().unwrap().take().unwrap();
    let (quiet, stop) = join_within(crowd, STOP_LIMIT, "the strangers' connecting");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    // Every stranger was dropped (evicted, or cut when admission ended) and none got an answer.
    for mut s in quiet {
        if let Err(e) = dropped::wait_dropped(&mut s, Duration::from_secs(5)) {
            panic!("a stranger was neither dropped nor refused: {e}");
        }
    }
}

/// A real worker of rank 0 for the driver at `addr`, handed a fresh token
/// on stdin; through `sh -c WRAPPER` (which execs it: the same pid) if given.
fn start_worker(
    wrapper: Option<&str>,
    addr: SocketAddr,
    data: &std::path::Path,
    stderr: std::process::Stdio,
) -> std::process::Child {
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    let mut cmd = match wrapper {
        Some(script) => {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", script, bin]);
            c
        }
        None => std::process::Command::new(bin),
    };
    let mut w = cmd
        .arg("--data-dir")
        .arg(data)
        .args(["worker", "--driver", &addr.to_string(), "--rank", "0", "--timeout", "10"])
        .stdin(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    writeln!(w.stdin.take().unwrap(), "{}", job_key::random_hex(job_key::TOKEN_BYTES)).unwrap();
    w
}

/// Something at the driver's address that answers a worker's hello with a
/// Shutdown has proved nothing: the worker must not obey it (it used to
/// exit 0 at once, as if its job were done).
#[test]
fn a_worker_obeys_no_shutdown_before_the_driver_proves_the_token() {
    use leapgnn::cluster::{ControlConn, ToDriver, ToWorker};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let impostor = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut c = ControlConn::new(s, "worker");
        assert!(matches!(c.recv::<ToDriver>().unwrap(), ToDriver::Hello(_)));
        c.send(&ToWorker::Shutdown).unwrap();
        // Open until the worker hangs up, so that it reads the Shutdown, not an end of stream.
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        assert!(c.recv::<ToDriver>().is_err(), "the worker said more after an unproved Shutdown");
    });
    let tmp = tempfile::tempdir().unwrap();
    let w = start_worker(None, addr, tmp.path(), std::process::Stdio::piped());
    let out = bounded::output_within(w, STOP_LIMIT, "the worker told Shutdown by an impostor");
    join_within(impostor, STOP_LIMIT, "the impostor driver");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "the worker obeyed an unproved Shutdown: {err}");
    assert!(err.contains("could not prove it holds this job's token"), "{err}");
}

/// The soft core-file limit of process `pid`, as /proc shows it ("0", "unlimited", ...).
fn core_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max core file size")).unwrap();
    line["Max core file size".len()..].split_whitespace().next().unwrap().to_string()
}

/// A process that holds the job token writes no core file, whatever limit it
/// was started with: a crash would otherwise put the token on disk.
#[test]
fn neither_the_worker_nor_the_driver_can_write_the_token_into_a_core_file() {
    use leapgnn::cluster::{ControlConn, ToDriver};
    // The worker starts with core files allowed, as a host's login shell may leave it.
    let raise = "ulimit -S -c unlimited && exec \"$0\" \"$@\"";
    let probe = std::process::Command::new("sh")
        .args(["-c", raise, "cat", "/proc/self/limits"])
        .output_in(QUICK_LIMIT, "sh raising its core-file limit");
    let shown = String::from_utf8_lossy(&probe.stdout);
    assert!(shown.lines().any(|l| l.starts_with("Max core file size") && l.contains("unlimited")), "{shown}");

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut w = start_worker(Some(raise), addr, tmp.path(), std::process::Stdio::null());
    let s = bounded::accept_within(&l, STOP_LIMIT, "the worker's dial to its driver");
    let mut c = ControlConn::new(s, "worker");
    let ToDriver::Hello(hello) = c.recv::<ToDriver>().unwrap() else { panic!("no hello") };
    assert_eq!(hello.pid, w.id(), "exec keeps the pid");
    // The worker holds the token now (it has read it and proved nothing yet).
    assert_eq!(core_limit(hello.pid), "0", "the worker kept the core-file limit it was started with");
    drop(c);
    w.kill().unwrap();
    w.wait().unwrap();

    // The driver: this test process, with core files allowed before the job.
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read or write one live local `rlimit`.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_CORE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_CORE, &limit), 0);
    }
    assert_ne!(core_limit(std::process::id()), "0");
    let launcher = LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![]).with_log(Arc::new(|_| {}));
    run_job(&launcher, 1, &serde_json::json!({"task": "ping"}), &opts(), &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(core_limit(std::process::id()), "0", "the driver kept core files on");
}

/// Before the real workers start, a stranger sends the driver's port a
/// message naming a variant of its own; the workers wait (a FIFO their
/// wrapper reads) until the driver has refused the stranger and dropped it.
struct Injecting {
    inner: LocalLauncher,
    fifo: std::path::PathBuf,
    payload: Vec<u8>,
    /// What the stranger does after its message, before it is dropped.
    then: fn(&mut TcpStream),
    stranger: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Launcher for Injecting {
    fn name(&self) -> &'static str {
        "injecting"
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let (driver, fifo, payload, then) = (spec.driver, self.fifo.clone(), self.payload.clone(), self.then);
        self.stranger.lock().unwrap().get_or_insert_with(|| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(driver).unwrap();
                s.write_all(&(payload.len() as u32).to_le_bytes()).unwrap();
                s.write_all(&payload).unwrap();
                then(&mut s);
                // Refused and dropped: the driver has handled (and logged) it.
                if let Err(e) = dropped::wait_dropped(&mut s, Duration::from_secs(20)) {
                    panic!("the stranger: {e}");
                }
                std::fs::write(&fifo, b"go\n").unwrap();
            })
        });
        self.inner.launch(spec)
    }
}

/// A FIFO in `dir` and a wrapper that starts a worker once a line is
/// written to it: the stranger's turn comes first.
fn waiting_worker(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let fifo = dir.join("go");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status_in(QUICK_LIMIT, "mkfifo").success());
    let wrapper = dir.join("wait-then-work.sh");
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    std::fs::write(&wrapper, format!("#!/bin/sh\nread go < '{}'\nexec '{bin}' \"$@\"\n", fifo.display())).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (fifo, wrapper)
}

/// Strangers choose what the driver logs about them: a message naming a
/// variant of its own came back in serde's error as it was sent, so anyone
/// who reaches the driver's port could write terminal control sequences
/// (a title, colours, a cleared screen) and whole forged lines into the
/// operator's terminal or the dashboard's log. What they sent is shown
/// escaped, on the one line of the refusal.
#[test]
fn a_stranger_cannot_write_control_characters_or_lines_into_the_drivers_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (fifo, wrapper) = waiting_worker(tmp.path());
    let forged = "epoch   9/9  loss 0.0000  FORGED";
    let variant = format!("\u{1b}]0;PWNED\u{7}\u{1b}[2J\r\n{forged}");
    let l = Injecting {
        inner: LocalLauncher::new(&wrapper, vec![]).with_log(Arc::new(|l| eprintln!("{l}"))),
        fifo,
        payload: serde_json::to_vec(&serde_json::json!({ variant: 1 })).unwrap(),
        then: |_| {},
        stranger: Mutex::new(None),
    };
    let ping = serde_json::json!({"task": "ping"});
    let (done, log) = logged(|| run_job(&l, 1, &ping, &opts(), &AtomicBool::new(false), |_| {}).unwrap());
    join_within(l.stranger.lock().unwrap().take().unwrap(), STOP_LIMIT, "the stranger");
    assert_eq!(done.len(), 1, "the worker was admitted after the stranger");
    let refusal: Vec<&str> = log.lines().filter(|l| l.contains("refused a control connection")).collect();
    assert_eq!(refusal.len(), 1, "{log}");
    assert!(refusal[0].contains("PWNED") && refusal[0].contains(forged), "the refusal shows what came: {log:?}");
    let control: Vec<char> = log.chars().filter(|c| c.is_control() && *c != '\n').collect();
    assert!(control.is_empty(), "control characters from a stranger reached the log: {control:?} in {log:?}");
    assert!(!log.lines().any(|l| l.starts_with(forged)), "a stranger wrote a line of its own: {log:?}");
}

thread_local! {
    /// Where this thread's log goes while `logged` reads it.
    static THREAD_LOG: std::cell::RefCell<Option<Capture>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns, with its result, what was logged on this thread
/// meanwhile (the driver logs on the thread that runs it).
///
/// Not with a subscriber of this thread's own (`with_default`): tracing
/// caches whether an event is wanted once per callsite for the whole
/// process, asked of the thread that reaches it first. With one dispatcher
/// registered (the scoped one), tracing-core 0.1.36 asks that thread's
/// default (`Rebuilder::JustOne`, tokio-rs/tracing#3611), so a concurrent test
/// that reached the driver's "refused a control connection" warning first,
/// on a thread with no subscriber, cached "never", and this test's
/// subscriber saw nothing: an empty log. One global subscriber, installed
/// before any driver runs (`opts`), answers for every thread alike, and
/// only this thread's lines are kept.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    log_subscriber();
    let buf = Capture::default();
    THREAD_LOG.with(|l| *l.borrow_mut() = Some(buf.clone()));
    let out = f();
    THREAD_LOG.with(|l| l.borrow_mut().take());
    (out, buf.text())
}

/// The one subscriber of this test binary, writing into `THREAD_LOG`.
fn log_subscriber() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| tracing_subscriber::fmt().with_writer(|| ThreadLog).with_ansi(false).init());
}

/// The log of the thread that writes, if `logged` reads it; else dropped.
struct ThreadLog;

impl Write for ThreadLog {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        THREAD_LOG.with(|l| l.borrow_mut().as_mut().map_or(Ok(b.len()), |c| c.write(b)))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A hello is unauthenticated: a stranger's, naming another build, must
/// not end the job as a proven worker of another build does
/// (`DriverError::OtherBuild`); it is answered, fails the proof, and is
/// dropped, and the real worker is admitted after it.
#[test]
fn a_strangers_hello_naming_another_build_ends_nothing() {
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (fifo, wrapper) = waiting_worker(tmp.path());
    let hello = leapgnn::cluster::Hello { rank: 0, pid: 1, version: "0.0.1+stale".into(), nonce: "00".into() };
    let l = Injecting {
        inner: LocalLauncher::new(&wrapper, vec![]).with_log(Arc::new(|l| eprintln!("{l}"))),
        fifo,
        payload: serde_json::to_vec(&leapgnn::cluster::ToDriver::Hello(hello)).unwrap(),
        then: |s| {
            let mut c = leapgnn::cluster::ControlConn::new(s.try_clone().unwrap(), "driver");
            let challenge = c.recv::<leapgnn::cluster::ToWorker>().unwrap();
            assert!(matches!(challenge, leapgnn::cluster::ToWorker::Challenge { .. }), "{challenge:?}");
            c.send(&leapgnn::cluster::ToDriver::Proof("00".repeat(32))).unwrap();
        },
        stranger: Mutex::new(None),
    };
    let ping = serde_json::json!({"task": "ping"});
    let done = run_job(&l, 1, &ping, &opts(), &AtomicBool::new(false), |_| {}).expect("the stranger ended nothing");
    join_within(l.stranger.lock().unwrap().take().unwrap(), STOP_LIMIT, "the stranger");
    assert_eq!(done.len(), 1, "the worker was admitted after the stranger");
}

/// Notes the driver's control address its workers are handed.
struct Noting {
    inner: LocalLauncher,
    driver: Mutex<Option<SocketAddr>>,
}

impl Launcher for Noting {
    fn name(&self) -> &'static str {
        "noting"
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        *self.driver.lock().unwrap() = Some(spec.driver);
        self.inner.launch(spec)
    }
}

/// The control listener served admission only, yet stayed open for the
/// whole run: the kernel completed strangers' connections into its backlog
/// and nothing ever accepted or closed them (hundreds, held for hours on a
/// long run). Once the workers are admitted, the port refuses.
#[test]
fn after_admission_the_drivers_control_port_takes_no_connection() {
    let l = Noting {
        inner: LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![]).with_log(Arc::new(|l| eprintln!("{l}"))),
        driver: Mutex::new(None),
    };
    let mut knock = None;
    // The driver's loop reports events only after admission, and cannot end
    // the run while this callback runs: the knock happens mid-run.
    let done = run_job(&l, 2, &probe_job(), &opts(), &AtomicBool::new(false), |_| {
        if knock.is_none() {
            let driver = l.driver.lock().unwrap().expect("the workers were launched");
            knock = Some(match TcpStream::connect(driver) {
                Err(e) => Err(e.kind()),
                // Open: only a bounded wait tells "held" from "closed".
                Ok(mut s) => Ok(dropped::wait_dropped(&mut s, Duration::from_secs(5))),
            });
        }
    })
    .unwrap();
    assert_eq!(done.len(), 2, "the job still ran to its end");
    match knock.expect("the driver reported an event") {
        Err(std::io::ErrorKind::ConnectionRefused) => {}
        Ok(Ok(())) => {}
        other => panic!("a connection to the driver's port after admission was held open: {other:?}"),
    }
}
