//! Rank 0's epoch records, handed on once every worker's records of that
//! epoch have been.

use crate::metrics::EpochRecord;
use std::collections::{BTreeMap, VecDeque};

/// The driver merges the workers' streams, each read by its own thread, so
/// rank 0's record of epoch e could be handed on before another worker's last
/// step records of e: TensorBoard then wrote that iteration's point without
/// them, and again, apart, when they came (a 2-iteration run read back 3
/// points under load). Every worker reports its evaluation of e after its
/// steps of e, in the same stream, so once all `world` have, every step
/// record of e has been handed on and the epoch's record may follow.
pub(super) struct EpochGate {
    world: usize,
    /// Per epoch: how many workers have reported its evaluation.
    evaluated: BTreeMap<u64, usize>,
    /// Rank 0's records (with the run's epoch count) not yet handed on, in order.
    held: VecDeque<(EpochRecord, u64)>,
}

impl EpochGate {
    pub(super) fn new(world: usize) -> Self {
        EpochGate { world, evaluated: BTreeMap::new(), held: VecDeque::new() }
    }

    /// A worker reported its evaluation of `epoch`: the records now due.
    pub(super) fn evaluated(&mut self, epoch: u64) -> Vec<(EpochRecord, u64)> {
        *self.evaluated.entry(epoch).or_default() += 1;
        self.release()
    }

    /// Rank 0's record of an epoch: the records now due (it, once every
    /// worker has reported that epoch's evaluation).
    pub(super) fn epoch(&mut self, record: EpochRecord, epochs: u64) -> Vec<(EpochRecord, u64)> {
        self.held.push_back((record, epochs));
        self.release()
    }

    /// Every record still held: the attempt has ended (a worker lost before
    /// its report holds nothing back).
    pub(super) fn drain(&mut self) -> Vec<(EpochRecord, u64)> {
        self.evaluated.clear();
        self.held.drain(..).collect()
    }

    fn release(&mut self) -> Vec<(EpochRecord, u64)> {
        let mut due = Vec::new();
        while let Some((r, _)) = self.held.front() {
            if self.evaluated.get(&r.epoch).copied().unwrap_or(0) < self.world {
                break;
            }
            let epoch = r.epoch;
            due.extend(self.held.pop_front());
            // Counts of epochs handed on are not needed again.
            self.evaluated = self.evaluated.split_off(&(epoch + 1));
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(epoch: u64) -> EpochRecord {
        EpochRecord { epoch, ..Default::default() }
    }

    fn epochs(v: Vec<(EpochRecord, u64)>) -> Vec<u64> {
        v.into_iter().map(|(r, _)| r.epoch).collect()
    }

    #[test]
    fn an_epoch_is_handed_on_once_every_worker_reported_its_evaluation() {
        let mut g = EpochGate::new(2);
        // Rank 0 evaluated epoch 0 and sent its record; worker 1's report (after its steps) is late.
        assert!(g.evaluated(0).is_empty());
        assert!(g.epoch(rec(0), 3).is_empty());
        assert_eq!(epochs(g.evaluated(0)), [0]);
        // Both reports first: the record goes at once.
        assert!(g.evaluated(1).is_empty() && g.evaluated(1).is_empty());
        assert_eq!(epochs(g.epoch(rec(1), 3)), [1]);
        // Records stay in order: epoch 2 waits, and so would any after it.
        assert!(g.evaluated(2).is_empty() && g.epoch(rec(2), 3).is_empty());
        assert_eq!(epochs(g.drain()), [2]);
        assert!(g.drain().is_empty());
    }

    #[test]
    fn one_worker_is_never_held() {
        let mut g = EpochGate::new(1);
        assert!(g.evaluated(0).is_empty());
        assert_eq!(epochs(g.epoch(rec(0), 1)), [0]);
    }
}
