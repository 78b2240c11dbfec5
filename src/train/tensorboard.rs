//! `train --tensorboard DIR`: an observer that writes the run's curves to
//! `DIR/<run>/`, one TensorBoard run per leapgnn run, so `tensorboard
//! --logdir DIR` compares runs side by side.

use super::{Observer, TrainError};
use crate::BadInput;
use crate::format::FormatError;
use crate::metrics::{EpochRecord, RunInfo, StepRecord, TensorBoardLog};
use std::path::{Path, PathBuf};

/// Passes everything on to `inner`; without a directory it writes nothing.
pub struct TensorBoard<'a> {
    dir: Option<PathBuf>,
    log: Option<TensorBoardLog>,
    pub inner: &'a mut dyn Observer,
}

impl<'a> TensorBoard<'a> {
    /// Refuses a `dir` that is a file, or that cannot be made or written,
    /// before any worker starts; the directory itself is made when the run
    /// starts (a rejected run leaves nothing behind).
    pub fn new(dir: Option<PathBuf>, inner: &'a mut dyn Observer) -> Result<Self, BadInput> {
        if let Some(dir) = &dir {
            writable(dir)?;
        }
        Ok(TensorBoard { dir, log: None, inner })
    }

    /// Logging is a side channel: a failed write costs the curves, not the run.
    fn keep(&mut self, r: Result<(), FormatError>) {
        if let Err(e) = r {
            // Also a warning: events reach neither a pipe nor --json's stderr.
            let msg = format!("--tensorboard: {e}; no more TensorBoard events are written");
            tracing::warn!("{msg}");
            self.inner.event(&msg);
            self.log = None;
        }
    }

    /// Writes the iterations of a run that stopped in mid-epoch.
    pub fn finish(&mut self) {
        if let Some(log) = self.log.as_mut() {
            let r = log.finish();
            self.keep(r);
        }
    }
}

/// `dir`, or the nearest of its ancestors that exists, is a directory this
/// process can create in.
fn writable(dir: &Path) -> Result<(), BadInput> {
    use crate::paths::Uncreatable;
    let why = match crate::paths::can_create_in(dir) {
        Ok(()) => return Ok(()),
        Err(Uncreatable::NotADirectory(p)) if p == dir => "not a directory".to_string(),
        Err(Uncreatable::NotADirectory(p)) => format!("{} is not a directory", p.display()),
        Err(Uncreatable::Refused(p, e)) => format!("cannot create anything in {} ({e})", p.display()),
    };
    Err(BadInput::new(format!(
        "--tensorboard {}: {why}; give a directory you can write (event files go to DIR/<run>/)",
        dir.display()
    )))
}

impl Observer for TensorBoard<'_> {
    fn start(&mut self, info: &RunInfo) {
        let Some(dir) = &self.dir else { return self.inner.start(info) };
        match TensorBoardLog::create(&dir.join(&info.run)) {
            Ok(mut log) => {
                log.start(info);
                self.inner.event(&format!("TensorBoard events: {}", log.path().display()));
                self.log = Some(log);
            }
            Err(e) => {
                let msg = format!("--tensorboard: {e}; the run goes on without TensorBoard events");
                tracing::warn!("{msg}");
                self.inner.event(&msg);
            }
        }
        self.inner.start(info)
    }
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        if let Some(log) = self.log.as_mut() {
            log.step(r);
        }
        self.inner.step(r)
    }
    fn epoch(&mut self, e: &EpochRecord, epochs: u64) {
        if let Some(log) = self.log.as_mut() {
            let r = log.epoch(e);
            self.keep(r);
        }
        self.inner.epoch(e, epochs)
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
    fn wants_gradient(&self) -> bool {
        self.inner.wants_gradient()
    }
    fn gradient(&mut self, i: u64, g: &[f32]) {
        self.inner.gradient(i, g)
    }
}
