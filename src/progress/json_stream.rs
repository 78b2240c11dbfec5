use super::ProgressSink;
use crate::metrics::{EpochRecord, RestartRecord, StepRecord};
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

impl<W: Write> JsonStream<W> {
    /// One record as one line, in one write.
    fn line(&mut self, r: &impl serde::Serialize) {
        if self.closed {
            return;
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, r).expect("a record always serialises");
        self.line.push(b'\n');
        self.closed = self.out.write_all(&self.line).and_then(|()| self.out.flush()).is_err();
    }
}

impl<W: Write> ProgressSink for JsonStream<W> {
    fn record(&mut self, r: &StepRecord) {
        self.line(r);
    }
    /// The restart record, as `metrics.jsonl` has it: the stream cannot take
    /// back the failed attempt's records since its position, but a reader
    /// can drop them on seeing it.
    fn restart(&mut self, r: &RestartRecord) {
        self.line(r);
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
