//! Processes that hold a job's token write no core file: a crash would
//! otherwise leave the token on disk wherever `core_pattern` points (a pipe
//! handler such as systemd-coredump or apport honours the limit too).

use std::io;

/// Lowers this process's soft core-file limit to 0 (the hard limit stays, so
/// an operator can raise it again for a debugging run with `prlimit`).
/// Children started afterwards inherit it.
pub fn disable() -> io::Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `rlimit` through the pointer, which points at
    // a live, properly aligned local of that type for the whole call.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    limit.rlim_cur = 0;
    // SAFETY: setrlimit only reads the `rlimit` behind the pointer, a live local.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `disable`, or a warning saying what it means (never a reason to fail a run).
pub fn disable_or_warn(who: &str) {
    if let Err(e) = disable() {
        tracing::warn!("{who}: cannot turn core files off ({e}); a crash could write the job token to disk");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_is_zero_and_the_hard_limit_kept() {
        let mut before = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as in `disable`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut before) }, 0);
        super::disable().unwrap();
        let mut after = libc::rlimit { rlim_cur: 1, rlim_max: 0 };
        // SAFETY: as in `disable`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut after) }, 0);
        assert_eq!((after.rlim_cur, after.rlim_max), (0, before.rlim_max));
    }
}
