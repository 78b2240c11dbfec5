//! The non-terminal progress outputs: the JSON stream, and what `train`
//! prints without a terminal.

mod train_support;
mod tui_support;

use leapgnn::metrics::StepRecord;
use leapgnn::progress::{JsonStream, ProgressSink};
use std::io::{self, Write};
use train_support::{Tiny, leapgnn, write_tiny};
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

const TRAIN: &[&str] = &["train", "tiny", "--batch-size", "64", "--fanout", "5,5", "--hidden", "16", "--epochs", "2"];

fn train(data: &std::path::Path, extra: &[&str]) -> (String, String) {
    let args: Vec<&str> = TRAIN.iter().chain(extra).copied().collect();
    let out = leapgnn(data, &args);
    let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
    assert!(out.status.success(), "leapgnn {args:?}: {stderr}");
    (stdout, stderr)
}

#[test]
fn without_a_terminal_train_prints_one_line_per_epoch_on_stderr_and_nothing_on_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    write_tiny(tmp.path(), "tiny", Tiny::default());
    // Not a terminal here, so no dashboard even without --no-tui; with it, the same.
    for (run, extra) in [("a", &[][..]), ("b", &["--no-tui"][..])] {
        let (stdout, stderr) = train(tmp.path(), &[&["--run", run][..], extra].concat());
        assert_eq!(stdout, "");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 3, "{stderr}");
        assert!(lines[0].starts_with("epoch   1/2  loss ") && lines[1].starts_with("epoch   2/2  loss "), "{stderr}");
        assert!(lines[2].starts_with(&format!("run {run}: test accuracy")), "{stderr}");
        // No escape sequences (bars or dashboard) reached the log.
        assert!(!stderr.contains('\x1b'), "{stderr:?}");
    }
}

#[test]
fn json_stream_puts_the_metrics_records_on_stdout_as_they_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    write_tiny(tmp.path(), "tiny", Tiny::default());
    let (stdout, stderr) = train(tmp.path(), &["--run", "s", "--json-stream"]);
    let file = std::fs::read_to_string(tmp.path().join("runs/s/metrics.jsonl")).unwrap();
    // 300 train roots in batches of 64: 5 iterations per epoch, one record each (W = 1, T = 1).
    assert_eq!(stdout.lines().count(), 10, "{stdout}");
    assert_eq!(stdout, file, "the stream and metrics.jsonl disagree");
    for line in stdout.lines() {
        serde_json::from_str::<StepRecord>(line).expect("each line is a record");
    }
    assert!(stderr.lines().all(|l| !l.starts_with("epoch ")), "human progress on stderr too: {stderr}");

    // With --json as well, the summary follows the records as the last line.
    let (stdout, _) = train(tmp.path(), &["--run", "t", "--json-stream", "--json"]);
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["run"], "t");
    assert_eq!(stdout.lines().count(), 11);
}
