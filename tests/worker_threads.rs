//! A worker whose OS refuses it a thread: the driver is told so, as such,
//! names the worker, its host and the limit, and does not restart on it.

mod dist_support;

use dist_support::{cora, local_options, small_cora_job, wrapped};
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

/// Trains 2 workers of cora with `--restarts 1`, worker 1 under the thread
/// refusal hook `hook`; the run's outcome and the restarts it announced.
fn refuse_worker_1(hook: &str) -> (anyhow::Result<()>, usize) {
    let tmp = cora();
    let d = tmp.path();
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    // Rank 1 dials rank 0 on a thread of its own; only rank 1 is refused it.
    let body = format!(
        "case \" $* \" in *' --rank 1 '*) export {REFUSE_THREAD_TEST_VAR}='{hook}' ;; esac\nexec '{bin}' \"$@\"\n"
    );
    let launcher = wrapped(d, "refused.sh", &body);
    let interrupted = AtomicBool::new(false);
    let mut opts = local_options(&launcher, &interrupted);
    opts.restarts = 1;
    let run = RunOptions { run: Some("refused".into()), ..Default::default() };
    let mut restarts = Restarts::default();
    let run = train_distributed(&DataDir::new(d), small_cora_job(2, 1), &run, &opts, &mut restarts);
    (run.map(drop), restarts.0)
}
