//! Small shared helpers: seeded randomness, memory figures.

pub mod c_stdout;
pub mod console;
pub mod core_dumps;
pub mod lock_file;
pub mod rng;
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
    proc_kib("/proc/meminfo", "MemAvailable:")
}

/// A `KEY:   N kB` line of a /proc file, in bytes.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}
