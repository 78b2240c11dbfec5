use super::{RestartRecord, StepRecord};
use crate::format::{FormatError, write_atomic};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Appends records to `metrics.jsonl`, one JSON object per line, each line
/// in one write, unbuffered: a record is in the file once written, so a
/// process killed after a checkpoint has not lost records from before it
/// (which a resume keeps, redoing only those after), and lines never tear.
pub struct JsonlSink {
    path: PathBuf,
    out: File,
}

impl JsonlSink {
    /// Opens `path` for appending (creating it).
    pub fn append(path: &Path) -> Result<Self, FormatError> {
        let f = OpenOptions::new().create(true).append(true).open(path).map_err(|e| FormatError::io(path, e))?;
        Ok(JsonlSink { path: path.to_path_buf(), out: f })
    }

    /// Rewrites `path` keeping the step records before position `at` (epoch,
    /// iteration) and the restarts at or before it (atomically), then opens it
    /// for appending: a resumed run drops what it is about to redo.
    pub fn append_before(path: &Path, at: (u64, u64)) -> Result<Self, FormatError> {
        if path.exists() {
            let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
            let mut kept = Vec::new();
            // Lines as bytes: a damaged line (not UTF-8, as much as not JSON)
            // is dropped like a torn one rather than failing the resume.
            for line in BufReader::new(f).split(b'\n') {
                let line = line.map_err(|e| FormatError::io(path, e))?;
                // A torn last line (crash mid-write) is dropped along with the rest it belongs to.
                let keep = match serde_json::from_slice::<StepRecord>(&line) {
                    Ok(r) => (r.epoch, r.iteration) < at,
                    Err(_) => {
                        serde_json::from_slice::<RestartRecord>(&line).is_ok_and(|r| (r.epoch, r.iteration) <= at)
                    }
                };
                if keep {
                    kept.extend_from_slice(&line);
                    kept.push(b'\n');
                }
            }
            write_atomic(path, &kept)?;
        }
        Self::append(path)
    }

    pub fn write(&mut self, r: &StepRecord) -> Result<(), FormatError> {
        self.line(serde_json::to_string(r).expect("a record always serialises"))
    }

    pub fn write_restart(&mut self, r: &RestartRecord) -> Result<(), FormatError> {
        self.line(serde_json::to_string(r).expect("a record always serialises"))
    }

    /// Every line written so far on disk, not only in the page cache: a
    /// checkpoint counted on them survives a crash of the machine too.
    pub fn sync(&self) -> Result<(), FormatError> {
        self.out.sync_data().map_err(|e| FormatError::io(&self.path, e))
    }

    fn line(&mut self, json: String) -> Result<(), FormatError> {
        let mut line = json.into_bytes();
        line.push(b'\n');
        self.out.write_all(&line).map_err(|e| FormatError::io(&self.path, e))
    }
}
