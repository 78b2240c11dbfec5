//! GNNPipe's graph chunks and the rows a stage computes them from. The whole
//! graph is cut by METIS into C chunks; each chunk's block is its vertices'
//! in-edges, its own vertices first, then the in-neighbours outside it (a
//! `HaloPlan` with chunks in the place of workers). A stage keeps, for each
//! layer it owns, the input row of every vertex (`VertexRows`); a chunk's
//! layer reads its own rows (differentiable while training) and its halo's
//! from there: this epoch's rows for the chunks computed before it, the
//! previous epoch's (the history) for the others; while training the halo's
//! rows are a variable, so that their gradient can reach their own chunk.

use super::memory::{Limit, Shape};
use super::{HaloPlan, first_input};
use crate::gather::gather_rows;
use crate::model::{AggGraph, Input, Mode};
use crate::partition;
use crate::sample::Fanout;
use crate::train::{TrainConfig, TrainError, Worker};
use candle_core::{Device, Tensor, Var};
use std::ops::Range;
use std::sync::Arc;

pub(crate) struct Chunk {
    pub plan: HaloPlan,
    /// The aggregation graph of the chunk's block (every layer's: one block).
    pub graph: Arc<AggGraph>,
    /// Stage 0: the first layer's input rows of `plan.block.src`, normalised
    /// and cached as the full-graph engine caches them (features are constants).
    pub input: Option<Input>,
    /// Last stage: positions of the chunk's training vertices among its own
    /// rows, and their labels.
    pub train: Vec<u32>,
    pub labels: Vec<u32>,
}

impl Chunk {
    pub fn len(&self) -> usize {
        self.plan.owned().len()
    }

    /// Its vertices, halo and in-edges, as the memory checks count a share.
    pub fn shape(&self) -> Shape {
        let p = &self.plan;
        Shape {
            owned: p.owned().len() as u64,
            halo: p.halo().len() as u64,
            edges: p.block.num_edges() as u64,
            sparse_values: 0,
        }
    }
}

/// The chunks a GNNPipe run of `cfg` reads, `--chunks` above 1: where the
/// driver stores them (`partition::chunks`), cut once for every run.
pub fn stored_dir(data: &crate::DataDir, cfg: &TrainConfig) -> Option<std::path::PathBuf> {
    let chunks = cfg.gnnpipe.as_ref().map(|g| g.chunks).filter(|&c| c > 1)?;
    Some(crate::paths::chunks_dir(data, &cfg.dataset, chunks))
}

/// How the driver holds the chunks it cuts or reads (`ensure_stored`).
pub(crate) struct StoredCheck<'a> {
    /// What the memory check holds the stages to; a `limit.resume`d run is
    /// advised only what a resume can change.
    pub limit: Limit,
    /// The model's weights and the run's workers on this machine, whose
    /// stages are held to its memory over the chunks as cut
    /// (`memory::preflight_cut`); None: not held to it here (their hosts
    /// check their own as they start).
    pub memory: Option<(&'a crate::model::Params, usize)>,
}

/// The driver's part: the stored chunks of `ds` for a GNNPipe run of `cfg`
/// (None: one chunk, nothing stored), cut now when missing or stale, and
/// returned as stored, with the manifest's checksum that its workers compare. With
/// `check`, the chunks as cut or stored are held to the limits each stage's would
/// be (`check_cut`; `owners`, node -> worker, for --pipeline-groups) and
/// to this machine's memory before anything is written or started.
pub(crate) fn ensure_stored(
    data: &crate::DataDir,
    ds: &crate::format::DatasetFile,
    cfg: &TrainConfig,
    owners: Option<&[u16]>,
    check: Option<StoredCheck<'_>>,
) -> anyhow::Result<Option<(std::path::PathBuf, partition::chunks::Stored)>> {
    let Some(dir) = stored_dir(data, cfg) else { return Ok(None) };
    let g = cfg.gnnpipe.clone().unwrap_or_default();
    let spec = cfg.model_spec(ds);
    let groups = groups_of(cfg, owners);
    let (sparse_rows, _) = super::memory::sparse_input(ds, cfg, &spec);
    let mut accept = |of: &[u16], count: usize| -> anyhow::Result<()> {
        let Some(check) = &check else { return Ok(()) };
        let resume = check.limit.resume;
        let cut = check_cut(ds.graph(), sparse_rows, &spec, cfg.device, (of, count), groups.as_ref(), resume)?;
        if let (Some(cut), Some((params, local))) = (cut, check.memory) {
            super::memory::preflight_cut(ds, cfg, (&cut, count), &spec, params, local, check.limit)?;
        }
        Ok(())
    };
    let stored = partition::chunks::ensure(&dir, (&cfg.dataset, ds), g.chunks, cfg.seed, &mut accept)?;
    Ok(Some((dir, stored)))
}

/// The pipeline groups of a run of `cfg` whose workers own the vertices as
/// `owners` says (node -> worker): vertex -> group, and the groups; None
/// without --pipeline-groups.
pub(crate) fn groups_of(cfg: &TrainConfig, owners: Option<&[u16]>) -> Option<(Vec<u16>, usize)> {
    let g = cfg.gnnpipe.as_ref()?;
    owners.filter(|_| g.groups > 1).map(|o| {
        let stages = g.stages(cfg.workers) as u16;
        (o.iter().map(|&w| w / stages).collect::<Vec<u16>>(), g.groups)
    })
}

/// `cut_shapes` of the chunks `of` (`count`) a run of `cfg` on `ds` stored,
/// its workers owning the vertices as `owners` says: what a worker holds its
/// stages to, as its driver did (`ensure_stored`).
pub(crate) fn stored_shapes(
    ds: &crate::format::DatasetFile,
    cfg: &TrainConfig,
    spec: &crate::model::ModelSpec,
    owners: &[u16],
    (of, count): (&[u16], usize),
) -> Option<Vec<Shape>> {
    let (sparse_rows, _) = super::memory::sparse_input(ds, cfg, spec);
    cut_shapes(ds.graph(), sparse_rows, (of, count), groups_of(cfg, Some(owners)).as_ref())
}

/// The shapes of the chunks `of` (`count`) as the stages run them, by
/// chunk, halos included (`sparse_rows` as `memory::shapes` takes them):
/// with `groups` (vertex -> group, and the groups) their hybrid's, `count`
/// a group. None where the run refuses them itself (`gnnpipe::run`: more
/// hybrid chunks than a u16 numbers). A count per chunk, one pass over the
/// in-edges: no chunk's plan is built.
pub(crate) fn cut_shapes(
    graph: crate::graph::CsrView<'_>,
    sparse_rows: Option<&[u64]>,
    (of, count): (&[u16], usize),
    groups: Option<&(Vec<u16>, usize)>,
) -> Option<Vec<Shape>> {
    let (of, total) = match groups {
        Some((_, k)) if k * count > u16::MAX as usize => return None,
        Some((group_of, k)) => (std::borrow::Cow::Owned(hybrid(of, count, group_of)), k * count),
        None => (std::borrow::Cow::Borrowed(of), count),
    };
    Some(super::memory::shapes(graph, sparse_rows, Some(&of), total))
}

/// A worker's part: the stored chunks of `ds` in `dir` (the driver's, whose
/// manifest checksum was `driver_read`): vertex -> chunk and the count.
/// A worker never cuts: a missing, damaged or replaced file is refused, naming it.
pub fn read_stored(
    dir: &std::path::Path,
    ds: &crate::format::DatasetFile,
    chunks: usize,
    driver_read: Option<u64>,
) -> Result<(Vec<u16>, usize), crate::format::FormatError> {
    let m = crate::format::ManifestFile::open(dir)?;
    if let Some(c) = driver_read.filter(|&c| c != m.checksum()) {
        return Err(crate::format::FormatError::corrupt(
            m.path(),
            format!(
                "the GNNPipe chunks were replaced after this run's driver read them (checksum {:016x}, the \
                 driver's {c:016x}): another leapgnn process cut the dataset into as many chunks with another \
                 --seed meanwhile; run one after the other, or give runs sharing a dataset the same --seed",
                m.checksum()
            ),
        ));
    }
    let stored = partition::chunks::checked(m, ds, chunks)?;
    Ok((stored.of, stored.count))
}

/// The chunks of a hybrid run (`--pipeline-groups`): group h's are the
/// METIS chunks `of` (`count` of them) cut by the group boundaries
/// (`group_of`: vertex -> group), numbered h * count + c (some may be empty).
pub(crate) fn hybrid(of: &[u16], count: usize, group_of: &[u16]) -> Vec<u16> {
    of.iter().zip(group_of).map(|(&c, &h)| h * count as u16 + c).collect()
}

/// Refuses the chunks `of` (`count`), with `groups` (vertex -> group, and
/// the groups) their hybrid's, whose blocks a stage could not build: the
/// same checks in the same order, and so the same messages, as a worker
/// building them meets (`HaloPlan::derive`'s edges, then `check_cut_chunks`),
/// but on the driver, before any worker starts. Returns their shapes as
/// `cut_shapes` does (None: refused by the run itself, with its own message).
pub(crate) fn check_cut(
    graph: crate::graph::CsrView<'_>,
    sparse_rows: Option<&[u64]>,
    spec: &crate::model::ModelSpec,
    device: crate::train::DeviceKind,
    (of, count): (&[u16], usize),
    groups: Option<&(Vec<u16>, usize)>,
    resume: bool,
) -> Result<Option<Vec<Shape>>, crate::BadInput> {
    let loops = spec.adds_self_loops();
    let Some(cut) = cut_shapes(graph, sparse_rows, (of, count), groups) else { return Ok(None) };
    if let Some((group_of, k)) = groups {
        let shares = super::memory::shapes(graph, None, Some(group_of), *k);
        shares.iter().enumerate().try_for_each(|(h, s)| super::halo::check_share_edges(*s, (h, *k), loops))?;
    }
    let total = cut.len();
    cut.iter().enumerate().try_for_each(|(c, s)| super::halo::check_share_edges(*s, (c, total), loops))?;
    super::memory::check_cut_chunks(&cut, spec, device, resume)?;
    Ok(Some(cut))
}

/// Chunks `which` of `of` (`count` in all) for the stage whose first layer
/// is `first_layer`; `features`: cache the input rows (stage 0); `train`: the
/// training vertices whose loss the stage computes (the last stage's; those
/// outside `which` belong to another pipeline).
pub(crate) fn build(
    w: &Worker<'_>,
    (of, count): (&[u16], usize),
    which: Range<usize>,
    first_layer: usize,
    features: bool,
    train: &[u32],
) -> Result<Vec<Chunk>, TrainError> {
    let mut chunks = Vec::with_capacity(which.len());
    for c in which.clone() {
        let plan = HaloPlan::derive(w.graph, Some(of), (c, count), w.model.spec().adds_self_loops())?;
        let graph = Arc::new(w.model.layer_graph(first_layer, &plan.block, w.graph, Fanout::All));
        let input = if features { Some(feature_input(w, &plan.block.src)?) } else { None };
        chunks.push(Chunk { plan, graph, input, train: Vec::new(), labels: Vec::new() });
    }
    for &v in train.iter().filter(|&&v| which.contains(&(of[v as usize] as usize))) {
        let ch = &mut chunks[of[v as usize] as usize - which.start];
        let p = ch.plan.owned_position(v).expect("a vertex is one of its chunk's own rows");
        ch.train.push(p as u32);
        ch.labels.push(w.labels[v as usize] as u32);
    }
    Ok(chunks)
}

/// The first layer's rows of `ids`, read from the dataset the job shipped
/// (stage 0 computes every vertex, so it holds every feature row).
fn feature_input(w: &Worker<'_>, ids: &[u32]) -> Result<Input, TrainError> {
    let src = w.all_rows.ok_or_else(|| {
        TrainError::Rows(
            "gnnpipe's stage 0 reads every feature row from the dataset, which this worker has not open".into(),
        )
    })?;
    let mut rows = gather_rows(src, ids).map_err(|e| TrainError::Rows(e.to_string()))?;
    rows.normalize(src.dim(), w.norm);
    let rows = rows.sparse_if_mostly_zero(w.model.spec().in_dim);
    Ok(w.model.input_rows_of(ids, rows, Mode::Eval, &w.device)?)
}

/// One `d`-wide row per vertex, row-major by vertex id.
#[derive(Clone)]
pub(crate) struct VertexRows {
    pub d: usize,
    pub vals: Vec<f32>,
}

impl VertexRows {
    pub fn zeros(n: usize, d: usize) -> Self {
        VertexRows { d, vals: vec![0.0; n * d] }
    }

    /// The rows of `ids`, in that order.
    pub fn of(&self, ids: &[u32]) -> Vec<f32> {
        let d = self.d;
        let mut out = Vec::with_capacity(ids.len() * d);
        for &v in ids {
            out.extend_from_slice(&self.vals[v as usize * d..(v as usize + 1) * d]);
        }
        out
    }

    /// Sets the rows of `ids` from `rows` (`ids.len()` rows, in that order).
    pub fn write(&mut self, ids: &[u32], rows: &[f32]) {
        let d = self.d;
        for (&v, r) in ids.iter().zip(rows.chunks_exact(d.max(1))) {
            self.vals[v as usize * d..(v as usize + 1) * d].copy_from_slice(r);
        }
    }

    /// Adds `rows` (`ids.len()` rows, in that order) to the rows of `ids`.
    pub fn add(&mut self, ids: &[u32], rows: &[f32]) {
        let d = self.d;
        for (&v, r) in ids.iter().zip(rows.chunks_exact(d.max(1))) {
            self.vals[v as usize * d..(v as usize + 1) * d].iter_mut().zip(r).for_each(|(a, b)| *a += b);
        }
    }

    pub fn clear(&mut self) {
        self.vals.fill(0.0);
    }
}

pub(crate) fn flat(t: &Tensor) -> Result<Vec<f32>, TrainError> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// A layer's inputs on a chunk's tape: its own rows (None at layer 0, the
/// features) and, while training, its halo's rows as a variable, so that
/// the gradient reaching them can go on to the chunks computed before this one.
pub(crate) struct LayerInput {
    pub own: Option<Tensor>,
    pub halo: Option<Var>,
}

/// Layer `l` of chunk `ch`: at layer 0 from the cached features; above, from
/// the chunk's own rows (`own`, differentiable; None: read from `rows` too)
/// and its halo's rows in `rows` (a variable when `track`).
fn layer(
    w: &Worker<'_>,
    ch: &Chunk,
    l: usize,
    own: Option<Tensor>,
    rows: &VertexRows,
    mode: Mode,
    track: bool,
) -> Result<(Tensor, LayerInput), TrainError> {
    let ids = (&ch.plan.block.src[..], ch.plan.owned());
    if l == 0 {
        let x = ch.input.as_ref().expect("stage 0 caches its chunks' features");
        let x = first_input(w, &ch.plan.block.src, x, mode)?;
        let y = w.model.layer_forward_input(0, &x, &ch.graph, ids, mode)?;
        return Ok((y, LayerInput { own: None, halo: None }));
    }
    let dev: &Device = &w.device;
    let own = match own {
        Some(t) => t,
        None => Tensor::from_vec(rows.of(ch.plan.owned()), (ch.len(), rows.d), dev)?,
    };
    let halo = ch.plan.halo();
    let (x, var) = if halo.is_empty() {
        (own.clone(), None)
    } else {
        let shape = (halo.len(), rows.d);
        let (t, var) = if track {
            let v = Var::from_vec(rows.of(halo), shape, dev)?;
            (v.as_tensor().clone(), Some(v))
        } else {
            (Tensor::from_vec(rows.of(halo), shape, dev)?, None)
        };
        (Tensor::cat(&[&own, &t], 0)?, var)
    };
    let y = w.model.layer_forward(l, &x, &ch.graph, ids, mode)?;
    Ok((y, LayerInput { own: Some(own), halo: var }))
}

/// Training: the stage's `layers` on chunk `ch`, the first from `first` (the
/// rows received from the previous stage; None at layer 0). Each layer's
/// output rows go to the next layer's buffer (`bufs[l - layers.start]` holds
/// layer l's input rows) for the chunks after this one and the next epoch.
/// Returns the last layer's output, attached to the autograd graph, and
/// each layer's inputs.
pub(crate) fn forward(
    w: &Worker<'_>,
    ch: &Chunk,
    layers: Range<usize>,
    first: Option<Tensor>,
    bufs: &mut [VertexRows],
    mode: Mode,
) -> Result<(Tensor, Vec<LayerInput>), TrainError> {
    let mut live = first;
    let mut inputs = Vec::with_capacity(layers.len());
    for l in layers.clone() {
        let (y, input) = layer(w, ch, l, live.take(), &bufs[l - layers.start], mode, true)?;
        if l + 1 < layers.end {
            bufs[l + 1 - layers.start].write(ch.plan.owned(), &flat(&y)?);
        }
        inputs.push(input);
        live = Some(y);
    }
    Ok((live.expect("a stage owns at least one layer"), inputs))
}

/// Evaluation: the stage's `layers` for every vertex, layer by layer (every
/// row this pass's own: no history), from `x`, the first layer's input rows
/// (unused at layer 0). Returns the last layer's output rows.
pub(crate) fn infer(
    w: &Worker<'_>,
    chunks: &[Chunk],
    layers: Range<usize>,
    mut x: VertexRows,
) -> Result<VertexRows, TrainError> {
    let n = w.graph.num_nodes();
    for l in layers {
        let mut y = VertexRows::zeros(n, w.model.out_dim(l));
        for ch in chunks {
            y.write(ch.plan.owned(), &flat(&layer(w, ch, l, None, &x, Mode::Eval, false)?.0)?);
        }
        x = y;
    }
    Ok(x)
}
