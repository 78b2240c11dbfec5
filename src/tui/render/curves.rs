//! Loss per iteration and accuracy per epoch as line charts, with the epoch table.

use super::columns::{self, Keep};
use crate::metrics::EpochRecord;
use crate::tui::fmt::{first_fitting, loss as fmt_loss, pct};
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::Line;
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, LegendPosition};

/// Width of the epoch table with every column.
const TABLE: u16 = 46;
/// Below this height the loss chart would be a line of dots: the epoch table takes it all.
const MIN_HEIGHT: u16 = 12;
/// Narrowest accuracy chart worth drawing beside the table.
const MIN_CHART: u16 = 24;

/// How each accuracy line is drawn, and the glyph that names it on the
/// chart's bottom border: under NO_COLOR (or on a monochrome terminal) the lines are told
/// apart by their marks, not their colours.
const VAL: (Marker, &str) = (Marker::Braille, "⠒");
const TEST: (Marker, &str) = (Marker::Dot, "•");

fn bounds(pts: &[(f64, f64)], f: fn(&(f64, f64)) -> f64) -> [f64; 2] {
    let lo = pts.iter().map(f).fold(f64::INFINITY, f64::min);
    let hi = pts.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        [0.0, 1.0]
    } else if hi > lo {
        [lo, hi]
    } else {
        [lo - 0.5, hi + 0.5]
    }
}

fn labels([lo, hi]: [f64; 2], fmt: fn(f64) -> String) -> Vec<Line<'static>> {
    vec![Line::from(fmt(lo)), Line::from(fmt((lo + hi) / 2.0)), Line::from(fmt(hi))]
}

/// Bounds of a count axis (iterations, epochs) on whole numbers, with a
/// label at each end and one in the middle only where that is whole too: the
/// labels of 1..2 epochs read `1 2`, not `1 2 2` (1.5 rounded).
fn count_axis(pts: &[(f64, f64)]) -> ([f64; 2], Vec<Line<'static>>) {
    let [lo, hi] = bounds(pts, |p| p.0);
    let (lo, hi) = (lo.floor().max(0.0), hi.ceil());
    let [lo, hi] = if hi > lo { [lo, hi] } else { [(lo - 1.0).max(0.0), lo + 1.0] };
    let mid = (lo + hi) / 2.0;
    let mut labels = vec![Line::from(format!("{lo:.0}"))];
    if mid.fract() == 0.0 {
        labels.push(Line::from(format!("{mid:.0}")));
    }
    labels.push(Line::from(format!("{hi:.0}")));
    ([lo, hi], labels)
}

fn line<'a>(name: &'a str, (marker, color): (Marker, Color), data: &'a [(f64, f64)]) -> Dataset<'a> {
    Dataset::default().name(name).marker(marker).graph_type(GraphType::Line).style(Style::new().fg(color)).data(data)
}

/// A line chart over the count `x` (its points' first values), its y axis spanning `yb`.
fn chart<'a>(
    block: Block<'a>,
    (x, pts): (&'a str, &[(f64, f64)]),
    lines: Vec<Dataset<'a>>,
    yb: [f64; 2],
    y: fn(f64) -> String,
) -> Chart<'a> {
    // One line needs no legend; accuracies sit high, so theirs goes bottom right
    // (ratatui leaves it out on a small chart: the title names the lines too).
    let legend = (lines.len() > 1).then_some(LegendPosition::BottomRight);
    let (xb, xl) = count_axis(pts);
    Chart::new(lines)
        .legend_position(legend)
        .block(block)
        .x_axis(Axis::default().title(x).bounds(xb).labels(xl))
        .y_axis(Axis::default().bounds(yb).labels(labels(yb, y)))
}

pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let top_height = if area.height < MIN_HEIGHT { Constraint::Length(0) } else { Constraint::Fill(1) };
    let [top, bottom] = Layout::vertical([top_height, Constraint::Fill(1)]).areas(area);
    // Too narrow for both: the table, whose numbers the chart only pictures.
    let table_width = if bottom.width >= TABLE + MIN_CHART { TABLE } else { bottom.width };
    let [acc, table] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(table_width)]).areas(bottom);

    let ipe = s.info.iterations_per_epoch.max(1);
    let loss: Vec<(f64, f64)> =
        s.complete_iterations().map(|i| ((i.epoch * ipe + i.iteration + 1) as f64, i.loss)).collect();
    let yb = bounds(&loss, |p| p.1);
    let lines = vec![line("loss", (Marker::Braille, Color::Magenta), &loss)];
    let title = first_fitting(&[" loss per iteration ".into(), " loss ".into()], top.width.saturating_sub(2).into());
    if top.height > 0 {
        frame.render_widget(chart(Block::bordered().title(title), ("iteration", &loss), lines, yb, fmt_loss), top);
    }

    let val: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.val_accuracy)).collect();
    let test: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.test_accuracy)).collect();
    let (val_name, test_name) = (format!("{} val", VAL.1), format!("{} test", TEST.1));
    let lines = vec![line(&val_name, (VAL.0, Color::Green), &val), line(&test_name, (TEST.0, Color::Cyan), &test)];
    let room = acc.width.saturating_sub(2).into();
    let title = first_fitting(&[" accuracy per epoch ".into(), " accuracy ".into()], room);
    let key = first_fitting(&[format!(" {val_name}  {test_name} "), format!(" {val_name} {test_name} ")], room);
    let pct_axis = |y: f64| format!("{:.0}%", 100.0 * y);
    if acc.width > 0 {
        let block = Block::bordered().title(title).title_bottom(Line::from(key).right_aligned());
        frame.render_widget(chart(block, ("epoch", &val), lines, [0.0, 1.0], pct_axis), acc);
    }

    // A narrow screen keeps the accuracies before the loss and the times.
    let cols = vec![
        columns::col("epoch", 5, 0, |e: &EpochRecord| (e.epoch + 1).to_string()),
        columns::col("loss", 7, 3, |e: &EpochRecord| fmt_loss(e.loss)),
        columns::col("val", 6, 1, |e: &EpochRecord| pct(e.val_accuracy)),
        columns::col("test", 6, 2, |e: &EpochRecord| pct(e.test_accuracy)),
        columns::col("train s", 7, 4, |e: &EpochRecord| format!("{:.1}", e.seconds)),
        columns::col("eval s", 6, 5, |e: &EpochRecord| format!("{:.1}", e.eval_seconds)),
    ];
    let rows: Vec<&EpochRecord> = s.epochs().iter().collect();
    columns::draw(frame, table, (" epochs ".into(), "epochs"), cols, &rows, (Keep::Last, 0));
}
