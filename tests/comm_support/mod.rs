//! Helpers shared by the comm_* tests: meshes of W workers in threads of the
//! test process, over real TCP on 127.0.0.1 with ephemeral ports.
//! Included beside `support/bounded.rs`, which it uses as `super::bounded`.
#![allow(dead_code)]

use super::bounded::join_all_scoped_within;
use leapgnn::comm::{Mesh, MeshConfig};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// How long every worker of a `with_mesh` gets, together: the slowest
/// (Cora's features) take seconds. Past it a worker is hung (a peer that
/// panicked leaves it waiting), and the test binary aborts naming it.
pub const MESH_LIMIT: Duration = Duration::from_secs(300);

pub fn secret() -> Vec<u8> {
    (0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect()
}

/// W listeners on ephemeral ports, and their addresses by rank.
pub fn listeners(w: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let ls: Vec<TcpListener> = (0..w).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    (ls, addrs)
}

/// Builds a W-worker mesh (one thread per worker), runs `f` on every worker
/// and returns the results by rank, all within `MESH_LIMIT`. `tweak` adjusts
/// each worker's config.
pub fn with_mesh<T: Send>(w: usize, tweak: impl Fn(&mut MeshConfig) + Sync, f: impl Fn(&Mesh) -> T + Sync) -> Vec<T> {
    let (ls, addrs) = listeners(w);
    std::thread::scope(|s| {
        let handles: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(rank, l)| {
                let (addrs, tweak, f) = (addrs.clone(), &tweak, &f);
                s.spawn(move || {
                    let mut cfg = MeshConfig::new(rank, addrs, secret());
                    tweak(&mut cfg);
                    let mesh = Mesh::establish(l, &cfg).unwrap_or_else(|e| panic!("worker {rank}: {e}"));
                    f(&mesh)
                })
            })
            .collect();
        join_all_scoped_within(handles, MESH_LIMIT, |rank| format!("mesh rank {rank} (of {w})"))
    })
}

pub fn no_tweak(_: &mut MeshConfig) {}
