//! The ssh launcher against a real OpenSSH server on 127.0.0.1: workers
//! start remotely into an empty directory, connect back and report; files
//! ship once; every refusal is clear; nothing is left running afterwards.

#[path = "support/bounded.rs"]
mod bounded;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/sshd.rs"]
mod sshd;

use bounded::{Bounded, QUICK_LIMIT, alive};
use leapgnn::cluster::check::name_host;
use leapgnn::cluster::driver::{DriverError, DriverOptions, Event, run_job};
use leapgnn::cluster::job_key::{self, Side};
use leapgnn::cluster::known_hosts::HostKeyStatus;
use leapgnn::cluster::ship::ShipItem;
use leapgnn::cluster::{ControlConn, Launcher, Profile, SshLauncher, ToDriver, ToWorker, WorkerSpec};
use sshd::{Sshd, keygen, wait_gone};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_leapgnn");

fn launcher(profile: &Path) -> SshLauncher {
    let p = Profile::load(profile).unwrap();
    SshLauncher::new(p).unwrap().with_binary(BIN).with_io_timeout(Duration::from_secs(10))
}

fn opts(profile: &Path) -> DriverOptions {
    let p = Profile::load(profile).unwrap();
    DriverOptions {
        start_timeout: Duration::from_secs(20),
        silence_timeout: Duration::from_secs(20),
        bind: p.driver_bind(),
        ..Default::default()
    }
}

fn capture() -> (Arc<Mutex<Vec<String>>>, leapgnn::cluster::ssh::LogSink) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    (lines, Arc::new(move |s: String| l.lock().unwrap().push(s)))
}

fn pid_of(done: &serde_json::Value) -> u32 {
    done["pid"].as_u64().unwrap() as u32
}

/// Each rank needs one file of its own, shipped under the remote data dir.
fn rank_files(dir: &Path) -> Arc<dyn Fn(usize) -> Vec<ShipItem> + Send + Sync> {
    let dir = dir.to_path_buf();
    Arc::new(move |r| {
        vec![ShipItem {
            local: dir.join(format!("part-{r}.bin")),
            remote: PathBuf::from(format!("ds/part-{r}.bin")),
            executable: false,
            check_bytes: false,
        }]
    })
}

#[test]
fn workers_start_remotely_report_stream_logs_and_files_ship_once() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(3, "[cluster.env]\nRUST_LOG = \"info\"\n");
    let local = tempfile::tempdir().unwrap();
    for r in 0..3 {
        std::fs::write(local.path().join(format!("part-{r}.bin")), vec![r as u8; 100_000 + r]).unwrap();
    }
    let ping = serde_json::json!({"task": "ping"});
    let stop = AtomicBool::new(false);
    let run = || {
        let (lines, log) = capture();
        let l = launcher(&profile).with_rank_files(rank_files(local.path())).with_log(log);
        let mut events = 0;
        let done = run_job(&l, 3, &ping, &opts(&profile), &stop, |e| events += matches!(e, Event::Done(..)) as usize)
            .unwrap_or_else(|e| panic!("{e}\nsshd log:\n{}", sshd.log()));
        assert_eq!(events, 3);
        let lines = lines.lock().unwrap().clone();
        (l.shipped(), done, lines)
    };

    let (shipped, done, lines) = run();
    let mut ranks: Vec<u64> = done.iter().map(|d| d["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2]);
    let pids: Vec<u32> = done.iter().map(pid_of).collect();
    assert!(pids.iter().all(|&p| p != std::process::id()) && pids[0] != pids[1] && pids[1] != pids[2]);
    // The binary went into the empty remote dir once; later ranks found it current.
    let bins: Vec<_> = shipped.iter().filter(|s| s.remote.starts_with(sshd.remote.join("bin"))).collect();
    assert_eq!(bins.len(), 3);
    assert_eq!(bins.iter().filter(|s| s.sent).count(), 1, "{shipped:?}");
    assert_eq!(std::fs::read(&bins[0].remote).unwrap(), std::fs::read(BIN).unwrap());
    for r in 0..3 {
        let remote = sshd.remote.join(format!("data/ds/part-{r}.bin"));
        assert_eq!(std::fs::read(&remote).unwrap(), std::fs::read(local.path().join(format!("part-{r}.bin"))).unwrap());
        assert!(
            std::fs::read_to_string(format!("{}.sha256", remote.display())).unwrap().contains(&format!("part-{r}.bin"))
        );
    }
    // Worker stderr (enabled by the profile's env) streamed with the host and rank.
    for r in 0..3 {
        let prefix = format!("[127.0.0.1:{} rank {r}]", sshd.port);
        assert!(lines.iter().any(|l| l.starts_with(&prefix) && l.contains("joined")), "rank {r}: {lines:#?}");
    }
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left running");
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new(), "ssh sessions left open");

    // Second run: everything is current, nothing is sent.
    let (shipped, done, _) = run();
    assert_eq!(shipped.len(), 6);
    assert!(shipped.iter().all(|s| !s.sent), "re-sent: {shipped:?}");
    assert_eq!(done.len(), 3);

    // A changed local file is re-sent, and only that one.
    std::fs::write(local.path().join("part-1.bin"), b"new contents").unwrap();
    let (shipped, _, _) = run();
    let sent: Vec<_> = shipped.iter().filter(|s| s.sent).map(|s| s.remote.clone()).collect();
    assert_eq!(sent, [sshd.remote.join("data/ds/part-1.bin")]);
    assert_eq!(std::fs::read(sshd.remote.join("data/ds/part-1.bin")).unwrap(), b"new contents");
    // No temp file left next to what was shipped.
    let leftovers: Vec<_> = std::fs::read_dir(sshd.remote.join("data/ds"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    sshd.stop();
}

#[test]
fn unknown_host_key_is_refused_unless_recording_is_allowed() {
    let mut sshd = Sshd::start();
    std::fs::remove_file(&sshd.known_hosts).unwrap();
    let profile = sshd.profile(1, "");
    let host = Profile::load(&profile).unwrap().hosts[0].clone();

    let e = launcher(&profile).prepare(&host, &[]).err().expect("an unknown host key must be refused").to_string();
    assert!(e.contains("is not in") && e.contains(&sshd.known_hosts.display().to_string()), "{e}");
    assert!(e.contains("--accept-new-host-keys") && e.contains(&format!("127.0.0.1:{}", sshd.port)), "{e}");
    assert!(!sshd.known_hosts.exists(), "refusing must not record the key");
    assert!(std::fs::read_dir(&sshd.remote).unwrap().next().is_none(), "nothing may be shipped before the key is ok");

    let p = launcher(&profile).accept_new_host_keys(true).prepare(&host, &[]).unwrap();
    assert_eq!(p.host_key, HostKeyStatus::Recorded);
    let recorded = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    assert!(recorded.starts_with(&format!("[127.0.0.1]:{} ssh-ed25519 ", sshd.port)), "{recorded}");
    drop(p);

    // Recorded once; the strict policy now accepts it.
    let p = launcher(&profile).prepare(&host, &[]).unwrap();
    assert_eq!(p.host_key, HostKeyStatus::Known);
    assert_eq!(std::fs::read_to_string(&sshd.known_hosts).unwrap(), recorded);
    drop(p);
    sshd.stop();
}

#[test]
fn changed_host_key_is_refused_even_when_recording_is_allowed() {
    let mut sshd = Sshd::start();
    keygen(&sshd.path("other"));
    let other = std::fs::read_to_string(sshd.path("other.pub")).unwrap();
    let mut f = other.split_whitespace();
    let forged = format!("[127.0.0.1]:{} {} {}\n", sshd.port, f.next().unwrap(), f.next().unwrap());
    std::fs::write(&sshd.known_hosts, &forged).unwrap();
    let profile = sshd.profile(1, "accept_new_host_keys = true");
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let e = launcher(&profile).prepare(&host, &[]).err().expect("a changed key must be refused").to_string();
    assert!(e.contains("HOST KEY CHANGED") && e.contains("ssh-keygen -R"), "{e}");
    assert_eq!(std::fs::read_to_string(&sshd.known_hosts).unwrap(), forged, "the recorded key must stay");
    sshd.stop();
}

/// A host key that known_hosts marks `@revoked` (a compromised key) is
/// refused as OpenSSH refuses it: even where the same file still lists it
/// for the host, and never recorded by accept_new_host_keys.
#[test]
fn a_revoked_host_key_is_refused_even_where_it_is_known() {
    let mut sshd = Sshd::start();
    let known = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let mut f = known.split_whitespace().skip(1);
    let revoked = format!("@revoked * {} {}\n", f.next().unwrap(), f.next().unwrap());
    let host_of = |profile: &Path| Profile::load(profile).unwrap().hosts[0].clone();

    std::fs::write(&sshd.known_hosts, format!("{revoked}{known}")).unwrap();
    let profile = sshd.profile(1, "");
    let e = launcher(&profile).prepare(&host_of(&profile), &[]).err().expect("a revoked key must be refused");
    let e = e.to_string();
    assert!(e.contains("REVOKED HOST KEY") && e.contains(&format!("line 1 of {}", sshd.known_hosts.display())), "{e}");
    assert!(e.contains(&format!("127.0.0.1:{}", sshd.port)), "{e}");
    assert!(std::fs::read_dir(&sshd.remote).unwrap().next().is_none(), "nothing may be shipped to it");

    // Only the revocation: accept_new_host_keys must not record the key.
    std::fs::write(&sshd.known_hosts, &revoked).unwrap();
    let profile = sshd.profile(1, "accept_new_host_keys = true");
    let e = launcher(&profile).prepare(&host_of(&profile), &[]).err().expect("a revoked key is never new").to_string();
    assert!(e.contains("REVOKED HOST KEY"), "{e}");
    assert_eq!(std::fs::read_to_string(&sshd.known_hosts).unwrap(), revoked, "the revoked key was recorded");

    // Another key revoked: this host's passes.
    keygen(&sshd.path("retired"));
    let retired = std::fs::read_to_string(sshd.path("retired.pub")).unwrap();
    std::fs::write(&sshd.known_hosts, format!("@revoked * {retired}{known}")).unwrap();
    let profile = sshd.profile(1, "");
    let p = launcher(&profile).prepare(&host_of(&profile), &[]).unwrap();
    assert_eq!(p.host_key, HostKeyStatus::Known);
    drop(p);
    sshd.stop();
}

#[test]
fn wrong_key_and_unreachable_port_are_refused_with_the_host_named() {
    let mut sshd = Sshd::start();
    keygen(&sshd.path("stranger"));
    let text = std::fs::read_to_string(sshd.profile(1, "")).unwrap().replace("id_test", "stranger");
    let profile = sshd.path("stranger.toml");
    std::fs::write(&profile, text).unwrap();
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let e = launcher(&profile).prepare(&host, &[]).err().expect("an unauthorized key must be refused").to_string();
    assert!(e.contains(&format!("authentication as {}", sshd.user)) && e.contains("stranger"), "{e}");
    assert!(e.contains(&format!("127.0.0.1:{}", sshd.port)), "{e}");

    let dead_socket = ports::dead_port();
    let dead = dead_socket.port;
    let text = std::fs::read_to_string(sshd.profile(1, ""))
        .unwrap()
        .replace(&format!("port = {}", sshd.port), &format!("port = {dead}"));
    std::fs::write(&profile, text).unwrap();
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let e = launcher(&profile).prepare(&host, &[]).err().expect("nothing listens there").to_string();
    assert!(e.contains("cannot connect") && e.contains(&format!("127.0.0.1:{dead}")), "{e}");
    // Refused at once, not given up after the profile's 5 s connect_timeout.
    assert!(e.contains("Connection refused") && !e.contains("timed out"), "{e}");
    sshd.stop();
}

/// A TCP relay in front of sshd that hangs up on its first `drop_first`
/// connections before sshd's banner (as a crowded sshd does under
/// MaxStartups) and relays the rest; returns its port and how many it accepted.
fn relay(to: u16, drop_first: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            if count.fetch_add(1, Ordering::SeqCst) < drop_first {
                continue;
            }
            let server = std::net::TcpStream::connect(("127.0.0.1", to)).unwrap();
            for (mut from, mut into) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    (port, seen)
}

/// A profile for `sshd` reached through `port`, whose host key is known there too.
fn profile_via(sshd: &Sshd, port: u16) -> PathBuf {
    let known = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let line = known.lines().next().unwrap().replace(&format!("]:{} ", sshd.port), &format!("]:{port} "));
    std::fs::write(&sshd.known_hosts, format!("{known}{line}\n")).unwrap();
    let text = std::fs::read_to_string(sshd.profile(1, ""))
        .unwrap()
        .replace(&format!("port = {}", sshd.port), &format!("port = {port}"));
    let profile = sshd.path(&format!("via-{port}.toml"));
    std::fs::write(&profile, text).unwrap();
    profile
}

#[test]
fn a_connection_dropped_before_the_banner_is_tried_again_a_few_times() {
    let mut sshd = Sshd::start();
    let (port, seen) = relay(sshd.port, 2);
    let profile = profile_via(&sshd, port);
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let ok = launcher(&profile).prepare(&host, &[]);
    assert!(ok.is_ok(), "two early hang-ups must be tried again: {:?}\n{}", ok.err(), sshd.log());
    assert_eq!(seen.load(Ordering::SeqCst), 3, "two dropped connections, then the one that worked");
    drop(ok);

    // A host that always hangs up: refused after four attempts, naming it.
    let (port, seen) = relay(sshd.port, usize::MAX);
    let profile = profile_via(&sshd, port);
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let e = launcher(&profile).prepare(&host, &[]).err().expect("every connection is dropped").to_string();
    assert!(e.contains("SSH handshake failed") && e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert_eq!(seen.load(Ordering::SeqCst), 4);
    sshd.stop();
}

#[test]
fn a_different_remote_binary_is_replaced_and_a_foreign_build_is_refused() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let host = Profile::load(&profile).unwrap().hosts[0].clone();
    let first = launcher(&profile).prepare(&host, &[]).unwrap();
    assert!(first.shipped[0].sent);
    let remote_bin = first.binary.clone();
    drop(first);

    // Another build sits where ours should be, with an honest sidecar: it is replaced.
    // Like every leapgnn from before `build-id`, it knows `--version` only.
    let old = |version: &str| {
        format!(
            "#!/bin/sh\ncase \"$1\" in --version) echo leapgnn {version} ;; \
             *) echo \"error: unrecognized subcommand '$1'\" >&2; exit 2 ;; esac\n"
        )
    };
    let impostor = old("0.0.1");
    std::fs::write(&remote_bin, &impostor).unwrap();
    let sha = leapgnn::cluster::ship::local_sha256(&remote_bin).unwrap();
    std::fs::write(format!("{}.sha256", remote_bin.display()), format!("{sha}  x\n")).unwrap();
    let second = launcher(&profile).prepare(&host, &[]).unwrap();
    assert!(second.shipped[0].sent, "a stale remote binary must be re-shipped");
    assert_eq!(second.build, leapgnn::BUILD_ID);
    assert_eq!(std::fs::read(&remote_bin).unwrap(), std::fs::read(BIN).unwrap());
    drop(second);

    // A build of another version, named in the profile, is refused with the reason.
    let foreign = sshd.path("leapgnn-old");
    std::fs::write(&foreign, impostor).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = launcher(&profile).with_binary(&foreign).prepare(&host, &[]).err().expect("version mismatch").to_string();
    assert!(e.contains("\"leapgnn 0.0.1\"") && e.contains("cluster.binary"), "{e}");

    // An earlier build of this very version: its `--version` matches, but it
    // does not know `build-id`, so it is not this build either.
    std::fs::write(&foreign, old(env!("CARGO_PKG_VERSION"))).unwrap();
    let e = launcher(&profile).with_binary(&foreign).prepare(&host, &[]).err().expect("an older build").to_string();
    let is_old =
        format!("is leapgnn {} but a build older than the driver's {}", env!("CARGO_PKG_VERSION"), leapgnn::BUILD_ID);
    assert!(e.contains(&is_old) && e.contains("no `build-id`") && e.contains("cluster.binary"), "{e}");

    // A build of this version from other sources says so through `build-id`.
    let var = leapgnn::cluster::worker_session::CLAIM_BUILD_TEST_VAR;
    std::fs::write(&foreign, format!("#!/bin/sh\n{var}=0.1.0+0000000000000000 exec '{BIN}' \"$@\"\n")).unwrap();
    let e = launcher(&profile).with_binary(&foreign).prepare(&host, &[]).err().expect("another build").to_string();
    let named = format!("is leapgnn build 0.1.0+0000000000000000 but the driver is build {}", leapgnn::BUILD_ID);
    assert!(e.contains(&named) && e.contains("127.0.0.1") && e.contains("cluster.binary"), "{e}");
    sshd.stop();
}

/// Starts a 2-worker `wait` job and calls `act` once both report their pids.
fn with_waiting_workers(
    sshd: &Sshd,
    act: impl Fn(&[u32; 2], &AtomicBool),
) -> (Result<Vec<serde_json::Value>, DriverError>, [u32; 2], Duration, Profile) {
    let profile = sshd.profile(2, "");
    let l = launcher(&profile).with_log(Arc::new(|_| {}));
    let stop = AtomicBool::new(false);
    let mut pids = [0u32; 2];
    let mut acted_at = None;
    let job = serde_json::json!({"task": "wait", "seconds": 60});
    let r = run_job(&l, 2, &job, &opts(&profile), &stop, |e| {
        if let Event::Log(rank, s) = e
            && let Some(pid) = s.rsplit_once("pid ").and_then(|(_, p)| p.trim().parse().ok())
        {
            pids[rank] = pid;
            if pids.iter().all(|&p| p != 0) && acted_at.is_none() {
                acted_at = Some(Instant::now());
                act(&pids, &stop);
            }
        }
    });
    let took = acted_at.expect("the workers never reported their pids").elapsed();
    (r, pids, took, Profile::load(&profile).unwrap())
}

#[test]
fn a_remote_worker_killed_mid_job_fails_the_run_naming_host_and_rank() {
    let mut sshd = Sshd::start();
    let (r, pids, took, profile) = with_waiting_workers(&sshd, |pids, _| {
        assert!(std::process::Command::new("kill").args(["-KILL", &pids[1].to_string()]).status().unwrap().success());
    });
    let e = r.expect_err("a killed worker must fail the job");
    // Noticed by its exit or its dropped connection, not by its silence (20 s), and not
    // at the job's end (60 s, which the bound stays well under).
    assert!(took < Duration::from_secs(40), "noticed after {took:?}");
    let dropped = |e: &DriverError| matches!(e, DriverError::Control(c) if c.is_dropped());
    assert!(matches!(e, DriverError::Exited { rank: 1, .. }) || dropped(&e), "{e}");
    let msg = format!("{:#}", name_host(&profile, e));
    assert!(msg.contains(&format!("rank 1 on {}@127.0.0.1:{}", sshd.user, sshd.port)), "{msg}");
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "the surviving worker was left running");
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new());
    sshd.stop();
}

#[test]
fn an_interrupt_stops_every_remote_worker() {
    let mut sshd = Sshd::start();
    let (r, pids, took, _) = with_waiting_workers(&sshd, |pids, stop| {
        assert!(pids.iter().all(|&p| alive(p)));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    assert!(matches!(r, Err(DriverError::Interrupted)), "{r:?}");
    // Stopped on the request, not at the job's end (60 s, which the bound stays well under).
    assert!(took < Duration::from_secs(40), "stopping took {took:?}");
    // Stopped before run_job returned, not eventually.
    assert!(pids.iter().all(|&p| !alive(p)), "workers still running: {pids:?}");
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new());
    sshd.stop();
}

#[test]
fn dropping_a_remote_worker_kills_its_process_group() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let l = launcher(&profile).with_log(Arc::new(|_| {}));
    // A driver that admits the worker but never sends a job: the worker would wait for it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec =
        WorkerSpec { rank: 0, driver: listener.local_addr().unwrap(), token: "t0k3n".into(), world: 1, env: vec![] };
    let mut worker = l.launch(&spec).unwrap();
    let (stream, _) = listener.accept().unwrap();
    let mut c = ControlConn::new(stream, "worker 0");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let Ok(ToDriver::Hello(hello)) = c.recv::<ToDriver>() else { panic!("no hello") };
    assert_eq!(hello.rank, 0);
    let proof = job_key::control_proof("t0k3n", Side::Driver, 0, &hello.nonce, "dn");
    c.send(&ToWorker::Challenge { nonce: "dn".into(), proof }).unwrap();
    let Ok(ToDriver::Proof(p)) = c.recv::<ToDriver>() else { panic!("no proof") };
    assert!(
        job_key::verify_control_proof("t0k3n", Side::Worker, 0, &hello.nonce, "dn", &p),
        "the token arrives on stdin"
    );
    let pid = hello.pid;
    // Leader of its own process group on the remote side.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let pgrp: u32 = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(pgrp, pid);
    assert_eq!(worker.try_exit_code(), None);
    // The drop itself stops it: the test still holds its control connection, so
    // the worker would otherwise go on waiting for a job.
    drop(worker);
    assert!(!alive(pid), "the remote worker survived its handle");
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new());
    sshd.stop();
}

/// The race every `Sshd::start` runs, forced: the port `free_port` chose is
/// taken before sshd binds it. The server must still come up, on another port.
#[test]
fn an_sshd_whose_port_was_taken_before_it_bound_serves_on_another() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut sshd = Sshd::start_on(port);
    assert_ne!(sshd.port, port, "sshd cannot listen where another socket already does");
    let st = std::process::Command::new("ssh")
        .args(["-p", &sshd.port.to_string(), "-i"])
        .arg(&sshd.key)
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", sshd.known_hosts.display()))
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=30"])
        .arg(format!("{}@127.0.0.1", sshd.user))
        .arg("true")
        .status_in(QUICK_LIMIT, "ssh ... true");
    assert!(st.success(), "no session through the sshd on port {}:\n{}", sshd.port, sshd.log());
    sshd.stop();
}

/// The port the "unreachable" tests connect to must stay unreachable: no
/// other test's listener (a worker's mesh, another sshd) may take it, as one
/// could take a port `free_port` had released.
#[test]
fn a_dead_port_can_be_taken_by_no_one_and_refuses_connections() {
    let dead = ports::dead_port();
    let taken = std::net::TcpListener::bind(("127.0.0.1", dead.port));
    assert!(taken.is_err(), "another socket could listen on the dead port {}", dead.port);
    let e = std::net::TcpStream::connect(("127.0.0.1", dead.port)).expect_err("nothing may answer on the dead port");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

/// A remote worker refused a thread by its OS (here its heartbeat, by the
/// test hook, shipped in the profile's env over ssh, since RLIMIT_NPROC does
/// not bind root) tells the driver so before it exits: the job fails naming
/// that worker, its host and the limit, and nothing is left running.
#[test]
fn a_remote_worker_refused_a_thread_is_named_with_its_host_and_limit() {
    let mut sshd = Sshd::start();
    let var = leapgnn::util::threads::REFUSE_THREAD_TEST_VAR;
    let profile = sshd.profile(2, &format!("[cluster.env]\n{var} = \"leapgnn-heartbeat\"\n"));
    let l = launcher(&profile).with_log(Arc::new(|_| {}));
    let stop = AtomicBool::new(false);
    let e = run_job(&l, 2, &serde_json::json!({"task": "ping"}), &opts(&profile), &stop, |_| {})
        .expect_err("no worker may start its heartbeat");
    let Some(rank) = (match &e {
        DriverError::ThreadRefused { rank, .. } => Some(*rank),
        _ => None,
    }) else {
        panic!("not a thread refusal: {e}\nsshd log:\n{}", sshd.log())
    };
    let msg = format!("{:#}", name_host(&Profile::load(&profile).unwrap(), e));
    let host = leapgnn::util::host_name();
    for needle in [
        format!("worker {rank} on {host} cannot start thread leapgnn-heartbeat: "),
        format!("rank {rank} on {}@127.0.0.1:{}", sshd.user, sshd.port),
        "ulimit -u".to_string(),
    ] {
        assert!(msg.contains(&needle), "no `{needle}` in {msg}");
    }
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new());
    sshd.stop();
}
