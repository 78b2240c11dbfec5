//! Prediction against a measured run: the run's `metrics.jsonl` holds one
//! record per (epoch, iteration, time step, worker) with its sample, gather,
//! compute and sync seconds. An iteration's measured time is, per worker, the
//! sum over its steps; every worker waits for the others in the all-reduce,
//! so the slowest worker's sum is the iteration's wall time. Components are
//! the mean over workers, as the model reports them. The run's first
//! iterations are warm-up (first allocations, page faults, connections,
//! allocator growth) and are left out: one, or two when there are more than
//! four. So are slow outliers (`fit::slow_values`): iterations a preempted
//! worker or a cold start held up, which on a shared host come and go between
//! runs of one configuration (one model-centric run's iterations took up to
//! 404 ms, the same run's others and the next run's about 27 ms). What
//! remains is the steady iteration the cost model predicts; the mean over
//! every iteration past the warm-up is kept beside it.

use super::model::Components;
use crate::BadInput;
use crate::metrics::StepRecord;
use std::collections::BTreeMap;
use std::path::Path;

type PerWorker = BTreeMap<u32, Components>;

/// What a run measured, per iteration and on average.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Measured {
    /// The iterations used: (epoch, iteration).
    pub iterations: Vec<(u64, u64)>,
    /// Per iteration (same order): slowest worker's seconds.
    pub seconds: Vec<f64>,
    pub workers: usize,
    /// Time steps per iteration seen in the records (the largest).
    pub time_steps: u32,
    /// Mean over the iterations used.
    pub iteration_seconds: f64,
    pub components: Components,
    /// Iterations past the warm-up left out as slow outliers.
    pub slow_iterations: usize,
    /// Mean over every iteration past the warm-up, slow ones included.
    pub all_iteration_seconds: f64,
}

/// What a run's step records can hold, from its config and train set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordBounds {
    pub workers: usize,
    pub iterations_per_epoch: u64,
}

impl RecordBounds {
    pub fn of(job: &super::CountJob) -> Self {
        let iterations = crate::schedule::batches::iterations(job.train.len(), job.workers, job.batch_size);
        RecordBounds { workers: job.workers, iterations_per_epoch: iterations as u64 }
    }

    /// Refuses a record the run cannot have written: the prediction replays
    /// each record's batch, so an iteration past the epoch's end would index
    /// past its train ids, and a worker or duplicate the run did not have
    /// would skew the measured times without a word.
    fn check(&self, path: &Path, records: &[(usize, StepRecord)]) -> Result<(), BadInput> {
        let mut seen = std::collections::HashMap::new();
        for (line, r) in records {
            let bad = |field: &str, why: String| {
                BadInput::new(format!(
                    "{} line {line}: `{field}`: {why}; is this the run's own metrics.jsonl?",
                    path.display()
                ))
            };
            if r.worker as usize >= self.workers {
                return Err(bad("worker", format!("{} in a run of {} worker(s)", r.worker, self.workers)));
            }
            if r.iteration >= self.iterations_per_epoch {
                return Err(bad(
                    "iteration",
                    format!("{} but an epoch of this run has {} iteration(s)", r.iteration, self.iterations_per_epoch),
                ));
            }
            for (field, s) in [
                ("sample_seconds", r.sample_seconds),
                ("gather_seconds", r.gather_seconds),
                ("compute_seconds", r.compute_seconds),
                ("sync_seconds", r.sync_seconds),
            ] {
                if !(s.is_finite() && s >= 0.0) {
                    return Err(bad(field, format!("{s} is not a duration (a finite number of seconds, 0 or more)")));
                }
            }
            if let Some(first) = seen.insert((r.epoch, r.iteration, r.time_step, r.worker, r.layer), *line) {
                return Err(bad(
                    "iteration",
                    format!(
                        "epoch {} iteration {} time step {} of worker {} is recorded twice (first at line {first})",
                        r.epoch, r.iteration, r.time_step, r.worker
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The step records of a run's `metrics.jsonl`, as the run wrote them.
pub fn read_metrics(path: &Path) -> Result<Vec<StepRecord>, BadInput> {
    Ok(read_lines(path)?.into_iter().map(|(_, r)| r).collect())
}

/// The step records of `path`, each checked against what the run could write.
pub fn read_run_metrics(path: &Path, bounds: &RecordBounds) -> Result<Vec<StepRecord>, BadInput> {
    let records = read_lines(path)?;
    bounds.check(path, &records)?;
    Ok(records.into_iter().map(|(_, r)| r).collect())
}

/// Each step record with its line number (from 1).
fn read_lines(path: &Path) -> Result<Vec<(usize, StepRecord)>, BadInput> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        BadInput::new(format!(
            "cannot read {}: {e}; --validate takes a run name under <data-dir>/runs/",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        if serde_json::from_str::<crate::metrics::RestartRecord>(line).is_ok() {
            continue;
        }
        let r: StepRecord = serde_json::from_str(line)
            .map_err(|e| BadInput::new(format!("{} line {}: not a metrics record: {e}", path.display(), i + 1)))?;
        out.push((i + 1, r));
    }
    Ok(out)
}

/// The measured figures of `records`.
pub fn measure(records: &[StepRecord]) -> Result<Measured, BadInput> {
    // (epoch, iteration) -> worker -> components.
    let mut by_it: BTreeMap<(u64, u64), PerWorker> = BTreeMap::new();
    let mut time_steps = 0;
    for r in records {
        time_steps = time_steps.max(r.time_step + 1);
        let c = by_it.entry((r.epoch, r.iteration)).or_default().entry(r.worker).or_default();
        c.add(&Components {
            sample: r.sample_seconds,
            gather: r.gather_seconds,
            compute: r.compute_seconds,
            sync: r.sync_seconds,
        });
    }
    let workers = by_it.values().map(BTreeMap::len).max().unwrap_or(0);
    if workers == 0 {
        return Err(BadInput::new("the run has no step records: nothing to compare with".to_string()));
    }
    // Only iterations every worker reported (an interrupted run may end mid-iteration).
    let mut complete: Vec<(&(u64, u64), &PerWorker)> = by_it.iter().filter(|(_, w)| w.len() == workers).collect();
    let warm_up = match complete.len() {
        0 | 1 => 0,
        2..=4 => 1,
        _ => 2,
    };
    complete.drain(..warm_up);
    let totals: Vec<f64> =
        complete.iter().map(|(_, per)| per.values().map(Components::total).fold(0.0, f64::max)).collect();
    let slow = super::fit::slow_values(&totals);
    let mut m = Measured { workers, time_steps, ..Default::default() };
    m.all_iteration_seconds = totals.iter().sum::<f64>() / totals.len().max(1) as f64;
    for (((&key, per), seconds), slow) in complete.into_iter().zip(totals).zip(slow) {
        if slow {
            m.slow_iterations += 1;
            continue;
        }
        let mut mean = Components::default();
        per.values().for_each(|c| mean.add(c));
        m.iterations.push(key);
        m.seconds.push(seconds);
        m.iteration_seconds += seconds;
        m.components.add(&mean.scale(1.0 / workers as f64));
    }
    let k = 1.0 / m.iterations.len().max(1) as f64;
    m.iteration_seconds *= k;
    m.components = m.components.scale(k);
    Ok(m)
}

/// Relative error of each component and of the iteration: (predicted - measured) / measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Errors {
    pub iteration: f64,
    pub sample: f64,
    pub gather: f64,
    pub compute: f64,
    pub sync: f64,
}

pub fn errors(pred_seconds: f64, pred: &Components, meas_seconds: f64, meas: &Components) -> Errors {
    let rel = |p: f64, m: f64| {
        if m > 0.0 {
            (p - m) / m
        } else if p > 0.0 {
            f64::INFINITY
        } else {
            0.0
        }
    };
    Errors {
        iteration: rel(pred_seconds, meas_seconds),
        sample: rel(pred.sample, meas.sample),
        gather: rel(pred.gather, meas.gather),
        compute: rel(pred.compute, meas.compute),
        sync: rel(pred.sync, meas.sync),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(epoch: u64, iteration: u64, t: u32, w: u32, s: f64) -> StepRecord {
        StepRecord {
            epoch,
            iteration,
            time_step: t,
            worker: w,
            sample_seconds: s,
            gather_seconds: s,
            compute_seconds: s,
            sync_seconds: s,
            ..Default::default()
        }
    }

    #[test]
    fn slowest_worker_sets_the_iteration_and_warm_up_is_dropped() {
        let recs = vec![
            rec(0, 0, 0, 0, 9.0),
            rec(0, 0, 0, 1, 9.0),
            rec(0, 1, 0, 0, 1.0),
            rec(0, 1, 1, 0, 1.0),
            rec(0, 1, 0, 1, 0.5),
            rec(0, 1, 1, 1, 0.5),
            rec(0, 2, 0, 0, 1.0), // worker 1 never reported iteration 2
        ];
        let m = measure(&recs).unwrap();
        assert_eq!(m.iterations, vec![(0, 1)]);
        assert_eq!(m.time_steps, 2);
        assert!((m.iteration_seconds - 8.0).abs() < 1e-12);
        assert!((m.components.sample - 1.5).abs() < 1e-12);
        assert_eq!((m.slow_iterations, m.all_iteration_seconds), (0, 8.0));
    }

    /// Iterations of 1 s per step but two held up (one worker's 20 s step):
    /// those two are left out of the steady figures and kept in the mean of all.
    #[test]
    fn slow_outliers_are_left_out_of_the_steady_iteration() {
        let mut recs = Vec::new();
        for i in 0..12 {
            for w in 0..2 {
                let slow = w == 1 && (i == 5 || i == 9);
                recs.push(rec(0, i, 0, w, if slow { 5.0 } else { 0.25 }));
            }
        }
        let m = measure(&recs).unwrap();
        // Two warm-up iterations, then ten, of which two slow.
        assert_eq!(m.slow_iterations, 2);
        assert_eq!(m.iterations.len(), 8);
        assert!(!m.iterations.contains(&(0, 5)) && !m.iterations.contains(&(0, 9)));
        assert_eq!(m.iteration_seconds, 1.0);
        assert_eq!(m.components.compute, 0.25);
        assert_eq!(m.all_iteration_seconds, (8.0 + 2.0 * 20.0) / 10.0);
    }
}
