//! How results and errors are printed.

use serde::Serialize;

/// The whole error chain on one line: "what failed: why: root cause".
/// Ctrl-C and SIGTERM end the command with 130 / 143 once its temporary
/// files are removed (`util::interrupt`): for the commands that train nothing.
pub fn exit_on_interrupt() -> anyhow::Result<()> {
    use anyhow::Context;
    leapgnn::util::interrupt::install().context("cannot install the SIGINT / SIGTERM handler")
}

pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        // Context layers often repeat their source's text; keep each piece once.
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    let line = parts.join(": ").replace('\n', " ");
    // An error without text still says what it is (never an empty `error:` line).
    if line.trim().is_empty() { format!("{e:?}").replace('\n', " ") } else { line }
}

/// A bad flag value as one line, as every other bad input is reported:
/// "error: invalid value 'gin' for '--model <MODEL>' [possible values: ...]".
/// Other clap errors (unknown flags, usage) keep clap's own layout.
pub fn clap_error(e: &clap::Error) -> String {
    use clap::error::ErrorKind::*;
    let text = e.render().to_string();
    if !matches!(e.kind(), InvalidValue | ValueValidation) {
        return text;
    }
    let keep = |l: &&str| !l.trim().is_empty() && !l.starts_with("For more information");
    text.lines().filter(keep).map(str::trim).collect::<Vec<_>>().join(" ") + "\n"
}

/// Prints one JSON object on stdout.
pub fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    write_stdout(&line)
}

/// Writes `bytes` to stdout. A reader that has gone (`| head`) is not an
/// error, as for any Unix filter; any other failure (a full disk behind `>`) is.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}
