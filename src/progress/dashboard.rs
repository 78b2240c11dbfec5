use super::{Bars, ProgressSink};
use crate::metrics::{EpochRecord, RunInfo, StepRecord};
use crate::tui::app::{Crossterm, Msg, run_terminal};
use crate::tui::fmt::duration;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
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

/// The drawing thread and its channel.
struct Live {
    tx: SyncSender<Msg>,
    thread: JoinHandle<()>,
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
    started: Instant,
}

impl Default for Dashboard {
    fn default() -> Self {
        Self::new()
    }
}

impl Dashboard {
    pub fn new() -> Self {
        Dashboard { live: None, fallback: None, stop: Arc::new(AtomicBool::new(false)), started: Instant::now() }
    }

    /// Raw mode and the alternate screen, then the drawing thread.
    fn open(&self) -> io::Result<Live> {
        let terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        super::signals::terminal_taken(true);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let flag = self.stop.clone();
        let spawned = std::thread::Builder::new().name("leapgnn-tui".into()).spawn(move || {
            let mut terminal = terminal;
            let result = run_terminal(&mut terminal, &rx, &mut Crossterm, &flag, &super::signals::force, TICK);
            drop(terminal); // shows the cursor again
            give_back_terminal();
            if let Err(e) = result {
                tracing::warn!("the dashboard stopped drawing: {e}");
            }
        });
        let thread = spawned.inspect_err(|_| give_back_terminal())?;
        Ok(Live { tx, thread })
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
        if self.live.is_some() || self.fallback.is_some() {
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
                let shape = format!("{} epochs of {} iterations", info.epochs, info.iterations_per_epoch);
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
                    "epoch {} ended: loss {:.4}, val {}, test {}, {:.1} s",
                    e.epoch + 1,
                    e.loss,
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
            let until = Instant::now() + LAST_FRAME;
            while !live.thread.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if live.thread.is_finished() {
                let _ = live.thread.join();
            } else {
                // Left behind; it ends with the process.
                give_back_terminal();
            }
        }
    }
}

/// Raw mode off, the main screen back (ratatui's restore), and no forced
/// exit needs to do it again.
fn give_back_terminal() {
    ratatui::restore();
    super::signals::terminal_taken(false);
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.finish();
    }
}
