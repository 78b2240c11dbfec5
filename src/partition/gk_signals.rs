//! GKlib, under METIS, brackets every METIS call with `gk_sigtrap` /
//! `gk_siguntrap`: SIGTERM (its `SIGERR`) and SIGABRT (`SIGMEM`) get, for
//! the length of the call and for the whole process, a handler that
//! longjmps to the call's start, so that METIS can abandon a call from deep
//! inside on its own errors (`gk_errexit` raises one of the two). A SIGTERM
//! from outside (Slurm, systemd, `kill`, a second stop request) then landed
//! on that handler instead of this process's own: on the METIS thread it
//! jumped out of whatever METIS was doing (a `malloc` holding its lock, so
//! that the clean-up after the jump could wait on that lock for ever), and on
//! any other thread, where GKlib's jump buffers are unset, it jumped through
//! garbage: SIGSEGV, nothing removed, no exit code of ours.
//!
//! GKlib is what calls `__sysv_signal` and `raise` in this process (nm:
//! libmetis references both); both are defined here, and the executable's
//! definitions take precedence over libc's. GKlib's handler is kept per
//! thread and never installed, so a signal from outside always reaches the
//! handler the command installed (a stop request: `partition` ends at once,
//! `train` stops once METIS is done). GKlib's own `raise` from inside a call
//! still reaches GKlib's handler, on that thread, as GKlib expects.

use libc::{SIGABRT, SIGTERM, c_int, sighandler_t};
use std::cell::Cell;

thread_local! {
    /// GKlib's handlers for SIGTERM and SIGABRT on this thread (`SIG_DFL`: none).
    static GK_HANDLERS: Cell<[sighandler_t; 2]> = const { Cell::new([libc::SIG_DFL; 2]) };
}

fn slot(sig: c_int) -> Option<usize> {
    match sig {
        SIGTERM => Some(0),
        SIGABRT => Some(1),
        _ => None,
    }
}

/// glibc's `signal` as a strict-ANSI C build of GKlib calls it. For the two
/// signals GKlib traps the handler is only remembered for this thread (the
/// previous one is returned, as `signal` does, and GKlib hands it back when
/// the call ends); any other signal gets `signal`'s System V meaning.
///
/// # Safety
/// As for `signal`: `handler` is `SIG_DFL`, `SIG_IGN` or a function fit to
/// run as a handler of `sig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if let Some(i) = slot(sig) {
        return GK_HANDLERS.with(|h| {
            let mut all = h.get();
            let old = std::mem::replace(&mut all[i], handler);
            h.set(all);
            old
        });
    }
    // SAFETY: a zeroed sigaction is a valid value of the plain C struct; the
    // new action is a local read only for the call, the old one a local that
    // sigaction writes; `handler` is the caller's, as `signal` takes it.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = handler;
        new.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, &new, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

/// `raise`: a signal GKlib trapped on this thread (its `gk_errexit`, inside a
/// METIS call) goes to GKlib's handler, synchronously and on the thread whose
/// jump buffer it uses, as the installed handler would have run; any other
/// is sent to the calling thread, as glibc's `raise` does.
///
/// # Safety
/// As for `raise`: whatever handler `sig` has must be fit to run here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn raise(sig: c_int) -> c_int {
    let gk = slot(sig).map_or(libc::SIG_DFL, |i| GK_HANDLERS.with(|h| h.get()[i]));
    if gk != libc::SIG_DFL && gk != libc::SIG_IGN && gk != libc::SIG_ERR {
        // SAFETY: `gk` is a handler GKlib set for `sig` on this thread with
        // `__sysv_signal` above, a plain `void (*)(int)`; it is called where
        // the installed handler would have run for a raise on this thread.
        // Its longjmp leaves this frame, which holds nothing to drop.
        let handler: extern "C" fn(c_int) = unsafe { std::mem::transmute(gk) };
        handler(sig);
        return 0;
    }
    // SAFETY: pthread_kill takes the calling thread's own id and a signal
    // number, and no memory.
    unsafe { libc::pthread_kill(libc::pthread_self(), sig) }
}
