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
        let line = self.buf.trim_end_matches(['\n', '\r']);
        let line = if self.at.line == 1 { strip_bom(line) } else { line };
        Ok(Some((line, &self.at)))
    }

    pub fn loc(&self) -> &Loc {
        &self.at
    }
}

/// The UTF-8 byte-order mark that Windows tools (Excel's "CSV UTF-8",
/// PowerShell's `Out-File`) put before a text file's first line.
pub const BOM: &str = "\u{feff}";

/// `first_line` without a leading byte-order mark: invisible in an editor and
/// in an error message, it made the first id `\u{feff}0`, "not a
/// non-negative integer".
pub fn strip_bom(first_line: &str) -> &str {
    first_line.strip_prefix(BOM).unwrap_or(first_line)
}

/// `bytes` (a whole text file) without a leading byte-order mark.
pub fn strip_bom_bytes(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(BOM.as_bytes()).unwrap_or(bytes)
}

/// Without a stated node count a graph has `largest id + 1` nodes, and every
/// node costs memory: an id far past what the edges could name (a stray
/// `0 4294967294` asked for 34 GB) is refused, not allocated. Ids may have
/// gaps, up to 16 nodes per endpoint (and a million nodes in any case).
pub fn check_implied_nodes(nodes: usize, edges: usize, file: &str, fix: &str) -> Result<(), DatasetError> {
    let named = 2 * edges;
    if nodes <= 16 * named + (1 << 20) {
        return Ok(());
    }
    Err(DatasetError::invalid(
        file,
        format!(
            "node id {} is far past what its {edges} edges name ({named} endpoints): ids must run 0..n-1 \
             (renumber them), {fix}",
            nodes - 1
        ),
    ))
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

/// Parses an edge `from to`: two node ids (more columns, such as weights or
/// timestamps, are allowed when `extra_ok`), each below `limit` when given.
pub fn parse_edge(line: &str, limit: Option<usize>, extra_ok: bool) -> Result<(u32, u32), String> {
    let mut it = fields(line);
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        return Err("expected an edge `from to`".into());
    };
    if !extra_ok && it.next().is_some() {
        return Err("expected exactly two node ids".into());
    }
    let (u, v) = (parse_id(a, "node id")?, parse_id(b, "node id")?);
    if let Some(n) = limit
        && u.max(v) as usize >= n
    {
        return Err(format!("node id {} is beyond the node count {n}", u.max(v)));
    }
    Ok((u, v))
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

/// Bytes of whole lines handed to `for_each_block` at a time.
const BLOCK: usize = 8 << 20;

/// Calls `f(first_line_number, lines)` on consecutive blocks of whole lines
/// (line terminators removed), so big numeric files can be parsed in parallel
/// per block while reading stays sequential.
pub fn for_each_block<R: Read>(
    mut reader: R,
    file: &str,
    mut f: impl FnMut(u64, &[&str]) -> Result<(), DatasetError>,
) -> Result<(), DatasetError> {
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK + (1 << 16));
    let mut first_line = 1u64;
    let mut eof = false;
    while !eof {
        while buf.len() < BLOCK {
            let old = buf.len();
            buf.resize(old + (1 << 20), 0);
            let n = loop {
                match reader.read(&mut buf[old..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(read_error(file, first_line, e)),
                }
            };
            buf.truncate(old + n);
            if n == 0 {
                eof = true;
                break;
            }
        }
        let end = if eof { buf.len() } else { buf.iter().rposition(|&b| b == b'\n').map_or(buf.len(), |i| i + 1) };
        let text = std::str::from_utf8(&buf[..end]).map_err(|e| {
            let line = first_line + buf[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() as u64;
            DatasetError::parse(file, line, "not UTF-8 text; the file is corrupt")
        })?;
        let text = if first_line == 1 { strip_bom(text) } else { text };
        let body = text.strip_suffix('\n').unwrap_or(text);
        if !body.is_empty() {
            let lines: Vec<&str> = body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
            f(first_line, &lines)?;
            first_line += lines.len() as u64;
        }
        buf.drain(..end);
    }
    Ok(())
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
    fn blocks_cover_every_line_once_in_order() {
        let text: String = (0..300_000).map(|i| format!("{i},{}\r\n", i * 2)).collect();
        let mut seen = Vec::new();
        for_each_block(text.as_bytes(), "b.csv", |first, lines| {
            assert_eq!(first as usize, seen.len() + 1);
            seen.extend(lines.iter().map(|l| l.to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 300_000);
        assert_eq!(seen[123_456], "123456,246912");
        let bad = [b"1,2\n3,4\n".as_slice(), &[0xff, b'\n']].concat();
        let e = for_each_block(&bad[..], "b.csv", |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.starts_with("b.csv:3:"), "{e}");
    }

    #[test]
    fn id_lists_are_range_checked() {
        let mut l = Lines::new("t.txt", &b"0\n5\n"[..]);
        let e = read_id_list(&mut l, 3).unwrap_err().to_string();
        assert!(e.starts_with("t.txt:2:") && e.contains("beyond the node count 3"), "{e}");
    }
}
