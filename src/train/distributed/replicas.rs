//! `--check-replicas N`: every N iterations the workers compare a hash of
//! their weights (one tiny all-reduce), so a replica that drifted from the
//! others stops the run at once instead of silently training a different model.

use super::super::strategy::{Iteration, Strategy, StrategyKind};
use super::super::{Collective, TrainError, Worker};
use crate::comm::{Category, Mesh};
use crate::train::strategy::StepSink;
use crate::train::{read_u64_slots, u64_slots};
use std::time::Duration;

pub struct ReplicaCheck<'m> {
    pub inner: Box<dyn Strategy>,
    pub mesh: &'m Mesh,
    pub every: u64,
    pub timeout: Duration,
    /// Checks passed so far (reported in the run summary).
    pub passed: u64,
}

impl ReplicaCheck<'_> {
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

impl Strategy for ReplicaCheck<'_> {
    fn kind(&self) -> StrategyKind {
        self.inner.kind()
    }
    fn time_steps(&self) -> u32 {
        self.inner.time_steps()
    }
    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        if self.every > 0 && it.global_index.is_multiple_of(self.every) {
            self.check(w, it)?;
            self.passed += 1;
        }
        self.inner.iteration(w, coll, it, grad, records)
    }
    fn statistics_pass(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
    ) -> Result<(), TrainError> {
        self.inner.statistics_pass(w, coll, it)
    }
    fn before_evaluation(&mut self, w: &mut Worker<'_>, done: u64) {
        self.inner.before_evaluation(w, done);
    }
    fn settle(&mut self, w: &mut Worker<'_>) -> Result<(), TrainError> {
        self.inner.settle(w)
    }
    fn auto_state(&self) -> Option<crate::train::minibatch::AutoState> {
        self.inner.auto_state()
    }
    fn restore_auto(&mut self, s: &crate::train::minibatch::AutoState) -> Result<(), TrainError> {
        self.inner.restore_auto(s)
    }
}
