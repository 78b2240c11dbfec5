//! Model-centric training (DGL): worker w samples and trains its own batch
//! b(i, w), reading whatever input rows it needs; one time step per iteration.

use super::{Iteration, Strategy, StrategyKind, step_record};
use crate::train::strategy::StepSink;
use crate::train::{Collective, TrainError, Worker};

pub struct ModelCentric;

impl Strategy for ModelCentric {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ModelCentric
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        let roots = it.batches[w.rank];
        let b0 = coll.bytes();
        let s = w.compute(roots, it.epoch, it.dropout_key, it.global_size, grad)?;
        records.push(step_record(it, (0, w.rank, w.rank), &s, &coll.bytes().since(&b0)))?;
        Ok(s.loss)
    }
}
