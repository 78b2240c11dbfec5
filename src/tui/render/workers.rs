//! The per-worker tables: which step and model each worker is on, where its
//! feature rows came from this epoch, and its traffic per category.

use crate::comm::Category;
use crate::tui::fmt::{bytes, count, rate};
use crate::tui::state::{DashboardState, WorkerRow};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table};

/// A column: its header, width, and how a worker fills it.
struct Col {
    title: &'static str,
    width: u16,
    cell: Box<dyn Fn(&WorkerRow) -> String>,
}

fn col(title: &'static str, width: u16, cell: impl Fn(&WorkerRow) -> String + 'static) -> Col {
    Col { title, width, cell: Box::new(cell) }
}

/// Where the rows came from: step, model, counts and this epoch's miss rate.
fn row_columns() -> Vec<Col> {
    vec![
        col("wkr", 3, |w| w.worker.to_string()),
        col("t", 2, |w| w.time_step.to_string()),
        col("model", 5, |w| w.model.to_string()),
        col("req", 6, |w| count(w.rows.requested)),
        col("local", 6, |w| count(w.rows.local)),
        col("cache", 6, |w| count(w.rows.cache_hit)),
        col("remote", 6, |w| count(w.rows.remote)),
        col("miss", 6, |w| rate(w.miss_rate())),
    ]
}

const SHORT: [&str; 5] = ["feat/s", "grad/s", "migr/s", "act/s", "ctrl/s"];

/// Columns in priority order that fit `width`, given the spacing between them.
fn fitting(cols: Vec<Col>, width: u16) -> Vec<Col> {
    let mut used = 0u16;
    cols.into_iter()
        .take_while(|c| {
            let need = if used == 0 { c.width } else { c.width + 1 };
            used += need;
            used <= width
        })
        .collect()
}

fn table(frame: &mut Frame, area: Rect, title: String, cols: Vec<Col>, workers: &[WorkerRow]) {
    let cols = fitting(cols, area.width.saturating_sub(2));
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let header = Row::new(cols.iter().map(|c| right(c.title.to_string())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let rows = workers.iter().map(|w| {
        Row::new(cols.iter().map(|c| right(if w.seen || c.title == "wkr" { (c.cell)(w) } else { "-".into() })))
    });
    let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.width)).collect();
    frame.render_widget(
        Table::new(rows, widths).header(header).column_spacing(1).block(Block::bordered().title(title)),
        area,
    );
}

fn epoch_title(s: &DashboardState, what: &str) -> String {
    let epoch = s.position().map_or(String::new(), |(e, _)| format!(", epoch {}", e + 1));
    format!(" {what}{epoch}: miss {} ", rate(s.epoch_rows().miss_rate()))
}

/// The overview's table: rows, then traffic (in + out) per category as width allows.
pub fn compact(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let mut cols = row_columns();
    for (c, title) in Category::ALL.into_iter().zip(SHORT) {
        cols.push(col(title, 7, move |w| bytes(w.traffic(c))));
    }
    table(frame, area, epoch_title(s, "workers"), cols, s.workers());
}

/// The workers view: the row table, then bytes/s in and out per category.
pub fn detail(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let h = s.workers().len() as u16 + 3;
    let [rows, traffic] = Layout::vertical([Constraint::Max(h), Constraint::Fill(1)]).areas(area);
    let mut cols = row_columns();
    cols.push(col("step miss", 9, |w| rate(w.step_miss_rate)));
    table(frame, rows, epoch_title(s, "feature rows"), cols, s.workers());

    let mut cols = vec![col("wkr", 3, |w| w.worker.to_string())];
    for c in Category::ALL {
        cols.push(col(c.name(), 13, move |w| {
            let (i, o) = w.rate(c);
            format!("{}/{}", bytes(i), bytes(o))
        }));
    }
    table(frame, traffic, " bytes/s in/out over the last 32 steps ".into(), cols, s.workers());
}
