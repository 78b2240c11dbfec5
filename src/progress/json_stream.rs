use super::ProgressSink;
use super::signals;
use crate::metrics::{EpochRecord, RestartRecord, StepRecord};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lines waiting for the reader: a reader slower than the run holds it back
/// once this many are queued, instead of the queue growing without bound.
const QUEUE: usize = 1024;
/// How often a run held back by a full queue looks for a stop request.
const POLL: Duration = Duration::from_millis(100);
/// How long the end of a stopped run waits for a reader that takes nothing
/// (a pipe into `less` left on its first page): then the lines it did not
/// take are dropped, as the dashboard gives up its last frame.
const LAST_LINES: Duration = Duration::from_secs(2);

/// Every step record as one JSON line, flushed at once so a pipeline sees it
/// live. A closed reader (`| head`) stops the run as the dashboard's `q`
/// does: the iteration finishes, is checkpointed, and the summary goes to stderr.
///
/// The lines are written by a thread of their own through a bounded queue:
/// a reader that stops reading holds the run back (it waits for room), but a
/// stop request (Ctrl-C, SIGTERM) still stops it, the lines that find no room
/// after the request being dropped; written on the run's own thread, a line
/// blocked in a full pipe kept even a second Ctrl-C from stopping the run.
pub struct JsonStream<W: Write + Send + 'static> {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<W>>,
    /// One record's line, reused: a record goes out in one write.
    line: Vec<u8>,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    /// The writer is writing a line it took off the queue.
    busy: bool,
    /// The reader has gone (a write failed): nothing more is written.
    closed: bool,
    /// The write that closed the stream failed for another reason than a
    /// reader that has gone (a full disk behind `>`): the records are lost,
    /// and the run must not end as if it had merely been stopped.
    failure: Option<std::io::Error>,
    /// No more lines will come: the writer ends once the queue is empty.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a line is queued or the stream ends.
    ready: Condvar,
    /// Signalled when the writer took a line or finished one.
    room: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl JsonStream<std::io::Stdout> {
    pub fn stdout() -> Self {
        JsonStream::new(std::io::stdout())
    }
}

impl<W: Write + Send + 'static> JsonStream<W> {
    pub fn new(out: W) -> Self {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("leapgnn-json-stream".into())
            .spawn(move || write_lines(&s, out))
            .expect("the JSON stream's writer thread starts");
        JsonStream { shared, writer: Some(writer), line: Vec::new() }
    }

    /// The writer, once every line is written (after `finish`).
    pub fn into_inner(mut self) -> W {
        self.end();
        self.writer.take().expect("the writer is joined once").join().expect("the JSON stream's writer ended")
    }

    /// One record as one line, queued whole. A full queue holds the run back
    /// until the reader makes room, unless a stop was asked for.
    fn line(&mut self, r: &impl serde::Serialize) {
        self.line.clear();
        serde_json::to_writer(&mut self.line, r).expect("a record always serialises");
        self.line.push(b'\n');
        let mut q = self.shared.lock();
        while !q.closed && q.lines.len() >= QUEUE {
            if signals::stop_requested() || signals::forced() {
                return;
            }
            q = self.shared.room.wait_timeout(q, POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
        if q.closed {
            return;
        }
        q.lines.push_back(self.line.clone());
        self.shared.ready.notify_one();
    }

    /// No more lines: waits until the writer has written the queue (or the
    /// reader has gone). After a stop request a reader that takes nothing for
    /// `LAST_LINES` is given up, its lines dropped.
    fn end(&mut self) {
        let mut q = self.shared.lock();
        q.ended = true;
        self.shared.ready.notify_one();
        let mut waited_since = None;
        let mut pending = q.lines.len();
        while !q.closed && (q.busy || !q.lines.is_empty()) {
            if signals::stop_requested() || signals::forced() {
                // A line taken off the queue is progress: the timer starts again.
                let since = waited_since.get_or_insert_with(Instant::now);
                if q.lines.len() < pending {
                    pending = q.lines.len();
                    *since = Instant::now();
                }
                if since.elapsed() > LAST_LINES {
                    q.lines.clear();
                    q.closed = true;
                    return;
                }
            }
            q = self.shared.room.wait_timeout(q, POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// The writer thread: each queued line in one write, flushed, until the
/// stream ends or a write fails. A reader that has gone (EPIPE) is a quiet
/// stop, as for any Unix filter; any other failure (ENOSPC, EIO) is kept for
/// `output_failure`.
fn write_lines<W: Write>(shared: &Shared, mut out: W) -> W {
    let mut q = shared.lock();
    loop {
        let Some(line) = q.lines.pop_front() else {
            if q.ended || q.closed {
                return out;
            }
            q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        q.busy = true;
        drop(q);
        shared.room.notify_all();
        let written = out.write_all(&line).and_then(|()| out.flush());
        q = shared.lock();
        q.busy = false;
        if let Err(e) = written {
            q.closed = true;
            q.lines.clear();
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                q.failure = Some(e);
            }
        }
        shared.room.notify_all();
    }
}

impl<W: Write + Send + 'static> ProgressSink for JsonStream<W> {
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
        self.shared.lock().closed
    }
    fn output_failure(&mut self) -> Option<std::io::Error> {
        self.shared.lock().failure.take()
    }
    fn finish(&mut self) {
        self.end();
    }
}

impl<W: Write + Send + 'static> Drop for JsonStream<W> {
    /// Lets the writer thread end once it has written what is queued.
    fn drop(&mut self) {
        self.shared.lock().ended = true;
        self.shared.ready.notify_one();
    }
}
