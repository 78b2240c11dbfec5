//! Building the mesh's connections: worker r dials every lower rank and
//! accepts every higher one, each new connection authenticated in its own
//! thread so a silent or slow stranger never delays the genuine workers.
//! Strangers are logged and dropped; the listener keeps accepting until every
//! peer has proved itself or the deadline passes. A crowd of strangers may
//! still evict a genuine connection whose hello has not been read yet; its
//! dialler then dials again until its deadline. A crowd of impostors that say
//! a fitting hello and stall may evict one whose proof is on its way; its
//! dialler dials once more.

use super::auth::{self, DialFailure, Shook};
use super::deadline::Deadline;
use super::error::CommError;
use super::mesh::{MeshConfig, lock};
use crate::util::threads::spawn_scoped;
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, Scope};
use std::time::Duration;

/// A connection refused during establishment, and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub from: SocketAddr,
    pub reason: String,
}

/// One authenticated stream per peer rank (None at our own rank).
pub(super) struct Established {
    pub links: Vec<Option<(TcpStream, Shook)>>,
    pub refused: Vec<Refusal>,
}

enum Event {
    Ready(TcpStream, Shook),
    Refused(Refusal),
    Failed(CommError),
}

/// The listener has no blocking accept with a timeout in std, so it is polled;
/// this only runs while the mesh is being built.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
const MAX_DIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Incoming connections that may be proving themselves at once; one more
/// evicts the oldest that has not said a fitting hello (else the oldest), so a
/// crowd of strangers holds neither memory nor the door, nor pushes out a
/// genuine worker whose handshake is slow (one evicted before its hello was
/// read dials again, one evicted while its proof was on its way once more).
pub const MAX_UNAUTHENTICATED: usize = 32;

/// A stream in handshake, and for an incoming one its said-hello flag.
type Waiting = (TcpStream, Option<Arc<AtomicBool>>);

/// Handshakes in progress, shut down when establishment ends so their threads
/// return at once instead of at their handshake deadline.
struct Pending {
    next: AtomicU64,
    /// None once establishment has ended: later handshakes are not started.
    /// Incoming connections, the only ones that may be evicted, carry the flag
    /// their handshake raises once the caller's hello has come.
    streams: Mutex<Option<HashMap<u64, Waiting>>>,
}

impl Pending {
    fn new() -> Pending {
        Pending { next: AtomicU64::new(0), streams: Mutex::new(Some(HashMap::new())) }
    }

    /// Runs `shake` on `stream`, registered so that `cut_all` can interrupt it
    /// (and, for an `incoming` one, so that a newer stranger can evict it).
    fn shake<E: From<String>>(
        &self,
        stream: &TcpStream,
        incoming: bool,
        shake: impl FnOnce(&TcpStream, &AtomicBool) -> Result<Shook, E>,
    ) -> Result<Shook, E> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let clone = stream.try_clone().map_err(|e| e.to_string())?;
        let said_hello = Arc::new(AtomicBool::new(false));
        match lock(&self.streams).as_mut() {
            Some(streams) => {
                if incoming {
                    let waiting: Vec<(u64, bool)> = streams
                        .iter()
                        .filter_map(|(&i, (_, hello))| hello.as_ref().map(|h| (i, h.load(Ordering::SeqCst))))
                        .collect();
                    let silent = waiting.iter().filter(|(_, hello)| !hello).map(|&(i, _)| i).min();
                    if waiting.len() >= MAX_UNAUTHENTICATED
                        && let Some(victim) = silent.or_else(|| waiting.iter().map(|&(i, _)| i).min())
                        && let Some((s, _)) = streams.remove(&victim)
                    {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                streams.insert(id, (clone, incoming.then(|| said_hello.clone())))
            }
            None => return Err(String::from("the mesh was already complete (or had failed)").into()),
        };
        let out = shake(stream, &said_hello);
        if let Some(streams) = lock(&self.streams).as_mut() {
            streams.remove(&id);
        }
        out
    }

    fn cut_all(&self) {
        for (s, _) in lock(&self.streams).take().into_iter().flat_map(|m| m.into_values()) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

pub(super) fn connect_all(listener: &TcpListener, cfg: &MeshConfig) -> Result<Established, CommError> {
    let world = cfg.addrs.len();
    let deadline = Deadline::after(cfg.connect_timeout);
    let me = cfg.peer(cfg.rank);
    listener.set_nonblocking(true).map_err(|source| CommError::Io {
        what: "preparing the listener".into(),
        addr: me.addr,
        source,
    })?;
    let stop = AtomicBool::new(false);
    let pending = Pending::new();
    let (tx, rx) = mpsc::channel::<Event>();
    let mut links: Vec<Option<(TcpStream, Shook)>> = (0..world).map(|_| None).collect();
    let mut refused = Vec::new();

    let outcome = thread::scope(|s| {
        let started = (|| {
            if cfg.rank + 1 < world {
                let (tx, stop, pending) = (tx.clone(), &stop, &pending);
                spawn_scoped(s, "leapgnn-mesh-accept", move || accept_loop(s, listener, cfg, stop, pending, tx))?;
            }
            for p in 0..cfg.rank {
                let (tx, stop, pending, deadline) = (tx.clone(), &stop, &pending, &deadline);
                spawn_scoped(s, format!("leapgnn-mesh-dial-{p}"), move || {
                    if let Some(ev) = dial(p, cfg, deadline, stop, pending) {
                        let _ = tx.send(ev);
                    }
                })?;
            }
            Ok::<(), CommError>(())
        })();
        let mut missing = world - 1;
        // Threads already started are stopped below, as after any failure.
        let outcome = started.and_then(|()| {
            loop {
                if missing == 0 {
                    break Ok(());
                }
                match rx.recv_timeout(deadline.remaining()) {
                    Ok(Event::Ready(stream, shook)) if links[shook.peer].is_none() => {
                        links[shook.peer] = Some((stream, shook));
                        missing -= 1;
                    }
                    Ok(Event::Ready(stream, shook)) => {
                        let from = stream.peer_addr().unwrap_or(cfg.addrs[shook.peer]);
                        let reason = format!("a second connection claiming to be worker {}", shook.peer);
                        tracing::warn!(%from, %reason, "worker {}: refused a connection", cfg.rank);
                        refused.push(Refusal { from, reason });
                    }
                    Ok(Event::Refused(r)) => refused.push(r),
                    Ok(Event::Failed(e)) => break Err(e),
                    Err(_) => {
                        let missing = (0..world).filter(|&p| p != cfg.rank && links[p].is_none()).map(|p| cfg.peer(p));
                        break Err(CommError::Incomplete { missing: missing.collect(), waited: deadline.timeout() });
                    }
                }
            }
        });
        stop.store(true, Ordering::SeqCst);
        pending.cut_all();
        outcome
    });
    outcome.map(|()| Established { links, refused })
}

fn accept_loop<'scope>(
    s: &'scope Scope<'scope, '_>,
    listener: &'scope TcpListener,
    cfg: &'scope MeshConfig,
    stop: &'scope AtomicBool,
    pending: &'scope Pending,
    tx: mpsc::Sender<Event>,
) {
    let world = cfg.addrs.len();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => {
                let report = tx.clone();
                let shaking = spawn_scoped(s, "leapgnn-mesh-admit", move || {
                    let shook = stream.set_nonblocking(false).map_err(|e| e.to_string()).and_then(|()| {
                        let dl = Deadline::after(cfg.handshake_timeout);
                        pending.shake(&stream, true, |st, hello| {
                            auth::accept_marking(st, &cfg.secret, world, cfg.rank, &dl, hello)
                        })
                    });
                    // Report before the stream closes: whoever sees the refusal
                    // (the stranger's EOF) can rely on it being recorded.
                    let _ = report.send(match shook {
                        Ok(shook) => Event::Ready(stream, shook),
                        Err(reason) => {
                            tracing::warn!(%from, %reason, "worker {}: refused a connection", cfg.rank);
                            Event::Refused(Refusal { from, reason })
                        }
                    });
                });
                if let Err(e) = shaking {
                    let _ = tx.send(Event::Failed(e.into()));
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted) => {}
            Err(source) => {
                let addr = cfg.addrs[cfg.rank];
                let _ = tx.send(Event::Failed(CommError::Io { what: "accepting connections".into(), addr, source }));
                return;
            }
        }
    }
}

/// Dials worker `p` until it answers or the deadline passes (it may not be
/// listening yet, or it may drop us unanswered while strangers crowd its door).
fn dial(p: usize, cfg: &MeshConfig, deadline: &Deadline, stop: &AtomicBool, pending: &Pending) -> Option<Event> {
    let peer = cfg.peer(p);
    let world = cfg.addrs.len();
    let mut backoff = Duration::from_millis(10);
    let mut last = io::Error::new(io::ErrorKind::TimedOut, "no attempt finished in time");
    // Why the last attempt, if it connected, was dropped unanswered.
    let mut dropped: Option<String> = None;
    // Only once: on the next dial ours is the newest connection, which only a
    // fresh crowd could evict, so a peer that drops us there twice is named.
    let mut evicted_once = false;
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let left = deadline.remaining();
        if left.is_zero() {
            return Some(Event::Failed(match dropped {
                Some(reason) => CommError::Handshake {
                    peer,
                    reason: format!("{reason}, each time it was dialled within {:?}", deadline.timeout()),
                },
                None => CommError::Connect { peer, waited: deadline.timeout(), source: last },
            }));
        }
        match TcpStream::connect_timeout(&peer.addr, left.min(Duration::from_secs(5))) {
            Ok(stream) => {
                // The dialled address is the peer's own, so wait for its answer as
                // long as the mesh may take: it may still be busy starting up.
                match pending
                    .shake(&stream, false, |st, _| auth::connect(st, &cfg.secret, world, cfg.rank, p, deadline))
                {
                    Ok(shook) => return Some(Event::Ready(stream, shook)),
                    // Evicted before the peer read our hello (more strangers came to its door
                    // meanwhile than it lets wait): that costs a dial, not the mesh.
                    Err(DialFailure { reason, unanswered: true, .. }) => {
                        tracing::debug!(%peer, %reason, "worker {}: dropped unanswered; dialling again", cfg.rank);
                        dropped = Some(reason);
                    }
                    Err(DialFailure { reason, evicted: true, .. }) if !evicted_once => {
                        tracing::debug!(%peer, %reason, "worker {}: evicted before its welcome; dialling again", cfg.rank);
                        evicted_once = true;
                        dropped = Some(reason);
                    }
                    Err(DialFailure { reason, .. }) => {
                        return Some(Event::Failed(CommError::Handshake { peer, reason }));
                    }
                }
            }
            Err(e) => {
                last = e;
                dropped = None;
            }
        }
        thread::sleep(backoff.min(deadline.remaining()));
        backoff = (backoff * 2).min(MAX_DIAL_BACKOFF);
    }
}
