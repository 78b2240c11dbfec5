//! Workers as child processes of the driver on this machine.

use super::launcher::{
    ChildWorker, Launcher, LogSink, THREADS_VAR, WorkerProcess, WorkerSpec, stderr_log, threads_per_worker,
    threads_preset,
};
use anyhow::Context;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub struct LocalLauncher {
    /// The `leapgnn` binary to run (normally the driver's own executable).
    pub binary: PathBuf,
    /// Flags every worker gets before its own (e.g. `--data-dir`).
    pub args: Vec<String>,
    /// Where the workers' stderr lines go (`[worker r] line`).
    pub log: LogSink,
    /// A local profile's `cluster.env`, for every worker (a job's own on top).
    pub env: Vec<(String, String)>,
}

impl LocalLauncher {
    pub fn new(binary: impl Into<PathBuf>, args: Vec<String>) -> Self {
        LocalLauncher { binary: binary.into(), args, log: stderr_log(), env: vec![] }
    }

    /// Runs this executable.
    pub fn current(args: Vec<String>) -> anyhow::Result<Self> {
        let binary = std::env::current_exe().context("cannot find the leapgnn executable to start workers")?;
        Ok(Self::new(binary, args))
    }

    /// Sets `env` in every worker's environment (a profile's `cluster.env`).
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// Sends worker output to `log` instead of stderr (e.g. a dashboard's event log).
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }
}

impl Launcher for LocalLauncher {
    fn name(&self) -> &'static str {
        "local"
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.args)
            .arg("worker")
            .arg("--driver")
            .arg(spec.driver.to_string())
            .arg("--rank")
            .arg(spec.rank.to_string());
        // All of them on this machine: each gets its share of the cores unless the operator set it.
        if threads_preset().is_none() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            cmd.env(THREADS_VAR, threads_per_worker(cores, spec.world).to_string());
        }
        cmd.envs(self.env.iter().chain(&spec.env).map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Own process group: a terminal's Ctrl-C reaches the driver only, which
            // then stops the workers in order instead of them dying mid-write.
            .process_group(0);
        let mut child = crate::util::threads::start_process(format!("leapgnn-worker-{}", spec.rank), || cmd.spawn())
            .with_context(|| format!("cannot run {}", self.binary.display()))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stderr = child.stderr.take().expect("piped stderr");
        let rank = spec.rank;
        let log = self.log.clone();
        // Held from here: should the token or its log thread fail, dropping it kills the worker.
        let worker = ChildWorker::new(rank, child, None);
        writeln!(stdin, "{}", spec.token).with_context(|| format!("cannot pass the job token to worker {}", rank))?;
        drop(stdin);
        crate::util::threads::spawn(format!("leapgnn-log-{rank}"), move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log(format!("[worker {rank}] {line}"));
            }
        })?;
        Ok(Box::new(worker))
    }
}
