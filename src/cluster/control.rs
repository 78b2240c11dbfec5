//! Driver <-> worker control plane: length-prefixed JSON messages over TCP.
//! Small and rare (job, metrics records, errors, heartbeats), so JSON keeps
//! it debuggable; bulk data goes over the worker mesh (`comm`).

use crate::comm::seal::{Keys, Opener, Sealer, TAG};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A control message larger than this is a protocol error, not an allocation.
pub const MAX_CONTROL_FRAME: usize = 64 << 20;
/// Before a connection has proved the job token, no message may be larger than this.
pub const MAX_HANDSHAKE_FRAME: usize = 4 << 10;

/// First message a worker sends after connecting. The token itself never
/// travels: the worker proves it (`ToDriver::Proof`) over both nonces.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    pub rank: usize,
    pub pid: u32,
    /// The worker's build (`crate::BUILD_ID`); the driver admits its own only.
    pub version: String,
    /// Fresh random hex, so no recorded proof answers a later challenge.
    pub nonce: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum ToWorker {
    /// The driver's answer to a Hello: its nonce and its own proof of the token
    /// (`cluster::job_key`), so a worker never talks to an impostor.
    Challenge {
        nonce: String,
        proof: String,
    },
    /// The job: an opaque config (the trainer's), the mesh peers and the public
    /// salt from which, with the token, each worker derives the mesh key.
    Job {
        world: usize,
        peers: Vec<SocketAddr>,
        mesh_salt: String,
        config: serde_json::Value,
    },
    /// Stop gracefully: finish the current iteration, checkpoint, report Done.
    /// The workers agree on the iteration among themselves (the trainer's stop vote).
    Stop,
    /// To rank 0: the driver has written every worker's records through this
    /// count (the trainer's global iteration) to the run's files, so a
    /// checkpoint of it may be written: one that ran ahead of the records
    /// would resume past records no file holds.
    Held(u64),
    Shutdown,
    /// The driver will not give this worker the job, and why (it runs
    /// another build); sent once the worker has proved the token.
    Refused(String),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum ToDriver {
    Hello(Hello),
    /// The worker's proof of the token over both nonces (hex).
    Proof(String),
    /// The worker's mesh listener address (sent before the job so peers can be told).
    Listening(SocketAddr),
    Metrics(serde_json::Value),
    Log(String),
    Heartbeat,
    Done(serde_json::Value),
    Error(String),
    /// The worker refused its job as bad input (its share does not fit its
    /// host, its partition is another): a restart would be refused again.
    Refused(String),
    /// The worker's OS refused it a thread: a limit of its host, which a
    /// restart there would meet again.
    ThreadRefused(ThreadRefused),
    /// The worker's compute threads' stacks do not fit its address-space
    /// limit (`ThreadPoolError::NoRoom`'s fields): found before any was
    /// asked for, and a restart on `host` would find it again.
    NoRoom {
        host: String,
        threads: usize,
        why: String,
        limit: u64,
    },
}

/// A thread a worker's OS refused to start (`util::threads::SpawnError`),
/// with the limits in force there, for the driver to name them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadRefused {
    pub thread: String,
    /// The worker's host, as it names itself.
    pub host: String,
    /// The OS's refusal.
    pub os_error: String,
    /// How many times the worker asked for the thread (`threads::spawn`
    /// retries a refusal), and how long it waited between.
    pub attempts: u32,
    pub waited_ms: u64,
    /// The limits in force on the worker's host when it reported.
    pub limits: crate::util::threads::ThreadLimits,
}

impl ThreadRefused {
    /// `e`, refused in this process, with this process's limits.
    pub fn of(e: &crate::util::threads::SpawnError) -> Self {
        ThreadRefused {
            thread: e.thread().into(),
            host: crate::util::host_name(),
            os_error: e.os_error().to_string(),
            attempts: e.attempts(),
            waited_ms: e.waited_ms(),
            limits: e.limits().clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control connection to {peer}: {what}: {source}")]
    Io {
        peer: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("control connection to {peer}: frame of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge { peer: String, len: usize, limit: usize },
    #[error("control connection to {peer}: malformed message: {detail}")]
    Malformed { peer: String, detail: String },
    #[error("control connection to {peer} closed")]
    Closed { peer: String },
}

impl ControlError {
    /// The peer closed or reset the connection (rather than saying something wrong).
    pub fn is_dropped(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            ControlError::Closed { .. } => true,
            ControlError::Io { source, .. } => {
                matches!(source.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
            }
            _ => false,
        }
    }
}

/// One end of a control connection.
pub struct ControlConn {
    stream: TcpStream,
    peer: String,
    /// `--encrypt`: each message body is one sealed record (shared by clones,
    /// so every sender and reader keeps the one sequence of its direction).
    crypt: Option<Arc<Crypt>>,
}

struct Crypt {
    seal: Mutex<Sealer>,
    open: Mutex<Opener>,
}

impl ControlConn {
    pub fn new(stream: TcpStream, peer: impl Into<String>) -> Self {
        let _ = stream.set_nodelay(true);
        ControlConn { stream, peer: peer.into(), crypt: None }
    }

    /// From now on, messages both ways are sealed with `keys` (after the handshake).
    pub fn encrypt(&mut self, keys: Keys) {
        let (seal, open) = keys.split();
        self.crypt = Some(Arc::new(Crypt { seal: Mutex::new(seal), open: Mutex::new(open) }));
    }

    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, ControlError> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| ControlError::Io {
            peer: format!("driver {addr}"),
            what: "connecting",
            source,
        })?;
        Ok(Self::new(stream, format!("driver {addr}")))
    }

    pub fn rename(&mut self, peer: impl Into<String>) {
        self.peer = peer.into();
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    pub fn try_clone(&self) -> Result<Self, ControlError> {
        let stream = self.stream.try_clone().map_err(|e| self.io("cloning", e))?;
        Ok(ControlConn { stream, peer: self.peer.clone(), crypt: self.crypt.clone() })
    }

    /// Bounds every subsequent read; `None` waits forever (only for a thread that is shut down by closing).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), ControlError> {
        self.stream.set_read_timeout(t).map_err(|e| self.io("setting a timeout", e))
    }

    /// Bounds every subsequent write; `None` waits forever.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> Result<(), ControlError> {
        self.stream.set_write_timeout(t).map_err(|e| self.io("setting a timeout", e))
    }

    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), ControlError> {
        let body = serde_json::to_vec(msg)
            .map_err(|e| ControlError::Malformed { peer: self.peer.clone(), detail: e.to_string() })?;
        if body.len() > MAX_CONTROL_FRAME {
            return Err(ControlError::TooLarge { peer: self.peer.clone(), len: body.len(), limit: MAX_CONTROL_FRAME });
        }
        let Some(crypt) = &self.crypt else {
            let mut frame = Vec::with_capacity(4 + body.len());
            frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
            frame.extend_from_slice(&body);
            return self.stream.write_all(&frame).map_err(|e| self.io("sending", e));
        };
        // Sealed and written under one lock: the wire order is the sequence order.
        let mut seal = crypt.seal.lock().unwrap_or_else(|e| e.into_inner());
        let mut frame = Vec::with_capacity(4 + body.len() + TAG);
        seal.seal(&body, &mut frame).map_err(|e| self.io("sealing", e))?;
        (&self.stream).write_all(&frame).map_err(|e| self.io("sending", e))
    }

    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T, ControlError> {
        self.recv_within(MAX_CONTROL_FRAME, None)
    }

    /// A message of at most `max` bytes, all of it before `deadline` (however
    /// slowly the peer sends: each read waits only for the time left).
    pub fn recv_within<T: DeserializeOwned>(
        &mut self,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<T, ControlError> {
        let mut len = [0u8; 4];
        if let Err(e) = self.read_by(&mut len, deadline) {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return Err(ControlError::Closed { peer: self.peer.clone() });
            }
            return Err(self.io("waiting for a message", e));
        }
        let len = u32::from_le_bytes(len) as usize;
        let sealed = if self.crypt.is_some() { TAG } else { 0 };
        let limit = max.min(MAX_CONTROL_FRAME) + sealed;
        if len > limit || len < sealed {
            return Err(ControlError::TooLarge { peer: self.peer.clone(), len, limit });
        }
        let mut body = Vec::new();
        read_growing(&mut body, len, |chunk| self.read_by(chunk, deadline))
            .map_err(|e| self.io("reading a message", e))?;
        let plain = match &self.crypt {
            None => &body[..],
            Some(c) => {
                let mut open = c.open.lock().unwrap_or_else(|e| e.into_inner());
                open.open(&mut body).map_err(|e| ControlError::Io {
                    peer: self.peer.clone(),
                    what: "opening",
                    source: e,
                })?
            }
        };
        // serde quotes an unknown variant or field as it came: from a stranger, anything.
        serde_json::from_slice(plain)
            .map_err(|e| ControlError::Malformed { peer: self.peer.clone(), detail: printable(&e.to_string()) })
    }

    fn read_by(&mut self, buf: &mut [u8], deadline: Option<Instant>) -> std::io::Result<()> {
        let Some(deadline) = deadline else { return self.stream.read_exact(buf) };
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline passed"));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn io(&self, what: &'static str, source: std::io::Error) -> ControlError {
        ControlError::Io { peer: self.peer.clone(), what, source }
    }
}

/// `s` with its control characters escaped (`\u{1b}`, `\n`): text a peer
/// chose may go into the operator's log, where a raw escape sequence would
/// drive their terminal and a newline would start a line of the peer's making.
pub fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Memory for a message grows with the bytes that came, not with the length
/// its prefix claims: a peer (or bytes injected into an encrypted connection,
/// which fail the tag check only once all have come) cannot make us allocate
/// 64 MiB with four bytes.
const READ_CHUNK: usize = 1 << 20;

/// Reads `len` bytes into `buf` with `read_exact`, a chunk of at most
/// `READ_CHUNK` at a time.
fn read_growing(
    buf: &mut Vec<u8>,
    len: usize,
    mut read_exact: impl FnMut(&mut [u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    buf.clear();
    while buf.len() < len {
        let start = buf.len();
        buf.resize(start + (len - start).min(READ_CHUNK), 0);
        read_exact(&mut buf[start..])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A prefix claiming 64 MiB followed by 10 bytes costs about one chunk, not 64 MiB.
    #[test]
    fn memory_follows_the_bytes_that_came_not_the_claimed_length() {
        let mut came = std::io::Cursor::new(vec![7u8; 10]);
        let mut buf = Vec::new();
        let e = read_growing(&mut buf, MAX_CONTROL_FRAME, |b| came.read_exact(b)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert!(buf.capacity() <= 2 * READ_CHUNK, "{} bytes allocated for 10 received", buf.capacity());

        // A message of several chunks arrives whole and in order.
        let len = 2 * READ_CHUNK + 3;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut src = std::io::Cursor::new(data.clone());
        read_growing(&mut buf, len, |b| src.read_exact(b)).unwrap();
        assert_eq!(buf, data);
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("a\u{1b}[2J\r\nb\u{7} é"), "a\\u{1b}[2J\\r\\nb\\u{7} é");
    }

    #[test]
    fn messages_roundtrip_and_garbage_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = ControlConn::new(s, "worker 0");
            let m: ToDriver = c.recv().unwrap();
            c.send(&ToWorker::Shutdown).unwrap();
            let r: Result<ToDriver, _> = c.recv();
            (m, r.err().map(|e| e.to_string()))
        });
        let mut c = ControlConn::connect(addr, Duration::from_secs(5)).unwrap();
        c.send(&ToDriver::Heartbeat).unwrap();
        assert_eq!(c.recv::<ToWorker>().unwrap(), ToWorker::Shutdown);
        // A length beyond the limit must be refused without allocating it.
        c.stream.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let (m, err) = t.join().unwrap();
        assert_eq!(m, ToDriver::Heartbeat);
        assert!(err.unwrap().contains("exceeds"));
    }
}
