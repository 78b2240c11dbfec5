//! `--time-steps auto`: leapgnn starts with the T the cost model predicts
//! fastest (the driver sends the model's plan for every T with the job) and
//! re-plans at every epoch boundary from measured times: rank 0 collects each
//! worker's mean iteration seconds of the epoch that ended, keeps the slowest
//! worker's for the T it ran, asks `cost::next_time_steps` (measured where
//! known, the model's prediction scaled by the measured/predicted ratio
//! elsewhere) and broadcasts the T that every worker runs for the whole next
//! epoch. (The artifact let each rank decide from its own clock and could
//! deadlock.) Without predictions every T is tried for one epoch, W first,
//! then the fastest measured one is kept.
//!
//! Every worker runs the same iterations, so all of them enter the deciding
//! collectives at the same epoch boundary.

use crate::comm::Category;
use crate::schedule::{MergePlan, next_time_steps};
use crate::train::{Collective, TrainError};
use std::time::Instant;

/// `--time-steps auto`'s tuning at a checkpoint, as rank 0 saw it: a resumed
/// run takes the same T for the rest of the epoch, keeps the plans it started
/// from (not the cost model's answer of today) and what it has measured, so
/// it decides at the next epoch boundary as the uninterrupted run would.
/// The stopped epoch's iteration seconds so far are rank 0's (the other
/// workers' are not in the checkpoint), including the iteration the
/// checkpoint followed, which the uninterrupted run would time too unless it
/// ended the epoch; the resumed workers add their own.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AutoState {
    /// The W it was tuned on: T measured on W workers says nothing of T on
    /// another W, so a run resumed on another W tunes afresh.
    pub workers: usize,
    pub plans: Vec<MergePlan>,
    /// The T in use, and the epoch it was taken for.
    pub current: u32,
    pub epoch: Option<u64>,
    /// Iterations begun in `epoch`, and the sum and count of those timed.
    pub begun: u32,
    pub timed: (f64, u32),
    /// Seconds of the iteration just done, when it is one that is timed.
    pub last: Option<f64>,
    /// The slowest worker's mean iteration seconds per T measured so far.
    pub measured: Vec<(u32, f64)>,
    /// Epochs behind each T's mean in `measured` (absent in older checkpoints: one each).
    #[serde(default)]
    pub epochs_measured: Vec<(u32, u32)>,
}

pub(super) struct AutoSteps {
    world: usize,
    /// The cost model's plan per T, with its predicted seconds (may be empty).
    plans: Vec<MergePlan>,
    current: u32,
    /// The epoch being timed, when its last iteration began, and the sum and
    /// count of its iteration seconds on this worker.
    epoch: Option<u64>,
    last_begin: Option<Instant>,
    begun: u32,
    timed: (f64, u32),
    /// Rank 0: the slowest worker's mean iteration seconds per T, averaged
    /// over the epochs run at that T (a T run again refines its figure
    /// rather than replacing it, so one noisy epoch cannot flip the choice
    /// back and forth), and how many epochs each holds.
    measured: Vec<(u32, f64)>,
    epochs_measured: Vec<(u32, u32)>,
    /// Rank 0: the last decision and why, until the event log takes it.
    decision: Option<String>,
    /// Resumed: the seconds of the iteration the checkpoint followed.
    resumed_last: Option<f64>,
}

impl AutoSteps {
    pub fn new(world: usize, plans: Vec<MergePlan>) -> Self {
        let plans: Vec<MergePlan> = plans
            .into_iter()
            .filter(|p| p.time_steps >= 1 && p.time_steps as usize <= world && p.predicted_iteration_seconds.is_some())
            .collect();
        let mut a = AutoSteps {
            world,
            plans,
            current: 1,
            epoch: None,
            last_begin: None,
            begun: 0,
            timed: (0.0, 0),
            measured: Vec::new(),
            epochs_measured: Vec::new(),
            decision: None,
            resumed_last: None,
        };
        a.current = a.pick();
        a
    }

    /// What a checkpoint keeps of the tuning.
    pub fn state(&self) -> AutoState {
        AutoState {
            workers: self.world,
            plans: self.plans.clone(),
            current: self.current,
            epoch: self.epoch,
            begun: self.begun,
            timed: self.timed,
            last: self.last_begin.filter(|_| self.begun > 1).map(|b| b.elapsed().as_secs_f64()),
            measured: self.measured.clone(),
            epochs_measured: self.epochs_measured.clone(),
        }
    }

    /// Continues the tuning saved in `s` (a checkpoint of a run on this W;
    /// another W starts afresh). The iteration in flight at the stop is not timed.
    pub fn restore(&mut self, s: &AutoState) -> Result<(), TrainError> {
        if s.workers != self.world {
            return Ok(());
        }
        let fits = |t: u32| t >= 1 && t as usize <= self.world;
        if !fits(s.current) || s.measured.iter().any(|m| !fits(m.0)) || s.plans.iter().any(|p| !fits(p.time_steps)) {
            return Err(crate::BadInput::new(format!(
                "the checkpoint's --time-steps auto state names a T above its {} workers (T = {}, measured {:?}): the checkpoint is damaged; start a new run",
                self.world, s.current, s.measured
            ))
            .into());
        }
        self.plans = s.plans.clone();
        self.current = s.current;
        self.epoch = s.epoch;
        self.begun = s.begun;
        self.timed = s.timed;
        self.measured = s.measured.clone();
        self.epochs_measured = s.epochs_measured.clone();
        self.last_begin = None;
        self.resumed_last = s.last;
        Ok(())
    }

    /// The T in use.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// The model's plan for T (its per-step shares), if it made one.
    pub fn plan(&self, t: u32) -> Option<&MergePlan> {
        self.plans.iter().find(|p| p.time_steps == t)
    }

    /// T of the next iteration of this epoch (T changes only between epochs).
    pub fn next(&self) -> Option<u32> {
        Some(self.current)
    }

    /// T for the iteration about to start (of `epoch`). The first iteration of
    /// an epoch re-plans: the iteration before it also paid for evaluation and
    /// is not timed, and neither is an epoch's first iteration (warm-up,
    /// prefetch refill).
    pub fn begin(&mut self, coll: &mut dyn Collective, epoch: u64) -> Result<u32, TrainError> {
        let now = Instant::now();
        match self.epoch {
            Some(e) if e == epoch => {
                // The iteration that just ended (resumed: the one the checkpoint
                // followed); the epoch's first one is not timed.
                let ended = match self.last_begin {
                    Some(start) => (self.begun > 1).then(|| now.duration_since(start).as_secs_f64()),
                    None => self.resumed_last.take(),
                };
                if let Some(s) = ended {
                    self.timed.0 += s;
                    self.timed.1 += 1;
                }
                self.begun += 1;
            }
            previous => {
                if previous.is_some() && self.world > 1 {
                    self.current = self.decide(coll)?;
                }
                self.timed = (0.0, 0);
                self.begun = 1;
                self.resumed_last = None;
            }
        }
        self.epoch = Some(epoch);
        self.last_begin = Some(now);
        Ok(self.current)
    }

    /// Rank 0, after an epoch boundary: the T chosen for the new epoch and the
    /// measurements it was chosen from, for the event log.
    pub fn take_decision(&mut self) -> Option<String> {
        self.decision.take()
    }

    /// The next T from what has been measured (rank 0's view).
    fn pick(&self) -> u32 {
        if self.world == 1 {
            return 1;
        }
        if self.plans.is_empty() {
            let untried = (1..=self.world as u32).rev().find(|t| !self.measured.iter().any(|m| m.0 == *t));
            return untried.unwrap_or_else(|| {
                self.measured.iter().min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0))).map_or(1, |m| m.0)
            });
        }
        let predicted: Vec<(u32, f64)> =
            self.plans.iter().filter_map(|p| p.predicted_iteration_seconds.map(|s| (p.time_steps, s))).collect();
        next_time_steps(&predicted, &self.measured)
    }

    /// Adds an epoch's seconds at T to T's running mean.
    fn record(&mut self, t: u32, seconds: f64) {
        let had = self.measured.iter().position(|m| m.0 == t);
        let n = match had {
            Some(_) => self.epochs_measured.iter().find(|e| e.0 == t).map_or(1, |e| e.1.max(1)),
            None => 0,
        };
        let mean = had.map_or(seconds, |i| (self.measured[i].1 * n as f64 + seconds) / (n + 1) as f64);
        self.measured.retain(|m| m.0 != t);
        self.measured.push((t, mean));
        self.epochs_measured.retain(|e| e.0 != t);
        self.epochs_measured.push((t, n + 1));
    }

    /// Rank 0 gathers every worker's mean seconds of the epoch, records the
    /// slowest for the current T, picks the next T and broadcasts it.
    fn decide(&mut self, coll: &mut dyn Collective) -> Result<u32, TrainError> {
        let (sum, n) = self.timed;
        let mean = if n > 0 { sum / n as f64 } else { f64::NAN };
        let mut out = vec![Vec::new(); self.world];
        out[0] = mean.to_le_bytes().to_vec();
        let got = coll.all_to_all(out, Category::Control).map_err(TrainError::Comm)?;
        let mut decision = Vec::new();
        if coll.rank() == 0 {
            let mut slowest = Some(0f64);
            for (r, bytes) in got.iter().enumerate() {
                let b: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                    TrainError::Comm(
                        format!("--time-steps auto: worker {r} sent {} bytes of timings, expected 8", bytes.len())
                            .into(),
                    )
                })?;
                let s = f64::from_le_bytes(b);
                // An epoch too short to time (one or two iterations) measures nothing.
                slowest = slowest.zip(s.is_finite().then_some(s)).map(|(a, b)| a.max(b));
            }
            if let Some(s) = slowest {
                self.record(self.current, s);
            }
            let t = self.pick();
            tracing::info!(
                "--time-steps auto: measured iteration seconds by T {:?}; next epoch T = {t}",
                self.measured
            );
            let mut by_t = self.measured.clone();
            by_t.sort_by_key(|m| m.0);
            let by_t: Vec<String> = by_t.iter().map(|(t, s)| format!("T {t}: {:.1} ms", s * 1e3)).collect();
            let basis = if self.plans.is_empty() { "fastest measured" } else { "cost model scaled by measurements" };
            self.decision = Some(format!(
                "--time-steps auto: T {} -> {t} ({basis}; slowest worker's mean iteration {})",
                self.current,
                if by_t.is_empty() { "not timed: epochs too short".to_string() } else { by_t.join(", ") }
            ));
            decision = t.to_le_bytes().to_vec();
        }
        coll.broadcast(&mut decision, 0).map_err(TrainError::Comm)?;
        decision
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .filter(|&t| t >= 1 && t as usize <= self.world)
            .ok_or_else(|| TrainError::Comm("--time-steps auto: worker 0 broadcast a malformed decision".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plans(world: usize, secs: &[f64]) -> Vec<MergePlan> {
        secs.iter()
            .enumerate()
            .map(|(i, &s)| MergePlan { predicted_iteration_seconds: Some(s), ..MergePlan::even(world, i as u32 + 1) })
            .collect()
    }

    /// Rank 0's choice after each epoch whose slowest worker measured `truth(T)` plus `noise(epoch)`.
    fn run(a: &mut AutoSteps, epochs: usize, truth: impl Fn(u32) -> f64, noise: impl Fn(usize) -> f64) -> Vec<u32> {
        (0..epochs)
            .map(|e| {
                let t = a.current;
                a.record(t, truth(t) + noise(e));
                a.current = a.pick();
                a.current
            })
            .collect()
    }

    #[test]
    fn auto_settles_on_the_fastest_measured_t_even_when_the_model_ranks_them_wrongly() {
        // The model favours T = 1 (T = 3 a close second), but T = 3 is the
        // fastest on this "cluster" and T = 1 the slowest.
        let truth = |t: u32| [0.0, 1.0, 0.9, 0.6, 0.8][t as usize];
        let mut a = AutoSteps::new(4, plans(4, &[0.5, 0.6, 0.55, 0.8]));
        assert_eq!(a.current(), 1);
        let picks = run(&mut a, 12, truth, |e| if e % 2 == 0 { 0.04 } else { -0.04 });
        assert_eq!(picks.last(), Some(&3), "{picks:?}, measured {:?}", a.measured);
        // Once there it stays: every later epoch keeps T = 3.
        let first = picks.iter().position(|&t| t == 3).unwrap();
        assert!(picks[first..].iter().all(|&t| t == 3), "{picks:?}");
    }

    #[test]
    fn a_noisy_epoch_refines_the_mean_instead_of_replacing_it() {
        let mut a = AutoSteps::new(2, plans(2, &[1.0, 1.0]));
        a.record(1, 1.0);
        a.record(1, 2.0);
        a.record(1, 3.0);
        assert_eq!(a.measured, vec![(1, 2.0)]);
        assert_eq!(a.epochs_measured, vec![(1, 3)]);
        // T = 2 measured once at 1.9 beats the mean of T = 1 although T = 1 once ran 1.0.
        a.record(2, 1.9);
        assert_eq!(a.pick(), 2);
    }
}
