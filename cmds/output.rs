//! How results and errors are printed.

use serde::Serialize;

/// The whole error chain on one line: "what failed: why: root cause".
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

/// Prints one JSON object on stdout.
pub fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}
