//! The driver's side of a job: start W workers, admit each one's control
//! connection, hand out the job, then relay what they report until all are
//! done, one fails, or the user interrupts. Workers are stopped on every exit
//! path (their handles kill on drop).

use super::control::{ControlConn, ControlError, MAX_HANDSHAKE_FRAME, ThreadRefused, ToDriver, ToWorker};
use super::job_key::{self, Side};
use super::launcher::{Launcher, WorkerProcess, WorkerSpec};
use super::worker_session::HEARTBEAT;
use crate::util::threads::{SpawnError, spawn};
use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How long a worker's exit may precede the delivery of its last messages.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// After a worker's failure, how long the others get to report theirs (their
/// steps finished before they noticed arrive first) before all are stopped.
const SETTLE_GRACE: Duration = Duration::from_secs(5);
/// Workers' messages the driver loop has not handled yet.
const READER_QUEUE: usize = 1024;
/// A turn of the driver loop longer than this (it polls every 200 ms) means
/// the driver was not listening: stopped (Ctrl-Z, SIGSTOP), descheduled, or
/// slow to handle an event. That time is not the workers' silence.
const STALL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// How long workers get to start and connect back.
    pub start_timeout: Duration,
    /// A worker silent for this long (no metrics, no heartbeat) is declared lost.
    pub silence_timeout: Duration,
    /// Address the control listener binds (127.0.0.1:0 for local workers).
    pub bind: SocketAddr,
    /// `--encrypt`: the control connections and the workers' mesh carry sealed records.
    pub encrypt: bool,
    /// How long one connection gets to prove the token (`ADMIT_DEADLINE`);
    /// a test raises it to show that no worker ever waits behind a stranger.
    pub admit_deadline: Duration,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            start_timeout: Duration::from_secs(60),
            silence_timeout: Duration::from_secs(120),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            encrypt: false,
            admit_deadline: ADMIT_DEADLINE,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("worker {rank} did not connect back within {secs}s (see its log lines above)")]
    StartTimeout { rank: usize, secs: u64 },
    #[error("worker {rank} {} before finishing", super::launcher::describe_exit(*.code))]
    Exited { rank: usize, code: i32 },
    #[error("worker {rank} failed: {message}")]
    WorkerFailed { rank: usize, message: String },
    /// Worker `rank` refused its job as bad input (`ToDriver::Refused`): the
    /// run exits 2 and `--restarts` does not relaunch it into the same refusal.
    #[error("worker {rank} failed: {message}")]
    WorkerRefused { rank: usize, message: String },
    /// The OS of worker `rank`'s host refused it a thread: restarting it
    /// would meet the same limit, so `--restarts` does not.
    #[error(
        "worker {rank} on {host} {}: a restart would meet the same limit",
        crate::util::threads::refusal(
            "thread",
            &.refusal.thread,
            &.refusal.os_error,
            .refusal.attempts,
            .refusal.waited_ms,
            &.refusal.limits,
            Some(.refusal.host.as_str())
        ),
        host = .refusal.host
    )]
    ThreadRefused { rank: usize, refusal: Box<ThreadRefused> },
    /// Worker `rank`'s compute threads do not fit its address-space limit
    /// (`ToDriver::NoRoom`): not restarted, as a refused thread is not.
    #[error(
        "worker {rank} on {host} {}: a restart would meet the same limit",
        crate::util::threads::no_room(*.threads, .why, *.limit, Some(&format!("worker {rank}'s")))
    )]
    NoRoom { rank: usize, host: String, threads: usize, why: String, limit: u64 },
    /// Worker `rank` proved the job token but runs another build, whose
    /// messages the driver's may not parse: not restarted, it would be again.
    #[error(
        "worker {rank} on {host} (connected from {from}) runs leapgnn build {worker}, not the driver's {driver}: \
         {advice}",
        host = .other.host,
        from = .other.from,
        worker = .other.worker,
        driver = .other.driver,
        advice = .other.advice
    )]
    OtherBuild { rank: usize, other: Box<OtherBuild> },
    #[error("worker {rank} sent nothing for {secs}s (no heartbeat): presumed lost")]
    Silent { rank: usize, secs: u64 },
    /// A worker that stopped (SIGSTOP, a hung host) keeps its connections open,
    /// so its peers time out waiting for it, each naming whichever peer it
    /// waited on (in a ring, often another survivor); `echo` is the first of
    /// those errors.
    #[error(
        "worker {rank} stopped answering: nothing from it, not even a heartbeat, for {secs}s, while its peers \
         gave up waiting (the first to report: {echo})"
    )]
    Unresponsive { rank: usize, secs: u64, echo: Box<DriverError> },
    #[error("interrupted: all workers stopped")]
    Interrupted,
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("control listener on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    // The source is not in the line: `{:#}` adds its chain after it.
    #[error("cannot start worker {rank}")]
    Launch {
        rank: usize,
        #[source]
        source: anyhow::Error,
    },
    #[error("driver: {0}")]
    Thread(#[from] SpawnError),
}

/// A worker of another build than the driver's (`DriverError::OtherBuild`).
#[derive(Debug)]
pub struct OtherBuild {
    /// Where its launcher started it.
    pub host: String,
    /// Its control connection's address.
    pub from: SocketAddr,
    /// The build it said hello as.
    pub worker: String,
    pub driver: String,
    /// What to do about it, for its launcher (and, when only their device
    /// features differ, for its build).
    pub advice: String,
}

impl DriverError {
    /// The rank at fault, when one is.
    pub fn rank(&self) -> Option<usize> {
        match self {
            DriverError::StartTimeout { rank, .. }
            | DriverError::Exited { rank, .. }
            | DriverError::WorkerFailed { rank, .. }
            | DriverError::WorkerRefused { rank, .. }
            | DriverError::ThreadRefused { rank, .. }
            | DriverError::NoRoom { rank, .. }
            | DriverError::OtherBuild { rank, .. }
            | DriverError::Silent { rank, .. }
            | DriverError::Unresponsive { rank, .. }
            | DriverError::Launch { rank, .. } => Some(*rank),
            DriverError::Interrupted | DriverError::Control(_) | DriverError::Bind { .. } | DriverError::Thread(_) => {
                None
            }
        }
    }
}

/// An event a worker reported, with its rank.
#[derive(Debug)]
pub enum Event {
    Metrics(usize, serde_json::Value),
    Log(usize, String),
    Done(usize, serde_json::Value),
    /// Nothing arrived for a moment (a chance to poll the user, drain logs).
    Idle,
}

enum Inbound {
    Msg(usize, ToDriver),
    Lost(usize, ControlError),
}

/// Runs one job on `world` workers. `config` is sent to every worker as is;
/// `on_event` sees every record as it arrives. Returns each worker's Done value.
pub fn run_job(
    launcher: &dyn Launcher,
    world: usize,
    config: &serde_json::Value,
    opts: &DriverOptions,
    interrupted: &AtomicBool,
    on_event: impl FnMut(Event),
) -> Result<Vec<serde_json::Value>, DriverError> {
    let mut on_event = on_event;
    let no_answer = |e| {
        on_event(e);
        None
    };
    run_job_stoppable(launcher, world, config, opts, interrupted, &AtomicBool::new(false), no_answer)
}

/// `run_job`, plus a graceful stop: once `stop` is set, every worker is sent
/// `ToWorker::Stop` (once) and the job goes on until they report Done; and
/// answers: what `on_event` returns, (rank, message), is sent to that worker.
pub fn run_job_stoppable(
    launcher: &dyn Launcher,
    world: usize,
    config: &serde_json::Value,
    opts: &DriverOptions,
    interrupted: &AtomicBool,
    stop: &AtomicBool,
    mut on_event: impl FnMut(Event) -> Option<(usize, ToWorker)>,
) -> Result<Vec<serde_json::Value>, DriverError> {
    let listener = TcpListener::bind(opts.bind).map_err(|source| DriverError::Bind { addr: opts.bind, source })?;
    let addr = listener.local_addr().map_err(|source| DriverError::Bind { addr: opts.bind, source })?;
    crate::util::core_dumps::disable_or_warn("driver");
    // Travels only over each worker's launch channel (stdin, inside SSH for remote ones).
    let mut token = job_key::random_hex(job_key::TOKEN_BYTES);
    if opts.encrypt {
        token.push_str(job_key::ENCRYPT_MARK);
    }
    let mut procs: Vec<Box<dyn WorkerProcess>> = Vec::with_capacity(world);
    for rank in 0..world {
        let spec = WorkerSpec { rank, driver: addr, token: token.clone(), world, env: vec![] };
        procs.push(launcher.launch(&spec).map_err(|source| DriverError::Launch { rank, source })?);
    }
    let mut conns = admit(listener, &token, world, opts, launcher, &mut procs, interrupted)?;

    // Mesh addresses, then the job with the full peer list.
    let mut peers = vec![SocketAddr::from(([0, 0, 0, 0], 0)); world];
    for (rank, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(opts.start_timeout))?;
        match c.recv::<ToDriver>()? {
            ToDriver::Listening(a) => peers[rank] = a,
            other => return Err(failed(rank, &other).unwrap_or_else(|| unexpected(c, &other))),
        }
    }
    // Public: the mesh key is HKDF(token, salt), so the salt alone lets no one join.
    let mesh_salt = job_key::random_hex(job_key::TOKEN_BYTES);
    for c in conns.iter_mut() {
        c.send(&ToWorker::Job { world, peers: peers.clone(), mesh_salt: mesh_salt.clone(), config: config.clone() })?;
    }

    // One reader thread per worker feeds a channel; the driver loop also watches
    // exit codes, silence and Ctrl-C, so no failure mode leaves it waiting. The
    // channel is bounded: a driver that falls behind holds the readers (and, by
    // TCP, the workers) back instead of queueing without limit.
    let (tx, rx) = mpsc::sync_channel(READER_QUEUE);
    // What each reader has read (counted before it queues it, which may
    // wait), against what the loop has handled: an exited worker's grace
    // runs only while the loop is not behind on it.
    let read: Arc<[AtomicU64]> = (0..world).map(|_| AtomicU64::new(0)).collect();
    let mut handled = vec![0u64; world];
    for (rank, c) in conns.iter().enumerate() {
        let mut c = c.try_clone()?;
        c.set_read_timeout(None)?;
        let (tx, read) = (tx.clone(), read.clone());
        let reader = spawn(format!("leapgnn-control-{rank}"), move || {
            loop {
                let got = c.recv::<ToDriver>();
                read[rank].fetch_add(1, Ordering::SeqCst);
                match got {
                    Ok(m) => {
                        if tx.send(Inbound::Msg(rank, m)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Inbound::Lost(rank, e));
                        return;
                    }
                }
            }
        });
        // Readers already started end when finish's shutdown closes their connections.
        if let Err(e) = reader {
            return finish(&conns, procs, Err(e.into()));
        }
    }
    drop(tx);
    let mut done: Vec<Option<serde_json::Value>> = vec![None; world];
    let mut last_heard = vec![Instant::now(); world];
    let mut exited: Vec<Option<i32>> = vec![None; world];
    // Since when the loop has been caught up on an exited worker: it handled
    // everything the worker's reader read, and nothing of it since. The
    // grace counts from there, not from the exit: a driver stopped (Ctrl-Z)
    // and continued, or merely slow, finds a backlog ahead of the Done, and
    // the bounded queue lets the reader read the rest of it only as the loop
    // works through it, so no time of reading tells where the backlog ends.
    let mut caught_up: Vec<Option<Instant>> = vec![None; world];
    let mut stop_sent = false;
    // The worker whose failure ended the loop.
    let mut fault = None;
    let mut turn = Instant::now();
    let result = loop {
        if interrupted.load(Ordering::SeqCst) {
            break Err(DriverError::Interrupted);
        }
        if !stop_sent && stop.load(Ordering::SeqCst) {
            stop_sent = true;
            // A worker that cannot be told will be noticed (closed or silent) below.
            for c in conns.iter_mut() {
                let _ = c.send(&ToWorker::Stop);
            }
        }
        if done.iter().all(Option::is_some) {
            break Ok(std::mem::take(&mut done).into_iter().map(|d| d.expect("all done")).collect());
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Inbound::Msg(rank, m)) => {
                handled[rank] += 1;
                caught_up[rank] = None;
                last_heard[rank] = Instant::now();
                let answer = match m {
                    ToDriver::Metrics(v) => on_event(Event::Metrics(rank, v)),
                    ToDriver::Log(s) => on_event(Event::Log(rank, s)),
                    ToDriver::Done(v) => {
                        let answer = on_event(Event::Done(rank, v.clone()));
                        done[rank] = Some(v);
                        answer
                    }
                    ToDriver::Heartbeat | ToDriver::Hello(_) | ToDriver::Proof(_) | ToDriver::Listening(_) => None,
                    report => match failed(rank, &report) {
                        Some(e) => {
                            fault = Some(rank);
                            break Err(e);
                        }
                        None => None,
                    },
                };
                // A worker that cannot be told will be noticed (closed or silent) below.
                if let Some((to, msg)) = answer
                    && let Some(c) = conns.get_mut(to)
                {
                    let _ = c.send(&msg);
                }
            }
            Ok(Inbound::Lost(rank, e)) => {
                handled[rank] += 1;
                if done[rank].is_none() {
                    fault = Some(rank);
                    break Err(lost(rank, e, &mut procs[rank]));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = on_event(Event::Idle);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Every reader is gone: the exit codes below decide, polled at a calm pace.
                let _ = on_event(Event::Idle);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let pending = || (0..world).filter(|&r| done[r].is_none());
        // A worker that sent Done and exited may be seen exiting before its Done is
        // read: give its reader a moment to deliver (a crash also closes the control
        // connection, which reports at once through `Lost`).
        for r in 0..world {
            if done[r].is_none() && exited[r].is_none() {
                exited[r] = procs[r].try_exit_code();
            }
            let behind = read[r].load(Ordering::SeqCst) > handled[r];
            if exited[r].is_some() && !behind {
                caught_up[r].get_or_insert_with(Instant::now);
            } else {
                caught_up[r] = None;
            }
        }
        let expired = |r: usize| caught_up[r].is_some_and(|t| t.elapsed() > EXIT_GRACE);
        if let Some((rank, code)) = pending().filter(|&r| expired(r)).find_map(|r| exited[r].map(|c| (r, c))) {
            fault = Some(rank);
            break Err(DriverError::Exited { rank, code });
        }
        // Silence counts only while this loop listened: after a stall (the
        // driver stopped by Ctrl-Z and continued by `fg`) the workers' messages
        // of the meantime are still queued, and every worker would otherwise
        // look silent for as long as the driver was away. Only the excess
        // over STALL is forgiven, so a loop that is merely slow at every turn
        // still finds a silent worker, later.
        let gap = turn.elapsed();
        turn = Instant::now();
        if gap > STALL {
            tracing::debug!(
                "the driver did not listen for {:.1} s; that is not the workers' silence",
                gap.as_secs_f64()
            );
            for t in last_heard.iter_mut() {
                *t += gap - STALL;
            }
        }
        if let Some(rank) = pending().find(|&r| last_heard[r].elapsed() > opts.silence_timeout) {
            fault = Some(rank);
            break Err(DriverError::Silent { rank, secs: opts.silence_timeout.as_secs() });
        }
    };
    let result = match (result, fault) {
        (Err(e), Some(rank)) => {
            Err(settle(e, rank, &rx, &done, &mut last_heard, &mut procs, interrupted, &mut on_event))
        }
        (r, _) => r,
    };
    finish(&conns, procs, result)
}

fn finish<T>(
    conns: &[ControlConn],
    mut procs: Vec<Box<dyn WorkerProcess>>,
    result: Result<T, DriverError>,
) -> Result<T, DriverError> {
    for c in conns {
        let mut c2 = match c.try_clone() {
            Ok(c) => c,
            Err(_) => continue,
        };
        let _ = c2.send(&ToWorker::Shutdown);
        c.shutdown();
    }
    for p in procs.iter_mut() {
        p.kill();
    }
    result
}

/// After `rank`'s failure `err`, until every other worker has reported (its
/// error or done) or been lost, for `SETTLE_GRACE` at most. What they sent
/// before noticing the failure is delivered, so a step they finished is not
/// lost with the job (a restart keeps its record). And when one worker dies,
/// its peers report that it left them, which report comes first being a race:
/// when `err` is a reported error, a worker lost without a word (killed,
/// crashed) is named instead: it is the cause, the errors are its echo. It is
/// named after the others have spoken, so that their last records still count.
/// Likewise a worker still connected that neither reported nor beat its
/// heartbeat through the grace: it stopped, and the others timed out on it.
#[allow(clippy::too_many_arguments)]
fn settle(
    err: DriverError,
    rank: usize,
    rx: &mpsc::Receiver<Inbound>,
    done: &[Option<serde_json::Value>],
    last_heard: &mut [Instant],
    procs: &mut [Box<dyn WorkerProcess>],
    interrupted: &AtomicBool,
    on_event: &mut impl FnMut(Event) -> Option<(usize, ToWorker)>,
) -> DriverError {
    let deadline = Instant::now() + SETTLE_GRACE;
    let reported = matches!(
        err,
        DriverError::WorkerFailed { .. }
            | DriverError::WorkerRefused { .. }
            | DriverError::ThreadRefused { .. }
            | DriverError::NoRoom { .. }
    );
    let mut spoke: Vec<bool> = done.iter().map(Option::is_some).collect();
    spoke[rank] = true;
    // Named once the others have had their say: returning at once would drop
    // what the survivors had sent but their readers had not yet passed on.
    let mut cause = None;
    while !spoke.iter().all(|&s| s) && !interrupted.load(Ordering::SeqCst) {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
        // In slices, so that Ctrl-C is not kept waiting.
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(Inbound::Msg(r, m)) => {
                last_heard[r] = Instant::now();
                // The job is ending: no answer is sent (a checkpoint waiting for one ends with it).
                match m {
                    ToDriver::Metrics(v) => {
                        let _ = on_event(Event::Metrics(r, v));
                    }
                    ToDriver::Log(line) => {
                        let _ = on_event(Event::Log(r, line));
                    }
                    ToDriver::Done(v) => {
                        spoke[r] = true;
                        let _ = on_event(Event::Done(r, v));
                    }
                    ToDriver::Error(_) | ToDriver::Refused(_) | ToDriver::NoRoom { .. } => spoke[r] = true,
                    // The cause, when another worker's error came first: that is its echo.
                    ToDriver::ThreadRefused(refusal) => {
                        spoke[r] = true;
                        if cause.is_none() && !matches!(err, DriverError::ThreadRefused { .. }) {
                            cause = Some(DriverError::ThreadRefused { rank: r, refusal: Box::new(refusal) });
                        }
                    }
                    ToDriver::Heartbeat | ToDriver::Hello(_) | ToDriver::Proof(_) | ToDriver::Listening(_) => {}
                }
            }
            Ok(Inbound::Lost(r, e)) if reported && !spoke[r] && cause.is_none() => {
                spoke[r] = true;
                cause = Some(lost(r, e, &mut procs[r]));
            }
            Ok(Inbound::Lost(r, _)) => spoke[r] = true,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some(cause) = cause {
        return cause;
    }
    // A live worker beats every HEARTBEAT even while it computes; one silent
    // for more than two beats and a half did not speak in the grace either.
    let stale = HEARTBEAT * 5 / 2;
    let hung = (0..spoke.len())
        .filter(|&r| !spoke[r] && last_heard[r].elapsed() > stale)
        .max_by_key(|&r| last_heard[r].elapsed());
    match hung {
        Some(r) if reported => {
            DriverError::Unresponsive { rank: r, secs: last_heard[r].elapsed().as_secs(), echo: Box::new(err) }
        }
        _ => err,
    }
}

fn lost(rank: usize, e: ControlError, p: &mut Box<dyn WorkerProcess>) -> DriverError {
    // Prefer the exit code when the process is already gone: it says more than "closed".
    for _ in 0..10 {
        if let Some(code) = p.try_exit_code() {
            return DriverError::Exited { rank, code };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    DriverError::Control(e)
}

/// Connections that have not yet proved the token and may be in their handshake
/// at once; one more evicts the oldest that has not said hello yet (a real
/// worker says it as it connects), so strangers cannot hold the door shut nor
/// push a real worker out.
pub const MAX_UNAUTHENTICATED: usize = 32;
/// How long a new connection gets to prove the token, however slowly it sends.
pub const ADMIT_DEADLINE: Duration = Duration::from_secs(10);
/// The listener has no blocking accept with a timeout in std, so it is polled
/// (only while workers are being admitted).
const ACCEPT_POLL: Duration = Duration::from_millis(10);

type Handshake = (u64, SocketAddr, Result<Admitted, String>);

/// A connection that proved the job token.
enum Admitted {
    Worker(usize, ControlConn),
    /// Worker `rank` of another build (`Hello::version`), told so and closed.
    OtherBuild {
        rank: usize,
        build: String,
    },
}

/// What an operator does about a worker of build `build`, another than the
/// driver's, by where it runs.
fn other_build_advice(build: &str, kind: crate::cluster::profile::LauncherKind) -> String {
    use crate::cluster::profile::LauncherKind;
    let advice = match kind {
        LauncherKind::Local => "start the workers from the driver's own executable",
        LauncherKind::Ssh => {
            "that host ran another binary than the driver's: point the profile's cluster.binary at the driver's \
             own build (or run the driver from the binary it names), then `leapgnn cluster check` with the profile \
             ships it and checks every host"
        }
        LauncherKind::Slurm => {
            "the allocation's nodes ran another leapgnn than the driver's: put the driver's own build, at the same \
             path, on every node of the allocation (or run the driver from the binary the nodes have)"
        }
    };
    match crate::other_device_features(build, "the worker") {
        Some(features) => format!("{features}; then {advice}"),
        None => advice.into(),
    }
}

/// Accepts exactly one authenticated connection per rank before the deadline.
/// Each connection's handshake runs in its own thread with its own deadline and
/// a few KiB of reads at most, so a genuine worker never waits behind a stranger.
/// Takes the listener to close it on return: nothing accepts after admission
/// (a restart binds afresh), and an open listener would let the kernel complete
/// strangers' connections into its backlog, held for the whole run.
fn admit(
    listener: TcpListener,
    token: &str,
    world: usize,
    opts: &DriverOptions,
    launcher: &dyn Launcher,
    procs: &mut [Box<dyn WorkerProcess>],
    interrupted: &AtomicBool,
) -> Result<Vec<ControlConn>, DriverError> {
    listener.set_nonblocking(true).map_err(|source| DriverError::Bind { addr: opts.bind, source })?;
    let deadline = Instant::now() + opts.start_timeout;
    let mut conns: Vec<Option<ControlConn>> = (0..world).map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<Handshake>();
    // Clones of the streams in handshake, oldest first: evicted or cut when admission ends.
    let mut pending: VecDeque<(u64, TcpStream, Arc<AtomicBool>)> = VecDeque::new();
    let mut next_id = 0u64;
    let result = 'admit: loop {
        while let Ok((id, from, outcome)) = rx.try_recv() {
            pending.retain(|(i, _, _)| *i != id);
            match outcome {
                Ok(Admitted::Worker(rank, c)) if conns[rank].is_none() => conns[rank] = Some(c),
                // Only after the proof: a stranger's hello, whatever build it names, ends nothing.
                Ok(Admitted::OtherBuild { rank, build }) => {
                    // Its own line saying why reaches its log before it is stopped.
                    let told = Instant::now() + EXIT_GRACE;
                    while procs[rank].try_exit_code().is_none() && Instant::now() < told {
                        std::thread::sleep(ACCEPT_POLL);
                    }
                    let advice = other_build_advice(&build, launcher.kind());
                    break 'admit Err(DriverError::OtherBuild {
                        rank,
                        other: Box::new(OtherBuild {
                            host: launcher.host_of(rank),
                            from,
                            worker: build,
                            driver: crate::BUILD_ID.into(),
                            advice,
                        }),
                    });
                }
                Ok(Admitted::Worker(rank, c)) => {
                    tracing::warn!("refused a control connection from {from}: a second one for worker {rank}");
                    c.shutdown();
                }
                Err(reason) => tracing::warn!("refused a control connection from {from}: {reason}"),
            }
        }
        if conns.iter().all(Option::is_some) {
            break Ok(());
        }
        if interrupted.load(Ordering::SeqCst) {
            break Err(DriverError::Interrupted);
        }
        if let Some((rank, code)) =
            (0..world).filter(|&r| conns[r].is_none()).find_map(|r| procs[r].try_exit_code().map(|c| (r, c)))
        {
            break Err(DriverError::Exited { rank, code });
        }
        if Instant::now() > deadline {
            let rank = conns.iter().position(Option::is_none).unwrap_or(0);
            break Err(DriverError::StartTimeout { rank, secs: opts.start_timeout.as_secs() });
        }
        match listener.accept() {
            Ok((stream, from)) => {
                let Ok(clone) = stream.try_clone() else { continue };
                if pending.len() >= MAX_UNAUTHENTICATED {
                    let silent = pending.iter().position(|(_, _, hello)| !hello.load(Ordering::SeqCst)).unwrap_or(0);
                    if let Some((_, s, _)) = pending.remove(silent) {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                let hello = Arc::new(AtomicBool::new(false));
                pending.push_back((next_id, clone, hello.clone()));
                let (tx, token, id, within) = (tx.clone(), token.to_string(), next_id, opts.admit_deadline);
                next_id += 1;
                let shake = spawn(format!("leapgnn-admit-{id}"), move || {
                    let outcome = handshake(stream, from, &token, world, within, &hello);
                    let _ = tx.send((id, from, outcome));
                });
                // The pending handshakes are cut below; the caller kills the workers.
                if let Err(e) = shake {
                    break Err(e.into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::Interrupted) => {}
            Err(source) => break Err(DriverError::Bind { addr: opts.bind, source }),
        }
    };
    // Handshakes still running belong to strangers (or to duplicates): end them now.
    for (_, s, _) in pending {
        let _ = s.shutdown(Shutdown::Both);
    }
    result.map(|()| conns.into_iter().map(|c| c.expect("admitted")).collect())
}

/// The driver's side of the control handshake: the worker says hello with a
/// nonce, the driver answers with its nonce and its proof of the token, the
/// worker proves the token over both nonces (`job_key`).
fn handshake(
    stream: TcpStream,
    from: SocketAddr,
    token: &str,
    world: usize,
    within: Duration,
    said_hello: &AtomicBool,
) -> Result<Admitted, String> {
    let deadline = Instant::now() + within;
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let _ = stream.set_write_timeout(Some(within));
    let mut c = ControlConn::new(stream, format!("worker at {from}"));
    let hello = match c.recv_within::<ToDriver>(MAX_HANDSHAKE_FRAME, Some(deadline)) {
        Ok(ToDriver::Hello(h)) => h,
        Ok(_) => return Err("its first message was not a hello".into()),
        Err(e) => return Err(e.to_string()),
    };
    said_hello.store(true, Ordering::SeqCst);
    let rank = hello.rank;
    if rank >= world {
        return Err(format!("it claims to be worker {rank} of a job of {world}"));
    }
    let nonce = job_key::random_hex(job_key::TOKEN_BYTES);
    let proof = job_key::control_proof(token, Side::Driver, rank, &hello.nonce, &nonce);
    c.send(&ToWorker::Challenge { nonce: nonce.clone(), proof }).map_err(|e| e.to_string())?;
    match c.recv_within::<ToDriver>(MAX_HANDSHAKE_FRAME, Some(deadline)) {
        Ok(ToDriver::Proof(p))
            if job_key::verify_control_proof(token, Side::Worker, rank, &hello.nonce, &nonce, &p) =>
        {
            c.rename(format!("worker {rank}"));
            if job_key::wants_encryption(token) {
                c.encrypt(job_key::control_keys(token, Side::Driver, rank, &hello.nonce, &nonce));
            }
            if hello.version != crate::BUILD_ID {
                let mut why = format!(
                    "it runs leapgnn build {}, the driver build {}: every worker must run the driver's own build",
                    hello.version,
                    crate::BUILD_ID
                );
                if let Some(features) = crate::other_device_features(&hello.version, "this worker") {
                    why = format!("{why} ({features})");
                }
                let _ = c.send(&ToWorker::Refused(why));
                // The worker sends its mesh address unasked; closing with it unread would
                // reset the connection, and the reset could discard the refusal unread.
                let _ = c.recv_within::<ToDriver>(MAX_HANDSHAKE_FRAME, Some(deadline));
                return Ok(Admitted::OtherBuild { rank, build: hello.version });
            }
            let _ = c.set_write_timeout(None);
            Ok(Admitted::Worker(rank, c))
        }
        Ok(_) => Err(format!("it claimed to be worker {rank} but could not prove the job token")),
        Err(e) => Err(e.to_string()),
    }
}

/// The failure worker `rank` reported in `m`, if it reports one.
fn failed(rank: usize, m: &ToDriver) -> Option<DriverError> {
    Some(match m {
        ToDriver::Error(message) => DriverError::WorkerFailed { rank, message: message.clone() },
        ToDriver::Refused(message) => DriverError::WorkerRefused { rank, message: message.clone() },
        ToDriver::ThreadRefused(refusal) => DriverError::ThreadRefused { rank, refusal: Box::new(refusal.clone()) },
        ToDriver::NoRoom { host, threads, why, limit } => {
            DriverError::NoRoom { rank, host: host.clone(), threads: *threads, why: why.clone(), limit: *limit }
        }
        _ => return None,
    })
}

fn unexpected(c: &ControlConn, m: &ToDriver) -> DriverError {
    DriverError::Control(ControlError::Malformed {
        peer: c.peer().to_string(),
        detail: format!("unexpected message {m:?}"),
    })
}

impl crate::error::Blame for DriverError {
    /// A worker's refusal of its job is the input's fault (its share does
    /// not fit its host); every other failure is the run's.
    fn is_bad_input(&self) -> bool {
        matches!(self, DriverError::WorkerRefused { .. })
    }
}
