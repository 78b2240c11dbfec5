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
/// no address space left for its stack, or the kernel's threads-max).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start thread {name}: {source}{limits}; raise the process/thread limit (ulimit -u) or the address-space \
     limit (ulimit -v, prlimit --as), or start fewer workers or threads (RAYON_NUM_THREADS) on this host"
)]
pub struct SpawnError {
    name: String,
    /// The limits in force, for the operator to compare with what runs.
    limits: String,
    #[source]
    source: std::io::Error,
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

    /// The OS refused thread `name` with `source`.
    pub(crate) fn new(name: String, source: std::io::Error) -> Self {
        let mut limits = Vec::new();
        if let Some(n) = super::process_limit() {
            limits.push(format!("this user's process/thread limit (RLIMIT_NPROC) of {n}"));
        }
        if let Some(b) = super::address_space_limit() {
            limits.push(format!("this process's address-space limit (RLIMIT_AS) of {} MiB", super::mib(b)));
        }
        let limits = if limits.is_empty() { String::new() } else { format!(", within {}", limits.join(" and ")) };
        SpawnError { name, limits, source }
    }
}

/// Starts a named thread, or says which could not start and what to change:
/// `std::thread::spawn` panics when the OS refuses one.
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> Result<std::thread::JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let name = name.into();
    builder(&name)?.spawn(f).map_err(|e| SpawnError::new(name, e))
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
    let name = name.into();
    builder(&name)?.spawn_scoped(s, f).map_err(|e| SpawnError::new(name, e))
}

/// Test hook: with `LEAPGNN_TEST_REFUSE_THREAD=NAME` in the environment, the
/// thread named NAME is refused as the OS refuses one past a process/thread
/// limit (EAGAIN). RLIMIT_NPROC does not bind root, as tests run in CI, nor
/// can a test choose which thread of which worker it stops.
pub const REFUSE_THREAD_TEST_VAR: &str = "LEAPGNN_TEST_REFUSE_THREAD";

fn builder(name: &str) -> Result<std::thread::Builder, SpawnError> {
    if std::env::var_os(REFUSE_THREAD_TEST_VAR).is_some_and(|v| v == name) {
        return Err(SpawnError::new(name.into(), std::io::Error::from_raw_os_error(libc::EAGAIN)));
    }
    Ok(std::thread::Builder::new().name(name.into()))
}
