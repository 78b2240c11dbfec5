//! Sparklines: communication and miss rate per time step, loss per iteration,
//! validation accuracy per epoch. Each shows its newest points that fit.

use crate::tui::fmt::{bytes, first_fitting, loss as fmt_loss, pct, rate};
use crate::tui::state::{DashboardState, IterPoint, StepPoint};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Sparkline};

/// A sparkline of the newest points that fit, its scale on the bottom border:
/// bars run from 0 to `max` (or the largest point shown), written by `unit`,
/// over the last n points. A None point, a miss rate of a step that requested
/// no rows, has no bar; when every point shown is one the border says so
/// instead of giving a scale. The title is the first of `titles` (longest
/// first) that fits, and the scale drops its count before its range.
fn spark(
    frame: &mut Frame,
    area: Rect,
    (titles, what): (Vec<String>, &str),
    data: Vec<Option<u64>>,
    (max, unit): (Option<u64>, &dyn Fn(u64) -> String),
    color: Color,
) {
    let keep = Block::bordered().inner(area).width as usize;
    let tail = data[data.len().saturating_sub(keep)..].to_vec();
    let top = max.unwrap_or_else(|| tail.iter().flatten().copied().max().unwrap_or(0));
    let what = if tail.len() == 1 { what.strip_suffix('s').unwrap_or(what) } else { what };
    let scales = match tail.len() {
        0 => vec![String::new()],
        n if tail.iter().all(Option::is_none) => {
            vec![format!(" no rows requested · last {n} {what} "), " no rows requested ".into(), " none ".into()]
        }
        n => vec![format!(" 0..{} · last {n} {what} ", unit(top)), format!(" 0..{} ", unit(top))],
    };
    let (title, scale) = (first_fitting(&titles, keep), first_fitting(&scales, keep));
    let block = Block::bordered().title(title).title_bottom(Line::from(scale).right_aligned());
    let s = Sparkline::default().block(block).data(tail).style(Style::new().fg(color)).max(top.max(1));
    frame.render_widget(s, area);
}

fn halves(area: Rect) -> [Rect; 2] {
    Layout::horizontal([Constraint::Fill(1), Constraint::Fill(1)]).areas(area)
}

/// Bytes sent and miss rate, per (iteration, time step).
pub fn per_step(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let [left, right] = halves(area);
    let steps: Vec<&StepPoint> = s.complete_steps().collect();
    let comm: Vec<Option<u64>> = steps.iter().map(|p| Some(p.bytes.total())).collect();
    let titles = match steps.last() {
        Some(p) => {
            let last = bytes(p.bytes.total() as f64);
            let max = bytes(comm.iter().flatten().copied().max().unwrap_or(0) as f64);
            vec![format!(" comm/step {last} (max {max}) "), format!(" comm/step {last} "), format!(" comm {last} ")]
        }
        None => vec![" comm/step ".into()],
    };
    spark(frame, left, (titles, "steps"), comm, (None, &|b| bytes(b as f64)), Color::Cyan);

    // Per mille against a fixed 100 % so the bars read as rates.
    let miss: Vec<Option<u64>> = steps.iter().map(|p| p.miss_rate().map(|m| (m * 1000.0).round() as u64)).collect();
    let titles = match steps.last() {
        Some(p) => {
            let (step, epoch) = (rate(p.miss_rate()), rate(s.epoch_rows().miss_rate()));
            vec![
                format!(" miss/step {step} · epoch {epoch} "),
                format!(" miss {step} · ep {epoch} "),
                format!(" miss {step} "),
            ]
        }
        None => vec![" miss/step ".into()],
    };
    spark(frame, right, (titles, "steps"), miss, (Some(1000), &|m| pct(m as f64 / 1000.0)), Color::Yellow);
}

/// Loss per iteration and validation accuracy per epoch.
pub fn training(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let [left, right] = halves(area);
    let its: Vec<&IterPoint> = s.complete_iterations().collect();
    // Bars in millionths of the largest loss shown, whatever its size: a
    // fixed unit (1e-4 once) leaves a loss that has fallen below it barless.
    let keep = Block::bordered().inner(left).width as usize;
    let top = its[its.len().saturating_sub(keep)..].iter().map(|i| i.loss).fold(0.0, f64::max);
    let per_unit = if top > 0.0 && top.is_finite() { top / 1e6 } else { 1.0 };
    let loss: Vec<Option<u64>> = its.iter().map(|i| Some((i.loss.max(0.0) / per_unit).round() as u64)).collect();
    let titles = match its.last() {
        Some(last) => {
            let min = its.iter().map(|i| i.loss).fold(f64::INFINITY, f64::min);
            vec![
                format!(" loss {} (min {}) ", fmt_loss(last.loss), fmt_loss(min)),
                format!(" loss {} ", fmt_loss(last.loss)),
            ]
        }
        None => vec![" loss ".into()],
    };
    spark(frame, left, (titles, "iterations"), loss, (None, &|l| fmt_loss(l as f64 * per_unit)), Color::Magenta);

    let eps = s.epochs();
    let val: Vec<Option<u64>> = eps.iter().map(|e| Some((e.val_accuracy * 1000.0).round() as u64)).collect();
    let titles = match eps.last() {
        Some(e) => {
            let best = eps.iter().map(|e| e.val_accuracy).fold(0.0, f64::max);
            let (val, test) = (pct(e.val_accuracy), pct(e.test_accuracy));
            vec![
                format!(" val {val} (best {}) test {test} ", pct(best)),
                format!(" val {val} test {test} "),
                format!(" val {val} "),
            ]
        }
        None => vec![" accuracy: after the first epoch ".into(), " accuracy: later ".into()],
    };
    spark(frame, right, (titles, "epochs"), val, (Some(1000), &|v| pct(v as f64 / 1000.0)), Color::Green);
}
