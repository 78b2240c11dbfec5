//! Helpers shared by the comm_* tests: meshes of W workers in threads of the
//! test process, over real TCP on 127.0.0.1 with ephemeral ports.
#![allow(dead_code)]

use leapgnn::comm::{Mesh, MeshConfig};
use std::net::{SocketAddr, TcpListener};

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
/// and returns the results by rank. `tweak` adjusts each worker's config.
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
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

pub fn no_tweak(_: &mut MeshConfig) {}
