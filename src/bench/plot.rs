//! `bench.svg`: speed-up over model-centric against the link rate (one line
//! per strategy: where it falls to 1, features stopped being the bottleneck)
//! and the epoch seconds of every strategy at every rate.

use super::report::BenchReport;
use crate::format::write_atomic;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 6] = [
    RGBColor(127, 127, 127),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the bench plot: {e}")
}

/// Writes `bench.svg` into `dir` (atomically) and returns its path.
pub fn write_plots(report: &BenchReport, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let mut rates: Vec<&str> = Vec::new();
    let mut strategies: Vec<&str> = Vec::new();
    for r in &report.rows {
        if !rates.contains(&r.rate.as_str()) {
            rates.push(&r.rate);
        }
        if !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
    }
    let find = |rate: &str, s: &str| report.rows.iter().find(|r| r.rate == rate && r.strategy == s);
    let n = rates.len() as f64;
    let label = |x: &f64| {
        let k = x.round();
        match rates.get(k as usize) {
            Some(r) if (x - k).abs() < 1e-6 && k >= 0.0 => r.to_string(),
            _ => String::new(),
        }
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (left, right) = root.split_horizontally(550);

        let top = report.rows.iter().filter_map(|r| r.speedup).fold(1.0f64, f64::max) * 1.25;
        let mut chart = ChartBuilder::on(&left)
            .caption(
                format!("Speed-up over model-centric, {} x {}", report.workers, report.dataset),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(-0.3..(n - 0.7).max(0.3), 0.0..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_labels(rates.len().max(2))
            .x_label_formatter(&label)
            .x_desc("link rate per host")
            .y_desc("speed-up (x)")
            .draw()
            .map_err(plot_error)?;
        for (j, s) in strategies.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            let pts: Vec<(f64, f64)> = rates
                .iter()
                .enumerate()
                .filter_map(|(i, rate)| find(rate, s).and_then(|r| r.speedup).map(|v| (i as f64, v)))
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(pts.clone(), color.stroke_width(2))))
                .map_err(plot_error)?
                .label(*s)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], color.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(plot_error)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;

        let top = report.rows.iter().map(|r| r.epoch_seconds).fold(0.0f64, f64::max).max(1e-3) * 1.25;
        let mut chart = ChartBuilder::on(&right)
            .caption("Epoch seconds", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rates.len().max(2))
            .x_label_formatter(&label)
            .x_desc("link rate per host")
            .y_desc("seconds")
            .draw()
            .map_err(plot_error)?;
        let w = 0.8 / strategies.len().max(1) as f64;
        for (j, s) in strategies.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            let bars = rates.iter().enumerate().filter_map(|(i, rate)| {
                let r = find(rate, s)?;
                let x0 = i as f64 - 0.4 + j as f64 * w;
                Some(Rectangle::new([(x0, 0.0), (x0 + w * 0.9, r.epoch_seconds)], color.filled()))
            });
            chart
                .draw_series(bars)
                .map_err(plot_error)?
                .label(*s)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    let path = dir.join("bench.svg");
    write_atomic(&path, svg.as_bytes())?;
    Ok(path)
}
