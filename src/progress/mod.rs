//! Where a run's progress goes: the live dashboard on a terminal, progress
//! bars (or plain lines) on stderr otherwise, or JSON lines on stdout for
//! pipelines. The trainer talks to one `ProgressSink` and does not care which.

mod bars;
mod dashboard;
mod json_stream;
pub mod signals;

pub use bars::{Bars, Spinner};
pub use dashboard::{Dashboard, LogWriter, worker_lines};
pub use json_stream::JsonStream;

use crate::metrics::{EpochRecord, RestartRecord, RunInfo, StepRecord};
use std::io::IsTerminal;

pub trait ProgressSink {
    /// The run starts (or resumes); comes before any record.
    fn start(&mut self, _info: &RunInfo) {}
    /// Where each worker runs, once launched (`Observer::hosts`).
    fn hosts(&mut self, _hosts: &[String]) {}
    /// One (epoch, iteration, time step, worker) record.
    fn record(&mut self, r: &StepRecord);
    /// An epoch ended (after evaluation).
    fn epoch(&mut self, e: &EpochRecord);
    /// Something worth a log line: a worker started, a checkpoint was written.
    fn event(&mut self, msg: &str);
    /// `--restarts`: training goes on again from the record's position (the
    /// driver also says so in an `event`).
    fn restart(&mut self, _r: &RestartRecord) {}
    /// Whether the user asked to stop (the trainer checkpoints, then ends).
    fn stop_requested(&self) -> bool {
        false
    }
    /// Why the sink's output could not be written, when that stopped the run
    /// and is not a reader that has gone (`--json-stream > /dev/full`): the
    /// run then fails with it. Taken once, after `finish`.
    fn output_failure(&mut self) -> Option<std::io::Error> {
        None
    }
    /// The run ended: release the terminal, clear the bars. Idempotent.
    fn finish(&mut self);
}

/// Shows nothing (`--json`: stdout holds the summary alone).
pub struct Silent;

impl ProgressSink for Silent {
    fn record(&mut self, _: &StepRecord) {}
    fn epoch(&mut self, _: &EpochRecord) {}
    fn event(&mut self, _: &str) {}
    fn finish(&mut self) {}
}

/// Whether the dashboard can run here: it draws on stdout and reads keys
/// from stdin, with cursor addressing and an alternate screen, which a
/// terminal that calls itself `TERM=dumb` does not have (it gets the
/// epoch lines of `--no-tui`).
pub fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::io::stdin().is_terminal() && redrawable()
}

/// Whether the terminal can redraw a line in place: not one that calls
/// itself `TERM=dumb` (no cursor addressing).
pub(crate) fn redrawable() -> bool {
    std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// The sink for these flags: `--json-stream` wins (stdout carries records),
/// then `--json` (stdout carries the summary), then the dashboard on a
/// terminal unless `--no-tui`, else bars or plain lines on stderr.
pub fn choose(is_tty: bool, no_tui: bool, json: bool, json_stream: bool) -> Box<dyn ProgressSink> {
    if json_stream {
        return Box::new(JsonStream::stdout());
    }
    if json {
        return Box::new(Silent);
    }
    if uses_dashboard(is_tty, no_tui, json, json_stream) {
        return Box::new(Dashboard::new());
    }
    Box::new(Bars::stderr())
}

/// Whether `choose` picks the dashboard (which owns the terminal: nothing
/// else may print on it while it runs).
pub fn uses_dashboard(is_tty: bool, no_tui: bool, json: bool, json_stream: bool) -> bool {
    is_tty && !no_tui && !json && !json_stream
}
