//! The worker's side of the control plane: say hello, publish the mesh
//! address, receive the job, then report. A worker whose driver goes away
//! (connection closed or Shutdown) exits at once, so none is left orphaned.

use super::control::{ControlConn, ControlError, Hello, MAX_HANDSHAKE_FRAME, ThreadRefused, ToDriver, ToWorker};
use super::job_key::{self, Side};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a Slurm worker tells the driver (a log line) when Slurm signals its
/// step (SIGTERM, SIGINT): the job was cancelled, reached its time limit or
/// lost its allocation. A driver in the batch step is signalled too, but one
/// under `salloc` (outside the allocation) is not: the line is its cue to stop
/// every worker after the iteration, with a checkpoint, before Slurm's
/// SIGKILL `KillWait` seconds later.
pub const STEP_SIGNALLED: &str = "Slurm signalled this worker's step (the job was cancelled, reached its time limit \
                                  or lost its allocation): asking the driver to stop after this iteration, with a \
                                  checkpoint";

/// Relays each signal `signalled` receives (from the worker's handler) to the
/// driver as `STEP_SIGNALLED`, from a thread of its own, for as long as the
/// worker runs. Should its OS refuse the thread, the driver is told so
/// (`ToDriver::ThreadRefused`): the caller returns before it reports.
pub fn relay_step_signals(
    reporter: &Reporter,
    signalled: std::sync::mpsc::Receiver<()>,
) -> Result<(), crate::util::threads::SpawnError> {
    let relay = reporter.clone();
    crate::util::threads::spawn("leapgnn-step-signals", move || {
        while signalled.recv().is_ok() {
            if relay.send(&ToDriver::Log(STEP_SIGNALLED.into())).is_err() {
                break;
            }
        }
    })
    .inspect_err(|e| {
        // The driver also sees the process exit, should this not reach it.
        let _ = reporter.send(&ToDriver::ThreadRefused(ThreadRefused::of(e)));
    })?;
    Ok(())
}

/// What a worker tells the driver of its failure `e`, `line` being `e` in
/// one line: a thread its OS refused (anywhere in `e`'s chain) as such, so
/// that the driver names the limit and does not restart on it, and compute
/// threads that do not fit its address-space limit likewise; bad input
/// (`error::is_bad_input`) as a refusal, which a restart would meet again;
/// anything else as text.
pub fn failure(e: &anyhow::Error, line: impl FnOnce(&anyhow::Error) -> String) -> ToDriver {
    use crate::util::threads::{SpawnError, ThreadPoolError};
    if let Some(refused) = e.chain().find_map(|c| c.downcast_ref::<SpawnError>()) {
        return ToDriver::ThreadRefused(ThreadRefused::of(refused));
    }
    if let Some(ThreadPoolError::NoRoom { threads, why, limit }) =
        e.chain().find_map(|c| c.downcast_ref::<ThreadPoolError>())
    {
        let host = crate::util::host_name();
        return ToDriver::NoRoom { host, threads: *threads, why: why.clone(), limit: *limit };
    }
    if e.chain().any(crate::error::is_bad_input) { ToDriver::Refused(line(e)) } else { ToDriver::Error(line(e)) }
}

/// Test hook: with `LEAPGNN_TEST_CLAIM_BUILD=ID` in its environment, a
/// worker says hello as build ID and `leapgnn build-id` prints ID, as a stale
/// binary on a host would; a test cannot build a second binary of its own.
pub const CLAIM_BUILD_TEST_VAR: &str = "LEAPGNN_TEST_CLAIM_BUILD";

/// The build this process says it is: `crate::BUILD_ID`, unless the test hook claims another.
pub fn own_build() -> String {
    std::env::var(CLAIM_BUILD_TEST_VAR).unwrap_or_else(|_| crate::BUILD_ID.into())
}

/// How often a worker tells the driver it is alive (a thread of its own, so a
/// busy worker still beats; a stopped or hung process does not).
pub(super) const HEARTBEAT: Duration = Duration::from_secs(2);

/// The job as the worker receives it. Its Debug shows the secret's length only.
#[derive(Clone)]
pub struct Job {
    pub rank: usize,
    pub world: usize,
    pub peers: Vec<SocketAddr>,
    /// The mesh key, derived from the token and the job's public salt (`job_key`).
    pub secret: Vec<u8>,
    /// `--encrypt` (marked in the token): the mesh seals its traffic too.
    pub encrypt: bool,
    pub config: serde_json::Value,
    /// Bound before the job arrived; its address is `peers[rank]`.
    pub listener: Arc<TcpListener>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("peers", &self.peers)
            .field("secret", &crate::comm::Redacted(&self.secret))
            .field("encrypt", &self.encrypt)
            .field("config", &self.config)
            .field("listener", &self.listener)
            .finish()
    }
}

/// Shared sender for reports (metrics, logs, done, error) from any thread.
#[derive(Clone)]
pub struct Reporter {
    conn: Arc<Mutex<ControlConn>>,
    stop: Arc<AtomicBool>,
    held: Arc<Held>,
}

/// The highest count the driver said it holds the records through (`ToWorker::Held`).
#[derive(Default)]
struct Held {
    through: Mutex<u64>,
    raised: Condvar,
}

impl Held {
    fn raise(&self, n: u64) {
        let mut t = self.through.lock().unwrap_or_else(|e| e.into_inner());
        *t = (*t).max(n);
        self.raised.notify_all();
    }
}

impl Reporter {
    /// The driver asked this worker to stop gracefully (`ToWorker::Stop`).
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Waits, `within` at most, until the driver says it holds every
    /// worker's records through `n` (`ToWorker::Held`); false if it has not.
    /// A driver that goes away meanwhile ends the process (the watchdog).
    pub fn wait_held(&self, n: u64, within: Duration) -> bool {
        let t = self.held.through.lock().unwrap_or_else(|e| e.into_inner());
        let (t, _) = self.held.raised.wait_timeout_while(t, within, |t| *t < n).unwrap_or_else(|e| e.into_inner());
        *t >= n
    }

    pub fn send(&self, m: &ToDriver) -> Result<(), ControlError> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).send(m)
    }
}

/// Connects to the driver and proves, both ways, that each holds the job's
/// token, by `deadline`; the connection is sealed if the token asks it.
fn handshake(driver: SocketAddr, rank: usize, token: &str, deadline: Instant) -> anyhow::Result<ControlConn> {
    let (mut conn, nonce, driver_nonce) = loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let mut conn = ControlConn::connect(driver, left)?;
        let nonce = job_key::random_hex(job_key::TOKEN_BYTES);
        let hello = Hello { rank, pid: std::process::id(), version: own_build(), nonce: nonce.clone() };
        // The driver proves the token first, so nothing is sent to an impostor.
        let answer = conn
            .send(&ToDriver::Hello(hello))
            .and_then(|()| conn.recv_within::<ToWorker>(MAX_HANDSHAKE_FRAME, Some(deadline)));
        match answer {
            Ok(ToWorker::Challenge { nonce: dn, proof })
                if job_key::verify_control_proof(token, Side::Driver, rank, &nonce, &dn, &proof) =>
            {
                break (conn, nonce, dn);
            }
            // Anything else, a Shutdown included, comes from a peer that proved nothing: obey none of it.
            Ok(_) => anyhow::bail!(
                "worker {rank}: the program at {driver} could not prove it holds this job's token \
                 (is another program listening on the driver's address?)"
            ),
            // Dropped before the challenge: while strangers crowd the driver's door it
            // evicts connections whose hello it has not read yet, ours included when its
            // handshake thread was slow to run. Knock again with a fresh nonce.
            Err(e) if e.is_dropped() && Instant::now() < deadline => {
                tracing::debug!(
                    "worker {rank}: the driver dropped the connection before its challenge ({e}); reconnecting"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    };
    conn.send(&ToDriver::Proof(job_key::control_proof(token, Side::Worker, rank, &nonce, &driver_nonce)))?;
    if job_key::wants_encryption(token) {
        conn.encrypt(job_key::control_keys(token, Side::Worker, rank, &nonce, &driver_nonce));
        tracing::info!("worker {rank}: the control connection and the mesh carry sealed records (--encrypt)");
    }
    Ok(conn)
}

/// Tells the driver that worker `rank` cannot take a job: its compute
/// threads did not start (`threads::start_pool`'s `e`), a refused thread as
/// such (`failure`), and returns `e`. It waits, `timeout` at most, for the
/// driver to answer (it ends the run): a worker that exited at once could be
/// seen exiting before its report was read.
pub fn pool_refused(
    driver: SocketAddr,
    rank: usize,
    token: &str,
    timeout: Duration,
    e: crate::util::threads::ThreadPoolError,
    line: impl FnOnce(&anyhow::Error) -> String,
) -> anyhow::Error {
    let e = match e {
        // As itself, not inside the pool's error, which hands on only its cause.
        crate::util::threads::ThreadPoolError::Refused(refused) => anyhow::Error::new(refused),
        other => anyhow::Error::new(other),
    };
    let told = handshake(driver, rank, token, Instant::now() + timeout).and_then(|mut conn| {
        conn.send(&failure(&e, line))?;
        conn.set_read_timeout(Some(timeout))?;
        // Whatever it answers (Shutdown, or closing the connection) ends this worker.
        let _ = conn.recv::<ToWorker>();
        Ok(())
    });
    if let Err(lost) = told {
        tracing::warn!("worker {rank}: the driver was not told why this worker cannot start: {lost:#}");
    }
    e
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
    let mut conn = handshake(driver, rank, token, Instant::now() + timeout)?;
    let encrypt = job_key::wants_encryption(token);
    let listener = TcpListener::bind(mesh_bind)
        .map_err(|e| anyhow::anyhow!("worker {rank}: cannot bind the mesh listener on {mesh_bind}: {e}"))?;
    conn.send(&ToDriver::Listening(listener.local_addr()?))?;
    conn.set_read_timeout(Some(timeout))?;
    let (world, peers, mesh_salt, config) = match conn.recv::<ToWorker>()? {
        ToWorker::Job { world, peers, mesh_salt, config } => (world, peers, mesh_salt, config),
        ToWorker::Stop | ToWorker::Shutdown => std::process::exit(0),
        ToWorker::Challenge { .. } => anyhow::bail!("worker {rank}: the driver sent a second challenge"),
        ToWorker::Held(_) => anyhow::bail!("worker {rank}: the driver confirmed records before it sent the job"),
        ToWorker::Refused(why) => anyhow::bail!("worker {rank}: the driver refused this worker: {why}"),
    };
    let salt = job_key::from_hex(&mesh_salt)
        .ok_or_else(|| anyhow::anyhow!("worker {rank}: the driver sent a malformed mesh salt"))?;
    let secret = job_key::mesh_key(token, &salt);

    // Watchdog: Stop raises the flag the training loop polls; any Shutdown, close
    // or error on the control connection ends the process.
    let mut watch = conn.try_clone()?;
    watch.set_read_timeout(None)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let held = Arc::new(Held::default());
    let told = held.clone();
    crate::util::threads::spawn("leapgnn-watchdog", move || {
        let (why, code) = loop {
            match watch.recv::<ToWorker>() {
                Ok(ToWorker::Stop) => flag.store(true, Ordering::SeqCst),
                Ok(ToWorker::Held(n)) => told.raise(n),
                Ok(_) => break ("driver asked to shut down".to_string(), 0),
                Err(e) => break (format!("lost the driver ({e})"), 3),
            }
        };
        tracing::info!("worker {rank}: {why}; exiting");
        std::process::exit(code);
    })
    .map_err(|e| refused(&mut conn, rank, e))?;
    let reporter = Reporter { conn: Arc::new(Mutex::new(conn)), stop, held };
    let hb = reporter.clone();
    // Should it not start, the watchdog goes with the process, which this error ends.
    crate::util::threads::spawn("leapgnn-heartbeat", move || {
        while hb.send(&ToDriver::Heartbeat).is_ok() {
            std::thread::sleep(HEARTBEAT);
        }
    })
    .map_err(|e| refused(&mut reporter.conn.lock().unwrap_or_else(|e| e.into_inner()), rank, e))?;
    Ok((Job { rank, world, peers, secret, encrypt, config, listener: Arc::new(listener) }, reporter))
}

/// Tells the driver that thread refusal `e` ends worker `rank` before it
/// has a reporter (its caller returns before reporting), and says it here.
fn refused(conn: &mut ControlConn, rank: usize, e: crate::util::threads::SpawnError) -> anyhow::Error {
    // The driver also sees the process exit, should this not reach it.
    let _ = conn.send(&ToDriver::ThreadRefused(ThreadRefused::of(&e)));
    anyhow::anyhow!("worker {rank}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver whose door was crowded drops the worker's first connection
    /// before reading its hello; the worker must knock again, not give up.
    #[test]
    fn a_worker_dropped_before_the_challenge_connects_again() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let driver = std::thread::spawn(move || {
            let (first, _) = listener.accept().unwrap();
            first.shutdown(std::net::Shutdown::Both).unwrap();
            drop(first);
            let (second, _) = listener.accept().unwrap();
            let mut c = ControlConn::new(second, "worker");
            let hello = match c.recv::<ToDriver>().unwrap() {
                ToDriver::Hello(h) => h,
                m => panic!("expected a hello, got {m:?}"),
            };
            // A proof made with another token: the worker must refuse it.
            let proof = job_key::control_proof("not-the-token", Side::Driver, hello.rank, &hello.nonce, "00");
            c.send(&ToWorker::Challenge { nonce: "00".into(), proof }).unwrap();
            hello.rank
        });
        let mesh = "127.0.0.1:0".parse().unwrap();
        let err = join(addr, 1, "the-token", mesh, Duration::from_secs(10)).err().expect("a bad proof is refused");
        assert_eq!(driver.join().unwrap(), 1);
        assert!(err.to_string().contains("could not prove"), "{err}");
    }

    #[test]
    fn a_jobs_debug_shows_no_secret() {
        let secret: Vec<u8> = (200..232).collect();
        let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
        let job = Job {
            rank: 0,
            world: 1,
            peers: vec![listener.local_addr().unwrap()],
            secret: secret.clone(),
            encrypt: true,
            config: serde_json::json!({"task": "ping"}),
            listener,
        };
        let shown = format!("{job:?}");
        assert!(shown.contains("<32 bytes, not shown>") && shown.contains("ping"), "{shown}");
        assert!(!shown.contains("200, 201"), "{shown}");
        let mesh = crate::comm::MeshConfig::new(0, job.peers.clone(), secret);
        let shown = format!("{mesh:?}");
        assert!(shown.contains("<32 bytes, not shown>") && shown.contains("handshake_timeout"), "{shown}");
        assert!(!shown.contains("200, 201"), "{shown}");
    }
}
