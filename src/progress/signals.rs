//! Ctrl-C and SIGTERM as stop requests: the first asks the run to stop as the
//! dashboard's `q` does (finish the iteration, checkpoint, print the summary,
//! exit 0); a second forces an immediate stop (exit 130, nothing more saved).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static SIGNALS: AtomicU32 = AtomicU32::new(0);
static FORCED: AtomicBool = AtomicBool::new(false);

/// Exit status of a forced stop (a second Ctrl-C), as shells report SIGINT.
pub const FORCED_EXIT: u8 = 130;

/// What the second signal does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnForce {
    /// Exit the process at once (nothing else to stop: one worker in this process).
    Exit,
    /// Set the flag `forced()` reads; the caller stops its workers, then exits 130.
    Flag,
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP (once per process).
/// `quiet`: print nothing (a dashboard owns the terminal).
pub fn install(on_force: OnForce, quiet: bool) -> Result<(), ctrlc::Error> {
    ctrlc::set_handler(move || {
        // ctrlc runs this on its own thread, not in signal context: printing and exiting are safe.
        if SIGNALS.fetch_add(1, Ordering::SeqCst) == 0 {
            if !quiet {
                crate::elog!(
                    "stopping after this iteration (checkpoint, then summary); press Ctrl-C again to stop at once"
                );
            }
            return;
        }
        FORCED.store(true, Ordering::SeqCst);
        if on_force == OnForce::Exit {
            crate::elog!("forced stop: the current iteration is lost (the last checkpoint is kept)");
            std::process::exit(FORCED_EXIT.into());
        }
    })
}

/// The first signal arrived: stop after this iteration.
pub fn stop_requested() -> bool {
    SIGNALS.load(Ordering::SeqCst) > 0
}

/// The flag a second signal sets (give it to the driver as its `interrupted`).
pub fn forced_flag() -> &'static AtomicBool {
    &FORCED
}

/// A second signal arrived.
pub fn forced() -> bool {
    FORCED.load(Ordering::SeqCst)
}
