//! Which view is shown and what the keys do: pure, so tests drive it.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    /// Header, worker table, per-step charts, loss/accuracy, latest events.
    #[default]
    Overview,
    /// Every worker with traffic in and out per category.
    Workers,
    /// Loss per iteration, accuracy per epoch, the epoch table.
    Curves,
    /// The whole event log.
    Log,
    /// Worker x time step grid of miss rates and bytes, newest iterations first.
    Steps,
}

impl View {
    pub const ALL: [View; 5] = [View::Overview, View::Workers, View::Curves, View::Log, View::Steps];

    /// The view a run opens on: the time-step grid when there is more than
    /// one worker or time step to compare, the overview otherwise.
    pub fn first_for(workers: u32, time_steps: u32) -> View {
        if workers > 1 || time_steps > 1 { View::Steps } else { View::Overview }
    }

    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Workers => "workers",
            View::Curves => "curves",
            View::Log => "log",
            View::Steps => "steps",
        }
    }

    fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).expect("every view is listed")
    }

    pub fn next(self) -> View {
        View::ALL[(self.index() + 1) % View::ALL.len()]
    }

    pub fn prev(self) -> View {
        View::ALL[(self.index() + View::ALL.len() - 1) % View::ALL.len()]
    }
}

/// What the viewer chose: a view, and whether the help is open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ui {
    pub view: View,
    pub help: bool,
}

/// What a key asks of the terminal loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Redraw,
    /// Stop the run gracefully (checkpoint, then teardown).
    Stop,
    /// Ctrl-C: the first stops as `q` does, a second one forces the stop,
    /// as two Ctrl-C do outside the dashboard.
    Interrupt,
}

impl Ui {
    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => Action::Stop,
            // Raw mode turns Ctrl-C into a key, which no signal follows.
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Interrupt,
            KeyCode::Tab => {
                self.view = self.view.next();
                Action::Redraw
            }
            KeyCode::BackTab => {
                self.view = self.view.prev();
                Action::Redraw
            }
            KeyCode::Char('?') => {
                self.help = !self.help;
                Action::Redraw
            }
            KeyCode::Esc if self.help => {
                self.help = false;
                Action::Redraw
            }
            _ => Action::Nothing,
        }
    }
}
