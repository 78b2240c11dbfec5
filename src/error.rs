//! Errors shared across the library, and the one question the CLI asks of
//! every error: was the input at fault (exit 2) or the run (exit 1)?

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

/// True when `e` says the input was bad (so the process should exit 2).
/// Each library error type that can blame input is listed here once.
pub fn is_bad_input(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<BadInput>() || e.is::<NotImplemented>() || e.is::<crate::cluster::ProfileError>() {
        return true;
    }
    if let Some(f) = e.downcast_ref::<crate::format::FormatError>() {
        return !matches!(f, crate::format::FormatError::Io { .. });
    }
    if let Some(d) = e.downcast_ref::<crate::datasets::DatasetError>() {
        return d.is_bad_input();
    }
    false
}
