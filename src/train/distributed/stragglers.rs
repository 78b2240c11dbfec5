//! Spots stragglers for the event log: a worker whose busy time in an epoch
//! (sampling, gathering, computing; not waiting in collectives, which the fast
//! workers do on its behalf) is well above the other workers'.

use crate::metrics::StepRecord;
use std::collections::BTreeMap;

/// How many times the median of the others a worker's busy time must reach.
const FACTOR: f64 = 1.5;
/// And by how many seconds at least: an epoch of a few milliseconds (a
/// RETEXO round, a small full-graph step) varies by 1.5x from scheduling
/// noise alone, which named "stragglers" busy 0.00 s in the log.
const MIN_EXCESS: f64 = 0.05;

#[derive(Default)]
pub(crate) struct Stragglers {
    /// Busy seconds per epoch, per worker.
    busy: BTreeMap<u64, Vec<f64>>,
    /// Epochs already judged: their late records are ignored.
    judged: Option<u64>,
}

impl Stragglers {
    pub fn step(&mut self, r: &StepRecord) {
        if self.judged.is_some_and(|e| r.epoch <= e) {
            return;
        }
        let busy = self.busy.entry(r.epoch).or_default();
        let w = r.worker as usize;
        if busy.len() <= w {
            busy.resize(w + 1, 0.0);
        }
        busy[w] += r.sample_seconds + r.gather_seconds + r.compute_seconds;
    }

    /// At the end of `epoch`: one line per straggler of it.
    pub fn epoch_end(&mut self, epoch: u64) -> Vec<String> {
        self.judged = Some(epoch);
        let busy = self.busy.remove(&epoch).unwrap_or_default();
        self.busy.retain(|&e, _| e > epoch);
        if busy.len() < 2 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (w, &b) in busy.iter().enumerate() {
            let mut others: Vec<f64> = busy.iter().enumerate().filter(|&(o, _)| o != w).map(|(_, &s)| s).collect();
            others.sort_by(f64::total_cmp);
            let n = others.len();
            let median = if n % 2 == 1 { others[n / 2] } else { (others[n / 2 - 1] + others[n / 2]) / 2.0 };
            if median > 0.0 && b >= FACTOR * median && b - median >= MIN_EXCESS {
                out.push(format!(
                    "straggler: worker {w} was busy {b:.2} s in epoch {epoch}, {:.1}x the others' median ({median:.2} s)",
                    b / median
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(epoch: u64, worker: u32, compute: f64) -> StepRecord {
        StepRecord { epoch, worker, compute_seconds: compute, sync_seconds: 9.0, ..Default::default() }
    }

    #[test]
    fn only_a_worker_well_above_the_others_is_named_and_late_records_are_ignored() {
        let mut s = Stragglers::default();
        for (w, c) in [(0, 1.0), (1, 1.1), (2, 0.9), (3, 2.0)] {
            s.step(&rec(0, w, c / 2.0));
            s.step(&rec(0, w, c / 2.0));
        }
        let lines = s.epoch_end(0);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("straggler: worker 3 was busy 2.00 s in epoch 0, 2.0x"), "{}", lines[0]);
        // Epoch 0 is judged: its late record does not count, and even workers make no straggler.
        s.step(&rec(0, 0, 50.0));
        for w in 0..4 {
            s.step(&rec(1, w, 1.0 + w as f64 * 0.1));
        }
        assert_eq!(s.epoch_end(1), Vec::<String>::new());
        // One worker alone is never a straggler.
        s.step(&rec(2, 0, 5.0));
        assert_eq!(s.epoch_end(2), Vec::<String>::new());
        // Nor is one 1.7x the others in an epoch of milliseconds (2.4 ms against
        // 1.4 ms: scheduling noise); 50 ms more than the median is.
        for (w, c) in [(0, 0.0014), (1, 0.0024), (2, 0.0013)] {
            s.step(&rec(3, w, c));
        }
        assert_eq!(s.epoch_end(3), Vec::<String>::new());
        for (w, c) in [(0, 0.06), (1, 0.11), (2, 0.05)] {
            s.step(&rec(4, w, c));
        }
        let lines = s.epoch_end(4);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("straggler: worker 1 was busy 0.11 s in epoch 4"), "{}", lines[0]);
    }
}
