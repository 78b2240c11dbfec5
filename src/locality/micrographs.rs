//! Data locality of micrographs: for each root, the share of its sampled
//! vertices that its own server owns, under every partition at once.

use super::owners::OwnerTable;
use super::sampler::Sampler;
use super::scratch::Pool;
use crate::sample::LayerNodes;
use rayon::prelude::*;

/// Fixed-point scale of a per-micrograph ratio. Sums of ratios are integers, so
/// a parallel sum is exact and the result does not depend on the thread count.
pub const RATIO_ONE: u64 = 1 << 32;

/// Per-column sums over micrographs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalitySums {
    /// Sum of per-micrograph locality ratios, in units of `1 / RATIO_ONE`.
    pub ratio: Vec<u64>,
    /// Micrographs that sampled at least one vertex besides the root.
    pub micrographs: Vec<u64>,
}

impl LocalitySums {
    fn zero(columns: usize) -> Self {
        LocalitySums { ratio: vec![0; columns], micrographs: vec![0; columns] }
    }
    fn merge(mut self, o: LocalitySums) -> Self {
        self.ratio.iter_mut().zip(&o.ratio).for_each(|(a, b)| *a += b);
        self.micrographs.iter_mut().zip(&o.micrographs).for_each(|(a, b)| *a += b);
        self
    }
    /// Mean locality of column `c` in percent (0 when no micrograph sampled anything).
    pub fn pct(&self, c: usize) -> f64 {
        if self.micrographs[c] == 0 {
            return 0.0;
        }
        100.0 * self.ratio[c] as f64 / RATIO_ONE as f64 / self.micrographs[c] as f64
    }
}

/// Entries of a micrograph: for every layer, its de-duplicated source vertices
/// (as a DGL NodeFlow layer; a vertex reached at hop h is a source of every
/// layer below it), every copy of the root left out. Returns (entries,
/// entries owned by the root's server) per column into `local`.
fn count(nodes: &LayerNodes, owners: &OwnerTable, local: &mut [u64]) -> u64 {
    let ends = nodes.ends();
    let layers = nodes.layers();
    let all = nodes.layer(0);
    let home = owners.of(all[0]);
    local.fill(0);
    let mut entries = 0;
    for l in (0..layers).rev() {
        // The vertices first reached for layer l are sources of layers 0..=l.
        let weight = l as u64 + 1;
        let first = ends[l + 1].max(1);
        for &v in &all[first..ends[l]] {
            for ((acc, &o), &h) in local.iter_mut().zip(owners.of(v)).zip(home) {
                *acc += weight * u64::from(o == h);
            }
        }
        entries += (ends[l] - 1) as u64;
    }
    entries
}

/// Locality sums of the micrographs of `roots[j]` for epoch `epoch`, where
/// column `c` counts the roots `j < limits[c]`.
pub fn micrograph_locality(
    sampler: &Sampler<'_>,
    roots: &[u32],
    limits: &[usize],
    owners: &OwnerTable,
    epoch: u64,
    pool: &Pool<LayerNodes>,
) -> LocalitySums {
    let columns = owners.columns();
    let todo = limits.iter().copied().max().unwrap_or(0).min(roots.len());
    roots[..todo]
        .par_iter()
        .enumerate()
        .with_min_len(16)
        .fold(
            || (pool.get(), vec![0u64; columns], LocalitySums::zero(columns)),
            |(mut nodes, mut local, mut sums), (j, &root)| {
                sampler.nodes(&[root], epoch, &mut nodes);
                let entries = count(&nodes, owners, &mut local);
                if entries > 0 {
                    for c in (0..columns).filter(|&c| j < limits[c]) {
                        sums.ratio[c] += ((local[c] as u128 * RATIO_ONE as u128) / entries as u128) as u64;
                        sums.micrographs[c] += 1;
                    }
                }
                (nodes, local, sums)
            },
        )
        .map(|(_, _, sums)| sums)
        .reduce(|| LocalitySums::zero(columns), LocalitySums::merge)
}
