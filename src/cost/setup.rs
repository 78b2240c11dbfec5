//! Everything a prediction of a training job reads: the dataset, the
//! partition training would use (METIS with the job's seed, made on first
//! use as `train` does), the labelled train ids, the model's size.

use super::counts::CountJob;
use super::model::Shape;
use crate::DataDir;
use crate::format::{DatasetFile, ManifestFile};
use crate::train::TrainConfig;
use anyhow::Context;

pub struct Setup {
    pub cfg: TrainConfig,
    pub ds: DatasetFile,
    /// Owner of every vertex (all 0 for one worker).
    pub owner: Vec<u16>,
    pub train: Vec<u32>,
    pub params: u64,
}

impl Setup {
    pub fn open(data: &DataDir, cfg: &TrainConfig) -> anyhow::Result<Setup> {
        let path = crate::datasets::ensure_dataset(data, &cfg.dataset)?;
        // Verified as training verifies it: a corrupt file is refused, not counted.
        let ds = DatasetFile::open_verified(&path)?;
        let [train, _, _] = crate::train::splits(&ds, &cfg.dataset)?;
        let owner = if cfg.workers > 1 {
            let parts = cfg.parts.max(cfg.workers);
            let dir = crate::partition::ensure_partition(data, &cfg.dataset, cfg.partition_method(), parts, cfg.seed)?;
            let m = ManifestFile::open(&dir)
                .with_context(|| format!("cannot read the partition of {} in {}", cfg.dataset, dir.display()))?;
            m.verify()?;
            m.check_serves(&ds, parts, cfg.workers)?;
            m.node_worker(cfg.workers)
        } else {
            vec![0; ds.num_nodes()]
        };
        let (_, params, _, _) = crate::train::build_model(cfg, &ds)?;
        Ok(Setup { cfg: cfg.clone(), params: params.numel() as u64, ds, owner, train })
    }

    pub fn job(&self) -> CountJob<'_> {
        let c = &self.cfg;
        let graph = self.ds.graph();
        CountJob {
            graph,
            owner: &self.owner,
            train: &self.train,
            workers: c.workers,
            batch_size: c.batch_size,
            fanouts: c.fanouts.clone(),
            seed: c.seed,
            cached: CountJob::degree_cache(
                graph,
                &self.owner,
                c.workers,
                c.cache_mb,
                self.ds.features().mean_row_bytes(),
            ),
        }
    }

    pub fn shape(&self, prefetch: bool) -> Shape {
        Shape {
            model: self.cfg.model.to_string(),
            feature_dim: self.ds.feature_dim(),
            row_bytes: self.ds.features().mean_row_bytes(),
            hidden: self.cfg.hidden,
            classes: self.ds.num_classes().max(1),
            params: self.params,
            prefetch,
        }
    }
}
