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

/// `println!` that drops the line when stdout is closed.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stdout().write_all(line.as_bytes());
    }};
}
