//! Tables whose columns give way by importance on a narrow screen: the
//! numbers that matter most stay whole, and the display order stays as read.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table};

/// A column: its header, width, how soon it gives way (0: last), and how a row fills it.
pub struct Col<T> {
    pub title: &'static str,
    pub width: u16,
    pub rank: u8,
    pub cell: Box<dyn Fn(&T) -> String>,
}

pub fn col<T>(title: &'static str, width: u16, rank: u8, cell: impl Fn(&T) -> String + 'static) -> Col<T> {
    Col { title, width, rank, cell: Box::new(cell) }
}

/// The columns that fit `width` with one space between them, the lowest
/// ranks first, in their own order.
pub fn fitting<T>(cols: Vec<Col<T>>, width: u16) -> Vec<Col<T>> {
    let mut by_rank: Vec<usize> = (0..cols.len()).collect();
    by_rank.sort_by_key(|&i| (cols[i].rank, i));
    let mut used = 0u16;
    let mut keep = vec![false; cols.len()];
    for i in by_rank {
        let need = cols[i].width + u16::from(used > 0);
        if used + need > width {
            break;
        }
        used += need;
        keep[i] = true;
    }
    cols.into_iter().zip(keep).filter_map(|(c, k)| k.then_some(c)).collect()
}

/// Which rows a table keeps when not all fit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    First,
    /// The newest, at the end (epochs).
    Last,
}

/// A bordered table of the rows that fit under its header, the columns that
/// fit beside each other; which rows are shown of how many goes on the bottom
/// border, so a short screen never passes for the whole list. `Keep::First`
/// tables start at row `from` (the viewer's scroll), moved up as far as
/// needed to fill the table. Returns how many rows fit.
pub fn draw<T>(
    frame: &mut Frame,
    area: Rect,
    (title, what): (String, &str),
    cols: Vec<Col<T>>,
    rows: &[&T],
    (keep, from): (Keep, usize),
) -> usize {
    let cols = fitting(cols, area.width.saturating_sub(2));
    let total = rows.len();
    let fit = (area.height.saturating_sub(3) as usize).min(total);
    let first = if keep == Keep::First { from.min(total - fit) } else { total - fit };
    let mut block = Block::bordered().title(title);
    if let Some(note) = shown_note(first, fit, total, what, area.width.saturating_sub(2)) {
        block = block.title_bottom(note);
    }
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let header = Row::new(cols.iter().map(|c| right(c.title.to_string())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let shown = &rows[first..first + fit];
    let rows: Vec<Row> = shown.iter().map(|r| Row::new(cols.iter().map(|c| right((c.cell)(r))))).collect();
    let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.width)).collect();
    frame.render_widget(Table::new(rows, widths).header(header).column_spacing(1).block(block), area);
    fit
}

/// The bottom border's note when rows `first..first + fit` of `total` are
/// shown (none when all are): the range once scrolled, so the viewer sees
/// where in the list the table is.
pub fn shown_note(first: usize, fit: usize, total: usize, what: &str, room: u16) -> Option<Line<'static>> {
    if fit >= total {
        return None;
    }
    let range = if first == 0 { fit.to_string() } else { format!("{}-{}", first + 1, first + fit) };
    let note = crate::tui::fmt::first_fitting(
        &[format!(" {range} of {total} {what} shown "), format!(" {range}/{total} ")],
        room as usize,
    );
    Some(Line::from(note).right_aligned())
}
