//! What a distributed run tells the event log: `--time-steps auto`'s decisions
//! at each epoch boundary, with the T it leaves, the T it takes and why.

mod dist_support;

use dist_support::{cora, local_options, small_cora_job};
use leapgnn::DataDir;
use leapgnn::cluster::LocalLauncher;
use leapgnn::metrics::StepRecord;
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::strategy::StrategyKind;
use leapgnn::train::{Observer, RunOptions, TrainConfig, TrainError};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

/// Keeps the events and, per epoch, the time steps worker 0 took in iteration 0.
#[derive(Default)]
struct Log {
    events: Vec<String>,
    steps: BTreeMap<u64, u32>,
}

impl Observer for Log {
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        if r.worker == 0 && r.iteration == 0 {
            *self.steps.entry(r.epoch).or_default() += 1;
        }
        Ok(())
    }
    fn event(&mut self, msg: &str) {
        self.events.push(msg.to_string());
    }
}

#[test]
fn auto_time_steps_log_each_decision_with_the_t_the_next_epoch_runs() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let epochs = 3;
    let cfg = TrainConfig { strategy: StrategyKind::Leapgnn, time_steps: None, ..small_cora_job(4, epochs) };
    let launcher =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let mut log = Log::default();
    let run = RunOptions { run: Some("auto".into()), ..Default::default() };
    train_distributed(&data, cfg, &run, &opts, &mut log).expect("the run succeeds");

    let decisions: Vec<&String> =
        log.events.iter().filter(|e| e.starts_with("[worker 0] --time-steps auto: T ")).collect();
    assert_eq!(decisions.len() as u64, epochs - 1, "one decision per epoch boundary: {:?}", log.events);
    for (e, d) in decisions.iter().enumerate() {
        let (from, to) = d["[worker 0] --time-steps auto: T ".len()..].split_once(" -> ").unwrap();
        let to: u32 = to.split(' ').next().unwrap().parse().unwrap();
        let from: u32 = from.parse().unwrap();
        let e = e as u64;
        assert_eq!((from, to), (log.steps[&e], log.steps[&(e + 1)]), "{d}");
        assert!(d.contains("slowest worker's mean iteration"), "{d}");
    }
}
