use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph};

/// The newest events that fit, oldest at the top.
pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let block = Block::bordered().title(format!(" events ({}) ", s.events().len()));
    let fit = block.inner(area).height as usize;
    let lines: Vec<Line> = s.events().tail(fit).map(|e| Line::from(e.as_str())).collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
