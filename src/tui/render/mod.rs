//! Pure rendering: a frame is a function of the state and the viewer's choices.

mod charts;
mod columns;
mod curves;
mod header;
mod help;
mod log;
mod steps;
mod workers;

use super::state::DashboardState;
use super::view::{Ui, View};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Tabs, Wrap};

/// The smallest screen the views are laid out for (the overview's table
/// with a worker row and one chart; a step column of the grid).
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &DashboardState, ui: &Ui) {
    draw_paged(frame, state, ui);
}

/// Draws the whole screen; returns how many workers the view's worker
/// table or grid shows at once (a page, for scrolling; 0 in a view without one).
pub fn draw_paged(frame: &mut Frame, state: &DashboardState, ui: &Ui) -> usize {
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(2), Constraint::Fill(1), Constraint::Length(1)]).areas(frame.area());
    header::draw(frame, head, state);
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        // The header still says how far the run is; the views would be cut to pieces.
        let why = format!("{}x{}: the views need {MIN_WIDTH}x{MIN_HEIGHT}; q stops", area.width, area.height);
        frame.render_widget(Paragraph::new(why).wrap(Wrap { trim: true }), body.union(foot));
        return 0;
    }
    let page = match ui.view {
        View::Overview => overview(frame, body, state, ui.scroll),
        View::Workers => workers::detail(frame, body, state, ui.scroll),
        View::Curves => {
            curves::draw(frame, body, state);
            0
        }
        View::Log => {
            log::draw(frame, body, state);
            0
        }
        View::Steps => steps::draw(frame, body, state, ui.scroll),
    };
    footer(frame, foot, ui);
    if ui.help {
        help::draw(frame, frame.area());
    }
    page
}

/// Everything at a glance; at 80x24 the worker table yields rows to the
/// charts and log before they disappear. A part is drawn whole or not at
/// all: the heights are worked out to add up to the screen's, never more
/// (ratatui would squeeze every part to a border without content).
fn overview(frame: &mut Frame, area: Rect, state: &DashboardState, from: usize) -> usize {
    const MIN_TABLE: u16 = 4;
    const MIN_CHART: u16 = 3;
    const MIN_LOG: u16 = 3;
    let h = area.height;
    let wanted = state.workers().len().max(1) as u16 + 3;
    let table = wanted.min(h.saturating_sub(2 * MIN_CHART + MIN_LOG).max(MIN_TABLE)).min(h);
    // What the table leaves goes to the two chart rows (up to 6 bar lines each), then the log.
    let mut rest = h - table;
    let chart = (rest.saturating_sub(MIN_LOG + 3) / 2).clamp(MIN_CHART, 8);
    let mut take = |want: u16, min: u16| {
        let got = if rest >= min { want.min(rest) } else { 0 };
        rest -= got;
        got
    };
    let (comm, curves) = (take(chart, MIN_CHART), take(chart, MIN_CHART));
    let events = take(u16::MAX, MIN_LOG);
    let [t, c, k, e] = Layout::vertical([table, comm, curves, events].map(Constraint::Length)).areas(area);
    let page = workers::compact(frame, t, state, from);
    if comm > 0 {
        charts::per_step(frame, c, state);
    }
    if curves > 0 {
        charts::training(frame, k, state);
    }
    if events > 0 {
        log::draw(frame, e, state);
    }
    page
}

/// The width of tabs as ratatui draws them: each title padded by a space a
/// side, one divider between.
fn tabs_width(titles: &[&str]) -> usize {
    titles.iter().map(|t| t.len() + 3).sum::<usize>() - 1
}

fn footer(frame: &mut Frame, area: Rect, ui: &Ui) {
    let keys = "q stop  tab view  ↑↓ scroll  ? help ";
    let width = area.width as usize;
    let mut titles = View::ALL.map(View::title);
    // Too narrow for every title (40 columns): the view shown keeps its name,
    // the others their initial, so no tab is cut in the middle of a word.
    if width < tabs_width(&titles) {
        titles = View::ALL.map(|v| if v == ui.view { v.title() } else { &v.title()[..1] });
    }
    // Too narrow for the tabs and the key hint: the hint goes (`?` still shows it).
    let hint = if width < tabs_width(&titles) + crate::tui::fmt::width(keys) {
        0
    } else {
        crate::tui::fmt::width(keys) as u16
    };
    let [tabs, help] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(hint)]).areas(area);
    let selected = View::ALL.iter().position(|v| *v == ui.view);
    frame.render_widget(
        Tabs::new(titles).select(selected).highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        tabs,
    );
    frame.render_widget(Paragraph::new(Line::from(keys).right_aligned()).style(Style::new().dim()), help);
}
