//! Model-centric training (DGL): worker w samples and trains its own batch
//! b(i, w), reading whatever input rows it needs; one time step per iteration.

use super::{Iteration, Strategy, StrategyKind};
use crate::metrics::StepRecord;
use crate::train::{Collective, TrainError, Worker};

pub struct ModelCentric;

impl Strategy for ModelCentric {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ModelCentric
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        _coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut Vec<StepRecord>,
    ) -> Result<f64, TrainError> {
        let roots = it.batches[w.rank];
        let s = w.compute(roots, it.epoch, it.dropout_key, it.global_size, grad)?;
        records.push(StepRecord {
            epoch: it.epoch,
            iteration: it.index,
            time_step: 0,
            worker: w.rank as u32,
            roots: s.roots,
            edges: s.edges,
            rows: s.rows,
            miss_rate: s.rows.miss_rate(),
            sample_seconds: s.sample_seconds,
            gather_seconds: s.gather_seconds,
            compute_seconds: s.compute_seconds,
            loss: s.loss,
            ..Default::default()
        });
        Ok(s.loss)
    }
}
