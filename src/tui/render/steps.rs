//! The time-step grid: one row pair per worker (miss rate, bytes received),
//! one column per time step of the newest iterations, newest first, coloured
//! by miss rate like a heatmap, with a legend and units. A step that
//! requested no rows (full-graph) reads `-` uncoloured, not a green 0.0%; a
//! cell whose record has not come in yet reads `…`.

use crate::tui::fmt::{bytes, rate};
use crate::tui::state::{DashboardState, StepCell};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

/// Width of a step column: `100.0%`, `999.9MB`, `e12 i345`.
const CELL: u16 = 8;
/// Width of the row label column: `w12 rcv`.
const LABEL: u16 = 7;

/// What a cell whose record has not arrived yet shows, in both rows.
const PENDING: &str = "…";

/// Heatmap style of a miss rate; none (no rows requested) stays uncoloured.
fn heat(miss: Option<f64>) -> Style {
    let bg = match miss {
        None => return Style::new(),
        Some(m) if m < 0.10 => Color::Green,
        Some(m) if m < 0.30 => Color::Yellow,
        Some(_) => Color::Red,
    };
    Style::new().fg(Color::Black).bg(bg)
}

pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let [grid, legend] = Layout::vertical([Constraint::Fill(1), Constraint::Length(3)]).areas(area);
    let inner_width = grid.width.saturating_sub(2);
    let fit = (inner_width.saturating_sub(LABEL) / (CELL + 1)) as usize;
    // Whole iterations that fit, newest first (at least the newest one, clipped if need be).
    let mut shown: Vec<((u64, u64), Vec<StepCell>)> = Vec::new();
    let mut columns = 0;
    // Each iteration takes a column at least: as many as the screen is wide.
    for (key, cells) in s.recent_cells(fit.max(1)) {
        let steps = cells.iter().map(|c| c.time_step + 1).max().unwrap_or(1) as usize;
        if !shown.is_empty() && columns + steps > fit {
            break;
        }
        columns += steps;
        shown.push((key, cells));
    }
    let title = match shown.first() {
        Some(((e, i), _)) => format!(" time steps: epoch {}, iteration {} first, then older ", e + 1, i + 1),
        None => " time steps (no records yet) ".into(),
    };
    // (iteration key, time step) per column.
    let cols: Vec<((u64, u64), u32)> = shown
        .iter()
        .flat_map(|(k, cells)| {
            let steps = cells.iter().map(|c| c.time_step + 1).max().unwrap_or(1);
            (0..steps).map(move |t| (*k, t))
        })
        .collect();
    let bold = Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    // Two header lines: the iteration (with its epoch, as the grid may reach back
    // into the previous one), then the time step.
    let two = |top: String, bottom: String| {
        Cell::from(Text::from(vec![Line::from(top).right_aligned(), Line::from(bottom).right_aligned()]))
    };
    let header = Row::new(
        std::iter::once(two("wkr".into(), String::new()))
            .chain(cols.iter().map(|((e, i), t)| two(format!("e{} i{}", e + 1, i + 1), format!("t{t}")))),
    )
    .height(2)
    .style(bold);
    let find = |w: u32, (k, t): ((u64, u64), u32)| {
        shown
            .iter()
            .find(|(key, _)| *key == k)
            .and_then(|(_, cells)| cells.iter().find(|c| c.worker == w && c.time_step == t).copied())
    };
    let mut rows = Vec::new();
    for w in 0..s.workers().len() as u32 {
        let miss = cols.iter().map(|&col| match find(w, col) {
            Some(c) => right(rate(c.miss_rate())).style(heat(c.miss_rate())),
            None => right(PENDING.into()),
        });
        rows.push(Row::new(std::iter::once(right(format!("w{w} miss"))).chain(miss)));
        let recv = cols.iter().map(|&col| match find(w, col) {
            Some(c) => right(bytes(c.bytes_in as f64)),
            None => right(PENDING.into()),
        });
        rows.push(Row::new(std::iter::once(right(format!("w{w} rcv"))).chain(recv)).style(Style::new().dim()));
    }
    let widths: Vec<Constraint> =
        std::iter::once(Constraint::Length(LABEL)).chain(cols.iter().map(|_| Constraint::Length(CELL))).collect();
    frame.render_widget(Table::new(rows, widths).header(header).block(Block::bordered().title(title)), grid);
    let text = vec![
        Line::from(" miss = remote / requested feature rows of the step (- none requested, … not in yet)"),
        Line::from(" rcv = bytes the worker received in the step (all categories)"),
        Line::from(" colour: miss < 10% green, < 30% yellow, else red; e/i/t: epoch, iteration, step"),
    ];
    frame.render_widget(Paragraph::new(text).style(Style::new().dim()), legend);
}
