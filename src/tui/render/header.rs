use crate::tui::fmt::{duration, elide, loss, pct, width};
use crate::tui::state::DashboardState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Shortest a dataset or run name is elided to before other parts give way.
const MIN_NAME: usize = 8;

/// Two lines: what runs, and how far it is. Each fits the width: names are
/// elided with `…`, then whole parts give way, never a number cut short.
pub fn draw(frame: &mut Frame, area: Rect, s: &DashboardState) {
    let max = area.width as usize;
    frame.render_widget(Paragraph::new(vec![what(s, max), progress(s, max)]), area);
}

/// The run: dataset, strategy, model, W, T and run name. A long dataset or
/// run name is elided (the longer first); then the label, model and run go.
fn what(s: &DashboardState, max: usize) -> Line<'static> {
    let i = &s.info;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    // The engine beside the strategy: model-centric trains in either.
    let strategy = match &i.mode {
        Some(mode) => format!("{} · {mode}", i.strategy),
        None => i.strategy.clone(),
    };
    let mut label = true;
    let (mut model, mut run) = (true, true);
    loop {
        let fixed: Vec<String> = [
            label.then(|| "leapgnn".to_string()),
            Some(strategy.clone()),
            model.then(|| i.model.clone()),
            Some(format!("W {}", i.workers)),
            Some(format!("T {}", s.time_steps())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let names = 1 + usize::from(run);
        // One space at the left, " │ " between parts, "run " before the run name.
        let used =
            1 + fixed.iter().map(|p| width(p)).sum::<usize>() + 3 * (fixed.len() + names - 1) + 4 * usize::from(run);
        let room = max.saturating_sub(used);
        let (dataset_w, run_w) = (width(&i.dataset), if run { width(&i.run) } else { 0 });
        if room < MIN_NAME * names && (label || model || run) {
            // Give way in this order: the program's name, the run's, the model.
            if label {
                label = false;
            } else if run {
                run = false;
            } else {
                model = false;
            }
            continue;
        }
        // The room left shared out: a short name keeps all of its own.
        let run_room = if run { run_w.min(room.saturating_sub(dataset_w.min(room / 2))) } else { 0 };
        let dataset = elide(&i.dataset, room - run_room.min(room));
        let sep = || Span::raw(" │ ").dim();
        let mut spans = vec![Span::raw(" ")];
        let mut part = |span: Span<'static>| {
            if spans.len() > 1 {
                spans.push(sep());
            }
            spans.push(span);
        };
        if label {
            part(Span::styled("leapgnn", bold.fg(Color::Cyan)));
        }
        part(Span::styled(dataset, bold));
        part(Span::raw(strategy.clone()));
        if model {
            part(Span::raw(i.model.clone()));
        }
        part(Span::raw(format!("W {}", i.workers)));
        part(Span::raw(format!("T {}", s.time_steps())));
        if run {
            part(Span::raw(format!("run {}", elide(&i.run, run_room))).dim());
        }
        return Line::from(spans);
    }
}

/// How far the run is: fields in order of importance, those that do not fit whole left out.
fn progress(s: &DashboardState, max: usize) -> Line<'static> {
    let i = &s.info;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut fields: Vec<Vec<Span<'static>>> = Vec::new();
    if s.stopping && !s.finished {
        let long = format!(" STOPPING {} ", s.stop_when());
        let text = if width(&long) < max { long } else { " STOPPING ".into() };
        fields.push(vec![Span::styled(text, Style::new().fg(Color::Black).bg(Color::Yellow))]);
    } else if s.finished {
        fields.push(vec![Span::styled(" DONE ", Style::new().fg(Color::Black).bg(Color::Green))]);
    }
    let (epoch, iteration) = match s.position() {
        Some((e, it)) => (e + 1, it + 1),
        None => (i.start_epoch + 1, i.start_iteration),
    };
    let field = |label: &str, value: String| vec![Span::raw(format!("{label} ")).dim(), Span::styled(value, bold)];
    // RETEXO: its epochs are rounds of one stage (layer) after another.
    if let Some((stage, stages)) = i.stage_of(epoch) {
        fields.push(field("stage", format!("{stage}/{stages}")));
    }
    fields.push(field("epoch", format!("{epoch}/{}", i.epochs)));
    fields.push(field("iter", format!("{iteration}/{}", i.iterations_per_epoch)));
    fields.push(field("ETA", s.eta_seconds().map_or("--".into(), duration)));
    if let Some(l) = s.last_loss() {
        fields.push(field("loss", loss(l)));
    }
    if let Some(e) = s.epochs().last() {
        fields.push(field("val", pct(e.val_accuracy)));
        fields.push(field("test", pct(e.test_accuracy)));
    }
    if let Some(secs) = s.iteration_seconds() {
        fields.push(field("it/s", format!("{:.2}", 1.0 / secs)));
    }
    let mut spans = vec![Span::raw(" ")];
    let mut used = 1;
    for f in fields {
        let gap = if spans.len() > 1 { 2 } else { 0 };
        let w: usize = f.iter().map(Span::width).sum();
        if used + gap + w > max {
            break;
        }
        if gap > 0 {
            spans.push(Span::raw("  "));
        }
        spans.extend(f);
        used += gap + w;
    }
    Line::from(spans)
}
