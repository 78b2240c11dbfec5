//! Mutual authentication of a new connection by the job secret: both sides
//! send a fresh random nonce, then prove knowledge of the secret with
//! HMAC-SHA256 over both hellos (nonces, ranks, world size) and their role.
//! The role label keeps one side's proof from being reflected back as the
//! other's. From a stranger nothing is read but one small hello frame and one
//! proof frame, each capped at `MAX_HANDSHAKE_FRAME` bytes and bounded by the
//! handshake deadline.

use super::counters::Category;
use super::deadline::Deadline;
use super::frame::{self, FrameError, Kind};
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use std::cell::Cell;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const NONCE_LEN: usize = 32;
pub const PROTOCOL: u32 = 1;
/// Larger than any handshake frame; a bigger length is refused unread.
pub const MAX_HANDSHAKE_FRAME: usize = 64;
/// The shortest job secret accepted (the driver makes 32 random bytes).
pub const MIN_SECRET_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub protocol: u32,
    pub world: u32,
    pub rank: u32,
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub const LEN: usize = 12 + NONCE_LEN;

    /// A hello with a fresh nonce. The nonce must be unpredictable, so it comes
    /// from the OS-seeded thread RNG, not from the job's reproducible streams.
    pub fn new(world: usize, rank: usize) -> Hello {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill(&mut nonce);
        Hello { protocol: PROTOCOL, world: world as u32, rank: rank as u32, nonce }
    }

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.protocol.to_le_bytes());
        b[4..8].copy_from_slice(&self.world.to_le_bytes());
        b[8..12].copy_from_slice(&self.rank.to_le_bytes());
        b[12..].copy_from_slice(&self.nonce);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        if b.len() != Self::LEN {
            return Err(format!("its hello has {} bytes, not {}", b.len(), Self::LEN));
        }
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let nonce = b[12..].try_into().expect("nonce length");
        Ok(Hello { protocol: word(0), world: word(4), rank: word(8), nonce })
    }
}

#[derive(Clone, Copy)]
enum Role {
    Connector,
    Acceptor,
}

/// The proof `role` gives: HMAC(secret, label || role || connector hello || acceptor hello).
fn proof(secret: &[u8], role: Role, connector: &Hello, acceptor: &Hello) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    m.update(b"leapgnn mesh handshake v1\0");
    m.update(match role {
        Role::Connector => b"connector",
        Role::Acceptor => b"acceptor\0",
    });
    m.update(&connector.encode());
    m.update(&acceptor.encode());
    m
}

/// A finished handshake: who the peer proved to be, and the bytes it took.
#[derive(Debug, Clone, Copy)]
pub struct Shook {
    pub peer: usize,
    pub wire_in: u64,
    pub wire_out: u64,
    /// The connector's and the acceptor's nonces, and whether this end dialled
    /// (what `--encrypt`'s connection keys are salted and oriented by).
    pub nonces: [[u8; NONCE_LEN]; 2],
    pub connector: bool,
}

impl Shook {
    /// This end's record keys for the connection (`seal`), from the mesh secret.
    pub fn keys(&self, secret: &[u8]) -> super::seal::Keys {
        let salt = [self.nonces[0], self.nonces[1]].concat();
        let (c2a, a2c) = ("connector to acceptor", "acceptor to connector");
        let (out, inb) = if self.connector { (c2a, a2c) } else { (a2c, c2a) };
        super::seal::Keys::derive(secret, &salt, "leapgnn mesh records v1", out, inb)
    }
}

/// Frame I/O over a handshaking stream, every read and write bounded by the deadline.
struct Conn<'a> {
    stream: &'a TcpStream,
    deadline: &'a Deadline,
    wire_in: u64,
    wire_out: u64,
    /// The other end closed or reset the connection.
    closed: Cell<bool>,
}

impl Conn<'_> {
    fn time_left(&self) -> Result<Duration, String> {
        match self.deadline.remaining() {
            d if d.is_zero() => Err(format!("no answer within {:?}", self.deadline.timeout())),
            d => Ok(d),
        }
    }

    fn send(&mut self, kind: Kind, payload: &[u8]) -> Result<(), String> {
        let mut buf = Vec::with_capacity(frame::HEADER_LEN + payload.len());
        self.wire_out +=
            frame::write_frame(&mut buf, kind, Category::Control, 0, payload).map_err(|e| e.to_string())?;
        self.stream.set_write_timeout(Some(self.time_left()?)).map_err(|e| e.to_string())?;
        (&mut &*self.stream).write_all(&buf).map_err(|e| self.io_reason(e, "sending"))
    }

    fn expect(&mut self, kind: Kind) -> Result<Vec<u8>, String> {
        self.time_left()?;
        // Each read waits only for what is left of the deadline: a frame sent a
        // byte at a time must arrive whole within it, not a byte per timeout.
        let mut by_deadline = ByDeadline { stream: self.stream, deadline: self.deadline };
        let (h, payload) = frame::read_frame(&mut by_deadline, MAX_HANDSHAKE_FRAME).map_err(|e| match e {
            FrameError::Io(e) => self.io_reason(e, &format!("waiting for its {kind:?}")),
            other => other.to_string(),
        })?;
        self.wire_in += (frame::HEADER_LEN + payload.len()) as u64;
        if h.kind != kind {
            return Err(format!("sent a {:?} frame where a {kind:?} was due", h.kind));
        }
        Ok(payload)
    }

    fn io_reason(&self, e: io::Error, doing: &str) -> String {
        use io::ErrorKind::*;
        self.closed.set(matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe));
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                format!("no progress {doing} within {:?}", self.deadline.timeout())
            }
            io::ErrorKind::UnexpectedEof => format!("it closed the connection while we were {doing}"),
            _ => format!("{doing}: {e}"),
        }
    }

    fn done(self, peer: usize, connector: &Hello, acceptor: &Hello, dialled: bool) -> Shook {
        Shook {
            peer,
            wire_in: self.wire_in,
            wire_out: self.wire_out,
            nonces: [connector.nonce, acceptor.nonce],
            connector: dialled,
        }
    }
}

/// Reads from a handshaking stream, each read bounded by the time left.
struct ByDeadline<'a> {
    stream: &'a TcpStream,
    deadline: &'a Deadline,
}

impl io::Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.remaining();
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the handshake deadline passed"));
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

fn check_hello(h: &Hello, world: usize) -> Result<(), String> {
    if h.protocol != PROTOCOL {
        return Err(format!(
            "it speaks mesh protocol {}, this binary speaks {PROTOCOL}; run the same leapgnn build on every worker",
            h.protocol
        ));
    }
    if h.world as usize != world {
        return Err(format!(
            "it belongs to a job of {} workers, this one has {world}; give every worker of the job the same \
             worker address list",
            h.world
        ));
    }
    Ok(())
}

/// The caller's hello, if it is a worker of this job that dials this rank.
fn fitting_caller(said: &[u8], world: usize, rank: usize) -> Result<Hello, String> {
    let theirs = Hello::decode(said)?;
    check_hello(&theirs, world)?;
    let peer = theirs.rank as usize;
    if peer <= rank || peer >= world {
        return Err(format!(
            "it claims to be worker {peer}, but only workers {}..{world} dial worker {rank}",
            rank + 1
        ));
    }
    Ok(theirs)
}

/// Why a dialled handshake failed.
#[derive(Debug)]
pub struct DialFailure {
    pub reason: String,
    /// The acceptor closed the connection before its hello: it proved and
    /// refused nothing (an acceptor that refuses our hello answers with its
    /// own first), as when a door crowded by strangers evicts a caller whose
    /// hello it has not read yet, so dialling again may succeed.
    pub unanswered: bool,
    /// The acceptor proved it knows the job secret, so it cannot have refused
    /// our proof, and then closed the connection: a door crowded by callers
    /// past their hello evicted us while our proof was on its way, so one more
    /// dial may succeed.
    pub evicted: bool,
}

/// A failure before any frame was exchanged (the handshake could not start).
impl From<String> for DialFailure {
    fn from(reason: String) -> DialFailure {
        DialFailure { reason, unanswered: false, evicted: false }
    }
}

/// The calling side: we dialled `expect_peer` and it must prove it is that
/// worker of this job. A failure says whether it was dropped before the
/// acceptor's hello rather than refused.
pub fn connect(
    stream: &TcpStream,
    secret: &[u8],
    world: usize,
    rank: usize,
    expect_peer: usize,
    deadline: &Deadline,
) -> Result<Shook, DialFailure> {
    let mut c = Conn { stream, deadline, wire_in: 0, wire_out: 0, closed: Cell::new(false) };
    let mine = Hello::new(world, rank);
    let theirs = c
        .send(Kind::Hello, &mine.encode())
        .and_then(|()| c.expect(Kind::Hello))
        .map_err(|reason| DialFailure { reason, unanswered: c.closed.get(), evicted: false })?;
    prove_to(c, &mine, &theirs, secret, world, expect_peer)
}

/// The calling side's handshake after the acceptor's hello frame has come.
fn prove_to(
    mut c: Conn,
    mine: &Hello,
    theirs: &[u8],
    secret: &[u8],
    world: usize,
    expect_peer: usize,
) -> Result<Shook, DialFailure> {
    let theirs = Hello::decode(theirs)?;
    check_hello(&theirs, world)?;
    if theirs.rank as usize != expect_peer {
        return Err(format!(
            "the address answered as worker {}, not worker {expect_peer}; give every worker of the job the same \
             worker address list, in the same order",
            theirs.rank
        )
        .into());
    }
    let their_proof = c.expect(Kind::Proof)?;
    proof(secret, Role::Acceptor, mine, &theirs)
        .verify_slice(&their_proof)
        .map_err(|_| "it could not prove it knows this job's secret (is another job listening there?)".to_string())?;
    let welcomed = c
        .send(Kind::Proof, &proof(secret, Role::Connector, mine, &theirs).finalize().into_bytes())
        .and_then(|()| c.expect(Kind::Welcome));
    if let Err(e) = welcomed {
        let evicted = c.closed.get();
        let reason = if evicted {
            format!("it closed the connection after proving it knows the job secret, before welcoming us ({e})")
        } else {
            format!("it did not accept our proof of the job secret ({e}); do both workers have the same secret?")
        };
        return Err(DialFailure { reason, unanswered: false, evicted });
    }
    Ok(c.done(expect_peer, mine, &theirs, true))
}

/// The listening side: the caller is whoever it proves to be. Only workers of
/// higher rank dial this one.
pub fn accept(
    stream: &TcpStream,
    secret: &[u8],
    world: usize,
    rank: usize,
    deadline: &Deadline,
) -> Result<Shook, String> {
    accept_marking(stream, secret, world, rank, deadline, &AtomicBool::new(false))
}

/// `accept`, raising `said_hello` once the caller's hello has come and fits
/// this job (a genuine worker says it as it connects; a silent stranger never).
pub fn accept_marking(
    stream: &TcpStream,
    secret: &[u8],
    world: usize,
    rank: usize,
    deadline: &Deadline,
    said_hello: &AtomicBool,
) -> Result<Shook, String> {
    let mut c = Conn { stream, deadline, wire_in: 0, wire_out: 0, closed: Cell::new(false) };
    let said = c.expect(Kind::Hello)?;
    let mine = Hello::new(world, rank);
    let theirs = match fitting_caller(&said, world, rank) {
        Ok(theirs) => theirs,
        Err(reason) => {
            // Answered before the close: a misconfigured worker reads in our hello
            // why it cannot join and stops at once, while a caller dropped without
            // an answer knows it was only evicted from a crowded door and dials again.
            let _ = c.send(Kind::Hello, &mine.encode());
            return Err(reason);
        }
    };
    let peer = theirs.rank as usize;
    said_hello.store(true, Ordering::SeqCst);
    c.send(Kind::Hello, &mine.encode())?;
    c.send(Kind::Proof, &proof(secret, Role::Acceptor, &theirs, &mine).finalize().into_bytes())?;
    let their_proof = c.expect(Kind::Proof)?;
    proof(secret, Role::Connector, &theirs, &mine)
        .verify_slice(&their_proof)
        .map_err(|_| format!("its proof of the job secret is wrong (it claimed to be worker {peer})"))?;
    c.send(Kind::Welcome, &[])?;
    Ok(c.done(peer, &theirs, &mine, false))
}
