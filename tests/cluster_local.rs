//! The control plane with real worker processes on this machine.

#[path = "support/bounded.rs"]
mod bounded;

use leapgnn::cluster::driver::{DriverError, DriverOptions, Event, run_job};
use leapgnn::cluster::job_key::{self, Side};
use leapgnn::cluster::{ControlConn, Hello, Launcher, LocalLauncher, ToDriver, ToWorker, WorkerProcess, WorkerSpec};
use leapgnn::util::threads::{PidsLimit, ThreadLimits};
use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

fn launcher() -> LocalLauncher {
    LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec![])
}

fn opts() -> DriverOptions {
    DriverOptions {
        start_timeout: Duration::from_secs(20),
        silence_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

#[test]
fn three_local_workers_report_and_are_gone_afterwards() {
    let stop = AtomicBool::new(false);
    let mut events = 0;
    let done = run_job(&launcher(), 3, &serde_json::json!({"task": "ping"}), &opts(), &stop, |e| {
        events += !matches!(e, Event::Idle) as usize
    })
    .unwrap();
    assert_eq!(events, 3);
    let mut ranks: Vec<u64> = done.iter().map(|d| d["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1, 2]);
    for d in &done {
        assert_eq!(d["world"], 3);
        let pid = d["pid"].as_u64().unwrap();
        assert_ne!(pid, std::process::id() as u64);
        // Reaped by the driver: nothing left behind.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "worker {pid} still exists");
    }
}

#[test]
fn a_failing_worker_is_named_and_the_others_are_stopped() {
    let stop = AtomicBool::new(false);
    let err =
        run_job(&launcher(), 2, &serde_json::json!({"task": "no-such-task"}), &opts(), &stop, |_| {}).unwrap_err();
    match &err {
        DriverError::WorkerRefused { message, .. } => assert!(message.contains("unknown task"), "{message}"),
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
fn worker_exits_when_its_driver_goes_away() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        // Its own wait for the driver far outlasts the guard below: only noticing the
        // driver gone, not timing out on it, ends the worker in time.
        .args(["worker", "--driver", &addr.to_string(), "--rank", "0", "--timeout", "600"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "tok").unwrap();
    let s = bounded::accept_within(&listener, Duration::from_secs(120), "the worker's dial to its driver");
    let mut c = ControlConn::new(s, "worker 0");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let Ok(ToDriver::Hello(h)) = c.recv::<ToDriver>() else { panic!("no hello") };
    assert_eq!(h.rank, 0);
    let proof = job_key::control_proof("tok", Side::Driver, 0, &h.nonce, "dn");
    c.send(&ToWorker::Challenge { nonce: "dn".into(), proof }).unwrap();
    let Ok(ToDriver::Proof(p)) = c.recv::<ToDriver>() else { panic!("no proof") };
    assert!(job_key::verify_control_proof("tok", Side::Worker, 0, &h.nonce, "dn", &p));
    assert!(matches!(c.recv::<ToDriver>().unwrap(), ToDriver::Listening(_)));
    drop(c); // the driver vanishes before sending a job

    let status = bounded::wait_within(&mut child, Duration::from_secs(120), "the worker that lost its driver");
    assert!(!status.success(), "a worker that lost its driver must exit non-zero");
}

/// A worker played by a thread of this test: it joins like a real one, then
/// runs `script` on its control connection; the worker's process is seen to
/// have exited (code 0) once the script sets its flag.
struct Scripted {
    script: fn(usize, ControlConn, &Barrier, &AtomicBool),
    /// Shared by the workers' scripts, to order their steps.
    barrier: Arc<Barrier>,
}

struct ThreadWorker(usize, Arc<AtomicBool>);

impl WorkerProcess for ThreadWorker {
    fn rank(&self) -> usize {
        self.0
    }
    fn try_exit_code(&mut self) -> Option<i32> {
        self.1.load(Ordering::SeqCst).then_some(0)
    }
    fn kill(&mut self) {}
}

impl Launcher for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let (rank, token, driver, script) = (spec.rank, spec.token.clone(), spec.driver, self.script);
        let barrier = self.barrier.clone();
        let exited = Arc::new(AtomicBool::new(false));
        let exit = exited.clone();
        std::thread::spawn(move || {
            let mut c = ControlConn::connect(driver, Duration::from_secs(20)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let nonce = format!("{rank:032x}");
            let hello = Hello { rank, pid: std::process::id(), version: leapgnn::BUILD_ID.into(), nonce };
            c.send(&ToDriver::Hello(hello.clone())).unwrap();
            let Ok(ToWorker::Challenge { nonce: dn, .. }) = c.recv::<ToWorker>() else { panic!("no challenge") };
            c.send(&ToDriver::Proof(job_key::control_proof(&token, Side::Worker, rank, &hello.nonce, &dn))).unwrap();
            c.send(&ToDriver::Listening("127.0.0.1:1".parse().unwrap())).unwrap();
            assert!(matches!(c.recv::<ToWorker>().unwrap(), ToWorker::Job { .. }));
            script(rank, c, &barrier, &exit);
        });
        Ok(Box::new(ThreadWorker(rank, exited)))
    }
}

/// A worker reports more steps than the driver's queue holds, then Done, and
/// exits; the driver is slow with each step (a dashboard drawing, a driver
/// stopped by Ctrl-Z and continued with a backlog). Its reader reads the
/// rest only as the queue drains, long after the exit was seen: the driver
/// must work through all of it to the Done, however long that takes past the
/// exit's grace. It used to count the grace from the first message read
/// after the exit was seen, and ended the job with "worker 0 exited with
/// code 0 before finishing" with a queue's worth still to handle.
#[test]
fn an_exited_workers_backlog_is_handled_to_its_done_however_slow_the_driver() {
    const STEPS: usize = 3000;
    let launcher = Scripted {
        script: |_, mut c, _, exited| {
            for step in 0..STEPS {
                c.send(&ToDriver::Metrics(serde_json::json!({ "step": step }))).unwrap();
            }
            c.send(&ToDriver::Done(serde_json::json!("done"))).unwrap();
            exited.store(true, Ordering::SeqCst);
        },
        barrier: Arc::new(Barrier::new(1)),
    };
    let stop = AtomicBool::new(false);
    let mut steps = 0;
    let done = run_job(&launcher, 1, &serde_json::json!({"task": "scripted"}), &opts(), &stop, |e| {
        if let Event::Metrics(..) = e {
            steps += 1;
            // The fault itself: a driver that takes 2 ms a step, 6 s for them all.
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .unwrap_or_else(|e| panic!("after {steps} of {STEPS} steps: {e}"));
    assert_eq!((steps, done), (STEPS, vec![serde_json::json!("done")]));
}

/// Worker 0 is lost without a word; worker 1 reports a finished step only
/// after that, then its own error (it noticed the loss): the driver delivers
/// the step before stopping the job, and names worker 0.
#[test]
fn a_step_reported_after_a_peer_was_lost_is_delivered_before_the_job_stops() {
    let launcher = Scripted {
        script: |rank, mut c, barrier, _| {
            if rank == 0 {
                c.shutdown();
                barrier.wait();
                return;
            }
            barrier.wait();
            c.send(&ToDriver::Metrics(serde_json::json!({ "step": 7 }))).unwrap();
            c.send(&ToDriver::Error("worker 0 left the mesh".into())).unwrap();
        },
        barrier: Arc::new(Barrier::new(2)),
    };
    let stop = AtomicBool::new(false);
    let mut steps = Vec::new();
    let err = run_job(&launcher, 2, &serde_json::json!({"task": "scripted"}), &opts(), &stop, |e| {
        if let Event::Metrics(rank, v) = e {
            steps.push((rank, v));
        }
    })
    .unwrap_err();
    assert_eq!(steps, vec![(1, serde_json::json!({ "step": 7 }))], "{err}");
    assert!(matches!(err, DriverError::Control(_)), "worker 0's loss ends the job, not worker 1's echo: {err}");
}

/// Worker 1 is refused a thread by its OS; worker 0, left waiting for it,
/// reports its own error first. The refusal is the cause, the other error
/// its echo: the driver names worker 1's refusal, which `--restarts` does
/// not restart on, not worker 0's failure, which it would.
#[test]
fn a_thread_refusal_reported_after_a_peers_echo_is_named_as_the_cause() {
    let launcher = Scripted {
        script: |rank, mut c, barrier, _| {
            if rank == 0 {
                c.send(&ToDriver::Error("worker 1 did not join the mesh".into())).unwrap();
                barrier.wait();
                return;
            }
            barrier.wait();
            let refusal = leapgnn::cluster::ThreadRefused {
                thread: "leapgnn-mesh-dial-0".into(),
                host: "node1".into(),
                os_error: "Resource temporarily unavailable (os error 11)".into(),
                attempts: 6,
                waited_ms: 620,
                limits: ThreadLimits {
                    process_limit: Some(12),
                    threads_max: Some(1000),
                    threads_in_use: Some(400),
                    pids: Some(PidsLimit { cgroup: "/sys/fs/cgroup/job.42".into(), max: 64, current: Some(64) }),
                    ..ThreadLimits::default()
                },
            };
            c.send(&ToDriver::ThreadRefused(refusal)).unwrap();
        },
        barrier: Arc::new(Barrier::new(2)),
    };
    let stop = AtomicBool::new(false);
    let err = run_job(&launcher, 2, &serde_json::json!({"task": "scripted"}), &opts(), &stop, |_| {}).unwrap_err();
    assert!(matches!(err, DriverError::ThreadRefused { rank: 1, .. }), "{err}");
    let msg = err.to_string();
    for needle in [
        "worker 1 on node1 cannot start thread leapgnn-mesh-dial-0: Resource temporarily unavailable (os error 11)",
        "process/thread limit (RLIMIT_NPROC, ulimit -u) of 12",
        "the kernel's threads-max of 1000 (400 threads on the host)",
        "pids.max of 64 in cgroup /sys/fs/cgroup/job.42 (64 in use: full)",
        "raise the limit that is full on node1",
    ] {
        assert!(msg.contains(needle), "no `{needle}` in {msg}");
    }
}

/// The build id names the device features it was built with, so a CPU and
/// a CUDA build of the same sources (which once shared one id) differ.
#[test]
fn the_build_id_names_the_version_the_sources_and_the_device_features() {
    let id = leapgnn::BUILD_ID;
    let rest = id.strip_prefix(concat!(env!("CARGO_PKG_VERSION"), "+")).expect(id);
    let (hash, features) = rest.split_at(16.min(rest.len()));
    assert!(hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let want = if cfg!(feature = "cuda") { "+cuda" } else { "" };
    assert_eq!(features, want, "{id}");
}

#[test]
fn a_build_differing_only_in_device_features_is_told_apart_and_named() {
    use leapgnn::{BUILD_ID, other_device_features};
    let sources = BUILD_ID.trim_end_matches("+cuda");
    let other = if BUILD_ID.ends_with("+cuda") { sources.to_string() } else { format!("{sources}+cuda") };
    let said = other_device_features(&other, "the worker").expect("only the features differ");
    assert!(said.contains("a +cuda build") && said.contains("a CPU build (no device features)"), "{said}");
    assert!(said.contains("the worker") && said.contains("scripts/build-cuda.sh"), "{said}");
    // Other sources, or the same build: not a matter of features.
    assert_eq!(other_device_features("0.0.1+stale+cuda", "the worker"), None);
    assert_eq!(other_device_features(&format!("0.0.1+{}", &sources[sources.len() - 16..]), "the worker"), None);
    assert_eq!(other_device_features(BUILD_ID, "the worker"), None);
}

/// A stale binary on a worker's host (`LEAPGNN_TEST_CLAIM_BUILD` stands for
/// one) once got the job and failed later on a message it could not parse.
/// It proves the token but is refused at its hello: the driver names the
/// worker, its host and both builds, and the worker is told why. A build of
/// the same sources with other device features (a CPU worker, a CUDA
/// driver) once shared the driver's id and was admitted; it is refused too,
/// both sides saying which build has which features and how to build alike.
#[test]
fn a_worker_of_another_build_is_refused_at_its_hello_and_both_sides_say_why() {
    let sources = leapgnn::BUILD_ID.trim_end_matches("+cuda");
    let other_features =
        if leapgnn::BUILD_ID.ends_with("+cuda") { sources.to_string() } else { format!("{sources}+cuda") };
    for claimed in ["0.0.1+stale", &other_features] {
        let (tx, lines) = mpsc::channel::<String>();
        let tx = std::sync::Mutex::new(tx);
        let launcher = launcher()
            .with_env(vec![(leapgnn::cluster::worker_session::CLAIM_BUILD_TEST_VAR.into(), claimed.into())])
            .with_log(Arc::new(move |l| {
                let _ = tx.lock().unwrap().send(l);
            }));
        let stop = AtomicBool::new(false);
        let err = run_job(&launcher, 1, &serde_json::json!({"task": "ping"}), &opts(), &stop, |_| {}).unwrap_err();
        assert!(matches!(err, DriverError::OtherBuild { rank: 0, .. }), "{claimed}: {err}");
        let msg = err.to_string();
        let driver = format!("not the driver's {}", leapgnn::BUILD_ID);
        let runs = format!("runs leapgnn build {claimed},");
        for needle in ["worker 0 on local", &runs, &driver, "the driver's own executable"] {
            assert!(msg.contains(needle), "no `{needle}` in {msg}");
        }
        let told = loop {
            let line = lines.recv_timeout(Duration::from_secs(20)).expect("the worker logged its refusal");
            if line.contains("refused") {
                break line;
            }
        };
        assert!(told.contains(&format!("runs leapgnn build {claimed}, the driver build")), "{told}");
        let features = claimed == other_features;
        for said in [&msg, &told] {
            let named = said.contains("a +cuda build") && said.contains("a CPU build (no device features)");
            assert_eq!(named && said.contains("scripts/build-cuda.sh"), features, "{claimed}: {said}");
        }
    }
}
