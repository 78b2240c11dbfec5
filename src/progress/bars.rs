use super::ProgressSink;
use crate::metrics::{EpochRecord, RunInfo, StepRecord};
use crate::tui::DashboardState;
use crate::tui::fmt::{pct, rate};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Progress bars on stderr (epochs, iterations of the current epoch); where
/// stderr is not a terminal, one plain line per epoch instead.
pub struct Bars {
    multi: MultiProgress,
    epochs: ProgressBar,
    iterations: ProgressBar,
    /// Adds the records up (iteration loss, epoch miss rate) as the dashboard does.
    state: DashboardState,
    /// Shown iteration, to update the bar once per iteration rather than per record.
    shown: Option<(u64, u64)>,
    /// A plain line could not be written: stderr's reader has gone (`2>&1 | head`).
    closed: bool,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("the templates are valid").progress_chars("=> ")
}

/// The line printed when an epoch ends.
pub fn epoch_line(e: &EpochRecord, epochs: u64) -> String {
    format!(
        "epoch {:>3}/{epochs}  loss {}  val {:.4}  test {:.4}  {:.2} s (+{:.2} s eval)",
        e.epoch + 1,
        crate::tui::fmt::loss(e.loss),
        e.val_accuracy,
        e.test_accuracy,
        e.seconds,
        e.eval_seconds
    )
}

impl Bars {
    pub fn stderr() -> Self {
        Self::with_target(ProgressDrawTarget::stderr())
    }

    pub fn with_target(target: ProgressDrawTarget) -> Self {
        let multi = MultiProgress::with_draw_target(target);
        let epochs = multi.add(
            ProgressBar::new(0)
                .with_prefix("epoch")
                .with_style(style("{prefix:>5} [{bar:30.cyan/blue}] {pos}/{len} {msg}")),
        );
        let iterations = multi.add(
            ProgressBar::new(0)
                .with_prefix("iter")
                .with_style(style("{prefix:>5} [{bar:30}] {pos}/{len} eta {eta} {msg}")),
        );
        Bars { multi, epochs, iterations, state: DashboardState::default(), shown: None, closed: false }
    }

    /// Whether bars are drawn (stderr is a terminal).
    pub fn visible(&self) -> bool {
        !self.multi.is_hidden()
    }

    fn line(&mut self, s: &str) {
        if self.visible() {
            let _ = self.multi.println(s);
        } else if !self.closed {
            use std::io::Write;
            // One write for the whole line, as `elog!` does, so a kill cannot cut it.
            self.closed = std::io::stderr().write_all(format!("{s}\n").as_bytes()).is_err();
        }
    }
}

impl ProgressSink for Bars {
    fn start(&mut self, info: &RunInfo) {
        self.state.start(info.clone());
        self.epochs.set_length(info.epochs);
        self.epochs.set_position(info.start_epoch);
        self.iterations.set_length(info.iterations_per_epoch);
        self.iterations.set_position(info.start_iteration);
    }

    fn record(&mut self, r: &StepRecord) {
        self.state.apply_record(r);
        let Some((epoch, it)) = self.state.position() else { return };
        if !self.visible() || self.shown == Some((epoch, it)) {
            return;
        }
        // The previous iteration is complete now: show its loss.
        self.shown = Some((epoch, it));
        self.iterations.set_position(it + 1);
        let loss = self
            .state
            .iterations()
            .iter()
            .rev()
            .nth(1)
            .map_or(String::new(), |i| format!("loss {}  ", crate::tui::fmt::loss(i.loss)));
        self.iterations.set_message(format!("{loss}miss {}", rate(self.state.epoch_rows().miss_rate())));
    }

    fn epoch(&mut self, e: &EpochRecord) {
        self.state.apply_epoch(e);
        self.line(&epoch_line(e, self.state.info.epochs));
        self.epochs.set_position(e.epoch + 1);
        self.epochs.set_message(format!("val {}  test {}", pct(e.val_accuracy), pct(e.test_accuracy)));
        self.iterations.set_position(0);
    }

    /// Shown above the bars; dropped without a terminal, where stderr keeps to epoch lines.
    fn event(&mut self, msg: &str) {
        if self.visible() {
            let _ = self.multi.println(msg);
        }
    }

    /// A closed stderr stops the run as a closed `--json-stream` does.
    fn stop_requested(&self) -> bool {
        self.closed
    }

    fn finish(&mut self) {
        self.iterations.finish_and_clear();
        self.epochs.finish_and_clear();
    }
}

/// A spinner on stderr for a long step with nothing to count (a METIS cut,
/// the writing of the parts),
/// so a terminal does not sit silent. Hidden where it would only get in the
/// way: stderr not a terminal (scripts and tests keep their lines as they
/// were), `TERM=dumb` (no cursor addressing to redraw it), or a dashboard
/// holding the screen. The line goes away when the spinner is dropped,
/// whether the step ended or failed. It fits an 80-column terminal
/// (`SPINNER_COLUMNS`, the message elided to fit): a longer line wraps, and
/// its redraws leave rows behind.
pub struct Spinner(ProgressBar);

/// The most columns a spinner line takes: glyph, message and elapsed time.
const SPINNER_COLUMNS: usize = 79;

/// `{elapsed}` is compact (`43s`, `2m`, `35h`, `78w`): at most 3 columns
/// below a century, 4 kept for it (`ELAPSED_COLUMNS`).
const SPINNER_TEMPLATE: &str = "{spinner} {msg} {elapsed}";
const ELAPSED_COLUMNS: usize = 4;

impl Spinner {
    pub fn stderr(msg: String) -> Self {
        let shown = std::io::stderr().is_terminal() && super::redrawable() && !super::signals::terminal_held();
        if !shown {
            return Spinner(ProgressBar::hidden());
        }
        let style = ProgressStyle::with_template(SPINNER_TEMPLATE).expect("the template is valid");
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
            .with_style(style)
            .with_message(spinner_message(&msg));
        // Drawn now, not at the first tick: a step shorter than a tick is still seen.
        bar.tick();
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner(bar)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// `msg` elided to the room a spinner line leaves it: `SPINNER_COLUMNS`
/// less the glyph, two spaces and the elapsed time.
fn spinner_message(msg: &str) -> String {
    crate::tui::fmt::elide(msg, SPINNER_COLUMNS - 3 - ELAPSED_COLUMNS)
}
