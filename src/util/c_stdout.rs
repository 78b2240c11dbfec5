//! What C code prints on the process's stdout, set aside. METIS complains with
//! `printf` (`***Cannot bisect a graph with 0 vertices!`), which would land in
//! the middle of a `--json` document; for the call, fd 1 points at an unnamed
//! temporary file and what was printed is handed back to the caller.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The most of the captured text kept: the first complaints say what went wrong.
const KEEP: u64 = 16 << 10;

/// Runs `f` with fd 1 pointed at a temporary file; returns `f`'s result and
/// what C code printed on stdout meanwhile. Rust's stdout stays locked for the
/// call, so no Rust line of this process goes to the file instead.
pub fn capture<T>(f: impl FnOnce() -> T) -> io::Result<(T, String)> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    lock.flush()?;
    // Without a temporary file (a read-only temp dir) the call still runs, its
    // complaints on stdout as before: better than refusing to partition.
    let (mut file, saved) = match unnamed_file().and_then(|f| Ok((f, stdout.as_fd().try_clone_to_owned()?))) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!("C stdout not set aside: {e}");
            drop(lock);
            return Ok((f(), String::new()));
        }
    };
    let saved: OwnedFd = saved;
    // SAFETY: dup2 takes two descriptors and no memory. `file` is open for the
    // whole call, and fd 1 is given back its own description (the `saved`
    // duplicate) by `Restore` below, also when `f` unwinds.
    if unsafe { libc::dup2(file.as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
        return Err(io::Error::last_os_error());
    }
    struct Restore(OwnedFd);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: fflush(NULL) flushes every C output stream and reads no
            // pointer of ours; stdout's buffer must reach the file now, not at
            // exit, when fd 1 is the real stdout again. Then dup2 as above, with
            // `self.0` open until the end of this function.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::dup2(self.0.as_raw_fd(), libc::STDOUT_FILENO);
            }
        }
    }
    let restore = Restore(saved);
    let out = f();
    drop(restore);
    drop(lock);
    let mut bytes = Vec::new();
    file.rewind()?;
    file.take(KEEP).read_to_end(&mut bytes)?;
    Ok((out, String::from_utf8_lossy(&bytes).into_owned()))
}

/// A file no other process can open: created under the temp directory and
/// unlinked at once (it lives while it is open).
fn unnamed_file() -> io::Result<File> {
    let dir = std::env::temp_dir();
    for i in 0u32..100 {
        let path = dir.join(format!(".leapgnn-stdout-{}-{i}", std::process::id()));
        match File::options().read(true).write(true).create_new(true).open(&path) {
            Ok(f) => {
                std::fs::remove_file(&path)?;
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("no free temporary file name in {}", dir.display())))
}
