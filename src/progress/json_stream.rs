use super::ProgressSink;
use crate::metrics::{EpochRecord, StepRecord};
use std::io::Write;

/// Every step record as one JSON line, flushed at once so a pipeline sees it
/// live. A closed reader (`| head`) stops the run as the dashboard's `q`
/// does: the iteration finishes, is checkpointed, and the summary goes to stderr.
pub struct JsonStream<W: Write> {
    out: W,
    /// One record's line, reused: a record goes out in one write.
    line: Vec<u8>,
    closed: bool,
}

impl JsonStream<std::io::Stdout> {
    pub fn stdout() -> Self {
        JsonStream::new(std::io::stdout())
    }
}

impl<W: Write> JsonStream<W> {
    pub fn new(out: W) -> Self {
        JsonStream { out, line: Vec::new(), closed: false }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> ProgressSink for JsonStream<W> {
    fn record(&mut self, r: &StepRecord) {
        if self.closed {
            return;
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, r).expect("a record always serialises");
        self.line.push(b'\n');
        self.closed = self.out.write_all(&self.line).and_then(|()| self.out.flush()).is_err();
    }
    fn epoch(&mut self, _: &EpochRecord) {}
    fn event(&mut self, _: &str) {}
    fn stop_requested(&self) -> bool {
        self.closed
    }
    fn finish(&mut self) {
        let _ = self.out.flush();
    }
}
