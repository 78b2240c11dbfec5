//! A host's remote directories over SFTP: reading results back (the ssh
//! launcher's `open_dir`: rank 0 writes checkpoints into its remote run
//! directory and the driver copies them into its own), and the run area,
//! `<data_dir>/runs/`, which the driver tidies when a run ends and `cluster
//! clean` empties of what failed runs left.
//!
//! Whatever the host shows is untrusted: only directories directly under
//! `<data_dir>/runs/` with a plain run name are ever removed, a symbolic link
//! is never followed (the run area itself included), and the removal is
//! `rm -rf` from inside the run area once its physical path is the one
//! inspected, so no name or link on the host can point it elsewhere.

use super::launcher::RemoteDir;
use super::profile::{HostSpec, Profile};
use super::ssh::RemoteLayout;
use super::ssh_session::{self, SessionOptions, SshError, quote};
use serde::Serialize;
use ssh2::{FileStat, Session, Sftp};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A file larger than this is not a result the driver reads into memory.
const MAX_FILE: u64 = 16 << 30;
/// A checkpoint's `state.json` larger than this is not one leapgnn wrote.
const MAX_STATE: u64 = 64 << 20;
/// A run directory is `checkpoint/` and its files: anything nested deeper
/// was not written by leapgnn, and is not walked further.
const MAX_DEPTH: usize = 8;

/// One SFTP channel on its own authenticated session to one host, with the
/// profile's remote directories resolved there.
pub struct HostSftp {
    session: Session,
    sftp: Sftp,
    pub layout: RemoteLayout,
    /// `user@address:port`, for messages.
    pub host: String,
}

impl HostSftp {
    pub fn connect(host: &HostSpec, opts: &SessionOptions, profile: &Profile) -> Result<Self, SshError> {
        let label = host.label();
        let c = ssh_session::connect(host, opts)?;
        let sftp = ssh_session::sftp(&c.session, &label)?;
        let layout = RemoteLayout::resolve(&sftp, &label, profile)?;
        Ok(HostSftp { session: c.session, sftp, layout, host: label })
    }

    /// `<data_dir>/runs` on this host.
    pub fn runs_dir(&self) -> PathBuf {
        self.layout.data.join("runs")
    }

    /// The whole file at `path`, at most `limit` bytes.
    fn read_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>, SshError> {
        let what = format!("reading {}", path.display());
        let mut f = self.sftp.open(path).map_err(SshError::remote(&self.host, what.clone()))?;
        let mut out = Vec::new();
        f.by_ref().take(limit).read_to_end(&mut out).map_err(SshError::remote(&self.host, what))?;
        Ok(out)
    }

    /// What is at `path`, without following a link; `None` when nothing is.
    fn lstat(&self, path: &Path) -> Result<Option<FileStat>, SshError> {
        match self.sftp.lstat(path) {
            Ok(s) => Ok(Some(s)),
            // SSH_FX_NO_SUCH_FILE
            Err(e) if e.code() == ssh2::ErrorCode::SFTP(2) => Ok(None),
            Err(e) => Err(SshError::remote(&self.host, format!("looking at {}", path.display()))(e)),
        }
    }

    /// The run area's physical path, or `None` when there is none yet. A run
    /// area that is a link (or not a directory) is refused as a whole.
    fn run_area(&self) -> Result<Option<PathBuf>, SshError> {
        self.physical_dir(&self.runs_dir())
    }

    /// `dir`'s physical path, or `None` when nothing is there; a link or a
    /// non-directory there is refused as a whole.
    fn physical_dir(&self, dir: &Path) -> Result<Option<PathBuf>, SshError> {
        let Some(st) = self.lstat(dir)? else { return Ok(None) };
        if !is_dir(&st) {
            return Err(SshError::Remote {
                host: self.host.clone(),
                what: format!("cleaning {}", dir.display()),
                detail: format!(
                    "it is {}, not the directory leapgnn makes, so nothing under it is touched (links are never \
                     followed); move it away by hand if it is yours",
                    kind(&st)
                ),
            });
        }
        let real =
            self.sftp.realpath(dir).map_err(SshError::remote(&self.host, format!("resolving {}", dir.display())))?;
        Ok(Some(real))
    }

    /// Every entry of the run area: the run directories (sized), and what
    /// is left alone, with why (an odd name, a link, a file).
    pub fn list_runs(&self) -> Result<(Vec<RemoteRun>, Vec<LeftAlone>), SshError> {
        let (mut runs, mut odd) = (Vec::new(), Vec::new());
        if self.run_area()?.is_none() {
            return Ok((runs, odd));
        }
        let area = self.runs_dir();
        let entries =
            self.sftp.readdir(&area).map_err(SshError::remote(&self.host, format!("listing {}", area.display())))?;
        let mut names: Vec<String> = entries
            .iter()
            .filter_map(|(p, _)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n != "." && n != "..")
            .collect();
        names.sort();
        for name in names {
            match self.run(&name)? {
                Found::Run(r) => runs.push(r),
                Found::Odd(l) => odd.push(l),
                Found::Absent => {}
            }
        }
        Ok((runs, odd))
    }

    /// Run `name`'s directory on this host, looked at without following anything.
    pub fn run(&self, name: &str) -> Result<Found, SshError> {
        if !crate::paths::is_plain_name(name) {
            return Ok(Found::Odd(LeftAlone {
                name: name.to_string(),
                why: "not a run name (leapgnn names runs with letters, digits, -, _ and ., never a path)".into(),
            }));
        }
        let path = self.runs_dir().join(name);
        let Some(st) = self.lstat(&path)? else { return Ok(Found::Absent) };
        if !is_dir(&st) {
            return Ok(Found::Odd(LeftAlone {
                name: name.to_string(),
                why: format!("{}, not a run directory: not followed, not removed", kind(&st)),
            }));
        }
        let (mut files, mut bytes) = (0, 0);
        self.tally(&path, 0, &mut files, &mut bytes)?;
        let state = path.join("checkpoint/state.json");
        let checkpoint = match self.lstat(&state)? {
            Some(st) if st.is_file() => Some(self.read_file(&state, MAX_STATE)?),
            _ => None,
        };
        Ok(Found::Run(RemoteRun { run: name.to_string(), path, files, bytes, checkpoint }))
    }

    /// Counts the files and bytes under `dir`, never through a link.
    fn tally(&self, dir: &Path, depth: usize, files: &mut u64, bytes: &mut u64) -> Result<(), SshError> {
        let entries =
            self.sftp.readdir(dir).map_err(SshError::remote(&self.host, format!("listing {}", dir.display())))?;
        for (p, _) in entries {
            // Names the server gives are joined again here: one that is not a
            // single component (an absolute path, `..`) is not followed.
            let Some(name) = p.file_name().filter(|n| *n != "." && *n != "..") else { continue };
            let p = dir.join(name);
            let Some(st) = self.lstat(&p)? else { continue };
            if is_dir(&st) && depth < MAX_DEPTH {
                self.tally(&p, depth + 1, files, bytes)?;
            } else {
                *files += 1;
                *bytes += st.size.unwrap_or(0);
            }
        }
        Ok(())
    }

    /// Removes run directory `run` (found by `run`/`list_runs`) and everything in it.
    pub fn remove_run(&self, run: &RemoteRun) -> Result<(), SshError> {
        // Checked again here: only a plain name directly in the run area.
        if !crate::paths::is_plain_name(&run.run) {
            return Err(SshError::Remote {
                host: self.host.clone(),
                what: format!("removing {}", run.path.display()),
                detail: "not a run name".into(),
            });
        }
        let Some(real) = self.run_area()? else { return Ok(()) };
        self.remove_in(&self.runs_dir(), &real, std::slice::from_ref(&run.run))
    }

    /// The ranks of the workers running in run directory `run` on this host
    /// (each holds its `run_busy` mark): a driver elsewhere is training it.
    pub fn running_ranks(&self, run: &RemoteRun) -> Result<Vec<usize>, SshError> {
        let script = super::run_busy::running_ranks_script(&quote(&run.path.to_string_lossy()));
        let out = ssh_session::run_ok(&self.session, &self.host, &format!("/bin/sh -c {}", quote(&script)))?;
        Ok(super::run_busy::parse_running(&out))
    }

    /// `rm -rf` of `names` (single components) inside `dir`, whose physical
    /// path was `real` when inspected.
    fn remove_in(&self, dir: &Path, real: &Path, names: &[String]) -> Result<(), SshError> {
        if names.is_empty() {
            return Ok(());
        }
        // cd -P resolves the directory as it is now; going on only when that is
        // the one inspected means a link swapped in meanwhile stops it. rm -r
        // never follows a link inside, and no name has a `/`.
        let names: Vec<String> = names.iter().map(|n| quote(n)).collect();
        let script = format!(
            "cd -P -- {dir} || exit 1; [ \"$(pwd -P)\" = {real} ] || {{ echo '{shown} is no longer the \
             directory inspected (replaced by a link?): nothing removed'; exit 1; }}; rm -rf -- {names}",
            dir = quote(&dir.to_string_lossy()),
            real = quote(&real.to_string_lossy()),
            shown = dir.display().to_string().replace('\'', ""),
            names = names.join(" "),
        );
        // Through sh whatever the login shell (csh has no `$(...)`).
        ssh_session::run_ok(&self.session, &self.host, &format!("/bin/sh -c {}", quote(&script)))?;
        Ok(())
    }

    /// What earlier builds left in `<remote_dir>/bin/`: every shipped binary
    /// (and its `.sha256`) but `keep` (the file name this leapgnn ships as),
    /// and the temp files of uploads that stopped more than `TEMP_AGE` ago
    /// (a younger one may be an upload in progress). Only regular files
    /// leapgnn names; anything else there is not looked at.
    pub fn stale_binaries(&self, keep: &str) -> Result<Vec<StaleFile>, SshError> {
        let bin = self.layout.root.join("bin");
        if self.physical_dir(&bin)?.is_none() {
            return Ok(vec![]);
        }
        let entries =
            self.sftp.readdir(&bin).map_err(SshError::remote(&self.host, format!("listing {}", bin.display())))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut stale = Vec::new();
        for (p, _) in entries {
            let Some(name) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
            let Some(st) = self.lstat(&bin.join(&name))? else { continue };
            if !st.is_file() {
                continue;
            }
            let old = now.saturating_sub(st.mtime.unwrap_or(now)) > TEMP_AGE.as_secs();
            let go = match shipped_binary(&name) {
                Some(Shipped::Binary(b)) | Some(Shipped::Sidecar(b)) => b != keep,
                Some(Shipped::Temp) => old,
                None => false,
            };
            if go {
                stale.push(StaleFile { path: bin.join(&name), name, bytes: st.size.unwrap_or(0) });
            }
        }
        stale.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(stale)
    }

    /// Removes files `stale_binaries` found.
    pub fn remove_binaries(&self, stale: &[StaleFile]) -> Result<(), SshError> {
        let bin = self.layout.root.join("bin");
        let Some(real) = self.physical_dir(&bin)? else { return Ok(()) };
        let names: Vec<String> = stale.iter().map(|f| f.name.clone()).filter(|n| shipped_binary(n).is_some()).collect();
        self.remove_in(&bin, &real, &names)
    }
}

/// An upload stopped this long ago is not coming back (an upload in
/// progress writes its temp file all along).
const TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A file leapgnn shipped to a host's `bin/`.
#[derive(Debug, Clone, Serialize)]
pub struct StaleFile {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, PartialEq)]
enum Shipped<'a> {
    /// `leapgnn-<16 hex>`: the binary's name (as `ship::binary_item` makes it).
    Binary(&'a str),
    /// `leapgnn-<16 hex>.sha256`, of the binary named.
    Sidecar(&'a str),
    /// `.leapgnn-<16 hex>[.sha256].tmp.<tag>`: an upload's temp file.
    Temp,
}

/// Which of leapgnn's files in `bin/` `name` is, if any.
fn shipped_binary(name: &str) -> Option<Shipped<'_>> {
    let is_binary = |n: &str| {
        n.strip_prefix("leapgnn-")
            .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    };
    if let Some((file, tag)) = name.strip_prefix('.').and_then(|n| n.split_once(".tmp.")) {
        let file = file.strip_suffix(".sha256").unwrap_or(file);
        let plain_tag = !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        return (is_binary(file) && plain_tag).then_some(Shipped::Temp);
    }
    match name.strip_suffix(".sha256") {
        Some(b) if is_binary(b) => Some(Shipped::Sidecar(b)),
        None if is_binary(name) => Some(Shipped::Binary(name)),
        _ => None,
    }
}

impl HostSftp {
    /// Directory `dir` on this host, read file by file over this connection.
    pub fn dir(&self, dir: PathBuf) -> impl RemoteDir + '_ {
        On { conn: self, dir }
    }
}

struct On<'a> {
    conn: &'a HostSftp,
    dir: PathBuf,
}

impl RemoteDir for On<'_> {
    fn read(&mut self, name: &str) -> anyhow::Result<Vec<u8>> {
        Ok(self.conn.read_file(&self.dir.join(name), MAX_FILE)?)
    }
}

/// What is at a run's name in the run area.
pub enum Found {
    Run(RemoteRun),
    Odd(LeftAlone),
    Absent,
}

/// A run directory under a host's `<data_dir>/runs/`.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteRun {
    pub run: String,
    /// Its absolute path on the host.
    pub path: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// Its `checkpoint/state.json`, when it has a checkpoint.
    #[serde(skip)]
    pub checkpoint: Option<Vec<u8>>,
}

/// An entry of the run area that is not touched, and why.
#[derive(Debug, Clone, Serialize)]
pub struct LeftAlone {
    pub name: String,
    pub why: String,
}

fn is_dir(st: &FileStat) -> bool {
    st.file_type() == ssh2::FileType::Directory
}

fn kind(st: &FileStat) -> &'static str {
    match st.file_type() {
        ssh2::FileType::Symlink => "a symbolic link",
        ssh2::FileType::RegularFile => "a file",
        ssh2::FileType::Directory => "a directory",
        _ => "a special file",
    }
}

/// One SFTP channel on its own session, rooted at a remote directory.
pub struct SftpDir {
    conn: HostSftp,
    dir: PathBuf,
}

impl SftpDir {
    /// Connects to `host` and resolves `rel` under its data directory.
    pub fn open(host: &HostSpec, opts: &SessionOptions, profile: &Profile, rel: &Path) -> Result<Self, SshError> {
        let conn = HostSftp::connect(host, opts, profile)?;
        let dir = conn.layout.data.join(rel);
        Ok(SftpDir { conn, dir })
    }
}

impl RemoteDir for SftpDir {
    fn read(&mut self, name: &str) -> anyhow::Result<Vec<u8>> {
        Ok(self.conn.read_file(&self.dir.join(name), MAX_FILE)?)
    }

    fn read_if_present(&mut self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        if self.conn.lstat(&self.dir.join(name))?.is_none() {
            return Ok(None);
        }
        self.read(name).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::{Shipped, shipped_binary};

    #[test]
    fn only_the_names_leapgnn_ships_are_recognised() {
        let h = "0123456789abcdef";
        assert_eq!(shipped_binary(&format!("leapgnn-{h}")), Some(Shipped::Binary(&format!("leapgnn-{h}"))));
        assert_eq!(shipped_binary(&format!("leapgnn-{h}.sha256")), Some(Shipped::Sidecar(&format!("leapgnn-{h}"))));
        for temp in [format!(".leapgnn-{h}.tmp.123-abc-0"), format!(".leapgnn-{h}.sha256.tmp.9-f-1")] {
            assert_eq!(shipped_binary(&temp), Some(Shipped::Temp), "{temp}");
        }
        for other in [
            "leapgnn".to_string(),
            "leapgnn-0123".into(),
            format!("leapgnn-{}", h.to_uppercase()),
            format!("leapgnn-{h}.old"),
            format!("leapgnn-{h}x"),
            format!(".leapgnn-{h}.tmp."),
            format!(".leapgnn-{h}.tmp.a/b"),
            format!(".other-{h}.tmp.1"),
            "my-script.sh".into(),
        ] {
            assert_eq!(shipped_binary(&other), None, "{other}");
        }
    }
}
