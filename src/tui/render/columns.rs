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
/// fit beside each other; how many rows were left out goes on the bottom
/// border, so a short screen never passes for the whole list.
pub fn draw<T>(
    frame: &mut Frame,
    area: Rect,
    (title, what): (String, &str),
    cols: Vec<Col<T>>,
    rows: &[&T],
    keep: Keep,
) {
    let cols = fitting(cols, area.width.saturating_sub(2));
    let total = rows.len();
    let fit = (area.height.saturating_sub(3) as usize).min(total);
    let mut block = Block::bordered().title(title);
    if fit < total {
        let note = crate::tui::fmt::first_fitting(
            &[format!(" {fit} of {total} {what} shown "), format!(" {fit}/{total} ")],
            area.width.saturating_sub(2) as usize,
        );
        block = block.title_bottom(Line::from(note).right_aligned());
    }
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let header = Row::new(cols.iter().map(|c| right(c.title.to_string())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let shown = if keep == Keep::First { &rows[..fit] } else { &rows[total - fit..] };
    let rows: Vec<Row> = shown.iter().map(|r| Row::new(cols.iter().map(|c| right((c.cell)(r))))).collect();
    let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.width)).collect();
    frame.render_widget(Table::new(rows, widths).header(header).column_spacing(1).block(block), area);
}
