//! The driver's half of the checkpoint barrier (`Observer::before_checkpoint`):
//! rank 0 writes a checkpoint only once the driver holds every worker's step
//! records up to it.

/// A checkpoint's state came from the workers' collective, their records by
/// separate connections: rank 0 wrote it while another worker's last records
/// were still on their way, and a driver killed then left a run whose resume
/// went on past records no file held. Each worker now says when it has sent
/// its records through a checkpoint's iteration (`Report::Sent`); once every
/// worker has, those records are in `metrics.jsonl` (each stream is read in
/// order) and rank 0 may be told (`ToWorker::Held`).
pub(super) struct CheckpointGate {
    /// Per worker: the last count it said it sent its records through.
    sent: Vec<Option<u64>>,
    /// The last count rank 0 was told.
    told: Option<u64>,
}

impl CheckpointGate {
    pub(super) fn new(world: usize) -> Self {
        CheckpointGate { sent: vec![None; world], told: None }
    }

    /// `rank` has sent its records through `through`: the count every worker
    /// has now sent its records through, if rank 0 has not been told it.
    pub(super) fn sent(&mut self, rank: usize, through: u64) -> Option<u64> {
        let slot = self.sent.get_mut(rank)?;
        *slot = Some(slot.map_or(through, |s| s.max(through)));
        let all = self.sent.iter().copied().min().flatten()?;
        (self.told < Some(all)).then(|| {
            self.told = Some(all);
            all
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_0_is_told_once_every_worker_has_sent_and_only_what_is_new() {
        let mut g = CheckpointGate::new(3);
        assert_eq!(g.sent(0, 5), None);
        assert_eq!(g.sent(2, 5), None);
        assert_eq!(g.sent(1, 5), Some(5));
        // A worker ahead does not speak for the others.
        assert_eq!(g.sent(1, 10), None);
        assert_eq!(g.sent(0, 10), None);
        assert_eq!(g.sent(2, 10), Some(10));
        // The same count again (a stage's checkpoint written twice) is not news.
        for r in 0..3 {
            assert_eq!(g.sent(r, 10), None);
        }
        // A rank the job does not have is ignored, not a panic.
        assert_eq!(g.sent(3, 20), None);
    }

    #[test]
    fn a_first_checkpoint_at_iteration_0_is_told() {
        let mut g = CheckpointGate::new(2);
        assert_eq!(g.sent(1, 0), None);
        assert_eq!(g.sent(0, 0), Some(0));
    }
}
