//! Before a full-graph run starts: its peak memory per worker (layer inputs
//! and outputs of owned + halo rows for every layer, their gradients, the
//! aggregation graph, the optimizer), checked against what the machine has.
//! After: each worker's peak RSS for the summary.

use crate::BadInput;
use crate::format::DatasetFile;
use crate::graph::CsrView;
use crate::model::{GatHeads, ModelKind, ModelSpec};
use crate::train::TrainConfig;

/// Vertices, halo and in-edges of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub owned: u64,
    pub halo: u64,
    pub edges: u64,
}

/// The shape of every worker's share, from one pass over the in-edges.
pub fn shapes(graph: CsrView<'_>, owners: Option<&[u16]>, world: usize) -> Vec<Shape> {
    let n = graph.num_nodes();
    let owner = |v: u32| owners.map_or(0, |o| o[v as usize] as usize);
    let mut out = vec![Shape::default(); world];
    // One bit per (worker, vertex): already counted in that worker's halo.
    let words = n.div_ceil(64);
    let mut seen = vec![0u64; words * world];
    for v in 0..n as u32 {
        let p = owner(v);
        let s = &mut out[p];
        s.owned += 1;
        let nbrs = graph.in_neighbors(v);
        s.edges += nbrs.len() as u64;
        for &u in nbrs {
            if owner(u) != p {
                let (word, bit) = (p * words + u as usize / 64, 1u64 << (u % 64));
                if seen[word] & bit == 0 {
                    seen[word] |= bit;
                    s.halo += 1;
                }
            }
        }
    }
    out
}

/// Peak bytes of one worker training `spec` full-graph with `params` weights.
pub fn estimate(s: Shape, spec: &ModelSpec, params: usize) -> u64 {
    let rows = s.owned + s.halo;
    let f = 4u64;
    // Cached input rows and the dropped-out copy the first layer reads.
    let mut b = 2 * rows * spec.in_dim as u64 * f;
    let heads = if spec.kind == ModelKind::Gat { spec.heads as u64 } else { 1 };
    for l in 0..spec.layers {
        let d_in = if l == 0 { spec.in_dim } else { spec.hidden } as u64;
        let d_out = if l + 1 == spec.layers { spec.classes } else { spec.hidden } as u64;
        // A hidden input: the exchanged rows and their gradient.
        if l > 0 {
            b += 2 * rows * d_in * f;
        }
        // Aggregate, transform and output (kept for backward), and their
        // gradients; GAT with averaged heads transforms to every head's full width.
        let wide = match (spec.kind, spec.gat_heads) {
            (ModelKind::Gat, GatHeads::Mean) => heads * d_out,
            _ => d_out,
        };
        b += 3 * s.owned * (d_in + wide) * f;
        // GAT: per-edge scores and attention per head, kept for backward.
        b += 3 * s.edges * heads * f;
    }
    // The aggregation graph and its transpose (index, weight and edge id per edge).
    b += 4 * (s.edges + s.owned) * 4 + rows * 4;
    // Values, gradient and two optimizer slots; the flat gradient of every layer's backward.
    b += (4 + spec.layers as u64) * params as u64 * f;
    b
}

/// Refuses a full-graph run of `cfg` on `ds` whose workers (all on this
/// machine) will not fit: together in `limit` bytes when given
/// (`--memory-limit-mb`), else together in MemAvailable and each within the
/// address-space limit (RLIMIT_AS), which every worker process inherits from
/// this one. Returns the per-worker estimates.
pub fn preflight(
    ds: &DatasetFile,
    cfg: &TrainConfig,
    owners: Option<&[u16]>,
    spec: &ModelSpec,
    params: usize,
    limit: Option<u64>,
) -> Result<Vec<u64>, BadInput> {
    let per_worker: Vec<u64> =
        shapes(ds.graph(), owners, cfg.workers.max(1)).into_iter().map(|s| estimate(s, spec, params)).collect();
    let budgets = match limit {
        Some(l) => vec![Budget { bytes: l, each: false, source: "--memory-limit-mb" }],
        None => {
            let together = crate::util::mem_available().map(|bytes| Budget {
                bytes,
                each: false,
                source: crate::util::MEM_AVAILABLE_SOURCE,
            });
            let each = crate::util::address_space_limit().map(|bytes| Budget {
                bytes,
                each: true,
                source: crate::util::RLIMIT_AS_SOURCE,
            });
            together.into_iter().chain(each).collect()
        }
    };
    if budgets.is_empty() {
        tracing::warn!(
            "cannot read MemAvailable from /proc/meminfo and no address-space limit is set: the full-graph memory estimate is not checked"
        );
    }
    // Of the budgets exceeded, name the tightest (as util::usable_memory does for one process).
    match budgets.into_iter().filter(|b| !b.fits(&per_worker)).min_by_key(|b| b.bytes) {
        Some(b) => Err(b.refusal(&per_worker)),
        None => Ok(per_worker),
    }
}

/// Memory the workers' estimates are held against.
struct Budget {
    bytes: u64,
    /// Per worker process (an address-space limit) rather than all of them together.
    each: bool,
    source: &'static str,
}

impl Budget {
    fn fits(&self, per_worker: &[u64]) -> bool {
        let need = if self.each { per_worker.iter().copied().max() } else { Some(per_worker.iter().sum()) };
        need.unwrap_or(0) <= self.bytes
    }

    fn refusal(&self, per_worker: &[u64]) -> BadInput {
        let mib = |b: u64| b.div_ceil(1 << 20);
        let total: u64 = per_worker.iter().sum();
        let (to, raise) = match self.each {
            true => (" to each worker", "raise the limit (ulimit -v, prlimit --as), "),
            false => ("", ""),
        };
        BadInput::new(format!(
            "--mode full-graph needs an estimated {} MiB ({} worker(s), the largest {} MiB) but {} MiB are available{to} ({}); \
             {raise}use more machines (--cluster), a smaller --hidden, or --mode minibatch",
            mib(total),
            per_worker.len(),
            mib(per_worker.iter().copied().max().unwrap_or(0)),
            mib(self.bytes),
            self.source
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Csr;
    use crate::train::fullgraph::HaloPlan;

    #[test]
    fn shapes_agree_with_the_halo_plans() {
        let edges: Vec<(u32, u32)> = (0..50u32).flat_map(|v| [(v, (v * 7 + 3) % 50), ((v * 11) % 50, v)]).collect();
        let csr = Csr::from_edges(50, &edges, true);
        let owners: Vec<u16> = (0..50).map(|v| (v % 4) as u16).collect();
        let shapes = shapes(csr.view(), Some(&owners), 4);
        for (r, s) in shapes.iter().enumerate() {
            let p = HaloPlan::derive(csr.view(), Some(&owners), r, 4);
            assert_eq!(
                *s,
                Shape { owned: p.owned().len() as u64, halo: p.halo().len() as u64, edges: p.block.num_edges() as u64 }
            );
        }
    }
}
