use super::{ByteCounts, RowCounts};

/// One epoch's results.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    pub epoch: u64,
    /// Mean over the epoch's iterations of the iteration loss.
    pub loss: f64,
    pub val_accuracy: f64,
    pub test_accuracy: f64,
    /// Training time (sampling to optimizer step), without evaluation.
    pub seconds: f64,
    pub eval_seconds: f64,
    pub iterations: u64,
    /// RETEXO: the stage (layer) this round trained; the run's accuracy is
    /// that of its last stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
}

/// What `train --json` prints (CLI.md); extra fields after the contract's.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub run: String,
    pub strategy: String,
    pub workers: usize,
    pub epochs: u64,
    /// Test accuracy at the epoch with the best validation accuracy; `None`
    /// (JSON null) for a run stopped before its first evaluation.
    #[serde(default)]
    pub test_accuracy: Option<f64>,
    #[serde(default)]
    pub best_val_accuracy: Option<f64>,
    /// The last epoch's mean training loss; `None` (JSON null) for a run
    /// stopped before it finished an epoch, like the accuracies.
    #[serde(default)]
    pub final_loss: Option<f64>,
    pub epoch_seconds: Vec<f64>,
    /// `None` (JSON null) when unknown: a finished run's summary taken from
    /// a final checkpoint that an older version wrote without the run's
    /// count. Zeros there would read as measured.
    #[serde(default)]
    pub rows: Option<RowCounts>,
    /// `rows.miss_rate()`, 0 for a run that requested no rows (the
    /// full-graph engine): a number, as scripts read it (CLI.md); null
    /// where `rows` is.
    #[serde(default)]
    pub miss_rate: Option<f64>,
    /// Unknown (null) where `rows` is.
    #[serde(default)]
    pub bytes: Option<RunBytes>,
    pub time_steps: u32,
    pub best_epoch: u64,
    pub dataset: String,
    pub model: String,
    pub iterations: u64,
    pub history: Vec<EpochRecord>,
    /// `full-graph` for the full-graph engine (absent for mini-batch runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Each worker's peak resident set size (VmHWM), in rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peak_rss_bytes: Vec<u64>,
    /// `--check-replicas N`: how many times every replica's weights were
    /// compared and found identical (absent when not asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_checks: Option<u64>,
    /// Whether pregather / leapgnn prefetched (`--prefetch` resolved).
    #[serde(default)]
    pub prefetch: bool,
}

/// A run's rows and bytes, as a summary holds them where they are known.
pub type Counted = (RowCounts, RunBytes);

/// Bytes that crossed a socket between processes, summed over the workers,
/// for the whole run: totals by category (the contract's top-level fields),
/// and the same split by phase. `eval` is what moved while the workers
/// evaluated; `train` is everything else (the iterations, and the setup
/// before them: mesh handshakes, cache fill, the initial weights), so
/// `train + eval = total` in every category.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunBytes {
    #[serde(flatten)]
    pub total: ByteCounts,
    #[serde(default)]
    pub train: ByteCounts,
    #[serde(default)]
    pub eval: ByteCounts,
}

impl RunBytes {
    /// `total` with the evaluation's share `eval` split off.
    pub fn split(total: ByteCounts, eval: ByteCounts) -> Self {
        RunBytes { total, train: super::record::sub_bytes(&total, &eval), eval }
    }

    /// `self += o`, phase by phase.
    pub fn add(&mut self, o: &RunBytes) {
        for (a, b) in [(&mut self.total, &o.total), (&mut self.train, &o.train), (&mut self.eval, &o.eval)] {
            super::record::add_bytes(a, b);
        }
    }
}

impl RunSummary {
    /// Fills the accuracy and timing fields from the per-epoch history.
    pub fn from_history(mut self, history: Vec<EpochRecord>) -> Self {
        // First epoch with the highest validation accuracy; of the last stage
        // for a run trained in stages (the earlier stages' heads are not the model).
        let last = history.iter().filter_map(|e| e.layer).max();
        let final_model = history.iter().filter(|e| e.layer == last);
        if let Some(best) = final_model.reduce(|b, e| if e.val_accuracy > b.val_accuracy { e } else { b }) {
            self.best_val_accuracy = Some(best.val_accuracy);
            self.test_accuracy = Some(best.test_accuracy);
            self.best_epoch = best.epoch;
        }
        self.final_loss = history.last().map(|e| e.loss);
        self.epoch_seconds = history.iter().map(|e| e.seconds).collect();
        self.epochs = history.len() as u64;
        self.miss_rate = self.rows.map(|r| r.miss_rate().unwrap_or(0.0));
        self.history = history;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_test_accuracy_at_the_best_validation_epoch() {
        let e = |epoch, val, test| EpochRecord {
            epoch,
            val_accuracy: val,
            test_accuracy: test,
            loss: 1.0 / (epoch + 1) as f64,
            ..Default::default()
        };
        let rows = Some(RowCounts { requested: 10, remote: 4, ..Default::default() });
        let s = RunSummary { rows, ..Default::default() }.from_history(vec![
            e(0, 0.5, 0.4),
            e(1, 0.8, 0.7),
            e(2, 0.8, 0.9),
            e(3, 0.6, 0.95),
        ]);
        assert_eq!((s.best_epoch, s.best_val_accuracy, s.test_accuracy), (1, Some(0.8), Some(0.7)));
        assert_eq!(s.final_loss, Some(0.25));
        assert_eq!(s.epochs, 4);
        assert!(s.miss_rate.is_some_and(|m| (m - 0.4).abs() < 1e-12));
        // A run trained in stages (RETEXO): the last stage's best round, even below an earlier stage's.
        let staged = |epoch, val, test, layer| EpochRecord { layer: Some(layer), ..e(epoch, val, test) };
        let s = RunSummary::default().from_history(vec![
            staged(0, 0.9, 0.9, 0),
            staged(1, 0.7, 0.6, 1),
            staged(2, 0.8, 0.75, 1),
        ]);
        assert_eq!((s.best_epoch, s.test_accuracy), (2, Some(0.75)));
        // Stopped before the first evaluation: no accuracy, not 0.0.
        let s = RunSummary::default().from_history(vec![]);
        assert_eq!((s.test_accuracy, s.best_val_accuracy), (None, None));
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["test_accuracy"].is_null() && json["best_val_accuracy"].is_null(), "{json}");
        // No rows requested (full-graph): still a number for scripts, rows.requested says why.
        let s = RunSummary { rows: Some(RowCounts::default()), ..Default::default() }.from_history(vec![]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!((json["miss_rate"].as_f64(), json["rows"]["requested"].as_u64()), (Some(0.0), Some(0)), "{json}");
        // Counts unknown: null, not zeros that read as measured.
        let json = serde_json::to_value(RunSummary::default().from_history(vec![])).unwrap();
        assert!(["rows", "bytes", "miss_rate"].iter().all(|k| json[k].is_null()), "{json}");
    }

    #[test]
    fn phase_bytes_add_up_to_the_totals_and_keep_the_flat_categories() {
        let total = ByteCounts { features: 100, gradients: 40, control: 9, ..Default::default() };
        let eval = ByteCounts { features: 30, control: 4, ..Default::default() };
        let b = RunBytes::split(total, eval);
        assert_eq!(b.train, ByteCounts { features: 70, gradients: 40, control: 5, ..Default::default() });
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(
            (v["features"].as_u64(), v["train"]["features"].as_u64(), v["eval"]["control"].as_u64()),
            (Some(100), Some(70), Some(4))
        );
        assert_eq!(serde_json::from_value::<RunBytes>(v).unwrap(), b);
        // Summaries written before the split still read.
        let old: RunBytes =
            serde_json::from_str(r#"{"features":5,"gradients":1,"migration":0,"activations":0,"control":2}"#).unwrap();
        assert_eq!((old.total.features, old.eval.features), (5, 0));
    }
}
