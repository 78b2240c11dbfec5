//! Sparklines: communication and miss rate per time step, loss per iteration,
//! validation accuracy per epoch. Each shows its newest points that fit.

use crate::tui::fmt::{bytes, loss as fmt_loss, pct, rate};
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
/// instead of giving a scale.
fn spark(
    frame: &mut Frame,
    area: Rect,
    (title, what): (String, &str),
    data: Vec<Option<u64>>,
    (max, unit): (Option<u64>, &dyn Fn(u64) -> String),
    color: Color,
) {
    let keep = Block::bordered().inner(area).width as usize;
    let tail = data[data.len().saturating_sub(keep)..].to_vec();
    let top = max.unwrap_or_else(|| tail.iter().flatten().copied().max().unwrap_or(0));
    let what = if tail.len() == 1 { what.strip_suffix('s').unwrap_or(what) } else { what };
    let scale = match tail.len() {
        0 => String::new(),
        n if tail.iter().all(Option::is_none) => format!(" no rows requested · last {n} {what} "),
        n => format!(" 0..{} · last {n} {what} ", unit(top)),
    };
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
    let title = match steps.last() {
        Some(p) => format!(
            " comm/step {} (max {}) ",
            bytes(p.bytes.total() as f64),
            bytes(comm.iter().flatten().copied().max().unwrap_or(0) as f64)
        ),
        None => " comm/step ".into(),
    };
    spark(frame, left, (title, "steps"), comm, (None, &|b| bytes(b as f64)), Color::Cyan);

    // Per mille against a fixed 100 % so the bars read as rates.
    let miss: Vec<Option<u64>> = steps.iter().map(|p| p.miss_rate().map(|m| (m * 1000.0).round() as u64)).collect();
    let title = match steps.last() {
        Some(p) => format!(" miss/step {} · epoch {} ", rate(p.miss_rate()), rate(s.epoch_rows().miss_rate())),
        None => " miss/step ".into(),
    };
    spark(frame, right, (title, "steps"), miss, (Some(1000), &|m| pct(m as f64 / 1000.0)), Color::Yellow);
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
    let title = match its.last() {
        Some(last) => {
            let min = its.iter().map(|i| i.loss).fold(f64::INFINITY, f64::min);
            format!(" loss {} (min {}) ", fmt_loss(last.loss), fmt_loss(min))
        }
        None => " loss ".into(),
    };
    spark(frame, left, (title, "iterations"), loss, (None, &|l| fmt_loss(l as f64 * per_unit)), Color::Magenta);

    let eps = s.epochs();
    let val: Vec<Option<u64>> = eps.iter().map(|e| Some((e.val_accuracy * 1000.0).round() as u64)).collect();
    let title = match eps.last() {
        Some(e) => {
            let best = eps.iter().map(|e| e.val_accuracy).fold(0.0, f64::max);
            format!(" val {} (best {}) test {} ", pct(e.val_accuracy), pct(best), pct(e.test_accuracy))
        }
        None => " accuracy: after the first epoch ".into(),
    };
    spark(frame, right, (title, "epochs"), val, (Some(1000), &|v| pct(v as f64 / 1000.0)), Color::Green);
}
