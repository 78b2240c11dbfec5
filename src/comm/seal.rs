//! Encryption on request (`--encrypt`, `[cluster] encrypt = true`): after a
//! connection's handshake has proved the job key, each direction becomes a
//! sequence of AES-256-GCM records (`ring`, already linked for rustls):
//! a 4-byte length, then ciphertext and tag. Keys are derived per
//! connection and direction with HKDF-SHA256 from the job's key (itself
//! derived from the token that reaches workers only over their launch
//! channel) salted with the handshake's fresh nonces, so no two connections,
//! directions or jobs share a key; the nonce is the record's sequence
//! number, so a record replayed, dropped, reordered or altered fails to open
//! and the connection ends. Records carry at most `RECORD` plaintext bytes;
//! a length beyond that is refused before anything is read or allocated.
//!
//! Directions are independent (one sealing state for writing, one opening
//! state for reading), which suits the mesh's sender and receiver threads.

use hkdf::Hkdf;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sha2::Sha256;
use std::io::{self, Read, Write};

/// Plaintext bytes per record.
pub const RECORD: usize = 64 << 10;
/// AES-GCM's tag.
pub const TAG: usize = 16;

/// The two keys of one end of a connection.
pub struct Keys {
    send: [u8; 32],
    recv: [u8; 32],
}

impl Keys {
    /// HKDF(secret, salt, label || direction) for both directions; `outbound`
    /// and `inbound` name this end's sending and receiving direction (the
    /// other end passes them swapped).
    pub fn derive(secret: &[u8], salt: &[u8], label: &str, outbound: &str, inbound: &str) -> Keys {
        let hk = Hkdf::<Sha256>::new(Some(salt), secret);
        let key = |dir: &str| {
            let mut k = [0u8; 32];
            hk.expand_multi_info(&[label.as_bytes(), b"\0", dir.as_bytes()], &mut k)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            k
        };
        Keys { send: key(outbound), recv: key(inbound) }
    }

    pub fn split(self) -> (Sealer, Opener) {
        (Sealer(Direction::new(&self.send)), Opener(Direction::new(&self.recv)))
    }
}

struct Direction {
    key: LessSafeKey,
    seq: u64,
}

impl Direction {
    fn new(k: &[u8; 32]) -> Self {
        Direction { key: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("a 32-byte key")), seq: 0 }
    }

    /// The next record's nonce: its sequence number (never reused: u64 does not wrap in practice).
    fn next(&mut self) -> io::Result<Nonce> {
        let mut n = [0u8; NONCE_LEN];
        n[4..].copy_from_slice(&self.seq.to_le_bytes());
        self.seq = self.seq.checked_add(1).ok_or_else(|| invalid("record sequence number exhausted".into()))?;
        Ok(Nonce::assume_unique_for_key(n))
    }
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

/// Seals records in order.
pub struct Sealer(Direction);

impl Sealer {
    /// Appends the record of `plain` (at most `RECORD` bytes) to `out`.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        debug_assert!(plain.len() <= RECORD);
        let nonce = self.0.next()?;
        out.extend_from_slice(&((plain.len() + TAG) as u32).to_le_bytes());
        let start = out.len();
        out.extend_from_slice(plain);
        let tag = self
            .0
            .key
            .seal_in_place_separate_tag(nonce, Aad::empty(), &mut out[start..])
            .map_err(|_| invalid("sealing a record failed".into()))?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }
}

/// Opens records in order.
pub struct Opener(Direction);

impl Opener {
    /// The plaintext of `record` (ciphertext and tag), decrypted in place.
    pub fn open<'a>(&mut self, record: &'a mut [u8]) -> io::Result<&'a [u8]> {
        let nonce = self.0.next()?;
        let plain = self.0.key.open_in_place(nonce, Aad::empty(), record).map_err(|_| {
            invalid("a record failed authentication (altered, replayed, or sealed with another key)".into())
        })?;
        Ok(plain)
    }

    /// Reads one record's length and checks it before anything is allocated.
    pub fn record_len(len: [u8; 4], max_plain: usize) -> io::Result<usize> {
        let n = u32::from_le_bytes(len) as usize;
        if !(TAG..=max_plain + TAG).contains(&n) {
            return Err(invalid(format!("a record of {n} bytes is outside {TAG}..={}", max_plain + TAG)));
        }
        Ok(n)
    }
}

/// Buffers plaintext and writes it as sealed records (a record per `RECORD`
/// bytes, and one per flush).
pub struct SealWriter<W: Write> {
    inner: W,
    sealer: Sealer,
    plain: Vec<u8>,
    out: Vec<u8>,
}

impl<W: Write> SealWriter<W> {
    pub fn new(inner: W, sealer: Sealer) -> Self {
        SealWriter { inner, sealer, plain: Vec::with_capacity(RECORD), out: Vec::with_capacity(RECORD + TAG + 4) }
    }

    fn emit(&mut self) -> io::Result<()> {
        if self.plain.is_empty() {
            return Ok(());
        }
        self.out.clear();
        self.sealer.seal(&self.plain, &mut self.out)?;
        self.plain.clear();
        self.inner.write_all(&self.out)
    }
}

impl<W: Write> Write for SealWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(RECORD - self.plain.len());
        self.plain.extend_from_slice(&buf[..n]);
        if self.plain.len() == RECORD {
            self.emit()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit()?;
        self.inner.flush()
    }
}

/// Reads sealed records and serves their plaintext.
pub struct OpenReader<R: Read> {
    inner: R,
    opener: Opener,
    record: Vec<u8>,
    /// The current record's plaintext is `record[pos..end]`.
    pos: usize,
    end: usize,
}

impl<R: Read> OpenReader<R> {
    pub fn new(inner: R, opener: Opener) -> Self {
        OpenReader { inner, opener, record: Vec::new(), pos: 0, end: 0 }
    }
}

impl<R: Read> Read for OpenReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.end {
            let mut len = [0u8; 4];
            // A clean end of stream between records is an end of stream; inside one it is an error.
            match self.inner.read(&mut len[..1])? {
                0 => return Ok(0),
                _ => self.inner.read_exact(&mut len[1..])?,
            }
            let n = Opener::record_len(len, RECORD)?;
            self.record.resize(n, 0);
            self.inner.read_exact(&mut self.record)?;
            let plain = self.opener.open(&mut self.record)?.len();
            (self.pos, self.end) = (0, plain);
        }
        let n = buf.len().min(self.end - self.pos);
        buf[..n].copy_from_slice(&self.record[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Keys, Keys) {
        let a = Keys::derive(b"job key", b"nonces", "test", "a->b", "b->a");
        let b = Keys::derive(b"job key", b"nonces", "test", "b->a", "a->b");
        (a, b)
    }

    #[test]
    fn records_roundtrip_in_order_and_hide_the_plaintext() {
        let (a, b) = pair();
        let (sa, _) = a.split();
        let (_, ob) = b.split();
        let msg: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let mut w = SealWriter::new(Vec::new(), sa);
        w.write_all(&msg).unwrap();
        w.flush().unwrap();
        let wire = w.inner.clone();
        assert_eq!(wire.len(), msg.len() + msg.len().div_ceil(RECORD) * (4 + TAG));
        assert!(!wire.windows(64).any(|win| msg.windows(64).take(1000).any(|m| m == win)), "plaintext on the wire");
        let mut got = Vec::new();
        OpenReader::new(&wire[..], ob).read_to_end(&mut got).unwrap();
        assert_eq!(got, msg);
    }

    #[test]
    fn altered_reordered_and_foreign_records_fail_and_lengths_are_bounded() {
        let seal_two = |keys: Keys| {
            let (mut s, _) = keys.split();
            let (mut one, mut two) = (Vec::new(), Vec::new());
            s.seal(b"first record", &mut one).unwrap();
            s.seal(b"second record", &mut two).unwrap();
            (one, two)
        };
        let read = |wire: &[u8], keys: Keys| {
            let mut out = Vec::new();
            OpenReader::new(wire, keys.split().1).read_to_end(&mut out).map(|_| out)
        };
        let (one, two) = seal_two(pair().0);
        assert_eq!(read(&[one.clone(), two.clone()].concat(), pair().1).unwrap(), b"first recordsecond record");
        let mut flipped = one.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(read(&flipped, pair().1).is_err(), "altered");
        assert!(read(&[two.clone(), one.clone()].concat(), pair().1).is_err(), "reordered");
        let other = Keys::derive(b"another job", b"nonces", "test", "b->a", "a->b");
        assert!(read(&one, other).is_err(), "another key");
        // Reflected: a record sent back to the end that sealed it opens with the other direction's key.
        assert!(read(&one, pair().0).is_err(), "reflected");
        // Truncated inside a record: an error, not a clean end of stream.
        assert!(read(&[one.clone(), two[..two.len() - 1].to_vec()].concat(), pair().1).is_err(), "truncated");
        let huge = [u32::MAX.to_le_bytes().to_vec(), vec![0; 8]].concat();
        let e = read(&huge, pair().1).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
    }
}
