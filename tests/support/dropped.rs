//! Waiting for a peer to drop a connection it refuses (a worker's mesh, the
//! driver), as the tests of what they refuse do.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::Duration;

/// Waits up to `timeout` for the peer of `s` to drop it: end of stream or a
/// reset. Otherwise says what happened instead: bytes it sent, the timeout,
/// another error. An interrupted read is read again: a read with a timeout
/// (SO_RCVTIMEO) fails with EINTR when the process is stopped and continued,
/// even with no signal handler (signal(7)), and std does not retry it.
pub fn wait_dropped(s: &mut TcpStream, timeout: Duration) -> Result<(), String> {
    s.set_read_timeout(Some(timeout)).map_err(|e| format!("cannot set a read timeout: {e}"))?;
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Ok(n) => return Err(format!("it sent {n} more bytes instead of dropping the connection")),
            Err(e) => return Err(format!("not dropped: {e}")),
        }
    }
}
