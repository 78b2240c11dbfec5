use crate::BadInput;
use crate::metrics::{Counted, RunSummary};
use std::collections::BTreeMap;
use std::path::Path;

/// One (link rate, strategy) run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    /// As given to tc, e.g. `100mbit`.
    pub rate: String,
    pub strategy: String,
    /// A configuration of the strategy beyond its default run (the file's
    /// `@<variant>`, e.g. `t2-off`: the grid of leapgnn's T and prefetch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// pregather / leapgnn: whether it prefetched.
    pub prefetch: bool,
    /// Mean training seconds per epoch (evaluation excluded).
    pub epoch_seconds: f64,
    /// model-centric's epoch seconds at the same rate / this one's.
    pub speedup: Option<f64>,
    /// Bytes per epoch that crossed a socket, summed over workers
    /// (features: training and evaluation).
    pub features_per_epoch: f64,
    /// Feature bytes of the training steps alone, from the run's step records
    /// (`run-<rate>-<strategy>.metrics.jsonl` next to the summary), if there.
    pub train_features_per_epoch: Option<f64>,
    pub gradients_per_epoch: f64,
    pub migration_per_epoch: f64,
    pub activations_per_epoch: f64,
    /// None for a run that requested no feature rows (full-graph).
    pub miss_rate: Option<f64>,
    /// None for a run stopped before its first evaluation.
    pub test_accuracy: Option<f64>,
    pub time_steps: u32,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    pub dataset: String,
    pub workers: usize,
    /// Rows sorted by rate (slowest link first), then by strategy order of the run.
    pub rows: Vec<BenchRow>,
}

/// Bits per second of a tc rate (`500kbit`, `100mbit`, `1gbit`, `64bit`).
pub fn rate_bits(rate: &str) -> Option<u64> {
    let r = rate.to_ascii_lowercase();
    let (num, mult) = [("gbit", 1_000_000_000u64), ("mbit", 1_000_000), ("kbit", 1_000), ("bit", 1)]
        .iter()
        .find_map(|(suffix, m)| r.strip_suffix(suffix).map(|n| (n.to_string(), *m)))?;
    num.parse::<u64>().ok()?.checked_mul(mult)
}

const STRATEGY_ORDER: [&str; 5] = ["model-centric", "micrograph", "pregather", "leapgnn", "p3"];

/// Reads every `run-<rate>-<strategy>[@<variant>].json` in `dir` (a `train
/// --json` summary each).
pub fn load_runs(dir: &Path) -> Result<BenchReport, BadInput> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| BadInput::new(format!("cannot read the bench directory {}: {e}", dir.display())))?;
    let mut runs: Vec<(String, Option<String>, RunSummary, Counted)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(file_stem) = name.strip_prefix("run-").and_then(|s| s.strip_suffix(".json")) else { continue };
        let (stem, variant) = match file_stem.split_once('@') {
            Some((s, v)) => (s, Some(v.to_string())),
            None => (file_stem, None),
        };
        let path = entry.path();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BadInput::new(format!("cannot read {}: {e}", path.display())))?;
        let mut s: RunSummary = serde_json::from_str(&text)
            .map_err(|e| BadInput::new(format!("{} is not a `train --json` summary: {e}", path.display())))?;
        check_epoch_seconds(&path, &s.epoch_seconds)?;
        let Some(counts) = s.rows.zip(s.bytes.clone()) else {
            return Err(BadInput::new(format!(
                "{}: the run's rows and bytes are unknown (its summary was taken from a final checkpoint that an \
                 older leapgnn wrote without them), so the report has nothing to compare; train it again, or move \
                 the file out of the bench directory",
                path.display()
            )));
        };
        // The full-graph engine's default strategy is graph parallelism, which the bench names `full-graph`.
        if s.mode.as_deref() == Some("full-graph") && s.strategy == "model-centric" {
            s.strategy = "full-graph".into();
        }
        let rate = stem.strip_suffix(&format!("-{}", s.strategy)).ok_or_else(|| {
            BadInput::new(format!(
                "{}: the file name says `{stem}` but the run's strategy is {}; name it run-<rate>-<strategy>[@<variant>].json",
                path.display(),
                s.strategy
            ))
        })?;
        runs.push((rate.to_string(), variant, s, counts));
    }
    let train_features = |rate: &str, variant: &Option<String>, s: &RunSummary| -> Result<Option<f64>, BadInput> {
        let at = variant.as_ref().map_or(String::new(), |v| format!("@{v}"));
        let path = dir.join(format!("run-{rate}-{}{at}.metrics.jsonl", s.strategy));
        let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
        let mut bytes = 0u64;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| BadInput::new(format!("{} line {}: not a JSON record: {e}", path.display(), i + 1)))?;
            if v.get("time_step").is_some() {
                bytes = bytes.checked_add(v["bytes_in"]["features"].as_u64().unwrap_or(0)).ok_or_else(|| {
                    BadInput::new(format!(
                        "{} line {}: `bytes_in.features`: the records' sum passes {} bytes; is this the run's own metrics.jsonl?",
                        path.display(),
                        i + 1,
                        u64::MAX
                    ))
                })?;
            }
        }
        Ok(Some(bytes as f64 / s.epochs.max(1) as f64))
    };
    if runs.is_empty() {
        return Err(BadInput::new(format!(
            "{} holds no run-<rate>-<strategy>.json summaries (did every training run fail?)",
            dir.display()
        )));
    }
    let order = |s: &str| STRATEGY_ORDER.iter().position(|x| *x == s).unwrap_or(STRATEGY_ORDER.len());
    runs.sort_by(|a, b| {
        (rate_bits(&a.0), order(&a.2.strategy), &a.2.strategy, &a.1).cmp(&(
            rate_bits(&b.0),
            order(&b.2.strategy),
            &b.2.strategy,
            &b.1,
        ))
    });
    let mut baseline: BTreeMap<String, f64> = BTreeMap::new();
    for (rate, variant, s, _) in &runs {
        if s.strategy == "model-centric" && variant.is_none() {
            baseline.insert(rate.clone(), mean(&s.epoch_seconds));
        }
    }
    let rows = runs
        .iter()
        .map(|(rate, variant, s, (rows, bytes))| {
            let train_features_per_epoch = train_features(rate, variant, s)?;
            let secs = mean(&s.epoch_seconds);
            let epochs = s.epochs.max(1) as f64;
            Ok(BenchRow {
                rate: rate.clone(),
                strategy: s.strategy.clone(),
                variant: variant.clone(),
                prefetch: s.prefetch,
                epoch_seconds: secs,
                speedup: baseline.get(rate).filter(|_| secs > 0.0).map(|b| b / secs),
                features_per_epoch: bytes.total.features as f64 / epochs,
                train_features_per_epoch,
                gradients_per_epoch: bytes.total.gradients as f64 / epochs,
                migration_per_epoch: bytes.total.migration as f64 / epochs,
                activations_per_epoch: bytes.total.activations as f64 / epochs,
                miss_rate: rows.miss_rate(),
                test_accuracy: s.test_accuracy,
                time_steps: s.time_steps,
            })
        })
        .collect::<Result<_, BadInput>>()?;
    let first = &runs[0].2;
    Ok(BenchReport { dataset: first.dataset.clone(), workers: first.workers, rows })
}

/// An epoch's seconds the report can divide by and plot: a speed-up over an
/// epoch of 0 or of a subnormal is infinite, and so is a mean over epochs near
/// f64::MAX. No real epoch is shorter than a microsecond or longer than three years.
const EPOCH_SECONDS: std::ops::RangeInclusive<f64> = 1e-6..=1e8;

fn check_epoch_seconds(path: &Path, secs: &[f64]) -> Result<(), BadInput> {
    match secs.iter().enumerate().find(|(_, s)| !EPOCH_SECONDS.contains(*s)) {
        Some((i, s)) => Err(BadInput::new(format!(
            "{}: `epoch_seconds`[{i}] is {s}, not an epoch's time (seconds from {:e} to {:e}); is this a `train --json` summary?",
            path.display(),
            EPOCH_SECONDS.start(),
            EPOCH_SECONDS.end()
        ))),
        None => Ok(()),
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

fn mb(bytes: f64) -> String {
    format!("{:.1}", bytes / 1e6)
}

impl BenchReport {
    /// The table as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| link | strategy | T | prefetch | epoch s | speed-up | training features MB | all features MB | gradients MB | migration MB | activations MB | miss rate | test acc |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.rate,
                r.name(),
                r.time_steps,
                if r.prefetch { "on" } else { "-" },
                r.epoch_seconds,
                r.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
                r.train_features_per_epoch.map_or("-".into(), mb),
                mb(r.features_per_epoch),
                mb(r.gradients_per_epoch),
                mb(r.migration_per_epoch),
                mb(r.activations_per_epoch),
                r.miss_rate.map_or("-".into(), |m| format!("{m:.3}")),
                r.test_accuracy.map_or("-".into(), |a| format!("{a:.4}"))
            ));
        }
        for c in self.plan_checks() {
            out.push_str(&format!("\n{c}\n"));
        }
        out
    }

    /// Per rate where leapgnn's configurations were measured (`@<variant>`
    /// runs next to the plan's own): the plan against the fastest of them,
    /// and leapgnn against its parts and the baselines.
    pub fn plan_checks(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut rates: Vec<&str> = self.rows.iter().map(|r| r.rate.as_str()).collect();
        rates.dedup();
        for rate in rates {
            let at: Vec<&BenchRow> = self.rows.iter().filter(|r| r.rate == rate && r.epoch_seconds > 0.0).collect();
            let plain = |s: &str| at.iter().find(|r| r.strategy == s && r.variant.is_none()).copied();
            let Some(plan) = plain("leapgnn") else { continue };
            let leap: Vec<&BenchRow> = at.iter().filter(|r| r.strategy == "leapgnn").copied().collect();
            let mut line = format!(
                "At {rate}: leapgnn (the plan: T = {}, prefetch {}) {:.2} s per epoch",
                plan.time_steps,
                if plan.prefetch { "on" } else { "off" },
                plan.epoch_seconds
            );
            if leap.len() > 1 {
                let best =
                    leap.iter().min_by(|a, b| a.epoch_seconds.total_cmp(&b.epoch_seconds)).copied().unwrap_or(plan);
                line.push_str(&format!(
                    "; the fastest of the {} leapgnn configurations measured is {} ({:.2} s): the plan is {:+.1} %",
                    leap.len(),
                    best.name(),
                    best.epoch_seconds,
                    (plan.epoch_seconds / best.epoch_seconds - 1.0) * 100.0
                ));
            }
            for other in ["micrograph", "pregather", "model-centric", "p3"] {
                if let Some(o) = plain(other) {
                    line.push_str(&format!(
                        "; {other} {:.2} s ({:.2}x)",
                        o.epoch_seconds,
                        o.epoch_seconds / plan.epoch_seconds
                    ));
                }
            }
            line.push('.');
            out.push(line);
        }
        out
    }
}

impl BenchRow {
    /// `leapgnn`, or `leapgnn@t2-off` for a variant.
    pub fn name(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}@{v}", self.strategy),
            None => self.strategy.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{EpochRecord, RowCounts, RunBytes};

    fn summary(strategy: &str, secs: f64, features: u64) -> RunSummary {
        let mut bytes = RunBytes::default();
        bytes.total.features = features;
        let (rows, bytes) = (Some(RowCounts::default()), Some(bytes));
        let s = RunSummary {
            strategy: strategy.into(),
            dataset: "d".into(),
            workers: 4,
            rows,
            bytes,
            ..Default::default()
        };
        let e =
            |epoch| EpochRecord { epoch, seconds: secs, test_accuracy: 0.5, val_accuracy: 0.5, ..Default::default() };
        s.from_history(vec![e(0), e(1)])
    }

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(rate_bits("100mbit"), Some(100_000_000));
        assert_eq!(rate_bits("10Gbit"), Some(10_000_000_000));
        assert_eq!(rate_bits("500kbit"), Some(500_000));
        assert_eq!(rate_bits("fast"), None);
    }

    #[test]
    fn speedups_are_against_model_centric_at_the_same_rate() {
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, s: RunSummary| {
            std::fs::write(dir.path().join(name), serde_json::to_string(&s).unwrap()).unwrap()
        };
        put("run-1gbit-model-centric.json", summary("model-centric", 2.0, 800));
        put("run-1gbit-leapgnn.json", summary("leapgnn", 1.0, 100));
        put("run-100mbit-model-centric.json", summary("model-centric", 10.0, 800));
        put("run-100mbit-leapgnn.json", summary("leapgnn", 4.0, 100));
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let r = load_runs(dir.path()).unwrap();
        let got: Vec<(&str, &str, Option<f64>)> =
            r.rows.iter().map(|x| (x.rate.as_str(), x.strategy.as_str(), x.speedup)).collect();
        assert_eq!(
            got,
            vec![
                ("100mbit", "model-centric", Some(1.0)),
                ("100mbit", "leapgnn", Some(2.5)),
                ("1gbit", "model-centric", Some(1.0)),
                ("1gbit", "leapgnn", Some(2.0)),
            ]
        );
        assert_eq!(r.rows[1].features_per_epoch, 50.0);
        assert!(r.markdown().contains("| 100mbit | leapgnn | 0 | - | 4.00 | 2.50x |"));
    }

    #[test]
    fn leapgnn_variants_are_rows_of_their_own_and_the_plan_is_checked_against_the_fastest() {
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, s: RunSummary| {
            std::fs::write(dir.path().join(name), serde_json::to_string(&s).unwrap()).unwrap()
        };
        let leap =
            |secs: f64, t: u32, prefetch: bool| RunSummary { time_steps: t, prefetch, ..summary("leapgnn", secs, 100) };
        put("run-500mbit-model-centric.json", summary("model-centric", 8.0, 800));
        put("run-500mbit-micrograph.json", summary("micrograph", 3.0, 400));
        put("run-500mbit-leapgnn.json", leap(3.1, 1, true));
        put("run-500mbit-leapgnn@t1-off.json", leap(4.0, 1, false));
        put("run-500mbit-leapgnn@t2-on.json", leap(2.9, 2, true));
        let r = load_runs(dir.path()).unwrap();
        let names: Vec<String> = r.rows.iter().map(BenchRow::name).collect();
        assert_eq!(names, ["model-centric", "micrograph", "leapgnn", "leapgnn@t1-off", "leapgnn@t2-on"]);
        // Variants are measured against the same model-centric run.
        assert_eq!(r.rows[4].speedup, Some(8.0 / 2.9));
        let checks = r.plan_checks();
        assert_eq!(checks.len(), 1);
        assert!(
            checks[0].contains(
                "the fastest of the 3 leapgnn configurations measured is leapgnn@t2-on (2.90 s): the plan is +6.9 %"
            ),
            "{}",
            checks[0]
        );
        assert!(
            checks[0].contains("micrograph 3.00 s (0.97x)") && checks[0].contains("model-centric 8.00 s (2.58x)"),
            "{}",
            checks[0]
        );
        assert!(r.markdown().contains("| 500mbit | leapgnn@t1-off | 1 | - | 4.00 |"));
    }

    #[test]
    fn a_misnamed_or_empty_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_runs(dir.path()).unwrap_err().to_string().contains("no run-"));
        std::fs::write(
            dir.path().join("run-1gbit-p3.json"),
            serde_json::to_string(&summary("leapgnn", 1.0, 1)).unwrap(),
        )
        .unwrap();
        assert!(load_runs(dir.path()).unwrap_err().to_string().contains("strategy is leapgnn"));
    }
}
