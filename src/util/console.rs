//! Lines for the operator on stdout and stderr that survive a closed reader.
//!
//! `println!` and `eprintln!` panic when the stream is a pipe whose reader has
//! gone (`leapgnn train 2>&1 | head -1`), which would kill a run without its
//! checkpoint. These drop the line instead; the progress lines of a run
//! check their writes themselves and stop the run, as a closed
//! `--json-stream` does.
//!
//! Each line leaves in one `write_all` of the whole formatted text. stderr
//! is unbuffered, so `writeln!` would write every piece of the format on its
//! own (`"error: "`, the message, `"\n"`): a worker stopped by its driver
//! between those writes left a line reading just `error: `.
//!
//! Only a closed reader is forgiven on stdout: a line that cannot be written
//! for another reason (`leapgnn info NAME > file` on a full disk) is noted,
//! and the command fails with it (`stdout_failure`) instead of exiting 0 with
//! its output lost.

/// `eprintln!` that drops the line when stderr is closed.
#[macro_export]
macro_rules! elog {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

/// `println!` that drops the line when stdout's reader has gone (`| head`);
/// any other failure (a full disk behind `>`) is kept for `stdout_failure`.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        let mut line = format!($($arg)*);
        line.push('\n');
        $crate::util::console::out(line.as_bytes());
    }};
}

/// The first failure of an `outln!` line other than a closed reader.
static STDOUT_FAILURE: std::sync::Mutex<Option<std::io::Error>> = std::sync::Mutex::new(None);

/// Writes `bytes` to stdout in one `write_all` (and flushes it). A reader
/// that has gone is not an error, as for any Unix filter; another failure is
/// kept (the first one) for the command to report: output lost on a full
/// disk must not end with exit 0.
pub fn out(bytes: &[u8]) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    }
}

/// Why an `outln!` line could not be written (not counting a closed
/// reader), if one could not: the command then fails (exit 1) naming it.
pub fn stdout_failure() -> Option<std::io::Error> {
    STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner()).take()
}
