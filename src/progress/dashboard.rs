use super::{Bars, ProgressSink};
use crate::metrics::{EpochRecord, RunInfo, StepRecord};
use crate::tui::app::{Crossterm, Msg, run_terminal};
use crate::tui::fmt::duration;
use std::io;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Redraw (and key poll) period: 10 frames per second at most.
const TICK: Duration = Duration::from_millis(100);
/// Messages waiting for the drawing thread, which drains them all every
/// tick: a full queue holds the run back instead of growing without bound.
const QUEUE: usize = 4096;
/// How long the end of a run waits for the drawing thread's last frame. A
/// terminal that went away (closed, ssh dropped) can leave that thread stuck
/// reading it; the run then ends without it rather than never.
const LAST_FRAME: Duration = Duration::from_secs(2);

/// While a dashboard holds the terminal that stderr also writes to, log
/// lines (`tracing`: warnings, `-v`) go to its event log instead of being
/// printed over it. `None`: they go to stderr.
static LOG_TO: Mutex<Option<SyncSender<Msg>>> = Mutex::new(None);

/// The `tracing` writer for every command: stderr, or the live dashboard's
/// event log while there is one. Each line leaves in one write (see `elog!`).
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

/// One formatted log line, sent when `tracing` drops it.
pub struct LogLine(Vec<u8>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;
    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::new())
    }
}

impl io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let to = LOG_TO.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match to {
            // Never blocks: a full queue drops the line rather than stall the logger.
            Some(tx) => {
                let _ = tx.try_send(Msg::Event(log_event(&String::from_utf8_lossy(&self.0))));
            }
            None => {
                let _ = io::Write::write_all(&mut io::stderr(), &self.0);
            }
        }
    }
}

/// A sink for the workers' output lines while a dashboard shows them, and
/// the queue the driver drains into the event log. Bounded: a sink never
/// blocks (it is called from the thread reading a worker's stderr, and a
/// stalled reader would stall the worker), so a full queue drops lines and
/// the next line that fits is preceded by how many were dropped.
pub fn worker_lines() -> (crate::cluster::launcher::LogSink, mpsc::Receiver<String>) {
    worker_lines_within(QUEUE)
}

fn worker_lines_within(capacity: usize) -> (crate::cluster::launcher::LogSink, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::sync_channel::<String>(capacity);
    let dropped = Mutex::new(0u64);
    let sink = Arc::new(move |line: String| {
        let mut dropped = dropped.lock().unwrap_or_else(|e| e.into_inner());
        if *dropped > 0 {
            let n = *dropped;
            let note =
                format!("({n} worker output line{} dropped: the dashboard fell behind)", if n == 1 { "" } else { "s" });
            if tx.try_send(note).is_err() {
                *dropped += 1;
                return;
            }
            *dropped = 0;
        }
        if let Err(mpsc::TrySendError::Full(_)) = tx.try_send(line) {
            *dropped += 1;
        }
    });
    (sink, rx)
}

/// A log line as an event: no colour codes, no timestamp (the event log has its own).
fn log_event(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (a letter).
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let plain = plain.trim();
    match plain.split_once(' ') {
        Some((stamp, rest)) if stamp.ends_with('Z') && stamp.contains('T') => rest.trim_start().to_string(),
        _ => plain.to_string(),
    }
}

/// The drawing thread and its channel.
struct Live {
    tx: SyncSender<Msg>,
    thread: JoinHandle<()>,
    /// Disconnected when the drawing thread ends (its sender is dropped then).
    ended: mpsc::Receiver<()>,
}

/// The live dashboard, drawn by its own thread from what the run sends. It
/// takes the terminal over when the run starts, so whatever is printed before
/// (a dataset being generated) stays readable. The terminal is restored when
/// the run finishes, when this is dropped (any exit path, unwinding
/// included) and by ratatui's panic hook.
pub struct Dashboard {
    live: Option<Live>,
    /// Bars, if the terminal could not be taken over.
    fallback: Option<Bars>,
    stop: Arc<AtomicBool>,
    /// The STOPPING banner was sent for a signal.
    told_signal: AtomicBool,
    started: Instant,
}

impl Default for Dashboard {
    fn default() -> Self {
        Self::new()
    }
}

impl Dashboard {
    pub fn new() -> Self {
        Dashboard {
            live: None,
            fallback: None,
            stop: Arc::new(AtomicBool::new(false)),
            told_signal: AtomicBool::new(false),
            started: Instant::now(),
        }
    }

    /// Raw mode and the alternate screen, then the drawing thread.
    fn open(&self) -> io::Result<Live> {
        let terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        super::signals::terminal_taken();
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        if io::stderr().is_terminal() {
            *LOG_TO.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx.clone());
        }
        let flag = self.stop.clone();
        let (ending, ended) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().name("leapgnn-tui".into()).spawn(move || {
            let _ending = ending;
            let mut terminal = terminal;
            let result = run_terminal(&mut terminal, &rx, &mut Crossterm, &flag, &super::signals::force, TICK);
            drop(terminal); // shows the cursor again
            give_back_terminal();
            if let Err(e) = result {
                tracing::warn!("the dashboard stopped drawing: {e}");
            }
        });
        let thread = spawned.inspect_err(|_| give_back_terminal())?;
        Ok(Live { tx, thread, ended })
    }

    fn send(&self, m: Msg) {
        // A dashboard that stopped drawing must not stop the run.
        if let Some(live) = &self.live {
            let _ = live.tx.send(m);
        }
    }
}

impl ProgressSink for Dashboard {
    fn start(&mut self, info: &RunInfo) {
        if let Some(b) = &mut self.fallback {
            b.start(info);
            return;
        }
        if self.live.is_some() {
            // A restart (`--restarts`): the dashboard drops what it showed past the checkpoint.
            self.send(Msg::Start(info.clone()));
            return;
        }
        match self.open() {
            Ok(live) => {
                self.live = Some(live);
                self.send(Msg::Start(info.clone()));
                let at = match (info.start_epoch, info.start_iteration) {
                    (0, 0) => "started".to_string(),
                    (e, i) => format!("resumed at epoch {}, iteration {}", e + 1, i + 1),
                };
                let plural = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
                let shape =
                    format!("{} of {}", plural(info.epochs, "epoch"), plural(info.iterations_per_epoch, "iteration"));
                self.event(&format!("run {} {at}: {shape}", info.run));
            }
            Err(e) => {
                tracing::warn!("cannot draw the dashboard ({e}); showing progress bars instead");
                let mut bars = Bars::stderr();
                bars.start(info);
                self.fallback = Some(bars);
            }
        }
    }
    fn hosts(&mut self, hosts: &[String]) {
        self.send(Msg::Hosts(hosts.to_vec()));
    }
    fn record(&mut self, r: &StepRecord) {
        match &mut self.fallback {
            Some(b) => b.record(r),
            None => self.send(Msg::Record(r.clone())),
        }
    }
    fn epoch(&mut self, e: &EpochRecord) {
        match &mut self.fallback {
            Some(b) => b.epoch(e),
            None => {
                self.send(Msg::Epoch(e.clone()));
                // The log keeps every epoch's end, past what the curves still show.
                self.event(&format!(
                    "epoch {} ended: loss {}, val {}, test {}, {:.1} s",
                    e.epoch + 1,
                    crate::tui::fmt::loss(e.loss),
                    crate::tui::fmt::pct(e.val_accuracy),
                    crate::tui::fmt::pct(e.test_accuracy),
                    e.seconds
                ));
            }
        }
    }
    fn event(&mut self, msg: &str) {
        match &mut self.fallback {
            Some(b) => b.event(msg),
            None => self.send(Msg::Event(format!("[{}] {msg}", duration(self.started.elapsed().as_secs_f64())))),
        }
    }
    fn stop_requested(&self) -> bool {
        // A signal stops the run too (the caller reads it): the screen says so once.
        if super::signals::stop_requested() && !self.told_signal.swap(true, Ordering::SeqCst) {
            self.send(Msg::Stopping("a signal".into()));
        }
        self.stop.load(Ordering::SeqCst)
    }
    fn finish(&mut self) {
        if let Some(b) = &mut self.fallback {
            b.finish();
        }
        if let Some(live) = self.live.take() {
            // try_send: a drawing thread stuck on a dead terminal no longer drains the queue.
            let _ = live.tx.try_send(Msg::Finish);
            drop(live.tx);
            match live.ended.recv_timeout(LAST_FRAME) {
                Err(mpsc::RecvTimeoutError::Timeout) => give_back_terminal(), // left behind; it ends with the process
                _ => {
                    let _ = live.thread.join();
                }
            }
        }
    }
}

/// Log lines back to stderr, and the terminal back (`signals::release_terminal`).
fn give_back_terminal() {
    *LOG_TO.lock().unwrap_or_else(|e| e.into_inner()) = None;
    super::signals::release_terminal();
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_lines_never_block_and_say_how_many_they_dropped() {
        let (sink, rx) = worker_lines_within(3);
        for i in 0..8 {
            sink(format!("line {i}"));
        }
        let first: Vec<String> = rx.try_iter().collect();
        assert_eq!(first, ["line 0", "line 1", "line 2"]);
        sink("line 8".into());
        sink("line 9".into());
        let next: Vec<String> = rx.try_iter().collect();
        assert_eq!(next, ["(5 worker output lines dropped: the dashboard fell behind)", "line 8", "line 9"]);
        // While the queue stays full the note waits too, counting every line lost meanwhile.
        for i in 10..15 {
            sink(format!("line {i}"));
        }
        assert_eq!(rx.try_iter().count(), 3);
        sink("line 15".into());
        let last: Vec<String> = rx.try_iter().collect();
        assert_eq!(last, ["(2 worker output lines dropped: the dashboard fell behind)", "line 15"]);
        sink("line 16".into());
        sink("line 17".into());
        sink("line 18".into());
        sink("line 19".into());
        rx.try_iter().count();
        sink("line 20".into());
        assert_eq!(rx.try_iter().next().unwrap(), "(1 worker output line dropped: the dashboard fell behind)");
    }
}
