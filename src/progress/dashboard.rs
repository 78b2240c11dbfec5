use super::ProgressSink;
use crate::metrics::{EpochRecord, RunInfo, StepRecord};
use crate::tui::app::{Crossterm, Msg, run_terminal};
use crate::tui::fmt::duration;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Redraw (and key poll) period: 10 frames per second at most.
const TICK: Duration = Duration::from_millis(100);

/// The live dashboard, drawn by its own thread from what the run sends.
/// The terminal is restored when the run finishes, when this is dropped
/// (any exit path, unwinding included) and by ratatui's panic hook.
pub struct Dashboard {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    started: Instant,
}

impl Dashboard {
    /// Takes over the terminal (raw mode, alternate screen) and starts drawing.
    pub fn start() -> io::Result<Dashboard> {
        let terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let spawned = std::thread::Builder::new().name("leapgnn-tui".into()).spawn(move || {
            let mut terminal = terminal;
            let result = run_terminal(&mut terminal, &rx, &mut Crossterm, &flag, TICK);
            drop(terminal); // shows the cursor again
            ratatui::restore();
            if let Err(e) = result {
                tracing::warn!("the dashboard stopped drawing: {e}");
            }
        });
        let thread = spawned.inspect_err(|_| ratatui::restore())?;
        Ok(Dashboard { tx: Some(tx), thread: Some(thread), stop, started: Instant::now() })
    }

    fn send(&self, m: Msg) {
        // A dashboard that stopped drawing must not stop the run.
        if let Some(tx) = &self.tx {
            let _ = tx.send(m);
        }
    }
}

impl ProgressSink for Dashboard {
    fn start(&mut self, info: &RunInfo) {
        self.send(Msg::Start(info.clone()));
    }
    fn record(&mut self, r: &StepRecord) {
        self.send(Msg::Record(r.clone()));
    }
    fn epoch(&mut self, e: &EpochRecord) {
        self.send(Msg::Epoch(e.clone()));
    }
    fn event(&mut self, msg: &str) {
        self.send(Msg::Event(format!("[{}] {msg}", duration(self.started.elapsed().as_secs_f64()))));
    }
    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    fn finish(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Finish);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.finish();
    }
}
