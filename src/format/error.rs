use std::path::PathBuf;

/// An archive that cannot be read is the input's fault (re-create it); an
/// I/O failure is the run's.
impl crate::error::Blame for FormatError {
    fn is_bad_input(&self) -> bool {
        !matches!(self, FormatError::Io { .. })
    }
}

/// Errors from reading or writing leapgnn archives. Each names the file and
/// says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: not a leapgnn archive (bad magic bytes); re-create it with `leapgnn download` or `leapgnn partition`"
    )]
    BadMagic { path: PathBuf },
    #[error("{path}: truncated: header says {expected} bytes, file has {actual}; delete it and re-create it")]
    Truncated { path: PathBuf, expected: u64, actual: u64 },
    #[error("{path}: written by a newer leapgnn (format version {file}, this binary reads {ours}); upgrade leapgnn")]
    NewerVersion { path: PathBuf, file: u32, ours: u32 },
    #[error(
        "{path}: format version {file} is older than this binary's version {ours} (version 2 stores sparse \
         features as CSR); convert it with `{convert}`"
    )]
    OlderVersion { path: PathBuf, file: u32, ours: u32, convert: String },
    #[error("{path}: holds a {found}, expected a {expected}")]
    WrongKind { path: PathBuf, expected: &'static str, found: String },
    #[error(
        "{path}: checksum mismatch (stored {stored:016x}, computed {computed:016x}): the file is corrupt; delete it and re-create it"
    )]
    Checksum { path: PathBuf, stored: u64, computed: u64 },
    #[error("{path}: corrupt archive: {detail}; delete it and re-create it")]
    Corrupt { path: PathBuf, detail: String },
    #[error("{path}: cannot serialise: {detail}")]
    Serialize { path: PathBuf, detail: String },
}

impl FormatError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io { path: path.into(), source }
    }
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        FormatError::Corrupt { path: path.into(), detail: detail.into() }
    }
}
