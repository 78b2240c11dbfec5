use super::StepRecord;
use crate::format::{FormatError, write_atomic};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Appends records to `metrics.jsonl`, one JSON object per line.
pub struct JsonlSink {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlSink {
    /// Opens `path` for appending (creating it).
    pub fn append(path: &Path) -> Result<Self, FormatError> {
        let f = OpenOptions::new().create(true).append(true).open(path).map_err(|e| FormatError::io(path, e))?;
        Ok(JsonlSink { path: path.to_path_buf(), out: BufWriter::new(f) })
    }

    /// Rewrites `path` keeping only the records `keep` accepts (atomically), then
    /// opens it for appending: a resumed run drops what it is about to redo.
    pub fn append_after_filter(path: &Path, keep: impl Fn(&StepRecord) -> bool) -> Result<Self, FormatError> {
        if path.exists() {
            let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
            let mut kept = Vec::new();
            for line in BufReader::new(f).lines() {
                let line = line.map_err(|e| FormatError::io(path, e))?;
                // A torn last line (crash mid-write) is dropped along with the rest it belongs to.
                if let Ok(r) = serde_json::from_str::<StepRecord>(&line)
                    && keep(&r)
                {
                    kept.extend_from_slice(line.as_bytes());
                    kept.push(b'\n');
                }
            }
            write_atomic(path, &kept)?;
        }
        Self::append(path)
    }

    pub fn write(&mut self, r: &StepRecord) -> Result<(), FormatError> {
        let line = serde_json::to_string(r).expect("a record always serialises");
        writeln!(self.out, "{line}").map_err(|e| FormatError::io(&self.path, e))
    }

    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.out.flush().map_err(|e| FormatError::io(&self.path, e))
    }
}
