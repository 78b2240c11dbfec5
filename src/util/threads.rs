//! The process's compute threads (rayon's global pool), started up front.

/// rayon's global pool could not start its threads.
#[derive(Debug, thiserror::Error)]
pub enum ThreadPoolError {
    /// Their stacks would not fit in what is left of the address-space
    /// limit: found before any is asked for, as std would panic on it.
    #[error("{}", no_room(*.threads, .why, *.limit, None))]
    NoRoom {
        threads: usize,
        /// The room the stacks need against the room left.
        why: String,
        /// The address-space limit (RLIMIT_AS), in bytes.
        limit: u64,
    },
    /// The OS refused one of them, as `spawn` reports any thread it refuses
    /// (which limit, and whether it was asked again).
    #[error(transparent)]
    Refused(SpawnError),
}

/// "cannot start N compute thread(s): WHY within WHOSE address-space limit
/// ...; raise ...": `ThreadPoolError::NoRoom`'s line, of this process
/// (`whose` None) or, as the driver names a worker's, of `whose` ("worker 1's").
pub fn no_room(threads: usize, why: &str, limit: u64, whose: Option<&str>) -> String {
    let (whose, there) = match whose {
        Some(whose) => (whose, " there"),
        None => ("this process's", ""),
    };
    format!(
        "cannot start {threads} compute thread(s): {why} within {whose} address-space limit (RLIMIT_AS) of {} MiB; \
         raise the limit (ulimit -v, prlimit --as) or start fewer threads (RAYON_NUM_THREADS){there}",
        super::mib(limit)
    )
}

/// The name of compute thread `i`, as a refusal names it.
fn compute_thread_name(i: usize) -> String {
    format!("leapgnn-compute-{i}")
}

/// Address space one compute thread takes: std's default stack (2 MiB,
/// unless RUST_MIN_STACK says otherwise), its guard page, and the alternate
/// signal stack std maps for it, rounded up.
fn thread_bytes() -> u64 {
    let stack = std::env::var("RUST_MIN_STACK").ok().and_then(|v| v.parse().ok()).unwrap_or(2 << 20);
    stack + (64 << 10)
}

/// Starts rayon's global pool now, and candle's own pool after it. Started
/// lazily, at the first parallel loop, a pool that cannot start its threads
/// (an address-space limit too tight for their stacks) panics in the middle
/// of the job, after a partition may have been begun; here the process says
/// so before it does anything. Under an address-space limit their room,
/// both pools', is checked first: with the space nearly spent, a thread
/// whose stack was mapped could fail to map std's signal stack, which std
/// answers with a panic of its own.
pub fn start_pool() -> Result<(), ThreadPoolError> {
    // RAYON_NUM_THREADS, else one per CPU, as rayon would; given to it, so the figure is the pool's.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let candle = candle_pool_threads();
    let limit = super::address_space_limit();
    let used = super::proc_kib("/proc/self/status", "VmSize:");
    if let (Some(limit), Some(used)) = (limit, used) {
        let need = (threads + candle) as u64 * thread_bytes();
        if used.saturating_add(need) > limit {
            let candles = if candle > 0 { format!(" and candle's {candle} pool thread(s)'") } else { String::new() };
            let why = format!(
                "their stacks{candles} need about {} MiB of address space and {} MiB are left",
                super::mib(need),
                limit.saturating_sub(used) >> 20
            );
            return Err(ThreadPoolError::NoRoom { threads, why, limit });
        }
    }
    // Each thread through `spawn`: a refusal is retried or reported as any
    // other thread's is, and the error that says which is kept here.
    let mut refused = None;
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .spawn_handler(|thread| match spawn(compute_thread_name(thread.index()), move || thread.run()) {
            Ok(_) => Ok(()),
            Err(e) => {
                let kind = e.os_error().kind();
                refused = Some(e);
                Err(kind.into())
            }
        })
        .build_global();
    match (built, refused) {
        (Err(_), Some(e)) => Err(ThreadPoolError::Refused(e)),
        // The other error is a pool already started (a library caller's),
        // which is what this asks for anyway.
        (Ok(()), _) | (Err(_), None) => start_candle_pool().map_err(ThreadPoolError::Refused),
    }
}

/// The threads of candle's barrier pool (its elementwise ops'): one fewer
/// than its compute threads, the calling thread being the last, which are
/// CANDLE_NUM_THREADS, else RAYON_NUM_THREADS, else one per physical core.
fn candle_pool_threads() -> usize {
    std::env::var("CANDLE_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(candle_core::utils::get_num_threads)
        .saturating_sub(1)
}

thread_local! {
    /// Set on the thread that starts candle's pool, while it does: where the
    /// panic hook sends candle's panic at a refused thread.
    static CANDLE_STARTER: std::cell::RefCell<Option<std::sync::mpsc::Sender<Result<(), String>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts candle's barrier pool now, on a thread of its own. candle starts
/// it at its first large elementwise op (in the middle of a backward) and
/// panics at a thread the OS refuses. That panic is taken in the panic hook,
/// before it unwinds: unwinding would free the pool's state under the threads
/// it had already started. The starting thread stays parked in the hook for
/// good, and its refusal is returned as any other thread's: candle's pool is
/// then never ready (a first use would wait for ever), and the caller ends
/// the process without computing. The refusal is not asked again, as candle
/// cannot be asked twice.
fn start_candle_pool() -> Result<(), SpawnError> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        // Stays: a thread parked in the hook holds std's lock on it, which a
        // restore would wait for. Every other panic goes to the hook before.
        std::panic::set_hook(Box::new(move |info| match CANDLE_STARTER.with(|s| s.borrow_mut().take()) {
            Some(starter) => {
                let _ = starter.send(Err(info.payload_as_str().unwrap_or("candle's pool panicked").to_string()));
                loop {
                    std::thread::park();
                }
            }
            None => before(info),
        }));
    });
    let (tx, rx) = std::sync::mpsc::channel();
    spawn("leapgnn-candle-start", move || {
        CANDLE_STARTER.with(|s| *s.borrow_mut() = Some(tx.clone()));
        candle_core::utils::barrier_pool();
        CANDLE_STARTER.with(|s| s.borrow_mut().take());
        let _ = tx.send(Ok(()));
    })?;
    match rx.recv() {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(message)) => {
            let limits = ThreadLimits::read();
            let may_clear = limits.refusal_may_clear();
            let refused = (Starting::Thread, candle_thread_refused());
            Err(SpawnError::refused(refused, limits, (1, 0), os_error_in(&message), may_clear))
        }
    }
}

/// The name of the candle pool thread a refusal stopped at: the one after
/// those that started (candle names them `candle-bp-N` from 0).
fn candle_thread_refused() -> String {
    let started = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("candle-bp-")))
        .count();
    format!("candle-bp-{started}")
}

/// The OS error in a panic message that quotes one as `io::Error`'s Debug
/// does (`...: Os { code: 11, kind: WouldBlock, ... }`), else the message.
fn os_error_in(message: &str) -> std::io::Error {
    let code = message.split_once("Os { code: ").and_then(|(_, rest)| {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        rest[..digits].parse().ok()
    });
    code.map_or_else(|| std::io::Error::other(message.to_string()), std::io::Error::from_raw_os_error)
}

/// A thread the OS refused to start (EAGAIN: the user's process/thread limit,
/// the kernel's threads-max or pid_max, a cgroup's pids.max, or no address
/// space left for its stack), every time `spawn` asked within its retries.
#[derive(Debug, thiserror::Error)]
#[error("{}", refusal(.kind.noun(), .name, .source, *.attempts, *.waited_ms, .limits, None))]
pub struct SpawnError {
    kind: Starting,
    name: String,
    /// Whether the refusal lasts: EAGAIN under a limit of the user's or the
    /// process's own, which no wait frees (`ThreadLimits::refusal_may_clear`).
    lasting: bool,
    /// The limits in force, for the operator to compare with what runs
    /// (boxed: every error enum that carries a SpawnError stays small).
    limits: Box<ThreadLimits>,
    /// How many times the OS was asked, and how long was waited between.
    attempts: u32,
    waited_ms: u64,
    #[source]
    source: std::io::Error,
}

/// What the OS was asked to start.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Starting {
    Thread,
    Process,
}

impl Starting {
    fn noun(self) -> &'static str {
        match self {
            Starting::Thread => "thread",
            Starting::Process => "process",
        }
    }
}

/// "cannot start thread NAME: OS ERROR, within LIMITS; raise ..., or start
/// fewer ...": a refusal (of a `thread` or a `process`), the limits in force
/// and what to change, on `host` (a worker's, as the driver names its
/// refusal) or on this one (None).
pub fn refusal(
    noun: &str,
    name: &str,
    os_error: &dyn std::fmt::Display,
    attempts: u32,
    waited_ms: u64,
    limits: &ThreadLimits,
    host: Option<&str>,
) -> String {
    let (on, there) = match host {
        Some(host) => (format!(" on {host}"), "there"),
        None => (String::new(), "on this host"),
    };
    format!(
        "cannot start {noun} {name}: {os_error}{}{}; raise the limit that is full{on} (ulimit -u, prlimit --nproc; \
         /proc/sys/kernel/threads-max or pid_max; the cgroup's pids.max; ulimit -v, prlimit --as for the address \
         space), or start fewer workers or threads (RAYON_NUM_THREADS) {there}",
        retried(attempts, waited_ms),
        limits.describe()
    )
}

/// ", refused N times over M ms" when a refusal was retried.
fn retried(attempts: u32, waited_ms: u64) -> String {
    if attempts > 1 { format!(", refused {attempts} times over {waited_ms} ms") } else { String::new() }
}

impl SpawnError {
    /// The thread's name.
    pub fn thread(&self) -> &str {
        &self.name
    }

    /// What the OS said.
    pub fn os_error(&self) -> &std::io::Error {
        &self.source
    }

    /// How many times the OS was asked for the thread.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How long, in all, `spawn` waited between its attempts.
    pub fn waited_ms(&self) -> u64 {
        self.waited_ms
    }

    /// The limits in force when the refusal was reported.
    pub fn limits(&self) -> &ThreadLimits {
        &self.limits
    }

    /// Whether the refusal lasts: a process that asks again, or a run
    /// restarted on this host, meets the same limit.
    pub fn lasts(&self) -> bool {
        self.lasting
    }

    /// The OS refused `what` (a thread or process and its name) with
    /// `source` after `(attempts, waited_ms)`, under `limits`; `may_clear`:
    /// whether they (or the test hook) say a wait may free the room, so
    /// that an EAGAIN does not last.
    fn refused(
        (kind, name): (Starting, String),
        limits: ThreadLimits,
        (attempts, waited_ms): (u32, u64),
        source: std::io::Error,
        may_clear: bool,
    ) -> Self {
        let lasting = source.raw_os_error() == Some(libc::EAGAIN) && !may_clear;
        SpawnError { kind, name, lasting, limits: Box::new(limits), attempts, waited_ms, source }
    }

    /// The OS refused thread `name` with `source`, asked once (for tests
    /// of what a refusal prints; `spawn` makes its own).
    #[cfg(test)]
    pub(crate) fn new(name: String, source: std::io::Error) -> Self {
        SpawnError::refused((Starting::Thread, name), ThreadLimits::read(), (1, 0), source, true)
    }
}

/// The limits a thread refusal (EAGAIN) may have met, read when it is
/// reported. Which one was full is what the operator needs: the user's
/// RLIMIT_NPROC is permanent for the user, the kernel's tables and a cgroup's
/// pids.max fill with other processes. The user's own thread count is not
/// read (that is a scan of all of /proc); the host's total, which bounds it,
/// is one line.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadLimits {
    /// The user's RLIMIT_NPROC (`ulimit -u`), None when unlimited.
    pub process_limit: Option<u64>,
    /// Whether the kernel exempts this process from RLIMIT_NPROC: its real
    /// uid is root, or it holds CAP_SYS_RESOURCE or CAP_SYS_ADMIN (as euid 0
    /// does). Such a limit cannot have refused the thread.
    #[serde(default)]
    pub process_limit_exempt: bool,
    /// This process's RLIMIT_AS (`ulimit -v`) in bytes, None when unlimited.
    pub address_space_limit: Option<u64>,
    /// The kernel's threads-max (/proc/sys/kernel/threads-max).
    pub threads_max: Option<u64>,
    /// The kernel's pid_max (/proc/sys/kernel/pid_max): every thread takes a pid.
    pub pid_max: Option<u64>,
    /// Threads on the host now, all users' (/proc/loadavg), which threads-max
    /// and pid_max count.
    pub threads_in_use: Option<u64>,
    /// The tightest pids.max of this process's cgroup and its ancestors, None
    /// where none is set.
    pub pids: Option<PidsLimit>,
}

/// A cgroup's pids.max with its pids.current.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PidsLimit {
    /// The cgroup's directory (under /sys/fs/cgroup).
    pub cgroup: String,
    pub max: u64,
    pub current: Option<u64>,
}

impl PidsLimit {
    /// Pids the cgroup could still start.
    fn room(&self) -> u64 {
        self.max.saturating_sub(self.current.unwrap_or(0))
    }
}

impl ThreadLimits {
    /// This process's limits and its host's, now.
    pub fn read() -> Self {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        ThreadLimits {
            process_limit: super::process_limit(),
            process_limit_exempt: process_limit_exempt(
                // SAFETY: getuid only reads the process's credentials.
                unsafe { libc::getuid() },
                &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
                &std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default(),
            ),
            address_space_limit: super::address_space_limit(),
            threads_max: super::threads_max(),
            pid_max: super::number_in(std::path::Path::new("/proc/sys/kernel/pid_max")),
            threads_in_use: threads_in_use(&std::fs::read_to_string("/proc/loadavg").unwrap_or_default()),
            pids: pids_limit(&cgroups, std::path::Path::new("/sys/fs/cgroup")),
        }
    }

    /// ", within A, B and C" naming each limit set, and how full the ones
    /// whose use is known are; empty when none is known.
    pub fn describe(&self) -> String {
        let mut limits = Vec::new();
        // Left out, not marked: a limit the kernel does not apply cannot have
        // refused the thread, and naming it sends the operator to raise it.
        if let Some(n) = self.process_limit.filter(|_| !self.process_limit_exempt) {
            limits.push(format!("the user's process/thread limit (RLIMIT_NPROC, ulimit -u) of {n}"));
        }
        if let Some(b) = self.address_space_limit {
            limits.push(format!("the address-space limit (RLIMIT_AS, ulimit -v) of {} MiB", super::mib(b)));
        }
        // threads-max and pid_max count the same threads: their number is
        // said once, after the last of them, and "full" on each it fills.
        let tables = [("threads-max", self.threads_max), ("pid_max", self.pid_max)];
        let last = tables.iter().rposition(|(_, n)| n.is_some());
        for (i, &(table, n)) in tables.iter().enumerate() {
            let Some(n) = n else { continue };
            let full = self.threads_in_use.is_some_and(|used| used >= n);
            let use_ = match self.threads_in_use {
                Some(used) if Some(i) == last => {
                    format!(" ({used} threads on the host{})", if full { ": full" } else { "" })
                }
                _ if full => " (full)".to_string(),
                _ => String::new(),
            };
            limits.push(format!("the kernel's {table} of {n}{use_}"));
        }
        if let Some(p) = &self.pids {
            let current = match p.current {
                Some(c) if c >= p.max => format!(" ({c} in use: full)"),
                Some(c) => format!(" ({c} in use)"),
                None => String::new(),
            };
            limits.push(format!("pids.max of {} in cgroup {}{current}", p.max, p.cgroup));
        }
        match limits.split_last() {
            None => String::new(),
            Some((last, [])) => format!(", within {last}"),
            Some((last, rest)) => format!(", within {} and {last}", rest.join(", ")),
        }
    }

    /// Whether a thread refused (EAGAIN) under these limits may start if
    /// asked again. A kernel table or a cgroup's pids.max at or near its
    /// limit frees as other processes end, and one whose use is not known
    /// may be full; with none of those, a refusal under the user's
    /// RLIMIT_NPROC or an address-space limit is this process's own, and
    /// asking again only waits. (Telling whether RLIMIT_NPROC itself is
    /// reached needs the user's thread count, a scan of all of /proc.)
    pub fn refusal_may_clear(&self) -> bool {
        // Near: within a sixteenth of the limit, or 32 (a few workers' threads).
        let near = |used: Option<u64>, limit: u64| used.is_none_or(|u| limit.saturating_sub(u) <= (limit / 16).max(32));
        let tables = [self.threads_max, self.pid_max];
        let tables_known = self.threads_in_use.is_some() && tables.iter().any(Option::is_some);
        let table_near = tables.into_iter().flatten().any(|l| near(self.threads_in_use, l));
        let cgroup_near = self.pids.as_ref().is_some_and(|p| near(p.current, p.max));
        let own_limit =
            self.process_limit.is_some() && !self.process_limit_exempt || self.address_space_limit.is_some();
        !tables_known || table_near || cgroup_near || !own_limit
    }
}

/// Whether the kernel exempts a process of real uid `uid` whose
/// /proc/self/status is `status` and /proc/self/uid_map `uid_map` from
/// RLIMIT_NPROC: it exempts the root user and a holder of CAP_SYS_RESOURCE
/// or CAP_SYS_ADMIN, both of the initial user namespace (fork.c's
/// copy_process). In another namespace (a map other than the identity
/// `0 0 4294967295`) its capabilities count for nothing, and its uid is the
/// root user only where the map makes it uid 0 outside (`unshare -U -r` run
/// by root); rootless containers map their root to a user's uid.
fn process_limit_exempt(uid: libc::uid_t, status: &str, uid_map: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_SYS_RESOURCE: u32 = 24;
    let maps = uid_map.lines().filter_map(|l| {
        let mut n = l.split_whitespace().map(|f| f.parse::<u64>().ok());
        Some((n.next()??, n.next()??, n.next()??))
    });
    // No map read (no user namespaces in this kernel): the initial namespace.
    let initial = uid_map.trim().is_empty() || maps.clone().eq([(0, 0, u64::from(u32::MAX))]);
    if !initial {
        let uid = u64::from(uid);
        return maps.into_iter().any(|(inside, outside, count)| {
            (inside..inside.saturating_add(count)).contains(&uid) && outside + (uid - inside) == 0
        });
    }
    let caps =
        status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|c| u64::from_str_radix(c.trim(), 16).ok());
    uid == 0 || caps.is_some_and(|c| c & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0)
}

/// The host's threads in all: the fourth field of /proc/loadavg, "running/total".
fn threads_in_use(loadavg: &str) -> Option<u64> {
    loadavg.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

/// The tightest pids.max over the cgroup `proc_cgroup` (/proc/self/cgroup's
/// text) names and its ancestors, under the cgroup mount `root`: an
/// ancestor's limit binds its descendants too. The v1 pids controller
/// (`N:pids:/path`, under `root`/pids) wins over the v2 line (`0::/path`).
fn pids_limit(proc_cgroup: &str, root: &std::path::Path) -> Option<PidsLimit> {
    let entries: Vec<(&str, &str)> = proc_cgroup
        .lines()
        .filter_map(|l| {
            let mut fields = l.splitn(3, ':');
            let _id = fields.next()?;
            Some((fields.next()?, fields.next()?))
        })
        .collect();
    let v1 = entries.iter().find(|(controllers, _)| controllers.split(',').any(|c| c == "pids"));
    let (base, path) = match v1 {
        Some((_, path)) => (root.join("pids"), *path),
        None => (root.to_path_buf(), entries.iter().find(|(controllers, _)| controllers.is_empty())?.1),
    };
    let mut dir = base.join(path.trim_start_matches('/'));
    let mut tightest: Option<PidsLimit> = None;
    loop {
        if let Some(max) = super::number_in(&dir.join("pids.max")) {
            let here = PidsLimit {
                cgroup: dir.display().to_string(),
                max,
                current: super::number_in(&dir.join("pids.current")),
            };
            if tightest.as_ref().is_none_or(|t| here.room() < t.room()) {
                tightest = Some(here);
            }
        }
        if dir == base || !dir.pop() {
            return tightest;
        }
    }
}

/// How many times `spawn` asks the OS for a thread it refuses with EAGAIN.
/// EAGAIN is also the answer of a full kernel table (threads-max, pid_max,
/// a cgroup's pids.max), which other processes ending frees within moments;
/// where one may be (`ThreadLimits::refusal_may_clear`), only a refusal that
/// outlasts the retries is reported as a limit.
pub const SPAWN_ATTEMPTS: u32 = 6;

/// The first wait between attempts; each next one doubles it, so all the
/// retries together wait 620 ms, short against a job's start.
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// Starts a named thread, or says which could not start and what to change:
/// `std::thread::spawn` panics when the OS refuses one.
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> Result<std::thread::JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let body = Body::new(f);
    retrying(Starting::Thread, name.into(), |name| {
        let body = body.clone();
        std::thread::Builder::new().name(name.into()).spawn(move || body.run())
    })
}

/// Starts process `name` with `start` (a `Command::spawn`), asking again as
/// `spawn` asks for a thread: a fork refused with EAGAIN meets the same
/// limits a thread does, and is reported naming them.
pub fn start_process<H>(
    name: impl Into<String>,
    mut start: impl FnMut() -> std::io::Result<H>,
) -> Result<H, SpawnError> {
    retrying(Starting::Process, name.into(), |_| start())
}

/// `spawn` within a scope.
pub fn spawn_scoped<'scope, 'env, F, T>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    name: impl Into<String>,
    f: F,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let body = Body::new(f);
    retrying(Starting::Thread, name.into(), |name| {
        let body = body.clone();
        std::thread::Builder::new().name(name.into()).spawn_scoped(s, move || body.run())
    })
}

/// A thread's body, kept by the spawner: `Builder::spawn` consumes the
/// closure it is given even when the OS refuses the thread, and a retry
/// needs it again.
struct Body<F>(std::sync::Arc<std::sync::Mutex<Option<F>>>);

impl<F> Clone for Body<F> {
    fn clone(&self) -> Self {
        Body(self.0.clone())
    }
}

impl<F: FnOnce() -> T, T> Body<F> {
    fn new(f: F) -> Self {
        Body(std::sync::Arc::new(std::sync::Mutex::new(Some(f))))
    }

    /// Runs the body; only the one thread that started calls this.
    fn run(self) -> T {
        let f = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        f.expect("a thread body runs once: only a started thread runs it")()
    }
}

/// Asks `start` for thread or process `name` until the OS starts it,
/// retrying an EAGAIN up to `SPAWN_ATTEMPTS` times with a doubling wait when
/// the limits read at the first say it may clear.
fn retrying<H>(
    kind: Starting,
    name: String,
    mut start: impl FnMut(&str) -> std::io::Result<H>,
) -> Result<H, SpawnError> {
    let mut backoff = FIRST_BACKOFF;
    let mut waited = std::time::Duration::ZERO;
    let mut attempt = 1;
    // Read at the first EAGAIN, once: what decides whether to ask again,
    // and what the error names should the refusal last.
    let mut limits = None;
    loop {
        let (started, hooked) = match test_refusal(&name) {
            Some(hook) => (Err(std::io::Error::from_raw_os_error(libc::EAGAIN)), Some(hook)),
            None => (start(&name), None),
        };
        let e = match started {
            Ok(h) => return Ok(h),
            Err(e) => e,
        };
        let eagain = e.raw_os_error() == Some(libc::EAGAIN);
        let may_clear = eagain && {
            let read = limits.get_or_insert_with(ThreadLimits::read);
            hooked.map_or_else(|| read.refusal_may_clear(), |h| h == TestRefusal::Transient)
        };
        if !may_clear || attempt >= SPAWN_ATTEMPTS {
            let limits = limits.unwrap_or_else(ThreadLimits::read);
            let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            return Err(SpawnError::refused((kind, name), limits, (attempt, waited_ms), e, may_clear));
        }
        std::thread::sleep(backoff);
        waited += backoff;
        backoff *= 2;
        attempt += 1;
    }
}

/// Test hook: with `LEAPGNN_TEST_REFUSE_THREAD=NAME` in the environment, the
/// thread (or process, `start_process`) named NAME is refused as the OS
/// refuses one past the user's process/thread limit (EAGAIN): for good, so
/// it is reported at once; with `NAME:N`, at the first N attempts in this
/// process only, as a momentarily full kernel table refuses one, so it is
/// retried whatever the limits read.
/// RLIMIT_NPROC does not bind root, as tests run in CI, nor can a test
/// choose which thread of which worker it stops.
pub const REFUSE_THREAD_TEST_VAR: &str = "LEAPGNN_TEST_REFUSE_THREAD";

/// The refusals the `NAME:N` hook has made in this process.
static TEST_REFUSALS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The kind of refusal the hook stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TestRefusal {
    /// `NAME`: a limit of the user's.
    Permanent,
    /// `NAME:N`: a table full for a moment.
    Transient,
}

fn test_refusal(name: &str) -> Option<TestRefusal> {
    let hook = std::env::var(REFUSE_THREAD_TEST_VAR).ok()?;
    let (hooked, times) = match hook.rsplit_once(':').map(|(n, t)| (n, t.parse::<u32>())) {
        Some((n, Ok(t))) => (n, Some(t)),
        _ => (hook.as_str(), None),
    };
    if hooked != name {
        return None;
    }
    let Some(times) = times else { return Some(TestRefusal::Permanent) };
    use std::sync::atomic::Ordering;
    let fits = |made: u32| (made < times).then_some(made + 1);
    TEST_REFUSALS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, fits).ok()?;
    Some(TestRefusal::Transient)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The limits read here are this machine's: what the kernel reports in
    /// /proc/self/limits and its files, and this process's own threads among
    /// the host's.
    #[test]
    fn the_limits_read_are_this_hosts() {
        let limits = ThreadLimits::read();
        let table = std::fs::read_to_string("/proc/self/limits").unwrap();
        let nproc = table.lines().find(|l| l.starts_with("Max processes")).unwrap();
        let soft = nproc.split_whitespace().nth(2).unwrap();
        assert_eq!(limits.process_limit, soft.parse().ok(), "{nproc}");
        let file = |p: &str| std::fs::read_to_string(p).unwrap().trim().parse::<u64>().unwrap();
        assert_eq!(limits.threads_max, Some(file("/proc/sys/kernel/threads-max")));
        assert_eq!(limits.pid_max, Some(file("/proc/sys/kernel/pid_max")));
        let own = std::fs::read_dir("/proc/self/task").unwrap().count() as u64;
        assert!(limits.threads_in_use.is_some_and(|n| n >= own), "{limits:?}, {own} threads here");
        let shown = limits.describe();
        assert!(shown.contains(&format!("pid_max of {}", file("/proc/sys/kernel/pid_max"))), "{shown}");
        // SAFETY: getuid only reads the process's credentials.
        if unsafe { libc::getuid() } == 0 {
            assert!(limits.process_limit_exempt, "{limits:?}");
        }
    }

    /// A host whose tables are far from full, with the use of each known.
    fn roomy() -> ThreadLimits {
        ThreadLimits {
            threads_max: Some(100_000),
            pid_max: Some(32_768),
            threads_in_use: Some(400),
            pids: Some(PidsLimit { cgroup: "/sys/fs/cgroup/pids/job".into(), max: 1000, current: Some(100) }),
            ..ThreadLimits::default()
        }
    }

    /// Every EAGAIN was asked again 6 times over 620 ms, even one under the
    /// user's RLIMIT_NPROC with every table roomy, which no wait frees. A
    /// refusal is now retried only where a table is full or near it, or its
    /// use is not known, or no limit of the process's own can have refused it.
    #[test]
    fn a_refusal_is_retried_only_where_a_table_may_free_or_nothing_else_explains_it() {
        let nproc = ThreadLimits { process_limit: Some(12), ..roomy() };
        assert!(!nproc.refusal_may_clear(), "{nproc:?}");
        let space = ThreadLimits { address_space_limit: Some(400 << 20), ..roomy() };
        assert!(!space.refusal_may_clear(), "{space:?}");
        // Root's RLIMIT_NPROC is not applied: something else refused it.
        let root = ThreadLimits { process_limit_exempt: true, ..nproc.clone() };
        assert!(root.refusal_may_clear(), "{root:?}");
        assert!(roomy().refusal_may_clear(), "no limit of its own: retried");
        let may_free = [
            ThreadLimits { threads_in_use: Some(99_990), ..nproc.clone() },
            ThreadLimits { threads_in_use: Some(32_768), ..nproc.clone() },
            ThreadLimits { pids: Some(PidsLimit { current: Some(990), ..roomy().pids.unwrap() }), ..nproc.clone() },
            ThreadLimits { pids: Some(PidsLimit { current: None, ..roomy().pids.unwrap() }), ..nproc.clone() },
            ThreadLimits { threads_in_use: None, ..nproc.clone() },
            ThreadLimits { process_limit: Some(12), ..ThreadLimits::default() },
        ];
        for limits in may_free {
            assert!(limits.refusal_may_clear(), "{limits:?}");
        }
    }

    /// RLIMIT_NPROC was named for root, which the kernel exempts from it, so
    /// the operator was sent to raise a limit that could not have refused.
    #[test]
    fn rlimit_nproc_is_named_only_where_the_kernel_applies_it() {
        let user = ThreadLimits { process_limit: Some(12), ..ThreadLimits::default() };
        assert_eq!(user.describe(), ", within the user's process/thread limit (RLIMIT_NPROC, ulimit -u) of 12");
        let root = ThreadLimits { process_limit_exempt: true, ..user.clone() };
        assert_eq!(root.describe(), "");
        let status = |caps: &str| format!("Name:\tleapgnn\nCapInh:\t0000000000000000\nCapEff:\t{caps}\n");
        let initial = "         0          0 4294967295\n";
        assert!(process_limit_exempt(0, &status("0000000000000000"), initial), "root's real uid");
        assert!(!process_limit_exempt(1000, &status("0000000000000000"), initial));
        assert!(process_limit_exempt(1000, &status("0000000001000000"), initial), "CAP_SYS_RESOURCE");
        assert!(process_limit_exempt(1000, &status("0000000000200000"), initial), "CAP_SYS_ADMIN");
        assert!(!process_limit_exempt(1000, &status("0000000000000400"), initial), "CAP_NET_BIND_SERVICE");
        assert!(process_limit_exempt(0, &status("0000000000000000"), ""), "no user namespaces: the initial one");
    }

    /// Root in a user namespace was taken as exempt from RLIMIT_NPROC: the
    /// kernel exempts only the initial namespace's root user and holders of
    /// its capabilities. A rootless container's root (uid 0 inside, a
    /// user's uid outside, every capability inside) is now held to the
    /// limit; `unshare -U -r` run by root maps root to root, which is exempt.
    #[test]
    fn root_in_a_user_namespace_is_held_to_rlimit_nproc_unless_it_is_roots() {
        let all_caps = "Name:\tleapgnn\nCapEff:\t000001ffffffffff\n";
        let rootless = "         0       1000          1\n         1     100000      65536\n";
        assert!(!process_limit_exempt(0, all_caps, rootless), "root inside, uid 1000 outside");
        assert!(!process_limit_exempt(1, all_caps, rootless), "uid 1 inside, 100000 outside");
        assert!(!process_limit_exempt(5, all_caps, "         0     100000      65536\n"), "a remapped uid 5");
        assert!(process_limit_exempt(0, all_caps, "         0          0          1\n"), "root mapped to root");
    }

    /// candle panics at a thread the OS refuses with the io::Error's Debug
    /// in its message: the refusal reported is that error.
    #[test]
    fn the_os_error_in_candles_panic_is_the_one_refused() {
        let refused = std::io::Error::from_raw_os_error(libc::EAGAIN);
        let message = format!("failed to spawn candle barrier pool worker: {refused:?}");
        assert_eq!(os_error_in(&message).raw_os_error(), Some(libc::EAGAIN), "{message}");
        assert_eq!(os_error_in(&message).to_string(), refused.to_string());
        assert_eq!(os_error_in("no error quoted").to_string(), "no error quoted");
    }

    /// "(N threads on the host)" followed both threads-max and pid_max,
    /// which count the same threads. It is now said once, after the last,
    /// and a full table is still marked so.
    #[test]
    fn the_hosts_thread_count_is_said_once_after_its_last_table() {
        let kernel = |threads_max, pid_max, used| {
            ThreadLimits { threads_max, pid_max, threads_in_use: Some(used), ..ThreadLimits::default() }.describe()
        };
        assert_eq!(
            kernel(Some(100_000), Some(32_768), 400),
            ", within the kernel's threads-max of 100000 and the kernel's pid_max of 32768 (400 threads on the host)"
        );
        assert_eq!(
            kernel(Some(400), Some(32_768), 400),
            ", within the kernel's threads-max of 400 (full) and the kernel's pid_max of 32768 (400 threads on the host)"
        );
        assert_eq!(
            kernel(Some(100_000), Some(400), 400),
            ", within the kernel's threads-max of 100000 and the kernel's pid_max of 400 (400 threads on the host: full)"
        );
        assert_eq!(
            kernel(Some(1000), None, 400),
            ", within the kernel's threads-max of 1000 (400 threads on the host)"
        );
    }

    /// A cgroup v2 tree (`0::/path`): the tightest pids.max on the way up is
    /// named, with its use, and "max" is no limit.
    #[test]
    fn the_tightest_pids_max_of_a_v2_cgroup_and_its_ancestors_is_named() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(&r.join("job/step/pids.max"), "max\n");
        write(&r.join("job/step/pids.current"), "3\n");
        write(&r.join("job/pids.max"), "10\n");
        write(&r.join("job/pids.current"), "10\n");
        write(&r.join("pids.max"), "500\n");
        write(&r.join("pids.current"), "20\n");
        let got = pids_limit("0::/job/step\n", r).unwrap();
        let job = r.join("job").display().to_string();
        assert_eq!(got, PidsLimit { cgroup: job.clone(), max: 10, current: Some(10) });
        let shown = ThreadLimits { pids: Some(got), ..ThreadLimits::default() }.describe();
        assert_eq!(shown, format!(", within pids.max of 10 in cgroup {job} (10 in use: full)"));
        // No pids.max anywhere: no limit to name.
        let bare = tempfile::tempdir().unwrap();
        assert_eq!(pids_limit("0::/job/step\n", bare.path()), None);
    }

    /// A cgroup v1 host (this one's kind): the pids controller's line wins
    /// over the v2 line, and its tree is under `root`/pids.
    #[test]
    fn a_v1_pids_controller_is_read_under_its_own_mount() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(&r.join("pids/slurm/job7/pids.max"), "64\n");
        write(&r.join("pids/slurm/job7/pids.current"), "12\n");
        write(&r.join("slurm/job7/pids.max"), "1\n");
        let cgroups = "9:memory:/slurm/job7\n8:pids,other:/slurm/job7\n0::/slurm/job7\n";
        let got = pids_limit(cgroups, r).unwrap();
        assert_eq!((got.max, got.current), (64, Some(12)), "{got:?}");
        assert_eq!(threads_in_use("0.10 0.20 0.30 2/345 6789\n"), Some(345));
        assert_eq!(threads_in_use(""), None);
    }
}
