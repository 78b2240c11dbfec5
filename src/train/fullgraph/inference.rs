//! Distributed layer-wise inference (PyG/DGL `inference()`): every vertex,
//! layer by layer, each worker its owned vertices with one halo exchange per
//! layer. `--eval full` scores validation and test nodes with it; `infer`
//! writes its predictions.

use super::{State, forward, state};
use crate::model::Mode;
use crate::train::evaluate::StopVote;
use crate::train::{Collective, TrainError, Worker};
use std::sync::Arc;

/// Outputs of this worker's owned vertices (`plan.owned()` order).
pub struct Outputs {
    pub state: Arc<State>,
    /// `[owned, classes]`, row-major.
    pub logits: Vec<f32>,
    pub classes: usize,
    /// The output of the requested hidden layer, `[owned, hidden]`.
    pub embeddings: Option<Vec<f32>>,
}

/// One worker's rows of `infer`: its owned vertices and their outputs.
pub struct Scored {
    /// Vertex ids, in the order of the rows below.
    pub nodes: Vec<u32>,
    /// `[nodes, classes]`, row-major.
    pub logits: Vec<f32>,
    pub classes: usize,
    /// `[nodes, width]`: the requested hidden layer's output.
    pub embeddings: Option<Vec<f32>>,
}

impl From<Outputs> for Scored {
    fn from(o: Outputs) -> Scored {
        Scored { nodes: o.state.plan.owned().to_vec(), logits: o.logits, classes: o.classes, embeddings: o.embeddings }
    }
}

/// Runs the model over every vertex without dropout; `embeddings` names a
/// hidden layer (0-based) whose output to keep.
pub fn run(w: &mut Worker<'_>, coll: &mut dyn Collective, embeddings: Option<usize>) -> Result<Outputs, TrainError> {
    let st = state(w)?;
    let f = forward(w, &st, coll, Mode::Eval, false)?;
    let flat = |t: &candle_core::Tensor| -> Result<Vec<f32>, TrainError> { Ok(t.flatten_all()?.to_vec1::<f32>()?) };
    let embeddings = embeddings.map(|l| flat(&f.outs[l])).transpose()?;
    let logits = flat(f.outs.last().expect("a model has a layer"))?;
    Ok(Outputs { state: st, logits, classes: w.model.spec().classes, embeddings })
}

/// Index of the largest entry (the first on ties).
pub fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
}

/// Accuracy on each of `sets` (labelled ids): every vertex scored by its owner,
/// one all-reduce of the counts, which carries the workers' stop votes
/// (`stop`: whether this one is asked to stop); and whether any voted.
pub fn accuracies(
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    sets: &[&[u32]],
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<f64>, bool), TrainError> {
    let out = run(w, coll, None)?;
    let plan = &out.state.plan;
    let c = out.classes;
    let mut counts = Vec::with_capacity(sets.len() * 2);
    for ids in sets {
        let (mut correct, mut total) = (0u64, 0u64);
        for &v in ids.iter() {
            if let Some(p) = plan.owned_position(v) {
                total += 1;
                correct += u64::from(argmax(&out.logits[p * c..(p + 1) * c]) as i64 == w.labels[v as usize] as i64);
            }
        }
        counts.push(correct as f32);
        counts.push(total as f32);
    }
    let vote = StopVote::new::<f32>(stop(), sets.first().map_or(0, |s| s.len()), coll.world());
    vote.cast(&mut counts);
    coll.all_reduce_sum(&mut counts).map_err(TrainError::Comm)?;
    let stop = vote.tally(&mut counts);
    Ok((counts.chunks(2).map(|c| if c[1] > 0.0 { c[0] as f64 / c[1] as f64 } else { 0.0 }).collect(), stop))
}
