//! The worker's side of the control plane: say hello, publish the mesh
//! address, receive the job, then report. A worker whose driver goes away
//! (connection closed or Shutdown) exits at once, so none is left orphaned.

use super::control::{ControlConn, ControlError, Hello, ToDriver, ToWorker};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HEARTBEAT: Duration = Duration::from_secs(2);

/// The job as the worker receives it.
#[derive(Debug, Clone)]
pub struct Job {
    pub rank: usize,
    pub world: usize,
    pub peers: Vec<SocketAddr>,
    pub secret: Vec<u8>,
    pub config: serde_json::Value,
    /// Bound before the job arrived; its address is `peers[rank]`.
    pub listener: Arc<TcpListener>,
}

/// Shared sender for reports (metrics, logs, done, error) from any thread.
#[derive(Clone)]
pub struct Reporter {
    conn: Arc<Mutex<ControlConn>>,
    stop: Arc<AtomicBool>,
}

impl Reporter {
    /// The driver asked this worker to stop gracefully (`ToWorker::Stop`).
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn send(&self, m: &ToDriver) -> Result<(), ControlError> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).send(m)
    }
}

/// Connects to the driver, announces `rank`, binds the mesh listener on
/// `mesh_bind`, and waits (bounded) for the job.
pub fn join(
    driver: SocketAddr,
    rank: usize,
    token: &str,
    mesh_bind: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<(Job, Reporter)> {
    let mut conn = ControlConn::connect(driver, timeout)?;
    conn.send(&ToDriver::Hello(Hello {
        rank,
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        token: token.to_string(),
    }))?;
    let listener = TcpListener::bind(mesh_bind)
        .map_err(|e| anyhow::anyhow!("worker {rank}: cannot bind the mesh listener on {mesh_bind}: {e}"))?;
    conn.send(&ToDriver::Listening(listener.local_addr()?))?;
    conn.set_read_timeout(Some(timeout))?;
    let (world, peers, secret_hex, config) = match conn.recv::<ToWorker>()? {
        ToWorker::Job { world, peers, secret_hex, config } => (world, peers, secret_hex, config),
        ToWorker::Stop | ToWorker::Shutdown => std::process::exit(0),
    };
    let secret = (0..secret_hex.len() / 2)
        .map(|i| u8::from_str_radix(&secret_hex[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| anyhow::anyhow!("driver sent a malformed job secret"))?;

    // Watchdog: Stop raises the flag the training loop polls; any Shutdown, close
    // or error on the control connection ends the process.
    let mut watch = conn.try_clone()?;
    watch.set_read_timeout(None)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let (why, code) = loop {
            match watch.recv::<ToWorker>() {
                Ok(ToWorker::Stop) => flag.store(true, Ordering::SeqCst),
                Ok(_) => break ("driver asked to shut down".to_string(), 0),
                Err(e) => break (format!("lost the driver ({e})"), 3),
            }
        };
        tracing::info!("worker {rank}: {why}; exiting");
        std::process::exit(code);
    });
    let reporter = Reporter { conn: Arc::new(Mutex::new(conn)), stop };
    let hb = reporter.clone();
    std::thread::spawn(move || {
        while hb.send(&ToDriver::Heartbeat).is_ok() {
            std::thread::sleep(HEARTBEAT);
        }
    });
    Ok((Job { rank, world, peers, secret, config, listener: Arc::new(listener) }, reporter))
}
