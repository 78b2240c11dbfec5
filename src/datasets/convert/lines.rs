//! Line-by-line reading of text sources that reports errors as `file:line`.

use crate::datasets::DatasetError;
use crate::datasets::source::read_error;
use std::io::{BufRead, BufReader, Read};

pub struct Lines<R> {
    reader: BufReader<R>,
    buf: String,
    at: Loc,
}

/// Where a reader is: the file and the number of the line last returned (1-based).
#[derive(Debug, Clone)]
pub struct Loc {
    pub file: String,
    pub line: u64,
}

impl Loc {
    /// An error at this line.
    pub fn err(&self, msg: impl Into<String>) -> DatasetError {
        DatasetError::parse(&self.file, self.line, msg)
    }
    /// An error about the file as a whole.
    pub fn invalid(&self, msg: impl Into<String>) -> DatasetError {
        DatasetError::invalid(&self.file, msg)
    }
}

impl<R: Read> Lines<R> {
    pub fn new(file: impl Into<String>, reader: R) -> Self {
        let at = Loc { file: file.into(), line: 0 };
        Lines { reader: BufReader::with_capacity(1 << 20, reader), buf: String::new(), at }
    }

    /// The next line without its `\n` / `\r\n` and where it is, or `None` at
    /// the end. The buffer is reused, so reading allocates nothing per line.
    pub fn next_line(&mut self) -> Result<Option<(&str, &Loc)>, DatasetError> {
        self.buf.clear();
        self.at.line += 1;
        let n = self.reader.read_line(&mut self.buf).map_err(|e| read_error(&self.at.file, self.at.line, e))?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((self.buf.trim_end_matches(['\n', '\r']), &self.at)))
    }

    pub fn loc(&self) -> &Loc {
        &self.at
    }
}

/// Splits a record on commas, tabs or spaces (SNAP, CSV and Planetoid text all
/// fit), skipping empty fields.
pub fn fields(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| c == ',' || c.is_ascii_whitespace()).filter(|s| !s.is_empty())
}

/// Parses a node or feature id; `what` names it in the error.
pub fn parse_id(tok: &str, what: &str) -> Result<u32, String> {
    match tok.parse::<u32>() {
        Ok(v) => Ok(v),
        Err(_) if tok.starts_with('-') && tok[1..].bytes().all(|b| b.is_ascii_digit()) && tok.len() > 1 => {
            Err(format!("negative {what} {tok}"))
        }
        Err(_) if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("{what} {tok} is too large (ids must fit in 32 bits)"))
        }
        Err(_) => Err(format!("{what} `{tok}` is not a non-negative integer")),
    }
}

/// Parses a class label; `-1` means unlabelled.
pub fn parse_label(tok: &str) -> Result<i32, String> {
    match tok.parse::<i32>() {
        Ok(v) if v >= -1 => Ok(v),
        _ => Err(format!("label `{tok}` is not an integer >= -1")),
    }
}

/// Reads a file of one node id per line (blank lines and `#` comments skipped),
/// each checked against `num_nodes`.
pub fn read_id_list<R: Read>(lines: &mut Lines<R>, num_nodes: usize) -> Result<Vec<u32>, DatasetError> {
    let mut ids = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut it = fields(l);
        let tok = it.next().unwrap_or_default();
        if it.next().is_some() {
            return Err(at.err("expected one node id per line"));
        }
        let v = parse_id(tok, "node id").map_err(|m| at.err(m))?;
        if v as usize >= num_nodes {
            return Err(at.err(format!("node id {v} is beyond the node count {num_nodes}")));
        }
        ids.push(v);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_line_numbers_and_handles_crlf() {
        let mut l = Lines::new("x.txt", &b"1 2\r\n\n# c\n-4\n"[..]);
        let mut next = || l.next_line().unwrap().map(|(s, _)| s.to_owned());
        assert_eq!(next().as_deref(), Some("1 2"));
        assert_eq!(next().as_deref(), Some(""));
        assert_eq!(next().as_deref(), Some("# c"));
        assert_eq!(next().as_deref(), Some("-4"));
        assert_eq!(l.loc().err("bad").to_string(), "x.txt:4: bad");
        assert!(l.next_line().unwrap().is_none());
    }

    #[test]
    fn id_errors_say_what_is_wrong() {
        assert_eq!(parse_id("17", "node id"), Ok(17));
        assert!(parse_id("-3", "node id").unwrap_err().contains("negative"));
        assert!(parse_id("99999999999", "node id").unwrap_err().contains("too large"));
        assert!(parse_id("1.5", "node id").unwrap_err().contains("not a non-negative integer"));
        assert_eq!(parse_label("-1"), Ok(-1));
        assert!(parse_label("-2").is_err());
    }

    #[test]
    fn id_lists_are_range_checked() {
        let mut l = Lines::new("t.txt", &b"0\n5\n"[..]);
        let e = read_id_list(&mut l, 3).unwrap_err().to_string();
        assert!(e.starts_with("t.txt:2:") && e.contains("beyond the node count 3"), "{e}");
    }
}
