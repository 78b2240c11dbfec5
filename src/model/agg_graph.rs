//! The aggregation structure of one block layer, as the CSR kernels read it.

use crate::sample::Block;
use std::sync::{Arc, OnceLock};

/// CSR by destination over source rows, with optional constant per-edge
/// weights; its transpose (needed by backward passes) is built once, lazily.
#[derive(Debug)]
pub struct AggGraph {
    num_dst: usize,
    num_src: usize,
    indptr: Vec<u32>,
    indices: Vec<u32>,
    weights: Option<Vec<f32>>,
    /// How much each source row counts in batch statistics (None: each
    /// destination's own row once, the other rows not at all).
    src_weights: Option<Vec<f32>>,
    transposed: OnceLock<Transposed>,
    edge_dst: OnceLock<Vec<u32>>,
    edge_rows: OnceLock<Arc<AggGraph>>,
}

/// The CSR of the reversed edges: for each source row its destinations and the
/// ids of the edges (so per-edge weights can be looked up).
#[derive(Debug)]
pub(crate) struct Transposed {
    pub indptr: Vec<u32>,
    pub dst: Vec<u32>,
    pub eid: Vec<u32>,
}

impl AggGraph {
    /// Panics if the CSR is inconsistent: callers build it from sampled blocks.
    pub fn new(num_dst: usize, num_src: usize, indptr: Vec<u32>, indices: Vec<u32>, weights: Option<Vec<f32>>) -> Self {
        assert_eq!(indptr.len(), num_dst + 1, "indptr length");
        assert_eq!(*indptr.last().unwrap() as usize, indices.len(), "indptr end");
        assert!(indices.iter().all(|&s| (s as usize) < num_src), "source index out of range");
        if let Some(w) = &weights {
            assert_eq!(w.len(), indices.len(), "one weight per edge");
        }
        AggGraph {
            num_dst,
            num_src,
            indptr,
            indices,
            weights,
            src_weights: None,
            transposed: OnceLock::new(),
            edge_dst: OnceLock::new(),
            edge_rows: OnceLock::new(),
        }
    }

    /// The block's edges, plus an edge from every destination to itself when
    /// `self_loops` (a destination is source row `d`, blocks put them first).
    pub fn from_block(b: &Block, self_loops: bool) -> Self {
        if !self_loops {
            return Self::new(b.num_dst, b.num_src(), b.indptr.clone(), b.indices.clone(), None);
        }
        let mut indptr = Vec::with_capacity(b.num_dst + 1);
        let mut indices = Vec::with_capacity(b.num_edges() + b.num_dst);
        indptr.push(0);
        for d in 0..b.num_dst {
            indices.extend_from_slice(b.edges_of(d));
            indices.push(d as u32);
            // A block's edges and self loops fit u32 offsets: a plan's by
            // `HaloPlan::derive`, a sampled one's by far (its fanouts).
            indptr.push(u32::try_from(indices.len()).expect("a block's edges and self loops exceed 2^32 - 1"));
        }
        Self::new(b.num_dst, b.num_src(), indptr, indices, None)
    }

    /// Sets each edge's weight to `f(dst, src)`.
    pub fn with_weights(mut self, f: impl Fn(usize, usize) -> f32) -> Self {
        let mut w = Vec::with_capacity(self.indices.len());
        for d in 0..self.num_dst {
            w.extend(self.row(d).iter().map(|&s| f(d, s as usize)));
        }
        self.weights = Some(w);
        self
    }

    /// Weights 1/in-degree: the weighted sum becomes a mean.
    pub fn with_mean_weights(self) -> Self {
        let deg: Vec<u32> = self.indptr.windows(2).map(|w| w[1] - w[0]).collect();
        self.with_weights(|d, _| 1.0 / deg[d] as f32)
    }

    /// Sets how much each source row counts in batch statistics.
    pub fn with_src_weights(mut self, w: Vec<f32>) -> Self {
        assert_eq!(w.len(), self.num_src, "one weight per source row");
        self.src_weights = Some(w);
        self
    }

    /// How much each source row counts in batch statistics: as set, else 1
    /// for each destination's own row (the first `num_dst`) and 0 for the
    /// rest (in the full-graph engine, halo rows another worker owns).
    pub fn src_weights(&self) -> std::borrow::Cow<'_, [f32]> {
        match &self.src_weights {
            Some(w) => std::borrow::Cow::Borrowed(w),
            None => {
                std::borrow::Cow::Owned((0..self.num_src).map(|s| if s < self.num_dst { 1.0 } else { 0.0 }).collect())
            }
        }
    }

    pub fn num_dst(&self) -> usize {
        self.num_dst
    }
    pub fn num_src(&self) -> usize {
        self.num_src
    }
    pub fn num_edges(&self) -> usize {
        self.indices.len()
    }
    pub fn indptr(&self) -> &[u32] {
        &self.indptr
    }
    /// Source row of each edge.
    pub fn edge_src(&self) -> &[u32] {
        &self.indices
    }
    pub fn weights(&self) -> Option<&[f32]> {
        self.weights.as_deref()
    }
    #[inline]
    pub fn row(&self, d: usize) -> &[u32] {
        &self.indices[self.indptr[d] as usize..self.indptr[d + 1] as usize]
    }
    pub fn max_degree(&self) -> usize {
        self.indptr.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
    }

    /// Destination row of each edge.
    pub fn edge_dst(&self) -> &[u32] {
        self.edge_dst.get_or_init(|| {
            let mut out = Vec::with_capacity(self.indices.len());
            for d in 0..self.num_dst {
                out.extend(std::iter::repeat_n(d as u32, self.row(d).len()));
            }
            out
        })
    }

    /// The same rows over the edges themselves (source row of edge e is e): the
    /// weighted sum over it reduces a per-edge tensor to its destinations.
    pub fn edge_rows(&self) -> &Arc<AggGraph> {
        self.edge_rows.get_or_init(|| {
            Arc::new(AggGraph::new(
                self.num_dst,
                self.num_edges(),
                self.indptr.clone(),
                (0..self.num_edges() as u32).collect(),
                None,
            ))
        })
    }

    /// Destinations `dst` of this graph, over all of its sources, with their
    /// edges' weights.
    pub fn dst_slice(&self, dst: std::ops::Range<usize>) -> AggGraph {
        let (first, end) = (self.indptr[dst.start], self.indptr[dst.end]);
        let indptr = self.indptr[dst.start..=dst.end].iter().map(|&p| p - first).collect();
        let edges = first as usize..end as usize;
        let weights = self.weights.as_ref().map(|w| w[edges.clone()].to_vec());
        AggGraph::new(dst.len(), self.num_src, indptr, self.indices[edges].to_vec(), weights)
    }

    pub(crate) fn transposed(&self) -> &Transposed {
        self.transposed.get_or_init(|| {
            // Counting sort of the edges by source; stable, so rows stay in edge order.
            let mut indptr = vec![0u32; self.num_src + 1];
            for &s in &self.indices {
                indptr[s as usize + 1] += 1;
            }
            for i in 0..self.num_src {
                indptr[i + 1] += indptr[i];
            }
            let mut fill = indptr.clone();
            let mut dst = vec![0u32; self.indices.len()];
            let mut eid = vec![0u32; self.indices.len()];
            for d in 0..self.num_dst {
                for e in self.indptr[d]..self.indptr[d + 1] {
                    let s = self.indices[e as usize] as usize;
                    let slot = fill[s] as usize;
                    dst[slot] = d as u32;
                    eid[slot] = e;
                    fill[s] += 1;
                }
            }
            Transposed { indptr, dst, eid }
        })
    }
}
