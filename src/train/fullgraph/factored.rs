//! The weight gradient of a linear layer over constant sparse rows, summed
//! over the workers without all-reducing the weight. For `y = x W^T` the
//! summed gradient is dW = sum_k dY_k^T X_k: worker k's input rows X_k and
//! the gradient of its outputs dY_k. In a RETEXO stage of GCN or GraphSAGE
//! the rows are a worker's training vertices' cached aggregates (GAT:
//! `factored_gat`), fixed for the whole stage and few where labels are
//! scarce (Cora's 140 against a 1,433 x hidden weight), so each
//! worker sends its rows once per stage and its dY_k (rows x out) every
//! round, and every worker forms the same sum in the same order. That moves
//! (W - 1) N d_out floats per round for N training rows over all workers,
//! where a ring all-reduce of the weight moves 2 (W - 1) d_out d_in; `pays`
//! picks whichever is fewer bytes over the stage.
//!
//! Dropout is applied to the rows each round; its mask is a function of the
//! run's seed, the round and the vertex id, so a worker redraws a peer's mask
//! from the vertex ids sent with its rows instead of receiving the dropped
//! rows every round.

use super::exchange::{check_len, decode_rows};
use crate::comm::Category;
use crate::gather::CsrRows;
use crate::model::dropout::dropout_sparse;
use crate::model::sparse_input::weight_grad;
use crate::train::{Collective, TrainError};

/// Every worker's rows of one stage, stacked in rank order.
pub struct FactoredLinear {
    /// All workers' rows before dropout, worker 0's first.
    rows: CsrRows,
    /// The vertex id of each stacked row (its dropout key).
    ids: Vec<u32>,
    /// How many of the stacked rows each worker sent, by rank.
    counts: Vec<usize>,
    d_out: usize,
}

/// Bytes of one worker's stage message: its row count, ids, per-row counts, columns and values.
pub(super) fn message_bytes(rows: &CsrRows) -> u64 {
    4 + 4 * rows.num_rows() as u64 + rows.wire_bytes() as u64
}

impl FactoredLinear {
    /// Whether sending the factors for `rounds` rounds (this worker's `rows`)
    /// moves fewer bytes than all-reducing the `[d_out, rows.dim]` weight's
    /// gradient every round. Every worker gets the same answer (the sizes are
    /// summed over the workers first).
    pub fn pays(coll: &mut dyn Collective, rows: &CsrRows, d_out: usize, rounds: u64) -> Result<bool, TrainError> {
        factors_pay(coll, (message_bytes(rows), rows.num_rows()), d_out, d_out * rows.dim, rounds)
    }

    /// Sends this worker's `rows` (of vertices `ids`) to every peer and keeps theirs.
    pub fn share(coll: &mut dyn Collective, ids: &[u32], rows: &CsrRows, d_out: usize) -> Result<Self, TrainError> {
        let got = to_every_peer(coll, encode(ids, rows))?;
        let me = coll.rank();
        let mut parts = Vec::with_capacity(got.len());
        for (p, m) in got.iter().enumerate() {
            parts.push(if p == me { (ids.to_vec(), rows.clone()) } else { decode(m, rows.dim, p)? });
        }
        Ok(Self::stack(parts, d_out))
    }

    /// Every worker's (ids, rows), in rank order, as one block of rows.
    fn stack(parts: Vec<(Vec<u32>, CsrRows)>, d_out: usize) -> Self {
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
        FactoredLinear { rows, ids, counts, d_out }
    }

    /// Every worker's rows with this round's dropout: row r dropped at
    /// `rate` under `key(its vertex id)`, as its worker's forward pass dropped it.
    fn dropped(&self, rate: f32, key: impl Fn(u32) -> u64 + Sync) -> CsrRows {
        dropped_by_id(&self.rows, &self.ids, rate, key)
    }

    /// The summed `[d_out, d_in]` weight gradient: sends this worker's `dy`
    /// (`[its rows, d_out]`) to every peer, then sums every worker's
    /// `dY_k^T dropout(X_k)` in one product over the stacked rows (`dropped`),
    /// in the same order on every worker.
    pub fn weight_grad(
        &self,
        coll: &mut dyn Collective,
        dy: &[f32],
        rate: f32,
        key: impl Fn(u32) -> u64 + Sync,
    ) -> Result<Vec<f32>, TrainError> {
        let d = self.d_out;
        let g = all_output_grads(coll, dy, &self.counts, d)?;
        let x = self.dropped(rate, key);
        Ok(weight_grad(&x, x.num_rows(), &g, d))
    }
}

/// Whether factors of `mine` = (this worker's stage message bytes, its rows)
/// plus `rounds` rounds of `d_out`-wide output gradients per row move fewer
/// bytes than a ring all-reduce of `params` floats every round. Every worker
/// gets the same answer (the sizes are summed over the workers first).
pub(super) fn factors_pay(
    coll: &mut dyn Collective,
    mine: (u64, usize),
    d_out: usize,
    params: usize,
    rounds: u64,
) -> Result<bool, TrainError> {
    let w = coll.world() as f64;
    if w < 2.0 {
        return Ok(false);
    }
    let mut total = [mine.0 as f32, mine.1 as f32];
    coll.all_reduce_sum(&mut total).map_err(TrainError::Comm)?;
    let rounds = rounds as f64;
    let factored = (w - 1.0) * (total[0] as f64 + rounds * total[1] as f64 * (d_out * 4) as f64);
    let dense = rounds * 2.0 * (w - 1.0) * (params * 4) as f64;
    Ok(factored < dense)
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
    fn the_stacked_sum_is_the_sum_of_each_workers_dropped_product() {
        // Solo: the factors of one worker give that worker's gradient; the
        // stacked product over several parts equals the sum of theirs.
        let (d, dim) = (6, 40);
        let parts: Vec<(Vec<u32>, CsrRows)> =
            (0..3).map(|k| ((k * 10..k * 10 + 5).collect(), rows(5, dim, k as u64 + 7))).collect();
        let key = |v: u32| vertex_row_key(42, v);
        let dys: Vec<Vec<f32>> = (0..3).map(|k| (0..5 * d).map(|i| ((i + k) as f32 * 0.37).sin()).collect()).collect();
        let mut want = vec![0f32; d * dim];
        for ((ids, r), dy) in parts.iter().zip(&dys) {
            let mut x = r.clone();
            dropout_sparse(&mut x, 0.3, |i| key(ids[i]));
            for (a, b) in want.iter_mut().zip(weight_grad(&x, 5, dy, d)) {
                *a += b;
            }
        }
        let f = FactoredLinear::stack(parts.clone(), d);
        let (x, g) = (f.dropped(0.3, key), dys.concat());
        let got = weight_grad(&x, x.num_rows(), &g, d);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
        }
        let solo = FactoredLinear::stack(parts[..1].to_vec(), d)
            .weight_grad(&mut crate::train::Solo, &dys[0], 0.3, key)
            .unwrap();
        let mut x0 = parts[0].1.clone();
        dropout_sparse(&mut x0, 0.3, |i| key(parts[0].0[i]));
        assert_eq!(solo, weight_grad(&x0, 5, &dys[0], d));
    }
}
