//! A RETEXO stage's gradient, summed over the workers without all-reducing
//! its parameters. A stage's input rows are fixed for the stage and the
//! workers' parameters are replicas, so a worker's outputs at its training
//! vertices are a function of rows its peers can hold. Each worker sends
//! those rows once per stage (GCN and GraphSAGE: its training vertices'
//! cached aggregates, here; GAT: the rows they attend over and their edges,
//! `factored_gat`), and every round only the gradient of its training
//! vertices' outputs, taken where the stage is narrowest: at the logits when
//! the stage has a head and fewer classes than conv outputs (Cora: 7 against
//! 256), else at the conv output. Every worker then runs the stage forward
//! over all workers' training vertices, stacked in rank order, and
//! backpropagates every worker's output gradient at once: the same gradient
//! of every factored parameter on every worker, in the same order.
//!
//! Per round that moves (W - 1) N c floats for N training rows over all
//! workers and c the width of the cut, where a ring all-reduce moves
//! 2 (W - 1) P for the P factored parameters; `Cost::pays` picks whichever
//! is fewer bytes over the stage. The price is compute: every worker runs
//! the stage over every training vertex.
//!
//! Dropout is applied to the rows each round; its mask is a function of the
//! run's seed, the round and the vertex id, so a worker redraws a peer's mask
//! from the vertex ids sent with its rows instead of receiving the dropped
//! rows every round.

use super::exchange::{check_len, decode_rows};
use crate::comm::Category;
use crate::gather::CsrRows;
use crate::model::dropout::dropout_sparse;
use crate::model::{Linear, Params};
use crate::train::{Collective, TrainError};
use candle_core::Tensor;
use std::sync::Arc;

/// Every worker's rows of one stage, stacked in rank order.
pub struct FactoredLinear {
    /// All workers' rows before dropout, worker 0's first.
    rows: CsrRows,
    /// The vertex id of each stacked row (its dropout key).
    ids: Vec<u32>,
    /// How many of the stacked rows each worker sent, by rank.
    counts: Vec<usize>,
}

/// Bytes of one worker's stage message: its row count, ids, per-row counts, columns and values.
pub(super) fn message_bytes(rows: &CsrRows) -> u64 {
    4 + 4 * rows.num_rows() as u64 + rows.wire_bytes() as u64
}

impl FactoredLinear {
    /// What sending this worker's `rows` once and `rounds` rounds of
    /// `width`-wide output gradients costs against all-reducing `params`
    /// floats every round (the same on every worker).
    pub fn cost(
        coll: &mut dyn Collective,
        rows: &CsrRows,
        width: usize,
        params: usize,
        rounds: u64,
    ) -> Result<Cost, TrainError> {
        let peers = coll.world().saturating_sub(1) as u64;
        Cost::of(coll, (peers * message_bytes(rows), rows.num_rows()), width, params, rounds)
    }

    /// Sends this worker's `rows` (of vertices `ids`) to every peer and keeps theirs.
    pub fn share(coll: &mut dyn Collective, ids: &[u32], rows: &CsrRows) -> Result<Self, TrainError> {
        let got = to_every_peer(coll, encode(ids, rows))?;
        let me = coll.rank();
        let mut parts = Vec::with_capacity(got.len());
        for (p, m) in got.iter().enumerate() {
            parts.push(if p == me { (ids.to_vec(), rows.clone()) } else { decode(m, rows.dim, p)? });
        }
        Ok(Self::stack(parts))
    }

    /// Every worker's (ids, rows), in rank order, as one block of rows.
    fn stack(parts: Vec<(Vec<u32>, CsrRows)>) -> Self {
        let dim = parts.first().map_or(0, |(_, r)| r.dim);
        let mut rows = CsrRows { dim, indptr: vec![0], ..Default::default() };
        let (mut ids, mut counts) = (Vec::new(), Vec::with_capacity(parts.len()));
        for (part_ids, part) in parts {
            let base = rows.values.len();
            rows.indices.extend_from_slice(&part.indices);
            rows.values.extend_from_slice(&part.values);
            rows.indptr.extend(part.indptr[1..].iter().map(|e| base + e));
            counts.push(part_ids.len());
            ids.extend(part_ids);
        }
        FactoredLinear { rows, ids, counts }
    }

    /// How many training rows each worker has, by rank.
    pub fn counts(&self) -> &[usize] {
        &self.counts
    }

    /// `dropout(X) W^T + b` over every worker's rows, differentiable in the
    /// weight and bias: row r dropped at `rate` under `key(its vertex id)`,
    /// as its worker's forward pass dropped it.
    pub fn output(&self, lin: &Linear, rate: f32, key: impl Fn(u32) -> u64 + Sync) -> Result<Tensor, TrainError> {
        Ok(lin.forward_sparse(&Arc::new(dropped_by_id(&self.rows, &self.ids, rate, key)))?)
    }
}

/// The summed gradient of `stage`'s parameters (flat, in its layout) from
/// `out`, the stage's output over every worker's training vertices (rank
/// order, `counts` each): sends this worker's output gradient `mine`
/// (`[counts[rank], width]`) to every peer and backpropagates all of them
/// through `out` at once.
pub(super) fn stacked_grads(
    coll: &mut dyn Collective,
    out: &Tensor,
    mine: &[f32],
    counts: &[usize],
    stage: &Params,
) -> Result<Vec<f32>, TrainError> {
    let width = out.dim(1)?;
    let g = all_output_grads(coll, mine, counts, width)?;
    let g = Tensor::from_vec(g, out.shape(), out.device())?;
    let grads = crate::model::backward_from(out, &g)?;
    Ok(stage.flat_grads(&grads)?)
}

/// The bytes a stage's summed gradient moves over its rounds (all workers),
/// as factors and as a ring all-reduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub factors: f64,
    pub all_reduce: f64,
}

impl Cost {
    /// Factors of `mine` = (the bytes of this worker's stage messages to all
    /// its peers, which may differ per peer, and its rows) plus `rounds`
    /// rounds of `width`-wide output gradients per row to each peer, against
    /// a ring all-reduce of `params` floats every round. Every worker gets
    /// the same figures (the sizes are summed over the workers first).
    pub(super) fn of(
        coll: &mut dyn Collective,
        mine: (u64, usize),
        width: usize,
        params: usize,
        rounds: u64,
    ) -> Result<Cost, TrainError> {
        let w = coll.world() as f64;
        let mut total = [mine.0 as f32, mine.1 as f32];
        if w > 1.0 {
            coll.all_reduce_sum(&mut total).map_err(TrainError::Comm)?;
        }
        let rounds = rounds as f64;
        let factors = total[0] as f64 + (w - 1.0) * rounds * total[1] as f64 * (width * 4) as f64;
        let all_reduce = rounds * 2.0 * (w - 1.0) * (params * 4) as f64;
        Ok(Cost { factors, all_reduce })
    }

    /// Whether the factors move fewer bytes (never alone: nothing moves).
    pub fn pays(&self) -> bool {
        self.factors < self.all_reduce
    }
}

/// Sends `msg` to every peer; returns what each worker sent, by rank (empty
/// for this worker).
pub(super) fn to_every_peer(coll: &mut dyn Collective, msg: Vec<u8>) -> Result<Vec<Vec<u8>>, TrainError> {
    let (w, me) = (coll.world(), coll.rank());
    let out = (0..w).map(|p| if p == me { Vec::new() } else { msg.clone() }).collect();
    coll.all_to_all(out, Category::Gradients).map_err(TrainError::Comm)
}

/// `rows` with this round's dropout: row r dropped at `rate` under
/// `key(ids[r])`, as the worker that owns the row dropped it.
pub(super) fn dropped_by_id(rows: &CsrRows, ids: &[u32], rate: f32, key: impl Fn(u32) -> u64 + Sync) -> CsrRows {
    let mut x = rows.clone();
    dropout_sparse(&mut x, rate, |r| key(ids[r]));
    x
}

/// Sends this worker's `dy` (`[counts[rank], d]`) to every peer; returns every
/// worker's, stacked in rank order.
pub(super) fn all_output_grads(
    coll: &mut dyn Collective,
    dy: &[f32],
    counts: &[usize],
    d: usize,
) -> Result<Vec<f32>, TrainError> {
    let me = coll.rank();
    check_len(dy.len() * 4, counts[me], d, me, "output gradient")?;
    let got = to_every_peer(coll, bytemuck::cast_slice(dy).to_vec())?;
    let mut g = Vec::with_capacity(counts.iter().sum::<usize>() * d);
    for (p, (m, &n)) in got.iter().zip(counts).enumerate() {
        if p == me {
            g.extend_from_slice(dy);
        } else {
            g.extend(decode_rows(m, n, d, p, "output gradient")?);
        }
    }
    Ok(g)
}

/// `[n][ids; n][row lengths; n][columns; nnz][values; nnz]`, little-endian u32 and f32.
pub(super) fn encode(ids: &[u32], rows: &CsrRows) -> Vec<u8> {
    let mut out = Vec::with_capacity(message_bytes(rows) as usize);
    out.extend((ids.len() as u32).to_le_bytes());
    ids.iter().for_each(|v| out.extend(v.to_le_bytes()));
    rows.indptr.windows(2).for_each(|w| out.extend(((w[1] - w[0]) as u32).to_le_bytes()));
    rows.indices.iter().for_each(|c| out.extend(c.to_le_bytes()));
    rows.values.iter().for_each(|v| out.extend(v.to_le_bytes()));
    out
}

/// The inverse of `encode`, checking every length and column against the message and `dim`.
pub(super) fn decode(m: &[u8], dim: usize, peer: usize) -> Result<(Vec<u32>, CsrRows), TrainError> {
    let bad = |what: String| TrainError::Comm(format!("worker {peer}'s factored-gradient rows: {what}").into());
    if !m.len().is_multiple_of(4) || m.is_empty() {
        return Err(bad(format!("{} bytes is not a whole message", m.len())));
    }
    let words: Vec<u32> = m.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let n = words[0] as usize;
    if words.len() < 1 + 2 * n {
        return Err(bad(format!("{n} rows announced in {} bytes", m.len())));
    }
    let ids = words[1..1 + n].to_vec();
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0usize);
    for &len in &words[1 + n..1 + 2 * n] {
        indptr.push(indptr[indptr.len() - 1] + len as usize);
    }
    let nnz = indptr[n];
    let body = &words[1 + 2 * n..];
    if body.len() != 2 * nnz {
        return Err(bad(format!("{nnz} non-zeros announced, {} words sent", body.len())));
    }
    let indices = body[..nnz].to_vec();
    if let Some(c) = indices.iter().find(|&&c| c as usize >= dim) {
        return Err(bad(format!("column {c} of a {dim}-wide input")));
    }
    let values = body[nnz..].iter().map(|b| f32::from_bits(*b)).collect();
    Ok((ids, CsrRows { dim, indptr, indices, values }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dropout::vertex_row_key;
    use crate::model::sparse_input::{sparse_linear, weight_grad};

    fn rows(n: usize, dim: usize, salt: u64) -> CsrRows {
        let dense: Vec<f32> = (0..n * dim)
            .map(|i| {
                let h = crate::util::rng::mix64(i as u64 ^ salt);
                if h.is_multiple_of(5) { (h % 17) as f32 * 0.1 - 0.8 } else { 0.0 }
            })
            .collect();
        CsrRows::from_dense(&dense, dim)
    }

    #[test]
    fn messages_round_trip_and_damaged_ones_are_refused() {
        let r = rows(7, 30, 1);
        let ids: Vec<u32> = (100..107).collect();
        let m = encode(&ids, &r);
        assert_eq!(m.len() as u64, message_bytes(&r));
        let (i2, r2) = decode(&m, 30, 1).unwrap();
        assert_eq!((i2, r2), (ids, r));
        for cut in [0, 3, 4, 20, m.len() - 4] {
            assert!(decode(&m[..cut], 30, 1).is_err(), "a message cut to {cut} bytes");
        }
        let mut huge = m.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge, 30, 1).is_err());
        assert!(decode(&m, 10, 1).unwrap_err().to_string().contains("column"));
    }

    #[test]
    fn the_stacked_output_is_each_workers_dropped_product_and_its_gradient_the_sum_of_theirs() {
        let (d, dim, n) = (6, 40, 5);
        let dev = candle_core::Device::Cpu;
        let mut p = Params::new(3);
        let w = p.glorot("conv.weight", (d, dim), dim, d, &dev).unwrap();
        let b = p.glorot("conv.bias", d, dim, d, &dev).unwrap();
        let lin = Linear::new(w.clone(), Some(b.clone()));
        let parts: Vec<(Vec<u32>, CsrRows)> =
            (0..3).map(|k| ((k * 10..k * 10 + n as u32).collect(), rows(n, dim, k as u64 + 7))).collect();
        let key = |v: u32| vertex_row_key(42, v);
        let out = FactoredLinear::stack(parts.clone()).output(&lin, 0.3, key).unwrap();
        let dy: Vec<f32> = (0..3 * n * d).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut want_w, mut want_b) = (vec![0f32; d * dim], vec![0f32; d]);
        for (k, (ids, r)) in parts.iter().enumerate() {
            // Worker k's rows of the stack are its own dropped product.
            let mut x = r.clone();
            dropout_sparse(&mut x, 0.3, |i| key(ids[i]));
            let own = sparse_linear(&Arc::new(x.clone()), n, &w).unwrap().broadcast_add(&b).unwrap();
            assert_eq!(out.narrow(0, k * n, n).unwrap().to_vec2::<f32>().unwrap(), own.to_vec2::<f32>().unwrap());
            let dy_k = &dy[k * n * d..(k + 1) * n * d];
            want_w.iter_mut().zip(weight_grad(&x, n, dy_k, d)).for_each(|(a, g)| *a += g);
            dy_k.chunks(d).for_each(|row| want_b.iter_mut().zip(row).for_each(|(a, g)| *a += g));
        }
        // Alone, a worker's stacked gradient is sum_k dY_k^T dropout(X_k) and the bias's column sums.
        let got = stacked_grads(&mut crate::train::Solo, &out, &dy, &[3 * n], &p).unwrap();
        let want = [want_w, want_b].concat();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}
