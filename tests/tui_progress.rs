//! The non-terminal progress outputs.

mod tui_support;

use leapgnn::metrics::StepRecord;
use leapgnn::progress::{JsonStream, ProgressSink};
use std::io::{self, Write};
use tui_support::{epoch0, iterations};

#[test]
fn json_stream_writes_each_record_as_one_parseable_line() {
    let records = iterations(1, 0..3);
    let mut sink = JsonStream::new(Vec::new());
    for r in &records {
        sink.record(r);
    }
    sink.epoch(&epoch0());
    sink.event("checkpoint written");
    sink.finish();
    let out = String::from_utf8(sink.into_inner()).unwrap();
    let back: Vec<StepRecord> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON record per line")).collect();
    assert_eq!(back, records, "epochs and events stay off the record stream");
}

/// A pipe whose reader went away after `room` bytes.
struct ClosedAfter {
    room: usize,
    data: Vec<u8>,
    attempts: usize,
}

impl Write for ClosedAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.attempts += 1;
        if self.data.len() + buf.len() > self.room {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "reader gone"));
        }
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn json_stream_stops_writing_once_its_reader_is_gone() {
    let mut sink = JsonStream::new(ClosedAfter { room: 1000, data: Vec::new(), attempts: 0 });
    for r in iterations(0, 0..50) {
        sink.record(&r);
    }
    sink.finish();
    let w = sink.into_inner();
    // Whole lines only, then one failed write, then nothing more for the other 190-odd records.
    let lines = w.data.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    assert!(lines >= 1 && w.data.ends_with(b"\n"), "{}", String::from_utf8_lossy(&w.data));
    assert_eq!(w.attempts, lines + 1);
}
