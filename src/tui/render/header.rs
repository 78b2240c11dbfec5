use crate::tui::fmt::{duration, loss, pct};
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Two lines: what runs, and how far it is.
pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let i = &s.info;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let sep = || Span::raw(" │ ").dim();
    let what = Line::from(vec![
        Span::styled(" leapgnn", bold.fg(Color::Cyan)),
        sep(),
        Span::styled(i.dataset.clone(), bold),
        sep(),
        // The engine beside the strategy: model-centric trains in either.
        Span::raw(match &i.mode {
            Some(mode) => format!("{} · {mode}", i.strategy),
            None => i.strategy.clone(),
        }),
        sep(),
        Span::raw(i.model.clone()),
        sep(),
        Span::raw(format!("W {}", i.workers)),
        sep(),
        Span::raw(format!("T {}", i.time_steps)),
        sep(),
        Span::raw(format!("run {}", i.run)).dim(),
    ]);

    let mut progress = vec![Span::raw(" ")];
    if s.stopping && !s.finished {
        progress
            .push(Span::styled(" STOPPING: checkpoint, then exit ", Style::new().fg(Color::Black).bg(Color::Yellow)));
        progress.push(Span::raw("  "));
    } else if s.finished {
        progress.push(Span::styled(" DONE ", Style::new().fg(Color::Black).bg(Color::Green)));
        progress.push(Span::raw("  "));
    }
    let (epoch, iteration) = match s.position() {
        Some((e, it)) => (e + 1, it + 1),
        None => (i.start_epoch + 1, i.start_iteration),
    };
    let field = |label: &str, value: String| [Span::raw(format!("{label} ")).dim(), Span::styled(value, bold)];
    // RETEXO: its epochs are rounds of one stage (layer) after another.
    if let Some((stage, stages)) = i.stage_of(epoch) {
        progress.extend(field("stage", format!("{stage}/{stages}")));
        progress.push(Span::raw("  "));
    }
    progress.extend(field("epoch", format!("{epoch}/{}", i.epochs)));
    progress.push(Span::raw("  "));
    progress.extend(field("iter", format!("{iteration}/{}", i.iterations_per_epoch)));
    progress.push(Span::raw("  "));
    progress.extend(field("ETA", s.eta_seconds().map_or("--".into(), duration)));
    if let Some(l) = s.last_loss() {
        progress.push(Span::raw("  "));
        progress.extend(field("loss", loss(l)));
    }
    if let Some(e) = s.epochs().last() {
        progress.push(Span::raw("  "));
        progress.extend(field("val", pct(e.val_accuracy)));
        progress.push(Span::raw("  "));
        progress.extend(field("test", pct(e.test_accuracy)));
    }
    if let Some(secs) = s.iteration_seconds() {
        progress.push(Span::raw("  "));
        progress.extend(field("it/s", format!("{:.2}", 1.0 / secs)));
    }
    frame.render_widget(Paragraph::new(vec![what, Line::from(progress)]), area);
}
