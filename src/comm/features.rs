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
use crate::format::{FeatureTable, RowRef};
use crate::gather::{CsrRows, Rows};
use std::ops::AddAssign;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Reply status words (the first 4 bytes of every reply).
const OK: u32 = 0;
const NOT_HELD: u32 = 1;
const MALFORMED: u32 = 2;
/// Rows follow as CSR: a u32 count per row, then every row's u32 columns,
/// then their f32 values (the answer of an owner whose rows are stored sparse).
const OK_SPARSE: u32 = 3;

/// Which worker owns each node: a node -> worker table, or the partition's
/// node -> part map itself when every worker owns exactly one part.
#[derive(Clone)]
pub enum Owners {
    Table(Arc<[u16]>),
    Manifest(Arc<ManifestFile>),
}

impl Owners {
    /// The owners of a run of `workers` workers over the partitioning of
    /// `manifest` (worker of part p: `format::part_worker`). With as many parts
    /// as workers this is the manifest's own map, not a copy.
    pub fn of_workers(manifest: Arc<ManifestFile>, workers: usize) -> Owners {
        if manifest.parts() == workers {
            Owners::Manifest(manifest)
        } else {
            Owners::Table(manifest.node_worker(workers).into())
        }
    }

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
/// same order (dense), `OK_SPARSE` then their rows as CSR (sparse sources),
/// or an error status.
fn answer(source: &dyn RowSource, request: &[u8]) -> Vec<u8> {
    if !request.len().is_multiple_of(4) {
        return MALFORMED.to_le_bytes().to_vec();
    }
    let ids = || request.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let not_held = |id: u32| [NOT_HELD.to_le_bytes(), id.to_le_bytes()].concat();
    let rows = request.len() / 4;
    if source.is_sparse() {
        let (mut counts, mut cols, mut vals) = (Vec::with_capacity(4 * rows), Vec::new(), Vec::new());
        for id in ids() {
            let Some(row) = source.row(id) else { return not_held(id) };
            let before = cols.len();
            match row {
                RowRef::Sparse { indices, values } => {
                    cols.extend_from_slice(bytemuck::cast_slice(indices));
                    vals.extend_from_slice(bytemuck::cast_slice(values));
                }
                RowRef::Dense(r) => {
                    for (c, &v) in r.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                        cols.extend_from_slice(&(c as u32).to_le_bytes());
                        vals.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
            counts.extend_from_slice(&(((cols.len() - before) / 4) as u32).to_le_bytes());
        }
        return [&OK_SPARSE.to_le_bytes()[..], &counts, &cols, &vals].concat();
    }
    let d = source.dim();
    let mut out = Vec::with_capacity(4 + rows * d * 4);
    out.extend_from_slice(&OK.to_le_bytes());
    let mut buf = vec![0f32; d];
    for id in ids() {
        match source.row(id) {
            Some(RowRef::Dense(row)) => out.extend_from_slice(bytemuck::cast_slice(row)),
            Some(row) => {
                row.write_dense(&mut buf);
                out.extend_from_slice(bytemuck::cast_slice(&buf));
            }
            None => return not_held(id),
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

    /// The row of `id` from this worker's own part (no cache, nothing counted).
    pub fn own_row(&self, id: u32) -> Option<RowRef<'_>> {
        self.local.row(id)
    }

    /// Whether this worker's rows, and so its owners' answers, are sparse.
    pub fn is_sparse(&self) -> bool {
        self.local.is_sparse()
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
        let (rows, stats) = self.fetch_rows(mesh, ids)?;
        let table = match rows {
            Rows::Dense(v) => FeatureTable::Dense(v),
            Rows::Sparse(c) => FeatureTable::Sparse {
                indptr: c.indptr.iter().map(|&o| o as u64).collect(),
                indices: c.indices,
                values: c.values,
            },
        };
        self.cache = Some(TableRows::from_table(self.num_nodes(), self.dim(), ids, table)?);
        Ok(stats)
    }

    /// Fills `out` (`ids.len() * dim` floats) so that row i is the row of
    /// `ids[i]`. Ids may repeat and come in any order.
    pub fn fetch(&self, mesh: &Mesh, ids: &[u32], out: &mut [f32]) -> Result<FetchStats, CommError> {
        let d = self.dim();
        if out.len() != ids.len() * d {
            return Err(CommError::Usage(format!(
                "fetch of {} rows of {d} floats into {} floats",
                ids.len(),
                out.len()
            )));
        }
        let mut p = self.send_requests(mesh, ids)?;
        self.fill_dense(mesh, &mut p, ids, out)?;
        Ok(p.stats)
    }

    /// Copies local and cached rows (while the owners answer), then scatters
    /// each owner's answer back into request order.
    fn fill_dense(&self, mesh: &Mesh, p: &mut Pending, ids: &[u32], out: &mut [f32]) -> Result<(), CommError> {
        let d = self.dim();
        for (i, &id) in ids.iter().enumerate() {
            if let Some(row) = self.at_hand(p, id)? {
                row.write_dense(&mut out[i * d..(i + 1) * d]);
            }
        }
        for o in 0..mesh.world() {
            let Some(reply) = self.receive(mesh, p, o)? else { continue };
            let mine = &p.positions[p.starts[o]..p.starts[o + 1]];
            for (j, &pos) in mine.iter().enumerate() {
                reply.write_dense(j, &mut out[pos as usize * d..(pos as usize + 1) * d]);
            }
        }
        Ok(())
    }

    /// The rows of `ids` in order: CSR when this worker's rows are stored
    /// sparse (then owners answer sparse too, and only non-zeros cross the
    /// network), dense otherwise.
    pub fn fetch_rows(&self, mesh: &Mesh, ids: &[u32]) -> Result<(Rows, FetchStats), CommError> {
        let p = self.send_requests(mesh, ids)?;
        self.take_rows(mesh, ids, p)
    }

    /// `fetch_rows` in two halves: this one asks the owners and returns at
    /// once; their answers travel (and wait in the mailbox) until
    /// `finish_rows` takes them.
    pub fn start_rows(&self, mesh: &Mesh, ids: Vec<u32>) -> Result<RowsInFlight, CommError> {
        let pending = self.send_requests(mesh, &ids)?;
        Ok(RowsInFlight { ids, pending })
    }

    /// The rows `start_rows` asked for, waiting for the answers still on
    /// their way (the fetch timeout counts from the asking).
    pub fn finish_rows(&self, mesh: &Mesh, asked: RowsInFlight) -> Result<(Rows, FetchStats), CommError> {
        self.take_rows(mesh, &asked.ids, asked.pending)
    }

    /// The rows of `ids`, asked for by `p`, in order (see `fetch_rows`).
    fn take_rows(&self, mesh: &Mesh, ids: &[u32], mut p: Pending) -> Result<(Rows, FetchStats), CommError> {
        if !self.local.is_sparse() {
            let mut out = vec![0f32; ids.len() * self.dim()];
            self.fill_dense(mesh, &mut p, ids, &mut out)?;
            return Ok((Rows::Dense(out), p.stats));
        }
        let replies = (0..mesh.world()).map(|o| self.receive(mesh, &p, o)).collect::<Result<Vec<_>, _>>()?;
        let mut next: Vec<usize> = vec![0; mesh.world()];
        let mut out = CsrRows { dim: self.dim(), indptr: Vec::with_capacity(ids.len() + 1), ..Default::default() };
        out.indptr.push(0);
        let mut tmp = Vec::new();
        let owners = self.owners.as_slice();
        for &id in ids {
            if let Some(row) = self.at_hand(&mut p, id)? {
                out.push(row);
                continue;
            }
            let o = owners[id as usize] as usize;
            let reply = replies[o].as_ref().ok_or_else(|| CommError::Usage(format!("no reply for node {id}")))?;
            reply.push_row(next[o], &mut out, &mut tmp);
            next[o] += 1;
        }
        Ok((Rows::Sparse(out), p.stats))
    }

    /// The row of `id` from this worker's part or its cache (counted in `p.stats`);
    /// None when an owner is asked for it.
    fn at_hand(&self, p: &mut Pending, id: u32) -> Result<Option<RowRef<'_>>, CommError> {
        if self.owners.as_slice()[id as usize] as usize == p.me {
            let row = self.own_row(id).ok_or_else(|| {
                CommError::Usage(format!(
                    "node {id} belongs to this worker's part by the partition map, but its rows lack it: \
                     the manifest and the part file disagree"
                ))
            })?;
            p.stats.local += 1;
            return Ok(Some(row));
        }
        match self.cache.as_ref().and_then(|c| c.row(id)) {
            Some(row) => {
                p.stats.cache_hit += 1;
                Ok(Some(row))
            }
            None => Ok(None),
        }
    }

    /// Checks `ids` and sends one request per remote owner, all at once.
    fn send_requests(&self, mesh: &Mesh, ids: &[u32]) -> Result<Pending, CommError> {
        let (w, me) = (mesh.world(), mesh.rank());
        let owners = self.owners.as_slice();
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

        let deadline = Deadline::after(self.timeout);
        let request = self.requests.fetch_add(1, Ordering::Relaxed);
        for (o, payload) in requests.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            mesh.send(o, tag::make(tag::FEATURE_REQUEST, request), Category::Features, payload)?;
        }
        let stats = FetchStats { requested: ids.len() as u64, remote: starts[w] as u64, ..FetchStats::default() };
        Ok(Pending { me, starts, positions, request, deadline, stats })
    }

    /// Owner `o`'s answer to `p`, checked; None when `o` was not asked.
    fn receive(&self, mesh: &Mesh, p: &Pending, o: usize) -> Result<Option<ReplyRows>, CommError> {
        let rows = p.starts[o + 1] - p.starts[o];
        if rows == 0 {
            return Ok(None);
        }
        let request = p.request;
        let what = || format!("{rows} feature row(s) (request {request})");
        let reply = mesh.recv_within(o, tag::make(tag::FEATURE_REPLY, request), &p.deadline, what)?;
        check_reply(mesh, o, reply, rows, self.dim()).map(Some).map_err(|detail| CommError::Protocol {
            peer: mesh.peer(o),
            what: what(),
            detail,
        })
    }
}

/// Rows asked for by `start_rows`, not yet taken.
pub struct RowsInFlight {
    ids: Vec<u32>,
    pending: Pending,
}

/// A fetch in flight: who was asked for what.
struct Pending {
    me: usize,
    /// Remote rows grouped by owner: owner o's are `positions[starts[o]..starts[o + 1]]`
    /// (places in `ids`, in request order).
    starts: Vec<usize>,
    positions: Vec<u32>,
    request: u64,
    deadline: Deadline,
    stats: FetchStats,
}

/// The rows of one checked reply.
enum ReplyRows {
    /// `rows * dim` little-endian f32s.
    Dense {
        bytes: Vec<u8>,
        dim: usize,
    },
    Sparse {
        offsets: Vec<usize>,
        cols: Vec<u32>,
        vals: Vec<f32>,
    },
}

impl ReplyRows {
    fn write_dense(&self, j: usize, out: &mut [f32]) {
        match self {
            ReplyRows::Dense { bytes, dim } => {
                bytemuck::cast_slice_mut::<f32, u8>(out).copy_from_slice(&bytes[4 + j * dim * 4..4 + (j + 1) * dim * 4])
            }
            ReplyRows::Sparse { offsets, cols, vals } => {
                let r = offsets[j]..offsets[j + 1];
                RowRef::Sparse { indices: &cols[r.clone()], values: &vals[r] }.write_dense(out)
            }
        }
    }

    fn push_row(&self, j: usize, out: &mut CsrRows, tmp: &mut Vec<f32>) {
        match self {
            ReplyRows::Dense { dim, .. } => {
                tmp.resize(*dim, 0.0);
                self.write_dense(j, tmp);
                out.push(RowRef::Dense(tmp));
            }
            ReplyRows::Sparse { offsets, cols, vals } => {
                let r = offsets[j]..offsets[j + 1];
                out.push(RowRef::Sparse { indices: &cols[r.clone()], values: &vals[r] })
            }
        }
    }
}

/// The rows of a reply, or why it is unusable.
fn check_reply(mesh: &Mesh, owner: usize, reply: Vec<u8>, rows: usize, d: usize) -> Result<ReplyRows, String> {
    let word = |i: usize| reply.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mismatch = |what: String| {
        format!("it answered {what} for {rows} rows of {d} features: do the workers use the same dataset?")
    };
    match word(0) {
        Some(OK) if reply.len() == 4 + rows * d * 4 => Ok(ReplyRows::Dense { bytes: reply, dim: d }),
        Some(OK) => Err(mismatch(format!("{} bytes", reply.len() - 4))),
        Some(OK_SPARSE) => {
            let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let body = &reply[4..];
            if body.len() < 4 * rows {
                return Err(mismatch(format!("{} bytes of sparse rows", body.len())));
            }
            let mut offsets = Vec::with_capacity(rows + 1);
            offsets.push(0usize);
            for c in body[..4 * rows].chunks_exact(4) {
                offsets.push(offsets[offsets.len() - 1].saturating_add(le(c) as usize));
            }
            let nnz = offsets[rows];
            if nnz.checked_mul(8).and_then(|b| b.checked_add(4 * rows)) != Some(body.len()) {
                return Err(mismatch(format!("{} bytes holding {nnz} sparse values", body.len())));
            }
            let cols: Vec<u32> = body[4 * rows..4 * rows + 4 * nnz].chunks_exact(4).map(le).collect();
            if let Some(c) = cols.iter().find(|&&c| c as usize >= d) {
                return Err(mismatch(format!("column {c}")));
            }
            let vals = body[4 * rows + 4 * nnz..].chunks_exact(4).map(|b| f32::from_bits(le(b))).collect();
            Ok(ReplyRows::Sparse { offsets, cols, vals })
        }
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
