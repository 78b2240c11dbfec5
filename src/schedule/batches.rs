//! The epoch's iterations: a seeded shuffle of the train ids cut into global
//! batches of W x B roots, each split into W worker batches exactly as a
//! W-worker DGL job would. No root is dropped and no iteration is empty.

use crate::util::rng::{Rng, hash_of};
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// The train ids in the order epoch `epoch` visits them.
pub fn epoch_order(train: &[u32], seed: u64, epoch: u64) -> Vec<u32> {
    let mut order = train.to_vec();
    order.shuffle(&mut Rng::seed_from_u64(hash_of(seed, &[0x5348_5546, epoch])));
    order
}

/// Iterations of an epoch over `roots` train ids (0 when there are no workers or batch).
pub fn iterations(roots: usize, workers: usize, batch: usize) -> usize {
    roots.div_ceil(workers.saturating_mul(batch).max(1))
}

/// For every one of `workers` workers, the most of an iteration's roots it
/// owns (`owners`: node -> worker) in any iteration of epochs `0..epochs` of
/// B = `batch` roots per worker: what the micrograph strategies route to it
/// in one iteration. Between 0 and W x B; about B when ownership is even,
/// up to W x B when one worker owns every train id. The shuffles are the
/// epochs' own, so this costs what routing them costs in training.
pub fn most_owned_per_iteration(
    train: &[u32],
    owners: &[u16],
    workers: usize,
    batch: usize,
    seed: u64,
    epochs: u64,
) -> Vec<u64> {
    let mut most = vec![0u64; workers];
    let mut count = vec![0u64; workers];
    for epoch in 0..epochs {
        for global in epoch_order(train, seed, epoch).chunks(workers.saturating_mul(batch).max(1)) {
            count.fill(0);
            for &v in global {
                count[owners[v as usize] as usize] += 1;
            }
            for (m, &c) in most.iter_mut().zip(&count) {
                *m = (*m).max(c);
            }
        }
    }
    most
}

pub struct Schedule<'a> {
    order: &'a [u32],
    workers: usize,
    batch: usize,
}

impl<'a> Schedule<'a> {
    pub fn new(order: &'a [u32], workers: usize, batch: usize) -> Self {
        assert!(workers > 0 && batch > 0);
        Schedule { order, workers, batch }
    }

    pub fn iterations(&self) -> usize {
        iterations(self.order.len(), self.workers, self.batch)
    }

    /// The roots of iteration `i` over all workers.
    pub fn global(&self, i: usize) -> &'a [u32] {
        let g = self.workers * self.batch;
        &self.order[i * g..((i + 1) * g).min(self.order.len())]
    }

    /// Worker `w`'s batch b(i, w): B roots each in a full iteration; the last
    /// iteration's remainder is split as evenly as possible (earlier workers get
    /// the extra root).
    pub fn worker(&self, i: usize, w: usize) -> &'a [u32] {
        let all = self.global(i);
        let (base, extra) = (all.len() / self.workers, all.len() % self.workers);
        let start = w * base + w.min(extra);
        &all[start..start + base + usize::from(w < extra)]
    }

    pub fn workers(&self, i: usize) -> Vec<&'a [u32]> {
        (0..self.workers).map(|w| self.worker(i, w)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_every_root_once_with_full_batches_first() {
        let train: Vec<u32> = (100..1103).collect(); // 1003 roots
        let order = epoch_order(&train, 1, 0);
        assert_ne!(order, train);
        assert_eq!(order, epoch_order(&train, 1, 0));
        assert_ne!(order, epoch_order(&train, 1, 1));
        let s = Schedule::new(&order, 3, 64);
        assert_eq!(s.iterations(), 6); // 5 x 192 + 43
        let mut seen: Vec<u32> = Vec::new();
        for i in 0..s.iterations() {
            let parts = s.workers(i);
            assert_eq!(parts.concat(), s.global(i));
            if i < 5 {
                assert!(parts.iter().all(|p| p.len() == 64));
            } else {
                assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![15, 14, 14]);
            }
            seen.extend(s.global(i));
        }
        seen.sort_unstable();
        assert_eq!(seen, train);
    }

    #[test]
    fn most_owned_counts_the_roots_routed_to_each_worker() {
        let train: Vec<u32> = (0..1000).collect();
        // Worker 0 owns every train id of the even nodes, worker 1 the odd ones, worker 2 none.
        let owners: Vec<u16> = (0..1000).map(|v| (v % 2) as u16).collect();
        let most = most_owned_per_iteration(&train, &owners, 3, 64, 7, 2);
        let mut expect = [0u64; 3];
        for epoch in 0..2 {
            let order = epoch_order(&train, 7, epoch);
            let s = Schedule::new(&order, 3, 64);
            for i in 0..s.iterations() {
                for (w, e) in expect.iter_mut().enumerate() {
                    let owned = s.global(i).iter().filter(|&&v| owners[v as usize] as usize == w).count();
                    *e = (*e).max(owned as u64);
                }
            }
        }
        assert_eq!(most, expect);
        assert!(most[0] > 64 && most[1] > 64 && most[2] == 0, "{most:?}");
        // One worker owning everything gets every root of an iteration.
        let all = most_owned_per_iteration(&train, &vec![0; 1000], 3, 64, 7, 1);
        assert_eq!(all, vec![192, 0, 0]);
    }
}
