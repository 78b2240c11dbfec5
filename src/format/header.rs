use super::FormatError;
use std::path::Path;

pub const MAGIC: [u8; 8] = *b"LEAPGNN\0";
/// Bump on any change to an archived struct; older binaries refuse newer files.
/// 2: features stored dense or CSR (`FeatureTable`).
pub const FORMAT_VERSION: u32 = 2;
pub const HEADER_LEN: usize = 64;
const ENDIAN_MARK: u32 = 0x0102_0304;

/// What an archive holds; checked at open so a partition file is never read as a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Dataset = 1,
    PartManifest = 2,
    PartFeatures = 3,
    Checkpoint = 4,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dataset => "dataset",
            Kind::PartManifest => "partition manifest",
            Kind::PartFeatures => "partition feature file",
            Kind::Checkpoint => "checkpoint",
        }
    }
    fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Dataset,
            2 => Kind::PartManifest,
            3 => Kind::PartFeatures,
            4 => Kind::Checkpoint,
            _ => return None,
        })
    }
}

/// Fixed 64-byte header: magic, version, kind, endian mark, payload length,
/// xxh3-64 of the payload. The payload starts at byte 64, so an mmap (page
/// aligned) gives rkyv the alignment it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub kind: Kind,
    pub payload_len: u64,
    pub checksum: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[16..20].copy_from_slice(&ENDIAN_MARK.to_le_bytes());
        b[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }

    /// Parses and checks a header against the file's real length and the kind expected.
    pub fn decode(path: &Path, bytes: &[u8], expected: Kind) -> Result<Header, FormatError> {
        let actual = bytes.len() as u64;
        if bytes.len() < HEADER_LEN {
            if bytes.len() >= 8 && bytes[0..8] != MAGIC {
                return Err(FormatError::BadMagic { path: path.into() });
            }
            return Err(FormatError::Truncated { path: path.into(), expected: HEADER_LEN as u64, actual });
        }
        if bytes[0..8] != MAGIC {
            return Err(FormatError::BadMagic { path: path.into() });
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version > FORMAT_VERSION {
            return Err(FormatError::NewerVersion { path: path.into(), file: version, ours: FORMAT_VERSION });
        }
        if version < FORMAT_VERSION {
            let convert = conversion_command(path, Kind::from_u32(u32_at(12)).unwrap_or(expected));
            return Err(FormatError::OlderVersion { path: path.into(), file: version, ours: FORMAT_VERSION, convert });
        }
        if u32_at(16) != ENDIAN_MARK {
            return Err(FormatError::corrupt(path, "byte-order mark is wrong"));
        }
        // Unused in this version: a flipped bit here would otherwise go unnoticed.
        if bytes[20..24].iter().chain(&bytes[40..HEADER_LEN]).any(|&b| b != 0) {
            return Err(FormatError::corrupt(path, "reserved header bytes are not zero"));
        }
        let kind = Kind::from_u32(u32_at(12))
            .ok_or_else(|| FormatError::corrupt(path, format!("unknown archive kind {}", u32_at(12))))?;
        if kind != expected {
            return Err(FormatError::WrongKind {
                path: path.into(),
                expected: expected.name(),
                found: kind.name().into(),
            });
        }
        let payload_len = u64_at(24);
        let expected_len = payload_len.saturating_add(HEADER_LEN as u64);
        if expected_len != actual {
            if expected_len > actual {
                return Err(FormatError::Truncated { path: path.into(), expected: expected_len, actual });
            }
            return Err(FormatError::corrupt(
                path,
                format!("{} trailing bytes after the payload", actual - expected_len),
            ));
        }
        Ok(Header { version, kind, payload_len, checksum: u64_at(32) })
    }
}

/// What re-creates an archive of an older version at `path`: a dataset
/// (`<data>/<name>/dataset.lgnn`) is converted again from its kept download;
/// partition files are cut again from the converted dataset.
fn conversion_command(path: &Path, kind: Kind) -> String {
    let dir =
        |p: Option<&Path>| p.and_then(|p| p.file_name()).map_or("NAME".into(), |n| n.to_string_lossy().into_owned());
    match kind {
        Kind::Dataset => format!(
            "leapgnn download {} --force --features auto` (add `--from SOURCE` for a local import; \
             `--features dense|sparse` picks the storage",
            dir(path.parent())
        ),
        // <data>/<name>/parts/<method>-<k>/...
        Kind::PartManifest | Kind::PartFeatures => {
            let parts = path.parent();
            let dataset = dir(parts.and_then(|p| p.parent()).and_then(|p| p.parent()));
            let (method, k) = dir(parts)
                .rsplit_once('-')
                .map_or(("metis".into(), "K".into()), |(m, k)| (m.to_string(), k.to_string()));
            format!(
                "leapgnn download {dataset} --force` then `leapgnn partition {dataset} --method {method} --parts {k}"
            )
        }
        Kind::Checkpoint => "leapgnn train` again (checkpoints of older versions cannot be resumed".into(),
    }
}

pub fn checksum(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}
