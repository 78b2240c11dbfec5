//! VARCO against fixed ratios and no compression: for each dataset and
//! partition method (4 parts), trains `--strategy varco` with `--compression
//! none`, `variable` (the authors' r_max 128, r_min 1.5, slope 5) and fixed
//! ratios 4, 16 and 64, all for the same steps, and reports final test
//! accuracy against the halo bytes of training; for each fixed ratio also the
//! accuracy variable compression had when its own training bytes reached
//! that run's total (equal bytes). Both once by the last step's test accuracy
//! and once by the test accuracy at the best validation step (for variable:
//! the best among its steps within that run's bytes), since runs without
//! dropout can peak and decline, which favours whichever side stops earlier.
//! Writes `table.md` and `accuracy-bytes.svg` (one point per run; variable's
//! per-step path as a line).
//!
//!     VARCO_DATASETS=cora,facebook VARCO_STEPS=100 VARCO_HIDDEN=64 cargo bench --bench varco_sweep
//!
//! Defaults: cora, metis and random, 100 steps, hidden 64 (the authors ran
//! 300 steps at hidden 256; give VARCO_STEPS=300 VARCO_HIDDEN=256 to match),
//! seed 0 (VARCO_SEED);
//! output in target/varco-sweep/ (VARCO_OUT). Datasets: cora and facebook
//! come from ../shared/datasets, synthetic-* are generated.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::{env_or, leapgnn};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const RUNS: [(&str, &[&str]); 5] = [
    ("none", &["--compression", "none"]),
    ("variable", &["--compression", "variable"]),
    ("fixed 4", &["--ratio", "4"]),
    ("fixed 16", &["--ratio", "16"]),
    ("fixed 64", &["--ratio", "64"]),
];
const COLORS: [RGBColor; 5] = [
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn fetch(data: &Path, name: &str) {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    let from = |p: &str| shared.join(p).display().to_string();
    let args: Vec<String> = match name {
        "cora" => ["download", "cora", "--from", &from("planetoid/converted/cora"), "--format", "text"]
            .map(String::from)
            .to_vec(),
        "facebook" => ["download", "facebook", "--from", &from("musae-facebook")].map(String::from).to_vec(),
        other => vec!["download".into(), other.into()],
    };
    leapgnn(data, &args.iter().map(String::as_str).collect::<Vec<_>>());
}

/// One step of a run: cumulative training halo bytes, test and validation accuracy.
struct Step {
    bytes: f64,
    test: f64,
    val: f64,
}

/// One run, step by step.
struct Run {
    label: &'static str,
    path: Vec<Step>,
}

impl Run {
    fn bytes(&self) -> f64 {
        self.path.last().map_or(0.0, |p| p.bytes)
    }
    fn accuracy(&self) -> f64 {
        self.path.last().map_or(0.0, |p| p.test)
    }
    /// The steps (numbered from 1) whose cumulative bytes are within `budget`.
    fn within(&self, budget: f64) -> impl Iterator<Item = (usize, &Step)> {
        self.path.iter().enumerate().take_while(move |(_, p)| p.bytes <= budget).map(|(i, p)| (i + 1, p))
    }
    /// Accuracy after the last step whose cumulative bytes are within `budget`.
    fn at_bytes(&self, budget: f64) -> Option<(usize, f64)> {
        self.within(budget).last().map(|(step, p)| (step, p.test))
    }
    /// Test accuracy at the best validation step (the first, on ties) among
    /// those whose cumulative bytes are within `budget`.
    fn best_within(&self, budget: f64) -> Option<(usize, f64)> {
        self.within(budget)
            .fold(None, |best: Option<(usize, &Step)>, (step, p)| match best {
                Some((_, b)) if b.val >= p.val => best,
                _ => Some((step, p)),
            })
            .map(|(step, p)| (step, p.test))
    }
}

fn train(
    data: &Path,
    dataset: &str,
    partition: &str,
    (steps, hidden, seed): (&str, &str, &str),
    label: &'static str,
    extra: &[&str],
) -> Run {
    let base = ["train", dataset, "--no-tui", "--strategy", "varco", "--workers", "4", "--partition", partition];
    let s = leapgnn(data, &[&base[..], &["--epochs", steps, "--hidden", hidden, "--seed", seed], extra].concat());
    let metrics = data.join("runs").join(s["run"].as_str().expect("run name")).join("metrics.jsonl");
    let mut per_step = vec![0f64; s["history"].as_array().expect("history").len()];
    for line in std::fs::read_to_string(metrics).expect("metrics").lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("record");
        per_step[r["epoch"].as_u64().expect("epoch") as usize] +=
            r["bytes_out"]["activations"].as_f64().expect("bytes");
    }
    let mut total = 0.0;
    let path = per_step
        .iter()
        .zip(s["history"].as_array().expect("history"))
        .map(|(b, h)| {
            total += b;
            let accuracy = |key: &str| h[key].as_f64().expect("accuracy");
            Step { bytes: total, test: accuracy("test_accuracy"), val: accuracy("val_accuracy") }
        })
        .collect();
    Run { label, path }
}

fn main() {
    let datasets = env_or("VARCO_DATASETS", "cora");
    let partitions = env_or("VARCO_PARTITIONS", "metis,random");
    let (steps, hidden) = (env_or("VARCO_STEPS", "100"), env_or("VARCO_HIDDEN", "64"));
    let seed = env_or("VARCO_SEED", "0");
    let out = PathBuf::from(env_or("VARCO_OUT", concat!(env!("CARGO_MANIFEST_DIR"), "/target/varco-sweep")));
    std::fs::create_dir_all(&out).expect("output dir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path();
    let mut table = format!(
        "SAGE (mean), 3 layers, hidden {hidden}, no dropout, Adam lr 0.01, {steps} steps, 4 workers, \
         seed {seed}; bytes: halo exchange of training (activations), all workers; best val.: test \
         accuracy at the best validation step\n\n\
         | dataset | parts | compression | test acc. | MB | variable at equal bytes (step) | \
         test acc., best val. (step) | variable at equal bytes, best val. (step) |\n\
         |---|---|---|---|---|---|---|---|\n"
    );
    let mut panels: Vec<(String, Vec<Run>)> = Vec::new();
    for dataset in datasets.split(',') {
        fetch(data, dataset);
        for partition in partitions.split(',') {
            let runs: Vec<Run> = RUNS
                .iter()
                .map(|(label, extra)| {
                    eprintln!("{dataset} {partition}-4 {label} ...");
                    train(data, dataset, partition, (&steps, &hidden, &seed), label, extra)
                })
                .collect();
            let variable = &runs[1];
            for r in &runs {
                let fixed = r.label.starts_with("fixed");
                let cell = |at: Option<(usize, f64)>| match (fixed, at) {
                    (true, Some((step, acc))) => format!("{acc:.4} ({step})"),
                    (true, None) => "- (its first step is above)".into(),
                    (false, _) => String::new(),
                };
                let (equal, equal_best) = (cell(variable.at_bytes(r.bytes())), cell(variable.best_within(r.bytes())));
                let (step, best) = r.best_within(f64::INFINITY).unwrap_or_default();
                table += &format!(
                    "| {dataset} | {partition}-4 | {} | {:.4} | {:.1} | {equal} | {best:.4} ({step}) | {equal_best} |\n",
                    r.label,
                    r.accuracy(),
                    r.bytes() / 1e6
                );
            }
            panels.push((format!("{dataset}, {partition}-4"), runs));
            // Written after every panel, so a sweep cut short keeps what it finished.
            std::fs::write(out.join("table.md"), &table).expect("write table");
            plot(&out.join("accuracy-bytes.svg"), &panels);
        }
    }
    print!("{table}");
    eprintln!("wrote {} and {}", out.join("table.md").display(), out.join("accuracy-bytes.svg").display());
}

/// Test accuracy against training halo MB (log scale), one panel per dataset and partition.
fn plot(path: &Path, panels: &[(String, Vec<Run>)]) {
    let root = SVGBackend::new(path, (800, 380 * panels.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).expect("fill");
    for ((title, runs), area) in panels.iter().zip(root.split_evenly((panels.len().max(1), 1))) {
        let mb = |b: f64| (b / 1e6).max(1e-3);
        let lo = runs.iter().flat_map(|r| r.path.first()).map(|p| mb(p.bytes)).fold(f64::INFINITY, f64::min);
        let hi = runs.iter().map(|r| mb(r.bytes())).fold(0.0, f64::max);
        let acc_lo = runs.iter().map(Run::accuracy).fold(1.0, f64::min);
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), (acc_lo - 0.1).max(0.0)..1.0)
            .expect("chart");
        chart.configure_mesh().x_desc("training halo exchange, MB (log)").y_desc("test accuracy").draw().expect("mesh");
        let variable = &runs[1];
        chart
            .draw_series(std::iter::once(PathElement::new(
                variable.path.iter().map(|p| (mb(p.bytes), p.test)).collect::<Vec<_>>(),
                COLORS[1].mix(0.4),
            )))
            .expect("path")
            .label("variable, per step")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], COLORS[1].mix(0.4)));
        for (r, color) in runs.iter().zip(COLORS) {
            chart
                .draw_series(std::iter::once(Circle::new((mb(r.bytes()), r.accuracy()), 5, color.filled())))
                .expect("point")
                .label(r.label)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()
            .expect("legend");
    }
    root.present().expect("write svg");
}
