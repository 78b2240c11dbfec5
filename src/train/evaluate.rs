//! Validation and test accuracy at the end of an epoch, and what evaluating
//! moved over the sockets (billed apart from training).
//!
//! Sampled evaluation is owner-scored: each node is scored by the worker that
//! owns it (as the micrograph strategies route training roots), so its input
//! rows come mostly from that worker's own part whatever the strategy; one
//! all-reduce of the counts gives every worker the accuracies.

use super::{Collective, EvalMode, TrainError, Worker, fullgraph};
use crate::comm::{ByteCounts, Category};
use crate::schedule::routing::owned_by;

/// What to evaluate, as every worker sees it.
pub struct EvalRequest<'a> {
    /// Labelled, distinct ids of each set (validation, test).
    pub sets: &'a [&'a [u32]],
    /// The partition's vertex -> worker map; None: worker 0 owns every vertex.
    pub owners: Option<&'a [u16]>,
    pub epoch: u64,
    /// Roots per sampled evaluation batch.
    pub batch: usize,
}

/// The accuracy of each set (the same on every worker) and what this worker's
/// sockets moved while evaluating.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    pub accuracies: Vec<f64>,
    pub moved: ByteCounts,
}

/// Evaluates `req` on every worker (a collective: all workers call it at the
/// same point). The traffic of the evaluation, and nothing else, falls between
/// two fences, so `moved` is exact: before the first, every worker has ended
/// its training traffic; after the last, none has started the next epoch's.
pub fn evaluate(
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    req: &EvalRequest<'_>,
) -> Result<Evaluation, TrainError> {
    fence(coll)?;
    let before = coll.bytes();
    // No worker sends an evaluation request before every worker has read `before`.
    fence(coll)?;
    let accuracies = match w.eval {
        EvalMode::Full => fullgraph::inference::accuracies(w, coll, req.sets)?,
        EvalMode::Sampled => sampled(w, coll, req)?,
    };
    // Every reply a peer asked of this worker is counted once all have scored.
    fence(coll)?;
    let moved = coll.bytes().since(&before);
    // No peer's next training request is served before this worker has read `moved`.
    fence(coll)?;
    Ok(Evaluation { accuracies, moved })
}

fn fence(coll: &mut dyn Collective) -> Result<(), TrainError> {
    coll.barrier().map_err(TrainError::Comm)
}

/// Owner-scored sampled evaluation: correct and scored counts, summed over the workers.
fn sampled(w: &mut Worker<'_>, coll: &mut dyn Collective, req: &EvalRequest<'_>) -> Result<Vec<f64>, TrainError> {
    let rank = coll.rank();
    let mut counts = Vec::with_capacity(req.sets.len() * 2);
    for ids in req.sets {
        let mut share = Vec::new();
        owned_by(ids, req.owners, rank, &mut share);
        counts.push(w.count_correct(&share, req.epoch, req.batch)?);
        counts.push(share.len() as u64);
    }
    let counts = sum_counts(coll, &counts)?;
    Ok(counts.chunks(2).map(|c| if c[1] > 0 { c[0] as f64 / c[1] as f64 } else { 0.0 }).collect())
}

/// Element-wise sum of `counts` over the workers, exact, billed as control
/// traffic (the gradient all-reduce would bill it as gradients).
fn sum_counts(coll: &mut dyn Collective, counts: &[u64]) -> Result<Vec<u64>, TrainError> {
    let mine: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
    let all = coll.all_to_all(vec![mine; coll.world()], Category::Control).map_err(TrainError::Comm)?;
    let mut sum = vec![0u64; counts.len()];
    for (peer, bytes) in all.iter().enumerate() {
        if bytes.len() != counts.len() * 8 {
            return Err(TrainError::Comm(
                format!("worker {peer} sent {} bytes of evaluation counts, expected {}", bytes.len(), counts.len() * 8)
                    .into(),
            ));
        }
        for (s, c) in sum.iter_mut().zip(bytes.chunks_exact(8)) {
            *s += u64::from_le_bytes(c.try_into().expect("chunks of 8 bytes"));
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use crate::schedule::routing::owned_by;

    #[test]
    fn the_owners_shares_score_every_node_once() {
        let owners: Vec<u16> = (0..100u32).map(|v| (v * 7 % 4) as u16).collect();
        let ids: Vec<u32> = (0..100).rev().step_by(3).collect();
        let share = |o: Option<&[u16]>, r| {
            let mut s = Vec::new();
            owned_by(&ids, o, r, &mut s);
            s
        };
        let mut all: Vec<u32> = (0..4).flat_map(|r| share(Some(&owners), r)).collect();
        for r in 0..4 {
            assert!(share(Some(&owners), r).iter().all(|&v| owners[v as usize] as usize == r));
        }
        all.sort_unstable();
        let mut want = ids.clone();
        want.sort_unstable();
        assert_eq!(all, want);
        assert_eq!(share(None, 0), ids);
        assert!(share(None, 1).is_empty());
    }
}
