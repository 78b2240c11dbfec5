use std::ops::AddAssign;

/// Feature rows a step needed, by where they came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowCounts {
    pub requested: u64,
    pub local: u64,
    pub cache_hit: u64,
    pub remote: u64,
}

impl RowCounts {
    /// Remote rows / requested rows; None when nothing was requested (a
    /// full-graph step fetches no rows through the cache), which is not a
    /// perfect 0 %: every display of a miss rate goes through here.
    pub fn miss_rate(&self) -> Option<f64> {
        (self.requested > 0).then(|| self.remote as f64 / self.requested as f64)
    }
}

impl std::ops::SubAssign for RowCounts {
    /// Takes back rows added before (saturating: never below zero).
    fn sub_assign(&mut self, o: Self) {
        self.requested = self.requested.saturating_sub(o.requested);
        self.local = self.local.saturating_sub(o.local);
        self.cache_hit = self.cache_hit.saturating_sub(o.cache_hit);
        self.remote = self.remote.saturating_sub(o.remote);
    }
}

impl AddAssign for RowCounts {
    fn add_assign(&mut self, o: Self) {
        self.requested += o.requested;
        self.local += o.local;
        self.cache_hit += o.cache_hit;
        self.remote += o.remote;
    }
}

/// Bytes that crossed a socket, by category (the comm layer's counters).
pub use crate::comm::PerCategory as ByteCounts;

/// `acc += d`, category by category.
pub fn add_bytes(acc: &mut ByteCounts, d: &ByteCounts) {
    acc.features += d.features;
    acc.gradients += d.gradients;
    acc.migration += d.migration;
    acc.activations += d.activations;
    acc.control += d.control;
}

/// `a - b`, category by category, never below zero.
pub fn sub_bytes(a: &ByteCounts, b: &ByteCounts) -> ByteCounts {
    ByteCounts {
        features: a.features.saturating_sub(b.features),
        gradients: a.gradients.saturating_sub(b.gradients),
        migration: a.migration.saturating_sub(b.migration),
        activations: a.activations.saturating_sub(b.activations),
        control: a.control.saturating_sub(b.control),
    }
}

/// One record per (epoch, iteration, time step, worker): one line of `metrics.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepRecord {
    pub epoch: u64,
    /// Iteration within the epoch.
    pub iteration: u64,
    pub time_step: u32,
    pub worker: u32,
    /// The model (replica) this step trained: the worker itself for
    /// model-centric, the visiting model (worker + time step) mod W for the
    /// micrograph strategies.
    #[serde(default)]
    pub model: u32,
    /// Roots (micrographs) computed in this step.
    pub roots: u64,
    /// Sampled edges over all layers.
    pub edges: u64,
    pub rows: RowCounts,
    /// `rows.miss_rate()`, 0 when the step requested no rows: the JSON
    /// field stays a number for the scripts that read it (CLI.md), and
    /// `rows.requested` tells a step that fetched nothing from one that
    /// missed nothing (the dashboard shows the former as `-`).
    pub miss_rate: f64,
    pub bytes_in: ByteCounts,
    pub bytes_out: ByteCounts,
    pub sample_seconds: f64,
    pub gather_seconds: f64,
    pub compute_seconds: f64,
    pub sync_seconds: f64,
    /// This step's share of the iteration loss (sum over its roots / global batch size).
    pub loss: f64,
    /// Full-graph engine: the layer whose halo exchange (forward and backward)
    /// and compute this record covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// VARCO: the columns of each row that layer's halo exchange sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<u32>,
}

/// One line of `metrics.jsonl` per automatic restart (`--restarts`), written
/// when the resumed run's first step record arrives, before it. Told apart
/// from step records by its `restart` field.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RestartRecord {
    /// 1 for the first restart of the run.
    pub restart: u32,
    /// The run's `--restarts`.
    pub of: u32,
    /// Why the workers were stopped (the driver's error).
    pub reason: String,
    /// Where training resumed: the checkpoint's position (0-based).
    pub epoch: u64,
    pub iteration: u64,
    /// Seconds from the failure noticed to the resumed run's first step.
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_rate_of_no_requested_rows_is_none_and_of_many_a_rate() {
        let rows = |requested, remote| RowCounts { requested, local: requested - remote, cache_hit: 0, remote };
        assert_eq!(rows(0, 0).miss_rate(), None);
        assert_eq!(rows(100, 0).miss_rate(), Some(0.0));
        assert_eq!(rows(100, 25).miss_rate(), Some(0.25));
    }
}
