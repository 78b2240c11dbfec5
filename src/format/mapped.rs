use super::header::{HEADER_LEN, Header, Kind, checksum};
use super::{AtomicFile, FormatError};
use rkyv::api::high::{HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor::BoxedError;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::ser::writer::IoWriter;
use rkyv::{Archive, Portable};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// The writer rkyv serialises into: the file, with the payload hashed on the way.
pub struct HashWriter {
    inner: BufWriter<File>,
    hasher: xxhash_rust::xxh3::Xxh3,
    len: u64,
    /// The first I/O error, kept because rkyv's error type hides it: a full
    /// disk must be reported as I/O (exit 1), not as an unserialisable value.
    io_error: std::rc::Rc<std::cell::Cell<Option<std::io::ErrorKind>>>,
}

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf).inspect_err(|e| {
            let first = self.io_error.take().unwrap_or(e.kind());
            self.io_error.set(Some(first));
        })?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Serialiser type an archived struct must support to be written.
pub type ArchiveSerializer<'a> = HighSerializer<IoWriter<HashWriter>, ArenaHandle<'a>, BoxedError>;

/// Writes `value` as an archive of `kind` at `path`, atomically (temp, fsync, rename).
pub fn write_archive<T>(path: &Path, kind: Kind, value: &T) -> Result<(), FormatError>
where
    T: for<'a> rkyv::Serialize<ArchiveSerializer<'a>>,
{
    let mut file = AtomicFile::create(path)?;
    let io = |e: std::io::Error| FormatError::io(path, e);
    let mut w = file.take();
    w.write_all(&[0u8; HEADER_LEN]).map_err(io)?;
    let io_error = std::rc::Rc::new(std::cell::Cell::new(None));
    let hw = HashWriter { inner: w, hasher: xxhash_rust::xxh3::Xxh3::new(), len: 0, io_error: io_error.clone() };
    let hw = rkyv::api::high::to_bytes_in::<_, BoxedError>(value, IoWriter::new(hw))
        .map_err(|e| match io_error.get() {
            Some(kind) => FormatError::io(path, std::io::Error::new(kind, e.to_string())),
            None => FormatError::Serialize { path: path.into(), detail: e.to_string() },
        })?
        .into_inner();
    let header = Header { version: super::FORMAT_VERSION, kind, payload_len: hw.len, checksum: hw.hasher.digest() };
    let mut w = hw.inner;
    w.seek(SeekFrom::Start(0)).map_err(io)?;
    w.write_all(&header.encode()).map_err(io)?;
    file.restore(w);
    file.commit()?;
    Ok(())
}

/// Opens `path` for reading if it is a regular file. Non-blocking, so that a
/// FIFO in its place is refused rather than waiting forever for a writer; a
/// directory (which opens, then fails to map or read) is refused by name.
fn open_regular(path: &Path) -> Result<File, FormatError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e| FormatError::io(path, e);
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(io)?;
    let t = file.metadata().map_err(io)?.file_type();
    if t.is_file() {
        return Ok(file);
    }
    let (kind, what) = if t.is_dir() {
        (std::io::ErrorKind::IsADirectory, "directory")
    } else {
        (std::io::ErrorKind::InvalidInput, special_kind(&t))
    };
    Err(io(std::io::Error::new(kind, format!("is a {what}, not an archive file; move it aside"))))
}

/// What a non-regular file is, for the error that refuses it.
pub(crate) fn special_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "pipe (FIFO)"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// A validated, memory-mapped archive of `T`. Reading is zero-copy.
pub struct Mapped<T> {
    path: PathBuf,
    map: memmap2::Mmap,
    header: Header,
    _t: PhantomData<fn() -> T>,
}

impl<T> Mapped<T>
where
    T: Archive,
    T::Archived: Portable + for<'a> CheckBytes<HighValidator<'a, BoxedError>>,
{
    /// mmap + header check + rkyv structural validation. Does not hash the payload
    /// (that is `verify_checksum`), so it stays sub-millisecond on large files.
    pub fn open(path: impl AsRef<Path>, kind: Kind) -> Result<Self, FormatError> {
        let path = path.as_ref().to_path_buf();
        let mut file = open_regular(&path)?;
        let len = file.metadata().map_err(|e| FormatError::io(&path, e))?.len();
        if len < HEADER_LEN as u64 {
            // Too short to map usefully (and mmap of 0 bytes fails): decode reports why.
            let mut small = Vec::new();
            file.read_to_end(&mut small).map_err(|e| FormatError::io(&path, e))?;
            Header::decode(&path, &small, kind)?;
            return Err(FormatError::Truncated { path, expected: HEADER_LEN as u64, actual: len });
        }
        // SAFETY: the map is read-only and private to this process. leapgnn never
        // writes an existing archive in place (every write is a new file renamed over
        // the old path, so a mapped inode is never modified by us); a third party
        // truncating or rewriting the file under us is outside the contract, as for
        // every mmap-based store.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FormatError::io(&path, e))?;
        let header = Header::decode(&path, &map, kind)?;
        rkyv::access::<T::Archived, BoxedError>(&map[HEADER_LEN..])
            .map_err(|e| FormatError::corrupt(&path, format!("structure check failed ({e})")))?;
        Ok(Mapped { path, map, header, _t: PhantomData })
    }

    pub fn get(&self) -> &T::Archived {
        // SAFETY: the same bytes passed `rkyv::access` (full bytecheck validation) in
        // `open`, and they are immutable for the lifetime of `self` (see `open`).
        unsafe { rkyv::access_unchecked::<T::Archived>(self.payload()) }
    }
}

impl<T> Mapped<T> {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn payload(&self) -> &[u8] {
        &self.map[HEADER_LEN..]
    }
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Hashes the payload and compares it with the header (catches flipped bytes
    /// anywhere, including inside feature rows that structural validation cannot judge).
    pub fn verify_checksum(&self) -> Result<(), FormatError> {
        let computed = checksum(self.payload());
        if computed != self.header.checksum {
            return Err(FormatError::Checksum { path: self.path.clone(), stored: self.header.checksum, computed });
        }
        Ok(())
    }

    /// sha256 of the whole file, as scripts compare it.
    pub fn sha256_hex(&self) -> String {
        super::sha256_hex(&self.map[..])
    }
}
