//! How worker processes are started. One small trait so `local` and `ssh`
//! launchers are interchangeable.

use std::net::SocketAddr;

/// What a launcher needs to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub rank: usize,
    /// The driver's control listener the worker connects back to.
    pub driver: SocketAddr,
    /// Per-job token the worker presents in its Hello (passed on stdin, not argv,
    /// so other users cannot read it from the process list).
    pub token: String,
    /// Extra environment for the worker (e.g. RAYON_NUM_THREADS).
    pub env: Vec<(String, String)>,
}

/// A started worker. Dropping it stops the worker (no orphans).
pub trait WorkerProcess: Send {
    fn rank(&self) -> usize;
    /// Non-blocking: `Some(code)` once the process has exited.
    fn try_exit_code(&mut self) -> Option<i32>;
    /// Stop the worker and everything it started; idempotent.
    fn kill(&mut self);
}

pub trait Launcher {
    fn name(&self) -> &'static str;
    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>>;
}
