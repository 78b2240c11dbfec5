//! A worker whose OS refuses it a thread: the driver is told so, as such,
//! names the worker, its host and the limit, and does not restart on it.

mod dist_support;

use dist_support::{cora, local_options, open_to_all, processes_of, small_cora_job, wrapped};
use leapgnn::DataDir;
use leapgnn::cluster::driver::DriverError;
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::{Observer, RunOptions};
use leapgnn::util::threads::{REFUSE_THREAD_TEST_VAR, SPAWN_ATTEMPTS};
use std::sync::atomic::AtomicBool;

/// Counts the restarts a run announces.
#[derive(Default)]
struct Restarts(usize);

impl Observer for Restarts {
    fn restart(&mut self, _r: &leapgnn::metrics::RestartRecord) {
        self.0 += 1;
    }
}

/// Worker 1 of 2 is refused its mesh thread as a process/thread limit
/// refuses one (EAGAIN; the test hook, since RLIMIT_NPROC does not bind
/// root). The driver received that as any other worker error, in text: it
/// could not name the limit as the worker's host's, and `--restarts 1`
/// relaunched the job into the same limit. Now the refusal arrives as such:
/// the error names worker 1, its host, the thread and the limits to raise,
/// and no restart is tried. The hook's `NAME` stands for a limit of the
/// user's, which no wait frees: the worker reports it at its first refusal.
#[test]
fn a_worker_refused_a_thread_is_named_with_its_limit_and_not_restarted() {
    let (e, restarts) = refuse_worker_1("leapgnn-mesh-dial-0");
    let e = e.expect_err("worker 1 cannot build its mesh");
    let shown = format!("{e:#}");
    let refused = e.chain().find_map(|c| c.downcast_ref::<DriverError>());
    assert!(matches!(refused, Some(DriverError::ThreadRefused { rank: 1, .. })), "{shown}");
    // The worker names every limit its refusal may have met, as read on its
    // host (this one): pid_max and a cgroup's pids.max fill as threads-max does.
    let Some(DriverError::ThreadRefused { refusal, .. }) = refused else { panic!("{shown}") };
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    assert_eq!(refusal.limits.pid_max, Some(pid_max), "{shown}");
    assert!(refusal.limits.threads_in_use.is_some(), "{shown}");
    assert_eq!((refusal.attempts, refusal.waited_ms), (1, 0), "{shown}");
    assert!(!shown.contains(" times over "), "{shown}");
    let host = leapgnn::util::host_name();
    for needle in [
        format!("worker 1 on {host} cannot start thread leapgnn-mesh-dial-0: "),
        "(os error 11)".to_string(),
        "ulimit -u".to_string(),
        "threads-max".to_string(),
        format!("the kernel's pid_max of {pid_max} ("),
        "threads on the host".to_string(),
        "the cgroup's pids.max".to_string(),
        "a restart would meet the same limit".to_string(),
    ] {
        assert!(shown.contains(&needle), "no `{needle}` in {shown}");
    }
    assert_eq!(restarts, 0, "restarted into the same limit: {shown}");
}

/// EAGAIN is also a momentarily full kernel table (threads-max, pid_max, a
/// cgroup's pids.max), which frees as other processes end. Worker 1 was
/// refused its mesh thread once and the job failed as if past a limit; now
/// `threads::spawn` asks again, with a short backoff, and a refusal that
/// clears within its retries is not a failure.
#[test]
fn a_thread_refused_fewer_times_than_the_retries_starts_and_the_run_succeeds() {
    let (run, restarts) = refuse_worker_1(&format!("leapgnn-mesh-dial-0:{}", SPAWN_ATTEMPTS - 1));
    if let Err(e) = run {
        panic!("a refusal the retries outlast failed the run: {e:#}");
    }
    assert_eq!(restarts, 0);
}

/// ... and one that outlasts them is reported as a limit, saying it was
/// retried. (The old code did not know `NAME:N` and never refused here: the
/// run succeeded.)
#[test]
fn a_thread_refused_as_many_times_as_the_retries_is_reported_as_retried() {
    let (run, restarts) = refuse_worker_1(&format!("leapgnn-mesh-dial-0:{SPAWN_ATTEMPTS}"));
    let e = run.expect_err("worker 1 is refused its mesh thread at every attempt");
    let shown = format!("{e:#}");
    let refused = e.chain().find_map(|c| c.downcast_ref::<DriverError>());
    assert!(matches!(refused, Some(DriverError::ThreadRefused { rank: 1, .. })), "{shown}");
    let needle = format!(
        "cannot start thread leapgnn-mesh-dial-0: Resource temporarily unavailable (os error 11), refused {SPAWN_ATTEMPTS} times over "
    );
    assert!(shown.contains(&needle), "no `{needle}` in {shown}");
    assert_eq!(restarts, 0, "restarted into the same limit: {shown}");
}

/// Worker 1's compute threads do not fit its address-space limit (2000
/// stacks in 400 MiB: `ThreadPoolError::NoRoom`, found before any is asked
/// for). The driver received that as any worker's error, in text, and
/// `--restarts 1` relaunched the job into the same limit. Now it is not
/// restarted, and the error names worker 1, its host and its limit (not
/// "this process's", which the driver printing it would be).
#[test]
fn a_worker_whose_threads_do_not_fit_its_address_space_is_named_and_not_restarted() {
    let (run, restarts) = worker_1_under("export RAYON_NUM_THREADS=2000; exec prlimit --as=419430400 \"$bin\" \"$@\"");
    let e = run.expect_err("worker 1 cannot start its compute threads");
    let shown = format!("{e:#}");
    assert_eq!(restarts, 0, "restarted into the same limit: {shown}");
    let host = leapgnn::util::host_name();
    for needle in [
        format!("worker 1 on {host} cannot start 2000 compute thread(s): "),
        "within worker 1's address-space limit (RLIMIT_AS) of 400 MiB".to_string(),
        "prlimit --as".to_string(),
        "a restart would meet the same limit".to_string(),
    ] {
        assert!(shown.contains(&needle), "no `{needle}` in {shown}");
    }
    assert!(!shown.contains("this process's"), "{shown}");
    let typed = e.chain().find_map(|c| c.downcast_ref::<DriverError>());
    assert!(matches!(typed, Some(DriverError::NoRoom { rank: 1, threads: 2000, .. })), "{shown}");
}

/// candle starts a pool of its own (its barrier pool: one thread fewer than
/// CANDLE_NUM_THREADS, else than the compute threads) at its first large
/// elementwise op, and unwraps a refused thread: worker 1, run as a user of
/// its own whose process/thread limit (RLIMIT_NPROC, ulimit -u) of 12 left
/// no room for candle's 15, panicked at its first backward ("failed to spawn
/// candle barrier pool worker"), exited 101 and was restarted into the same
/// limit. Every process now starts candle's pool with its own, before any
/// work: the driver names worker 1, its host, candle's thread and the limit,
/// and does not restart it.
#[test]
fn a_worker_refused_one_of_candles_threads_is_named_not_a_panic_and_not_restarted() {
    // SAFETY: geteuid reads the process's credentials, nothing else.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running worker 1 as another user needs root (CI runs as root)");
        return;
    }
    // A uid that runs nothing, as the limit counts all of a user's threads.
    let uid = (65000 + std::process::id() % 300..65500).find(|&u| processes_of(u) == 0).unwrap();
    let setup = format!(
        "export CANDLE_NUM_THREADS=32 RAYON_NUM_THREADS=8; exec setpriv --reuid {uid} --regid {uid} --clear-groups prlimit --nproc=24 \
         \"$bin\" \"$@\""
    );
    let (run, restarts) = worker_1_under(&setup);
    let e = run.expect_err("worker 1 cannot start candle's pool");
    let shown = format!("{e:#}");
    assert!(!shown.contains("panicked") && !shown.contains("code 101"), "{shown}");
    assert_eq!(restarts, 0, "restarted into the same limit: {shown}");
    let host = leapgnn::util::host_name();
    for needle in [
        format!("worker 1 on {host} cannot start thread candle-bp-"),
        ": Resource temporarily unavailable (os error 11), within ".to_string(),
        "(RLIMIT_NPROC, ulimit -u) of 24".to_string(),
        "a restart would meet the same limit".to_string(),
    ] {
        assert!(shown.contains(&needle), "no `{needle}` in {shown}");
    }
}

/// Trains 2 workers of cora with `--restarts 1`, worker 1 under the thread
/// refusal hook `hook`; the run's outcome and the restarts it announced.
fn refuse_worker_1(hook: &str) -> (anyhow::Result<()>, usize) {
    // Rank 1 dials rank 0 on a thread of its own; only rank 1 is refused it.
    worker_1_under(&format!("export {REFUSE_THREAD_TEST_VAR}='{hook}'"))
}

/// Trains 2 workers of cora with `--restarts 1`, worker 1 started after the
/// shell lines `setup` (the binary is `$bin`); the run's outcome and the
/// restarts it announced.
fn worker_1_under(setup: &str) -> (anyhow::Result<()>, usize) {
    let tmp = cora();
    let d = tmp.path();
    // Open to a worker run as another user.
    open_to_all(d);
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    let body = format!("bin='{bin}'\ncase \" $* \" in *' --rank 1 '*) {setup} ;; esac\nexec \"$bin\" \"$@\"\n");
    let launcher = wrapped(d, "refused.sh", &body);
    let interrupted = AtomicBool::new(false);
    let mut opts = local_options(&launcher, &interrupted);
    opts.restarts = 1;
    let run = RunOptions { run: Some("refused".into()), ..Default::default() };
    let mut restarts = Restarts::default();
    let run = train_distributed(&DataDir::new(d), small_cora_job(2, 1), &run, &opts, &mut restarts);
    (run.map(drop), restarts.0)
}
