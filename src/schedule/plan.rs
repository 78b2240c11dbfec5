//! A merge plan: how many time steps an iteration of `leapgnn` takes and how
//! each worker spreads its merged micrographs over them. `tune-merge` writes
//! it; `train --merge-plan` (and `--time-steps auto`) reads it.
//!
//! ```toml
//! workers = 4
//! time_steps = 2
//! # optional, one row per worker, one entry per time step: the share of the
//! # worker's roots (in cost, not count) that step should carry; rows sum to 1.
//! balance = [[0.5, 0.5], [0.6, 0.4], [0.5, 0.5], [0.45, 0.55]]
//! # optional, what tune-merge predicted (for --validate and the log)
//! predicted_iteration_seconds = 0.012
//! # optional, whether the plan was chosen with prefetch (train --prefetch auto follows it)
//! prefetch = true
//! ```

use crate::BadInput;
use crate::format::{FormatError, write_atomic};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergePlan {
    pub workers: usize,
    pub time_steps: u32,
    /// Per worker, per time step: target share of the worker's root cost.
    /// Empty: every step gets the same number of roots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance: Vec<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_iteration_seconds: Option<f64>,
    /// Whether the planned run prefetches (what `train --prefetch auto`
    /// follows); absent: as `--prefetch auto` decides without a plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<bool>,
}

impl MergePlan {
    /// T time steps, equal shares.
    pub fn even(workers: usize, time_steps: u32) -> Self {
        MergePlan { workers, time_steps, balance: Vec::new(), predicted_iteration_seconds: None, prefetch: None }
    }

    /// Rejects a plan that cannot drive a job of `workers` workers.
    pub fn check(&self, workers: usize, origin: &str) -> Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(format!("merge plan {origin}: {m}")));
        if self.workers != workers {
            return bad(format!(
                "written for {} workers, but the job has {workers}; run `leapgnn tune-merge ... --parts {workers}` again",
                self.workers
            ));
        }
        if self.time_steps == 0 || self.time_steps as usize > workers.max(1) {
            return bad(format!(
                "time_steps = {} must be between 1 and the number of workers ({workers})",
                self.time_steps
            ));
        }
        if self.balance.is_empty() {
            return Ok(());
        }
        if self.balance.len() != workers {
            return bad(format!("balance has {} rows; it needs one per worker ({workers})", self.balance.len()));
        }
        for (w, row) in self.balance.iter().enumerate() {
            if row.len() != self.time_steps as usize {
                return bad(format!(
                    "balance row {w} has {} entries; it needs one per time step ({})",
                    row.len(),
                    self.time_steps
                ));
            }
            if row.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return bad(format!("balance row {w} has a negative or non-finite share"));
            }
            let sum: f64 = row.iter().sum();
            if (sum - 1.0).abs() > 1e-3 {
                return bad(format!("balance row {w} sums to {sum}, not 1"));
            }
        }
        Ok(())
    }

    /// Target shares of worker `w` (equal when the plan gives none).
    pub fn shares(&self, w: usize) -> Vec<f64> {
        match self.balance.get(w) {
            Some(row) => row.clone(),
            None => vec![1.0 / self.time_steps as f64; self.time_steps as usize],
        }
    }

    pub fn load(path: &Path) -> Result<Self, BadInput> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            BadInput::new(format!(
                "cannot read merge plan {}: {e}; write one with `leapgnn tune-merge NAME --parts K --out FILE`",
                path.display()
            ))
        })?;
        toml::from_str(&text).map_err(|e| BadInput::new(format!("merge plan {} is malformed: {e}", path.display())))
    }

    /// Written atomically.
    pub fn save(&self, path: &Path) -> Result<(), FormatError> {
        let text = toml::to_string_pretty(self).expect("a merge plan serialises");
        write_atomic(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.toml");
        let mut plan = MergePlan::even(4, 2);
        plan.balance = vec![vec![0.5, 0.5], vec![0.6, 0.4], vec![0.5, 0.5], vec![0.45, 0.55]];
        plan.save(&p).unwrap();
        let back = MergePlan::load(&p).unwrap();
        assert_eq!(back, plan);
        back.check(4, "p").unwrap();
        assert!(back.check(3, "p").unwrap_err().to_string().contains("3"));
        let mut bad = back.clone();
        bad.balance[1] = vec![0.9, 0.9];
        assert!(bad.check(4, "p").unwrap_err().to_string().contains("sums to"));
        let mut bad = back;
        bad.time_steps = 5;
        assert!(bad.check(4, "p").is_err());
        assert_eq!(MergePlan::even(4, 4).shares(2), vec![0.25; 4]);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.toml");
        std::fs::write(&p, "workers = 2\ntime_steps = 1\ntimesteps = 3\n").unwrap();
        assert!(MergePlan::load(&p).unwrap_err().to_string().contains("malformed"));
    }
}
