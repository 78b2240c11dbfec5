//! Workers on remote hosts over SSH: one session per worker (sessions are
//! not shared between threads, so one worker's log stream never delays
//! another's). Launching connects (host key, key auth), ships the binary and
//! the rank's files when stale, and runs `leapgnn worker` as the leader of
//! its own process group with the token on stdin. The worker's output is
//! streamed into the driver's log as `[host rank R] line`. Stopping kills
//! the remote process group (TERM, then KILL), so nothing is left behind;
//! when a run ends the driver removes its run directory from every host a
//! worker ran on (`remove_run_dir`; the binary and the data stay, as a cache
//! for the next run).

use super::known_hosts::HostKeyStatus;
use super::launcher::{
    Cleaned, Launcher, Redundant, RemoteDir, RunDirCleanup, THREADS_VAR, WorkerProcess, WorkerSpec, stderr_log,
};
use super::profile::{HostSpec, Profile, resolve_remote};
use super::remote_dir::{Found, HostSftp, SftpDir};
use super::ship::{self, ShipItem, Shipped};
use super::ssh_session::{self, SessionOptions, SshError, millis, quote};
use crate::util::threads::spawn_scoped;
use anyhow::Context;
use ssh2::{Channel, Session, Sftp};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{Read as _, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use super::launcher::LogSink;

/// The files a rank needs besides the binary (its partition, the topology...).
pub type RankFiles = Arc<dyn Fn(usize) -> Vec<ShipItem> + Send + Sync>;

/// How often the stream pump wakes up to look for a stop request.
const PUMP_TICK: Duration = Duration::from_millis(100);
/// How long a stopped worker may take to exit by itself before its group is killed.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Bound on TERM -> exit before the process group gets KILL.
const TERM_GRACE_TENTHS: u32 = 30;
/// Bound on collecting a stopped worker's remaining output.
const DRAIN: Duration = Duration::from_secs(2);
/// Marks the line carrying the worker's pid (= its process group) on stdout.
const PID_MARK: &str = "leapgnn-worker-pgid";

pub struct SshLauncher {
    profile: Profile,
    binary: PathBuf,
    accept_new: bool,
    io_timeout: Duration,
    files: Option<RankFiles>,
    log: LogSink,
    shipped: Mutex<Vec<Shipped>>,
    /// (host, remote binary) pairs whose build already matched.
    verified: Mutex<HashSet<(String, PathBuf)>>,
    /// Shipped to every rank besides its own files (`Launcher::ship_with_job`).
    job_files: Mutex<Vec<ShipItem>>,
    /// Host index -> spare index: hosts found unreachable and the spare that took their ranks.
    moved: Mutex<HashMap<usize, usize>>,
    /// Every host a worker was started on (once each), for `remove_run_dir`.
    used: Mutex<Vec<HostSpec>>,
    /// (host, remote path) of files to hash on that host at their next ship
    /// (`recheck_refused`), each taken out as it is.
    recheck: Mutex<HashSet<(String, PathBuf)>>,
    /// Whether `recheck_refused` has marked files: once per run, as a second
    /// refusal of a copy sent again would be refused again.
    rechecked: AtomicBool,
}

/// `profile.binary`, or this executable when the profile names none.
pub fn binary_to_ship(profile: &Profile) -> anyhow::Result<PathBuf> {
    match &profile.binary {
        Some(b) => Ok(b.clone()),
        None => std::env::current_exe().context("cannot find the leapgnn executable to ship"),
    }
}

impl SshLauncher {
    /// Ships `binary_to_ship(&profile)`.
    pub fn new(profile: Profile) -> anyhow::Result<Self> {
        let binary = binary_to_ship(&profile)?;
        let accept_new = profile.accept_new_host_keys;
        Ok(SshLauncher {
            profile,
            binary,
            accept_new,
            io_timeout: Duration::from_secs(30),
            files: None,
            log: stderr_log(),
            shipped: Mutex::new(vec![]),
            verified: Mutex::new(HashSet::new()),
            job_files: Mutex::new(vec![]),
            moved: Mutex::new(HashMap::new()),
            used: Mutex::new(vec![]),
            recheck: Mutex::new(HashSet::new()),
            rechecked: AtomicBool::new(false),
        })
    }

    pub fn with_binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = binary.into();
        self
    }

    /// `--accept-new-host-keys`: record unknown host keys (changed ones are still refused).
    pub fn accept_new_host_keys(mut self, yes: bool) -> Self {
        self.accept_new |= yes;
        self
    }

    /// Bound on each SSH step (handshake, auth, each SFTP call, short commands).
    pub fn with_io_timeout(mut self, t: Duration) -> Self {
        self.io_timeout = t;
        self
    }

    /// Files to ship for each rank before it starts (relative remote paths land under the data directory).
    pub fn with_rank_files(mut self, files: RankFiles) -> Self {
        self.files = Some(files);
        self
    }

    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The host that runs `rank`: its own, or the spare that took its ranks.
    pub fn host_for(&self, rank: usize) -> Option<HostSpec> {
        let i = *self.profile.assignment().get(rank)?;
        match self.moved.lock().unwrap_or_else(|e| e.into_inner()).get(&i) {
            Some(&s) => Some(self.profile.spares[s].clone()),
            None => Some(self.profile.hosts[i].clone()),
        }
    }

    /// How many of a job of `world` ranks run on `rank`'s host (a spare
    /// takes all of its host's ranks, so the count holds there too).
    fn workers_on_host_of(&self, rank: usize, world: usize) -> usize {
        let slots = self.profile.assignment();
        let host = slots.get(rank);
        slots.iter().take(world).filter(|&i| Some(i) == host).count().max(1)
    }

    /// Moves the ranks of `rank`'s host (found unreachable) to the first
    /// unused spare with as many worker slots (or the one another of its
    /// ranks moved to meanwhile); `None` when none is left.
    fn move_to_spare(&self, rank: usize, tried: &HostSpec) -> Option<HostSpec> {
        let i = *self.profile.assignment().get(rank)?;
        let mut moved = self.moved.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&s) = moved.get(&i) {
            let spare = &self.profile.spares[s];
            return (spare.label() != tried.label()).then(|| spare.clone());
        }
        let need = self.profile.hosts[i].workers;
        let free = (0..self.profile.spares.len())
            .find(|s| !moved.values().any(|m| m == s) && self.profile.spares[*s].workers >= need)?;
        moved.insert(i, free);
        Some(self.profile.spares[free].clone())
    }

    /// Everything shipped or found current so far, in launch order.
    pub fn shipped(&self) -> Vec<Shipped> {
        self.shipped.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            known_hosts: self.profile.known_hosts.clone(),
            accept_new_host_keys: self.accept_new,
            connect_timeout: self.profile.connect_timeout,
            io_timeout: self.io_timeout,
        }
    }

    /// Connects to `host` and ships the binary plus `extra` (data-relative)
    /// files; returns the session, the remote layout and the connection ends.
    pub fn prepare(&self, host: &HostSpec, extra: &[ShipItem]) -> Result<Prepared, SshError> {
        let label = host.label();
        let c = ssh_session::connect(host, &self.session_options())?;
        let sftp = ssh_session::sftp(&c.session, &label)?;
        let layout = RemoteLayout::resolve(&sftp, &label, &self.profile)?;
        let bin = ship::binary_item(&self.binary)?;
        let mut items = vec![bin.clone()];
        items.extend(extra.iter().map(|i| ShipItem { remote: layout.data.join(&i.remote), ..i.clone() }));
        {
            let mut recheck = self.recheck.lock().unwrap_or_else(|e| e.into_inner());
            for item in &mut items {
                item.check_bytes |= recheck.remove(&(label.clone(), ship::remote_path(&layout.root, item)));
            }
        }
        let shipped = ship::ship((&c.session, &sftp), &label, &layout.root, &items, &*self.log)?;
        drop(sftp);
        self.shipped.lock().unwrap_or_else(|e| e.into_inner()).extend(shipped.iter().cloned());
        let binary = ship::remote_path(&layout.root, &bin);
        // Once per (host, binary) and launcher: the next rank on that host finds the same file.
        let key = (label.clone(), binary.clone());
        let known = self.verified.lock().unwrap_or_else(|e| e.into_inner()).contains(&key);
        let build = if known && !shipped[0].sent {
            crate::BUILD_ID.to_string()
        } else {
            let v = remote_build(&c.session, &label, &binary)?;
            self.verified.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
            v
        };
        Ok(Prepared {
            session: c.session,
            local: c.local,
            peer: c.peer,
            host_key: c.host_key,
            layout,
            binary,
            build,
            shipped,
        })
    }
}

impl SshLauncher {
    fn remove_run_dir_on(&self, host: &HostSpec, run: &str, redundant: &Redundant) -> RunDirCleanup {
        let mut path = PathBuf::from(format!("<data_dir>/runs/{run}"));
        let outcome = (|| {
            let conn = HostSftp::connect(host, &self.session_options(), &self.profile)?;
            path = conn.runs_dir().join(run);
            let found = match conn.run(run)? {
                Found::Absent => return Ok(Cleaned::Absent),
                Found::Odd(o) => return Ok(Cleaned::Kept(o.why)),
                Found::Run(r) => r,
            };
            if let Err(why) = redundant(found.checkpoint.as_deref()) {
                return Ok(Cleaned::Kept(why));
            }
            conn.remove_run(&found)?;
            Ok(Cleaned::Removed { files: found.files, bytes: found.bytes })
        })();
        RunDirCleanup { host: host.label(), path, outcome: outcome.map_err(|e: SshError| e.into()) }
    }
}

/// A connected, authenticated session with the binary in place.
pub struct Prepared {
    pub session: Session,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub host_key: HostKeyStatus,
    pub layout: RemoteLayout,
    /// Absolute remote path of the shipped binary.
    pub binary: PathBuf,
    /// Its build on that host (`leapgnn build-id`; equal to the driver's `BUILD_ID`).
    pub build: String,
    pub shipped: Vec<Shipped>,
}

/// Runs the shipped binary's `build-id` on the host: proves it executes there
/// (architecture, C library) and is the driver's own build, so that a stale
/// binary is refused here, before any worker starts, rather than at its hello.
fn remote_build(sess: &Session, host: &str, binary: &Path) -> Result<String, SshError> {
    let out = ssh_session::run(sess, host, &format!("{} build-id", quote(&binary.to_string_lossy())))?;
    // clap's exit for a subcommand it does not know: a build from before `build-id`.
    if out.code == 2 && out.output.contains("unrecognized subcommand") {
        let version = remote_version(sess, host, binary)?;
        // Same version, yet it cannot be this build, which knows `build-id`.
        return Err(SshError::OlderBuild {
            host: host.into(),
            binary: binary.into(),
            version,
            want: crate::BUILD_ID.into(),
        });
    }
    let got = last_line(&out, host, binary, "build-id")?;
    if got != crate::BUILD_ID {
        let features =
            crate::other_device_features(&got, "the host's binary").map_or(String::new(), |f| format!("; {f}"));
        return Err(SshError::OtherBuild {
            host: host.into(),
            binary: binary.into(),
            got,
            want: crate::BUILD_ID.into(),
            features,
        });
    }
    Ok(got)
}

/// The binary's `--version` on the host, refused unless it is the driver's.
fn remote_version(sess: &Session, host: &str, binary: &Path) -> Result<String, SshError> {
    let want = format!("leapgnn {}", env!("CARGO_PKG_VERSION"));
    let out = ssh_session::run(sess, host, &format!("{} --version", quote(&binary.to_string_lossy())))?;
    let got = last_line(&out, host, binary, "--version")?;
    if got != want {
        return Err(SshError::Version { host: host.into(), binary: binary.into(), got, want });
    }
    Ok(got)
}

/// The last line `binary ARG` printed, or why it did not run there.
fn last_line(out: &ssh_session::CommandOutput, host: &str, binary: &Path, arg: &str) -> Result<String, SshError> {
    if out.code != 0 {
        return Err(SshError::Command {
            host: host.into(),
            what: format!("{} {arg}", binary.display()),
            code: out.code,
            output: format!(
                "{} (the shipped binary does not run there: wrong architecture or C library? set cluster.binary to \
                 a build for that host)",
                out.output
            ),
        });
    }
    Ok(out.output.lines().last().unwrap_or("").trim().to_string())
}

/// The profile's remote directories, resolved on one host.
#[derive(Debug, Clone)]
pub struct RemoteLayout {
    pub root: PathBuf,
    pub data: PathBuf,
}

impl RemoteLayout {
    pub fn resolve(sftp: &Sftp, host: &str, p: &Profile) -> Result<Self, SshError> {
        // The SFTP server's start directory is the remote user's home.
        let home = sftp.realpath(Path::new(".")).map_err(SshError::remote(host, "finding the remote home"))?;
        let root = resolve_remote(&home, None, &p.remote_dir);
        let data = resolve_remote(&home, Some(&root), &p.data_dir);
        Ok(RemoteLayout { root, data })
    }
}

impl Launcher for SshLauncher {
    fn host_of(&self, rank: usize) -> String {
        self.host_for(rank).map_or_else(|| "?".into(), |h| h.endpoint())
    }

    fn name(&self) -> &'static str {
        "ssh"
    }

    fn kind(&self) -> crate::cluster::profile::LauncherKind {
        crate::cluster::profile::LauncherKind::Ssh
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let mut host = self.host_for(spec.rank).with_context(|| {
            format!(
                "{}: the job needs rank {} but the profile has {} worker slots (add hosts or workers)",
                self.profile.name(),
                spec.rank,
                self.profile.world()
            )
        })?;
        let mut extra = self.files.as_ref().map(|f| f(spec.rank)).unwrap_or_default();
        extra.extend(self.job_files.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned());
        let p = match self.prepare(&host, &extra) {
            Err(e @ SshError::Unreachable { .. }) => {
                let Some(spare) = self.move_to_spare(spec.rank, &host) else { return Err(e.into()) };
                (self.log)(format!("{e}; its ranks move to the spare host {}", spare.label()));
                host = spare;
                self.prepare(&host, &extra)?
            }
            r => r?,
        };
        let label = host.label();
        {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            if !used.iter().any(|h| h.label() == label) {
                used.push(host.clone());
            }
        }
        let driver = driver_address(spec.driver, p.local, p.peer).with_context(|| format!("host {label}"))?;
        // Before the profile's and the job's variables, which win where they set it too.
        let gpu = host.gpus.zip(self.profile.local_index(spec.rank)).map(|(g, i)| gpu_env(g, i));
        let mut env: Vec<String> =
            gpu.iter().chain(&self.profile.env).chain(&spec.env).map(|(k, v)| quote(&format!("{k}={v}"))).collect();
        if !env.is_empty() {
            env.insert(0, "env".into());
        }
        // The job's workers on this host share its cores (counted there)
        // unless the remote environment or the profile's `env` sets them.
        let here = self.workers_on_host_of(spec.rank, spec.world);
        let threads = format!(
            "[ -n \"${THREADS_VAR}\" ] || {{ t=$(( $(nproc 2>/dev/null || echo 1) / {here} )); \
             [ \"$t\" -ge 1 ] || t=1; export {THREADS_VAR}=$t; }}; "
        );
        // The login shell execs sh, which prints its pid and execs the worker:
        // one pid throughout, and sshd made it a session (and group) leader.
        let cmd = format!(
            "cd {root} && exec /bin/sh -c {script} leapgnn-worker {env} {bin} --data-dir {data} worker --driver {driver} \
             --rank {rank} --bind {bind}",
            root = quote(&p.layout.root.to_string_lossy()),
            script = quote(&format!("{threads}echo {PID_MARK} $$; exec \"$@\"")),
            env = env.join(" "),
            bin = quote(&p.binary.to_string_lossy()),
            data = quote(&p.layout.data.to_string_lossy()),
            driver = quote(&driver.to_string()),
            rank = spec.rank,
            // The mesh listens on the address the driver reached this host at
            // (quoted: an IPv6 "[::1]:0" is a glob pattern to the shell).
            bind = quote(&SocketAddr::new(p.peer.ip(), 0).to_string()),
        );
        let prefix = format!("[{} rank {}]", host.endpoint(), spec.rank);
        let (channel, pgid) = start(&p.session, &label, &cmd, &spec.token, &prefix, &self.log)?;
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), exit: Mutex::new(None) });
        let pump = {
            let (shared, log, label) = (shared.clone(), self.log.clone(), label.clone());
            let io_timeout = self.io_timeout;
            std::thread::Builder::new()
                .name(format!("ssh-rank-{}", spec.rank))
                .spawn(move || pump(p.session, channel, pgid, shared, log, prefix, label, io_timeout))
                .context("cannot start a thread for the remote worker")?
        };
        Ok(Box::new(SshWorker { rank: spec.rank, shared, pump: Some(pump) }))
    }

    fn shares_files(&self) -> bool {
        false
    }

    fn local_workers(&self, _world: usize) -> usize {
        0
    }

    fn open_dir(&self, rank: usize, rel: &Path) -> Option<anyhow::Result<Box<dyn RemoteDir>>> {
        let Some(host) = self.host_for(rank) else {
            return Some(Err(anyhow::anyhow!("{}: the profile has no rank {rank}", self.profile.name())));
        };
        let dir = SftpDir::open(&host, &self.session_options(), &self.profile, rel);
        Some(dir.map(|d| Box::new(d) as Box<dyn RemoteDir>).map_err(Into::into))
    }

    fn clean_command(&self, run: &str) -> Option<String> {
        Some(format!("leapgnn cluster clean {} --run {run}", self.profile.name()))
    }

    fn remove_run_dir(&self, run: &str, redundant: &Redundant) -> Vec<RunDirCleanup> {
        let hosts = self.used.lock().unwrap_or_else(|e| e.into_inner()).clone();
        std::thread::scope(|s| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|h| (h, spawn_scoped(s, "leapgnn-clean", move || self.remove_run_dir_on(h, run, redundant))))
                .collect();
            // A host whose thread could not start is cleaned here, after the others: slower, never skipped.
            handles
                .into_iter()
                .map(|(h, t)| match t {
                    Ok(t) => t.join().expect("a run directory's removal panicked"),
                    Err(_) => self.remove_run_dir_on(h, run, redundant),
                })
                .collect()
        })
    }

    fn recheck_refused(&self, rank: usize, message: &str) -> Vec<PathBuf> {
        let Some(host) = self.host_for(rank).map(|h| h.label()) else { return Vec::new() };
        let there: BTreeSet<PathBuf> =
            self.shipped().into_iter().filter(|s| s.host == host).map(|s| s.remote).collect();
        let named: Vec<PathBuf> = super::launcher::named_in(message, &there).into_iter().cloned().collect();
        if named.is_empty() || self.rechecked.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        // Every file there, not just those named: a worker refuses the first damaged file it opens.
        let mut recheck = self.recheck.lock().unwrap_or_else(|e| e.into_inner());
        recheck.extend(there.into_iter().map(|p| (host.clone(), p)));
        named
    }

    fn ship_with_job(&self, files: Vec<(PathBuf, PathBuf)>) {
        let items = files
            .into_iter()
            .map(|(local, remote)| ShipItem { local, remote, executable: false, check_bytes: false })
            .collect();
        *self.job_files.lock().unwrap_or_else(|e| e.into_inner()) = items;
    }
}

/// The GPU the `i`-th worker of a host with `gpus` GPUs sees, alone: they
/// take the GPUs in turn, as torchrun's local ranks do.
fn gpu_env(gpus: usize, i: usize) -> (String, String) {
    ("CUDA_VISIBLE_DEVICES".into(), (i % gpus.max(1)).to_string())
}

/// The driver address a remote worker should dial: an unspecified bind
/// address becomes this machine's address on the interface that reaches the
/// host; a loopback one only works for a host on this machine.
fn driver_address(driver: SocketAddr, local: SocketAddr, peer: SocketAddr) -> anyhow::Result<SocketAddr> {
    if driver.ip().is_unspecified() {
        return Ok(SocketAddr::new(local.ip(), driver.port()));
    }
    if driver.ip().is_loopback() && !peer.ip().is_loopback() {
        anyhow::bail!(
            "the driver listens on {driver}, which the host at {} cannot reach: set driver_bind in the profile's \
             [cluster] section (e.g. \"0.0.0.0:0\")",
            peer.ip()
        );
    }
    Ok(driver)
}

/// Runs `cmd`, hands over the token and reads the worker's pid line.
fn start(
    sess: &Session,
    label: &str,
    cmd: &str,
    token: &str,
    prefix: &str,
    log: &LogSink,
) -> Result<(Channel, u32), SshError> {
    let what = "starting leapgnn worker";
    let mut ch = sess.channel_session().map_err(SshError::remote(label, what))?;
    // stderr into the same stream: one reader, and the window never stalls on an unread stderr.
    ch.handle_extended_data(ssh2::ExtendedData::Merge).map_err(SshError::remote(label, what))?;
    ch.exec(cmd).map_err(SshError::remote(label, what))?;
    ch.write_all(format!("{token}\n").as_bytes()).map_err(SshError::remote(label, "passing the job token"))?;
    ch.send_eof().map_err(SshError::remote(label, "passing the job token"))?;
    // Login scripts may print before our line: relay those, stop at the mark.
    let mut line = Vec::new();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let n = ch.read(&mut byte).map_err(SshError::remote(label, "waiting for the worker to start"))?;
        if n == 0 {
            // A signal (an OOM kill, a kill -9) reads as the shell would report it, not as exit 0.
            let code = exit_code(&mut ch);
            return Err(SshError::Command {
                host: label.into(),
                what: what.into(),
                code,
                output: String::from_utf8_lossy(&seen).trim().replace('\n', " | "),
            });
        }
        if byte[0] != b'\n' {
            line.push(byte[0]);
            continue;
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        // pid 0 or 1 would turn `kill -<pgid>` into "every process": never accept them.
        if let Some(pid) = text.strip_prefix(PID_MARK).and_then(|r| r.trim().parse::<u32>().ok()).filter(|&p| p > 1) {
            return Ok((ch, pid));
        }
        log(format!("{prefix} {text}"));
        seen.extend_from_slice(&line);
        seen.push(b'\n');
        line.clear();
    }
}

struct Shared {
    stop: AtomicBool,
    exit: Mutex<Option<i32>>,
}

struct SshWorker {
    rank: usize,
    shared: Arc<Shared>,
    pump: Option<JoinHandle<()>>,
}

impl WorkerProcess for SshWorker {
    fn rank(&self) -> usize {
        self.rank
    }

    fn try_exit_code(&mut self) -> Option<i32> {
        *self.shared.exit.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kill(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Every step in the pump is bounded by the session timeout, so this join is too.
        if let Some(p) = self.pump.take() {
            let _ = p.join();
        }
    }
}

impl Drop for SshWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Owns the session: relays output lines until the worker exits, the
/// connection is lost, or a stop is requested (then kills the process group).
#[allow(clippy::too_many_arguments)]
fn pump(
    sess: Session,
    mut ch: Channel,
    pgid: u32,
    shared: Arc<Shared>,
    log: LogSink,
    prefix: String,
    label: String,
    io_timeout: Duration,
) {
    sess.set_timeout(millis(PUMP_TICK));
    let mut lines = LineSplitter { pending: Vec::new(), prefix, log };
    let mut stop_at = None;
    let ended = loop {
        // The driver sends Shutdown before stopping a worker, which then exits by
        // itself within moments: give it that chance before killing.
        if stop_at.is_none() && shared.stop.load(Ordering::SeqCst) {
            stop_at = Some(Instant::now());
        }
        if stop_at.is_some_and(|t: Instant| t.elapsed() > STOP_GRACE) {
            break End::Stop;
        }
        match lines.read_from(&mut ch) {
            Read::Eof => break End::Exited,
            Read::Data | Read::Idle => {}
            Read::Failed(e) => break End::Lost(e),
        }
    };
    let code = match ended {
        End::Exited => {
            sess.set_timeout(millis(io_timeout));
            exit_code(&mut ch)
        }
        End::Stop => {
            sess.set_timeout(millis(io_timeout));
            // The group may outlive the channel: kill it by id over a fresh channel.
            let script = format!(
                "P={pgid}; kill -TERM -$P $P 2>/dev/null; i=0; while [ $i -lt {TERM_GRACE_TENTHS} ] && \
                 {{ kill -0 -$P || kill -0 $P; }} 2>/dev/null; do sleep 0.1; i=$((i+1)); done; \
                 kill -KILL -$P $P 2>/dev/null; true"
            );
            if let Err(e) = ssh_session::run(&sess, &label, &script) {
                (lines.log)(format!("{} could not stop the remote worker (pid {pgid}): {e}", lines.prefix));
            }
            // Keep the worker's last words (written before it died), bounded.
            sess.set_timeout(millis(PUMP_TICK));
            let deadline = Instant::now() + DRAIN;
            while Instant::now() < deadline && matches!(lines.read_from(&mut ch), Read::Data | Read::Idle) {}
            sess.set_timeout(millis(io_timeout));
            let _ = ch.close();
            exit_code(&mut ch)
        }
        End::Lost(e) => {
            (lines.log)(format!("{} lost the SSH connection to {label}: {e}", lines.prefix));
            super::launcher::LINK_LOST
        }
    };
    lines.flush();
    *shared.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(code);
    let _ = sess.disconnect(None, "leapgnn driver done", None);
}

/// Turns the channel's byte stream into prefixed log lines.
struct LineSplitter {
    pending: Vec<u8>,
    prefix: String,
    log: LogSink,
}

enum Read {
    Data,
    /// Nothing arrived within the session's timeout.
    Idle,
    Eof,
    Failed(String),
}

impl LineSplitter {
    fn read_from(&mut self, ch: &mut Channel) -> Read {
        let mut buf = [0u8; 8192];
        match std::io::Read::read(ch, &mut buf) {
            Ok(0) if ch.eof() => Read::Eof,
            Ok(0) => Read::Idle,
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.pending.drain(..=i).collect();
                    self.emit(&line);
                }
                Read::Data
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => Read::Idle,
            Err(e) => Read::Failed(e.to_string()),
        }
    }

    fn emit(&self, bytes: &[u8]) {
        (self.log)(format!("{} {}", self.prefix, String::from_utf8_lossy(bytes).trim_end()));
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.emit(&rest);
        }
    }
}

enum End {
    Exited,
    Stop,
    Lost(String),
}

/// The remote exit status; a signal death maps to 128 + signal as a shell reports it.
fn exit_code(ch: &mut Channel) -> i32 {
    let _ = ch.wait_close();
    if let Ok(sig) = ch.exit_signal()
        && let Some(name) = sig.exit_signal
    {
        return 128 + super::launcher::signal_number(&name).unwrap_or(0);
    }
    ch.exit_status().unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_workers_take_its_gpus_in_turn() {
        let seen: Vec<String> = (0..5).map(|i| gpu_env(2, i).1).collect();
        assert_eq!(seen, ["0", "1", "0", "1", "0"]);
        assert_eq!(gpu_env(4, 3), ("CUDA_VISIBLE_DEVICES".to_string(), "3".to_string()));
    }

    #[test]
    fn driver_address_follows_the_route_to_the_host() {
        let any: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let local: SocketAddr = "10.1.2.3:50000".parse().unwrap();
        let remote: SocketAddr = "10.1.2.9:22".parse().unwrap();
        assert_eq!(driver_address(any, local, remote).unwrap(), "10.1.2.3:4000".parse::<SocketAddr>().unwrap());
        assert_eq!(driver_address(lo, "127.0.0.1:5".parse().unwrap(), "127.0.0.1:22".parse().unwrap()).unwrap(), lo);
        let e = driver_address(lo, local, remote).unwrap_err().to_string();
        assert!(e.contains("driver_bind") && e.contains("10.1.2.9"), "{e}");
    }
}
