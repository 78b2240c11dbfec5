//! The control plane with real worker processes on this machine.

use leapgnn::cluster::driver::{DriverError, DriverOptions, Event, run_job};
use leapgnn::cluster::job_key::{self, Side};
use leapgnn::cluster::{ControlConn, LocalLauncher, ToDriver, ToWorker};
use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
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
        DriverError::WorkerFailed { message, .. } => assert!(message.contains("unknown task"), "{message}"),
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
fn worker_exits_when_its_driver_goes_away() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .args(["worker", "--driver", &addr.to_string(), "--rank", "0", "--timeout", "20"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "tok").unwrap();
    let (s, _) = listener.accept().unwrap();
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

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status =
        rx.recv_timeout(Duration::from_secs(30)).expect("worker did not exit after losing its driver").unwrap();
    assert!(!status.success(), "a worker that lost its driver must exit non-zero");
}
