//! Ctrl-C and SIGTERM as stop requests: the first asks the run to stop as the
//! dashboard's `q` does (finish the iteration, checkpoint, print the summary,
//! exit 0); a second forces an immediate stop (exit 130, nothing more saved).
//! SIGHUP (the terminal closed, or ssh dropped) only ever asks for the
//! graceful stop: a hangup comes twice (the kernel's and the shell's), and
//! nobody is left at the terminal to have meant a forced stop.
//! SIGUSR1 is the time-limit warning that `slurm-script --stop-before` asks
//! Slurm for (`#SBATCH --signal=B:USR1@SECONDS`): the same graceful stop,
//! never a forced one (nobody pressed anything; the SIGTERM Slurm sends at
//! the limit itself is taken as a first stop request, not a second), and
//! remembered so that the run can say it stopped for the time limit and how
//! to go on.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static SIGNALS: AtomicU32 = AtomicU32::new(0);
static FORCED: AtomicBool = AtomicBool::new(false);
static TIME_LIMIT: AtomicBool = AtomicBool::new(false);
static MODE: OnceLock<OnForce> = OnceLock::new();
/// A dashboard holds the terminal (raw mode, alternate screen): a forced
/// exit must give it back first.
static TERMINAL_TAKEN: AtomicBool = AtomicBool::new(false);
/// A distributed run is waiting out a restart's pause (`--restarts`): no
/// iteration is running, and a stop request ends the run before the relaunch.
static RESTART_WAIT: AtomicBool = AtomicBool::new(false);

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

/// Installs the handler for SIGINT, SIGTERM, SIGHUP and SIGUSR1 (once per process).
/// `quiet`: print nothing (a dashboard owns the terminal).
pub fn install(on_force: OnForce, quiet: bool) -> std::io::Result<()> {
    if MODE.set(on_force).is_err() {
        return Err(std::io::Error::other("the stop-signal handler is already installed"));
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])?;
    // Signals are read on this thread, not in signal context: printing and exiting are safe.
    std::thread::Builder::new().name("leapgnn-signals".into()).spawn(move || {
        for sig in signals.forever() {
            // Not counted with the others: Slurm's own SIGTERM at the limit, which
            // may come while this stop still runs, must not force it.
            if sig == SIGUSR1 {
                let first = !TIME_LIMIT.swap(true, Ordering::SeqCst) && SIGNALS.load(Ordering::SeqCst) == 0;
                if !quiet && first {
                    say(if RESTART_WAIT.load(Ordering::SeqCst) {
                        "SIGUSR1 (the time-limit warning of `slurm-script --stop-before`): stopping instead of \
                         restarting (the workers are not started again; the run ends at its last checkpoint)"
                    } else {
                        "SIGUSR1 (the time-limit warning of `slurm-script --stop-before`): stopping after this \
                         iteration (checkpoint, then summary)"
                    });
                }
                continue;
            }
            if SIGNALS.fetch_add(1, Ordering::SeqCst) == 0 || sig == SIGHUP {
                if !quiet && sig != SIGHUP {
                    say(if RESTART_WAIT.load(Ordering::SeqCst) {
                        "stopping instead of restarting (the workers are not started again; the run ends at its \
                         last checkpoint); press Ctrl-C again to stop at once"
                    } else {
                        "stopping after this iteration, or at the end of this epoch's evaluation if the workers are \
                         evaluating (checkpoint, then summary); press Ctrl-C again to stop at once"
                    });
                }
                continue;
            }
            force();
        }
    })?;
    Ok(())
}

/// A second stop request (a signal, or Ctrl-C pressed again in the
/// dashboard): stop at once. With one worker in this process that is an
/// exit here, the terminal given back first.
pub fn force() {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
    if FORCED.swap(true, Ordering::SeqCst) {
        return;
    }
    if MODE.get() == Some(&OnForce::Exit) {
        exit_forced();
    }
    // The caller stops its workers and exits; unless it cannot, stuck where
    // nothing reads (a stderr or stdout pipe whose reader stopped): then this
    // exits after a grace, and the workers stop as they do when their
    // driver is gone.
    let backstop = crate::util::threads::spawn("leapgnn-force", || {
        std::thread::sleep(FORCE_GRACE);
        exit_forced();
    });
    if let Err(e) = backstop {
        say(backstop_lost(&e));
    }
}

/// What a forced stop goes without when its backstop thread cannot start
/// (the OS refused it: `ulimit -u`, no address space for its stack).
fn backstop_lost(e: &crate::util::threads::SpawnError) -> String {
    format!(
        "{e}: this is the thread that ends the run {} s after a second Ctrl-C if its workers have not stopped; \
         the run stops once its workers do, and if it hangs, end it with `kill -KILL {}`",
        FORCE_GRACE.as_secs(),
        std::process::id()
    )
}

/// How long a forced stop waits for the run to stop its workers itself.
const FORCE_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

fn exit_forced() -> ! {
    if TERMINAL_TAKEN.load(Ordering::SeqCst) {
        release_terminal();
    }
    say_within(
        "forced stop: the current iteration is lost (the last checkpoint is kept)",
        std::time::Duration::from_secs(1),
    );
    std::process::exit(FORCED_EXIT.into());
}

/// Prints `msg` on stderr from a thread of its own, so that a stderr nobody
/// reads (a full pipe) never keeps the signal thread from the next signal.
/// While a dashboard holds the terminal the line is kept for when it gives
/// the terminal back: its next frame would draw over it.
fn say(msg: impl Into<String>) {
    let msg = msg.into();
    if terminal_held() {
        UNSAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(msg);
        return;
    }
    let line = msg.clone();
    if crate::util::threads::spawn("leapgnn-say", move || crate::elog!("{line}")).is_err() {
        // Nothing is lost if this thread can write the line itself.
        say_here(&msg);
    }
}

/// Lines `say` kept while a dashboard held the terminal.
static UNSAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `say` without a thread of its own, for when the OS refuses one: the line
/// is written only if stderr can take it now, so this thread (the signal
/// thread, the dashboard's) is never kept waiting on a reader that stopped;
/// a stderr that cannot take it is one nobody reads. Every caller runs on an
/// ordinary thread (signal_hook's iterator hands signals over from its
/// handler), so writing and allocating here are safe.
fn say_here(line: &str) {
    if ready_for_a_line(std::os::fd::AsFd::as_fd(&std::io::stderr())) {
        crate::elog!("{line}");
    }
}

/// Whether a line written to `fd` now is taken without waiting: a pipe
/// with room for at least one more page (more than a line), a terminal
/// that is not stopped, a file.
fn ready_for_a_line(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: poll reads and writes only the one pollfd behind the pointer
    // (nfds 1), a live local, on a descriptor the borrow keeps open; a zero
    // timeout returns at once.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLOUT != 0
}

/// `say`, waiting at most `within` for the line to be written.
fn say_within(msg: &'static str, within: std::time::Duration) {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = crate::util::threads::spawn("leapgnn-say", move || {
        crate::elog!("{msg}");
        let _ = tx.send(());
    });
    match spawned {
        Ok(_) => {
            let _ = rx.recv_timeout(within);
        }
        Err(_) => say_here(msg),
    }
}

/// Held while a run waits out a restart's pause, so that a stop request
/// there is answered for what it does (no relaunch), not as a stop "after
/// this iteration" when none is running.
pub struct RestartWait(());

/// The restart's pause begins; it ends when the value is dropped.
pub fn restart_wait() -> RestartWait {
    RESTART_WAIT.store(true, Ordering::SeqCst);
    RestartWait(())
}

impl Drop for RestartWait {
    fn drop(&mut self) {
        RESTART_WAIT.store(false, Ordering::SeqCst);
    }
}

/// A dashboard holds the terminal now (raw mode, alternate screen).
pub(crate) fn terminal_taken() {
    TERMINAL_TAKEN.store(true, Ordering::SeqCst);
}

/// Whether a dashboard holds the terminal now: nothing else may draw on it.
pub(crate) fn terminal_held() -> bool {
    TERMINAL_TAKEN.load(Ordering::SeqCst)
}

/// Gives the terminal back: raw mode off, the main screen and the cursor
/// back (the one place that does it, for the dashboard's end and a forced exit).
pub(crate) fn release_terminal() {
    ratatui::restore();
    let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::cursor::Show);
    TERMINAL_TAKEN.store(false, Ordering::SeqCst);
    let unsaid = std::mem::take(&mut *UNSAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for line in unsaid {
        say_here(&line);
    }
}

/// A Slurm worker's SIGUSR1: an `#SBATCH --signal=USR1@S` without `B:`
/// sends the time-limit warning to every step rather than the batch shell,
/// and its default action would end the worker (and with it the run). Only
/// the driver acts on the warning; the worker says where it should go.
pub fn ignore_time_limit_warning() -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1])?;
    std::thread::Builder::new().name("leapgnn-usr1".into()).spawn(move || {
        for _ in signals.forever() {
            crate::elog!(
                "SIGUSR1 ignored: only the driver acts on the time-limit warning; send it to the batch shell \
                 (`#SBATCH --signal=B:USR1@SECONDS`, as `slurm-script --stop-before` writes)"
            );
        }
    })?;
    Ok(())
}

/// The first signal arrived: stop after this iteration.
pub fn stop_requested() -> bool {
    SIGNALS.load(Ordering::SeqCst) > 0 || TIME_LIMIT.load(Ordering::SeqCst)
}

/// SIGUSR1 came: the stop is for the job's time limit.
pub fn time_limit() -> bool {
    TIME_LIMIT.load(Ordering::SeqCst)
}

/// The flag a second signal sets (give it to the driver as its `interrupted`).
pub fn forced_flag() -> &'static AtomicBool {
    &FORCED
}

/// A second signal arrived.
pub fn forced() -> bool {
    FORCED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::{AsFd, AsRawFd};

    /// A full pipe (a stderr whose reader stopped) is not ready, so the
    /// signal thread writing a line itself, the say thread refused, moves
    /// on instead of waiting for good; with room again, it is ready.
    #[test]
    fn a_pipe_with_no_room_is_not_ready_for_a_line() {
        let (mut r, mut w) = std::io::pipe().unwrap();
        assert!(ready_for_a_line(w.as_fd()));
        // SAFETY: F_GETPIPE_SZ only reads the pipe's capacity.
        let size = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert!(size > 0, "{}", std::io::Error::last_os_error());
        // Exactly its capacity: taken without waiting, and nothing more fits.
        w.write_all(&vec![b'x'; size as usize]).unwrap();
        assert!(!ready_for_a_line(w.as_fd()));
        std::io::Read::read_exact(&mut r, &mut vec![0; size as usize]).unwrap();
        assert!(ready_for_a_line(w.as_fd()));
    }

    /// The line a refused backstop thread gets says which thread, why, what
    /// the run now goes without, and what to do if it hangs.
    #[test]
    fn a_refused_backstop_says_what_is_lost_and_what_to_do() {
        let refused = std::io::Error::from_raw_os_error(libc::EAGAIN);
        let e = crate::util::threads::SpawnError::new("leapgnn-force".into(), refused);
        let line = backstop_lost(&e);
        for needle in [
            "cannot start thread leapgnn-force: Resource temporarily unavailable",
            "ulimit -u",
            "ends the run 15 s after a second Ctrl-C",
            &format!("kill -KILL {}", std::process::id()),
        ] {
            assert!(line.contains(needle), "no `{needle}` in {line}");
        }
        assert!(!line.contains('\n'), "{line}");
    }
}
