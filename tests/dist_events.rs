//! What a run tells its observers: `--time-steps auto`'s decisions at each
//! epoch boundary, with the T it leaves, the T it takes and why; and, before
//! its first record, what it is (`RunInfo`), the engine included; where the
//! workers of each attempt run, as the dashboard shows it; and the workers'
//! refusal of a partition replaced after the driver read it.

mod dist_support;
mod tui_support;

use dist_support::{cora, local_options, small_cora_job, wide_full_graph_cora_job, wrapped};
use leapgnn::DataDir;
use leapgnn::cluster::{Launcher, LocalLauncher, WorkerProcess, WorkerSpec};
use leapgnn::metrics::{RunInfo, StepRecord};
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::strategy::StrategyKind;
use leapgnn::train::{EvalMode, Observer, RunOptions, TrainConfig, TrainError, TrainMode};
use leapgnn::tui::{DashboardState, Ui};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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

/// What a run says it is, and the miss rates of its records.
#[derive(Default)]
struct Started {
    info: Vec<RunInfo>,
    miss: Vec<Option<f64>>,
}

impl Observer for Started {
    fn start(&mut self, info: &RunInfo) {
        self.info.push(info.clone());
    }
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.miss.push(r.rows.miss_rate());
        Ok(())
    }
}

/// The dashboard's header names the engine from `RunInfo::mode`: a full-graph
/// run (driver and workers, or one process) says `full-graph`, a mini-batch
/// run nothing. Its records request no feature rows, so they carry no miss
/// rate (JSON null), where a mini-batch run's carry one.
#[test]
fn a_full_graph_run_says_so_before_its_first_record_and_records_no_miss_rate() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let full = |workers| TrainConfig {
        mode: TrainMode::FullGraph,
        fanouts: "all,all".parse().unwrap(),
        eval_fanouts: "all,all".parse().unwrap(),
        eval: EvalMode::Full,
        ..small_cora_job(workers, 2)
    };
    let launcher =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let run = |name: &str| RunOptions { run: Some(name.into()), ..Default::default() };

    let mut dist = Started::default();
    let s = train_distributed(&data, full(2), &run("fg2"), &opts, &mut dist).expect("the run succeeds");
    let mut solo = Started::default();
    leapgnn::train::train(&data, full(1), &run("fg1"), &mut solo).expect("the run succeeds");
    for (who, got) in [("2 workers", &dist), ("1 worker", &solo)] {
        assert_eq!(got.info.len(), 1, "{who}");
        let info = &got.info[0];
        assert_eq!((info.strategy.as_str(), info.mode.as_deref()), ("model-centric", Some("full-graph")), "{who}");
        assert!(!got.miss.is_empty() && got.miss.iter().all(Option::is_none), "{who}: {:?}", got.miss);
    }
    let rows = s.rows.expect("a run that trained counts its rows");
    assert_eq!((rows.requested, rows.miss_rate(), s.miss_rate), (0, None, Some(0.0)));
    let json = serde_json::to_value(&s).unwrap();
    assert!(json["miss_rate"] == 0.0 && json["mode"] == "full-graph", "{json}");

    let mut mini = Started::default();
    train_distributed(&data, small_cora_job(2, 1), &run("mb"), &opts, &mut mini).expect("the run succeeds");
    assert_eq!(mini.info[0].mode, None);
    assert!(mini.miss.iter().all(Option::is_some), "{:?}", mini.miss);
}

/// Local workers placed as they are launched, as the ssh launcher places an
/// unreachable host's ranks on a spare: the n-th launch of the run (from 0)
/// runs "on" `node-n`. Each launched worker can be killed, as a host failure would.
struct Placing<'a> {
    local: &'a LocalLauncher,
    hosts: Mutex<Vec<String>>,
    launched: Mutex<Vec<Launched>>,
}

/// A launched worker, shared between the driver and the test that kills it.
type Launched = Arc<Mutex<Box<dyn WorkerProcess>>>;

struct Shared(Launched);

impl WorkerProcess for Shared {
    fn rank(&self) -> usize {
        self.0.lock().unwrap().rank()
    }
    fn try_exit_code(&mut self) -> Option<i32> {
        self.0.lock().unwrap().try_exit_code()
    }
    fn kill(&mut self) {
        self.0.lock().unwrap().kill()
    }
}

impl Launcher for Placing<'_> {
    fn name(&self) -> &'static str {
        "placing"
    }
    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let worker = Arc::new(Mutex::new(self.local.launch(spec)?));
        let mut launched = self.launched.lock().unwrap();
        let mut hosts = self.hosts.lock().unwrap();
        let len = hosts.len().max(spec.rank + 1);
        hosts.resize(len, String::new());
        hosts[spec.rank] = format!("node-{}", launched.len());
        launched.push(Arc::clone(&worker));
        Ok(Box::new(Shared(worker)))
    }
    fn host_of(&self, rank: usize) -> String {
        self.hosts.lock().unwrap().get(rank).cloned().unwrap_or_else(|| "unplaced".into())
    }
}

/// What the dashboard is told, applied to its state; kills the last worker
/// launched at the first record of epoch `kill_in` (once).
struct Dashboard<'a> {
    state: DashboardState,
    placing: &'a Placing<'a>,
    kill_in: Option<u64>,
}

impl Observer for Dashboard<'_> {
    fn start(&mut self, info: &RunInfo) {
        self.state.start(info.clone());
    }
    fn hosts(&mut self, hosts: &[String]) {
        self.state.set_hosts(hosts.to_vec());
    }
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.state.apply_record(r);
        if self.kill_in.is_some_and(|e| r.epoch >= e) {
            self.kill_in = None;
            let last = self.placing.launched.lock().unwrap().last().cloned().expect("workers were launched");
            last.lock().unwrap().kill();
        }
        Ok(())
    }
}

/// `--restarts`: the relaunched workers run where the launcher placed them
/// this time, and the dashboard's host column says so. The old driver asked
/// the launcher before relaunching, so the column kept the failed attempt's
/// hosts (and a spare's ranks showed the host that was lost).
#[test]
fn after_a_restart_the_dashboard_shows_where_the_relaunched_workers_run() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let local =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let placing = Placing { local: &local, hosts: Mutex::default(), launched: Mutex::default() };
    let interrupted = AtomicBool::new(false);
    let opts = leapgnn::train::distributed::DistOptions { restarts: 1, ..local_options(&local, &interrupted) };
    let opts = leapgnn::train::distributed::DistOptions { launcher: &placing, ..opts };
    let mut shown = Dashboard { state: DashboardState::default(), placing: &placing, kill_in: Some(1) };
    let run = RunOptions { run: Some("moved".into()), ..Default::default() };
    let cfg = TrainConfig { checkpoint_every: 2, ..small_cora_job(2, 2) };
    train_distributed(&data, cfg, &run, &opts, &mut shown).expect("the run restarts and succeeds");

    assert_eq!(placing.launched.lock().unwrap().len(), 4, "one relaunch of both workers");
    assert_eq!(shown.state.info.hosts, ["node-2", "node-3"]);
    let screen = tui_support::render(&shown.state, &Ui::default(), 160, 40);
    for w in 0..2 {
        let cells = tui_support::worker_cells(&screen, w);
        assert!(cells.contains(&format!("node-{}", w + 2)), "worker {w}: {cells:?}\n{screen}");
    }
}

/// Workers started through a wrapper that re-partitions the dataset with
/// another seed first, as a second `train --seed 9` on the same dataset and
/// parts does while this run starts: the workers open a partitioning the
/// driver never read, and refuse it (they trained on it without a word).
#[test]
fn workers_refuse_a_partition_replaced_after_the_driver_read_it() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    let script = format!(
        "'{bin}' --data-dir '{}' partition cora --parts 2 --seed 9 >/dev/null 2>&1 || exit 3\nexec '{bin}' \"$@\"\n",
        tmp.path().display()
    );
    let launcher = wrapped(tmp.path(), "repartition-then-work.sh", &script);
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let run = RunOptions { run: Some("raced".into()), ..Default::default() };
    let e = train_distributed(&data, small_cora_job(2, 1), &run, &opts, &mut Log::default())
        .expect_err("workers on another partitioning than the driver's");
    let e = format!("{e:#}");
    assert!(e.contains("was replaced after this run's driver read it") && e.contains("metis-2"), "{e}");
    // Unraced, the same job trains.
    let plain = LocalLauncher::new(bin, vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let opts = local_options(&plain, &interrupted);
    let run = RunOptions { run: Some("calm".into()), ..Default::default() };
    train_distributed(&data, small_cora_job(2, 1), &run, &opts, &mut Log::default()).expect("the run succeeds");
}

/// Each full-graph worker checks its own share against its own host before
/// loading it: workers started under `prlimit --as` (as a Slurm node's or
/// an ssh host's limit, which the driver cannot read) with a model whose
/// estimate is over that limit refuse at once, naming the worker, the host
/// and what to do, and the driver fails naming the worker (no hang, no
/// allocation failure mid-epoch). The same job without the limit trains.
#[test]
fn full_graph_workers_refuse_a_share_over_their_own_hosts_limit() {
    let tmp = cora();
    let data = DataDir::new(tmp.path());
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    // 1 GiB of address space: the worker starts and builds its model well under it.
    let launcher =
        wrapped(tmp.path(), "capped-worker.sh", &format!("exec prlimit --as={} '{bin}' \"$@\"\n", 1u64 << 30));
    let job = || wide_full_graph_cora_job();
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let run = RunOptions { run: Some("capped".into()), ..Default::default() };
    let e = train_distributed(&data, job(), &run, &opts, &mut Log::default()).expect_err("over the workers' limit");
    let e = format!("{e:#}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for needle in [
        format!("on {}: --mode full-graph needs an estimated", host.trim()),
        format!("raise the limit on {} (ulimit -v, prlimit --as", host.trim()),
    ] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    assert!(dist_support::names_its_workers_limit(&e, host.trim()), "{e}");
    let plain = LocalLauncher::new(bin, vec!["--data-dir".into(), tmp.path().display().to_string()]);
    let opts = local_options(&plain, &interrupted);
    let run = RunOptions { run: Some("free".into()), ..Default::default() };
    train_distributed(&data, job(), &run, &opts, &mut Log::default()).expect("the run succeeds");
}
