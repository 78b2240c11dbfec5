//! A worker whose OS refuses it a thread: the driver is told so, as such,
//! names the worker, its host and the limit, and does not restart on it.

mod dist_support;

use dist_support::{cora, local_options, small_cora_job, wrapped};
use leapgnn::DataDir;
use leapgnn::cluster::driver::DriverError;
use leapgnn::train::distributed::train_distributed;
use leapgnn::train::{Observer, RunOptions};
use leapgnn::util::threads::REFUSE_THREAD_TEST_VAR;
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
/// and no restart is tried.
#[test]
fn a_worker_refused_a_thread_is_named_with_its_limit_and_not_restarted() {
    let tmp = cora();
    let d = tmp.path();
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    // Rank 1 dials rank 0 on a thread of its own; only rank 1 is refused it.
    let body = format!(
        "case \" $* \" in *' --rank 1 '*) export {REFUSE_THREAD_TEST_VAR}=leapgnn-mesh-dial-0 ;; esac\nexec '{bin}' \"$@\"\n"
    );
    let launcher = wrapped(d, "refused.sh", &body);
    let interrupted = AtomicBool::new(false);
    let mut opts = local_options(&launcher, &interrupted);
    opts.restarts = 1;
    let run = RunOptions { run: Some("refused".into()), ..Default::default() };
    let mut restarts = Restarts::default();
    let e = train_distributed(&DataDir::new(d), small_cora_job(2, 1), &run, &opts, &mut restarts)
        .expect_err("worker 1 cannot build its mesh");
    let shown = format!("{e:#}");
    let refused = e.chain().find_map(|c| c.downcast_ref::<DriverError>());
    assert!(matches!(refused, Some(DriverError::ThreadRefused { rank: 1, .. })), "{shown}");
    let host = leapgnn::util::host_name();
    for needle in [
        format!("worker 1 on {host} cannot start thread leapgnn-mesh-dial-0: "),
        "(os error 11)".to_string(),
        "ulimit -u".to_string(),
        "threads-max".to_string(),
        "a restart would meet the same limit".to_string(),
    ] {
        assert!(shown.contains(&needle), "no `{needle}` in {shown}");
    }
    assert_eq!(restarts.0, 0, "restarted into the same limit: {shown}");
}
