use super::Interner;

/// One sampled layer: destination vertices, their sampled source vertices and
/// the edges between them, as a CSR by destination over source positions.
///
/// `src[..num_dst]` are the destination vertices themselves, in order (as in
/// DGL blocks), so a layer can read a destination's own previous-layer row.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Block {
    /// Global ids; de-duplicated; destinations first.
    pub src: Vec<u32>,
    pub num_dst: usize,
    /// `indptr[d]..indptr[d + 1]` are destination `d`'s edges.
    pub indptr: Vec<u32>,
    /// Positions into `src`.
    pub indices: Vec<u32>,
}

impl Block {
    pub fn num_src(&self) -> usize {
        self.src.len()
    }
    pub fn num_edges(&self) -> usize {
        self.indices.len()
    }
    pub fn dst(&self) -> &[u32] {
        &self.src[..self.num_dst]
    }
    #[inline]
    pub fn edges_of(&self, d: usize) -> &[u32] {
        &self.indices[self.indptr[d] as usize..self.indptr[d + 1] as usize]
    }

    /// Builds a block from unique destinations and their neighbours given as
    /// global ids (`nbrs[indptr[d]..indptr[d+1]]`), relabelling neighbours to
    /// source positions in place. `map` must be empty and is left empty.
    pub fn relabel(dst: &[u32], indptr: Vec<u32>, mut nbrs: Vec<u32>, map: &mut impl Interner) -> Block {
        let mut src = Vec::with_capacity(dst.len() + nbrs.len() / 2);
        for &v in dst {
            map.intern(v, &mut src);
        }
        assert_eq!(src.len(), dst.len(), "block destinations must be distinct");
        for u in nbrs.iter_mut() {
            *u = map.intern(*u, &mut src);
        }
        map.clear(&src);
        Block { src, num_dst: dst.len(), indptr, indices: nbrs }
    }
}

/// The sampled computation graph of a set of roots: `layers[0]` feeds the first
/// GNN layer (its `src` are the input vertices whose features are gathered),
/// `layers[L-1]` outputs the roots. Each layer's sources are the previous
/// layer's destinations: `layers[l].dst() == layers[l + 1].src`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Blocks {
    pub layers: Vec<Block>,
}

impl Blocks {
    /// Vertices whose input features the first layer reads.
    pub fn input_nodes(&self) -> &[u32] {
        &self.layers[0].src
    }
    pub fn roots(&self) -> &[u32] {
        self.layers.last().map(|b| b.dst()).unwrap_or(&[])
    }
    pub fn num_edges(&self) -> usize {
        self.layers.iter().map(Block::num_edges).sum()
    }
}
