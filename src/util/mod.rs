//! Small shared helpers: seeded randomness, memory figures.

pub mod c_stdout;
pub mod console;
pub mod core_dumps;
pub mod interrupt;
pub mod keyed;
pub mod lock_file;
pub mod rng;
pub mod threads;
pub mod value_names;

/// Peak resident set size of this process (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:")
}

/// Resident set size of this process now (Linux `VmRSS`), if known.
pub fn rss_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmRSS:")
}

/// MemAvailable from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    // Test hook: a worker started with it stands for a host with that much
    // memory free, which no test can make of this machine's.
    if let Some(b) = std::env::var(MEM_AVAILABLE_TEST_VAR).ok().and_then(|v| v.parse().ok()) {
        return Some(b);
    }
    proc_kib("/proc/meminfo", "MemAvailable:")
}

/// The variable `mem_available` takes the place of MemAvailable from (bytes; tests).
pub const MEM_AVAILABLE_TEST_VAR: &str = "LEAPGNN_TEST_MEM_AVAILABLE";

/// Where `usable_memory`'s figures come from, as error messages name them.
pub const MEM_AVAILABLE_SOURCE: &str = "MemAvailable in /proc/meminfo";
pub const RLIMIT_AS_SOURCE: &str = "this process's address-space limit, RLIMIT_AS";

/// A soft resource limit of this process (`getrlimit`); None when unlimited.
/// A macro, not a function, because the type of `$resource` differs by C
/// library (glibc's `__rlimit_resource_t`, `c_int` on musl and macOS): here
/// it is whatever this target's `libc` declares, with no `cfg` to keep in step.
macro_rules! soft_limit {
    ($resource:expr) => {{
        let resource = $resource;
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit only writes the `rlimit` behind the pointer, a live local.
        (unsafe { libc::getrlimit(resource, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY)
            .then_some(limit.rlim_cur)
    }};
}

/// This process's address-space limit (RLIMIT_AS soft limit, `ulimit -v` /
/// `prlimit --as`), in bytes; None when unlimited. Child processes inherit it.
pub fn address_space_limit() -> Option<u64> {
    soft_limit!(libc::RLIMIT_AS)
}

/// This user's limit on processes and threads together (RLIMIT_NPROC soft
/// limit, `ulimit -u`); None when unlimited.
pub fn process_limit() -> Option<u64> {
    soft_limit!(libc::RLIMIT_NPROC)
}

/// The kernel's limit on threads in all (`/proc/sys/kernel/threads-max`).
pub fn threads_max() -> Option<u64> {
    number_in(std::path::Path::new("/proc/sys/kernel/threads-max"))
}

/// A number alone in a file (a /proc or cgroup figure); None for "max" or
/// an unreadable file.
pub(crate) fn number_in(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The memory this process may allocate, in bytes, and where the figure comes
/// from: the smaller of MemAvailable in /proc/meminfo and the address-space
/// limit (RLIMIT_AS, `ulimit -v` / `prlimit --as`) when one is set. None when
/// neither is known.
pub fn usable_memory() -> Option<(u64, &'static str)> {
    let avail = mem_available().map(|b| (b, MEM_AVAILABLE_SOURCE));
    let capped = address_space_limit().map(|b| (b, RLIMIT_AS_SOURCE));
    match (avail, capped) {
        (Some(a), Some(c)) => Some(if c.0 < a.0 { c } else { a }),
        (a, c) => a.or(c),
    }
}

/// This machine's host name, as error messages name a worker's host
/// (`/proc/sys/kernel/hostname`; "this host" where it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".into())
}

/// `bytes` in whole MiB, rounded up: how a memory refusal quotes a figure
/// (never a need of 0.4 MiB quoted as 0).
pub fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

/// A `KEY:   N kB` line of a /proc file, in bytes.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}
