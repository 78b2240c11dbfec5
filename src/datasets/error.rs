use crate::error::Blame;
use crate::format::FormatError;
use std::path::PathBuf;

/// Errors of the registry, the converters and the downloader. Each names the
/// file (and line) or URL at fault and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A source file's contents are wrong at a given line.
    #[error("{file}:{line}: {msg}")]
    Parse { file: String, line: u64, msg: String },
    /// A source file or directory is wrong as a whole (missing part, bad shape).
    #[error("{file}: {msg}")]
    Invalid { file: String, msg: String },
    /// A flag, a name or the registry is wrong.
    #[error("{0}")]
    Input(#[from] crate::BadInput),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The network or the server failed; a rerun resumes.
    #[error("{url}: {msg}")]
    Download { url: String, msg: String },
    #[error(
        "{file}: sha256 mismatch (expected {expected}, got {actual}); the partial file was deleted, rerun to download \
         it again (if the same sha256 comes back, the mirror serves another file than the registry pins: check the \
         entry's sha256 and URL in the registry)"
    )]
    Checksum { file: PathBuf, expected: String, actual: String },
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl DatasetError {
    pub fn parse(file: impl Into<String>, line: u64, msg: impl Into<String>) -> Self {
        DatasetError::Parse { file: file.into(), line, msg: msg.into() }
    }
    pub fn invalid(file: impl Into<String>, msg: impl Into<String>) -> Self {
        DatasetError::Invalid { file: file.into(), msg: msg.into() }
    }
    pub fn input(msg: impl Into<String>) -> Self {
        DatasetError::Input(crate::BadInput::new(msg))
    }
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DatasetError::Io { path: path.into(), source }
    }
}

impl Blame for DatasetError {
    /// A checksum mismatch is not the input's fault: the download went wrong,
    /// and a rerun fixes it.
    fn is_bad_input(&self) -> bool {
        match self {
            DatasetError::Parse { .. } | DatasetError::Invalid { .. } | DatasetError::Input(_) => true,
            DatasetError::Format(f) => f.is_bad_input(),
            DatasetError::Io { .. } | DatasetError::Download { .. } | DatasetError::Checksum { .. } => false,
        }
    }
}
