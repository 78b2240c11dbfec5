use crate::tui::fmt::elide;
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph};

/// The newest events that fit, oldest at the top, each on its line: one too
/// long for it (a worker's host name, a path) ends in `…` rather than
/// passing for the whole message.
pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let block = Block::bordered().title(format!(" events ({}) ", s.events().len()));
    let inner = block.inner(area);
    let lines: Vec<Line> =
        s.events().tail(inner.height as usize).map(|e| Line::from(elide(e, inner.width.into()))).collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
