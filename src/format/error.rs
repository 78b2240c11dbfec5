use std::path::PathBuf;

/// An archive that cannot be read is the input's fault (re-create it); an
/// I/O failure is the run's.
impl crate::error::Blame for FormatError {
    fn is_bad_input(&self) -> bool {
        !matches!(self, FormatError::Io { .. })
    }
}

/// Errors from reading or writing leapgnn archives. Each names the file and
/// says what to do (`Display`: `fault`, then `remedy`).
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    BadMagic {
        path: PathBuf,
    },
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    NewerVersion {
        path: PathBuf,
        file: u32,
        ours: u32,
    },
    OlderVersion {
        path: PathBuf,
        file: u32,
        ours: u32,
        convert: String,
    },
    WrongKind {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    Checksum {
        path: PathBuf,
        stored: u64,
        computed: u64,
    },
    Corrupt {
        path: PathBuf,
        detail: String,
    },
    /// A write onto a symbolic link goes to the file it points to; one that
    /// points nowhere (or in a circle) has no such file.
    Link {
        path: PathBuf,
        why: String,
    },
    Serialize {
        path: PathBuf,
        detail: String,
    },
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.fault(), self.remedy())
    }
}

/// What to do about the I/O failures an operator can fix.
pub(crate) fn advice(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::*;
    match e.kind() {
        StorageFull | QuotaExceeded => "; free space there, or write elsewhere (--data-dir, --out)",
        // Also met reading (a partition's part, an archive), so not only "writable".
        PermissionDenied => {
            "; let this user read and write it (chmod, chown), or use another place (--data-dir, --out)"
        }
        ReadOnlyFilesystem => "; make it writable, or write elsewhere (--data-dir, --out)",
        // Mapping an archive reserves its whole length of address space, so a
        // `ulimit -v` far below the file's size fails here before any memory is used.
        OutOfMemory => {
            "; out of memory or address space: free memory, or raise this process's address-space limit \
             (ulimit -v, prlimit --as)"
        }
        // std gives EMFILE no kind of its own (Uncategorized).
        _ if e.raw_os_error() == Some(libc::EMFILE) => {
            "; this process has too many files open: raise its open-file limit (ulimit -n, prlimit --nofile)"
        }
        _ => "",
    }
}

impl FormatError {
    /// Where and what is wrong, without what to do about it: for quoting an
    /// error the tool has already dealt with (a damaged file it wrote
    /// again), where "re-create it" would ask the user to redo its work.
    pub fn fault(&self) -> String {
        use FormatError::*;
        match self {
            Io { path, source } => format!("{}: {source}", path.display()),
            BadMagic { path } => format!("{}: not a leapgnn archive (bad magic bytes)", path.display()),
            Truncated { path, expected, actual } => {
                format!("{}: truncated: header says {expected} bytes, file has {actual}", path.display())
            }
            NewerVersion { path, file, ours } => {
                format!(
                    "{}: written by a newer leapgnn (format version {file}, this binary reads {ours})",
                    path.display()
                )
            }
            OlderVersion { path, file, ours, .. } => format!(
                "{}: format version {file} is older than this binary's version {ours} (version 2 stores sparse \
                 features as CSR)",
                path.display()
            ),
            WrongKind { path, expected, found } => {
                format!("{}: holds a {found}, expected a {expected}", path.display())
            }
            Checksum { path, stored, computed } => format!(
                "{}: checksum mismatch (stored {stored:016x}, computed {computed:016x}): the file is corrupt",
                path.display()
            ),
            Corrupt { path, detail } => format!("{}: corrupt archive: {detail}", path.display()),
            Link { path, why } => format!("{}: a symbolic link {why}", path.display()),
            Serialize { path, detail } => format!("{}: cannot serialise: {detail}", path.display()),
        }
    }

    /// What the user should do, as appended to `fault` ("" where the fault says it).
    fn remedy(&self) -> std::borrow::Cow<'static, str> {
        use FormatError::*;
        match self {
            Io { source, .. } => advice(source).into(),
            BadMagic { .. } => "; re-create it with `leapgnn download` or `leapgnn partition`".into(),
            Truncated { .. } | Checksum { .. } | Corrupt { .. } => "; delete it and re-create it".into(),
            NewerVersion { .. } => "; upgrade leapgnn".into(),
            OlderVersion { convert, .. } => format!("; convert it with `{convert}`").into(),
            WrongKind { .. } | Link { .. } | Serialize { .. } => "".into(),
        }
    }

    /// True when the file is absent or is not a sound archive of this version:
    /// writing it again is the cure. False for a failure to read it
    /// (memory, descriptors, permissions, a directory in its place), which a
    /// rewrite would not cure and could hide.
    pub fn is_missing_or_damaged(&self) -> bool {
        match self {
            FormatError::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            FormatError::Link { .. } | FormatError::Serialize { .. } => false,
            FormatError::BadMagic { .. }
            | FormatError::Truncated { .. }
            | FormatError::NewerVersion { .. }
            | FormatError::OlderVersion { .. }
            | FormatError::WrongKind { .. }
            | FormatError::Checksum { .. }
            | FormatError::Corrupt { .. } => true,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io { path: path.into(), source }
    }
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        FormatError::Corrupt { path: path.into(), detail: detail.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn io_errors_an_operator_can_fix_say_how() {
        let msg = |kind| FormatError::io("/d/runs/r/summary.json", Error::from(kind)).to_string();
        assert!(msg(ErrorKind::StorageFull).contains("free space there"), "{}", msg(ErrorKind::StorageFull));
        let denied = msg(ErrorKind::PermissionDenied);
        assert!(denied.contains("let this user read and write it") && denied.contains("--data-dir"), "{denied}");
        assert!(msg(ErrorKind::ReadOnlyFilesystem).contains("--data-dir"));
        assert_eq!(msg(ErrorKind::NotFound), format!("/d/runs/r/summary.json: {}", Error::from(ErrorKind::NotFound)));
        // What mapping an archive under `ulimit -v` gives (ENOMEM).
        let enomem = FormatError::io("/d/cora/dataset.lgnn", Error::from_raw_os_error(12)).to_string();
        assert!(
            enomem.starts_with("/d/cora/dataset.lgnn: ") && enomem.contains("(ulimit -v, prlimit --as)"),
            "{enomem}"
        );
        assert!(enomem.contains("free memory"), "{enomem}");
        let emfile = FormatError::io("/d/cora/dataset.lgnn", Error::from_raw_os_error(libc::EMFILE)).to_string();
        assert!(emfile.contains("Too many open files") && emfile.contains("(ulimit -n, prlimit --nofile)"), "{emfile}");
    }

    #[test]
    fn only_a_missing_or_damaged_file_calls_for_a_rewrite() {
        let io = |e| FormatError::io("/d/p/manifest", e).is_missing_or_damaged();
        assert!(io(Error::from(ErrorKind::NotFound)));
        assert!(!io(Error::from_raw_os_error(12)) && !io(Error::from(ErrorKind::PermissionDenied)));
        assert!(FormatError::corrupt("/d/p/manifest", "x").is_missing_or_damaged());
        assert!(FormatError::BadMagic { path: "/d/p/manifest".into() }.is_missing_or_damaged());
    }

    #[test]
    fn the_fault_of_a_damaged_file_gives_no_advice_and_the_message_adds_it() {
        let path = "/d/cora/chunks/metis-4/manifest";
        let damaged = [
            FormatError::corrupt(path, "vertex 3 is in chunk 9, which is empty"),
            FormatError::Truncated { path: path.into(), expected: 100, actual: 50 },
            FormatError::Checksum { path: path.into(), stored: 1, computed: 2 },
            FormatError::BadMagic { path: path.into() },
        ];
        for e in damaged {
            let (fault, full) = (e.fault(), e.to_string());
            assert!(fault.starts_with(path) && !fault.contains("re-create"), "{fault}");
            assert!(full.starts_with(&fault) && full.len() > fault.len() && full.contains("re-create"), "{full}");
        }
        let checksum = FormatError::Checksum { path: path.into(), stored: 1, computed: 2 };
        assert_eq!(
            checksum.to_string(),
            format!(
                "{path}: checksum mismatch (stored 0000000000000001, computed 0000000000000002): the file is \
                 corrupt; delete it and re-create it"
            )
        );
    }

    #[test]
    fn a_failed_atomic_write_names_the_target_not_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the temporary file would go: creating it fails.
        std::fs::create_dir(dir.path().join(format!(".x.json.tmp.{}", std::process::id()))).unwrap();
        let e = crate::format::write_atomic(dir.path().join("x.json"), b"{}").unwrap_err().to_string();
        assert!(e.contains("x.json") && !e.contains(".tmp."), "{e}");
    }
}
