//! `q` in the dashboard with several workers: the stop request reaches the
//! workers, they all stop after the same iteration (they vote in the gradient
//! all-reduce), rank 0 checkpoints it, and the run ends with a summary.

mod dist_support;

use dist_support::{cora, facebook, final_weights, json, local_options, scores, small_cora_job, wait_gone};
use leapgnn::DataDir;
use leapgnn::cluster::LocalLauncher;
use leapgnn::metrics::StepRecord;
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::{Observer, RunOptions, TrainError};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    let opts = local_options(&launcher, &interrupted);
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

/// Asks to stop when the first record of a time step 0 arrives, and notes
/// when each record of the first iteration arrived.
#[derive(Default)]
struct StopAtStepZero {
    first_iteration: Vec<(u32, u32, Instant)>,
    stop: bool,
}

impl Observer for StopAtStepZero {
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        if (r.epoch, r.iteration) == (0, 0) {
            self.first_iteration.push((r.worker, r.time_step, Instant::now()));
        }
        self.stop |= r.time_step == 0;
        Ok(())
    }
    fn stop_requested(&self) -> bool {
        self.stop
    }
}

/// The per-time-step records of a T = 2 iteration reach the driver as each
/// step ends, not batched at the iteration's end. The proof is causal: the
/// driver asks to stop on the first step-0 record, and the workers vote on
/// stopping in the iteration's gradient all-reduce, after its last step. A
/// run that stops after its first iteration therefore got a step-0 record
/// to the driver and the stop back to a worker before that all-reduce: a
/// record sent with the iteration's end would stop it after the second at
/// the earliest. The stop can still lose the race with a fast last step on a
/// loaded machine, so a run that stops later is inconclusive and tried
/// again; one that stops after iteration 1 settles it.
#[test]
fn time_step_records_arrive_before_their_iteration_ends() {
    let tmp = facebook();
    let data = DataDir::new(tmp.path());
    let launcher =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let mut stops = Vec::new();
    for attempt in 0..4 {
        let cfg = leapgnn::train::TrainConfig {
            dataset: "facebook".into(),
            workers: 2,
            parts: 2,
            epochs: 3,
            batch_size: 1024,
            fanouts: "10,10".parse().unwrap(),
            strategy: leapgnn::train::StrategyKind::Leapgnn,
            time_steps: Some(2),
            seed: attempt,
            ..leapgnn::train::TrainConfig::default()
        };
        let mut obs = StopAtStepZero::default();
        let run = RunOptions { run: Some(format!("feed{attempt}")), ..Default::default() };
        let s = train_distributed(&data, cfg, &run, &opts, &mut obs).expect("a stopped run ends normally");
        let steps: Vec<(u32, u32)> = obs.first_iteration.iter().map(|&(w, t, _)| (w, t)).collect();
        assert_eq!(steps.len(), 4, "two workers, two time steps each: {steps:?}");
        let at = |w, t| obs.first_iteration.iter().find(|r| (r.0, r.1) == (w, t)).map(|r| r.2).unwrap();
        let lead = (0..2).map(|w| at(w, 1).duration_since(at(w, 0))).min().unwrap();
        eprintln!("attempt {attempt}: stopped after iteration {}; step 0 arrived {lead:?} before step 1", s.iterations);
        if s.iterations == 1 {
            return;
        }
        stops.push(s.iterations);
    }
    panic!("no run stopped in the iteration whose step 0 asked it to (stopped after {stops:?}): step records batched?");
}

/// A stop request that comes while the workers evaluate (`--stop-in-evaluation
/// E` asks the last worker during epoch E's evaluation) is voted on in the sum
/// of the evaluation's counts, so every loop stops at that epoch's end, its
/// checkpoint at iteration E x iterations per epoch, instead of training an
/// iteration of the next epoch to vote; `--resume` goes on with epoch E + 1
/// and ends as the uninterrupted run does. Rank 0, which checkpoints, hears
/// of the request only through the vote. Sampled and full evaluation, the
/// full-graph engine's loops, and one worker.
#[test]
fn a_stop_asked_for_during_an_evaluation_ends_the_run_at_that_epoch() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--fanout", "5,5", "--epochs", "3"];
    // (flags, the epoch whose evaluation the stop comes in, iterations per epoch);
    // 140 training roots in global batches of 2 x 16 (1 x 32): 5 iterations per epoch.
    let cases: [(&[&str], u64, u64); 7] = [
        (&[&mb[..], &["--workers", "2", "--batch-size", "16", "--eval", "sampled"]].concat(), 1, 5),
        (&[&mb[..], &["--workers", "2", "--batch-size", "16", "--eval", "full"]].concat(), 2, 5),
        (&[&mb[..], &["--workers", "1", "--batch-size", "32"]].concat(), 1, 5),
        (&["--workers", "2", "--full-batch", "--model", "deepgcn", "--layers", "2", "--epochs", "4"], 2, 1),
        (&["--workers", "2", "--strategy", "varco", "--epochs", "4"], 2, 1),
        (&["--workers", "2", "--strategy", "gnnpipe", "--layers", "2", "--epochs", "4"], 2, 1),
        // The end of stage 1 of 2: RETEXO stops at stage boundaries.
        (&["--workers", "2", "--strategy", "retexo", "--rounds", "2"], 2, 1),
    ];
    for (k, (flags, epoch, per_epoch)) in cases.iter().enumerate() {
        let args = [&["train", "cora", "--no-tui", "--hidden", "16"][..], flags].concat();
        let (straight, cut) = (format!("straight{k}"), format!("cut{k}"));
        let whole = json(d, &[&args[..], &["--run", &straight]].concat());
        let stopped = json(d, &[&args[..], &["--run", &cut, "--stop-in-evaluation", &epoch.to_string()]].concat());
        let at = epoch * per_epoch;
        assert_eq!(stopped["iterations"], at, "{flags:?}: stopped at the end of epoch {epoch}");
        assert_eq!(stopped["epochs"], *epoch, "{flags:?}: the epoch stopped in is evaluated");
        assert_eq!(scores(&stopped)[..], scores(&whole)[..*epoch as usize], "{flags:?}");
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(format!("runs/{cut}/checkpoint/state.json"))).unwrap())
                .unwrap();
        let p = &state["progress"];
        assert_eq!((&p["global_iteration"], &p["epoch"], &p["iteration"]), (&at.into(), &(*epoch).into(), &0.into()));
        let resumed = json(d, &["train", "--resume", &cut, "--no-tui"]);
        assert_eq!(scores(&resumed), scores(&whole), "{flags:?}: losses and accuracies of every epoch");
        assert_eq!(resumed["iterations"], whole["iterations"], "{flags:?}");
        assert!(final_weights(d, &cut) == final_weights(d, &straight), "{flags:?}: final weights differ");
    }
}
