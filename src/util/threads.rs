//! The process's compute threads (rayon's global pool), started up front.

/// rayon's global pool could not start its threads.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start {threads} compute thread(s): {why}{limit}; raise the limit (ulimit -v, prlimit --as) or start \
     fewer threads (RAYON_NUM_THREADS)"
)]
pub struct ThreadPoolError {
    threads: usize,
    /// The OS's refusal, or the room the stacks need against the room left.
    why: String,
    /// Where the room for their stacks went, when an address-space limit is set.
    limit: String,
}

/// Address space one compute thread takes: std's default stack (2 MiB,
/// unless RUST_MIN_STACK says otherwise), its guard page, and the alternate
/// signal stack std maps for it, rounded up.
fn thread_bytes() -> u64 {
    let stack = std::env::var("RUST_MIN_STACK").ok().and_then(|v| v.parse().ok()).unwrap_or(2 << 20);
    stack + (64 << 10)
}

/// Starts rayon's global pool now. Started lazily, at the first parallel
/// loop, a pool that cannot start its threads (an address-space limit too
/// tight for their stacks) panics in the middle of the job, after a partition
/// may have been begun; here the process says so before it does anything.
/// Under an address-space limit their room is checked first: with the space
/// nearly spent, a thread whose stack was mapped could fail to map std's
/// signal stack, which std answers with a panic of its own.
pub fn start_pool() -> Result<(), ThreadPoolError> {
    // RAYON_NUM_THREADS, else one per CPU, as rayon would; given to it, so the figure is the pool's.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let limit = super::address_space_limit();
    let within = || {
        limit
            .map(|b| format!(" within this process's address-space limit (RLIMIT_AS) of {} MiB", super::mib(b)))
            .unwrap_or_default()
    };
    let used = super::proc_kib("/proc/self/status", "VmSize:");
    if let (Some(limit), Some(used)) = (limit, used) {
        let need = threads as u64 * thread_bytes();
        if used.saturating_add(need) > limit {
            let why = format!(
                "their stacks need about {} MiB of address space and {} MiB are left",
                super::mib(need),
                limit.saturating_sub(used) >> 20
            );
            return Err(ThreadPoolError { threads, why, limit: within() });
        }
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build_global() {
        Ok(()) => Ok(()),
        // Only an OS refusal has a source; the other error is a pool already
        // started (a library caller's), which is what this asks for anyway.
        Err(e) if std::error::Error::source(&e).is_none() => Ok(()),
        Err(e) => Err(ThreadPoolError { threads, why: e.to_string(), limit: within() }),
    }
}

/// A thread the OS refused to start (EAGAIN: the user's process/thread limit,
/// no address space left for its stack, or the kernel's threads-max), every
/// time `spawn` asked within its retries.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start thread {name}: {source}{retried}{limits}; raise the process/thread limit (ulimit -u) or the \
     address-space limit (ulimit -v, prlimit --as), or start fewer workers or threads (RAYON_NUM_THREADS) on this \
     host",
    retried = retried(*.attempts, *.waited_ms)
)]
pub struct SpawnError {
    name: String,
    /// The limits in force, for the operator to compare with what runs.
    limits: String,
    /// How many times the OS was asked, and how long was waited between.
    attempts: u32,
    waited_ms: u64,
    #[source]
    source: std::io::Error,
}

/// ", refused N times over M ms" when a refusal was retried, as the driver
/// also quotes it for a worker's.
pub fn retried(attempts: u32, waited_ms: u64) -> String {
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

    /// The OS refused thread `name` with `source`, asked once.
    pub(crate) fn new(name: String, source: std::io::Error) -> Self {
        let mut limits = Vec::new();
        if let Some(n) = super::process_limit() {
            limits.push(format!("this user's process/thread limit (RLIMIT_NPROC) of {n}"));
        }
        if let Some(b) = super::address_space_limit() {
            limits.push(format!("this process's address-space limit (RLIMIT_AS) of {} MiB", super::mib(b)));
        }
        let limits = if limits.is_empty() { String::new() } else { format!(", within {}", limits.join(" and ")) };
        SpawnError { name, limits, attempts: 1, waited_ms: 0, source }
    }
}

/// How many times `spawn` asks the OS for a thread it refuses with EAGAIN.
/// EAGAIN is also the answer of a full kernel table (threads-max, pid_max,
/// a cgroup's pids.max), which other processes ending frees within moments;
/// only a refusal that outlasts the retries is reported as a limit.
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
    retrying(name.into(), |b| {
        let body = body.clone();
        b.spawn(move || body.run())
    })
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
    retrying(name.into(), |b| {
        let body = body.clone();
        b.spawn_scoped(s, move || body.run())
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

/// Asks `start` for thread `name` until the OS starts it, retrying an EAGAIN
/// up to `SPAWN_ATTEMPTS` times with a doubling wait.
fn retrying<H>(
    name: String,
    mut start: impl FnMut(std::thread::Builder) -> std::io::Result<H>,
) -> Result<H, SpawnError> {
    let mut backoff = FIRST_BACKOFF;
    let mut waited = std::time::Duration::ZERO;
    let mut attempt = 1;
    loop {
        let started = match test_refusal(&name) {
            Some(refused) => Err(refused),
            None => start(std::thread::Builder::new().name(name.clone())),
        };
        match started {
            Ok(h) => return Ok(h),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && attempt < SPAWN_ATTEMPTS => {
                std::thread::sleep(backoff);
                waited += backoff;
                backoff *= 2;
                attempt += 1;
            }
            Err(e) => {
                let mut refused = SpawnError::new(name, e);
                refused.attempts = attempt;
                refused.waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                return Err(refused);
            }
        }
    }
}

/// Test hook: with `LEAPGNN_TEST_REFUSE_THREAD=NAME` in the environment, the
/// thread named NAME is refused as the OS refuses one past a process/thread
/// limit (EAGAIN), at every attempt; with `NAME:N`, at the first N attempts
/// in this process only, as a momentarily full kernel table refuses one.
/// RLIMIT_NPROC does not bind root, as tests run in CI, nor can a test
/// choose which thread of which worker it stops.
pub const REFUSE_THREAD_TEST_VAR: &str = "LEAPGNN_TEST_REFUSE_THREAD";

/// The refusals the `NAME:N` hook has made in this process.
static TEST_REFUSALS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn test_refusal(name: &str) -> Option<std::io::Error> {
    let hook = std::env::var(REFUSE_THREAD_TEST_VAR).ok()?;
    let (hooked, times) = match hook.rsplit_once(':').map(|(n, t)| (n, t.parse::<u32>())) {
        Some((n, Ok(t))) => (n, Some(t)),
        _ => (hook.as_str(), None),
    };
    if hooked != name {
        return None;
    }
    if let Some(times) = times {
        use std::sync::atomic::Ordering;
        let fits = |made: u32| (made < times).then_some(made + 1);
        TEST_REFUSALS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, fits).ok()?;
    }
    Some(std::io::Error::from_raw_os_error(libc::EAGAIN))
}
