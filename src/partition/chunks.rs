//! GNNPipe's chunks as stored: the whole graph cut by METIS into C chunks,
//! once, by the driver, into `<dataset>/chunks/metis-<C>/manifest` (a
//! partition manifest without part files: the chunks need no features of
//! their own). Written, validated and locked as `parts/` is, so every
//! worker reads the one cut instead of cutting it again, and a run with the
//! same chunks, seed and dataset reuses it.

use super::quality::Quality;
use super::writer::{Grouping, TargetLock};
use super::{Balance, PartitionError, Problem, train_flags};
use crate::format::{DatasetFile, FormatError, ManifestFile, PartManifest};
use crate::graph::CsrView;
use std::path::Path;

/// The method the chunks are cut with, as their manifest records it.
const METHOD: &str = "metis";

/// vertex -> chunk: METIS on the whole graph (vertices and training vertices
/// balanced, seeded), renumbered in order of each chunk's lowest vertex (so
/// none is empty); and the count. `chunks` is at most the vertex count
/// (`GnnPipeConfig::check_graph`). METIS leaves chunks empty when they are
/// many for the graph (2,439 of 2,708 on Cora): fewer chunks, which the run
/// says. `partition::assign` refuses empty parts (a worker without work), so
/// this calls METIS itself.
pub fn cut(graph: CsrView<'_>, train: &[u32], chunks: usize, seed: u64) -> Result<(Vec<u16>, usize), PartitionError> {
    let n = graph.num_nodes();
    if chunks == 1 {
        return Ok((vec![0; n], 1));
    }
    let flags = train_flags(n, train);
    let p = Problem { graph, is_train: &flags, parts: chunks, balance: Balance::DEFAULT, seed };
    let mut of = super::metis::assign(&p)?;
    // Numbered by their lowest vertex: which chunk goes first (and so which
    // cross-chunk edges read this epoch's rows) follows the vertex order, not
    // METIS's labels.
    let mut id = vec![u16::MAX; chunks];
    let mut count = 0u16;
    for &c in &of {
        if id[c as usize] == u16::MAX {
            id[c as usize] = count;
            count += 1;
        }
    }
    of.iter_mut().for_each(|c| *c = id[*c as usize]);
    Ok((of, count as usize))
}

/// GNNPipe's chunks as stored: vertex -> chunk, the count of chunks that
/// hold vertices, and the manifest's checksum (which the driver hands its
/// workers, so that they refuse a file replaced meanwhile).
pub struct Stored {
    pub of: Vec<u16>,
    pub count: usize,
    pub checksum: u64,
}

/// The stored chunks of the manifest `m` of `ds` into `chunks` (as
/// requested: METIS may have filled fewer), checked whole. A damaged or
/// foreign file is an error naming it; nothing is cut here.
pub fn checked(m: ManifestFile, ds: &DatasetFile, chunks: usize) -> Result<Stored, FormatError> {
    m.verify()?;
    checked_verified(m, ds, chunks)
}

/// `checked` of a manifest whose checksum and sums `verify` has passed.
fn checked_verified(m: ManifestFile, ds: &DatasetFile, chunks: usize) -> Result<Stored, FormatError> {
    m.check_matches(ds, chunks)?;
    // `cut` numbers the chunks that hold vertices first.
    let count = m.part_nodes().iter().take_while(|&&k| k > 0).count();
    if let Some(v) = m.node_part().iter().position(|&c| c as usize >= count) {
        return Err(FormatError::corrupt(
            m.path(),
            format!("vertex {v} is in chunk {}, which is empty", m.node_part()[v]),
        ));
    }
    Ok(Stored { of: m.node_part().to_vec(), count, checksum: m.checksum() })
}

/// What the driver finds in a chunks directory (`existing`).
enum Existing {
    /// The chunks asked for, checked whole.
    Kept(Stored),
    /// None, or chunks of another dataset or cut with other settings: cut
    /// in their place.
    Missing,
    /// A damaged file (`FormatError::is_missing_or_damaged`): cut again in
    /// its place, saying so, as `partition` rewrites a damaged partition.
    Damaged(FormatError),
}

/// What `dir` holds for the chunks of `ds` into `chunks` with `seed`. A file
/// that cannot be read for another reason (memory, permissions, a directory
/// in its place) is an error naming it: cutting again would not cure it.
fn existing(dir: &Path, ds: &DatasetFile, chunks: usize, seed: u64) -> Result<Existing, FormatError> {
    let damaged = |e: FormatError| if e.is_missing_or_damaged() { Ok(Existing::Damaged(e)) } else { Err(e) };
    let m = match ManifestFile::open(dir) {
        Ok(m) => m,
        Err(FormatError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Existing::Missing);
        }
        Err(e) => return damaged(e),
    };
    // Before the settings: a flipped byte may fall on them as well as on the map.
    if let Err(e) = m.verify() {
        return damaged(e);
    }
    if !super::cut_alike(&m, ds, (METHOD, chunks, seed), Balance::DEFAULT) {
        return Ok(Existing::Missing);
    }
    checked_verified(m, ds, chunks).map(Existing::Kept).or_else(damaged)
}

/// The chunks of `ds` (named `name`) into `chunks` with `seed`, stored in
/// `dir`: read when there, else cut (again, saying so, in place of a damaged
/// file), given to `check` (vertex -> chunk, and the count) and written only
/// once it accepts them, so a refused run leaves no file behind; returned as
/// stored. Says on stderr when it cuts.
pub fn ensure(
    dir: &Path,
    (name, ds): (&str, &DatasetFile),
    chunks: usize,
    seed: u64,
    check: &mut dyn FnMut(&[u16], usize) -> anyhow::Result<()>,
) -> anyhow::Result<Stored> {
    let kept = |stored: Stored, check: &mut dyn FnMut(&[u16], usize) -> anyhow::Result<()>| {
        check(&stored.of, stored.count).map(|()| stored)
    };
    if let Existing::Kept(stored) = existing(dir, ds, chunks, seed)? {
        return kept(stored, check);
    }
    let _lock = TargetLock::acquire(dir)?;
    // Another process may have written them while this one waited.
    match existing(dir, ds, chunks, seed)? {
        Existing::Kept(stored) => return kept(stored, check),
        // `fault`: the cut below is the re-creation its advice would ask for.
        Existing::Damaged(e) => crate::elog!("damaged GNNPipe chunks, cut again in their place: {}", e.fault()),
        Existing::Missing => {}
    }
    let started = std::time::Instant::now();
    let (of, count) = cut(ds.graph(), ds.train(), chunks, seed)?;
    check(&of, count)?;
    let q = Quality::measure(ds.graph(), &of, &train_flags(ds.num_nodes(), ds.train()), chunks);
    let mut groups = Grouping::new(&of, chunks);
    let manifest = PartManifest {
        dataset: name.to_string(),
        dataset_checksum: ds.checksum(),
        method: METHOD.into(),
        parts: chunks as u32,
        seed,
        constraints: Balance::DEFAULT.name().into(),
        node_part: of.clone(),
        local_index: std::mem::take(&mut groups.local_index),
        part_nodes: q.part_nodes,
        part_train: q.part_train,
        edge_cut: q.edge_cut,
        edges: q.edges,
    };
    std::fs::create_dir_all(dir).map_err(|e| FormatError::io(dir, e))?;
    manifest.write(dir)?;
    crate::elog!(
        "cut {name} into {count} GNNPipe chunks (--chunks {chunks}) with METIS in {:.1} s: wrote {}",
        started.elapsed().as_secs_f64(),
        crate::format::manifest_path(dir).display()
    );
    // Only the header is read: the workers compare the checksum it holds.
    let checksum = ManifestFile::open(dir)?.checksum();
    Ok(Stored { of, count, checksum })
}
