//! Validation and test accuracy at the end of an epoch, and what evaluating
//! moved over the sockets (billed apart from training).
//!
//! Sampled evaluation is owner-scored: each node is scored by the worker that
//! owns it (as the micrograph strategies route training roots), so its input
//! rows come mostly from that worker's own part whatever the strategy; one
//! all-reduce of the counts gives every worker the accuracies, and carries
//! the workers' stop votes (`StopVote`).

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
    /// Whether this worker is asked to stop, polled when the counts are summed.
    pub stop: &'a dyn Fn() -> bool,
}

/// The accuracy of each set (the same on every worker) and what this worker's
/// sockets moved while evaluating.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    pub accuracies: Vec<f64>,
    pub moved: ByteCounts,
    /// Some worker was asked to stop while evaluating.
    pub stop: bool,
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
    let (accuracies, stop) = match w.eval {
        EvalMode::Full => fullgraph::inference::accuracies(w, coll, req.sets, req.stop)?,
        EvalMode::Sampled => sampled(w, coll, req)?,
    };
    // Every reply a peer asked of this worker is counted once all have scored.
    fence(coll)?;
    let moved = coll.bytes().since(&before);
    // No peer's next training request is served before this worker has read `moved`.
    fence(coll)?;
    Ok(Evaluation { accuracies, moved, stop })
}

fn fence(coll: &mut dyn Collective) -> Result<(), TrainError> {
    coll.barrier().map_err(TrainError::Comm)
}

/// A stop request that comes while the workers evaluate (layer-wise inference
/// or a big validation set can take long) is told to every worker in the sum
/// of the evaluation's counts, at no byte more, so that all stop at the
/// epoch's end instead of training one more iteration to vote on it: a worker
/// asked to stop adds 1 to its count of scored nodes of the first set. Every
/// node of a set is scored by exactly one worker, so the summed count exceeds
/// the set's size by the number of workers that asked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StopVote {
    size: u64,
    /// The sum carries the votes exactly (all workers agree on it).
    open: bool,
    mine: bool,
}

impl StopVote {
    /// The vote of a worker `asked` to stop, over a first set of `size` nodes
    /// on `world` workers, in counts of type `C` (f32 counts are exact up to
    /// 2^24 only: past that no worker votes, and the next iteration's vote
    /// sees the request).
    pub(crate) fn new<C: Count>(asked: bool, size: usize, world: usize) -> StopVote {
        let size = size as u64;
        StopVote { size, open: size.saturating_add(world as u64) <= C::EXACT, mine: asked }
    }

    /// Adds this worker's vote to its `counts` (correct and scored, per set)
    /// before they are summed.
    pub(crate) fn cast<C: Count>(&self, counts: &mut [C]) {
        if let Some(scored) = counts.get_mut(1)
            && self.open
            && self.mine
        {
            *scored = C::from_u64(scored.to_u64() + 1);
        }
    }

    /// Takes the votes out of the summed `counts`: whether any worker voted.
    pub(crate) fn tally<C: Count>(&self, counts: &mut [C]) -> bool {
        let Some(scored) = counts.get_mut(1).filter(|_| self.open) else { return false };
        let summed = scored.to_u64();
        let votes = summed.saturating_sub(self.size);
        *scored = C::from_u64(summed - votes);
        votes > 0
    }
}

/// A count as the evaluations sum it: u64 (exact), or f32 (in the gradient
/// all-reduce, exact up to 2^24).
pub(crate) trait Count: Copy {
    const EXACT: u64;
    fn to_u64(self) -> u64;
    fn from_u64(n: u64) -> Self;
}

impl Count for u64 {
    const EXACT: u64 = u64::MAX;
    fn to_u64(self) -> u64 {
        self
    }
    fn from_u64(n: u64) -> Self {
        n
    }
}

impl Count for f32 {
    const EXACT: u64 = 1 << 24;
    fn to_u64(self) -> u64 {
        self as u64
    }
    fn from_u64(n: u64) -> Self {
        n as f32
    }
}

/// Owner-scored sampled evaluation: correct and scored counts, summed over
/// the workers, and whether any worker voted to stop.
fn sampled(
    w: &mut Worker<'_>,
    coll: &mut dyn Collective,
    req: &EvalRequest<'_>,
) -> Result<(Vec<f64>, bool), TrainError> {
    let rank = coll.rank();
    let mut counts = Vec::with_capacity(req.sets.len() * 2);
    for ids in req.sets {
        let mut share = Vec::new();
        owned_by(ids, req.owners, rank, &mut share);
        counts.push(w.count_correct(&share, req.epoch, req.batch)?);
        counts.push(share.len() as u64);
    }
    let vote = StopVote::new::<u64>((req.stop)(), req.sets.first().map_or(0, |s| s.len()), coll.world());
    vote.cast(&mut counts);
    let mut counts = sum_counts(coll, &counts)?;
    let stop = vote.tally(&mut counts);
    Ok((counts.chunks(2).map(|c| if c[1] > 0 { c[0] as f64 / c[1] as f64 } else { 0.0 }).collect(), stop))
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
    use super::StopVote;
    use crate::schedule::routing::owned_by;

    #[test]
    fn stop_votes_ride_in_the_scored_count_and_leave_the_counts_as_they_were() {
        // Three workers score 2, 4 and 1 of a validation set of 7 (and 3 test nodes); one is asked to stop.
        let shares = [[1u64, 2, 0, 1], [3, 4, 1, 1], [0, 1, 1, 1]];
        for asking in [None, Some(0), Some(2)] {
            let votes: Vec<StopVote> = (0..3).map(|r| StopVote::new::<u64>(asking == Some(r), 7, 3)).collect();
            let mut sum = [0u64; 4];
            for (v, share) in votes.iter().zip(shares) {
                let mut sent = share;
                v.cast(&mut sent);
                sum.iter_mut().zip(sent).for_each(|(s, c)| *s += c);
            }
            for v in &votes {
                let mut got = sum;
                assert_eq!(v.tally(&mut got), asking.is_some(), "{asking:?}");
                assert_eq!(got, [4, 7, 2, 3], "{asking:?}");
            }
        }
        // f32 counts past 2^24 could not carry a vote exactly: none is cast.
        let big = StopVote::new::<f32>(true, 1 << 24, 2);
        let mut counts = [5.0f32, 9.0, 0.0, 0.0];
        big.cast(&mut counts);
        assert_eq!(counts[1], 9.0);
        assert!(!big.tally(&mut counts));
        let small = StopVote::new::<f32>(true, 9, 2);
        small.cast(&mut counts);
        assert!(small.tally(&mut counts));
        assert_eq!(counts, [5.0, 9.0, 0.0, 0.0]);
    }

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
