//! Length-prefixed frames: a 16-byte header (magic, kind, category, tag,
//! payload length) then the payload. A frame's length is checked against a
//! limit before anything is allocated, so a garbage or hostile length never
//! reserves gigabytes; messages longer than the limit travel as a chain of
//! `More` frames ending in one `Data` frame, and memory grows only as bytes
//! actually arrive.

use super::counters::Category;
use std::io::{self, Read, Write};

pub const HEADER_LEN: usize = 16;
const MAGIC: [u8; 2] = *b"LG";
/// Payload bytes per frame unless the mesh is configured otherwise.
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The last (or only) frame of a message.
    Data = 0,
    /// A message continues in the next frame.
    More = 1,
    /// The sender is closing its side on purpose: not a crash.
    Goodbye = 2,
    Hello = 3,
    Proof = 4,
    Welcome = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        [Kind::Data, Kind::More, Kind::Goodbye, Kind::Hello, Kind::Proof, Kind::Welcome].get(b as usize).copied()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub category: Category,
    pub tag: u64,
    pub len: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not a leapgnn frame (starts with bytes {0:02x?})")]
    BadMagic([u8; 2]),
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("unknown byte category {0}")]
    BadCategory(u8),
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: usize },
    #[error("a {got:?} frame with tag {tag:#x} interrupted a message with tag {expected:#x}")]
    BrokenChain { got: Kind, tag: u64, expected: u64 },
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = self.kind as u8;
        b[3] = self.category as u8;
        b[4..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12..16].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_LEN], max_len: usize) -> Result<Header, FrameError> {
        if b[0..2] != MAGIC {
            return Err(FrameError::BadMagic([b[0], b[1]]));
        }
        let kind = Kind::from_u8(b[2]).ok_or(FrameError::BadKind(b[2]))?;
        let category = Category::from_u8(b[3]).ok_or(FrameError::BadCategory(b[3]))?;
        let tag = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        if len as u64 > max_len as u64 {
            return Err(FrameError::TooLarge { len: len as u64, max: max_len });
        }
        Ok(Header { kind, category, tag, len })
    }
}

/// Writes one frame; returns the bytes put on the wire.
pub fn write_frame(w: &mut impl Write, kind: Kind, category: Category, tag: u64, payload: &[u8]) -> io::Result<u64> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame payload over 4 GiB"))?;
    w.write_all(&Header { kind, category, tag, len }.encode())?;
    w.write_all(payload)?;
    Ok((HEADER_LEN + payload.len()) as u64)
}

/// Bytes on the wire for a message of `len` payload bytes: one header per frame.
pub fn wire_len(len: usize, max_frame: usize) -> u64 {
    let frames = len.div_ceil(max_frame.clamp(1, u32::MAX as usize)).max(1);
    (len + frames * HEADER_LEN) as u64
}

/// Writes a message of any length as frames of at most `max_frame` payload bytes.
pub fn write_message(
    w: &mut impl Write,
    category: Category,
    tag: u64,
    payload: &[u8],
    max_frame: usize,
) -> io::Result<u64> {
    let max = max_frame.clamp(1, u32::MAX as usize);
    let mut wire = 0;
    let mut rest = payload;
    while rest.len() > max {
        let (head, tail) = rest.split_at(max);
        wire += write_frame(w, Kind::More, category, tag, head)?;
        rest = tail;
    }
    Ok(wire + write_frame(w, Kind::Data, category, tag, rest)?)
}

pub fn read_header(r: &mut impl Read, max_len: usize) -> Result<Header, FrameError> {
    let mut b = [0u8; HEADER_LEN];
    r.read_exact(&mut b)?;
    Header::decode(&b, max_len)
}

/// Appends exactly `len` bytes from `r` to `buf`.
fn read_payload(r: &mut impl Read, len: u32, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.reserve(len as usize);
    let got = r.take(len as u64).read_to_end(buf)?;
    if got != len as usize {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("frame cut off after {got} of {len} bytes")));
    }
    Ok(())
}

/// Reads one frame (the handshake never accepts chains).
pub fn read_frame(r: &mut impl Read, max_len: usize) -> Result<(Header, Vec<u8>), FrameError> {
    let h = read_header(r, max_len)?;
    let mut payload = Vec::new();
    read_payload(r, h.len, &mut payload)?;
    Ok((h, payload))
}

/// A whole message, reassembled from its frames.
#[derive(Debug)]
pub struct Received {
    pub kind: Kind,
    pub category: Category,
    pub tag: u64,
    pub payload: Vec<u8>,
    /// Header and payload bytes of every frame of the message.
    pub wire_bytes: u64,
}

pub fn read_message(r: &mut impl Read, max_frame: usize) -> Result<Received, FrameError> {
    let first = read_header(r, max_frame)?;
    let mut payload = Vec::new();
    let mut wire = 0u64;
    let mut h = first;
    loop {
        read_payload(r, h.len, &mut payload)?;
        wire += (HEADER_LEN + h.len as usize) as u64;
        if h.kind != Kind::More {
            return Ok(Received { kind: h.kind, category: first.category, tag: first.tag, payload, wire_bytes: wire });
        }
        h = read_header(r, max_frame)?;
        if !matches!(h.kind, Kind::More | Kind::Data) || h.tag != first.tag || h.category != first.category {
            return Err(FrameError::BrokenChain { got: h.kind, tag: h.tag, expected: first.tag });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_travel_as_chains_and_reassemble() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for (len, max) in [(0, 8), (1, 8), (8, 8), (9, 8), (1000, 7), (1000, 4096)] {
            let mut wire = Vec::new();
            let n = write_message(&mut wire, Category::Gradients, 42, &payload[..len], max).unwrap();
            assert_eq!(n as usize, wire.len());
            assert_eq!(wire_len(len, max), n);
            let frames = len.div_ceil(max).max(1);
            assert_eq!(wire.len(), frames * HEADER_LEN + len, "len {len} max {max}");
            let got = read_message(&mut &wire[..], max).unwrap();
            assert_eq!((got.kind, got.category, got.tag), (Kind::Data, Category::Gradients, 42));
            assert_eq!(got.payload, &payload[..len]);
            assert_eq!(got.wire_bytes, n);
        }
    }

    #[test]
    fn an_oversized_length_is_refused_before_reading_the_payload() {
        let h = Header { kind: Kind::Data, category: Category::Features, tag: 1, len: u32::MAX };
        // Only the header is there: reading the payload would fail with EOF instead.
        let wire = h.encode();
        match read_message(&mut &wire[..], 1 << 20) {
            Err(FrameError::TooLarge { len, max }) => assert_eq!((len, max), (u32::MAX as u64, 1 << 20)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn garbage_and_broken_chains_are_errors() {
        let mut bad = Header { kind: Kind::Data, category: Category::Control, tag: 0, len: 0 }.encode();
        bad[0] = b'X';
        assert!(matches!(read_frame(&mut &bad[..], 64), Err(FrameError::BadMagic(_))));
        let mut kind = Header { kind: Kind::Data, category: Category::Control, tag: 0, len: 0 }.encode();
        kind[2] = 99;
        assert!(matches!(read_frame(&mut &kind[..], 64), Err(FrameError::BadKind(99))));

        let mut wire = Vec::new();
        write_frame(&mut wire, Kind::More, Category::Features, 5, b"abc").unwrap();
        write_frame(&mut wire, Kind::Data, Category::Features, 6, b"def").unwrap();
        assert!(matches!(read_message(&mut &wire[..], 64), Err(FrameError::BrokenChain { tag: 6, expected: 5, .. })));

        let mut cut = Vec::new();
        write_frame(&mut cut, Kind::Data, Category::Features, 5, b"abcdef").unwrap();
        cut.truncate(cut.len() - 2);
        match read_message(&mut &cut[..], 64) {
            Err(FrameError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("expected EOF, got {other:?}"),
        }
    }
}
