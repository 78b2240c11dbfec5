//! The feature service. Every worker answers row requests for its own
//! partition (`serve_features`); `FeatureClient::fetch` takes arbitrary global
//! ids, serves what it can from its own part and its cache, sends one request
//! per remote owner (all at once, so owners answer in parallel), and scatters
//! the answers back so that row i of the output is always the row of ids[i].
//! (The paper's artifact lost that order; see the reference notes, section 8.1.)

use super::counters::Category;
use super::deadline::Deadline;
use super::error::CommError;
use super::mesh::{Mesh, Message};
use super::rows::{RowSource, TableRows};
use super::tag;
use crate::format::ManifestFile;
use std::ops::AddAssign;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Reply status words (the first 4 bytes of every reply).
const OK: u32 = 0;
const NOT_HELD: u32 = 1;
const MALFORMED: u32 = 2;

/// Which worker owns each node (the partition's node -> part map).
#[derive(Clone)]
pub enum Owners {
    Table(Arc<[u16]>),
    Manifest(Arc<ManifestFile>),
}

impl Owners {
    pub fn as_slice(&self) -> &[u16] {
        match self {
            Owners::Table(t) => t,
            Owners::Manifest(m) => m.node_part(),
        }
    }
}

/// Where the rows of one fetch came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FetchStats {
    pub requested: u64,
    pub local: u64,
    pub cache_hit: u64,
    pub remote: u64,
}

impl AddAssign for FetchStats {
    fn add_assign(&mut self, o: FetchStats) {
        self.requested += o.requested;
        self.local += o.local;
        self.cache_hit += o.cache_hit;
        self.remote += o.remote;
    }
}

/// Answers feature requests from the other workers out of `source`, from now
/// until the mesh closes.
pub fn serve_features(mesh: &Mesh, source: Arc<dyn RowSource>) {
    mesh.register_service(
        tag::FEATURE_REQUEST,
        Arc::new(move |_peer, t, request| {
            Some(Message {
                tag: tag::make(tag::FEATURE_REPLY, tag::low(t)),
                category: Category::Features,
                payload: answer(&*source, &request),
            })
        }),
    );
}

/// A request is a list of u32 ids; the reply is `OK` then their rows in the
/// same order, or an error status.
fn answer(source: &dyn RowSource, request: &[u8]) -> Vec<u8> {
    if !request.len().is_multiple_of(4) {
        return MALFORMED.to_le_bytes().to_vec();
    }
    let rows = request.len() / 4;
    let mut out = Vec::with_capacity(4 + rows * source.dim() * 4);
    out.extend_from_slice(&OK.to_le_bytes());
    for id in request.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) {
        match source.row(id) {
            Some(row) => out.extend_from_slice(bytemuck::cast_slice(row)),
            None => return [NOT_HELD.to_le_bytes(), id.to_le_bytes()].concat(),
        }
    }
    out
}

/// Fetches feature rows for one worker.
pub struct FeatureClient {
    owners: Owners,
    local: Arc<dyn RowSource>,
    cache: Option<TableRows>,
    timeout: Duration,
    requests: AtomicU64,
}

impl FeatureClient {
    /// `local` holds this worker's own rows; `timeout` bounds each fetch.
    pub fn new(owners: Owners, local: Arc<dyn RowSource>, timeout: Duration) -> FeatureClient {
        FeatureClient { owners, local, cache: None, timeout, requests: AtomicU64::new(0) }
    }
    pub fn dim(&self) -> usize {
        self.local.dim()
    }
    pub fn num_nodes(&self) -> usize {
        self.owners.as_slice().len()
    }
    pub fn cache(&self) -> Option<&TableRows> {
        self.cache.as_ref()
    }
    pub fn set_cache(&mut self, cache: Option<TableRows>) -> Result<(), CommError> {
        if let Some(c) = cache.as_ref().filter(|c| c.dim() != self.dim()) {
            return Err(CommError::Usage(format!("a cache of {}-d rows for {}-d features", c.dim(), self.dim())));
        }
        self.cache = cache;
        Ok(())
    }

    /// Fetches the rows of `ids` (and caches them): the rows `cache::by_degree`
    /// or `cache::by_frequency` picked.
    pub fn fill_cache(&mut self, mesh: &Mesh, ids: &[u32]) -> Result<FetchStats, CommError> {
        self.cache = None;
        let mut rows = vec![0f32; ids.len() * self.dim()];
        let stats = self.fetch(mesh, ids, &mut rows)?;
        self.cache = Some(TableRows::new(self.num_nodes(), self.dim(), ids, rows)?);
        Ok(stats)
    }

    /// Fills `out` (`ids.len() * dim` floats) so that row i is the row of
    /// `ids[i]`. Ids may repeat and come in any order.
    pub fn fetch(&self, mesh: &Mesh, ids: &[u32], out: &mut [f32]) -> Result<FetchStats, CommError> {
        let (d, w, me) = (self.dim(), mesh.world(), mesh.rank());
        let owners = self.owners.as_slice();
        if out.len() != ids.len() * d {
            return Err(CommError::Usage(format!(
                "fetch of {} rows of {d} floats into {} floats",
                ids.len(),
                out.len()
            )));
        }
        if ids.len() > u32::MAX as usize {
            return Err(CommError::Usage(format!("fetch of {} rows in one call", ids.len())));
        }
        if let Some(&bad) = ids.iter().find(|&&id| owners.get(id as usize).is_none_or(|&o| o as usize >= w)) {
            let detail = match owners.get(bad as usize) {
                None => format!("the graph has {} nodes", owners.len()),
                Some(o) => format!("its owner is part {o} but the mesh has {w} workers"),
            };
            return Err(CommError::Usage(format!("fetch of node {bad}: {detail}")));
        }
        let cached = |id: u32| self.cache.as_ref().and_then(|c| c.row(id));
        let remote_owner = |id: u32| {
            let o = owners[id as usize] as usize;
            (o != me && cached(id).is_none()).then_some(o)
        };

        // Group the remote rows by owner, remembering each one's place in `ids`.
        let mut starts = vec![0usize; w + 1];
        for &id in ids {
            if let Some(o) = remote_owner(id) {
                starts[o + 1] += 1;
            }
        }
        for o in 0..w {
            starts[o + 1] += starts[o];
        }
        let mut fill = starts.clone();
        let mut positions = vec![0u32; starts[w]];
        let mut requests: Vec<Vec<u8>> = (0..w).map(|o| Vec::with_capacity(4 * (starts[o + 1] - starts[o]))).collect();
        for (i, &id) in ids.iter().enumerate() {
            if let Some(o) = remote_owner(id) {
                positions[fill[o]] = i as u32;
                fill[o] += 1;
                requests[o].extend_from_slice(&id.to_le_bytes());
            }
        }

        // Ask every owner at once; copy local and cached rows while they answer.
        let deadline = Deadline::after(self.timeout);
        let request = self.requests.fetch_add(1, Ordering::Relaxed);
        for (o, payload) in requests.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            mesh.send(o, tag::make(tag::FEATURE_REQUEST, request), Category::Features, payload)?;
        }
        let mut stats = FetchStats { requested: ids.len() as u64, remote: starts[w] as u64, ..FetchStats::default() };
        for (i, &id) in ids.iter().enumerate() {
            let dst = &mut out[i * d..(i + 1) * d];
            if owners[id as usize] as usize == me {
                let row = self.local.row(id).ok_or_else(|| {
                    CommError::Usage(format!(
                        "node {id} belongs to this worker's part by the partition map, but its rows lack it: \
                         the manifest and the part file disagree"
                    ))
                })?;
                dst.copy_from_slice(row);
                stats.local += 1;
            } else if let Some(row) = cached(id) {
                dst.copy_from_slice(row);
                stats.cache_hit += 1;
            }
        }

        // Scatter each owner's answer back into request order.
        for o in (0..w).filter(|&o| starts[o + 1] > starts[o]) {
            let mine = &positions[starts[o]..starts[o + 1]];
            let what = || format!("{} feature row(s) (request {request})", mine.len());
            let reply = mesh.recv_within(o, tag::make(tag::FEATURE_REPLY, request), &deadline, what)?;
            let rows = check_reply(mesh, o, &reply, mine.len(), d).map_err(|detail| CommError::Protocol {
                peer: mesh.peer(o),
                what: what(),
                detail,
            })?;
            for (j, &pos) in mine.iter().enumerate() {
                let dst = &mut out[pos as usize * d..(pos as usize + 1) * d];
                bytemuck::cast_slice_mut::<f32, u8>(dst).copy_from_slice(&rows[j * d * 4..(j + 1) * d * 4]);
            }
        }
        Ok(stats)
    }
}

/// The row bytes of a reply, or why it is unusable.
fn check_reply<'a>(mesh: &Mesh, owner: usize, reply: &'a [u8], rows: usize, d: usize) -> Result<&'a [u8], String> {
    let word = |i: usize| reply.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    match word(0) {
        Some(OK) if reply.len() == 4 + rows * d * 4 => Ok(&reply[4..]),
        Some(OK) => Err(format!(
            "it answered {} bytes for {rows} rows of {d} floats: do the workers use the same dataset?",
            reply.len() - 4
        )),
        Some(NOT_HELD) => Err(format!(
            "it does not hold node {}, which the partition map gives to part {owner} (this worker is {}): \
             do the workers use the same partitioning?",
            word(4).map_or("?".into(), |id| id.to_string()),
            mesh.rank()
        )),
        Some(MALFORMED) => Err("it found the request malformed".into()),
        _ => Err(format!("its reply starts with an unknown status ({} bytes)", reply.len())),
    }
}
