//! One authenticated SSH session to one host, in the order that makes each
//! failure precise: TCP connect (bounded), handshake, host key against
//! known_hosts, key authentication (identity file or agent; never a
//! password). Plus running a short remote command and POSIX shell quoting.

use super::known_hosts::{self, HostKeyError, HostKeyStatus};
use super::profile::HostSpec;
use ssh2::Session;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub known_hosts: PathBuf,
    pub accept_new_host_keys: bool,
    /// Bound on the TCP connect.
    pub connect_timeout: Duration,
    /// Bound on every SSH step (handshake, auth, SFTP calls, short commands).
    pub io_timeout: Duration,
}

/// Which step failed; `cluster check` turns this into its columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Connect,
    HostKey,
    Auth,
    Remote,
}

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("host {host}: cannot connect: {detail} (is sshd running there and the port open?)")]
    Unreachable { host: String, detail: String },
    #[error("host {host}: SSH handshake failed: {source}{}", handshake_hint(.source, .within))]
    Handshake {
        host: String,
        #[source]
        source: ssh2::Error,
        /// The bound it ran under (the profile's connect_timeout).
        within: Duration,
    },
    #[error("host {host}: {source}")]
    HostKey {
        host: String,
        #[source]
        source: HostKeyError,
    },
    #[error("host {host}: authentication as {user} {method} failed: {detail}")]
    Auth { host: String, user: String, method: String, detail: String },
    #[error("host {host}: {what}: {detail}")]
    Remote { host: String, what: String, detail: String },
    #[error("host {host}: `{what}` {}: {}", super::launcher::describe_exit(*.code), or_none(.output))]
    Command { host: String, what: String, code: i32, output: String },
    #[error(
        "host {host}: {binary} reports {got:?} but the driver is {want:?}: workers must run the driver's version \
         (set cluster.binary to a matching build, or leave it unset to ship this one)"
    )]
    Version { host: String, binary: PathBuf, got: String, want: String },
    #[error(
        "host {host}: {binary} is leapgnn build {got} but the driver is build {want}: workers must run the \
         driver's own build{features} (set cluster.binary to a build of the driver's sources, or leave it unset to \
         ship this one)"
    )]
    OtherBuild {
        host: String,
        binary: PathBuf,
        got: String,
        want: String,
        /// `crate::other_device_features`, as `; ...`, when only those differ; else empty.
        features: String,
    },
    #[error(
        "host {host}: {binary} is {version} but a build older than the driver's {want} (it has no `build-id` \
         command): workers must run the driver's own build (set cluster.binary to a build of the driver's \
         sources, or leave it unset to ship this one)"
    )]
    OlderBuild { host: String, binary: PathBuf, version: String, want: String },
    #[error("{path}: {source}")]
    Local {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why a handshake can time out, and which setting bounds it.
fn handshake_hint(e: &ssh2::Error, within: &Duration) -> String {
    // LIBSSH2_ERROR_TIMEOUT
    if e.code() != ssh2::ErrorCode::Session(-9) {
        return String::new();
    }
    format!(
        " (no SSH server answered within connect_timeout = {} s: is the port an sshd's, and the host not \
         overloaded?)",
        within.as_secs_f32()
    )
}

/// A command's output for a message: "(no output)" rather than nothing.
fn or_none(output: &str) -> &str {
    if output.trim().is_empty() { "(no output)" } else { output }
}

impl SshError {
    pub fn stage(&self) -> Stage {
        match self {
            SshError::Unreachable { .. } | SshError::Handshake { .. } => Stage::Connect,
            SshError::HostKey { .. } => Stage::HostKey,
            SshError::Auth { .. } => Stage::Auth,
            _ => Stage::Remote,
        }
    }

    /// A failure (ssh2 or I/O over the session) while doing `what` on `host`.
    pub fn remote<E: std::fmt::Display>(host: &str, what: impl Into<String>) -> impl FnOnce(E) -> SshError {
        let (host, what) = (host.to_string(), what.into());
        move |e| SshError::Remote { host, what, detail: e.to_string() }
    }
}

/// The session's SFTP channel, on which every file is shipped and read back.
/// An sshd configured without the subsystem refuses the channel with an error
/// that names no cause, so that case says what to add to its config.
pub fn sftp(session: &Session, host: &str) -> Result<ssh2::Sftp, SshError> {
    session.sftp().map_err(|e| {
        // LIBSSH2_ERROR_CHANNEL_FAILURE: the server refused the subsystem request.
        let hint = if e.code() == ssh2::ErrorCode::Session(-21) {
            " (the host's sshd offers no SFTP subsystem, which leapgnn ships files over: add `Subsystem sftp \
             internal-sftp` to its sshd_config and reload sshd)"
        } else {
            ""
        };
        SshError::Remote { host: host.into(), what: "starting SFTP".into(), detail: format!("{e}{hint}") }
    })
}

/// An authenticated session and the two ends of its TCP connection.
pub struct Connected {
    pub session: Session,
    /// This machine's address on the interface that reaches the host.
    pub local: SocketAddr,
    /// The host's address as reached.
    pub peer: SocketAddr,
    pub host_key: HostKeyStatus,
}

pub fn connect(host: &HostSpec, o: &SessionOptions) -> Result<Connected, SshError> {
    let label = host.label();
    let mut attempt = 1;
    let (session, local, peer) = loop {
        let tcp = tcp_connect(&host.address, host.port, o.connect_timeout)
            .map_err(|detail| SshError::Unreachable { host: label.clone(), detail })?;
        let (local, peer) = match (tcp.local_addr(), tcp.peer_addr()) {
            (Ok(l), Ok(p)) => (l, p),
            (Err(e), _) | (_, Err(e)) => return Err(SshError::Unreachable { host: label, detail: e.to_string() }),
        };
        let _ = tcp.set_nodelay(true);
        let within = o.connect_timeout;
        let mut session =
            Session::new().map_err(|source| SshError::Handshake { host: label.clone(), source, within })?;
        // The handshake is part of connecting: a port that accepts but never
        // speaks SSH fails within connect_timeout, not the longer I/O bound.
        session.set_timeout(millis(within));
        session.set_tcp_stream(tcp);
        match session.handshake() {
            Ok(()) => {
                session.set_timeout(millis(o.io_timeout));
                break (session, local, peer);
            }
            Err(source) if attempt < HANDSHAKE_ATTEMPTS && dropped_before_banner(&source) => {
                tracing::debug!("host {label}: connection closed before the SSH banner ({source}); attempt {attempt}");
                std::thread::sleep(HANDSHAKE_BACKOFF * attempt);
                attempt += 1;
            }
            Err(source) => return Err(SshError::Handshake { host: label, source, within }),
        }
    };
    let host_key = known_hosts::verify(&session, &host.address, host.port, &o.known_hosts, o.accept_new_host_keys)
        .map_err(|source| SshError::HostKey { host: label.clone(), source })?;
    authenticate(&session, host).map_err(|(method, detail)| SshError::Auth {
        host: label,
        user: host.user.clone(),
        method,
        detail,
    })?;
    Ok(Connected { session, local, peer, host_key })
}

/// sshd closes a connection before its banner when too many are still
/// unauthenticated (MaxStartups' random early drop, which many workers per host
/// can reach) or while it restarts; like OpenSSH's ConnectionAttempts, such a
/// connection is tried again, a few times with a growing pause.
const HANDSHAKE_ATTEMPTS: u32 = 4;
const HANDSHAKE_BACKOFF: Duration = Duration::from_millis(150);

/// The peer hung up (EOF or reset) before sending its identification string.
fn dropped_before_banner(e: &ssh2::Error) -> bool {
    // LIBSSH2_ERROR_SOCKET_DISCONNECT, LIBSSH2_ERROR_SOCKET_RECV.
    matches!(e.code(), ssh2::ErrorCode::Session(-13) | ssh2::ErrorCode::Session(-43))
}

/// Bounded connect to every address the name resolves to, first success wins.
fn tcp_connect(address: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> =
        (address, port).to_socket_addrs().map_err(|e| format!("cannot resolve {address}: {e}"))?.collect();
    let mut last = format!("{address} resolves to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e} (after at most {}s)", timeout.as_secs_f32()),
        }
    }
    Err(last)
}

/// Key authentication only. Errors return (method, reason) for the message.
fn authenticate(sess: &Session, host: &HostSpec) -> Result<(), (String, String)> {
    match &host.identity {
        Some(key) => {
            let method = format!("with key {}", key.display());
            sess.userauth_pubkey_file(&host.user, None, key, None).map_err(|e| {
                // LIBSSH2_ERROR_FILE, LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED: the key file
                // itself could not be used, most often because it has a passphrase.
                let unreadable = matches!(e.code(), ssh2::ErrorCode::Session(-16) | ssh2::ErrorCode::Session(-19))
                    || e.message().contains("extract public key");
                let hint = if unreadable {
                    format!(
                        "the key file cannot be used as it is; if it has a passphrase, load it into the ssh agent \
                         (ssh-add {}) and leave identity unset for this host",
                        key.display()
                    )
                } else {
                    "is its public key in the remote ~/.ssh/authorized_keys? (a key with a passphrase must be \
                     loaded into the ssh agent instead)"
                        .to_string()
                };
                (method.clone(), format!("{e}; {hint}"))
            })?;
        }
        None => {
            let method = "with the ssh agent".to_string();
            let fail = |d: String| (method.clone(), d);
            if std::env::var_os("SSH_AUTH_SOCK").is_none() {
                return Err(fail(
                    "SSH_AUTH_SOCK is not set: start ssh-agent or set identity = ... for this host".into(),
                ));
            }
            let mut agent = sess.agent().map_err(|e| fail(e.to_string()))?;
            agent.connect().map_err(|e| fail(format!("cannot reach the agent: {e}")))?;
            agent.list_identities().map_err(|e| fail(e.to_string()))?;
            let ids = agent.identities().map_err(|e| fail(e.to_string()))?;
            if ids.is_empty() {
                return Err(fail("the agent holds no keys (ssh-add them)".into()));
            }
            // Try every key the agent holds, as ssh(1) does.
            if !ids.iter().any(|id| agent.userauth(&host.user, id).is_ok()) {
                return Err(fail(format!("none of the agent's {} keys was accepted", ids.len())));
            }
            let _ = agent.disconnect();
        }
    }
    if sess.authenticated() { Ok(()) } else { Err(("with a key".into(), "the server did not accept it".into())) }
}

/// What a short remote command printed (stdout and stderr merged) and its exit code.
pub struct CommandOutput {
    pub code: i32,
    pub output: String,
}

/// Runs `cmd` through the remote user's shell and waits (bounded by the session timeout).
pub fn run(sess: &Session, host: &str, cmd: &str) -> Result<CommandOutput, SshError> {
    let what = || format!("running `{}`", short(cmd));
    let mut ch = sess.channel_session().map_err(SshError::remote(host, what()))?;
    ch.handle_extended_data(ssh2::ExtendedData::Merge).map_err(SshError::remote(host, what()))?;
    ch.exec(cmd).map_err(SshError::remote(host, what()))?;
    let mut out = Vec::new();
    ch.read_to_end(&mut out).map_err(SshError::remote(host, what()))?;
    ch.wait_close().map_err(SshError::remote(host, what()))?;
    let code = ch.exit_status().map_err(SshError::remote(host, what()))?;
    Ok(CommandOutput { code, output: String::from_utf8_lossy(&out).trim().to_string() })
}

/// Like `run`, but a non-zero exit is an error that shows the output.
pub fn run_ok(sess: &Session, host: &str, cmd: &str) -> Result<String, SshError> {
    let r = run(sess, host, cmd)?;
    if r.code != 0 {
        return Err(SshError::Command { host: host.into(), what: short(cmd), code: r.code, output: r.output });
    }
    Ok(r.output)
}

/// Single-quotes `s` for a POSIX shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn millis(d: Duration) -> u32 {
    d.as_millis().clamp(1, u32::MAX as u128) as u32
}

fn short(cmd: &str) -> String {
    const MAX: usize = 120;
    if cmd.len() <= MAX {
        return cmd.to_string();
    }
    let mut end = MAX;
    while !cmd.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &cmd[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_the_shell() {
        for s in ["plain", "with space", "it's", "$(rm -rf /)", "a'b'c", ""] {
            let out = std::process::Command::new("sh").arg("-c").arg(format!("printf %s {}", quote(s))).output();
            assert_eq!(String::from_utf8(out.unwrap().stdout).unwrap(), s);
        }
    }

    #[test]
    fn unreachable_port_fails_fast_with_the_address() {
        // Bound but never listening: the kernel refuses connections to it and gives it to nobody
        // else while it lives (a port bound and released could be taken, and answered, in between).
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.bind(&SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)).into()).unwrap();
        let port = socket.local_addr().unwrap().as_socket().unwrap().port();
        // Fast is "refused at once", not "timed out": the reason tells them apart where a
        // stopwatch would also count the time a loaded machine leaves the test unscheduled.
        let e = tcp_connect("127.0.0.1", port, Duration::from_secs(3)).unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")) && e.contains("refused"), "{e}");
    }
}
