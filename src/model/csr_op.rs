//! Sparse aggregation over sampled blocks. candle has no sparse type, so the
//! fast path is a set of custom ops over `AggGraph` (rayon over rows, backward
//! through the transposed CSR); `Kernel::Reference` computes the same with
//! index_select + index_add, candle's own differentiable ops (never
//! scatter_add: its backward is broken for this shape), so tests can hold the
//! fast path to it; `Kernel::Rows` is the reference's formulas over
//! `row_ops`, whose CUDA kernels make it the path off the CPU.

use super::AggGraph;
use super::row_ops::{self, End, f32s, segment_max};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// Which implementation of an aggregation to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The CPU custom ops.
    Fast,
    /// candle's own ops: what the fast path is held to.
    Reference,
    /// The reference's formulas over `row_ops` (gather, segment sum, segment
    /// max), which have CUDA kernels: the path off the CPU.
    Rows,
}

impl Kernel {
    /// The fastest path on `dev`.
    pub fn for_device(dev: &candle_core::Device) -> Self {
        if dev.is_cpu() { Kernel::Fast } else { Kernel::Rows }
    }
}

/// How a destination combines its sources' rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Weighted by the graph's edge weights (a mean with `with_mean_weights`), or summed.
    Sum,
    /// Element-wise max; 0 for a destination without edges.
    Max,
}

/// Most per-edge values (edges x row width) one `Kernel::Rows` sum holds at
/// once; a larger graph is summed a slice of destinations at a time. candle's
/// CUDA element-wise kernels count elements in a u32, so the 6.2G values of a
/// full-graph layer over synthetic-products (62M edges x 100) never finished,
/// and all edges' messages at once would hold that many floats twice (50 GB).
pub(crate) const ROWS_SLICE_VALUES: usize = 1 << 26;

/// `f(slice, its edges)` over consecutive slices of `g`'s destinations with
/// at most `limit / width` edges each (or one destination), stacked: each
/// destination's sum reads its own edges only, so the slices' rows are the
/// whole graph's.
fn by_dst_slices(
    g: &AggGraph,
    width: usize,
    limit: usize,
    mut f: impl FnMut(&Arc<AggGraph>, std::ops::Range<usize>) -> Result<Tensor>,
) -> Result<Tensor> {
    let per = (limit / width.max(1)).max(1) as u64;
    let indptr = g.indptr();
    let mut parts = Vec::new();
    let mut start = 0;
    while start < g.num_dst() {
        let cap = u64::from(indptr[start]) + per;
        let fit = indptr[start + 1..].partition_point(|&p| u64::from(p) <= cap);
        let end = start + fit.max(1);
        let edges = indptr[start] as usize..indptr[end] as usize;
        parts.push(f(&Arc::new(g.dst_slice(start..end)), edges)?);
        start = end;
    }
    Tensor::cat(&parts, 0)
}

/// `f(g, all its edges)`, or under `Kernel::Rows`, when `g`'s per-edge values
/// (edges x `width`) exceed `limit`, `f` over slices of its destinations
/// (`by_dst_slices`): exact for any `f` whose rows each read only their own
/// destination's edges (sums, and softmaxes over a destination's edges).
pub(crate) fn rows_within(
    g: &Arc<AggGraph>,
    width: usize,
    k: Kernel,
    limit: usize,
    mut f: impl FnMut(&Arc<AggGraph>, std::ops::Range<usize>) -> Result<Tensor>,
) -> Result<Tensor> {
    if k == Kernel::Rows && g.num_dst() > 1 && g.num_edges().saturating_mul(width) > limit {
        by_dst_slices(g, width, limit, f)
    } else {
        f(g, 0..g.num_edges())
    }
}

/// out[d] = sum over d's edges e of w_e * x[src_e] (w_e = the graph's weights, or 1).
pub fn weighted_sum(x: &Tensor, g: &Arc<AggGraph>, k: Kernel) -> Result<Tensor> {
    weighted_sum_within(x, g, k, ROWS_SLICE_VALUES)
}

/// `weighted_sum`, `Kernel::Rows` holding at most `limit` per-edge values at once.
fn weighted_sum_within(x: &Tensor, g: &Arc<AggGraph>, k: Kernel, limit: usize) -> Result<Tensor> {
    match k {
        Kernel::Fast => x.contiguous()?.apply_op1(Agg { g: g.clone(), reduce: Reduce::Sum, with_self: false }),
        Kernel::Reference | Kernel::Rows => rows_within(g, x.dim(1)?, k, limit, |g, _| {
            let mut msgs = select_edges(x, g, End::Src, k)?;
            if let Some(w) = g.weights() {
                msgs = msgs.broadcast_mul(&Tensor::from_slice(w, (w.len(), 1), x.device())?)?;
            }
            scatter_rows(&msgs, g, k)
        }),
    }
}

/// Sums a per-edge tensor `[E, k]` into its destinations: `[num_dst, k]`.
pub fn edge_sum(vals: &Tensor, g: &Arc<AggGraph>, k: Kernel) -> Result<Tensor> {
    weighted_sum(vals, g.edge_rows(), k)
}

/// Multi-head edge-weighted sum: `x` is `[num_src, heads * f]`, `w` is `[E, heads]`;
/// out[d, h*f..(h+1)*f] = sum over d's edges e of w[e, h] * x[src_e, h*f..(h+1)*f].
/// Differentiable in both `x` and `w` (attention).
pub fn edge_weighted_sum(x: &Tensor, w: &Tensor, g: &Arc<AggGraph>, k: Kernel) -> Result<Tensor> {
    edge_weighted_sum_within(x, w, g, k, ROWS_SLICE_VALUES)
}

/// `edge_weighted_sum`, `Kernel::Rows` holding at most `limit` per-edge values at once.
fn edge_weighted_sum_within(x: &Tensor, w: &Tensor, g: &Arc<AggGraph>, k: Kernel, limit: usize) -> Result<Tensor> {
    let (e, heads) = w.dims2()?;
    let (_, dim) = x.dims2()?;
    if e != g.num_edges() || heads == 0 || !dim.is_multiple_of(heads) {
        candle_core::bail!("edge weights {:?} do not fit {} edges and {dim} columns", w.dims(), g.num_edges());
    }
    match k {
        Kernel::Fast => x.contiguous()?.apply_op2(&w.contiguous()?, EdgeSpmm { g: g.clone(), heads, transpose: false }),
        Kernel::Reference | Kernel::Rows => rows_within(g, dim, k, limit, |g, edges| {
            let (e, w) = (edges.len(), w.narrow(0, edges.start, edges.len())?);
            let msgs = select_edges(x, g, End::Src, k)?.reshape((e, heads, dim / heads))?;
            let msgs = msgs.broadcast_mul(&w.reshape((e, heads, 1))?)?.reshape((e, dim))?;
            scatter_rows(&msgs, g, k)
        }),
    }
}

/// `[reduce(sources of d) | x[d]]` for each destination d: `[num_dst, 2 * width]`,
/// GraphSAGE's neighbour aggregate and self row side by side, so one matmul
/// with `[W_l | W_r]` applies both of its linear maps (one op, one backward).
pub fn aggregate_with_self(x: &Tensor, g: &Arc<AggGraph>, reduce: Reduce, k: Kernel) -> Result<Tensor> {
    match k {
        Kernel::Fast => x.contiguous()?.apply_op1(Agg { g: g.clone(), reduce, with_self: true }),
        Kernel::Reference | Kernel::Rows => {
            let agg = match reduce {
                Reduce::Sum => weighted_sum(x, g, k)?,
                Reduce::Max => max(x, g, k)?,
            };
            Tensor::cat(&[&agg, &x.narrow(0, 0, g.num_dst())?], 1)
        }
    }
}

/// Element-wise max over each destination's sources; 0 for a destination without edges.
pub fn max(x: &Tensor, g: &Arc<AggGraph>, k: Kernel) -> Result<Tensor> {
    match k {
        Kernel::Fast => x.contiguous()?.apply_op1(Agg { g: g.clone(), reduce: Reduce::Max, with_self: false }),
        Kernel::Rows => segment_max(x, g),
        Kernel::Reference => {
            // Pad every row to the maximum degree with a row of -1e30 (never the max
            // of a non-empty row), reduce over the padded axis, zero empty rows.
            let (n_src, dim) = x.dims2()?;
            let width = g.max_degree().max(1);
            let mut idx = Vec::with_capacity(g.num_dst() * width);
            let mut nonempty = Vec::with_capacity(g.num_dst());
            for d in 0..g.num_dst() {
                let row = g.row(d);
                idx.extend_from_slice(row);
                idx.extend(std::iter::repeat_n(n_src as u32, width - row.len()));
                nonempty.push(if row.is_empty() { 0f32 } else { 1.0 });
            }
            let pad = Tensor::full(-1e30f32, (1, dim), x.device())?;
            let xp = Tensor::cat(&[x, &pad], 0)?;
            let m = xp.index_select(&index(&idx, x)?, 0)?.reshape((g.num_dst(), width, dim))?.max(1)?;
            m.broadcast_mul(&Tensor::from_vec(nonempty, (g.num_dst(), 1), x.device())?)
        }
    }
}

/// For each edge, the max over its destination's edges of `e` (`[E, width]`,
/// row-major), column by column: the constant that stabilises an edge softmax.
pub fn per_row_max(g: &AggGraph, e: &[f32], width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(e.len());
    let indptr = g.indptr();
    let mut m = vec![f32::NEG_INFINITY; width];
    for d in 0..g.num_dst() {
        let rows = &e[indptr[d] as usize * width..indptr[d + 1] as usize * width];
        m.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
        for row in rows.chunks_exact(width.max(1)) {
            m.iter_mut().zip(row).for_each(|(mh, &v)| *mh = mh.max(v));
        }
        for _ in 0..rows.len() / width.max(1) {
            out.extend_from_slice(&m);
        }
    }
    out
}

fn index(ids: &[u32], like: &Tensor) -> Result<Tensor> {
    Tensor::from_slice(ids, ids.len(), like.device())
}

/// Reference reduction of per-edge rows into destinations.
/// `x[ids]` along dim 0 (`x` of rank 1 or 2), differentiable: candle's
/// index_select, or under `Kernel::Rows` the gather op.
pub fn select(x: &Tensor, ids: &[u32], k: Kernel) -> Result<Tensor> {
    match k {
        Kernel::Rows => row_ops::gather_any_rank(x, ids),
        _ => x.index_select(&index(ids, x)?, 0),
    }
}

/// `select` by the fastest path on x's device.
pub fn select_rows(x: &Tensor, ids: &[u32]) -> Result<Tensor> {
    select(x, ids, Kernel::for_device(x.device()))
}

/// One row per edge of `g`, read at its `end`: `select` by the edge list.
pub fn select_edges(x: &Tensor, g: &Arc<AggGraph>, end: End, k: Kernel) -> Result<Tensor> {
    match (k, end) {
        (Kernel::Rows, _) => row_ops::gather_edges(x, g, end),
        (_, End::Src) => select(x, g.edge_src(), k),
        (_, End::Dst) => select(x, g.edge_dst(), k),
    }
}

/// Edges are sorted by destination, so under `Kernel::Rows` this is a segment sum.
fn scatter_rows(msgs: &Tensor, g: &Arc<AggGraph>, k: Kernel) -> Result<Tensor> {
    if k == Kernel::Rows {
        return row_ops::sum_into_dst(msgs, g);
    }
    let zeros = Tensor::zeros((g.num_dst(), msgs.dim(1)?), DType::F32, msgs.device())?;
    zeros.index_add(&index(g.edge_dst(), msgs)?, msgs, 0)
}

// ---------------------------------------------------------------- kernels

/// One direction of the graph: rows, their neighbours and (transposed) edge ids.
#[derive(Clone, Copy)]
struct Rows<'a> {
    indptr: &'a [u32],
    nbr: &'a [u32],
    eid: Option<&'a [u32]>,
}

impl<'a> Rows<'a> {
    fn of(g: &'a AggGraph, transpose: bool) -> Self {
        if transpose {
            let t = g.transposed();
            Rows { indptr: &t.indptr, nbr: &t.dst, eid: Some(&t.eid) }
        } else {
            Rows { indptr: g.indptr(), nbr: g.edge_src(), eid: None }
        }
    }
    fn len(&self) -> usize {
        self.indptr.len() - 1
    }
    /// (neighbour, edge id) pairs of row `r`.
    #[inline]
    fn edges(&self, r: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        (self.indptr[r] as usize..self.indptr[r + 1] as usize)
            .map(|e| (self.nbr[e] as usize, self.eid.map_or(e, |m| m[e] as usize)))
    }
}

/// Below this many output values a kernel runs on the calling thread.
const PAR_MIN_VALUES: usize = 1 << 15;

/// Runs `f(row, out_row)` over the `dim`-wide rows of `out`, in parallel when large.
fn for_rows(out: &mut [f32], dim: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if dim == 0 {
        return;
    }
    if out.len() < PAR_MIN_VALUES {
        out.chunks_mut(dim).enumerate().for_each(|(r, o)| f(r, o));
    } else {
        out.par_chunks_mut(dim).enumerate().with_min_len(16).for_each(|(r, o)| f(r, o));
    }
}

#[inline]
fn axpy(out: &mut [f32], a: f32, x: &[f32]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o += a * v;
    }
}

/// Rows of `width` values, `stride` apart, in `data` (a column block of a wider matrix).
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    stride: usize,
    width: usize,
}

impl<'a> View<'a> {
    fn full(data: &'a [f32], width: usize) -> Self {
        View { data, stride: width, width }
    }
    #[inline]
    fn row(&self, r: usize) -> &'a [f32] {
        &self.data[r * self.stride..r * self.stride + self.width]
    }
}

/// o += sum over r's edges of w[eid, h] * x[nbr] per head block (w = None means 1).
#[inline]
fn sum_row(rows: Rows<'_>, w: Option<&[f32]>, heads: usize, x: View<'_>, r: usize, o: &mut [f32]) {
    let hd = x.width / heads;
    for (s, e) in rows.edges(r) {
        let xs = x.row(s);
        match w {
            None => o.iter_mut().zip(xs).for_each(|(a, b)| *a += b),
            Some(w) if heads == 1 => axpy(o, w[e], xs),
            Some(w) => {
                for h in 0..heads {
                    axpy(&mut o[h * hd..(h + 1) * hd], w[e * heads + h], &xs[h * hd..(h + 1) * hd]);
                }
            }
        }
    }
}

/// o = element-wise max over d's sources (left as is, zero, when d has none).
#[inline]
fn max_row(g: &AggGraph, x: View<'_>, d: usize, o: &mut [f32]) {
    if let Some((&first, rest)) = g.row(d).split_first() {
        o.copy_from_slice(x.row(first as usize));
        for &s in rest {
            o.iter_mut().zip(x.row(s as usize)).for_each(|(a, &b)| *a = a.max(b));
        }
    }
}

/// out[r] = sum over r's edges of w[eid, h] * x[nbr] per head block.
fn spmm(rows: Rows<'_>, w: Option<&[f32]>, heads: usize, x: &[f32], dim: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows.len() * dim];
    for_rows(&mut out, dim, |r, o| sum_row(rows, w, heads, View::full(x, dim), r, o));
    out
}

/// For each edge e = (d, s): out[e, h] = <a[d, head h], b[s, head h]>.
fn sddmm(g: &AggGraph, heads: usize, a: &[f32], b: &[f32], dim: usize) -> Vec<f32> {
    let (dst, src) = (g.edge_dst(), g.edge_src());
    let hd = dim / heads;
    let mut out = vec![0f32; g.num_edges() * heads];
    for_rows(&mut out, heads, |e, o| {
        let (d, s) = (dst[e] as usize, src[e] as usize);
        for (h, oh) in o.iter_mut().enumerate() {
            let ar = &a[d * dim + h * hd..d * dim + (h + 1) * hd];
            let br = &b[s * dim + h * hd..s * dim + (h + 1) * hd];
            *oh = ar.iter().zip(br).map(|(p, q)| p * q).sum();
        }
    });
    out
}

/// Index of the source that wins each (destination, column) max: the first one on ties.
fn argmax(g: &AggGraph, x: View<'_>) -> Vec<u32> {
    let dim = x.width;
    let mut arg = vec![0u32; g.num_dst() * dim];
    if dim > 0 {
        // The winning values ride in a scratch row (one per rayon task) so a
        // comparison reads no other source's row; the selects vectorise.
        arg.par_chunks_mut(dim).enumerate().with_min_len(64).for_each_init(
            || vec![0f32; dim],
            |best, (d, o)| {
                let Some((&first, rest)) = g.row(d).split_first() else { return };
                o.fill(first);
                best.copy_from_slice(x.row(first as usize));
                for &s in rest {
                    for ((&v, b), a) in x.row(s as usize).iter().zip(best.iter_mut()).zip(o.iter_mut()) {
                        let wins = v > *b;
                        *b = if wins { v } else { *b };
                        *a = if wins { s } else { *a };
                    }
                }
            },
        );
    }
    arg
}

// --------------------------------------------------------------- custom ops

/// Checks `l` is `[rows, _]` and returns the row width.
fn width(l: &Layout, rows: usize, op: &str) -> Result<usize> {
    match l.dims() {
        &[r, d] if r == rows => Ok(d),
        dims => candle_core::bail!("{op}: input is {dims:?}, expected {rows} rows"),
    }
}

/// Aggregation with constant weights (or max), optionally followed by each
/// destination's own row; backward through the transposed CSR.
struct Agg {
    g: Arc<AggGraph>,
    reduce: Reduce,
    with_self: bool,
}

impl Agg {
    fn out_width(&self, d: usize) -> usize {
        if self.with_self { 2 * d } else { d }
    }
}

impl CustomOp1 for Agg {
    fn name(&self) -> &'static str {
        "csr-aggregate"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let d = width(l, self.g.num_src(), self.name())?;
        let x = View::full(f32s(s, l, self.name())?, d);
        let w = self.out_width(d);
        let rows = Rows::of(&self.g, false);
        let mut out = vec![0f32; self.g.num_dst() * w];
        for_rows(&mut out, w, |r, o| {
            let (agg, own) = o.split_at_mut(d);
            match self.reduce {
                Reduce::Sum => sum_row(rows, self.g.weights(), 1, x, r, agg),
                Reduce::Max => max_row(&self.g, x, r, agg),
            }
            if self.with_self {
                own.copy_from_slice(x.row(r));
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((self.g.num_dst(), w))))
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let op = AggBwd { g: self.g.clone(), reduce: self.reduce, with_self: self.with_self };
        Ok(Some(x.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &op)?))
    }
}

/// (x, grad of `Agg`'s output) -> grad of x.
struct AggBwd {
    g: Arc<AggGraph>,
    reduce: Reduce,
    with_self: bool,
}

impl CustomOp2 for AggBwd {
    fn name(&self) -> &'static str {
        "csr-aggregate-backward"
    }
    fn cpu_fwd(&self, sx: &CpuStorage, lx: &Layout, sg: &CpuStorage, lg: &Layout) -> Result<(CpuStorage, Shape)> {
        let (n_src, n_dst) = (self.g.num_src(), self.g.num_dst());
        let d = width(lx, n_src, self.name())?;
        let w = width(lg, n_dst, self.name())?;
        if w != if self.with_self { 2 * d } else { d } {
            candle_core::bail!("{}: gradient width {w} does not fit input width {d}", self.name());
        }
        let grad = f32s(sg, lg, self.name())?;
        let g_agg = View { data: grad, stride: w, width: d };
        let t = Rows::of(&self.g, true);
        let arg = match self.reduce {
            Reduce::Max => argmax(&self.g, View::full(f32s(sx, lx, self.name())?, d)),
            Reduce::Sum => Vec::new(),
        };
        let mut out = vec![0f32; n_src * d];
        for_rows(&mut out, d, |s, o| {
            match self.reduce {
                Reduce::Sum => sum_row(t, self.g.weights(), 1, g_agg, s, o),
                Reduce::Max => {
                    // Adding +0.0 where s lost changes no sum (o is never -0.0:
                    // it starts at +0.0), and the select vectorises.
                    let me = s as u32;
                    for (dst, _) in t.edges(s) {
                        let won = &arg[dst * d..(dst + 1) * d];
                        for ((o, &a), &gv) in o.iter_mut().zip(won).zip(g_agg.row(dst)) {
                            *o += if a == me { gv } else { 0.0 };
                        }
                    }
                }
            }
            if self.with_self && s < n_dst {
                o.iter_mut().zip(&grad[s * w + d..(s + 1) * w]).for_each(|(a, b)| *a += b);
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((n_src, d))))
    }
}

/// (rows read, rows written) of an op over `g` in the given direction.
fn direction(g: &AggGraph, transpose: bool) -> (usize, usize) {
    if transpose { (g.num_dst(), g.num_src()) } else { (g.num_src(), g.num_dst()) }
}

/// Multi-head sum weighted by a tensor of per-edge weights.
struct EdgeSpmm {
    g: Arc<AggGraph>,
    heads: usize,
    transpose: bool,
}

impl CustomOp2 for EdgeSpmm {
    fn name(&self) -> &'static str {
        "csr-edge-weighted-sum"
    }
    fn cpu_fwd(&self, sx: &CpuStorage, lx: &Layout, sw: &CpuStorage, lw: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows_in, rows_out) = direction(&self.g, self.transpose);
        let dim = width(lx, rows_in, self.name())?;
        width(lw, self.g.num_edges(), self.name())?;
        let w = f32s(sw, lw, self.name())?;
        let out = spmm(Rows::of(&self.g, self.transpose), Some(w), self.heads, f32s(sx, lx, self.name())?, dim);
        Ok((CpuStorage::F32(out), Shape::from((rows_out, dim))))
    }
    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let back = EdgeSpmm { g: self.g.clone(), heads: self.heads, transpose: !self.transpose };
        let dx = grad.apply_op2_no_bwd(w, &back)?;
        // dw[e, h] = <grad[out row of e], x[in row of e]> over head h's columns.
        let dw = if self.transpose {
            x.apply_op2_no_bwd(&grad, &Sddmm { g: self.g.clone(), heads: self.heads })?
        } else {
            grad.apply_op2_no_bwd(x, &Sddmm { g: self.g.clone(), heads: self.heads })?
        };
        Ok((Some(dx), Some(dw)))
    }
}

/// (destination-side rows, source-side rows) -> per-edge, per-head dot products.
struct Sddmm {
    g: Arc<AggGraph>,
    heads: usize,
}

impl CustomOp2 for Sddmm {
    fn name(&self) -> &'static str {
        "csr-sddmm"
    }
    fn cpu_fwd(&self, sa: &CpuStorage, la: &Layout, sb: &CpuStorage, lb: &Layout) -> Result<(CpuStorage, Shape)> {
        let dim = width(la, self.g.num_dst(), self.name())?;
        if width(lb, self.g.num_src(), self.name())? != dim {
            candle_core::bail!("{}: operands differ in width", self.name());
        }
        let out = sddmm(&self.g, self.heads, f32s(sa, la, self.name())?, f32s(sb, lb, self.name())?, dim);
        Ok((CpuStorage::F32(out), Shape::from((self.g.num_edges(), self.heads))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::rng::hash_of;
    use candle_core::{Device, Var};

    /// 40 destinations over 90 sources, degrees 0..=9, no duplicate edges.
    fn graph(weighted: bool) -> Arc<AggGraph> {
        let (nd, ns) = (40usize, 90usize);
        let mut indptr = vec![0u32];
        let mut indices = Vec::new();
        for d in 0..nd {
            let deg = d % 10;
            let mut row: Vec<u32> = (0..deg).map(|j| ((d * 7 + j * 11) % ns) as u32).collect();
            row.sort_unstable();
            row.dedup();
            indices.extend(row);
            indptr.push(indices.len() as u32);
        }
        let g = AggGraph::new(nd, ns, indptr, indices, None);
        Arc::new(if weighted { g.with_weights(|d, s| 0.1 + ((d * 3 + s) % 7) as f32 * 0.2) } else { g })
    }

    /// Distinct values spaced 0.01 apart in a seeded order (so a max never ties
    /// and finite differences never flip it).
    fn distinct(rows: usize, cols: usize, seed: u64) -> Tensor {
        let n = rows * cols;
        let mut v: Vec<(u64, usize)> = (0..n).map(|i| (hash_of(seed, &[i as u64]), i)).collect();
        v.sort_unstable();
        let mut vals = vec![0f32; n];
        for (rank, &(_, i)) in v.iter().enumerate() {
            vals[i] = (rank as f32 - n as f32 / 2.0) * 0.01;
        }
        Tensor::from_vec(vals, (rows, cols), &Device::Cpu).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        let (a, b) =
            (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())), "element {i}: {x} vs {y}");
        }
    }

    /// `f`'s output on `inputs` and the gradients of every input (of the output
    /// weighted by a fixed probe).
    fn with_grads(inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> (Tensor, Vec<Tensor>) {
        let vars: Vec<Var> = inputs.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let out = f(&ts).unwrap();
        let probe = distinct(out.dim(0).unwrap(), out.dim(1).unwrap(), 99);
        let grads = (&out * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let gs: Vec<Tensor> = ts.iter().map(|t| grads.get(t).unwrap().clone()).collect();
        (out, gs)
    }

    /// Forward values and gradients (w.r.t. every input) of `f` on both kernels agree.
    fn agree(inputs: &[Tensor], f: impl Fn(&[Tensor], Kernel) -> Result<Tensor>) {
        let run = |k: Kernel| with_grads(inputs, |ts| f(ts, k));
        let (of, gf) = run(Kernel::Fast);
        for k in [Kernel::Reference, Kernel::Rows] {
            let (or, gr) = run(k);
            close(&of, &or, 1e-5);
            for (a, b) in gf.iter().zip(&gr) {
                close(a, b, 1e-5);
            }
        }
    }

    /// Analytic gradients of the fast kernel match central finite differences.
    fn finite_differences(inputs: &[Tensor], f: impl Fn(&[Tensor], Kernel) -> Result<Tensor>) {
        let loss_of = |ts: &[Tensor]| -> (Tensor, f32) {
            let out = f(ts, Kernel::Fast).unwrap();
            let probe = distinct(out.dim(0).unwrap(), out.dim(1).unwrap(), 99);
            let l = (&out * &probe).unwrap().sum_all().unwrap();
            let v = l.to_scalar::<f32>().unwrap();
            (l, v)
        };
        let vars: Vec<Var> = inputs.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let grads = loss_of(&ts).0.backward().unwrap();
        let eps = 1e-3f32;
        for (which, t) in inputs.iter().enumerate() {
            let analytic = grads.get(&ts[which]).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let base = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for i in (0..base.len()).step_by(7) {
                let at = |delta: f32| {
                    let mut v = base.clone();
                    v[i] += delta;
                    let mut args = inputs.to_vec();
                    args[which] = Tensor::from_vec(v, t.shape(), &Device::Cpu).unwrap();
                    loss_of(&args).1
                };
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                assert!(
                    (numeric - analytic[i]).abs() < 2e-2 * (1.0 + analytic[i].abs()),
                    "input {which} element {i}: finite difference {numeric} vs backward {}",
                    analytic[i]
                );
            }
        }
    }

    #[test]
    fn weighted_sum_matches_reference_and_finite_differences() {
        for weighted in [false, true] {
            let g = graph(weighted);
            let x = distinct(g.num_src(), 5, 1);
            agree(std::slice::from_ref(&x), |t, k| weighted_sum(&t[0], &g, k));
            finite_differences(&[x], |t, k| weighted_sum(&t[0], &g, k));
        }
    }

    #[test]
    fn edge_sum_and_edge_weighted_sum_match_reference_and_finite_differences() {
        let g = graph(false);
        let heads = 3;
        let x = distinct(g.num_src(), heads * 2, 2);
        let w = distinct(g.num_edges(), heads, 3);
        agree(&[x.clone(), w.clone()], |t, k| edge_weighted_sum(&t[0], &t[1], &g, k));
        finite_differences(&[x, w.clone()], |t, k| edge_weighted_sum(&t[0], &t[1], &g, k));
        agree(std::slice::from_ref(&w), |t, k| edge_sum(&t[0], &g, k));
    }

    #[test]
    fn max_matches_reference_and_finite_differences() {
        let g = graph(false);
        let x = distinct(g.num_src(), 6, 4);
        agree(std::slice::from_ref(&x), |t, k| max(&t[0], &g, k));
        finite_differences(&[x], |t, k| max(&t[0], &g, k));
        // A destination without edges aggregates to 0.
        let out = max(&distinct(g.num_src(), 6, 4), &g, Kernel::Fast).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(out[0], vec![0.0; 6]);
    }

    #[test]
    fn aggregate_with_self_matches_reference_and_finite_differences() {
        for (reduce, weighted) in [(Reduce::Sum, true), (Reduce::Max, false)] {
            let g = graph(weighted);
            let x = distinct(g.num_src(), 4, 6);
            agree(std::slice::from_ref(&x), |t, k| aggregate_with_self(&t[0], &g, reduce, k));
            finite_differences(&[x], |t, k| aggregate_with_self(&t[0], &g, reduce, k));
        }
    }

    /// Values and gradients of `f` run with `limit` and without any.
    fn sliced_and_whole(inputs: &[Tensor], limit: usize, f: impl Fn(&[Tensor], usize) -> Result<Tensor>) {
        let (whole, gw) = with_grads(inputs, |ts| f(ts, usize::MAX));
        let (sliced, gs) = with_grads(inputs, |ts| f(ts, limit));
        // Each destination sums the same edges in the same order.
        assert_eq!(sliced.to_vec2::<f32>().unwrap(), whole.to_vec2::<f32>().unwrap());
        // A source's gradient adds its slices' partial sums: the same terms, grouped.
        for (a, b) in gs.iter().zip(&gw) {
            close(a, b, 1e-6);
        }
    }

    #[test]
    fn rows_sums_over_slices_of_destinations_equal_the_whole_graph_sums() {
        let g = graph(true);
        // 12 values of width 5: two edges a slice, or one destination of more.
        let mut slices = Vec::new();
        let parts = by_dst_slices(&g, 5, 12, |part, edges| {
            assert!(part.num_edges() <= 2 || part.num_dst() == 1, "{edges:?}");
            assert_eq!(part.edge_src(), &g.edge_src()[edges.clone()]);
            assert_eq!(part.weights(), g.weights().map(|w| &w[edges.clone()]));
            slices.push(edges);
            Tensor::zeros((part.num_dst(), 1), DType::F32, &Device::Cpu)
        })
        .unwrap();
        assert_eq!(parts.dim(0).unwrap(), g.num_dst());
        assert!(slices.len() > 10, "{} slices", slices.len());
        assert!(slices.windows(2).all(|p| p[0].end == p[1].start), "{slices:?}");
        assert_eq!((slices[0].start, slices.last().unwrap().end), (0, g.num_edges()));

        for weighted in [false, true] {
            let g = graph(weighted);
            let x = distinct(g.num_src(), 5, 7);
            sliced_and_whole(&[x], 12, |t, limit| weighted_sum_within(&t[0], &g, Kernel::Rows, limit));
        }
        let g = graph(false);
        let (x, w) = (distinct(g.num_src(), 6, 8), distinct(g.num_edges(), 3, 9));
        sliced_and_whole(&[x, w], 12, |t, limit| edge_weighted_sum_within(&t[0], &t[1], &g, Kernel::Rows, limit));
    }

    #[test]
    fn large_inputs_take_the_parallel_path_and_agree() {
        let n = 3000usize;
        let indptr: Vec<u32> = (0..=n as u32).map(|d| d * 8).collect();
        let indices: Vec<u32> = (0..n * 8).map(|e| ((e * 7919) % n) as u32).collect();
        let g = Arc::new(AggGraph::new(n, n, indptr, indices, None).with_mean_weights());
        let x = distinct(n, 32, 5);
        agree(std::slice::from_ref(&x), |t, k| weighted_sum(&t[0], &g, k));
        agree(std::slice::from_ref(&x), |t, k| aggregate_with_self(&t[0], &g, Reduce::Max, k));
    }
}
