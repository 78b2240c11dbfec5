//! `train --strategy naive --dry-run`: what naive per-layer model migration
//! (the LeapGNN paper's strawman: at every layer each vertex's computation
//! moves to the owner of the vertex) would move for the batches `train`
//! would run, per epoch. Nothing is trained; the protocol and its exact word
//! counts are `locality::naive`'s (the same numbers `analyze-locality`
//! reports as `bytes_naive_migration`), here summed over whole epochs of the
//! run's own batches, partition, model widths and seed.

use super::{TrainConfig, TrainError, splits};
use crate::DataDir;
use crate::format::{DatasetFile, ManifestFile};
use crate::locality::{ModelDims, NaiveCost, NaiveScratch, OwnerTable, Trainer, naive_migration};
use crate::sample::{NeighborSampler, NodeMap};

/// One epoch's totals over all workers, in bytes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct NaiveEpoch {
    pub epoch: u64,
    pub iterations: u64,
    /// Model moves between servers.
    pub hops: u64,
    /// Everything naive migration moves: parameters + partial aggregates + intermediates.
    pub bytes: u64,
    pub bytes_params: u64,
    pub bytes_partial: u64,
    /// Backward tape carried along, and hidden states written back to their owners.
    pub bytes_intermediate: u64,
    /// For comparison: the input rows model-centric training of the same batches
    /// reads from other workers (no cache), x feature dim x 4.
    pub bytes_features_model_centric: u64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NaiveReport {
    pub strategy: &'static str,
    pub dataset: String,
    pub workers: usize,
    /// The partition costed (as `train` would use it), or "none" for one worker.
    pub partition: String,
    pub batch_size: usize,
    pub fanouts: String,
    pub in_dim: usize,
    pub hidden: usize,
    pub classes: usize,
    pub layers: usize,
    /// Parameters carried per hop (GraphSAGE-mean widths, as `analyze-locality` costs them).
    pub params: u64,
    /// Mean over `epochs` of the per-epoch totals.
    pub bytes_per_epoch: f64,
    pub bytes_features_model_centric_per_epoch: f64,
    pub epochs: Vec<NaiveEpoch>,
}

/// Costs `cfg.epochs` epochs of `cfg`'s batches under naive migration.
pub fn naive_dry_run(data: &DataDir, cfg: &TrainConfig) -> Result<NaiveReport, TrainError> {
    cfg.check()?;
    let path = crate::datasets::ensure_dataset(data, &cfg.dataset).map_err(TrainError::Dataset)?;
    let ds = DatasetFile::open_verified(&path)?;
    let [train, _, _] = splits(&ds, &cfg.dataset)?;
    let world = cfg.workers;
    let (owners, partition) = if world > 1 {
        let dir = crate::partition::ensure_partition(data, &cfg.dataset, cfg.partition_method(), world, cfg.seed)
            .map_err(TrainError::Dataset)?;
        let m = ManifestFile::open(&dir)?;
        (OwnerTable::new(&[m.node_part()]), format!("{}-{world}", cfg.partition_method()))
    } else {
        (OwnerTable::new(&[&vec![0u16; ds.num_nodes()]]), "none".to_string())
    };
    let dims = ModelDims {
        in_dim: ds.feature_dim(),
        hidden: cfg.hidden,
        classes: ds.num_classes(),
        layers: cfg.fanouts.layers(),
    };
    let sampler = NeighborSampler::new(ds.graph(), cfg.fanouts.clone(), cfg.seed);
    let mut map = NodeMap::new(ds.num_nodes());
    let mut scratch = NaiveScratch::default();
    let mut epochs = Vec::with_capacity(cfg.epochs as usize);
    for epoch in 0..cfg.epochs {
        let order = crate::schedule::epoch_order(&train, cfg.seed, epoch);
        let sched = crate::schedule::Schedule::new(&order, world, cfg.batch_size);
        let (mut cost, mut remote_bytes) = (NaiveCost::default(), 0u64);
        for i in 0..sched.iterations() {
            for (w, roots) in sched.workers(i).into_iter().enumerate() {
                let blocks = sampler.sample(roots, epoch, &mut map);
                let who = [Trainer { column: 0, home: w as u16, servers: world }];
                cost.add(naive_migration(&blocks, &owners, &who, &dims, &mut scratch)[0]);
                let remote = blocks.input_nodes().iter().filter(|&&v| owners.owner(v, 0) as usize != w);
                remote_bytes += remote.map(|&v| ds.feature_row(v).wire_bytes()).sum::<u64>();
            }
        }
        epochs.push(NaiveEpoch {
            epoch,
            iterations: sched.iterations() as u64,
            hops: cost.hops,
            bytes: 4 * cost.words(),
            bytes_params: 4 * cost.params,
            bytes_partial: 4 * cost.partial,
            bytes_intermediate: 4 * cost.intermediate,
            bytes_features_model_centric: remote_bytes,
        });
    }
    let mean = |f: fn(&NaiveEpoch) -> u64| epochs.iter().map(f).sum::<u64>() as f64 / epochs.len().max(1) as f64;
    Ok(NaiveReport {
        strategy: "naive",
        dataset: cfg.dataset.clone(),
        workers: world,
        partition,
        batch_size: cfg.batch_size,
        fanouts: cfg.fanouts.to_string(),
        in_dim: dims.in_dim,
        hidden: dims.hidden,
        classes: dims.classes,
        layers: dims.layers,
        params: dims.params(),
        bytes_per_epoch: mean(|e| e.bytes),
        bytes_features_model_centric_per_epoch: mean(|e| e.bytes_features_model_centric),
        epochs,
    })
}
