//! RETEXO's GAT stage gradient, summed over the workers without
//! all-reducing the stage's parameters (see `factored` for the scheme). A
//! worker's conv outputs at its training vertices are a function of rows its
//! peers can hold: the rows those vertices attend over (themselves and their
//! in-neighbours) and the edges between them. Each worker sends those once
//! per stage, each peer only the values of the rows it does not hold as its
//! own or halo input already (most of them, on a random partition): the
//! others cross as ids and the peer takes its own copy. Every round it sends
//! only its training vertices' output gradients, and every worker runs the
//! conv over all workers' training vertices, stacked in rank order.
//!
//! Dropout (of the rows and of the attention coefficients) is keyed by the
//! round and the global vertex ids, so peers redraw each other's masks. The
//! softmax of a destination runs over its own edges only, so restricting the
//! conv to the training destinations changes no output.

use super::factored::{Cost, dropped_by_id};
use crate::comm::Category;
use crate::format::RowRef;
use crate::gather::CsrRows;
use crate::graph::CsrView;
use crate::model::{AggGraph, GatLayer, Kernel, LayerInput};
use crate::train::{Collective, TrainError};
use candle_core::Tensor;
use std::collections::HashMap;
use std::rc::Rc;
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

    /// Whether each peer already holds each of `ids` as an input row of this
    /// stage (`held[q][i]`): its owned vertices and their in-neighbours (its
    /// halo, `HaloPlan::derive`), read from the whole graph and `owner`.
    pub fn held_by_peers(&self, graph: CsrView<'_>, owner: impl Fn(u32) -> usize, world: usize) -> Vec<Vec<bool>> {
        let mut held = vec![vec![false; self.ids.len()]; world];
        if world < 2 {
            return held;
        }
        // A dense map: the walk below visits every edge of the whole graph.
        let mut at = vec![u32::MAX; graph.num_nodes()];
        for (i, &v) in self.ids.iter().enumerate() {
            at[v as usize] = i as u32;
            held[owner(v)][i] = true;
        }
        for u in 0..graph.num_nodes() as u32 {
            let q = owner(u);
            for &s in graph.in_neighbors(u) {
                if let Some(&i) = at.get(s as usize).filter(|&&i| i != u32::MAX) {
                    held[q][i as usize] = true;
                }
            }
        }
        held
    }

    /// `[n_dst][edge count per destination; n_dst][sources; edges]`, then
    /// `[n][ids; n]`, a bitmap of the rows sent (`n` bits in 32-bit words,
    /// bit `i % 32` of word `i / 32`), then of the rows the receiver does not
    /// hold (`held` false) their lengths, columns and values: the receiver
    /// fills the others from its own input rows, which are the same (a
    /// vertex's features, or the embedding its owner sent every worker
    /// holding it). The bitmap lets the receiver check that the sender's view
    /// of what it holds is its own: a mismatch would otherwise pass unseen
    /// wherever the rows mixed up have the same sizes.
    fn encode(&self, held: &[bool]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.message_bytes(held) as usize);
        out.extend((self.num_dst as u32).to_le_bytes());
        self.indptr.windows(2).for_each(|w| out.extend((w[1] - w[0]).to_le_bytes()));
        self.indices.iter().for_each(|s| out.extend(s.to_le_bytes()));
        out.extend((self.ids.len() as u32).to_le_bytes());
        self.ids.iter().for_each(|v| out.extend(v.to_le_bytes()));
        let mut bits = vec![0u32; self.ids.len().div_ceil(32)];
        (0..self.ids.len()).filter(|&i| !held[i]).for_each(|i| bits[i / 32] |= 1 << (i % 32));
        bits.iter().for_each(|w| out.extend(w.to_le_bytes()));
        let sent = || (0..self.ids.len()).filter(|&i| !held[i]).map(|i| self.rows.row(i));
        sent().for_each(|(c, _)| out.extend((c.len() as u32).to_le_bytes()));
        sent().for_each(|(c, _)| c.iter().for_each(|c| out.extend(c.to_le_bytes())));
        sent().for_each(|(_, v)| v.iter().for_each(|v| out.extend(v.to_le_bytes())));
        out
    }

    /// The bytes of the message to a peer that holds the rows `held` marks.
    fn message_bytes(&self, held: &[bool]) -> u64 {
        let sent = (0..self.ids.len()).filter(|&i| !held[i]);
        let nnz: usize = sent.clone().map(|i| self.rows.row(i).0.len()).sum();
        let words = self.ids.len().div_ceil(32);
        4 * (2 + self.num_dst + self.indices.len() + self.ids.len() + words + sent.count()) as u64 + 8 * nnz as u64
    }

    /// The inverse of `encode`, checking every count and position: the rows
    /// this worker holds (`held(id)`: its position among its input rows) come
    /// from `own(positions)`, the others from the message.
    fn decode(
        m: &[u8],
        dim: usize,
        peer: usize,
        held: impl Fn(u32) -> Option<u32>,
        own: impl FnOnce(&[u32]) -> Result<CsrRows, TrainError>,
    ) -> Result<GatPart, TrainError> {
        let bad = |what: String| TrainError::Comm(format!("worker {peer}'s attention rows: {what}").into());
        let word =
            |i: usize| -> Option<u32> { m.get(4 * i..4 * i + 4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])) };
        let short = |what: &str, i: usize| bad(format!("{what} past the message's {} bytes (word {i})", m.len()));
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
        if 4 * (start + edges + 1) > m.len() {
            return Err(bad(format!("{edges} edges announced in {} bytes", m.len())));
        }
        let indices: Vec<u32> = (start..start + edges).map(|i| word(i).expect("checked above")).collect();
        let mut at = start + edges;
        let n = word(at).expect("checked above") as usize;
        at += 1;
        if 4 * (at + n) > m.len() {
            return Err(bad(format!("{n} rows announced in {} bytes", m.len())));
        }
        let ids: Vec<u32> = (at..at + n).map(|i| word(i).expect("checked above")).collect();
        at += n;
        let words = n.div_ceil(32);
        if 4 * (at + words) > m.len() {
            return Err(short("the bitmap of rows sent", at + words - 1));
        }
        let bits: Vec<u32> = (at..at + words).map(|i| word(i).expect("checked above")).collect();
        at += words;
        if !n.is_multiple_of(32) && bits[words - 1] >> (n % 32) != 0 {
            return Err(bad(format!("the bitmap of rows sent marks rows past its {n}")));
        }
        let (mut mine, mut sent) = (Vec::new(), Vec::new());
        for (i, &v) in ids.iter().enumerate() {
            let came = bits[i / 32] >> (i % 32) & 1 == 1;
            match (held(v), came) {
                (Some(p), false) => mine.push(p),
                (None, true) => sent.push(i),
                // The sender's view of what this worker holds (the partition
                // and the graph) is not this worker's: both must run the same ones.
                (Some(_), true) | (None, false) => {
                    let (what, holds) = if came { ("sent", "holds") } else { ("left out", "does not hold") };
                    return Err(bad(format!(
                        "it {what} vertex {v}'s row, which this worker {holds} as an input row (do both workers \
                         read the same partition and graph?)"
                    )));
                }
            }
        }
        let mut lens = Vec::with_capacity(sent.len());
        for i in at..at + sent.len() {
            lens.push(word(i).ok_or_else(|| short("row lengths", i))? as usize);
        }
        at += sent.len();
        let nnz: usize = lens.iter().sum();
        if m.len() != 4 * (at + 2 * nnz) {
            return Err(bad(format!(
                "the {} rows sent have {nnz} non-zeros, {} bytes, and {} bytes follow their lengths",
                sent.len(),
                8 * nnz,
                m.len().saturating_sub(4 * at)
            )));
        }
        let cols: Vec<u32> = (at..at + nnz).map(|i| word(i).expect("checked above")).collect();
        if let Some(c) = cols.iter().find(|&&c| c as usize >= dim) {
            return Err(bad(format!("column {c} of a {dim}-wide input")));
        }
        let vals: Vec<f32> =
            (at + nnz..at + 2 * nnz).map(|i| f32::from_bits(word(i).expect("checked above"))).collect();
        if n_dst > n {
            return Err(bad(format!("{n_dst} destinations among {n} rows")));
        }
        if let Some(s) = indices.iter().find(|&&s| s as usize >= n) {
            return Err(bad(format!("source {s} of {n} rows")));
        }
        let own = own(&mine)?;
        let mut rows = CsrRows { dim, indptr: Vec::with_capacity(n + 1), ..Default::default() };
        rows.indptr.push(0);
        // `sent` lists the message's rows in order; the others are this worker's own.
        let (mut next_own, mut next_sent, mut nz) = (0, 0, 0);
        for i in 0..n {
            if sent.get(next_sent) == Some(&i) {
                let len = lens[next_sent];
                next_sent += 1;
                rows.push(RowRef::Sparse { indices: &cols[nz..nz + len], values: &vals[nz..nz + len] });
                nz += len;
            } else {
                let (c, x) = own.row(next_own);
                next_own += 1;
                rows.push(RowRef::Sparse { indices: c, values: x });
            }
        }
        Ok(GatPart { ids, num_dst: n_dst, indptr, indices, rows })
    }
}

/// Which peers hold each row of a worker's part (`GatPart::held_by_peers`),
/// kept for the next stage: every stage's part attends over the same
/// vertices (the graph and the training vertices stay), and the walk over
/// the whole graph costs more than the rest of the stage's setup. A part
/// over other vertices is walked again.
#[derive(Default)]
pub struct Holders {
    kept: std::cell::RefCell<Option<Kept>>,
}

/// The vertices of the part last walked, and who holds each.
struct Kept {
    ids: Vec<u32>,
    held: Rc<[Vec<bool>]>,
}

impl Holders {
    /// `part.held_by_peers(graph, owner, world)`, walked once for its vertices.
    pub fn of(
        &self,
        part: &GatPart,
        graph: CsrView<'_>,
        owner: impl Fn(u32) -> usize,
        world: usize,
    ) -> Rc<[Vec<bool>]> {
        let mut kept = self.kept.borrow_mut();
        match kept.as_ref() {
            Some(k) if k.ids == part.ids && k.held.len() == world => k.held.clone(),
            _ => {
                let held: Rc<[Vec<bool>]> = part.held_by_peers(graph, owner, world).into();
                *kept = Some(Kept { ids: part.ids.clone(), held: held.clone() });
                held
            }
        }
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
    /// What the parts (each peer sent only the rows it lacks, `held`) and
    /// `rounds` rounds of output gradients `width` wide cost against
    /// all-reducing `params` floats every round (the same on every worker).
    pub fn cost(
        coll: &mut dyn Collective,
        part: &GatPart,
        held: &[Vec<bool>],
        width: usize,
        params: usize,
        rounds: u64,
    ) -> Result<Cost, TrainError> {
        let me = coll.rank();
        let sent = held.iter().enumerate().filter(|&(q, _)| q != me).map(|(_, h)| part.message_bytes(h)).sum();
        Cost::of(coll, (sent, part.num_dst), width, params, rounds)
    }

    /// Sends each peer this worker's `part` less the rows it holds
    /// (`held[q]`), and stacks all of them: a peer's rows this worker holds
    /// (`mine(id)`, its position among them) come from `own(positions)`.
    pub fn share(
        coll: &mut dyn Collective,
        part: GatPart,
        held: &[Vec<bool>],
        mine: impl Fn(u32) -> Option<u32>,
        own: impl Fn(&[u32]) -> Result<CsrRows, TrainError>,
    ) -> Result<Self, TrainError> {
        let (dim, me) = (part.rows.dim, coll.rank());
        let out = (0..coll.world()).map(|q| if q == me { Vec::new() } else { part.encode(&held[q]) }).collect();
        let got = coll.all_to_all(out, Category::Gradients).map_err(TrainError::Comm)?;
        let mut parts = Vec::with_capacity(got.len());
        let mut this = Some(part);
        for (p, m) in got.iter().enumerate() {
            parts.push(if p == me { this.take().expect("once") } else { GatPart::decode(m, dim, p, &mine, &own)? });
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

    /// `m` decoded by a receiver that holds `holds` (ids of `p`'s rows, in
    /// the order of its own input rows) and none of `p`'s other rows.
    fn decode_as(m: &[u8], p: &GatPart, holds: &[u32]) -> Result<GatPart, TrainError> {
        let mine = |v: u32| holds.iter().position(|&h| h == v).map(|r| r as u32);
        let own = |pos: &[u32]| {
            let mut rows = CsrRows { dim: p.rows.dim, indptr: vec![0], ..Default::default() };
            for &r in pos {
                let at = p.ids.iter().position(|&v| v == holds[r as usize]).expect("a row of the part");
                let (indices, values) = p.rows.row(at);
                rows.push(RowRef::Sparse { indices, values });
            }
            Ok(rows)
        };
        GatPart::decode(m, p.rows.dim, 1, mine, own)
    }

    /// The receiver of `parts_round_trip...`: it holds ids 13 and 11 (its
    /// input rows 0 and 1, the part's rows 3 and 1).
    fn decode(m: &[u8]) -> Result<GatPart, TrainError> {
        decode_as(m, &part(), &[13, 11])
    }

    #[test]
    fn parts_round_trip_without_the_rows_the_receiver_holds_and_damaged_ones_are_refused() {
        let p = part();
        let held = [false, true, false, true];
        let m = p.encode(&held);
        assert_eq!(m.len() as u64, p.message_bytes(&held));
        let nnz = |i: usize| p.rows.row(i).0.len();
        // Rows 1 and 3 cross as their ids alone.
        assert_eq!(m.len(), 4 * (2 + 2 + 5 + 4 + 1 + 2) + 8 * (nnz(0) + nnz(2)));
        assert_eq!(p.encode(&[false; 4]).len() - m.len(), 4 * 2 + 8 * (nnz(1) + nnz(3)));
        assert_eq!(decode(&m).unwrap(), p);
        for cut in [0, 3, 4, 8, 20, m.len() - 4] {
            assert!(decode(&m[..cut]).is_err(), "a message cut to {cut} bytes");
        }
        // A message that sends a row the receiver holds, or leaves out one it lacks, is refused.
        assert!(decode(&p.encode(&[false; 4])).is_err());
        assert!(decode(&p.encode(&[true, true, false, true])).is_err());
        let mut huge = m.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        let mut far = m.clone();
        far[12..16].copy_from_slice(&4u32.to_le_bytes());
        assert!(decode(&far).unwrap_err().to_string().contains("source 4"));
        // The bitmap's word follows the 4 ids (word 13); a bit past the 4th row is refused.
        let mut past = m.clone();
        past[52..56].copy_from_slice(&(0b101u32 | 1 << 4).to_le_bytes());
        assert!(decode(&past).unwrap_err().to_string().contains("past its 4"));
    }

    #[test]
    fn a_receiver_holding_other_rows_of_the_same_size_refuses_the_message() {
        // Every row has one non-zero, so a receiver that holds rows 0 and 2
        // where the sender thinks it holds 1 and 3 gets a message of just the
        // size it expects: only the bitmap shows the mix-up.
        let dense: Vec<f32> = (0..4 * 5).map(|i| if i % 5 == i / 5 { 1.0 + i as f32 } else { 0.0 }).collect();
        let p = GatPart { rows: CsrRows::from_dense(&dense, 5), ..part() };
        let m = p.encode(&[false, true, false, true]);
        assert_eq!(decode_as(&m, &p, &[13, 11]).unwrap(), p);
        let err = decode_as(&m, &p, &[10, 12]).unwrap_err().to_string();
        assert!(err.contains("worker 1's attention rows: it sent vertex 10's row, which this worker holds"), "{err}");
        assert!(err.contains("same partition and graph"), "{err}");
        let err = decode_as(&m, &p, &[13]).unwrap_err().to_string();
        assert!(err.contains("it left out vertex 11's row, which this worker does not hold"), "{err}");
    }

    #[test]
    fn a_peer_holds_its_own_vertices_and_their_in_neighbours_and_the_walk_is_kept_for_the_same_rows() {
        // Vertices 14 and 15 are worker 1's; 14 reads 12, and 13 reads 15.
        let graph = crate::graph::Csr::from_edges(16, &[(12, 14), (15, 13), (10, 11)], false);
        let owner = |v: u32| usize::from(v >= 14);
        let p = part();
        let want = vec![vec![true; 4], vec![false, false, true, false]];
        assert_eq!(p.held_by_peers(graph.view(), owner, 2), want);
        let holders = Holders::default();
        let first = holders.of(&p, graph.view(), owner, 2);
        assert_eq!(&*first, &want[..]);
        assert!(Rc::ptr_eq(&first, &holders.of(&p, graph.view(), owner, 2)), "the same rows are not walked again");
        let other = GatPart { ids: vec![10, 11, 12, 14], ..part() };
        let again = holders.of(&other, graph.view(), owner, 2);
        assert!(!Rc::ptr_eq(&first, &again));
        assert_eq!(&*again, &[vec![true, true, true, false], vec![false, false, true, true]][..]);
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
