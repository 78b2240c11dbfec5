//! Validation and test accuracy: every worker scores its share of each set,
//! then one all-reduce of the counts.

use super::{Collective, EvalMode, TrainError, Worker, fullgraph};

/// Accuracy on each of `sets` (labelled ids), as seen by every worker.
pub fn accuracies(
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    sets: &[&[u32]],
    epoch: u64,
    batch: usize,
) -> Result<Vec<f64>, TrainError> {
    if w.eval == EvalMode::Full {
        return fullgraph::inference::accuracies(w, coll, sets);
    }
    let (rank, world) = (coll.rank(), coll.world());
    let mut counts = Vec::with_capacity(sets.len() * 2);
    for ids in sets {
        let share = &ids[rank * ids.len() / world..(rank + 1) * ids.len() / world];
        counts.push(w.count_correct(share, epoch, batch)? as f32);
        counts.push(share.len() as f32);
    }
    coll.all_reduce_sum(&mut counts).map_err(TrainError::Comm)?;
    Ok(counts.chunks(2).map(|c| if c[1] > 0.0 { c[0] as f64 / c[1] as f64 } else { 0.0 }).collect())
}
