//! The terminal loop: apply what the run sends, draw, answer keys. Generic
//! over the backend and the key source so tests drive it without a terminal.

use super::render::draw_paged;
use super::state::DashboardState;
use super::view::{Action, Ui, View};
use crate::metrics::{EpochRecord, RunInfo, StepRecord};
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// What the run tells the dashboard.
#[derive(Clone, Debug)]
pub enum Msg {
    Start(RunInfo),
    /// Where each worker runs, once (re)launched.
    Hosts(Vec<String>),
    Record(StepRecord),
    Epoch(EpochRecord),
    Event(String),
    /// The run was asked to stop other than by a key, by whom (`a signal`):
    /// say so, as `q` does.
    Stopping(String),
    /// The run ended: draw once more and return.
    Finish,
}

/// Where key presses come from.
pub trait Input {
    /// The next event, waiting at most `wait`.
    fn next(&mut self, wait: Duration) -> io::Result<Option<Event>>;
}

/// The real terminal's events.
pub struct Crossterm;

impl Input for Crossterm {
    fn next(&mut self, wait: Duration) -> io::Result<Option<Event>> {
        if event::poll(wait)? { event::read().map(Some) } else { Ok(None) }
    }
}

/// Runs until `Msg::Finish` arrives or every sender is gone; returns the final
/// state. `q` or Ctrl-C sets `stop` (the run checkpoints, then finishes) and
/// the loop keeps drawing until then; Ctrl-C once stopping calls `force`.
/// Redraws happen only when something changed, at most once per `tick`.
pub fn run_terminal<B: Backend>(
    terminal: &mut Terminal<B>,
    rx: &Receiver<Msg>,
    input: &mut dyn Input,
    stop: &AtomicBool,
    force: &dyn Fn(),
    tick: Duration,
) -> io::Result<DashboardState> {
    let mut state = DashboardState::default();
    let mut ui = Ui::default();
    let mut dirty = true;
    // Workers a page of the view shown holds, as last drawn.
    let mut page = 0;
    loop {
        let done = loop {
            match rx.try_recv() {
                Ok(Msg::Finish) | Err(TryRecvError::Disconnected) => break true,
                Ok(m) => {
                    // The first start picks the view; a restart's keeps the viewer's.
                    if let Msg::Start(info) = &m
                        && state.info.run.is_empty()
                    {
                        ui.view = View::first_for(info.workers, info.time_steps);
                    }
                    apply(&mut state, m);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break false,
            }
        };
        if done {
            state.finished = true;
            dirty = true;
        }
        if dirty {
            terminal.draw(|f| page = draw_paged(f, &state, &ui)).map_err(|e| io::Error::other(e.to_string()))?;
            dirty = false;
        }
        if done {
            return Ok(state);
        }
        match input.next(tick)? {
            Some(Event::Key(k)) => match ui.on_key(k) {
                Action::Interrupt if stop.load(Ordering::SeqCst) => {
                    state.push_event("Ctrl-C again: stopping at once");
                    dirty = true;
                    force();
                }
                Action::Stop | Action::Interrupt => {
                    if !stop.swap(true, Ordering::SeqCst) {
                        state.request_stop(None);
                    }
                    dirty = true;
                }
                Action::Scroll(how) => {
                    ui.scroll_by(how, page, state.workers().len());
                    dirty = true;
                }
                Action::Redraw => dirty = true,
                Action::Nothing => {}
            },
            Some(Event::Resize(..)) => dirty = true,
            _ => {}
        }
    }
}

fn apply(state: &mut DashboardState, m: Msg) {
    match m {
        Msg::Start(info) => state.start(info),
        Msg::Hosts(hosts) => state.set_hosts(hosts),
        Msg::Record(r) => state.apply_record(&r),
        Msg::Epoch(e) => state.apply_epoch(&e),
        Msg::Event(e) => state.push_event(e),
        Msg::Stopping(by) => state.request_stop(Some(&by)),
        Msg::Finish => {}
    }
}
