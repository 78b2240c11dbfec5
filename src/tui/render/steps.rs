//! The time-step grid: one row pair per worker (miss rate, bytes received),
//! one column per time step of the newest iterations, newest first, coloured
//! by miss rate like a heatmap, with a legend and units. A step that
//! requested no rows (full-graph) reads `-` uncoloured, not a green 0.0%; a
//! cell whose record has not come in yet reads `…`.

use super::columns::shown_note;
use crate::tui::fmt::{bytes, elide, first_fitting, rate};
use crate::tui::state::{DashboardState, StepCell};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

/// Width of a step column: `100.0%`, `999.9MB`, `e12 i345`.
const CELL: u16 = 8;
/// Width of the row label column: `w1 miss`; wider past 9 workers (`w12 miss`).
fn label_width(workers: usize) -> u16 {
    format!("w{} miss", workers.saturating_sub(1)).len() as u16
}

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

/// The grid from worker `from` on; returns how many workers fit.
pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState, from: usize) -> usize {
    // The legend gives way to the grid's first worker (borders, two header lines, two rows).
    let legend_height = if area.height >= 3 + 6 { 3 } else { 0 };
    let [grid, legend] = Layout::vertical([Constraint::Fill(1), Constraint::Length(legend_height)]).areas(area);
    let inner_width = grid.width.saturating_sub(2);
    // Every column whole: more than fit would be squeezed until `e2 i5` reads `2 i5`.
    let label = label_width(s.workers().len());
    let fit = (inner_width.saturating_sub(label) / (CELL + 1)) as usize;
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
    // (iteration key, time step) per column; the newest iteration's first steps
    // alone when all of its do not fit.
    let cols: Vec<((u64, u64), u32)> = shown
        .iter()
        .flat_map(|(k, cells)| {
            let steps = cells.iter().map(|c| c.time_step + 1).max().unwrap_or(1);
            (0..steps).map(move |t| (*k, t))
        })
        .take(fit)
        .collect();
    let room = inner_width as usize;
    let titles = match shown.first() {
        Some(((e, i), _)) if cols.len() < columns => {
            let (e, i, n) = (e + 1, i + 1, cols.len());
            vec![
                format!(" time steps: epoch {e}, iteration {i}, its first {n} of {columns} steps "),
                format!(" e{e} i{i}: steps 0-{} of {columns} ", n - 1),
            ]
        }
        Some(((e, i), _)) => vec![
            format!(" time steps: epoch {}, iteration {} first, then older ", e + 1, i + 1),
            format!(" time steps: e{} i{} first ", e + 1, i + 1),
        ],
        None => vec![" time steps (no records yet) ".into(), " no records yet ".into()],
    };
    let title = first_fitting(&titles, room);
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
    // Two lines per worker under the header's two: those that fit.
    let workers = s.workers().len();
    let fit_workers = ((grid.height.saturating_sub(4) / 2) as usize).min(workers);
    let first = from.min(workers - fit_workers);
    for w in (first..first + fit_workers).map(|w| w as u32) {
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
        std::iter::once(Constraint::Length(label)).chain(cols.iter().map(|_| Constraint::Length(CELL))).collect();
    let mut block = Block::bordered().title(title);
    if let Some(note) = shown_note(first, fit_workers, workers, "workers", inner_width) {
        block = block.title_bottom(note);
    }
    frame.render_widget(Table::new(rows, widths).header(header).block(block), grid);
    let text = [
        " miss = remote / requested feature rows of the step (- none requested, … not in yet)",
        " rcv = bytes the worker received in the step (all categories)",
        " colour: miss < 10% green, < 30% yellow, else red; e/i/t: epoch, iteration, step",
    ]
    .map(|l| Line::from(elide(l, legend.width.into())));
    frame.render_widget(Paragraph::new(text.to_vec()).style(Style::new().dim()), legend);
    fit_workers
}
