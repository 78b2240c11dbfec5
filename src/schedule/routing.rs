//! Which roots each time step of a micrograph strategy trains on this worker:
//! the roots of every worker batch go to the worker that owns them, and
//! leapgnn folds the steps it drops into the ones it keeps.

/// Fills `steps` with W lists: step t holds the roots of b(i, (rank + t) mod W)
/// that worker `rank` owns, in batch order. `owners`: None = worker 0 owns all.
pub fn route(batches: &[&[u32]], owners: Option<&[u16]>, rank: usize, steps: &mut Vec<Vec<u32>>) {
    let w = batches.len();
    steps.resize_with(w, Vec::new);
    for (t, step) in steps.iter_mut().enumerate() {
        step.clear();
        owned_by(batches[(rank + t) % w], owners, rank, step);
    }
}

/// Appends to `out` the ids of `ids` that worker `rank` owns, in the order
/// given (`owners`: None = worker 0 owns all). Over all ranks the shares
/// partition `ids`. Training routes roots with it; evaluation scores with it.
pub fn owned_by(ids: &[u32], owners: Option<&[u16]>, rank: usize, out: &mut Vec<u32>) {
    match owners {
        Some(o) => out.extend(ids.iter().copied().filter(|&v| o[v as usize] as usize == rank)),
        None if rank == 0 => out.extend_from_slice(ids),
        None => {}
    }
}

/// Keeps the first T = `shares.len()` steps (the models that still visit this
/// worker) and moves the roots of the others into them: each kept step is
/// topped up, in step order, towards its share of all the worker's roots. A
/// step already above its share keeps its own roots (they are its model's), so
/// balance is as close as that allows. Every root stays on this worker.
pub fn merge(steps: &mut Vec<Vec<u32>>, shares: &[f64]) {
    let kept = shares.len();
    if steps.len() <= kept {
        return;
    }
    let total: usize = steps.iter().map(Vec::len).sum();
    let dropped = steps.split_off(kept);
    let mut pool = dropped.iter().flatten().copied();
    for (step, target) in steps.iter_mut().zip(targets(total, shares)) {
        let want = target.saturating_sub(step.len());
        step.extend(pool.by_ref().take(want));
    }
    // The deficits add up to at least the pool (targets sum to the total), so nothing is left.
    debug_assert!(pool.next().is_none());
}

/// Integer targets proportional to `shares` that sum to `total` exactly
/// (rounded cumulatively, so no step is off by more than one root).
fn targets(total: usize, shares: &[f64]) -> Vec<usize> {
    let sum: f64 = shares.iter().sum();
    let mut acc = 0.0;
    let mut prev = 0usize;
    let n = shares.len();
    shares
        .iter()
        .enumerate()
        .map(|(k, s)| {
            acc += s;
            let cum = if k + 1 == n { total } else { ((acc / sum) * total as f64).round() as usize }.min(total);
            let t = cum.saturating_sub(prev);
            prev = prev.max(cum);
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_every_root_to_its_owner_once() {
        let owners: Vec<u16> = (0..40).map(|v| (v % 3) as u16).collect();
        let b: Vec<Vec<u32>> = vec![(0..10).collect(), (10..20).collect(), (20..30).collect()];
        let batches: Vec<&[u32]> = b.iter().map(|x| &x[..]).collect();
        let mut all = Vec::new();
        for rank in 0..3 {
            let mut steps = Vec::new();
            route(&batches, Some(&owners), rank, &mut steps);
            assert_eq!(steps.len(), 3);
            for (t, s) in steps.iter().enumerate() {
                let model = (rank + t) % 3;
                assert!(s.iter().all(|&v| owners[v as usize] as usize == rank && b[model].contains(&v)));
            }
            all.extend(steps.concat());
        }
        all.sort_unstable();
        assert_eq!(all, (0..30).collect::<Vec<u32>>());
        let mut steps = Vec::new();
        route(&batches, None, 1, &mut steps);
        assert!(steps.iter().all(Vec::is_empty));
    }

    #[test]
    fn merging_keeps_every_root_and_balances_the_kept_steps() {
        let mut steps: Vec<Vec<u32>> =
            vec![(0..2).collect(), (2..12).collect(), (12..20).collect(), (20..30).collect()];
        merge(&mut steps, &[0.5, 0.5]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].len(), 15);
        assert_eq!(steps[1].len(), 15);
        let mut all = steps.concat();
        all.sort_unstable();
        assert_eq!(all, (0..30).collect::<Vec<u32>>());
        // A kept step above its share keeps its roots; the rest go to the others.
        let mut steps: Vec<Vec<u32>> = vec![(0..20).collect(), vec![], (20..24).collect()];
        merge(&mut steps, &[0.5, 0.5]);
        assert_eq!((steps[0].len(), steps[1].len()), (20, 4));
        let mut steps: Vec<Vec<u32>> = vec![vec![], vec![], vec![]];
        merge(&mut steps, &[1.0]);
        assert_eq!(steps, vec![Vec::<u32>::new()]);
        assert_eq!(targets(10, &[0.3, 0.3, 0.4]), vec![3, 3, 4]);
        assert_eq!(targets(7, &[0.5, 0.5]).iter().sum::<usize>(), 7);
    }
}
