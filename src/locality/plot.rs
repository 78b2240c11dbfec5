//! `--plot FILE.svg`: grouped bars of micrograph locality per S with the R_sub
//! line, and one panel per (method, sampling, depth) comparing the miss rates
//! of model-centric, micrograph and pregather training.

use super::report::{Report, Row};
use crate::format::write_atomic;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

const SERIES: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const STRATEGIES: [(&str, RGBColor); 3] = [
    ("model-centric", RGBColor(127, 127, 127)),
    ("micrograph", RGBColor(31, 119, 180)),
    ("pregather", RGBColor(44, 160, 44)),
];

const WIDTH: u32 = 1100;
const TOP: u32 = 520;
const PANEL: u32 = 280;
/// Pixels a chart loses to its caption, axis labels and margins, and each legend line takes.
const CHROME: u32 = 100;
const LEGEND_LINE: u32 = 16;

/// The top of a percentage axis on an area `height` pixels tall: past 100 % by
/// as much as a legend of `entries` lines needs, so that it never hides a bar.
fn y_top(height: u32, entries: usize) -> f64 {
    let plot = height.saturating_sub(CHROME).max(1) as f64;
    let legend = (entries as u32 * LEGEND_LINE + 20) as f64;
    100.0 * plot / (plot - legend).max(plot / 4.0)
}

/// Draws the figure for `report` and writes it to `path` atomically.
pub fn write_plot(report: &Report, path: &Path) -> anyhow::Result<()> {
    let svg = render(report)?;
    write_atomic(path, svg.as_bytes())?;
    Ok(())
}

/// (method, sampling, layers) of a row: one bar series / one miss panel.
fn series_of(r: &Row) -> String {
    format!("{} {}-wise {}L", r.method, r.sampling, r.layers)
}

fn render(report: &Report) -> anyhow::Result<String> {
    let mut series: Vec<String> = Vec::new();
    let mut parts: Vec<usize> = Vec::new();
    for r in &report.rows {
        let s = series_of(r);
        if !series.contains(&s) {
            series.push(s);
        }
        if !parts.contains(&r.parts) {
            parts.push(r.parts);
        }
    }
    parts.sort_unstable();
    let panel_rows = series.len().div_ceil(2) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, TOP + panel_rows * PANEL)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (top, bottom) = root.split_vertically(TOP);
        locality_chart(&top, report, &series, &parts)?;
        let panels = bottom.split_evenly((panel_rows as usize, 2));
        for (name, area) in series.iter().zip(&panels) {
            miss_chart(area, report, name, &parts)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the plot: {e}")
}

/// Bar `j` of `of` bars in group `g` (groups are centred on integers).
fn bar(g: usize, j: usize, of: usize, height: f64) -> [(f64, f64); 2] {
    let w = 0.8 / of as f64;
    let x0 = g as f64 - 0.4 + j as f64 * w;
    [(x0, 0.0), (x0 + w * 0.9, height)]
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Axes with groups of bars centred on 0, 1, ... labelled by S, and percentages up.
fn axes<'a, 'b: 'a>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    y_desc: &str,
    parts: &[usize],
    legend_entries: usize,
) -> anyhow::Result<Chart<'a, 'b>> {
    let top = y_top(area.dim_in_pixel().1, legend_entries);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(-0.5..parts.len() as f64 - 0.5, 0.0..top)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(parts.len())
        .x_label_formatter(&|x: &f64| {
            let k = x.round();
            match parts.get(k as usize) {
                Some(s) if (x - k).abs() < 1e-6 && k >= 0.0 => format!("S = {s}"),
                _ => String::new(),
            }
        })
        .y_labels(12)
        .y_label_formatter(&|y: &f64| if *y <= 100.0 { format!("{y:.0}") } else { String::new() })
        .y_desc(y_desc)
        .draw()
        .map_err(plot_error)?;
    Ok(chart)
}

fn locality_chart(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    series: &[String],
    parts: &[usize],
) -> anyhow::Result<()> {
    let caption = format!("Data locality in micrographs: {}", report.dataset);
    let mut chart = axes(area, &caption, "locality (%)", parts, series.len() + 1)?;
    for (j, name) in series.iter().enumerate() {
        let color = SERIES[j % SERIES.len()];
        let bars = report.rows.iter().filter(|r| &series_of(r) == name).filter_map(|r| {
            let g = parts.iter().position(|&p| p == r.parts)?;
            Some(Rectangle::new(bar(g, j, series.len(), r.locality_pct), color.filled()))
        });
        bar_series(&mut chart, bars, name, color)?;
    }
    let r_sub: Vec<(f64, f64)> = parts.iter().enumerate().map(|(g, &s)| (g as f64, 100.0 / s as f64)).collect();
    chart
        .draw_series(std::iter::once(PathElement::new(r_sub.clone(), BLACK.stroke_width(2))))
        .map_err(plot_error)?
        .label("R_sub = 100/S")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    chart.draw_series(r_sub.iter().map(|&p| Circle::new(p, 3, BLACK.filled()))).map_err(plot_error)?;
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn miss_chart(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    name: &str,
    parts: &[usize],
) -> anyhow::Result<()> {
    let mut chart = axes(area, &format!("{name}: miss rate"), "remote rows (%)", parts, STRATEGIES.len())?;
    for (j, (label, color)) in STRATEGIES.into_iter().enumerate() {
        let bars = report.rows.iter().filter(|r| series_of(r) == name).filter_map(|r| {
            let g = parts.iter().position(|&p| p == r.parts)?;
            let miss = [r.miss_model_centric, r.miss_micrograph, r.miss_pregather][j];
            Some(Rectangle::new(bar(g, j, STRATEGIES.len(), 100.0 * miss), color.filled()))
        });
        bar_series(&mut chart, bars, label, color)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Draws one series of bars, with a legend entry.
fn bar_series(
    chart: &mut Chart<'_, '_>,
    bars: impl Iterator<Item = Rectangle<(f64, f64)>>,
    label: &str,
    color: RGBColor,
) -> anyhow::Result<()> {
    chart
        .draw_series(bars)
        .map_err(plot_error)?
        .label(label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    Ok(())
}

fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, at: SeriesLabelPosition) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}
