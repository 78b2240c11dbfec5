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

/// What the viewer chose: a view, whether the help is open, and how far
/// down the worker tables are scrolled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ui {
    pub view: View,
    pub help: bool,
    /// The first worker the tables show (they show from an earlier one when
    /// the screen has grown since, rather than leave rows empty).
    pub scroll: usize,
}

/// A move through the worker tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scroll {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
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
    /// Move through the worker tables: the loop knows how many rows a page holds.
    Scroll(Scroll),
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
            KeyCode::Up | KeyCode::Char('k') => Action::Scroll(Scroll::Up),
            KeyCode::Down | KeyCode::Char('j') => Action::Scroll(Scroll::Down),
            KeyCode::PageUp => Action::Scroll(Scroll::PageUp),
            KeyCode::PageDown => Action::Scroll(Scroll::PageDown),
            KeyCode::Home | KeyCode::Char('g') => Action::Scroll(Scroll::Home),
            KeyCode::End | KeyCode::Char('G') => Action::Scroll(Scroll::End),
            _ => Action::Nothing,
        }
    }

    /// Moves the worker tables by `how`, given that a page shows `page` of
    /// `total` workers: never past the page that shows the last one, so a
    /// step back up after End moves at once.
    pub fn scroll_by(&mut self, how: Scroll, page: usize, total: usize) {
        let page = page.max(1);
        let last = total.saturating_sub(page);
        let at = self.scroll.min(last);
        self.scroll = match how {
            Scroll::Up => at.saturating_sub(1),
            Scroll::Down => at + 1,
            Scroll::PageUp => at.saturating_sub(page),
            Scroll::PageDown => at + page,
            Scroll::Home => 0,
            Scroll::End => last,
        }
        .min(last);
    }
}
