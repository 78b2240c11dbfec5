//! Loss per iteration and accuracy per epoch as line charts, with the epoch table.

use crate::tui::fmt::pct;
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::Line;
use ratatui::widgets::{Axis, Block, Cell, Chart, Dataset, GraphType, Row, Table};

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

pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let [top, bottom] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(area);
    let [acc, table] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(46)]).areas(bottom);

    let ipe = s.info.iterations_per_epoch.max(1);
    let loss: Vec<(f64, f64)> =
        s.iterations().iter().map(|i| ((i.epoch * ipe + i.iteration + 1) as f64, i.loss)).collect();
    let (xb, yb) = (bounds(&loss, |p| p.0), bounds(&loss, |p| p.1));
    let chart = Chart::new(vec![
        Dataset::default()
            .name("loss")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Magenta))
            .data(&loss),
    ])
    .block(Block::bordered().title(" loss per iteration "))
    .x_axis(Axis::default().title("iteration").bounds(xb).labels(labels(xb, |x| format!("{x:.0}"))))
    .y_axis(Axis::default().bounds(yb).labels(labels(yb, |y| format!("{y:.3}"))));
    frame.render_widget(chart, top);

    let val: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.val_accuracy)).collect();
    let test: Vec<(f64, f64)> = s.epochs().iter().map(|e| ((e.epoch + 1) as f64, e.test_accuracy)).collect();
    let xb = bounds(&val, |p| p.0);
    let chart = Chart::new(vec![
        Dataset::default()
            .name("val")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Green))
            .data(&val),
        Dataset::default()
            .name("test")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Cyan))
            .data(&test),
    ])
    .block(Block::bordered().title(" accuracy per epoch "))
    .x_axis(Axis::default().title("epoch").bounds(xb).labels(labels(xb, |x| format!("{x:.0}"))))
    .y_axis(Axis::default().bounds([0.0, 1.0]).labels(labels([0.0, 1.0], |y| format!("{:.0}%", 100.0 * y))));
    frame.render_widget(chart, acc);

    let block = Block::bordered().title(" epochs ");
    let fit = block.inner(table).height.saturating_sub(1) as usize;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let header = Row::new(["epoch", "loss", "val", "test", "train s", "eval s"].map(|h| right(h.into())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let rows = s.epochs().tail(fit).map(|e| {
        Row::new([
            right((e.epoch + 1).to_string()),
            right(format!("{:.4}", e.loss)),
            right(pct(e.val_accuracy)),
            right(pct(e.test_accuracy)),
            right(format!("{:.1}", e.seconds)),
            right(format!("{:.1}", e.eval_seconds)),
        ])
    });
    let widths = [5, 7, 6, 6, 7, 6].map(Constraint::Length);
    frame.render_widget(Table::new(rows, widths).header(header).column_spacing(1).block(block), table);
}
