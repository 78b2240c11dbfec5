//! SIGINT and SIGTERM in the commands that compute and write files but train
//! nothing (`partition`, `analyze-locality`, `tune-merge`, `cluster clean`).
//! With the signals' own default the process died where it stood: exit by
//! signal, a re-partition's staging directory (as large as the partition)
//! and `.NAME.tmp.PID` files left beside their targets. Here the process
//! ends with 130 or 143 as the default would, but first removes the
//! temporary files and directories its writes hold. `train` and `infer`
//! stop gracefully instead (`progress::signals`).
//!
//! Writers register what they create (`Registered`) and make it permanent
//! under `settle`, which holds the lock the exit holds: a signal comes
//! either before the renames (the temporary is removed, the old output
//! kept) or after them (the new output is whole), never between two.

use signal_hook::consts::{SIGINT, SIGTERM};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The first signal taken (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Set by the first signal instead of exiting, where the command has
/// workers to stop first (`tune-merge --calibrate`) or a step on a host to
/// finish (`cluster clean`).
static STOP: OnceLock<&'static AtomicBool> = OnceLock::new();
/// The thread waiting at a `test_pause`, woken by a stopping signal.
static PAUSED: Mutex<Option<std::thread::Thread>> = Mutex::new(None);

fn temps() -> MutexGuard<'static, Vec<PathBuf>> {
    TEMPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A temporary file or directory that an interrupt removes. Dropping the
/// value only stops tracking it: its owner removes or renames it.
pub struct Registered(PathBuf);

impl Registered {
    pub fn new(path: &Path) -> Registered {
        temps().push(path.to_path_buf());
        Registered(path.to_path_buf())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut t = temps();
        if let Some(i) = t.iter().rposition(|p| *p == self.0) {
            t.swap_remove(i);
        }
    }
}

/// Runs `f` (the renames that put an output in place) where no interrupt
/// can end the process halfway through it.
pub fn settle<T>(f: impl FnOnce() -> T) -> T {
    let _held = temps();
    f()
}

/// Installs the handler (once per process; later calls do nothing).
pub fn install() -> std::io::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.set(()).is_err() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("leapgnn-interrupt".into()).spawn(move || {
        for sig in signals.forever() {
            let first = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok();
            if first && let Some(stop) = STOP.get() {
                stop.store(true, Ordering::SeqCst);
                if let Some(paused) = PAUSED.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    paused.unpark();
                }
                continue;
            }
            exit_cleaned();
        }
    })?;
    Ok(())
}

/// From now on the first signal sets `stop` (the command stops its workers,
/// then fails, and exits with `exit_code`); a second one exits at once.
pub fn stop_first(stop: &'static AtomicBool) {
    let _ = STOP.set(stop);
}

/// 128 + the signal taken, as shells report a death by it; `None` if none came.
pub fn exit_code() -> Option<u8> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        sig => u8::try_from(128 + sig).ok(),
    }
}

fn exit_cleaned() -> ! {
    // Held to the exit: no writer renames past this point.
    let held = temps();
    for p in held.iter() {
        let _ = match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
            Ok(_) => std::fs::remove_file(p),
            Err(_) => Ok(()),
        };
    }
    std::process::exit(exit_code().unwrap_or(130).into());
}

/// The points `LEAPGNN_TEST_PAUSE` names (comma-separated), read once: some
/// are passed at every step record.
fn test_points() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let v = std::env::var("LEAPGNN_TEST_PAUSE").unwrap_or_default();
        v.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect()
    })
}

/// Test hook: with `LEAPGNN_TEST_PAUSE=NAME` (or a comma-separated list
/// holding it) in the environment, the point named NAME only says `test
/// point: NAME` on stderr, so that a test sees the process got there.
pub fn test_point(name: &str) {
    if test_points().iter().any(|n| n == name) {
        crate::elog!("test point: {name}");
    }
}

/// Test hook: with `LEAPGNN_TEST_PAUSE=NAME` (or a comma-separated list
/// holding it) in the environment, the point named NAME says `test hold:
/// NAME` on stderr and waits for a line on stdin (or its end), then goes on,
/// each time the process gets there: so that a test can order two processes
/// at their points, where a signal would end the one it resumes.
pub fn test_hold(name: &str) {
    if test_points().iter().any(|n| n == name) {
        crate::elog!("test hold: {name}");
        let _ = std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut String::new());
    }
}

/// Test hook: with `LEAPGNN_TEST_PAUSE=NAME` (or a comma-separated list
/// holding it) in the environment, the point named NAME says `test pause:
/// NAME` on stderr and waits there, so that a test can signal the process
/// at that very point: for ever, or, in a command that stops on the first
/// signal (`stop_first`), until one came, so that the test sees what the
/// command does with it from that point.
pub fn test_pause(name: &str) {
    if test_points().iter().any(|n| n == name) {
        // Registered before the flag is read: a signal after the read unparks this thread.
        *PAUSED.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        crate::elog!("test pause: {name}");
        while !STOP.get().is_some_and(|s| s.load(Ordering::SeqCst)) {
            std::thread::park();
        }
    }
}
