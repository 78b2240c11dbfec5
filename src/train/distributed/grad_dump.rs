//! Test hook behind `train --dump-grad FILE`: the first iteration's summed
//! gradient, as raw little-endian f32, so runs with different worker counts
//! can be compared exactly.

use crate::metrics::{EpochRecord, StepRecord};
use crate::train::{Observer, TrainError};
use std::path::PathBuf;

/// Passes everything on to `inner`; writes the first gradient it sees to `path`.
pub struct GradDump<'a> {
    pub path: Option<PathBuf>,
    pub inner: &'a mut dyn Observer,
}

impl Observer for GradDump<'_> {
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.inner.step(r)
    }
    fn epoch(&mut self, e: &EpochRecord, epochs: u64) {
        self.inner.epoch(e, epochs)
    }
    fn evaluated(&mut self, epoch: u64, sent: &crate::metrics::ByteCounts) {
        self.inner.evaluated(epoch, sent)
    }
    fn start(&mut self, info: &crate::metrics::RunInfo) {
        self.inner.start(info)
    }
    fn hosts(&mut self, hosts: &[String]) {
        self.inner.hosts(hosts)
    }
    fn event(&mut self, msg: &str) {
        self.inner.event(msg)
    }
    fn before_checkpoint(&mut self, through: u64) -> Result<(), TrainError> {
        self.inner.before_checkpoint(through)
    }
    fn may_checkpoint(&mut self, through: u64) -> Result<bool, TrainError> {
        self.inner.may_checkpoint(through)
    }
    fn restart(&mut self, r: &crate::metrics::RestartRecord) {
        self.inner.restart(r)
    }
    fn stop_requested(&self) -> bool {
        self.inner.stop_requested()
    }
    fn gradient(&mut self, i: u64, g: &[f32]) {
        if let Some(path) = self.path.take()
            && let Err(e) = crate::format::write_atomic(&path, bytemuck::cast_slice(g))
        {
            tracing::warn!("--dump-grad {}: {e}", path.display());
        }
        self.inner.gradient(i, g)
    }
    fn wants_gradient(&self) -> bool {
        self.path.is_some() || self.inner.wants_gradient()
    }
}
