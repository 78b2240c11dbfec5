//! Graph topology in CSR by destination: `in_neighbors(v)` are the sources of
//! edges into `v`, which is what neighbour sampling draws from (as DGL does).

use rayon::prelude::*;

/// A borrowed CSR; backed by an mmapped archive or by an owned `Csr`.
#[derive(Clone, Copy, Debug)]
pub struct CsrView<'a> {
    pub indptr: &'a [u64],
    pub indices: &'a [u32],
}

impl<'a> CsrView<'a> {
    pub fn num_nodes(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }
    pub fn num_edges(&self) -> usize {
        self.indices.len()
    }
    #[inline]
    pub fn in_neighbors(&self, v: u32) -> &'a [u32] {
        let v = v as usize;
        &self.indices[self.indptr[v] as usize..self.indptr[v + 1] as usize]
    }
    #[inline]
    pub fn in_degree(&self, v: u32) -> usize {
        let v = v as usize;
        (self.indptr[v + 1] - self.indptr[v]) as usize
    }

    /// The simple undirected graph underneath: every edge stored in both
    /// directions, self loops and duplicates dropped (what METIS requires).
    pub fn to_undirected(&self) -> Csr {
        let mut keys: Vec<u64> = (0..self.num_nodes() as u32)
            .into_par_iter()
            .flat_map_iter(|v| {
                self.in_neighbors(v).iter().filter(move |&&u| u != v).map(move |&u| undirected_key(u, v))
            })
            .collect();
        keys.par_sort_unstable();
        keys.dedup();
        Csr::from_sorted_undirected(self.num_nodes(), &keys)
    }

    /// O(n + m) check that offsets are monotone and every id is a node: after it,
    /// `in_neighbors` can never index out of bounds.
    pub fn check(&self) -> Result<(), String> {
        let n = self.num_nodes();
        if self.indptr.is_empty() {
            return Err("CSR offsets are empty".into());
        }
        if self.indptr[0] != 0 {
            return Err(format!("CSR offsets start at {}, not 0", self.indptr[0]));
        }
        if let Some(i) = self.indptr.windows(2).position(|w| w[0] > w[1]) {
            return Err(format!("CSR offsets decrease at node {i}"));
        }
        if self.indptr[n] != self.indices.len() as u64 {
            return Err(format!("CSR offsets end at {}, but there are {} edges", self.indptr[n], self.indices.len()));
        }
        if let Some(pos) = self.indices.iter().position(|&u| u as usize >= n) {
            return Err(format!("edge {pos} names node {} but there are {n} nodes", self.indices[pos]));
        }
        Ok(())
    }
}

/// An owned CSR by destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    pub indptr: Vec<u64>,
    pub indices: Vec<u32>,
}

impl Csr {
    pub fn view(&self) -> CsrView<'_> {
        CsrView { indptr: &self.indptr, indices: &self.indices }
    }

    /// Builds the CSR by destination from (src, dst) pairs: neighbours of each
    /// destination sorted and de-duplicated; self loops kept unless `drop_self_loops`.
    /// Counting sort: O(n + m), two passes, no per-node allocation.
    pub fn from_edges(num_nodes: usize, edges: &[(u32, u32)], drop_self_loops: bool) -> Csr {
        let mut counts = vec![0u64; num_nodes + 1];
        for &(s, d) in edges {
            if !(drop_self_loops && s == d) {
                counts[d as usize + 1] += 1;
            }
        }
        for i in 0..num_nodes {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut indices = vec![0u32; counts[num_nodes] as usize];
        for &(s, d) in edges {
            if !(drop_self_loops && s == d) {
                let slot = &mut fill[d as usize];
                indices[*slot as usize] = s;
                *slot += 1;
            }
        }
        // Sort and de-duplicate each row in place, compacting as we go.
        let mut indptr = vec![0u64; num_nodes + 1];
        let mut write = 0usize;
        for v in 0..num_nodes {
            let (lo, hi) = (counts[v] as usize, counts[v + 1] as usize);
            indices[lo..hi].sort_unstable();
            let mut last = None;
            for i in lo..hi {
                let u = indices[i];
                if last != Some(u) {
                    indices[write] = u;
                    write += 1;
                    last = Some(u);
                }
            }
            indptr[v + 1] = write as u64;
        }
        indices.truncate(write);
        indices.shrink_to_fit();
        Csr { indptr, indices }
    }

    /// The symmetric CSR of an undirected graph given as sorted, de-duplicated keys
    /// `(u << 32) | v` with `u < v` (see `undirected_key`): each edge is stored in
    /// both directions. Filling rows in key order leaves every row sorted (row x
    /// receives its smaller neighbours while the keys of those neighbours go by,
    /// then its larger ones from its own keys), so no per-row sort is needed.
    pub fn from_sorted_undirected(num_nodes: usize, keys: &[u64]) -> Csr {
        let mut indptr = vec![0u64; num_nodes + 1];
        for &k in keys {
            indptr[(k >> 32) as usize + 1] += 1;
            indptr[(k as u32) as usize + 1] += 1;
        }
        for i in 0..num_nodes {
            indptr[i + 1] += indptr[i];
        }
        let mut fill = indptr[..num_nodes].to_vec();
        let mut indices = vec![0u32; keys.len() * 2];
        for &k in keys {
            let (u, v) = ((k >> 32) as u32, k as u32);
            indices[fill[v as usize] as usize] = u;
            fill[v as usize] += 1;
            indices[fill[u as usize] as usize] = v;
            fill[u as usize] += 1;
        }
        Csr { indptr, indices }
    }
}

/// The key of the undirected edge {a, b} (a != b) for `Csr::from_sorted_undirected`.
#[inline]
pub fn undirected_key(a: u32, b: u32) -> u64 {
    let (u, v) = if a < b { (a, b) } else { (b, a) };
    ((u as u64) << 32) | v as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_edges_sorts_dedups_and_drops_self_loops() {
        let csr = Csr::from_edges(3, &[(1, 0), (2, 0), (1, 0), (0, 0), (0, 2)], true);
        assert_eq!(csr.view().in_neighbors(0), &[1, 2]);
        assert_eq!(csr.view().in_neighbors(1), &[] as &[u32]);
        assert_eq!(csr.view().in_neighbors(2), &[0]);
        assert!(csr.view().check().is_ok());
        let keep = Csr::from_edges(3, &[(0, 0)], false);
        assert_eq!(keep.view().in_neighbors(0), &[0]);
    }

    #[test]
    fn check_rejects_out_of_range_ids() {
        let bad = Csr { indptr: vec![0, 1, 1], indices: vec![5] };
        assert!(bad.view().check().unwrap_err().contains("node 5"));
        let dec = Csr { indptr: vec![0, 2, 1], indices: vec![0, 1] };
        assert!(dec.view().check().is_err());
    }

    #[test]
    fn from_sorted_undirected_stores_both_directions_sorted() {
        let mut keys = vec![undirected_key(2, 0), undirected_key(1, 2), undirected_key(0, 3), undirected_key(3, 2)];
        keys.sort_unstable();
        let csr = Csr::from_sorted_undirected(4, &keys);
        let g = csr.view();
        assert_eq!(g.in_neighbors(0), &[2, 3]);
        assert_eq!(g.in_neighbors(1), &[2]);
        assert_eq!(g.in_neighbors(2), &[0, 1, 3]);
        assert_eq!(g.in_neighbors(3), &[0, 2]);
        assert!(g.check().is_ok());
    }

    #[test]
    fn to_undirected_symmetrises_and_drops_loops_and_duplicates() {
        let directed = Csr::from_edges(4, &[(0, 1), (1, 0), (2, 1), (3, 3), (3, 0)], false);
        let g = directed.view().to_undirected();
        assert_eq!(g.view().in_neighbors(0), &[1, 3]);
        assert_eq!(g.view().in_neighbors(1), &[0, 2]);
        assert_eq!(g.view().in_neighbors(2), &[1]);
        assert_eq!(g.view().in_neighbors(3), &[0]);
    }
}
