use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

const KEYS: [(&str, &str); 6] = [
    ("q, ctrl-c", "stop: checkpoint, then exit"),
    ("tab", "next view (shift-tab: previous)"),
    ("↑↓ j k", "scroll the workers one row"),
    ("pgup pgdn", "a page of workers (home g, end G: first, last)"),
    ("?", "show or hide this help"),
    ("esc", "close this help"),
];

const NOTES: [&str; 5] = [
    "views: overview, workers, curves, log, steps (worker x time step grid)",
    "t = time step; model = (worker + t) mod W",
    "miss = remote rows / requested rows, per time step and per epoch (never across epochs); - when none were requested",
    "req/local/cache/remote = feature rows this epoch",
    "rates: bytes/s in + out over each worker's last 32 steps",
];

/// A box over the middle of the screen.
pub fn draw(frame: &mut Frame, area: Rect) {
    let popup = area.centered(Constraint::Max(64), Constraint::Max(16));
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(vec![Span::styled(format!("{k:<10} "), bold), Span::raw(*what)]))
        .collect();
    lines.push(Line::raw(""));
    lines.extend(NOTES.iter().map(|n| Line::raw(*n)));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title(" help: keys ")),
        popup,
    );
}
