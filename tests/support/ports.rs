//! Ports for tests' servers: free ones for a daemon to bind (with the retry
//! their race needs), and a dead one that refuses connections.
//! Included beside `sshd.rs`, which uses it as `super::ports`.
#![allow(dead_code)]

use std::net::TcpListener;

/// A port nothing listens on (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `N` distinct ports nothing listens on: all bound at once, then released.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// `start` (a daemon told to bind `ports`) on `ports`, then on fresh ones for
/// as long as it answers `Err(its log)`: a port `free_ports` released can be
/// taken by another test's socket before the daemon binds it. At most 5 tries.
pub fn on_fresh_ports<const N: usize, T>(
    ports: [u16; N],
    what: &str,
    mut start: impl FnMut([u16; N]) -> Result<T, String>,
) -> T {
    let mut ports = ports;
    let mut lost = Vec::new();
    loop {
        match start(ports) {
            Ok(t) => return t,
            Err(log) => {
                lost.push(ports);
                assert!(lost.len() < 5, "{what} could not bind any of the ports {lost:?}; last log:\n{log}");
                ports = free_ports();
            }
        }
    }
}

/// A 127.0.0.1 port that refuses connections for as long as this value
/// lives: its socket is bound but never listens. A port `free_port` released
/// can be taken (and answered) by another test before the test connects to
/// it; this one cannot, as the kernel gives a bound port to nobody else.
pub struct DeadPort {
    _socket: socket2::Socket,
    pub port: u16,
}

pub fn dead_port() -> DeadPort {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let any = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
    socket.bind(&any.into()).expect("bind 127.0.0.1:0");
    let port = socket.local_addr().ok().and_then(|a| a.as_socket()).expect("the bound address").port();
    DeadPort { _socket: socket, port }
}
