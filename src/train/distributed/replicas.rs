//! `--check-replicas N`: every N iterations the workers compare a hash of
//! their weights (one tiny all-reduce), so a replica that drifted from the
//! others stops the run at once instead of silently training a different model.

use super::super::strategy::Iteration;
use super::super::{TrainError, Worker};
use crate::comm::{Category, Mesh};
use crate::train::{read_u64_slots, u64_slots};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The training loop calls `before` ahead of every iteration
/// (`LoopInput::before_iteration`), beside the strategy rather than wrapped
/// around it, so the strategy's own methods reach the loop unchanged.
pub struct ReplicaCheck<'m> {
    pub mesh: &'m Mesh,
    pub every: u64,
    pub timeout: Duration,
    /// Checks passed so far (reported in the run summary, and in the final
    /// checkpoint through `Worker::replica_checks`).
    pub passed: AtomicU64,
}

impl ReplicaCheck<'_> {
    /// Compares the replicas before iterations 0, N, 2N, ... of the run.
    pub fn before(&self, w: &Worker<'_>, it: &Iteration<'_>) -> Result<(), TrainError> {
        if self.every > 0 && it.global_index.is_multiple_of(self.every) {
            self.check(w, it)?;
            self.passed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn check(&self, w: &Worker<'_>, it: &Iteration<'_>) -> Result<(), TrainError> {
        let weights = w.params.flat_values()?;
        let h = xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&weights));
        let (rank, world) = (self.mesh.rank(), self.mesh.world());
        let mut all = u64_slots(h, rank, world);
        self.mesh.all_reduce_sum(&mut all, Category::Control, self.timeout).map_err(|e| TrainError::Comm(e.into()))?;
        match read_u64_slots(&all).iter().position(|&x| x != h) {
            None => Ok(()),
            Some(r) => Err(TrainError::Comm(
                format!(
                    "replicas diverged: worker {r}'s weights differ from worker {rank}'s before epoch {}, iteration {}",
                    it.epoch + 1,
                    it.index + 1
                )
                .into(),
            )),
        }
    }
}
