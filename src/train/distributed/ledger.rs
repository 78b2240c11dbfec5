//! What the driver received from the attempts of one run (`--restarts`), by
//! position, so that a run restarted from a checkpoint counts the bytes and
//! rows of the training its final model reflects: the workers of an attempt
//! that was lost never sent their final reports (their socket totals), but
//! their step records and evaluation reports came as they went. A restart
//! takes its count from the checkpoint (`progress.run_counts`) where it has
//! one, which also holds what moved between the records; this is the count
//! of a checkpoint without one (an older version's).

use crate::metrics::{ByteCounts, RowCounts, RunBytes, StepRecord, add_bytes};

/// The step records and evaluation reports of this driver's attempts that a
/// later attempt did not train again, on top of what the run counted before
/// this driver took it up.
#[derive(Default)]
pub(super) struct Ledger {
    /// What the run counted before the position this driver resumed it
    /// from (`counted_before`: the checkpoint's count, or the run's last
    /// summary); set by the first attempt. `Some(None)`: unknown (a
    /// checkpoint without a count), and so is every count on top of it.
    base: Option<Option<(RowCounts, RunBytes)>>,
    /// (epoch, iteration) of each step record, its rows and bytes sent.
    steps: Vec<((u64, u64), RowCounts, ByteCounts)>,
    /// Each worker's bytes sent evaluating an epoch.
    evals: Vec<(u64, ByteCounts)>,
}

impl Ledger {
    pub(super) fn step(&mut self, r: &StepRecord) {
        self.steps.push(((r.epoch, r.iteration), r.rows, r.bytes_out));
    }

    pub(super) fn eval(&mut self, epoch: u64, sent: ByteCounts) {
        self.evals.push((epoch, sent));
    }

    /// An attempt starts at `at` (epoch, iteration; the checkpoint's, or
    /// (0, 0)): what it trains again is dropped, as `metrics.jsonl` drops its
    /// records, and what stays is returned: the rows and bytes of the run
    /// before `at`. An evaluation is before `at` when its epoch is: a
    /// checkpoint at an epoch's last iteration resumes with that epoch's
    /// evaluation. `base` is the run's count before this driver's first
    /// attempt (taken once: the first call's), `None` where it is unknown:
    /// then so is the answer, since what follows would read as the whole run.
    pub(super) fn resume_at(
        &mut self,
        at: (u64, u64),
        base: impl FnOnce() -> Option<(RowCounts, RunBytes)>,
    ) -> Option<(RowCounts, RunBytes)> {
        self.steps.retain(|s| s.0 < at);
        self.evals.retain(|e| e.0 < at.0);
        let (mut rows, mut bytes) = self.base.get_or_insert_with(base).clone()?;
        let (mut total, mut eval) = (ByteCounts::default(), ByteCounts::default());
        for (_, r, b) in &self.steps {
            rows += *r;
            add_bytes(&mut total, b);
        }
        for (_, b) in &self.evals {
            add_bytes(&mut eval, b);
        }
        add_bytes(&mut total, &eval);
        bytes.add(&RunBytes::split(total, eval));
        Some((rows, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_keeps_what_came_before_its_position_and_the_first_base() {
        let sent = |f| ByteCounts { features: f, gradients: 1, ..Default::default() };
        let step = |epoch, iteration, f| StepRecord {
            epoch,
            iteration,
            rows: RowCounts { requested: f, ..Default::default() },
            bytes_out: sent(f),
            ..Default::default()
        };
        let mut l = Ledger::default();
        let base = RunBytes::split(sent(1000), ByteCounts::default());
        let (rows, bytes) = l.resume_at((0, 2), || Some((RowCounts::default(), base.clone()))).unwrap();
        assert_eq!((rows, bytes), (RowCounts::default(), base.clone()));
        for (e, i, f) in [(0, 2, 10), (0, 3, 20), (1, 0, 40), (1, 1, 80)] {
            l.step(&step(e, i, f));
        }
        l.eval(0, sent(5));
        l.eval(0, sent(7));
        l.eval(1, sent(9));
        // Restarted from (1, 0): epoch 0's steps and evaluations stay, epoch 1's go.
        let (rows, bytes) = l.resume_at((1, 0), || panic!("the base is taken once")).unwrap();
        assert_eq!(rows.requested, 30);
        assert_eq!(bytes.train, ByteCounts { features: 1030, gradients: 3, ..Default::default() });
        assert_eq!(bytes.eval, ByteCounts { features: 12, gradients: 2, ..Default::default() });
        assert_eq!(bytes.total, ByteCounts { features: 1042, gradients: 5, ..Default::default() });
        // A later restart from an earlier position drops more.
        let (rows, bytes) = l.resume_at((0, 3), || None).unwrap();
        assert_eq!((rows.requested, bytes.total.features), (10, 1010));
    }

    #[test]
    fn an_unknown_base_leaves_every_later_count_unknown() {
        let mut l = Ledger::default();
        assert_eq!(l.resume_at((1, 0), || None), None);
        l.step(&StepRecord {
            epoch: 1,
            bytes_out: ByteCounts { gradients: 8, ..Default::default() },
            ..Default::default()
        });
        assert_eq!(l.resume_at((2, 0), || panic!("the base is taken once")), None);
    }
}
