//! `download` against a real HTTP server on 127.0.0.1 started by the test,
//! serving an OGB-layout zip built from the shared Cora data: HTTP errors,
//! checksum mismatch, a connection cut mid-file (then resumed with Range),
//! retries, and a full disk (tmpfs, when mounting is permitted).

mod import_support;

use import_support::bounded::{Bounded, QUICK_LIMIT, joined_within};
use import_support::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Ok,
    Status(u16),
    /// Send the headers for the whole (remaining) body, half of it, then close.
    DropHalf,
    /// Serve other bytes of the same length.
    Wrong,
    /// Send the headers and half the body, then the rest once `release`d.
    Hold,
    /// 200 with an HTML page instead of the file (a proxy's or a portal's).
    Page,
    /// 302 back to the same URL, forever.
    Loop,
    /// The file followed by 1 MiB more; `announce`: Content-Length says so,
    /// else the body ends when the connection closes.
    Longer {
        announce: bool,
    },
    /// 429 with `Retry-After: 3` to the first request, then the file.
    Busy,
    /// The same with `Retry-After` as an HTTP date 3 s after the next whole second.
    BusyUntil,
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    /// The next this-many requests drop halfway, whatever the mode.
    drops_left: usize,
    requests: usize,
    ranges: Vec<Option<String>>,
    /// When each request came.
    times: Vec<std::time::Instant>,
    /// The same, by the wall clock (what an HTTP date is compared with).
    clock: Vec<SystemTime>,
    /// The date the last `BusyUntil` 429 asked to wait for.
    retry_at: Option<SystemTime>,
    released: bool,
}

struct Server {
    port: u16,
    state: Arc<(Mutex<State>, std::sync::Condvar)>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(files: HashMap<String, Vec<u8>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state =
            Arc::new((Mutex::new(State { mode: Some(Mode::Ok), ..Default::default() }), std::sync::Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(files);
        let (st, sp) = (state.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (st, files) = (st.clone(), files.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &st, &files);
                });
            }
        });
        Server { port, state, stop, accept: Some(accept) }
    }
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
    fn set(&self, mode: Mode) {
        self.state.0.lock().unwrap().mode = Some(mode);
    }
    fn drop_next(&self, n: usize) {
        self.state.0.lock().unwrap().drops_left = n;
    }
    fn requests(&self) -> usize {
        self.state.0.lock().unwrap().requests
    }
    fn ranges(&self) -> Vec<Option<String>> {
        self.state.0.lock().unwrap().ranges.clone()
    }
    fn times(&self) -> Vec<std::time::Instant> {
        self.state.0.lock().unwrap().times.clone()
    }
    fn clock(&self) -> Vec<SystemTime> {
        self.state.0.lock().unwrap().clock.clone()
    }
    fn retry_at(&self) -> Option<SystemTime> {
        self.state.0.lock().unwrap().retry_at
    }
    /// Lets every held response (and every later one) finish.
    fn release(&self) {
        self.state.0.lock().unwrap().released = true;
        self.state.1.notify_all();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
        // Bounded, and no panic: this may run while a test unwinds. A loop that
        // never wakes is left behind, as the test's end ends it.
        if let Some(h) = self.accept.take() {
            let _ = joined_within(h, QUICK_LIMIT);
        }
    }
}

fn serve(
    conn: TcpStream,
    state: &(Mutex<State>, std::sync::Condvar),
    files: &HashMap<String, Vec<u8>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let target = request.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or(target).to_owned();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("range")
        {
            range = Some(v.trim().to_owned());
        }
    }
    let (mode, nth) = {
        let mut s = state.0.lock().unwrap();
        s.requests += 1;
        s.ranges.push(range.clone());
        s.times.push(std::time::Instant::now());
        s.clock.push(SystemTime::now());
        let mode = if s.drops_left > 0 {
            s.drops_left -= 1;
            Mode::DropHalf
        } else {
            s.mode.unwrap()
        };
        (mode, s.requests)
    };
    let mut out = conn;
    let Some(body) = files.get(&path) else {
        return respond(&mut out, "404 Not Found", &[], b"no such file");
    };
    if mode == Mode::Loop {
        return respond(&mut out, "302 Found", &[format!("Location: {path}")], b"");
    }
    if mode == Mode::Page {
        return respond(&mut out, "200 OK", &[], b"<html><body>Please log in to continue</body></html>");
    }
    if mode == Mode::Busy && nth == 1 {
        return respond(&mut out, "429 Too Many Requests", &["Retry-After: 3".to_owned()], b"slow down");
    }
    if mode == Mode::BusyUntil && nth == 1 {
        // An HTTP date has whole seconds: the next one, then 3 more.
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 1 + 3;
        let at = UNIX_EPOCH + Duration::from_secs(secs);
        state.0.lock().unwrap().retry_at = Some(at);
        let header = format!("Retry-After: {}", httpdate::fmt_http_date(at));
        return respond(&mut out, "429 Too Many Requests", &[header], b"slow down");
    }
    if let Mode::Longer { announce } = mode {
        let mut long = body.clone();
        long.resize(body.len() + (1 << 20), b'x');
        let length = if announce { format!("Content-Length: {}\r\n", long.len()) } else { String::new() };
        write!(out, "HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n")?;
        // The client hangs up once it has seen enough: that write error is expected.
        out.write_all(&long)?;
        return out.flush();
    }
    if let Mode::Status(code) = mode {
        let reason = if code == 404 { "Not Found" } else { "Internal Server Error" };
        return respond(&mut out, &format!("{code} {reason}"), &[], b"nope");
    }
    let wrong: Vec<u8>;
    let body: &[u8] = if mode == Mode::Wrong {
        wrong = body.iter().map(|b| b ^ 0x55).collect();
        &wrong
    } else {
        body
    };
    let start: usize =
        range.as_deref().and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok()).unwrap_or(0);
    let (status, headers, part) = if start > 0 {
        let cr = format!("Content-Range: bytes {start}-{}/{}", body.len() - 1, body.len());
        ("206 Partial Content", vec![cr], &body[start..])
    } else {
        ("200 OK", vec![], body)
    };
    if mode == Mode::DropHalf || mode == Mode::Hold {
        // The headers for the whole part, and its first half.
        write!(out, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", part.len())?;
        for h in &headers {
            write!(out, "{h}\r\n")?;
        }
        out.write_all(b"\r\n")?;
        out.write_all(&part[..part.len() / 2])?;
        out.flush()?;
    }
    if mode == Mode::DropHalf {
        return out.shutdown(Shutdown::Both);
    }
    if mode == Mode::Hold {
        let s = state.0.lock().unwrap();
        let (s, _) = state.1.wait_timeout_while(s, Duration::from_secs(60), |s| !s.released).unwrap();
        drop(s);
        out.write_all(&part[part.len() / 2..])?;
        return out.flush();
    }
    respond(&mut out, status, &headers, part)
}

fn respond(out: &mut TcpStream, status: &str, headers: &[String], body: &[u8]) -> std::io::Result<()> {
    write!(out, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len())?;
    for h in headers {
        write!(out, "{h}\r\n")?;
    }
    out.write_all(b"\r\n")?;
    out.write_all(body)?;
    out.flush()
}

struct Fixture {
    dir: tempfile::TempDir,
    zip: PathBuf,
    server: Server,
    registry: PathBuf,
}

impl Fixture {
    /// A server holding `/ogb/cora.zip` and a registry entry `ogb-cora` for it
    /// (`with_sha`: with its sha256 and size, as a curated entry has).
    fn new(with_sha: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("cora.zip");
        write_zip(&zip, &ogb_files_from_text(&cora_text(), "cora"));
        let bytes = std::fs::read(&zip).unwrap();
        let sha = sha256_hex(&bytes);
        let len = bytes.len();
        let server = Server::start(HashMap::from([("/ogb/cora.zip".to_owned(), bytes)]));
        let registry = dir.path().join("registry.toml");
        let check = if with_sha { format!("sha256 = \"{sha}\"\nsize = {len}\n") } else { String::new() };
        let url = server.url("/ogb/cora.zip");
        std::fs::write(&registry, format!("[ogb-cora]\nformat = \"ogb\"\nurls = [\"{url}\"]\n{check}")).unwrap();
        Fixture { dir, zip, server, registry }
    }
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
    fn download(&self, extra: &[&str]) -> Out {
        let mut args = vec!["download", "ogb-cora", "--registry", self.registry.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        leapgnn(&self.data(), &args)
    }
    fn archive(&self) -> PathBuf {
        self.data().join("ogb-cora/dataset.lgnn")
    }
    fn part(&self) -> PathBuf {
        self.data().join("ogb-cora/download/cora.zip.part")
    }
    fn assert_nothing_in_place(&self) {
        assert!(!self.archive().exists(), "a dataset archive exists after a failed download");
        let dir = self.data().join("ogb-cora");
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                assert!(!name.contains(".tmp"), "temp file {name} left in {}", dir.display());
            }
        }
    }
    /// The result equals a `--from` import of the same zip.
    fn assert_matches_local_import(&self) {
        let other = self.dir.path().join("other");
        let j =
            ok_json(&other, &["download", "local", "--from", self.zip.to_str().unwrap(), "--format", "ogb", "--json"]);
        assert!(content(&self.archive()) == content(Path::new(j["path"].as_str().unwrap())));
    }
}

#[test]
fn http_errors_fail_cleanly_and_retries_are_bounded() {
    let f = Fixture::new(true);
    f.server.set(Mode::Status(404));
    f.download(&["--retries", "3"]).assert_error(1, &["404", "cora.zip", "leapgnn download ogb-cora --from PATH"]);
    assert_eq!(f.server.requests(), 1, "a 404 is not retried");
    f.assert_nothing_in_place();
    assert!(!f.data().join("ogb-cora").exists(), "a failed download that fetched nothing left a directory");

    f.server.set(Mode::Status(500));
    f.download(&["--retries", "1"]).assert_error(1, &["500", "gave up after 2 attempts"]);
    assert_eq!(f.server.requests(), 3, "a 500 is retried once");
    f.assert_nothing_in_place();

    f.server.set(Mode::Ok);
    let j = f.download(&[]).json();
    assert_eq!(
        (j["action"].as_str(), j["nodes"].as_u64(), j["edges"].as_u64()),
        (Some("downloaded"), Some(2708), Some(10556))
    );
    assert_eq!(j["source"], f.server.url("/ogb/cora.zip"));
    f.assert_matches_local_import();
    let n = f.server.requests();
    let again = f.download(&[]).json();
    assert_eq!(
        (again["action"].as_str(), f.server.requests()),
        (Some("present"), n),
        "a present dataset is not fetched"
    );
}

#[test]
fn checksum_mismatch_deletes_the_partial_file() {
    let f = Fixture::new(true);
    f.server.set(Mode::Wrong);
    let out = f.download(&["--retries", "0"]);
    out.assert_error(1, &["sha256 mismatch", "cora.zip.part", "rerun", "check the entry's sha256 and URL"]);
    assert!(!f.part().exists(), "the bad download was kept");
    f.assert_nothing_in_place();
    f.server.set(Mode::Ok);
    assert_eq!(f.download(&[]).json()["action"], "downloaded");
}

#[test]
fn a_cut_connection_is_resumed_by_the_rerun() {
    let f = Fixture::new(true);
    let total = std::fs::metadata(&f.zip).unwrap().len();
    f.server.set(Mode::DropHalf);
    f.download(&["--retries", "0"]).assert_error(1, &["rerun to resume"]);
    f.assert_nothing_in_place();
    let have = std::fs::metadata(f.part()).expect("the partial download is kept").len();
    assert_eq!(have, total / 2);

    f.server.set(Mode::Ok);
    let j = f.download(&[]).json();
    assert_eq!(j["action"], "downloaded");
    assert_eq!(
        f.server.ranges().last().unwrap().as_deref(),
        Some(format!("bytes={have}-").as_str()),
        "the rerun resumed"
    );
    assert!(!f.part().exists());
    f.assert_matches_local_import();
}

#[test]
fn cuts_within_one_run_are_resumed_by_the_retries() {
    let f = Fixture::new(false);
    f.server.drop_next(2);
    let out = f.download(&["--retries", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let ranges = f.server.ranges();
    assert_eq!(ranges.len(), 3);
    assert!(ranges[0].is_none() && ranges[1].is_some() && ranges[2].is_some(), "{ranges:?}");
    // No checksum in the registry: the computed one is reported.
    let sha = sha256_hex(&std::fs::read(&f.zip).unwrap());
    assert!(out.stderr.contains("no sha256 in the registry") && out.stderr.contains(&sha), "{}", out.stderr);
    f.assert_matches_local_import();
}

/// A tmpfs of `size` mounted on `dir` for the test's lifetime (root only).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .try_output_in(QUICK_LIMIT, "mount -t tmpfs")
            .is_ok_and(|o| o.status.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // No panic: this may run while a test unwinds.
        let _ = std::process::Command::new("umount").arg(&self.0).ended_in(QUICK_LIMIT);
    }
}

#[test]
fn a_full_disk_leaves_no_dataset_and_a_rerun_recovers() {
    let f = Fixture::new(true);
    let zip_len = std::fs::metadata(&f.zip).unwrap().len();
    assert!(zip_len > 256 << 10);
    // No room for the download itself.
    let Some(small) = Tmpfs::mount(&f.data(), "128k") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root); the disk-full case is not covered");
        return;
    };
    f.download(&["--retries", "0"]).assert_error(1, &["cora.zip.part", "No space left on device"]);
    f.assert_nothing_in_place();
    drop(small);
    // Room for the download but not for the 15.6 MB archive (dense: the CSR one takes 1 MB).
    let _fs = Tmpfs::mount(&f.data(), &format!("{}k", zip_len / 1024 + 2048)).expect("mounted before");
    f.download(&["--features", "dense"]).assert_error(1, &["No space left on device"]);
    f.assert_nothing_in_place();
    let kept = f.data().join("ogb-cora/download/cora.zip");
    assert!(kept.is_file(), "the verified download is kept for the rerun");
    drop(_fs);
    // Disk freed (unmounted): the rerun downloads and converts.
    let j = f.download(&["--features", "dense"]).json();
    assert_eq!(j["nodes"], 2708);
}

/// A host that does not resolve (`.invalid` never does) is not retried: with
/// no other mirror the download fails at once, naming the DNS failure; a
/// mirror that resolves is still tried after it.
#[test]
fn an_unresolvable_host_fails_without_retries_but_other_mirrors_are_tried() {
    let f = Fixture::new(true);
    let dead = "http://leapgnn-test.invalid/ogb/cora.zip";
    let only_dead = f.dir.path().join("dead.toml");
    std::fs::write(&only_dead, format!("[ogb-cora]\nformat = \"ogb\"\nurls = [\"{dead}\"]\n")).unwrap();
    let args = ["download", "ogb-cora", "--registry", only_dead.to_str().unwrap(), "--retries", "3"];
    let out = leapgnn(&f.data(), &args);
    out.assert_error(1, &["leapgnn-test.invalid", "cannot resolve the host", "not retried"]);
    assert!(!out.stderr.contains("retrying"), "{}", out.stderr);

    let both = f.dir.path().join("both.toml");
    let good = f.server.url("/ogb/cora.zip");
    std::fs::write(&both, format!("[ogb-cora]\nformat = \"ogb\"\nurls = [\"{dead}\", \"{good}\"]\n")).unwrap();
    let j = leapgnn(&f.data(), &["download", "ogb-cora", "--registry", both.to_str().unwrap(), "--json"]).json();
    assert_eq!(j["nodes"], 2708, "{j}");
    assert_eq!(f.server.requests(), 1);
}

/// Two `download`s of one dataset into one --data-dir at once: they wrote the
/// same `.part` together (the second truncated or appended to the first's),
/// so one failed renaming a `.part` the other had renamed and the other
/// converted a garbled file. Now the second waits for the first and finds
/// the dataset present, the file fetched once.
#[test]
fn two_concurrent_downloads_take_turns() {
    use std::process::{Command, Stdio};
    let f = Fixture::new(false);
    f.server.set(Mode::Hold);
    // Killed if the test fails while they run, as the guards are dropped.
    let start = || {
        Reaped::new(
            Command::new(env!("CARGO_BIN_EXE_leapgnn"))
                .arg("--data-dir")
                .arg(f.data())
                .args(["download", "ogb-cora", "--json", "--registry", f.registry.to_str().unwrap()])
                .env_remove("LEAPGNN_REGISTRY")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let first = start();
    while f.server.requests() == 0 {
        assert!(std::time::Instant::now() < deadline, "the first download made no request");
        std::thread::sleep(Duration::from_millis(10)); // poll interval
    }
    let mut second = start();
    // The second either says it waits (its stderr) or requests the file too.
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = second.child().stderr.take().unwrap();
    let sink = stderr.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    while !stderr.lock().unwrap().contains("waiting for another leapgnn process") && f.server.requests() < 2 {
        assert!(std::time::Instant::now() < deadline, "the second download neither waited nor requested");
        std::thread::sleep(Duration::from_millis(10)); // poll interval
    }
    f.server.release();
    let (a, b) = (first.wait_with_output(), second.wait_with_output());
    import_support::bounded::join_within(reader, import_support::bounded::PIPE_LIMIT, "the second's stderr to close");
    let b_err = stderr.lock().unwrap().clone();
    assert!(a.status.success(), "first: {}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "second: {b_err}");
    let action = |o: &std::process::Output| {
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["action"].as_str().unwrap().to_owned()
    };
    assert_eq!((action(&a), action(&b)), ("downloaded".to_owned(), "present".to_owned()));
    assert_eq!(f.server.requests(), 1, "the file was fetched twice");
    f.assert_matches_local_import();
    let lock = f.data().join(".ogb-cora.download.lock");
    assert!(!lock.exists(), "the lock file stays after both ended");
}

/// A registry entry without sha256 (the OGB ones) served a page instead of
/// the zip: the page was kept as the download, and every rerun converted it
/// again and failed the same way ('no file ... is this the right format?').
/// Now it is deleted with the failure, and the rerun fetches the real file.
#[test]
fn an_unverified_download_that_does_not_convert_is_fetched_again() {
    let f = Fixture::new(false);
    f.server.set(Mode::Page);
    let kept = f.data().join("ogb-cora/download/cora.zip");
    f.download(&["--retries", "0"]).assert_error(1, &["cora.zip", "does not convert", "no sha256", "rerun"]);
    assert!(!kept.exists(), "the page was kept as the download");
    f.assert_nothing_in_place();
    assert!(!f.data().join("ogb-cora").exists(), "a download that came to nothing left a directory");
    f.server.set(Mode::Ok);
    let j = f.download(&[]).json();
    assert_eq!((j["action"].as_str(), j["nodes"].as_u64()), (Some("downloaded"), Some(2708)));
    assert_eq!(f.server.requests(), 2);
    f.assert_matches_local_import();
}

/// A mirror URL that carries a secret (`https://user:TOKEN@host/...`, a
/// `?token=` of a signed URL): the retry warnings, the error line, the JSON's
/// `source` and the archive (`info`, shipped to every worker) showed it in
/// full. Now the user name, password and query values read `***`; the
/// request itself still carries them (basic auth, the query).
#[test]
fn secrets_in_a_mirror_url_are_not_shown_or_stored() {
    let f = Fixture::new(true);
    let secret = f.server.url("/ogb/cora.zip").replace("http://", "http://bob:hunter2@") + "?token=SECRET";
    let registry = f.dir.path().join("secret.toml");
    std::fs::write(&registry, format!("[ogb-cora]\nformat = \"ogb\"\nurls = [\"{secret}\"]\n")).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["download", "ogb-cora", "--registry", registry.to_str().unwrap()];
        args.extend_from_slice(extra);
        leapgnn(&f.data(), &args)
    };
    let shown = f.server.url("/ogb/cora.zip").replace("http://", "http://***@") + "?token=***";
    f.server.set(Mode::Status(500));
    let out = run(&["--retries", "1"]);
    out.assert_error(1, &[&shown, "HTTP 500"]);
    assert!(
        out.stderr.contains("retrying") && !out.stderr.contains("hunter2") && !out.stderr.contains("SECRET"),
        "{}",
        out.stderr
    );

    f.server.set(Mode::Ok);
    let out = run(&["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["source"], shown.as_str());
    let info = leapgnn(&f.data(), &["info", "ogb-cora"]);
    assert!(info.stdout.contains(&shown), "{}", info.stdout);
    let archive = std::fs::read(f.archive()).unwrap();
    for s in ["hunter2", "SECRET"] {
        assert!(!archive.windows(s.len()).any(|w| w == s.as_bytes()), "the archive holds `{s}`");
        assert!(!out.stderr.contains(s) && !info.stdout.contains(s));
    }
}

/// A mirror that redirects to itself: reqwest gives up after 10 redirects,
/// and every retry round looped again (with backoff) before the error said
/// 'gave up after N attempts; rerun to resume', which cannot help. Now the
/// first loop fails at once, saying to check the URL.
#[test]
fn a_redirect_loop_is_not_retried() {
    let f = Fixture::new(true);
    f.server.set(Mode::Loop);
    let out = f.download(&["--retries", "2"]);
    out.assert_error(1, &["cora.zip", "too many redirects", "not retried", "check the URL"]);
    assert!(!out.stderr.contains("retrying") && !out.stderr.contains("rerun to resume"), "{}", out.stderr);
    let per_round = f.server.requests();
    assert!((2..=11).contains(&per_round), "{per_round} requests: one round of redirects expected");
    f.assert_nothing_in_place();
    assert!(!f.data().join("ogb-cora").exists());
}

#[test]
fn a_body_longer_than_the_registry_size_is_refused_as_it_arrives() {
    for announce in [true, false] {
        let f = Fixture::new(true);
        f.server.set(Mode::Longer { announce });
        let out = f.download(&["--retries", "2"]);
        let got = if announce { "the server announces" } else { "the server sent more than" };
        out.assert_error(1, &["cora.zip", got, "refused and deleted", "check the entry's size"]);
        assert_eq!(f.server.requests(), 1, "announce {announce}: retried, {}", out.stderr);
        assert!(!f.part().exists(), "announce {announce}: the partial file was kept");
        f.assert_nothing_in_place();
    }
}

#[test]
fn a_busy_server_is_asked_again_no_sooner_than_its_retry_after() {
    let f = Fixture::new(true);
    f.server.set(Mode::Busy);
    let out = f.download(&["--retries", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("HTTP 429") && out.stderr.contains("retrying in 3 s"), "{}", out.stderr);
    let t = f.server.times();
    assert_eq!(t.len(), 2, "one 429, then the file");
    // The backoff alone waits 1 s before the second round.
    let gap = t[1] - t[0];
    assert!(gap >= std::time::Duration::from_secs(3), "asked again after {gap:?}, the server said Retry-After: 3");
    f.assert_matches_local_import();
}

/// `Retry-After` as an HTTP date (RFC 9110's other form): it was ignored,
/// so the backoff alone (1 s) came before the date the server named.
#[test]
fn a_busy_server_is_asked_again_no_sooner_than_its_retry_after_date() {
    let f = Fixture::new(true);
    f.server.set(Mode::BusyUntil);
    let out = f.download(&["--retries", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("HTTP 429"), "{}", out.stderr);
    let (t, at) = (f.server.clock(), f.server.retry_at().expect("the first request got the 429"));
    assert_eq!(t.len(), 2, "one 429, then the file");
    assert!(t[0] < at && t[1] >= at, "asked again at {:?}, before the Retry-After date {at:?}", t[1]);
    f.assert_matches_local_import();
}
