//! The keys of a job, none of which ever crosses the network.
//!
//! The driver makes a fresh random token per job and hands it to each worker
//! over its launch channel (a pipe to a local child, stdin inside the SSH
//! session to a remote one), so it is never on the control connection. From
//! it both ends derive with HKDF-SHA256:
//! - the control key, with which the driver and a worker each prove the token
//!   over fresh nonces (a recorded exchange cannot be replayed, and the proofs
//!   reveal nothing about the key), and
//! - the mesh key, salted by a public random salt the driver sends with the
//!   job, which the workers use as the mesh's shared secret (`comm::auth`).
//!
//! Whoever reads the control connection sees nonces, proofs and the salt:
//! without the token none of them derives a key.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Random bytes in a job token, and in each nonce and salt.
pub const TOKEN_BYTES: usize = 32;
/// Length of a proof (HMAC-SHA256) in bytes.
pub const PROOF_BYTES: usize = 32;

/// `n` bytes from the OS-seeded thread RNG (secrets and nonces must be
/// unpredictable, so never from the job's reproducible streams), as hex.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::rng().fill_bytes(&mut b);
    to_hex(&b)
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decodes lowercase or uppercase hex; `None` for odd lengths or other characters.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()).collect()
}

fn derive(token: &str, salt: &[u8], info: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    Hkdf::<Sha256>::new(Some(salt), token.as_bytes())
        .expand(info, &mut out)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    out
}

/// The mesh's shared secret for this job: HKDF(token, salt, "leapgnn mesh key v1").
pub fn mesh_key(token: &str, salt: &[u8]) -> Vec<u8> {
    derive(token, salt, b"leapgnn mesh key v1").to_vec()
}

/// Who is proving: the label keeps one side's proof from being reflected as the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Driver,
    Worker,
}

fn proof_mac(token: &str, side: Side, rank: usize, worker_nonce: &str, driver_nonce: &str) -> Hmac<Sha256> {
    let key = derive(token, b"", b"leapgnn control key v1");
    let mut m = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC accepts keys of any length");
    m.update(match side {
        Side::Driver => b"driver\0",
        Side::Worker => b"worker\0",
    });
    m.update(&(rank as u64).to_le_bytes());
    // Length-prefixed: the nonces are peer-chosen strings.
    for n in [worker_nonce, driver_nonce] {
        m.update(&(n.len() as u64).to_le_bytes());
        m.update(n.as_bytes());
    }
    m
}

/// `side`'s proof, for worker `rank`, that it holds the token, bound to both nonces.
pub fn control_proof(token: &str, side: Side, rank: usize, worker_nonce: &str, driver_nonce: &str) -> String {
    to_hex(&proof_mac(token, side, rank, worker_nonce, driver_nonce).finalize().into_bytes())
}

/// Checks a proof in constant time.
pub fn verify_control_proof(
    token: &str,
    side: Side,
    rank: usize,
    worker_nonce: &str,
    driver_nonce: &str,
    proof_hex: &str,
) -> bool {
    match from_hex(proof_hex) {
        Some(p) if p.len() == PROOF_BYTES => {
            proof_mac(token, side, rank, worker_nonce, driver_nonce).verify_slice(&p).is_ok()
        }
        _ => false,
    }
}

/// Ends the token of a job that asked for `--encrypt`: both ends learn the
/// choice over the launch channel only, so no one on the network can strip it.
pub const ENCRYPT_MARK: &str = "+encrypt";

/// Whether the job of `token` encrypts its control connections and mesh.
pub fn wants_encryption(token: &str) -> bool {
    token.ends_with(ENCRYPT_MARK)
}

/// `--encrypt`: the record keys of rank `rank`'s control connection at
/// `side`, salted by the handshake's nonces.
pub fn control_keys(
    token: &str,
    side: Side,
    rank: usize,
    worker_nonce: &str,
    driver_nonce: &str,
) -> crate::comm::seal::Keys {
    let mut salt = Vec::with_capacity(16 + worker_nonce.len() + driver_nonce.len());
    salt.extend_from_slice(&(rank as u64).to_le_bytes());
    for n in [worker_nonce, driver_nonce] {
        salt.extend_from_slice(&(n.len() as u64).to_le_bytes());
        salt.extend_from_slice(n.as_bytes());
    }
    let (d2w, w2d) = ("driver to worker", "worker to driver");
    let (out, inb) = match side {
        Side::Driver => (d2w, w2d),
        Side::Worker => (w2d, d2w),
    };
    crate::comm::seal::Keys::derive(token.as_bytes(), &salt, "leapgnn control records v1", out, inb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_token_and_salt_and_proofs_on_everything() {
        let (t, s) = (random_hex(TOKEN_BYTES), from_hex(&random_hex(TOKEN_BYTES)).unwrap());
        assert_eq!(mesh_key(&t, &s), mesh_key(&t, &s));
        assert_ne!(mesh_key(&t, &s), mesh_key(&random_hex(TOKEN_BYTES), &s));
        assert_ne!(mesh_key(&t, &s), mesh_key(&t, b"other salt"));
        let p = control_proof(&t, Side::Worker, 1, "wn", "dn");
        assert!(verify_control_proof(&t, Side::Worker, 1, "wn", "dn", &p));
        for (side, rank, wn, dn) in [
            (Side::Driver, 1, "wn", "dn"),
            (Side::Worker, 0, "wn", "dn"),
            (Side::Worker, 1, "wx", "dn"),
            (Side::Worker, 1, "wn", "dx"),
        ] {
            assert!(!verify_control_proof(&t, side, rank, wn, dn, &p), "{side:?} {rank} {wn} {dn}");
        }
        assert!(!verify_control_proof("another token", Side::Worker, 1, "wn", "dn", &p));
        assert!(!verify_control_proof(&t, Side::Worker, 1, "wn", "dn", "zz"));
        assert_eq!(from_hex(&to_hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("é1"), None);
    }
}
