//! The process's compute threads (rayon's global pool), started up front.

/// rayon's global pool could not start its threads.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start {threads} compute thread(s): {source}{limit}; raise the limit (ulimit -v, prlimit --as) or start \
     fewer threads (RAYON_NUM_THREADS)"
)]
pub struct ThreadPoolError {
    threads: usize,
    /// Where the room for their stacks went, when an address-space limit is set.
    limit: String,
    #[source]
    source: rayon::ThreadPoolBuildError,
}

/// Starts rayon's global pool now. Started lazily, at the first parallel
/// loop, a pool that cannot start its threads (an address-space limit too
/// tight for their stacks) panics in the middle of the job, after a partition
/// may have been begun; here the process says so before it does anything.
pub fn start_pool() -> Result<(), ThreadPoolError> {
    match rayon::ThreadPoolBuilder::new().build_global() {
        Ok(()) => Ok(()),
        // Only an OS refusal has a source; the other error is a pool already
        // started (a library caller's), which is what this asks for anyway.
        Err(e) if std::error::Error::source(&e).is_none() => Ok(()),
        Err(source) => {
            // What the pool tried to start: RAYON_NUM_THREADS, else one per CPU.
            let threads = std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n: &usize| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
            let limit = super::address_space_limit()
                .map(|b| format!(" within this process's address-space limit (RLIMIT_AS) of {} MiB", super::mib(b)))
                .unwrap_or_default();
            Err(ThreadPoolError { threads, limit, source })
        }
    }
}
