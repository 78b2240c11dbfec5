//! `train --strategy neutronstar --dry-run`: the NeutronStar epoch time as
//! the LeapGNN paper estimated it (the artifact's
//! `dgl_neutronstar_statistic.py` and `log_analys.py`), from a model-centric
//! run of the same configuration. NeutronStar fetches the embedding of a
//! dependency owned by another worker instead of computing its subtree, so:
//!
//! T_NS = T_total - T_comp + T_comp (n' + e') / (n + e) + c_fetch (n - n') hidden / feature_dim
//!
//! n, e: nodes and edges of the computation graphs (every layer's nodes:
//! block 0's sources and each block's destinations); n', e' after removing
//! every block's destinations owned by another worker with their in-edges;
//! c_fetch: the run's gather seconds per remote row. Like the paper, it keeps
//! the model-centric feature fetch time. An estimate, never a run.

use super::{TrainConfig, TrainError, TrainMode, splits};
use crate::DataDir;
use crate::format::{DatasetFile, ManifestFile};
use crate::metrics::RunSummary;
use crate::sample::{Blocks, NeighborSampler, NodeMap};

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NeutronStarReport {
    pub strategy: &'static str,
    /// Always true: nothing here ran NeutronStar.
    pub estimate: bool,
    /// The model-centric run the estimate is made from.
    pub run: String,
    pub dataset: String,
    pub workers: usize,
    pub partition: String,
    pub epochs: u64,
    pub hidden: usize,
    pub feature_dim: usize,
    /// Computation-graph nodes and edges over every iteration and worker of the run.
    pub n: u64,
    pub e: u64,
    pub n_prime: u64,
    pub e_prime: u64,
    /// Remote rows the run fetched, and its gather seconds per remote row.
    pub remote_rows: u64,
    pub c_fetch: f64,
    /// Training seconds of the run (its epochs, evaluation excluded).
    pub t_total: f64,
    /// Compute seconds, mean over the workers.
    pub t_comp: f64,
    /// T_NS over the whole run.
    pub t_ns: f64,
    pub t_total_per_epoch: f64,
    pub t_comp_per_epoch: f64,
    pub estimate_per_epoch: f64,
}

/// The computation-graph counts of one set of blocks trained by `worker`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphCounts {
    pub n: u64,
    pub e: u64,
    pub n_prime: u64,
    pub e_prime: u64,
}

impl GraphCounts {
    /// Adds `blocks` (input layer first) as trained by `worker`, `owner`
    /// mapping a vertex to its worker.
    pub fn add(&mut self, blocks: &Blocks, worker: usize, owner: impl Fn(u32) -> usize) {
        let Some(first) = blocks.layers.first() else { return };
        self.n += first.src.len() as u64;
        self.n_prime += first.src.len() as u64;
        for b in &blocks.layers {
            let (mut cut, mut cut_edges) = (0u64, 0u64);
            for (d, &v) in b.dst().iter().enumerate() {
                if owner(v) != worker {
                    cut += 1;
                    cut_edges += (b.indptr[d + 1] - b.indptr[d]) as u64;
                }
            }
            let edges = b.num_edges() as u64;
            self.n += b.num_dst as u64;
            self.e += edges;
            self.n_prime += b.num_dst as u64 - cut;
            self.e_prime += edges - cut_edges;
        }
    }
}

/// Trains `cfg` model-centric with `train` (one process or several), then
/// estimates NeutronStar from the run's records and its replayed batches.
pub fn estimate(
    data: &DataDir,
    cfg: TrainConfig,
    train: impl FnOnce(&DataDir, TrainConfig) -> anyhow::Result<RunSummary>,
) -> Result<NeutronStarReport, TrainError> {
    if cfg.mode != TrainMode::Minibatch {
        return Err(crate::BadInput::new(
            "--mode full-graph with --strategy neutronstar: the estimate prunes sampled computation graphs; \
             omit --mode",
        )
        .into());
    }
    cfg.check()?;
    let path = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = DatasetFile::open_verified(&path)?;
    let [train_ids, _, _] = splits(&ds, &cfg.dataset)?;
    let world = cfg.workers;
    let (owners, partition) = if world > 1 {
        let dir = crate::partition::ensure_partition(data, &cfg.dataset, cfg.partition_method(), world, cfg.seed)
            .map_err(TrainError::Dataset)?;
        (ManifestFile::open(&dir)?.node_part().to_vec(), format!("{}-{world}", cfg.partition_method()))
    } else {
        (vec![0u16; ds.num_nodes()], "none".to_string())
    };

    let summary = train(data, cfg.clone()).map_err(TrainError::Dataset)?;
    let records = crate::cost::validate::read_metrics(&data.run_dir(&summary.run).join("metrics.jsonl"))?;
    let t_total: f64 = summary.history.iter().map(|e| e.seconds).sum();
    let t_comp = records.iter().map(|r| r.compute_seconds).sum::<f64>() / world as f64;
    let remote_rows: u64 = records.iter().map(|r| r.rows.remote).sum();
    let gather: f64 = records.iter().map(|r| r.gather_seconds).sum();
    let c_fetch = if remote_rows > 0 { gather / remote_rows as f64 } else { 0.0 };

    // The run's batches, replayed: the sampler is seeded by (seed, epoch, roots).
    let sampler = NeighborSampler::new(ds.graph(), cfg.fanouts.clone(), cfg.seed);
    let mut map = NodeMap::new(ds.num_nodes());
    let mut counts = GraphCounts::default();
    let epochs = summary.history.len() as u64;
    for epoch in 0..epochs {
        let order = crate::schedule::epoch_order(&train_ids, cfg.seed, epoch);
        let sched = crate::schedule::Schedule::new(&order, world, cfg.batch_size);
        for i in 0..sched.iterations() {
            for (w, roots) in sched.workers(i).into_iter().enumerate() {
                let blocks = sampler.sample(roots, epoch, &mut map);
                counts.add(&blocks, w, |v| owners[v as usize] as usize);
            }
        }
    }

    let feature_dim = ds.feature_dim();
    let t_ns = ns_time(t_total, t_comp, &counts, c_fetch, cfg.hidden as f64 / feature_dim.max(1) as f64);
    let per = |x: f64| x / epochs.max(1) as f64;
    Ok(NeutronStarReport {
        strategy: "neutronstar",
        estimate: true,
        run: summary.run.clone(),
        dataset: cfg.dataset.clone(),
        workers: world,
        partition,
        epochs,
        hidden: cfg.hidden,
        feature_dim,
        n: counts.n,
        e: counts.e,
        n_prime: counts.n_prime,
        e_prime: counts.e_prime,
        remote_rows,
        c_fetch,
        t_total,
        t_comp,
        t_ns,
        t_total_per_epoch: per(t_total),
        t_comp_per_epoch: per(t_comp),
        estimate_per_epoch: per(t_ns),
    })
}

/// The paper's formula; `width` = hidden / feature_dim (an embedding row
/// costs that fraction of a feature row to fetch).
pub fn ns_time(t_total: f64, t_comp: f64, c: &GraphCounts, c_fetch: f64, width: f64) -> f64 {
    let kept = if c.n + c.e == 0 { 1.0 } else { (c.n_prime + c.e_prime) as f64 / (c.n + c.e) as f64 };
    t_total - t_comp + t_comp * kept + c_fetch * (c.n - c.n_prime) as f64 * width
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Block;

    #[test]
    fn remote_destinations_leave_with_their_in_edges() {
        // Layer 0: dst {0, 1} from src {0, 1, 2, 3}; layer 1: dst {0} from {0, 1}.
        let b0 = Block { src: vec![0, 1, 2, 3], num_dst: 2, indptr: vec![0, 2, 5], indices: vec![2, 3, 0, 2, 3] };
        let b1 = Block { src: vec![0, 1], num_dst: 1, indptr: vec![0, 1], indices: vec![1] };
        let blocks = Blocks { layers: vec![b0, b1] };
        let mut c = GraphCounts::default();
        // Worker 0 owns even vertices: vertex 1 (3 in-edges in layer 0) is remote.
        c.add(&blocks, 0, |v| (v % 2) as usize);
        assert_eq!(c, GraphCounts { n: 4 + 2 + 1, e: 5 + 1, n_prime: 4 + 1 + 1, e_prime: 2 + 1 });
        let t = ns_time(10.0, 4.0, &c, 0.5, 0.25);
        assert!((t - (6.0 + 4.0 * 9.0 / 13.0 + 0.5 * 1.0 * 0.25)).abs() < 1e-12);
    }
}
