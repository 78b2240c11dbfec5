//! Loss per iteration and accuracy per epoch as line charts, with the epoch table.

use crate::tui::fmt::{loss as fmt_loss, pct};
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::Line;
use ratatui::widgets::{Axis, Block, Cell, Chart, Dataset, GraphType, LegendPosition, Row, Table};

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

fn line<'a>(name: &'a str, color: Color, data: &'a [(f64, f64)]) -> Dataset<'a> {
    Dataset::default()
        .name(name)
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(Style::new().fg(color))
        .data(data)
}

/// A line chart over `x`, its y axis spanning `yb`.
fn chart<'a>(
    title: &'a str,
    x: &'a str,
    lines: Vec<Dataset<'a>>,
    xb: [f64; 2],
    yb: [f64; 2],
    y: fn(f64) -> String,
) -> Chart<'a> {
    // One line needs no legend; accuracies sit high, so theirs goes bottom right.
    let legend = (lines.len() > 1).then_some(LegendPosition::BottomRight);
    Chart::new(lines)
        .legend_position(legend)
        .block(Block::bordered().title(title))
        .x_axis(Axis::default().title(x).bounds(xb).labels(labels(xb, |x| format!("{x:.0}"))))
        .y_axis(Axis::default().bounds(yb).labels(labels(yb, y)))
}

pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let [top, bottom] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(area);
    let [acc, table] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(46)]).areas(bottom);

    let ipe = s.info.iterations_per_epoch.max(1);
    let loss: Vec<(f64, f64)> =
        s.complete_iterations().map(|i| ((i.epoch * ipe + i.iteration + 1) as f64, i.loss)).collect();
    let (xb, yb) = (bounds(&loss, |p| p.0), bounds(&loss, |p| p.1));
    let lines = vec![line("loss", Color::Magenta, &loss)];
    frame.render_widget(chart(" loss per iteration ", "iteration", lines, xb, yb, fmt_loss), top);

    let val: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.val_accuracy)).collect();
    let test: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.test_accuracy)).collect();
    let xb = bounds(&val, |p| p.0);
    let lines = vec![line("val", Color::Green, &val), line("test", Color::Cyan, &test)];
    let pct_axis = |y: f64| format!("{:.0}%", 100.0 * y);
    frame.render_widget(chart(" accuracy per epoch ", "epoch", lines, xb, [0.0, 1.0], pct_axis), acc);

    let block = Block::bordered().title(" epochs ");
    let fit = block.inner(table).height.saturating_sub(1) as usize;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let header = Row::new(["epoch", "loss", "val", "test", "train s", "eval s"].map(|h| right(h.into())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let rows = s.epochs().tail(fit).map(|e| {
        Row::new([
            right((e.epoch + 1).to_string()),
            right(fmt_loss(e.loss)),
            right(pct(e.val_accuracy)),
            right(pct(e.test_accuracy)),
            right(format!("{:.1}", e.seconds)),
            right(format!("{:.1}", e.eval_seconds)),
        ])
    });
    let widths = [5, 7, 6, 6, 7, 6].map(Constraint::Length);
    frame.render_widget(Table::new(rows, widths).header(header).column_spacing(1).block(block), table);
}
