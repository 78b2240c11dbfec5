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
}

/// What `train --json` prints (CLI.md); extra fields after the contract's.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub run: String,
    pub strategy: String,
    pub workers: usize,
    pub epochs: u64,
    /// Test accuracy at the epoch with the best validation accuracy.
    pub test_accuracy: f64,
    pub best_val_accuracy: f64,
    pub final_loss: f64,
    pub epoch_seconds: Vec<f64>,
    pub rows: RowCounts,
    pub miss_rate: f64,
    pub bytes: ByteCounts,
    pub time_steps: u32,
    pub best_epoch: u64,
    pub dataset: String,
    pub model: String,
    pub iterations: u64,
    pub history: Vec<EpochRecord>,
    /// `--check-replicas N`: how many times every replica's weights were
    /// compared and found identical (absent when not asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_checks: Option<u64>,
}

impl RunSummary {
    /// Fills the accuracy and timing fields from the per-epoch history.
    pub fn from_history(mut self, history: Vec<EpochRecord>) -> Self {
        // First epoch with the highest validation accuracy.
        if let Some(best) = history.iter().reduce(|b, e| if e.val_accuracy > b.val_accuracy { e } else { b }) {
            self.best_val_accuracy = best.val_accuracy;
            self.test_accuracy = best.test_accuracy;
            self.best_epoch = best.epoch;
        }
        self.final_loss = history.last().map_or(0.0, |e| e.loss);
        self.epoch_seconds = history.iter().map(|e| e.seconds).collect();
        self.epochs = history.len() as u64;
        self.miss_rate = self.rows.miss_rate();
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
        let s = RunSummary { rows: RowCounts { requested: 10, remote: 4, ..Default::default() }, ..Default::default() }
            .from_history(vec![e(0, 0.5, 0.4), e(1, 0.8, 0.7), e(2, 0.8, 0.9), e(3, 0.6, 0.95)]);
        assert_eq!((s.best_epoch, s.best_val_accuracy, s.test_accuracy), (1, 0.8, 0.7));
        assert_eq!(s.final_loss, 0.25);
        assert_eq!(s.epochs, 4);
        assert!((s.miss_rate - 0.4).abs() < 1e-12);
    }
}
