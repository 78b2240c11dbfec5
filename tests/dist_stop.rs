//! `q` in the dashboard with several workers: the stop request reaches the
//! workers, they all stop after the same iteration (they vote in the gradient
//! all-reduce), rank 0 checkpoints it, and the run ends with a summary.

mod dist_support;

use dist_support::{cora, small_cora_job, wait_gone};
use leapgnn::DataDir;
use leapgnn::cluster::LocalLauncher;
use leapgnn::metrics::StepRecord;
use leapgnn::train::distributed::{DistOptions, train_distributed};
use leapgnn::train::{Observer, RunOptions, TrainError};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Asks to stop as soon as the first record arrives, as a user pressing `q` would.
#[derive(Default)]
struct PressQ {
    steps: u64,
    events: Vec<String>,
}

impl Observer for PressQ {
    fn step(&mut self, _: &StepRecord) -> Result<(), TrainError> {
        self.steps += 1;
        Ok(())
    }
    fn event(&mut self, msg: &str) {
        self.events.push(msg.to_string());
    }
    fn stop_requested(&self) -> bool {
        self.steps > 0
    }
}

#[test]
fn a_stop_request_ends_every_worker_at_the_same_iteration_with_a_checkpoint() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let epochs = 50;
    let cfg = small_cora_job(2, epochs);
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let launcher =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), tmp.path().display().to_string()])
            .with_log(Arc::new(move |l| sink.lock().unwrap().push(l)));
    let interrupted = AtomicBool::new(false);
    let opts = DistOptions {
        launcher: &launcher,
        interrupted: &interrupted,
        comm_timeout: Duration::from_secs(30),
        check_replicas: 0,
        dump_grad: None,
        worker_lines: None,
        driver_bind: "127.0.0.1:0".parse().unwrap(),
        auto_planner: Some(&leapgnn::cost::auto_plans),
        restarts: 0,
    };
    let mut q = PressQ::default();
    let run = RunOptions { run: Some("stopped".into()), stop_after: None, ..Default::default() };
    let s = train_distributed(&data, cfg, &run, &opts, &mut q).expect("a stopped run ends normally");

    // 140 training roots in global batches of 16: 9 iterations per epoch.
    assert!(s.iterations >= 1 && s.iterations < epochs * 9, "stopped after {} iterations", s.iterations);
    let dir = data.run_dir("stopped");
    let workers: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("workers.json")).unwrap()).unwrap();
    let its: Vec<u64> = workers.as_array().unwrap().iter().map(|w| w["iterations"].as_u64().unwrap()).collect();
    assert_eq!(its, [s.iterations, s.iterations], "every worker stops after the same iteration");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["progress"]["global_iteration"], s.iterations, "the checkpoint is of the last iteration");
    let want = format!("[worker 0] checkpoint written after iteration {}", s.iterations);
    assert!(q.events.contains(&want), "{want:?} not in {:?}", q.events);
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count() as u64, 2 * s.iterations, "one record per worker and iteration");

    // The workers exited by themselves; the driver stopped none.
    let pids: Vec<u32> = lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.split("] pid ").nth(1)?.split(',').next()?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{:?}", lines.lock().unwrap());
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new());
}
