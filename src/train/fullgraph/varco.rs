//! `--strategy varco` (variable-rate compression, Cervino et al.): full-graph
//! training where every layer's halo exchange sends only the first
//! k_l(t) = floor(d_l / r(t)) columns of each row, the receiver padding the
//! rest with zeros; the backward exchange sends the gradients of those
//! columns only. The last layer's input is never compressed. The ratio falls
//! linearly from `max_ratio` to `min_ratio`:
//! r(t) = max(r_max - s * t * (r_max - r_min) / (T - 2), r_min).
//! As in the authors' code (a fork of SAR, which refetches remote rows at
//! every layer of every pass), layer 0's input features cross the network at
//! every step too, compressed like the hidden layers; evaluation goes through
//! the same exchange at the ratio of the step just trained.

use super::FullGraph;
use crate::BadInput;
use crate::train::flags::AuthorDefaults;
use crate::train::strategy::{Iteration, StepSink, Strategy, StrategyKind};
use crate::train::{Collective, TrainError, Worker};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    /// The schedule r(t) from --max-ratio down to --min-ratio.
    #[default]
    Variable,
    /// --ratio at every step.
    Fixed,
    /// Every column (full-graph training with a per-step feature exchange).
    None,
}

crate::value_names!(Compression, "--compression");

/// VARCO's flags; the defaults are the authors' run.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VarcoConfig {
    pub compression: Compression,
    pub max_ratio: f64,
    pub min_ratio: f64,
    pub slope: f64,
    /// `--compression fixed`'s ratio.
    pub ratio: Option<f64>,
}

impl VarcoConfig {
    /// The authors' schedule.
    pub const DEFAULT: VarcoConfig =
        VarcoConfig { compression: Compression::Variable, max_ratio: 128.0, min_ratio: 1.5, slope: 5.0, ratio: None };
}

impl Default for VarcoConfig {
    fn default() -> Self {
        VarcoConfig::DEFAULT
    }
}

impl VarcoConfig {
    /// Rejects ratios below 1 (they would send more columns than a row has),
    /// naming the flag.
    pub fn check(&self) -> Result<(), BadInput> {
        let ratio = |flag: &str, r: f64| {
            if r.is_finite() && r >= 1.0 {
                Ok(())
            } else {
                Err(BadInput::new(format!(
                    "{flag} {r}: a compression ratio divides each row's width, so it must be a finite \
                     number of at least 1 (1 sends every column; e.g. 16)"
                )))
            }
        };
        ratio("--max-ratio", self.max_ratio)?;
        ratio("--min-ratio", self.min_ratio)?;
        if let Some(r) = self.ratio {
            ratio("--ratio", r)?;
        }
        if self.min_ratio > self.max_ratio {
            return Err(BadInput::new(format!(
                "--min-ratio {} is above --max-ratio {}: the ratio falls from the maximum to the minimum",
                self.min_ratio, self.max_ratio
            )));
        }
        if !(self.slope.is_finite() && self.slope >= 0.0) {
            return Err(BadInput::new(format!("--slope {} must be zero or positive", self.slope)));
        }
        match (self.compression, self.ratio) {
            (Compression::Fixed, None) => {
                Err(BadInput::new("--compression fixed needs --ratio R (R >= 1, e.g. --ratio 4)"))
            }
            (Compression::Variable | Compression::None, Some(r)) => Err(BadInput::new(format!(
                "--ratio {r} applies to --compression fixed (not {}); give --compression fixed or omit --ratio",
                self.compression
            ))),
            _ => Ok(()),
        }
    }

    /// The ratio of step `t` (from 0) of a run of `steps` steps.
    pub fn ratio_at(&self, t: u64, steps: u64) -> f64 {
        match self.compression {
            Compression::None => 1.0,
            Compression::Fixed => self.ratio.unwrap_or(1.0),
            Compression::Variable => {
                // The authors divide by T - 2; shorter runs would divide by zero or go negative.
                let span = (steps.saturating_sub(2)).max(1) as f64;
                let r = self.max_ratio - self.slope * t as f64 * (self.max_ratio - self.min_ratio) / span;
                r.max(self.min_ratio)
            }
        }
    }
}

/// The authors' run, for every flag not given.
pub const AUTHORS: AuthorDefaults = AuthorDefaults {
    layers: Some(3),
    hidden: Some(256),
    heads: None,
    lr: Some(0.01),
    weight_decay: Some(0.0),
    dropout: Some(0.0),
    epochs: Some(300),
};

/// Columns of each layer's input that cross the network at ratio `r`:
/// floor(d_l / r) for every layer but the last, which keeps all.
pub fn columns(widths: &[usize], r: f64) -> Vec<usize> {
    let last = widths.len().saturating_sub(1);
    widths
        .iter()
        .enumerate()
        .map(|(l, &d)| if l == last { d } else { ((d as f64 / r).floor() as usize).min(d) })
        .collect()
}

/// The full-graph engine with the compressed exchange of `cfg`.
pub struct Varco {
    cfg: VarcoConfig,
    /// T of the schedule: the run's steps (one per epoch).
    steps: u64,
}

impl Varco {
    pub fn new(cfg: VarcoConfig, steps: u64) -> Self {
        Varco { cfg, steps }
    }

    /// The columns of every layer's input at step `t`.
    fn columns_at(&self, w: &Worker<'_>, t: u64) -> Vec<usize> {
        let m = &w.model;
        let widths: Vec<usize> =
            std::iter::once(m.spec().in_dim).chain((1..m.num_layers()).map(|l| m.out_dim(l - 1))).collect();
        columns(&widths, self.cfg.ratio_at(t, self.steps))
    }
}

impl Strategy for Varco {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Varco
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        w.halo_columns = Some(self.columns_at(w, it.global_index));
        FullGraph.iteration(w, coll, it, grad, records)
    }

    fn statistics_pass(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
    ) -> Result<(), TrainError> {
        w.halo_columns = Some(self.columns_at(w, it.global_index));
        FullGraph.statistics_pass(w, coll, it)
    }

    /// Evaluation exchanges at the ratio of the step just trained, which a
    /// resumed run may have trained before it stopped.
    fn before_evaluation(&mut self, w: &mut Worker<'_>, done: u64) {
        w.halo_columns = Some(self.columns_at(w, done.saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_falls_linearly_to_the_minimum_and_stays() {
        let c = VarcoConfig::default();
        assert_eq!(c.ratio_at(0, 300), 128.0);
        // s = 5: the minimum is reached after (T - 2) / 5 steps.
        let t = 298 / 5;
        assert!((c.ratio_at(t as u64 - 1, 300) - (128.0 - 5.0 * (t - 1) as f64 * 126.5 / 298.0)).abs() < 1e-9);
        assert_eq!(c.ratio_at(60, 300), 1.5);
        assert_eq!(c.ratio_at(299, 300), 1.5);
        let fixed = VarcoConfig { compression: Compression::Fixed, ratio: Some(4.0), ..c.clone() };
        assert_eq!(fixed.ratio_at(7, 300), 4.0);
        assert_eq!(columns(&[128, 256, 256], 1.5), [85, 170, 256]);
        assert_eq!(columns(&[128, 256, 256], 128.0), [1, 2, 256]);
        assert_eq!(columns(&[16, 16], 64.0), [0, 16]);
    }

    #[test]
    fn ratios_below_one_name_their_flag() {
        let bad = |c: VarcoConfig, flag: &str| assert!(c.check().unwrap_err().0.starts_with(flag));
        bad(VarcoConfig { min_ratio: 0.5, ..Default::default() }, "--min-ratio 0.5");
        bad(VarcoConfig { max_ratio: 0.9, min_ratio: 0.9, ..Default::default() }, "--max-ratio 0.9");
        bad(VarcoConfig { compression: Compression::Fixed, ratio: Some(0.5), ..Default::default() }, "--ratio 0.5");
        bad(VarcoConfig { compression: Compression::Fixed, ..Default::default() }, "--compression fixed");
        assert!(VarcoConfig::default().check().is_ok());
    }
}
