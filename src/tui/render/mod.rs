//! Pure rendering: a frame is a function of the state and the viewer's choices.

mod charts;
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
use ratatui::widgets::{Paragraph, Tabs};

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &DashboardState, ui: &Ui) {
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(2), Constraint::Fill(1), Constraint::Length(1)]).areas(frame.area());
    header::draw(frame, head, state);
    match ui.view {
        View::Overview => overview(frame, body, state),
        View::Workers => workers::detail(frame, body, state),
        View::Curves => curves::draw(frame, body, state),
        View::Log => log::draw(frame, body, state),
        View::Steps => steps::draw(frame, body, state),
    }
    footer(frame, foot, ui);
    if ui.help {
        help::draw(frame, frame.area());
    }
}

/// Everything at a glance; at 80x24 the worker table yields rows to the
/// charts and log before they disappear.
fn overview(frame: &mut Frame, area: Rect, state: &DashboardState) {
    const MIN_CHART: u16 = 3;
    const MIN_LOG: u16 = 3;
    let wanted = state.workers().len().max(1) as u16 + 3;
    let table = wanted.min(area.height.saturating_sub(2 * MIN_CHART + MIN_LOG).max(4));
    // What the table leaves goes to the two chart rows (up to 6 bar lines each), then the log.
    let rest = area.height.saturating_sub(table);
    let chart = (rest.saturating_sub(MIN_LOG + 3) / 2).clamp(MIN_CHART, 8);
    let [t, comm, curves, events] = Layout::vertical([
        Constraint::Length(table),
        Constraint::Length(chart),
        Constraint::Length(chart),
        Constraint::Fill(1),
    ])
    .areas(area);
    workers::compact(frame, t, state);
    charts::per_step(frame, comm, state);
    charts::training(frame, curves, state);
    log::draw(frame, events, state);
}

/// The width of tabs as ratatui draws them: each title padded by a space a
/// side, one divider between.
fn tabs_width(titles: &[&str]) -> usize {
    titles.iter().map(|t| t.len() + 3).sum::<usize>() - 1
}

fn footer(frame: &mut Frame, area: Rect, ui: &Ui) {
    let keys = "q stop  tab view  ? help ";
    let width = area.width as usize;
    let mut titles = View::ALL.map(View::title);
    // Too narrow for every title (40 columns): the view shown keeps its name,
    // the others their initial, so no tab is cut in the middle of a word.
    if width < tabs_width(&titles) {
        titles = View::ALL.map(|v| if v == ui.view { v.title() } else { &v.title()[..1] });
    }
    // Too narrow for the tabs and the key hint: the hint goes (`?` still shows it).
    let hint = if width < tabs_width(&titles) + keys.len() { 0 } else { keys.len() as u16 };
    let [tabs, help] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(hint)]).areas(area);
    let selected = View::ALL.iter().position(|v| *v == ui.view);
    frame.render_widget(
        Tabs::new(titles).select(selected).highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        tabs,
    );
    frame.render_widget(Paragraph::new(Line::from(keys).right_aligned()).style(Style::new().dim()), help);
}
