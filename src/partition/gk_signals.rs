//! GKlib, under METIS, takes SIGTERM (its `SIGERR`) and SIGABRT for the
//! length of every METIS call: its handler longjmps out of the call, which
//! then returns the bare `METIS_ERROR`, and the handlers from before are put
//! back with `signal()`, which drops their flags. A SIGTERM sent while METIS
//! partitions (Slurm, systemd, `kill`) was so taken by METIS: `train` failed
//! with 'METIS failed ... (METIS returned an error); try --method ldg', exit
//! 1, instead of stopping as a SIGTERM stops it, and `partition` did not end.
//!
//! `Kept` puts the dispositions back exactly as they were; `pass_on_sigterm`
//! hands the taken SIGTERM to this process's own disposition (the run's stop
//! request, or the end of a process that has no handler).

use libc::{SIGABRT, SIGTERM};

/// The dispositions of the signals GKlib takes, as they were before a call.
pub(super) struct Kept(Vec<(libc::c_int, libc::sigaction)>);

impl Kept {
    pub(super) fn now() -> Kept {
        let mut kept = Vec::new();
        for sig in [SIGTERM, SIGABRT] {
            // SAFETY: a zeroed sigaction is a valid value of the plain C struct;
            // sigaction only writes the current disposition into `old`, a
            // local that outlives the call, and reads no pointer of ours (the
            // new action is null).
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0 {
                kept.push((sig, old));
            }
        }
        Kept(kept)
    }

    /// Puts every kept disposition back (flags included, which GKlib's `signal()` drops).
    pub(super) fn restore(&self) {
        for (sig, old) in &self.0 {
            // SAFETY: `old` is a disposition sigaction itself wrote; it is
            // only read for the call, and the old-action pointer is null.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// A SIGTERM METIS took, raised again now that this process's own
/// disposition is back, so that it does what it would have done.
pub(super) fn pass_on_sigterm() {
    tracing::debug!("METIS took a SIGTERM (GKlib catches it during a call); raising it again");
    // SAFETY: raise takes a signal number and no memory.
    unsafe { libc::raise(SIGTERM) };
}
