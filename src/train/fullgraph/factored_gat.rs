//! RETEXO's GAT stage gradient, summed over the workers without
//! all-reducing the stage's parameters (see `factored` for the scheme). A
//! worker's conv outputs at its training vertices are a function of rows its
//! peers can hold: the rows those vertices attend over (themselves and their
//! in-neighbours) and the edges between them. Each worker sends those once
//! per stage; every round it sends only its training vertices' output
//! gradients, and every worker runs the conv over all workers' training
//! vertices, stacked in rank order.
//!
//! Dropout (of the rows and of the attention coefficients) is keyed by the
//! round and the global vertex ids, so peers redraw each other's masks. The
//! softmax of a destination runs over its own edges only, so restricting the
//! conv to the training destinations changes no output.

use super::factored::{
    Cost, decode as decode_rows_msg, dropped_by_id, encode as encode_rows_msg, message_bytes, to_every_peer,
};
use crate::format::RowRef;
use crate::gather::CsrRows;
use crate::model::{AggGraph, GatLayer, Kernel, LayerInput};
use crate::train::{Collective, TrainError};
use candle_core::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// One worker's share: its training vertices first, then the other rows they
/// attend over, with the edges from each training vertex.
#[derive(Clone, Debug, PartialEq)]
pub struct GatPart {
    /// Global vertex ids, training vertices first.
    pub ids: Vec<u32>,
    pub num_dst: usize,
    /// `indptr[d]..indptr[d + 1]`: destination `d`'s sources, positions into `ids`.
    pub indptr: Vec<u32>,
    pub indices: Vec<u32>,
    /// The input row of each of `ids`.
    pub rows: CsrRows,
}

impl GatPart {
    /// The part of `graph` (destinations first among its sources) that the
    /// destinations `train` read, with the source rows `rows(positions)`.
    pub fn new(
        graph: &AggGraph,
        src: &[u32],
        train: &[u32],
        rows: impl FnOnce(&[u32]) -> Result<CsrRows, TrainError>,
    ) -> Result<GatPart, TrainError> {
        let mut at = vec![u32::MAX; graph.num_src()];
        let mut pos: Vec<u32> = Vec::with_capacity(train.len());
        for &t in train {
            at[t as usize] = pos.len() as u32;
            pos.push(t);
        }
        let (mut indptr, mut indices) = (Vec::with_capacity(train.len() + 1), Vec::new());
        indptr.push(0u32);
        for &t in train {
            for &s in graph.row(t as usize) {
                if at[s as usize] == u32::MAX {
                    at[s as usize] = pos.len() as u32;
                    pos.push(s);
                }
                indices.push(at[s as usize]);
            }
            indptr.push(indices.len() as u32);
        }
        let ids = pos.iter().map(|&p| src[p as usize]).collect();
        Ok(GatPart { ids, num_dst: train.len(), indptr, indices, rows: rows(&pos)? })
    }

    /// `[n_dst][edge count per destination; n_dst][sources; edges]`, then the
    /// rows as the linear factors send them (ids and CSR).
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.message_bytes() as usize);
        out.extend((self.num_dst as u32).to_le_bytes());
        self.indptr.windows(2).for_each(|w| out.extend((w[1] - w[0]).to_le_bytes()));
        self.indices.iter().for_each(|s| out.extend(s.to_le_bytes()));
        out.extend(encode_rows_msg(&self.ids, &self.rows));
        out
    }

    fn message_bytes(&self) -> u64 {
        4 * (1 + self.num_dst + self.indices.len()) as u64 + message_bytes(&self.rows)
    }

    /// The inverse of `encode`, checking every count and position.
    fn decode(m: &[u8], dim: usize, peer: usize) -> Result<GatPart, TrainError> {
        let bad = |what: String| TrainError::Comm(format!("worker {peer}'s attention rows: {what}").into());
        let word =
            |i: usize| -> Option<u32> { m.get(4 * i..4 * i + 4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])) };
        let n_dst = word(0).ok_or_else(|| bad(format!("{} bytes is not a whole message", m.len())))? as usize;
        if 4 * (1 + n_dst) > m.len() {
            return Err(bad(format!("{n_dst} destinations announced in {} bytes", m.len())));
        }
        let mut indptr = Vec::with_capacity(n_dst + 1);
        indptr.push(0u32);
        for d in 0..n_dst {
            let len = word(1 + d).expect("checked above");
            let end = indptr[d].checked_add(len).ok_or_else(|| bad("edge counts overflow".into()))?;
            indptr.push(end);
        }
        let edges = indptr[n_dst] as usize;
        let start = 1 + n_dst;
        if 4 * (start + edges) > m.len() {
            return Err(bad(format!("{edges} edges announced in {} bytes", m.len())));
        }
        let indices: Vec<u32> = (start..start + edges).map(|i| word(i).expect("checked above")).collect();
        let (ids, rows) = decode_rows_msg(&m[4 * (start + edges)..], dim, peer)?;
        if n_dst > ids.len() {
            return Err(bad(format!("{n_dst} destinations among {} rows", ids.len())));
        }
        if let Some(s) = indices.iter().find(|&&s| s as usize >= ids.len()) {
            return Err(bad(format!("source {s} of {} rows", ids.len())));
        }
        Ok(GatPart { ids, num_dst: n_dst, indptr, indices, rows })
    }
}

/// Every worker's part of one stage, stacked: all training vertices (rank
/// order) first, then every part's other rows.
pub struct FactoredGat {
    graph: Arc<AggGraph>,
    /// Input rows before dropout, in source order.
    rows: CsrRows,
    /// The global id of each source row (its dropout key).
    ids: Vec<u32>,
    /// Training vertices of each worker, by rank.
    counts: Vec<usize>,
}

impl FactoredGat {
    /// What the parts and `rounds` rounds of output gradients `width` wide
    /// cost against all-reducing `params` floats every round (the same on
    /// every worker).
    pub fn cost(
        coll: &mut dyn Collective,
        part: &GatPart,
        width: usize,
        params: usize,
        rounds: u64,
    ) -> Result<Cost, TrainError> {
        Cost::of(coll, (part.message_bytes(), part.num_dst), width, params, rounds)
    }

    /// Sends this worker's `part` to every peer and stacks all of them.
    pub fn share(coll: &mut dyn Collective, part: GatPart) -> Result<Self, TrainError> {
        let got = to_every_peer(coll, part.encode())?;
        let (dim, me) = (part.rows.dim, coll.rank());
        let mut parts = Vec::with_capacity(got.len());
        let mut mine = Some(part);
        for (p, m) in got.iter().enumerate() {
            parts.push(if p == me { mine.take().expect("once") } else { GatPart::decode(m, dim, p)? });
        }
        Self::stack(&parts)
    }

    /// One row per vertex, every worker's training vertices first (rank
    /// order): a vertex's input row is the same on every worker (its features,
    /// or its exchanged embedding), and so is its dropout mask (keyed by its
    /// id), so the rows several workers' vertices attend over are kept once.
    fn stack(parts: &[GatPart]) -> Result<Self, TrainError> {
        let dim = parts.first().map_or(0, |p| p.rows.dim);
        let n_dst: usize = parts.iter().map(|p| p.num_dst).sum();
        let mut at: HashMap<u32, u32> = HashMap::with_capacity(parts.iter().map(|p| p.ids.len()).sum());
        let mut rows = CsrRows { dim, indptr: vec![0], ..Default::default() };
        let mut ids = Vec::new();
        for dst in [true, false] {
            for (k, p) in parts.iter().enumerate() {
                let range = if dst { 0..p.num_dst } else { p.num_dst..p.ids.len() };
                for i in range {
                    let v = p.ids[i];
                    if at.contains_key(&v) {
                        if dst {
                            return Err(TrainError::Comm(
                                format!("vertex {v} is a training vertex of two workers (the second: worker {k})")
                                    .into(),
                            ));
                        }
                        continue;
                    }
                    at.insert(v, ids.len() as u32);
                    let (indices, values) = p.rows.row(i);
                    rows.push(RowRef::Sparse { indices, values });
                    ids.push(v);
                }
            }
        }
        let (mut indptr, mut indices) = (vec![0u32], Vec::new());
        for p in parts {
            for d in 0..p.num_dst {
                let (a, b) = (p.indptr[d] as usize, p.indptr[d + 1] as usize);
                indices.extend(p.indices[a..b].iter().map(|&s| at[&p.ids[s as usize]]));
                indptr.push(indices.len() as u32);
            }
        }
        let graph = Arc::new(AggGraph::new(n_dst, ids.len(), indptr, indices, None));
        Ok(FactoredGat { graph, rows, ids, counts: parts.iter().map(|p| p.num_dst).collect() })
    }

    /// How many training vertices each worker has, by rank.
    pub fn counts(&self) -> &[usize] {
        &self.counts
    }

    /// `gat`'s output at every worker's training vertices (rank order) with
    /// this round's dropout (rows at `rate` under `row_key(id)`, attention
    /// under `attention`), differentiable in the conv's parameters.
    pub fn output(
        &self,
        gat: &GatLayer,
        rate: f32,
        row_key: impl Fn(u32) -> u64 + Sync,
        attention: Option<(f32, u64)>,
    ) -> Result<Tensor, TrainError> {
        let x = dropped_by_id(&self.rows, &self.ids, rate, row_key);
        let wh = gat.project_sparse(&Arc::new(x))?;
        let li = LayerInput {
            x: &wh,
            graph: &self.graph,
            ids: &self.ids,
            kernel: Kernel::Fast,
            attention_dropout: attention,
            activation: None,
        };
        Ok(gat.attend(&li, wh.clone())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part() -> GatPart {
        // Destinations 0 and 1 (ids 10, 11) over rows 10, 11, 12, 13.
        let dense: Vec<f32> = (0..4 * 5).map(|i| if i % 3 == 0 { i as f32 * 0.25 } else { 0.0 }).collect();
        GatPart {
            ids: vec![10, 11, 12, 13],
            num_dst: 2,
            indptr: vec![0, 3, 5],
            indices: vec![2, 0, 3, 1, 2],
            rows: CsrRows::from_dense(&dense, 5),
        }
    }

    #[test]
    fn parts_round_trip_and_damaged_ones_are_refused() {
        let p = part();
        let m = p.encode();
        assert_eq!(m.len() as u64, p.message_bytes());
        assert_eq!(GatPart::decode(&m, 5, 1).unwrap(), p);
        for cut in [0, 3, 4, 8, 20, m.len() - 4] {
            assert!(GatPart::decode(&m[..cut], 5, 1).is_err(), "a message cut to {cut} bytes");
        }
        let mut huge = m.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(GatPart::decode(&huge, 5, 1).is_err());
        let mut far = m.clone();
        far[12..16].copy_from_slice(&4u32.to_le_bytes());
        assert!(GatPart::decode(&far, 5, 1).unwrap_err().to_string().contains("source 4"));
    }

    #[test]
    fn stacking_puts_every_destination_first_keeps_each_edge_and_each_row_once() {
        // Part b's vertices 20 and 21 also attend over a's 12 and 13 (and 11,
        // a's training vertex, which keeps a's row).
        let (a, mut b) = (part(), part());
        b.ids = vec![20, 21, 11, 13];
        let f = FactoredGat::stack(&[a.clone(), b]).unwrap();
        assert_eq!(f.graph.num_dst(), 4);
        assert_eq!(f.ids, vec![10, 11, 20, 21, 12, 13]);
        // Part b's destination 0 reads its rows 2, 0, 3 (ids 11, 20, 13): stacked rows 1, 2, 5.
        assert_eq!(f.graph.row(2), &[1, 2, 5]);
        assert_eq!(f.graph.row(1), &[1, 4]);
        assert_eq!(f.rows.row(5), a.rows.row(3));
        assert_eq!(f.counts, vec![2, 2]);
        // A vertex two workers both train is refused.
        let twice = FactoredGat::stack(&[a.clone(), a]).err().unwrap();
        assert!(twice.to_string().contains("vertex 10 is a training vertex of two workers"), "{twice}");
    }
}
