//! `bench.svg`: speed-up over model-centric against the link rate (one line
//! per strategy: where it falls to 1, features stopped being the bottleneck)
//! and the epoch seconds of every strategy at every rate.

use super::report::BenchReport;
use crate::format::write_atomic;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
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

/// Most ticks on a value axis.
const MAX_TICKS: usize = 8;

/// The ticks of a value axis from 0 to `top`: multiples of a 1-2-5 step, at most
/// MAX_TICKS + 1 of them. The axes are given these instead of plotters' own f64
/// key points, whose search loops forever on an infinite range or one too
/// narrow for its step to stay a normal number.
fn ticks(top: f64) -> Vec<f64> {
    if !(top.is_normal() && top > 0.0) {
        return vec![0.0];
    }
    let most = MAX_TICKS as f64;
    let magnitude = 10f64.powi((top / most).log10().floor() as i32);
    let step =
        [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| s.is_normal() && top / s <= most).unwrap_or(top);
    (0..=MAX_TICKS).map(|i| i as f64 * step).take_while(|v| *v <= top).collect()
}

/// The top of a value axis over values up to `max`, with room for the legend; finite.
fn axis_top(max: f64) -> f64 {
    (max * 1.25).min(f64::MAX)
}

/// A value axis from 0 to `top` that draws `ticks(top)`: plotters' own f64
/// axis maps values as this one does, but searches its ticks itself.
struct ValueAxis {
    range: RangedCoordf64,
    ticks: Vec<f64>,
}

impl ValueAxis {
    fn up_to(top: f64) -> Self {
        ValueAxis { range: (0.0..top).into(), ticks: ticks(top) }
    }
}

impl Ranged for ValueAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // The ticks once, as bold lines; no light ones between them.
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
}

impl ValueFormatter<f64> for ValueAxis {
    fn format(value: &f64) -> String {
        RangedCoordf64::format(value)
    }
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

        let top = axis_top(report.rows.iter().filter_map(|r| r.speedup).fold(1.0f64, f64::max));
        let mut chart = ChartBuilder::on(&left)
            .caption(
                format!("Speed-up over model-centric, {} x {}", report.workers, report.dataset),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(-0.3..(n - 0.7).max(0.3), ValueAxis::up_to(top))
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

        let top = axis_top(report.rows.iter().map(|r| r.epoch_seconds).fold(0.0f64, f64::max).max(1e-3));
        let mut chart = ChartBuilder::on(&right)
            .caption("Epoch seconds", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(-0.5..n - 0.5, ValueAxis::up_to(top))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::BenchRow;

    #[test]
    fn ticks_are_few_and_within_the_axis_for_any_top() {
        for top in [1.25, 0.00125, 1e-300, 1e-310, 5e-324, 1e300, f64::MAX, 7.0, 80.0, f64::INFINITY, 0.0] {
            let t = ticks(top);
            assert!(!t.is_empty() && t.len() <= MAX_TICKS + 1, "{top}: {t:?}");
            assert!(t.windows(2).all(|w| w[0] < w[1]) && t.iter().all(|v| *v >= 0.0), "{top}: {t:?}");
            assert!(t.iter().all(|v| *v <= top) || t == [0.0], "{top}: {t:?}");
        }
        assert_eq!(ticks(10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    /// Finite values at the edges of f64 are drawn, not searched forever for
    /// their axis ticks (plotters' own search did not end for these).
    #[test]
    fn the_plot_of_extreme_finite_values_is_written() {
        for (secs, speedup) in [(f64::MAX, f64::MAX), (5e-324, 1e308), (1e-310, 5e-324), (1e300, 1.0)] {
            let row = |strategy: &str, speedup| BenchRow {
                rate: "1gbit".into(),
                strategy: strategy.into(),
                variant: None,
                prefetch: false,
                epoch_seconds: secs,
                speedup,
                features_per_epoch: 0.0,
                train_features_per_epoch: None,
                gradients_per_epoch: 0.0,
                migration_per_epoch: 0.0,
                activations_per_epoch: 0.0,
                miss_rate: None,
                test_accuracy: None,
                time_steps: 1,
            };
            let report = BenchReport {
                dataset: "d".into(),
                workers: 2,
                rows: vec![row("model-centric", Some(1.0)), row("leapgnn", Some(speedup))],
            };
            let dir = tempfile::tempdir().unwrap();
            let (done, finished) = std::sync::mpsc::channel();
            let at = dir.path().to_path_buf();
            std::thread::spawn(move || done.send(write_plots(&report, &at).map_err(|e| e.to_string())));
            let written = finished.recv_timeout(std::time::Duration::from_secs(60));
            assert!(matches!(written, Ok(Ok(_))), "{secs} s, {speedup}x: {written:?}");
        }
    }
}
