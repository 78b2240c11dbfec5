//! The running mesh: one sender thread per peer, fed by a channel, so a slow
//! peer never blocks traffic to the others; one receiver thread per peer that
//! reassembles messages and files them into per-(peer, tag) mailboxes, or
//! hands them to a registered service. Every wait takes a deadline and fails
//! with the peer's name and what was awaited.
//!
//! The job is synchronous, so a worker lost without saying goodbye dooms every
//! wait: `recv` from any peer fails at once, naming the lost worker, instead of
//! running into its timeout. A worker that closed its mesh on purpose (it sends
//! a goodbye frame) only fails waits on itself.

use super::counters::{ByteCounts, Category, Counters};
use super::deadline::Deadline;
use super::error::{CommError, PeerId};
use super::establish::{self, Refusal};
use super::frame::{self, FrameError, Kind};
use super::{Redacted, auth, seal, tag};
use crate::util::threads::spawn;
use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

/// How to build a mesh. `addrs[r]` is the address worker r listens on.
/// Its Debug shows the secret's length only, so that no log or error shows it.
#[derive(Clone)]
pub struct MeshConfig {
    pub rank: usize,
    pub addrs: Vec<SocketAddr>,
    /// The job secret (the driver makes 32 random bytes per job).
    pub secret: Vec<u8>,
    /// Deadline for the whole mesh to form.
    pub connect_timeout: Duration,
    /// How long an incoming connection may take to prove itself.
    pub handshake_timeout: Duration,
    /// A peer that takes no bytes for this long is declared lost.
    pub write_timeout: Duration,
    /// On drop, how long to wait for the peers' goodbyes before closing anyway.
    pub linger: Duration,
    /// Largest payload of one frame; longer messages are sent as chains.
    pub max_frame: usize,
    /// Payload bytes queued for one peer before `send` waits for its sender
    /// thread to write some (at most `write_timeout`): a slow or stopped peer
    /// holds the others up instead of growing their memory. One message larger
    /// than this is still sent, alone.
    pub max_queued: usize,
    /// Payload bytes from one peer that may wait unread in its mailboxes.
    /// Past it that peer's receiver thread stops reading its socket until a
    /// `recv` makes room, so the peer's `send` waits (TCP pushes back) instead
    /// of this worker's memory growing; a `recv` that times out meanwhile says
    /// so. One message larger than this is still taken, alone.
    pub max_inbox: usize,
    /// `--encrypt`: every link's traffic after its handshake travels as
    /// sealed records (`seal`), keyed per link and direction.
    pub encrypt: bool,
}

impl std::fmt::Debug for MeshConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshConfig")
            .field("rank", &self.rank)
            .field("addrs", &self.addrs)
            .field("secret", &Redacted(&self.secret))
            .field("connect_timeout", &self.connect_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("linger", &self.linger)
            .field("max_frame", &self.max_frame)
            .field("max_queued", &self.max_queued)
            .field("max_inbox", &self.max_inbox)
            .field("encrypt", &self.encrypt)
            .finish()
    }
}

impl MeshConfig {
    pub fn new(rank: usize, addrs: Vec<SocketAddr>, secret: impl Into<Vec<u8>>) -> Self {
        MeshConfig {
            rank,
            addrs,
            secret: secret.into(),
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(2),
            max_frame: frame::DEFAULT_MAX_FRAME,
            max_queued: 64 << 20,
            max_inbox: 1 << 30,
            encrypt: false,
        }
    }

    pub(super) fn peer(&self, rank: usize) -> PeerId {
        PeerId { rank, addr: self.addrs[rank] }
    }

    fn check(&self, listener: &TcpListener) -> Result<(), CommError> {
        let usage = |m: String| Err(CommError::Usage(m));
        if self.rank >= self.addrs.len() {
            return usage(format!("rank {} but only {} worker addresses", self.rank, self.addrs.len()));
        }
        if self.secret.len() < auth::MIN_SECRET_LEN {
            return usage(format!(
                "the job secret has {} bytes, at least {} are needed",
                self.secret.len(),
                auth::MIN_SECRET_LEN
            ));
        }
        if self.max_frame == 0 {
            return usage("max_frame must be at least 1 byte".into());
        }
        let bound = listener.local_addr().map_err(|source| CommError::Io {
            what: "reading the listener's address".into(),
            addr: self.addrs[self.rank],
            source,
        })?;
        let mine = self.addrs[self.rank];
        if mine.port() != 0 && mine.port() != bound.port() {
            return usage(format!(
                "worker {} should listen on {mine}, but its listener is bound to {bound}",
                self.rank
            ));
        }
        Ok(())
    }
}

/// A message to send; also what a service answers with.
#[derive(Debug)]
pub struct Message {
    pub tag: u64,
    pub category: Category,
    pub payload: Vec<u8>,
}

/// Answers the messages of one tag space inside the receiver thread of the
/// peer that sent them: `(peer, tag, payload) -> reply to that peer`.
pub type Service = Arc<dyn Fn(usize, u64, Vec<u8>) -> Option<Message> + Send + Sync>;

enum PeerState {
    Open,
    /// Said goodbye: closed its mesh on purpose.
    Left,
    /// Crashed, was killed, sent garbage or stopped reading.
    Lost(String),
}

struct Inbox {
    queues: HashMap<(usize, u64), VecDeque<Vec<u8>>>,
    /// Payload bytes in each peer's mailboxes (bounded by `max_inbox`).
    held: Vec<usize>,
    /// Each peer's receiver thread is waiting for room, not reading.
    stalled: Vec<bool>,
    /// The mesh is being dropped: nobody will `recv` again.
    closing: bool,
    state: Vec<PeerState>,
    /// The first peer lost without a goodbye.
    first_loss: Option<usize>,
    services: HashMap<u8, Service>,
    receivers_running: usize,
}

/// The queue to one peer's sender thread, bounded in bytes (`max_queued`).
struct Outbox {
    tx: Option<mpsc::Sender<Message>>,
    /// Payload bytes handed to the sender thread and not yet written.
    queued: usize,
}

struct OutSlot {
    outbox: Mutex<Outbox>,
    /// Signalled when the sender thread has written (or dropped) queued bytes.
    drained: Condvar,
}

/// Why a message could not be queued.
enum NotQueued {
    Closed,
    Full(Duration),
}

struct Shared {
    rank: usize,
    peers: Vec<PeerId>,
    counters: Counters,
    max_frame: usize,
    max_queued: usize,
    max_inbox: usize,
    /// How long `send` waits for room in a full queue.
    queue_wait: Duration,
    outboxes: Vec<OutSlot>,
    inbox: Mutex<Inbox>,
    changed: Condvar,
    /// Signalled when a `recv` takes a message of a stalled peer (or on close).
    room: Condvar,
}

/// Locks `m`; a panic elsewhere must not make the data plane unusable.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Link {
    stream: TcpStream,
    sender: Option<JoinHandle<()>>,
    receiver: Option<JoinHandle<()>>,
}

/// A full, authenticated mesh between the workers of one job.
pub struct Mesh {
    shared: Arc<Shared>,
    links: Vec<Link>,
    refused: Vec<Refusal>,
    linger: Duration,
    collectives: AtomicU64,
}

impl Mesh {
    /// Connects to every other worker. `listener` must already be bound to
    /// `cfg.addrs[cfg.rank]` (bind first, publish the address, then call this).
    pub fn establish(listener: TcpListener, cfg: &MeshConfig) -> Result<Mesh, CommError> {
        cfg.check(&listener)?;
        let world = cfg.addrs.len();
        let est = if world > 1 {
            establish::connect_all(&listener, cfg)?
        } else {
            establish::Established { links: vec![None], refused: Vec::new() }
        };
        drop(listener);
        let shared = Arc::new(Shared {
            rank: cfg.rank,
            peers: (0..world).map(|r| cfg.peer(r)).collect(),
            counters: Counters::default(),
            max_frame: cfg.max_frame,
            max_queued: cfg.max_queued,
            max_inbox: cfg.max_inbox,
            queue_wait: cfg.write_timeout,
            outboxes: (0..world)
                .map(|_| OutSlot { outbox: Mutex::new(Outbox { tx: None, queued: 0 }), drained: Condvar::new() })
                .collect(),
            inbox: Mutex::new(Inbox {
                queues: HashMap::new(),
                held: vec![0; world],
                stalled: vec![false; world],
                closing: false,
                state: (0..world).map(|_| PeerState::Open).collect(),
                first_loss: None,
                services: HashMap::new(),
                receivers_running: 0,
            }),
            changed: Condvar::new(),
            room: Condvar::new(),
        });
        let mut mesh = Mesh {
            shared,
            links: Vec::with_capacity(world),
            refused: est.refused,
            linger: cfg.linger,
            collectives: AtomicU64::new(0),
        };
        for (peer, link) in est.links.into_iter().enumerate() {
            if let Some((stream, shook)) = link {
                mesh.shared.counters.add_received(Category::Control, shook.wire_in);
                mesh.shared.counters.add_sent(Category::Control, shook.wire_out);
                // On error `mesh` drops here, which stops the threads already started.
                let keys = cfg.encrypt.then(|| shook.keys(&cfg.secret));
                mesh.start_link(peer, stream, cfg.write_timeout, keys)?;
            }
        }
        Ok(mesh)
    }

    fn start_link(
        &mut self,
        peer: usize,
        stream: TcpStream,
        write_timeout: Duration,
        keys: Option<seal::Keys>,
    ) -> Result<(), CommError> {
        let who = self.shared.peers[peer];
        let io_err = |what: &str| {
            let what = format!("{what} for {who}");
            move |source| CommError::Io { what, addr: who.addr, source }
        };
        stream.set_nodelay(true).map_err(io_err("setting up the connection"))?;
        stream.set_read_timeout(None).map_err(io_err("setting up the connection"))?;
        stream.set_write_timeout(Some(write_timeout)).map_err(io_err("setting up the connection"))?;
        let for_sender = stream.try_clone().map_err(io_err("cloning the socket"))?;
        let for_receiver = stream.try_clone().map_err(io_err("cloning the socket"))?;
        let (tx, rx) = mpsc::channel();
        let (sealer, opener) = keys.map(seal::Keys::split).unzip();
        let shared = self.shared.clone();
        let sender = spawn(format!("comm-send-{peer}"), move || send_loop(&shared, peer, for_sender, rx, sealer))?;
        lock(&self.shared.outboxes[peer].outbox).tx = Some(tx);
        lock(&self.shared.inbox).receivers_running += 1;
        let shared = self.shared.clone();
        let receiver = spawn(format!("comm-recv-{peer}"), move || receive_loop(&shared, peer, for_receiver, opener));
        if receiver.is_err() {
            lock(&self.shared.inbox).receivers_running -= 1;
        }
        // Recorded either way, so that Drop stops the sender.
        let (receiver, failed) = match receiver {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(e)),
        };
        self.links.push(Link { stream, sender: Some(sender), receiver });
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    pub fn rank(&self) -> usize {
        self.shared.rank
    }
    pub fn world(&self) -> usize {
        self.shared.peers.len()
    }
    pub fn peer(&self, rank: usize) -> PeerId {
        self.shared.peers[rank]
    }
    /// Bytes sent and received so far, per category.
    pub fn bytes(&self) -> ByteCounts {
        self.shared.counters.snapshot()
    }
    /// Payload bytes from `peer` waiting unread in its mailboxes.
    pub fn inbox_held(&self, peer: usize) -> usize {
        lock(&self.shared.inbox).held.get(peer).copied().unwrap_or(0)
    }
    /// Connections refused while the mesh was being built.
    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    /// A fresh sequence number for a collective: all workers call collectives
    /// in the same order, so the n-th collective of every worker agrees on it.
    pub(super) fn next_collective(&self) -> u64 {
        self.collectives.fetch_add(1, Ordering::Relaxed)
    }

    fn check_peer(&self, peer: usize) -> Result<PeerId, CommError> {
        if peer >= self.world() || peer == self.rank() {
            return Err(CommError::Usage(format!(
                "worker {} addressed worker {peer}, which is not one of its {} peers",
                self.rank(),
                self.world() - 1
            )));
        }
        Ok(self.shared.peers[peer])
    }

    /// Queues `payload` for `peer` (the peer's sender thread writes it). Returns
    /// at once unless `max_queued` bytes are already waiting for that peer; then
    /// it waits for room, at most the write timeout.
    pub fn send(&self, peer: usize, tag: u64, category: Category, payload: Vec<u8>) -> Result<(), CommError> {
        let to = self.check_peer(peer)?;
        self.shared.send(peer, Message { tag, category, payload }, true).map_err(|e| match e {
            NotQueued::Full(waited) => CommError::Timeout {
                peer: to,
                what: format!(
                    "room to queue message {tag:#x} (it has not read the {} bytes queued for it)",
                    self.shared.max_queued
                ),
                waited,
            },
            NotQueued::Closed => {
                let inbox = lock(&self.shared.inbox);
                self.shared.lost(&inbox, peer, format!("sending message {tag:#x} to it"))
            }
        })
    }

    /// The next message from `peer` with `tag`, waiting at most `timeout`.
    pub fn recv(&self, peer: usize, tag: u64, timeout: Duration) -> Result<Vec<u8>, CommError> {
        self.recv_within(peer, tag, &Deadline::after(timeout), || format!("message {tag:#x}"))
    }

    /// Like `recv`, within an operation's deadline; `what` describes the
    /// awaited message for the error.
    pub fn recv_within(
        &self,
        peer: usize,
        tag: u64,
        deadline: &Deadline,
        what: impl Fn() -> String,
    ) -> Result<Vec<u8>, CommError> {
        let from = self.check_peer(peer)?;
        let mut inbox = lock(&self.shared.inbox);
        loop {
            if let Some(q) = inbox.queues.get_mut(&(peer, tag))
                && let Some(payload) = q.pop_front()
            {
                if q.is_empty() {
                    inbox.queues.remove(&(peer, tag));
                }
                self.shared.took(&mut inbox, peer, payload.len());
                return Ok(payload);
            }
            let gone = !matches!(inbox.state[peer], PeerState::Open);
            if let Some(failed) = inbox.first_loss.or(gone.then_some(peer)) {
                return Err(self.shared.lost(&inbox, failed, format!("waiting for {} from {from}", what())));
            }
            let left = deadline.remaining();
            if left.is_zero() {
                let waited = deadline.timeout();
                if inbox.stalled[peer] {
                    let held = inbox.held[peer];
                    return Err(CommError::InboxFull {
                        peer: from,
                        what: what(),
                        held,
                        cap: self.shared.max_inbox,
                        waited,
                    });
                }
                return Err(CommError::Timeout { peer: from, what: what(), waited });
            }
            inbox = self.shared.changed.wait_timeout(inbox, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Hands every message whose tag is in `space` to `service`, including any
    /// that arrived before this call. Services run in the receiver thread of the
    /// sending peer, so requests from different peers are answered in parallel.
    pub fn register_service(&self, space: u8, service: Service) {
        let mut inbox = lock(&self.shared.inbox);
        inbox.services.insert(space, service.clone());
        let early: Vec<_> = inbox.queues.extract_if(|&(_, t), _| tag::space(t) == space).collect();
        for ((peer, _), queue) in &early {
            let len = queue.iter().map(Vec::len).sum();
            self.shared.took(&mut inbox, *peer, len);
        }
        drop(inbox);
        for ((peer, t), queue) in early {
            for payload in queue {
                self.shared.serve(&service, peer, t, payload);
            }
        }
    }
}

impl Shared {
    /// Queues `msg` for `peer`'s sender thread. Bytes are counted here, not when
    /// written, so a snapshot taken after `send` returns includes them. With
    /// `wait`, a full queue is waited on (see `max_queued`); replies a service
    /// sends from a receiver thread do not wait, so two peers answering each
    /// other's requests never block each other's reading (a reply is bounded
    /// by the request that asked for it).
    fn send(&self, peer: usize, msg: Message, wait: bool) -> Result<(), NotQueued> {
        let (category, len, msg_tag) = (msg.category, msg.payload.len(), msg.tag);
        let wire = frame::wire_len(len, self.max_frame);
        let slot = &self.outboxes[peer];
        let deadline = Deadline::after(self.queue_wait);
        let mut ob = lock(&slot.outbox);
        while wait && ob.tx.is_some() && ob.queued > 0 && ob.queued.saturating_add(len) > self.max_queued {
            if deadline.passed() {
                return Err(NotQueued::Full(deadline.timeout()));
            }
            ob = slot.drained.wait_timeout(ob, deadline.remaining()).unwrap_or_else(PoisonError::into_inner).0;
        }
        match ob.tx.as_ref() {
            Some(tx) => tx.send(msg).map_err(|_| NotQueued::Closed)?,
            None => return Err(NotQueued::Closed),
        }
        ob.queued += len;
        drop(ob);
        if tag::counted(msg_tag) {
            self.counters.add_sent(category, wire);
        }
        Ok(())
    }

    /// The sender thread wrote (or gave up on) `len` queued payload bytes.
    fn written(&self, peer: usize, len: usize) {
        let slot = &self.outboxes[peer];
        let mut ob = lock(&slot.outbox);
        ob.queued = ob.queued.saturating_sub(len);
        drop(ob);
        slot.drained.notify_all();
    }

    /// The sender thread has stopped: nothing queued will be written.
    fn sender_gone(&self, peer: usize) {
        let slot = &self.outboxes[peer];
        let mut ob = lock(&slot.outbox);
        ob.tx = None;
        ob.queued = 0;
        drop(ob);
        slot.drained.notify_all();
    }

    fn serve(&self, service: &Service, peer: usize, tag: u64, payload: Vec<u8>) {
        if let Some(reply) = service(peer, tag, payload) {
            // A peer that cannot take the reply is reported by its own waits.
            let _ = self.send(peer, reply, false);
        }
    }

    /// Files a message from `peer`, first waiting for room in its mailboxes
    /// (`max_inbox`): meanwhile this receiver thread reads nothing more from
    /// the peer's socket, which is what bounds this worker's memory.
    fn deliver(&self, peer: usize, tag: u64, payload: Vec<u8>) {
        let len = payload.len();
        let mut inbox = lock(&self.inbox);
        loop {
            // Looked up again after each wait: a service may have been registered meanwhile.
            if let Some(service) = inbox.services.get(&tag::space(tag)).cloned() {
                inbox.stalled[peer] = false;
                drop(inbox);
                self.serve(&service, peer, tag, payload);
                return;
            }
            let held = inbox.held[peer];
            if inbox.closing || held == 0 || held.saturating_add(len) <= self.max_inbox {
                break;
            }
            inbox.stalled[peer] = true;
            inbox = self.room.wait(inbox).unwrap_or_else(PoisonError::into_inner);
        }
        inbox.stalled[peer] = false;
        if inbox.closing {
            // Read (so that the peer's goodbye gets through), not kept: nobody can `recv` it.
            return;
        }
        inbox.held[peer] += len;
        inbox.queues.entry((peer, tag)).or_default().push_back(payload);
        drop(inbox);
        self.changed.notify_all();
    }

    /// `len` bytes of `peer`'s messages left its mailboxes.
    fn took(&self, inbox: &mut Inbox, peer: usize, len: usize) {
        inbox.held[peer] = inbox.held[peer].saturating_sub(len);
        if inbox.stalled[peer] {
            self.room.notify_all();
        }
    }

    /// Records how `peer`'s connection ended (the first account wins).
    fn ended(&self, peer: usize, how: PeerState, receiver_done: bool) {
        let mut inbox = lock(&self.inbox);
        if matches!(inbox.state[peer], PeerState::Open) {
            if matches!(how, PeerState::Lost(_)) && inbox.first_loss.is_none() {
                inbox.first_loss = Some(peer);
            }
            inbox.state[peer] = how;
        }
        if receiver_done {
            inbox.receivers_running -= 1;
        }
        drop(inbox);
        self.changed.notify_all();
    }

    fn lost(&self, inbox: &Inbox, peer: usize, doing: String) -> CommError {
        let how = match &inbox.state[peer] {
            PeerState::Lost(reason) => reason.clone(),
            PeerState::Left => "left the job (closed its connections)".to_string(),
            PeerState::Open => "is no longer connected (this worker's mesh is closing)".to_string(),
        };
        CommError::PeerLost { peer: self.peers[peer], how, doing }
    }
}

fn send_loop(
    shared: &Shared,
    peer: usize,
    stream: TcpStream,
    rx: mpsc::Receiver<Message>,
    sealer: Option<seal::Sealer>,
) {
    // Sealed records buffer a record's worth themselves.
    let mut w: Box<dyn Write + '_> = match sealer {
        Some(s) => Box::new(seal::SealWriter::new(&stream, s)),
        None => Box::new(BufWriter::with_capacity(64 << 10, &stream)),
    };
    let put = |w: &mut Box<dyn Write + '_>, m: &Message| {
        frame::write_message(w, m.category, m.tag, &m.payload, shared.max_frame).map(|_| ())
    };
    let result = (|| -> io::Result<()> {
        while let Ok(m) = rx.recv() {
            put(&mut w, &m)?;
            shared.written(peer, m.payload.len());
            // Batch what is already queued into as few writes as possible.
            while let Ok(m) = rx.try_recv() {
                put(&mut w, &m)?;
                shared.written(peer, m.payload.len());
            }
            w.flush()?;
        }
        // The mesh is closing: tell the peer this is no crash. Not counted, on
        // either side: it leaves after every snapshot this mesh can take, and
        // arrives before or after the peer's last one as the two happen to run,
        // so counted it made two identical runs' received bytes differ.
        frame::write_frame(&mut w, Kind::Goodbye, Category::Control, 0, &[])?;
        w.flush()
    })();
    drop(w);
    if let Err(e) = result {
        let how = match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "stopped reading this worker's data".to_string(),
            _ => format!("could not be written to ({e})"),
        };
        shared.ended(peer, PeerState::Lost(how), false);
    }
    // After the loss is recorded, so that a `send` waiting for room reports it.
    shared.sender_gone(peer);
    let _ = stream.shutdown(Shutdown::Write);
}

fn receive_loop(shared: &Shared, peer: usize, stream: TcpStream, opener: Option<seal::Opener>) {
    let inner: Box<dyn io::Read> = match opener {
        Some(o) => Box::new(seal::OpenReader::new(stream, o)),
        None => Box::new(stream),
    };
    let mut r = BufReader::with_capacity(64 << 10, inner);
    let how = loop {
        match frame::read_message(&mut r, shared.max_frame) {
            Ok(m) => match m.kind {
                Kind::Data => {
                    // As its sender counted it (`Shared::send`).
                    if tag::counted(m.tag) {
                        shared.counters.add_received(m.category, m.wire_bytes);
                    }
                    shared.deliver(peer, m.tag, m.payload)
                }
                // Uncounted, as its sender leaves it uncounted (`send_loop`).
                Kind::Goodbye => break PeerState::Left,
                k => break PeerState::Lost(format!("sent an unexpected {k:?} frame")),
            },
            Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                break PeerState::Lost("closed the connection without a goodbye (did it crash or get killed?)".into());
            }
            Err(FrameError::Io(e)) => break PeerState::Lost(format!("lost its connection ({e})")),
            Err(e) => break PeerState::Lost(format!("sent a malformed frame ({e})")),
        }
    };
    shared.ended(peer, how, true);
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh").field("rank", &self.rank()).field("peers", &self.shared.peers).finish_non_exhaustive()
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        // Nothing can `recv` any more, so a receiver waiting for room goes on reading.
        lock(&self.shared.inbox).closing = true;
        self.shared.room.notify_all();
        // Closing the channels lets each sender flush its queue and say goodbye.
        for slot in &self.shared.outboxes {
            lock(&slot.outbox).tx.take();
            slot.drained.notify_all();
        }
        for link in &mut self.links {
            if let Some(h) = link.sender.take() {
                let _ = h.join();
            }
        }
        // Closing a socket with unread bytes resets the connection and can destroy
        // data the peer has not read yet (our goodbye among it), so give the peers
        // a bounded time to say goodbye too.
        let deadline = Deadline::after(self.linger);
        let mut inbox = lock(&self.shared.inbox);
        while inbox.receivers_running > 0 && !deadline.passed() {
            inbox =
                self.shared.changed.wait_timeout(inbox, deadline.remaining()).unwrap_or_else(PoisonError::into_inner).0;
        }
        drop(inbox);
        for link in &self.links {
            let _ = link.stream.shutdown(Shutdown::Both);
        }
        for link in &mut self.links {
            if let Some(h) = link.receiver.take() {
                let _ = h.join();
            }
        }
    }
}
