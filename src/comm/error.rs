//! Errors of the data plane. Every one names the worker at fault (rank and
//! listening address) and what this worker was waiting for, so a hung or
//! crashed job is diagnosed from one line.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// A worker of the mesh: its rank and the address it listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId {
    pub rank: usize,
    pub addr: SocketAddr,
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {} ({})", self.rank, self.addr)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("timed out after {waited:?} waiting for {what} from {peer}; is it alive and at the same step of the job?")]
    Timeout { peer: PeerId, what: String, waited: Duration },

    /// `peer` crashed, left or stopped reading; `doing` says what this worker
    /// was doing (it may name another worker that it was waiting for).
    #[error("{peer} {how}; this worker was {doing}")]
    PeerLost { peer: PeerId, how: String, doing: String },

    /// `peer` ran ahead: its unread messages fill its mailboxes (`max_inbox`),
    /// so its connection is not read and what this worker awaits cannot arrive.
    #[error(
        "timed out after {waited:?} waiting for {what} from {peer}: its connection is not being read because \
         {held} bytes of its earlier messages wait unread here (the cap is {cap} bytes); the workers are out of \
         step, or a message is read by nobody"
    )]
    InboxFull { peer: PeerId, what: String, held: usize, cap: usize, waited: Duration },

    #[error("could not connect to {peer} within {waited:?}: {source}; is it running and reachable?")]
    Connect {
        peer: PeerId,
        waited: Duration,
        #[source]
        source: std::io::Error,
    },

    #[error("handshake with {peer} failed: {reason}")]
    Handshake { peer: PeerId, reason: String },

    #[error(
        "the mesh was not complete after {waited:?}: no authenticated connection from {}; \
         check that those workers started with this job's address list and secret",
        list(.missing)
    )]
    Incomplete { missing: Vec<PeerId>, waited: Duration },

    #[error("{peer} broke the protocol while this worker was waiting for {what}: {detail}")]
    Protocol { peer: PeerId, what: String, detail: String },

    #[error("{what} on {addr} failed: {source}")]
    Io {
        what: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    // Not transparent: a worker finds the refusal in its error's chain to
    // report it as such (`worker_session::refusal`).
    #[error("{0}")]
    Thread(#[from] crate::util::threads::SpawnError),

    /// The caller used the API wrongly (a rank out of range, a buffer of the wrong size).
    #[error("invalid use of the data plane: {0}")]
    Usage(String),
}

fn list(peers: &[PeerId]) -> String {
    peers.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
}
