//! A converter's input as a set of named files: a directory tree, a zip
//! archive (OGB zips, npz files, SNAP zips) or one plain file. Converters find
//! parts by path suffix, so `arxiv/raw/edge.csv.gz` is found whether the user
//! gives the zip, the extracted `arxiv/` directory or its parent.

use super::DatasetError;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// How deep a directory source is searched: OGB's deepest part is `NAME/split/KIND/x.csv.gz`.
const MAX_DEPTH: usize = 4;

pub struct Source {
    path: PathBuf,
    kind: Kind,
    /// Relative names with `/` separators, sorted.
    names: Vec<String>,
}

enum Kind {
    Dir,
    Zip(zip::ZipArchive<BufReader<File>>),
    File,
}

impl Source {
    pub fn open(path: &Path) -> Result<Source, DatasetError> {
        let meta = std::fs::metadata(path).map_err(|e| DatasetError::io(path, e))?;
        if meta.is_dir() {
            let mut names = Vec::new();
            list_dir(path, "", 0, &mut names)?;
            names.sort();
            return Ok(Source { path: path.into(), kind: Kind::Dir, names });
        }
        if !meta.is_file() {
            // A pipe (`--from <(zcat ...)`) would lose the bytes the format sniff
            // reads, and has no size to bound decompression by; a FIFO with no
            // writer would block the open forever.
            return Err(DatasetError::invalid(
                path.display().to_string(),
                format!(
                    "is a {}, not a regular file or directory: a source is read more than once, so save it to a \
                     file first and give that file to --from",
                    crate::format::special_kind(&meta.file_type())
                ),
            ));
        }
        let mut magic = [0u8; 4];
        let mut f = File::open(path).map_err(|e| DatasetError::io(path, e))?;
        let n = f.read(&mut magic).map_err(|e| DatasetError::io(path, e))?;
        if n == 4 && magic == *b"PK\x03\x04" {
            let bad_zip = |e: zip::result::ZipError| {
                DatasetError::invalid(path.display().to_string(), format!("not a readable zip archive: {e}"))
            };
            let archive =
                zip::ZipArchive::new(BufReader::new(File::open(path).map_err(|e| DatasetError::io(path, e))?))
                    .map_err(bad_zip)?;
            let mut names = Vec::new();
            for name in archive.file_names() {
                let name = name.map_err(bad_zip)?;
                if !name.ends_with('/') {
                    names.push(name.into_owned());
                }
            }
            names.sort();
            return Ok(Source { path: path.into(), kind: Kind::Zip(archive), names });
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Source { path: path.into(), kind: Kind::File, names: vec![name] })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The shortest name equal to `suffix` or ending in `/suffix`.
    pub fn find(&self, suffix: &str) -> Option<&str> {
        self.find_by(|n| n == suffix || n.ends_with(&format!("/{suffix}")))
    }

    /// The shortest name matching `pred` (shortest = closest to the root, so a
    /// stray copy deeper down does not win).
    pub fn find_by(&self, pred: impl Fn(&str) -> bool) -> Option<&str> {
        self.names.iter().filter(|n| pred(n)).min_by_key(|n| (n.matches('/').count(), n.len())).map(String::as_str)
    }

    /// Like `find`, but a missing part is an error that lists what to provide.
    pub fn require(&self, suffix: &str) -> Result<String, DatasetError> {
        self.find(suffix).map(str::to_owned).ok_or_else(|| {
            DatasetError::invalid(
                self.path.display().to_string(),
                format!("no file `{suffix}` in it; is this the right format?"),
            )
        })
    }

    /// How errors name a part: the path the user would look at.
    pub fn display(&self, name: &str) -> String {
        match self.kind {
            Kind::File => self.path.display().to_string(),
            _ => self.path.join(name).display().to_string(),
        }
    }

    /// Opens a part for streaming; `.gz` parts are decompressed on the fly.
    /// No part yields more than `MAX_EXPANSION` times its stored bytes (a
    /// zip bomb is refused with an error, never read until memory runs out).
    pub fn open_part(&mut self, name: &str) -> Result<Box<dyn Read + '_>, DatasetError> {
        let shown = self.display(name);
        let meta_len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).map_err(|e| DatasetError::io(p, e));
        let (raw, stored): (Box<dyn Read + '_>, u64) = match &mut self.kind {
            Kind::Dir => {
                let p = self.path.join(name);
                let len = meta_len(&p)?;
                (Box::new(File::open(&p).map_err(|e| DatasetError::io(&p, e))?), len)
            }
            Kind::File => {
                let len = meta_len(&self.path)?;
                (Box::new(File::open(&self.path).map_err(|e| DatasetError::io(&self.path, e))?), len)
            }
            Kind::Zip(z) => {
                let f = z
                    .by_name(name)
                    .map_err(|e| DatasetError::invalid(&shown, format!("cannot read zip entry: {e}")))?;
                let stored = f.compressed_size();
                if f.size() > expansion_limit(stored) {
                    return Err(DatasetError::invalid(
                        &shown,
                        format!(
                            "declares {} bytes from {stored} compressed ones, more than deflate can expand to: refused as a zip bomb (or a corrupt archive)",
                            f.size()
                        ),
                    ));
                }
                (Box::new(f), stored)
            }
        };
        let inner: Box<dyn Read + '_> =
            if name.ends_with(".gz") { Box::new(flate2::read::MultiGzDecoder::new(raw)) } else { raw };
        Ok(Box::new(Capped { inner, left: expansion_limit(stored), stored }))
    }

    pub fn read_part(&mut self, name: &str) -> Result<Vec<u8>, DatasetError> {
        let shown = self.display(name);
        let mut buf = Vec::new();
        self.open_part(name)?.read_to_end(&mut buf).map_err(|e| read_error(&shown, 0, e))?;
        Ok(buf)
    }
}

fn list_dir(root: &Path, rel: &str, depth: usize, out: &mut Vec<String>) -> Result<(), DatasetError> {
    let dir = root.join(rel);
    for entry in std::fs::read_dir(&dir).map_err(|e| DatasetError::io(&dir, e))? {
        let entry = entry.map_err(|e| DatasetError::io(&dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel_name = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let ty = entry.file_type().map_err(|e| DatasetError::io(entry.path(), e))?;
        if ty.is_dir() {
            if depth + 1 < MAX_DEPTH {
                list_dir(root, &rel_name, depth + 1, out)?;
            }
        } else {
            out.push(rel_name);
        }
    }
    Ok(())
}

/// A read error while parsing `file`: corrupt compressed data or bad UTF-8 is
/// the input's fault (with the line reached), anything else is the system's.
/// Deflate expands at most about 1032:1 (runs of one byte), so a part that
/// yields more than this many times its stored bytes is a bomb: nested or
/// lying compression, not data.
pub const MAX_EXPANSION: u64 = 1032;

fn expansion_limit(stored: u64) -> u64 {
    stored.saturating_mul(MAX_EXPANSION).saturating_add(1 << 16)
}

/// A part's reader that fails (rather than ends) past its expansion limit.
struct Capped<R> {
    inner: R,
    left: u64,
    stored: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "it decompresses to more than {MAX_EXPANSION} times its {} stored bytes: refused as a zip bomb",
                    self.stored
                ),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

pub fn read_error(file: &str, line: u64, e: std::io::Error) -> DatasetError {
    use std::io::ErrorKind::{InvalidData, InvalidInput, UnexpectedEof};
    match e.kind() {
        InvalidData | InvalidInput | UnexpectedEof => {
            DatasetError::parse(file, line, format!("cannot read ({e}); the file is corrupt or not text"))
        }
        _ => DatasetError::io(file, e),
    }
}
