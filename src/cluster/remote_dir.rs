//! Reading results back from a worker's host over SFTP (the ssh launcher's
//! `open_dir`): rank 0 writes checkpoints into its remote run directory and
//! the driver copies them into its own.

use super::launcher::RemoteDir;
use super::ssh::{RemoteLayout, SshLauncher};
use super::ssh_session::{self, SshError};
use ssh2::{Session, Sftp};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A file larger than this is not a result the driver reads into memory.
const MAX_FILE: u64 = 16 << 30;

/// One SFTP channel on its own session, rooted at a remote directory.
pub struct SftpDir {
    // Kept alive for `sftp`, whose channel belongs to it.
    _session: Session,
    sftp: Sftp,
    dir: PathBuf,
    host: String,
}

impl SftpDir {
    /// Connects to the host of `rank` and resolves `rel` under its data directory.
    pub fn open(launcher: &SshLauncher, rank: usize, rel: &Path) -> Result<Self, SshError> {
        let profile = launcher.profile();
        let host = launcher.host_for(rank).ok_or_else(|| SshError::Remote {
            host: profile.name(),
            what: format!("reading {}", rel.display()),
            detail: format!("the profile has no rank {rank}"),
        })?;
        let label = host.label();
        let c = ssh_session::connect(&host, &launcher.session_options())?;
        let sftp = c.session.sftp().map_err(SshError::remote(&label, "starting SFTP"))?;
        let layout = RemoteLayout::resolve(&sftp, &label, profile)?;
        Ok(SftpDir { _session: c.session, sftp, dir: layout.data.join(rel), host: label })
    }
}

impl RemoteDir for SftpDir {
    fn read(&mut self, name: &str) -> anyhow::Result<Vec<u8>> {
        let path = self.dir.join(name);
        let what = format!("reading {}", path.display());
        let mut f = self.sftp.open(&path).map_err(SshError::remote(&self.host, what.clone()))?;
        let mut out = Vec::new();
        f.by_ref().take(MAX_FILE).read_to_end(&mut out).map_err(SshError::remote(&self.host, what))?;
        Ok(out)
    }
}
