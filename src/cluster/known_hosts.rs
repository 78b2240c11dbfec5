//! Host-key checking against an OpenSSH known_hosts file: a known key
//! passes, an unknown one is refused unless the profile allows recording new
//! keys, and a changed one is always refused (that is what a
//! man-in-the-middle looks like).

use serde::Serialize;
use ssh2::{CheckResult, KnownHostFileKind, KnownHosts, Session};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKeyStatus {
    /// The key was already in known_hosts.
    Known,
    /// The key was unknown and has just been recorded (accept_new_host_keys).
    Recorded,
}

#[derive(Debug, thiserror::Error)]
pub enum HostKeyError {
    #[error(
        "host key {fingerprint} is not in {file}: check it, then set accept_new_host_keys = true in the profile \
         or pass --accept-new-host-keys to record it"
    )]
    Unknown { file: PathBuf, fingerprint: String },
    #[error(
        "HOST KEY CHANGED: the server offered {fingerprint}, which differs from the key recorded for {name} in {file} \
         (a reinstalled host, or a man-in-the-middle); refused. If the change is expected, remove the old key with \
         `ssh-keygen -R '{name}' -f {file}`"
    )]
    Changed { file: PathBuf, name: String, fingerprint: String },
    #[error(
        "REVOKED HOST KEY: the server offered {fingerprint}, which line {line} of {file} marks @revoked \
         (a key known to be compromised or retired); refused. Give the host a new key, or remove that line if the \
         revocation is a mistake"
    )]
    Revoked { file: PathBuf, line: usize, fingerprint: String },
    #[error("the server sent no host key")]
    NoKey,
    #[error("cannot read known_hosts file {file}: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot record the host key in {file}: {detail}")]
    Record { file: PathBuf, detail: String },
    #[error("checking the host key against {file} failed inside libssh2")]
    Failure { file: PathBuf },
}

/// Checks the session's host key for `address:port` against `file`,
/// recording it when unknown and `accept_new` is set.
pub fn verify(
    sess: &Session,
    address: &str,
    port: u16,
    file: &Path,
    accept_new: bool,
) -> Result<HostKeyStatus, HostKeyError> {
    let (key, key_type) = sess.host_key().ok_or(HostKeyError::NoKey)?;
    let fingerprint = fingerprint(sess);
    // libssh2 reads no markers: an `@revoked` line would pass for a host named "@revoked".
    if let Some(line) = revoked_at(file, key)? {
        return Err(HostKeyError::Revoked { file: file.into(), line, fingerprint });
    }
    match check(sess, file, address, port, key)? {
        CheckResult::Match => return Ok(HostKeyStatus::Known),
        CheckResult::Mismatch => {
            return Err(HostKeyError::Changed { file: file.into(), name: entry_name(address, port), fingerprint });
        }
        CheckResult::NotFound if !accept_new => {
            return Err(HostKeyError::Unknown { file: file.into(), fingerprint });
        }
        CheckResult::NotFound => {}
        CheckResult::Failure => return Err(HostKeyError::Failure { file: file.into() }),
    }
    // Several workers may connect to the same new host at once: record under a
    // lock, re-checking first so the key is written once.
    static RECORD: Mutex<()> = Mutex::new(());
    let _guard = RECORD.lock().unwrap_or_else(|e| e.into_inner());
    match check(sess, file, address, port, key)? {
        CheckResult::Match => return Ok(HostKeyStatus::Known),
        CheckResult::Mismatch => {
            return Err(HostKeyError::Changed { file: file.into(), name: entry_name(address, port), fingerprint });
        }
        _ => {}
    }
    let record = |detail: String| HostKeyError::Record { file: file.into(), detail };
    let mut one = sess.known_hosts().map_err(|e| record(e.to_string()))?;
    let name = entry_name(address, port);
    one.add(&name, key, "added by leapgnn", key_type.into()).map_err(|e| record(e.to_string()))?;
    let host = one
        .hosts()
        .map_err(|e| record(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| record("libssh2 returned no entry".into()))?;
    let line = one.write_string(&host, KnownHostFileKind::OpenSSH).map_err(|e| record(e.to_string()))?;
    // The other lines are kept byte for byte, UTF-8 or not.
    let mut text = read_bytes(file)?.unwrap_or_default();
    if !text.is_empty() && !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    text.extend_from_slice(line.trim_end().as_bytes());
    text.push(b'\n');
    let (target, mode) = rewrite_target(file);
    crate::format::write_atomic_mode(&target, &text, mode).map_err(|e| record(e.to_string()))?;
    Ok(HostKeyStatus::Recorded)
}

/// Where a new key is written and with which permission bits. The file that
/// decides which servers are trusted must stay writable by its owner only:
/// rewritten, it keeps its own bits without any group or world write (a
/// new file is 0600, whatever the umask), so no other local user can slip a
/// key of theirs in. A symbolic link (a managed dotfile) stays a link: its
/// target is rewritten.
fn rewrite_target(file: &Path) -> (PathBuf, u32) {
    use std::os::unix::fs::PermissionsExt;
    let target = match std::fs::symlink_metadata(file) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(file).unwrap_or_else(|_| file.into()),
        _ => file.into(),
    };
    let mode = std::fs::metadata(&target).map_or(0o600, |m| m.permissions().mode() & 0o755);
    (target, mode)
}

/// The name OpenSSH uses for a host in known_hosts: `addr` on port 22, `[addr]:port` otherwise.
pub fn entry_name(address: &str, port: u16) -> String {
    if port == 22 { address.to_string() } else { format!("[{address}]:{port}") }
}

/// The server's host key fingerprint as OpenSSH prints it (`ssh-keygen -lf`):
/// `SHA256:` and the unpadded base64 of the SHA-256 of the key blob.
pub fn fingerprint(sess: &Session) -> String {
    match sess.host_key() {
        Some((blob, _)) => openssh_fingerprint(blob),
        None => "SHA256:unknown".into(),
    }
}

/// `SHA256:<base64, no padding>` of a public key blob (the decoded second field of a `.pub` line).
pub fn openssh_fingerprint(blob: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!("SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(blob)))
}

/// The line (1-based) of `file` that marks `key` (a public key blob)
/// `@revoked`, whichever hosts it names: OpenSSH never accepts such a key,
/// and neither do we, for any host.
fn revoked_at(file: &Path, key: &[u8]) -> Result<Option<usize>, HostKeyError> {
    use base64::Engine;
    let Some(bytes) = read_bytes(file)? else { return Ok(None) };
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(lines(&bytes)
        .position(|l| {
            let mut f = l.split_whitespace();
            // `@revoked <hosts> <type> <base64 key> [comment]`
            f.next() == Some("@revoked") && f.nth(2).and_then(|k| b64.decode(k).ok()).is_some_and(|blob| blob == key)
        })
        .map(|i| i + 1))
}

/// The bytes of `file`, None when it does not exist.
fn read_bytes(file: &Path) -> Result<Option<Vec<u8>>, HostKeyError> {
    match std::fs::read(file) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HostKeyError::Read { file: file.into(), source }),
    }
}

/// The lines of a known_hosts file. OpenSSH reads it as bytes, so a comment
/// in another encoding (Latin-1, say) is no error: such bytes read as U+FFFD
/// here, and the host names, key types and keys, ASCII all, are unchanged.
fn lines(bytes: &[u8]) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    bytes.split(|&b| b == b'\n').map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)))
}

fn check(sess: &Session, file: &Path, address: &str, port: u16, key: &[u8]) -> Result<CheckResult, HostKeyError> {
    let kh = load(sess, file)?;
    Ok(kh.check_port(address, port, key))
}

/// Reads the file line by line: libssh2 rejects a whole file over one line it
/// cannot parse (a certificate authority, a security-key type), while such
/// lines are simply not relevant to the keys it can check.
fn load(sess: &Session, file: &Path) -> Result<KnownHosts, HostKeyError> {
    let mut kh = sess.known_hosts().map_err(|_| HostKeyError::Failure { file: file.into() })?;
    let Some(bytes) = read_bytes(file)? else { return Ok(kh) };
    for (i, line) in lines(&bytes).enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Err(e) = kh.read_str(l, KnownHostFileKind::OpenSSH) {
            tracing::debug!("{}:{}: line skipped ({e})", file.display(), i + 1);
        }
    }
    Ok(kh)
}

#[cfg(test)]
mod tests {
    use super::openssh_fingerprint;
    use base64::Engine;

    /// The fingerprint users compare: the same text as `ssh-keygen -lf` of the key.
    #[test]
    fn fingerprints_read_as_ssh_keygen_prints_them() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        let made =
            std::process::Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: ssh-keygen is not installed (CI installs openssh)");
            return;
        }
        let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let blob = base64::engine::general_purpose::STANDARD.decode(pubkey.split_whitespace().nth(1).unwrap()).unwrap();
        let out = std::process::Command::new("ssh-keygen").arg("-lf").arg(key.with_extension("pub")).output().unwrap();
        // `256 SHA256:... comment (ED25519)`
        let want = String::from_utf8(out.stdout).unwrap().split_whitespace().nth(1).unwrap().to_string();
        assert!(want.starts_with("SHA256:"), "{want}");
        assert_eq!(openssh_fingerprint(&blob), want);
    }
}
