//! Errors shared across the library, and the one question the CLI asks of
//! every error: was the input at fault (exit 2) or the run (exit 1)? Each
//! error type answers for itself by implementing `Blame`.

use std::error::Error;

/// The user's input is wrong (a flag, a file's contents, a name): exit code 2.
/// The message names what is wrong and where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

impl BadInput {
    pub fn new(msg: impl Into<String>) -> Self {
        BadInput(msg.into())
    }
}

/// A subcommand that is declared but not built yet.
#[derive(Debug, thiserror::Error)]
#[error("not implemented yet")]
pub struct NotImplemented;

/// Implemented by each library error type that can blame the user's input.
pub trait Blame {
    /// True when the input was at fault (the process exits 2), false when the
    /// run failed (exit 1).
    fn is_bad_input(&self) -> bool;

    /// The process exit code for this error.
    fn exit_code(&self) -> u8 {
        if self.is_bad_input() { 2 } else { 1 }
    }
}

impl Blame for BadInput {
    fn is_bad_input(&self) -> bool {
        true
    }
}

impl Blame for NotImplemented {
    fn is_bad_input(&self) -> bool {
        true
    }
}

/// True when `e` blames the input. A `dyn Error` cannot be asked for another
/// trait on stable Rust (`Error::provide` is unstable), so each type that
/// implements `Blame` is named here once; what it answers is its own impl's.
pub fn is_bad_input(e: &(dyn Error + 'static)) -> bool {
    fn ask<T: Blame + Error + 'static>(e: &(dyn Error + 'static)) -> Option<bool> {
        e.downcast_ref::<T>().map(T::is_bad_input)
    }
    const BLAMING: &[fn(&(dyn Error + 'static)) -> Option<bool>] = &[
        ask::<BadInput>,
        ask::<NotImplemented>,
        ask::<crate::cluster::ProfileError>,
        ask::<crate::train::config_file::ConfigFileError>,
        ask::<crate::cluster::slurm::SlurmError>,
        ask::<crate::format::FormatError>,
        ask::<crate::datasets::DatasetError>,
        ask::<crate::train::TrainError>,
        ask::<crate::cluster::driver::DriverError>,
    ];
    BLAMING.iter().find_map(|ask| ask(e)).unwrap_or(false)
}

/// The exit code of a failure whose error chain (outermost first) is `chain`:
/// 2 when any link blames the input, else 1.
pub fn exit_code<'a>(mut chain: impl Iterator<Item = &'a (dyn Error + 'static)>) -> u8 {
    if chain.any(is_bad_input) { 2 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_of_the_chain_is_asked() {
        let bad = anyhow::Error::new(BadInput::new("--fanout `x`")).context("cannot train");
        assert_eq!(exit_code(bad.chain()), 2);
        let io = crate::format::FormatError::Io { path: "f".into(), source: std::io::Error::other("disk") };
        assert_eq!(exit_code(anyhow::Error::new(io).context("cannot open").chain()), 1);
        let nan = crate::train::TrainError::NonFiniteLoss { epoch: 0, iteration: 0, value: f64::NAN };
        assert_eq!((nan.exit_code(), BadInput::new("x").exit_code()), (1, 2));
        assert_eq!(exit_code(anyhow::anyhow!("plain").chain()), 1);
        // A worker's refusal of its job is bad input; its other failures are the run's.
        use crate::cluster::driver::DriverError;
        let refused = DriverError::WorkerRefused { rank: 1, message: "does not fit".into() };
        let failed = DriverError::WorkerFailed { rank: 1, message: "disk full".into() };
        assert_eq!(exit_code(anyhow::Error::new(refused).context("training failed").chain()), 2);
        assert_eq!(exit_code(anyhow::Error::new(failed).context("training failed").chain()), 1);
    }
}
