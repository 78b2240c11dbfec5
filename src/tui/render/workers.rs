//! The per-worker tables: which step and model each worker is on, where its
//! feature rows came from this epoch, and its traffic per category.

use super::columns::{self, Col, Keep};
use crate::comm::Category;
use crate::tui::fmt::{bytes, count, rate};
use crate::tui::state::{DashboardState, WorkerRow};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};

/// A worker's column: `-` until its first record, whatever the column.
fn col(title: &'static str, width: u16, rank: u8, cell: impl Fn(&WorkerRow) -> String + 'static) -> Col<WorkerRow> {
    columns::col(title, width, rank, move |w: &WorkerRow| if w.seen { cell(w) } else { "-".into() })
}

fn worker() -> Col<WorkerRow> {
    columns::col("wkr", 3, 0, |w: &WorkerRow| w.worker.to_string())
}

/// Longest a host name is shown before it is elided with `…`.
const HOST: usize = 16;

/// Where the workers run, when the run says: as wide as the longest name, up
/// to `HOST`. Shown before a worker's first record too.
fn host(s: &DashboardState) -> Option<Col<WorkerRow>> {
    let widest = s.workers().iter().map(|w| crate::tui::fmt::width(&w.host)).max().filter(|&w| w > 0)?;
    let width = widest.clamp(4, HOST);
    Some(columns::col("host", width as u16, 4, move |w: &WorkerRow| elide_host(&w.host, width)))
}

/// `host` cut to `width` columns, keeping an SSH entry's `:port` whole: two
/// entries of one long address differ only there.
fn elide_host(host: &str, width: usize) -> String {
    use crate::tui::fmt::{elide, width as cols};
    let port =
        host.rfind(':').map(|i| &host[i..]).filter(|p| p.len() > 1 && p[1..].bytes().all(|b| b.is_ascii_digit()));
    match port {
        Some(port) if cols(host) > width && port.len() + 2 <= width => {
            elide(&host[..host.len() - port.len()], width - port.len()) + port
        }
        _ => elide(host, width),
    }
}

/// Where the rows came from: host, step, model, counts and this epoch's miss
/// rate. A narrow screen keeps the miss rate and remote rows first.
fn row_columns(s: &DashboardState) -> Vec<Col<WorkerRow>> {
    let mut cols = vec![worker()];
    cols.extend(host(s));
    cols.extend([
        col("t", 2, 4, |w| w.time_step.to_string()),
        col("model", 5, 5, |w| w.model.to_string()),
        col("req", 6, 3, |w| count(w.rows.requested)),
        col("local", 6, 6, |w| count(w.rows.local)),
        col("cache", 6, 7, |w| count(w.rows.cache_hit)),
        col("remote", 6, 2, |w| count(w.rows.remote)),
        col("miss", 6, 1, |w| rate(w.miss_rate())),
    ]);
    cols
}

const SHORT: [&str; 5] = ["feat/s", "grad/s", "migr/s", "act/s", "ctrl/s"];

/// Workers from `from` on (as many as fit); returns how many fit.
fn table(
    frame: &mut Frame,
    area: Rect,
    title: String,
    cols: Vec<Col<WorkerRow>>,
    s: &DashboardState,
    from: usize,
) -> usize {
    let rows: Vec<&WorkerRow> = s.workers().iter().collect();
    columns::draw(frame, area, (title, "workers"), cols, &rows, (Keep::First, from))
}

fn epoch_title(s: &DashboardState, what: &str) -> String {
    let epoch = s.position().map_or(String::new(), |(e, _)| format!(", epoch {}", e + 1));
    format!(" {what}{epoch}: miss {} ", rate(s.epoch_rows().miss_rate()))
}

/// The overview's table: rows, then traffic (in + out) per category as width
/// allows, from worker `from` on. Returns how many workers fit.
pub fn compact(frame: &mut Frame, area: Rect, s: &DashboardState, from: usize) -> usize {
    let mut cols = row_columns(s);
    for (c, title) in Category::ALL.into_iter().zip(SHORT) {
        cols.push(col(title, 7, 8, move |w| bytes(w.traffic(c))));
    }
    table(frame, area, epoch_title(s, "workers"), cols, s, from)
}

/// The workers view: the row table, then bytes/s in and out per category,
/// both from worker `from` on. Returns how many workers a page holds.
pub fn detail(frame: &mut Frame, area: Rect, s: &DashboardState, from: usize) -> usize {
    let h = s.workers().len() as u16 + 3;
    let [rows, traffic] = Layout::vertical([Constraint::Max(h), Constraint::Fill(1)]).areas(area);
    let mut cols = row_columns(s);
    cols.push(col("step miss", 9, 1, |w| rate(w.step_miss_rate)));
    let fit = table(frame, rows, epoch_title(s, "feature rows"), cols, s, from);

    let mut cols = vec![worker()];
    cols.extend(host(s));
    for c in Category::ALL {
        cols.push(col(c.name(), 13, 1, move |w| {
            let (i, o) = w.rate(c);
            format!("{}/{}", bytes(i), bytes(o))
        }));
    }
    // The page of the shorter table, so that End brings the last worker into
    // both; a table squeezed to no rows at all does not count.
    match (fit, table(frame, traffic, " bytes/s in/out over the last 32 steps ".into(), cols, s, from)) {
        (0, f) | (f, 0) => f,
        (a, b) => a.min(b),
    }
}
