//! `leapgnn worker`: started by `train` and `infer` (never by hand). Reads the job token
//! from stdin, connects back to the driver, runs what the job says.

use crate::Global;
use anyhow::Context;
use leapgnn::cluster::ToDriver;
use leapgnn::cluster::launcher::describe_threads;
use leapgnn::cluster::worker_session::{self, Job, Reporter};
use leapgnn::util::threads::ThreadPoolError;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The driver's control address.
    #[arg(long)]
    pub driver: SocketAddr,
    #[arg(long, allow_negative_numbers = true)]
    pub rank: usize,
    /// Address to bind the worker mesh listener on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind: SocketAddr,
    /// Seconds to wait for the driver at each step of the start-up.
    #[arg(long, default_value_t = 60, allow_negative_numbers = true)]
    pub timeout: u64,
}

pub fn run(g: &Global, a: Args, pool: Result<(), ThreadPoolError>) -> anyhow::Result<()> {
    leapgnn::util::core_dumps::disable_or_warn("worker");
    let mut token = String::new();
    std::io::stdin().read_line(&mut token).context("worker: cannot read the job token from stdin")?;
    // Started by the Slurm launcher: the token is sealed with MUNGE (Slurm forwards stdin in clear).
    // At most one signal waits to be relayed; more say nothing new.
    let (signalled, relay) = std::sync::mpsc::sync_channel::<()>(1);
    let slurm = token.starts_with(leapgnn::cluster::slurm::MUNGE_PREFIX);
    if slurm {
        token = leapgnn::cluster::slurm::open_token(token.trim())?;
    }
    if let Err(e) = pool {
        let timeout = Duration::from_secs(a.timeout);
        return Err(worker_session::pool_refused(a.driver, a.rank, token.trim(), timeout, e, crate::output::one_line));
    }
    if slurm {
        // `scancel` signals every step at once: the driver, signalled too, stops the workers
        // after a checkpoint; a worker that died first would take that checkpoint with it.
        // A driver under salloc is not signalled: the worker tells it. Slurm's SIGKILL after
        // KillWait still ends a worker whose driver is gone.
        ctrlc::set_handler(move || {
            tracing::info!("signal ignored: the driver stops this worker");
            let _ = signalled.try_send(());
        })
        .context("cannot install the worker's signal handler")?;
        leapgnn::progress::signals::ignore_time_limit_warning()
            .context("cannot install the worker's SIGUSR1 handler")?;
    }
    let (job, reporter) = worker_session::join(a.driver, a.rank, token.trim(), a.bind, Duration::from_secs(a.timeout))?;
    if slurm {
        worker_session::relay_step_signals(&reporter, relay)?;
    }
    // The test harness and operators find a worker by these (the driver prefixes `[worker r]`).
    leapgnn::elog!(
        "pid {}, mesh listening on {}, {}",
        std::process::id(),
        job.peers[job.rank],
        describe_threads(rayon::current_num_threads())
    );
    tracing::info!("worker {} of {}: joined, job {}", job.rank, job.world, job.config);
    let result = match job.config.get("task").and_then(|t| t.as_str()) {
        // Takes the job: the worker's mesh listener is closed once the mesh is built.
        Some("train") => leapgnn::train::distributed::run_worker(job, &reporter, &g.data()),
        // `infer --workers/--cluster`: scores the nodes of this worker's part.
        Some("infer") => leapgnn::train::distributed::run_infer_worker(job, &reporter, &g.data()),
        // Bandwidth and latency of every pair of workers (`tune-merge --calibrate`).
        Some("probe") => leapgnn::cost::probe::probe_worker(job),
        _ => run_job(&job, &reporter),
    };
    let msg = match &result {
        Ok(v) => ToDriver::Done(v.clone()),
        Err(e) => worker_session::failure(e, crate::output::one_line),
    };
    reporter.send(&msg)?;
    result.map(|_| ())
}

fn run_job(job: &Job, reporter: &Reporter) -> anyhow::Result<serde_json::Value> {
    match job.config.get("task").and_then(|t| t.as_str()) {
        // Liveness probe: used by cluster checks to prove a worker starts, connects and reports.
        Some("ping") => Ok(serde_json::json!({
            "rank": job.rank,
            "world": job.world,
            "pid": std::process::id(),
            "threads": rayon::current_num_threads(),
            "version": env!("CARGO_PKG_VERSION"),
        })),
        // Holds a started worker for `seconds` (the driver may stop it sooner): lets checks and
        // tests act on a running remote worker. Announces its pid first.
        Some("wait") => {
            let secs = job.config.get("seconds").and_then(|s| s.as_f64()).unwrap_or(10.0);
            if !(0.0..=86_400.0).contains(&secs) {
                return Err(leapgnn::BadInput::new(format!(
                    "worker {}: wait seconds {secs} outside 0..=86400",
                    job.rank
                ))
                .into());
            }
            reporter.send(&ToDriver::Log(format!("waiting {secs}s, pid {}", std::process::id())))?;
            std::thread::sleep(Duration::from_secs_f64(secs));
            Ok(serde_json::json!({"rank": job.rank, "pid": std::process::id(), "waited": secs}))
        }
        other => Err(leapgnn::BadInput::new(format!("worker {}: unknown task {other:?} in the job", job.rank)).into()),
    }
}
