//! The on-disk format shared by every subcommand: a 64-byte header followed by
//! an rkyv archive (64-bit relative pointers, little-endian).
//!
//! `open` is mmap + header check + rkyv validation (bytecheck) + O(1)
//! invariants: sub-millisecond even for multi-GB files. `verify` adds the
//! payload checksum and the O(n + m) invariants (every neighbour id in range,
//! monotone offsets); `info`, `download` and the training driver call it.

mod atomic;
mod dataset;
mod error;
mod features;
mod header;
mod mapped;
mod partition;

pub use atomic::{AtomicFile, check_target, write_atomic, write_atomic_held, write_atomic_mode};
pub use dataset::{ArchivedDataset, Dataset, DatasetFile, DatasetMeta, DatasetSummary};
pub use error::FormatError;
pub(crate) use error::advice as io_advice;
pub use features::{AUTO_SPARSE_DENSITY, FeatureStorage, FeatureTable, FeatureView, RowRef};
pub use header::{FORMAT_VERSION, Header, Kind};
pub(crate) use mapped::special_kind;
pub use mapped::{Mapped, write_archive};
pub use partition::{
    ArchivedPartManifest, ManifestFile, PartFeatures, PartFile, PartManifest, manifest_path, node_worker, part_path,
    part_worker, worker_parts,
};

#[cfg(target_endian = "big")]
compile_error!("leapgnn archives are little-endian and read zero-copy; big-endian hosts are not supported");

/// sha256 of `bytes`, lowercase hex (as `sha256sum` prints it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// sha256 of everything `r` yields, lowercase hex, read in 1 MiB pieces (a
/// file too big to hold: a downloaded archive, a partition to ship).
pub fn sha256_read(mut r: impl std::io::Read) -> std::io::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Archived little-endian primitives viewed as native slices (zero-copy).
pub fn native<T: bytemuck::Pod, A: bytemuck::Pod>(s: &[A]) -> &[T] {
    bytemuck::cast_slice(s)
}

#[cfg(test)]
mod tests;
