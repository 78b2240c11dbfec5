//! What each worker of a distributed run checks of its own host's memory
//! before it loads its share: the shares of every rank the driver placed on
//! that host together, each the share its partition gives it. A host the
//! driver cannot read (an ssh host, a Slurm node) is stood for by local
//! workers started with `LEAPGNN_TEST_MEM_AVAILABLE`, which only they see.

mod dist_support;

use dist_support::{
    Tiny, cora, leapgnn, local_options, mib_before, wide_full_graph_cora_job, workers_take_the_drivers_limit, wrapped,
    write_tiny,
};
use leapgnn::DataDir;
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::strategy::StrategyKind;
use leapgnn::train::{Observer, Prefetch, RunOptions, TrainConfig};
use leapgnn::util::MEM_AVAILABLE_TEST_VAR;
use std::path::Path;
use std::sync::atomic::AtomicBool;

const MIB: u64 = 1 << 20;

/// Takes the run's records and events and keeps none.
struct Quiet;

impl Observer for Quiet {}

/// Trains `cfg` on local workers that read `free` bytes as their host's
/// MemAvailable (the driver reads this machine's), as run `name`.
fn train_with_free(data: &Path, cfg: TrainConfig, name: &str, free: u64) -> anyhow::Result<()> {
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    let body = format!("exec env {MEM_AVAILABLE_TEST_VAR}={free} '{bin}' \"$@\"\n");
    let launcher = wrapped(data, &format!("{name}.sh"), &body);
    let interrupted = AtomicBool::new(false);
    let opts = local_options(&launcher, &interrupted);
    let run = RunOptions { run: Some(name.into()), ..Default::default() };
    train_distributed(&DataDir::new(data), cfg, &run, &opts, &mut Quiet).map(|_| ())
}

/// The MiB figure just after `after` in `e`.
fn mib_after(e: &str, after: &str) -> u64 {
    let at = e.find(after).unwrap_or_else(|| panic!("no `{after}` in {e}"));
    let n: String = e[at + after.len()..].chars().take_while(char::is_ascii_digit).collect();
    n.parse().unwrap_or_else(|_| panic!("no figure after `{after}` in {e}"))
}

/// Two full-graph workers on one host: where its MemAvailable holds one
/// worker's share and a half, each worker's share fits alone (the old check
/// held each to its own and started them, to fail on an allocation), but
/// not the two together: both are refused, naming the two on the host. With
/// three shares' worth free, the job trains.
#[test]
fn full_graph_workers_on_one_host_hold_their_shares_together() {
    let tmp = cora();
    let d = tmp.path();
    let job = || wide_full_graph_cora_job();
    // Room for both workers' weights, not for one share: its figure.
    let e = format!("{:#}", train_with_free(d, job(), "small", 400 * MIB).expect_err("one share is over 400 MiB"));
    let share = mib_after(&e, "--mode full-graph needs an estimated ");
    assert!(share > 400, "{e}");

    let e = format!("{:#}", train_with_free(d, job(), "tight", share * 3 / 2 * MIB).expect_err("two shares over"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let together = format!(" MiB for the 2 workers on {} together", host.trim());
    assert!(mib_before(&e, &together) > share * 3 / 2, "{e}");
    for needle in ["MiB are available there (MemAvailable in /proc/meminfo)", "run fewer --workers"] {
        assert!(e.contains(needle), "no `{needle}` in {e}");
    }
    train_with_free(d, job(), "roomy", share * 3 * MIB).expect("both shares fit");
}

/// A mini-batch worker holds the share its partition routes it, with those
/// of the other workers on its host: every train node here hashes to part 0,
/// so worker 0 trains all 2 x 256 roots of an iteration in one time step.
/// The driver's refusal under a `--memory-limit-mb` gives the two workers'
/// figures with that ownership; workers that read a little less than their
/// sum as MemAvailable are refused, naming the routed roots. The old worker
/// check held one worker with one batch of roots, which fitted, and trained.
#[test]
fn minibatch_workers_hold_the_roots_routed_to_their_host() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let part_zero = |v: u32| leapgnn::util::rng::mix64(v as u64).is_multiple_of(2);
    write_tiny(d, "skew", Tiny { nodes: 8000, dim: 1024, train_if: Some(part_zero), ..Tiny::default() });
    let cfg = TrainConfig {
        dataset: "skew".into(),
        workers: 2,
        parts: 2,
        epochs: 1,
        partition: Some("hash".into()),
        strategy: StrategyKind::Leapgnn,
        time_steps: Some(1),
        prefetch: Prefetch::On,
        batch_size: 256,
        eval_batch_size: 64,
        fanouts: "2,2".parse().unwrap(),
        eval_fanouts: "2,2".parse().unwrap(),
        hidden: 32,
        ..TrainConfig::default()
    };
    let interrupted = AtomicBool::new(false);
    let plain = leapgnn::cluster::LocalLauncher::new(
        env!("CARGO_BIN_EXE_leapgnn"),
        vec!["--data-dir".into(), d.display().to_string()],
    );
    let opts = local_options(&plain, &interrupted);
    let capped = |mib: u64| {
        let run = RunOptions { run: Some("capped".into()), memory_limit: Some(mib * MIB), ..Default::default() };
        let e = train_distributed(&DataDir::new(d), cfg.clone(), &run, &opts, &mut Quiet);
        format!("{:#}", e.expect_err("over the limit"))
    };
    // Before partitioning, one batch each; then, partitioned, the routed figures.
    let even = mib_before(&capped(10), " MiB for the 2 workers and the driver on this machine together");
    let e = capped(even);
    assert!(e.contains("for up to 512 roots one worker owns"), "{e}");
    let routed = mib_before(&e, " MiB for the 2 workers and the driver on this machine together");
    // The two workers' sum (the driver's 64 MiB and a MiB of rounding off).
    let free = routed - 64 - 2;
    let e = format!("{:#}", train_with_free(d, cfg.clone(), "tight", free * MIB).expect_err("over the host's memory"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for needle in [
        "for up to 512 roots one worker owns in an iteration and 512 in one time step".to_string(),
        format!(" MiB for the 2 workers on {} together", host.trim()),
        format!("but {free} MiB are available (MemAvailable in /proc/meminfo)"),
    ] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    train_with_free(d, cfg, "roomy", (routed + 64) * MIB).expect("the host holds both");
}

/// The workers started on the driver's machine hold it to one reading of
/// its MemAvailable, the driver's, taken before it started them. Each read
/// its own as it started: one that started after its neighbour had loaded
/// its share saw MemAvailable lowered by it and held that share against it
/// a second time, so the same run was refused or not by the order in which
/// its workers started. Each worker says (at -vv) what it held its host to.
#[test]
fn local_workers_hold_their_machine_to_the_drivers_one_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let out = leapgnn(d, &["-vv", "train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let held = |rank: usize| {
        let said = format!("worker {rank}: this host's workers are held together to ");
        let line = err.lines().find_map(|l| l.split_once(said.as_str())).map(|(_, r)| r);
        line.unwrap_or_else(|| panic!("worker {rank} does not say what it held its host to: {err}")).to_string()
    };
    let (first, second) = (held(0), held(1));
    assert_eq!(first, second, "{err}");
    let source = "(MemAvailable in /proc/meminfo, as the driver read it before it started its workers there)";
    assert!(first.ends_with(source), "{first}");
}

/// `--memory-limit-mb M` holds the workers and the driver on this machine
/// to M MiB together, in place of its MemAvailable: the driver checked them
/// against M, but each local worker then checked itself against
/// MemAvailable and refused a run the user had sized (here a machine that
/// stands for one with 1 MiB free, and an M that holds the run). The
/// workers now take the driver's M.
#[test]
fn local_workers_take_the_drivers_memory_limit_in_place_of_mem_available() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    workers_take_the_drivers_limit(
        d,
        &["train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui", "--memory-limit-mb", "4096"],
    );
}
