//! Which roots worker r trains at each time step of one iteration, for the
//! micrograph strategies (ARCHITECTURE.md section 5). Roots go to the worker
//! that owns them; at step t worker r trains the roots of model
//! m = (r + t) mod W that it owns. With T < W steps the roots of steps T..W-1
//! are poured into steps 0..T-1 so that each step holds its share of the
//! worker's roots (`MergePlan::shares`); a step keeps its own model's roots
//! even when they exceed its share. The training strategy and the cost model
//! both call this, so the model counts exactly what training runs.

/// The roots of b(i, (r + t) mod W) that worker `r` owns, for t = 0..W.
pub fn own_groups(batches: &[&[u32]], owner: &[u16], r: usize) -> Vec<Vec<u32>> {
    let w = batches.len();
    (0..w)
        .map(|t| batches[(r + t) % w].iter().copied().filter(|&v| owner[v as usize] as usize == r).collect())
        .collect()
}

/// Worker `r`'s roots at each of `shares.len()` steps (1 <= T <= W): step t
/// starts with its own group, then takes roots of the steps >= T, in step
/// order, until it holds round(share x the worker's roots) (largest
/// remainders make the targets sum to the total).
pub fn merged_steps(batches: &[&[u32]], owner: &[u16], r: usize, shares: &[f64]) -> Vec<Vec<u32>> {
    let groups = own_groups(batches, owner, r);
    let t_steps = shares.len().clamp(1, groups.len().max(1));
    let total: usize = groups.iter().map(Vec::len).sum();
    let targets = targets(total, &shares[..t_steps.min(shares.len())], t_steps);
    let mut groups = groups.into_iter();
    let mut steps: Vec<Vec<u32>> = groups.by_ref().take(t_steps).collect();
    let mut rest = groups.flatten();
    for (step, &target) in steps.iter_mut().zip(&targets) {
        while step.len() < target {
            match rest.next() {
                Some(v) => step.push(v),
                None => break,
            }
        }
    }
    // Targets sum to the total, so nothing is left unless a step's own group
    // exceeded its target; any remainder goes to the last step.
    if let Some(last) = steps.last_mut() {
        last.extend(rest);
    }
    steps
}

/// Integer targets summing to `total`, proportional to `shares` (equal when
/// `shares` is empty or sums to nothing).
fn targets(total: usize, shares: &[f64], t_steps: usize) -> Vec<usize> {
    let sum: f64 = shares.iter().filter(|s| s.is_finite() && **s > 0.0).sum();
    let weight = |t: usize| {
        if shares.len() == t_steps && sum > 0.0 { shares[t].max(0.0) / sum } else { 1.0 / t_steps as f64 }
    };
    let exact: Vec<f64> = (0..t_steps).map(|t| weight(t) * total as f64).collect();
    let mut out: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut left = total - out.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..t_steps).collect();
    // Largest remainder first; ties to the earlier step (deterministic).
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    for &t in order.iter().cycle() {
        if left == 0 {
            break;
        }
        out[t] += 1;
        left -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_cover_every_owned_root_once() {
        // 8 vertices, owners 0,1,0,1,...; 2 workers, batches of 4.
        let owner: Vec<u16> = (0..8).map(|v| (v % 2) as u16).collect();
        let b0: Vec<u32> = vec![0, 1, 2, 3];
        let b1: Vec<u32> = vec![4, 5, 6, 7];
        let batches = [&b0[..], &b1[..]];
        assert_eq!(own_groups(&batches, &owner, 1), vec![vec![5, 7], vec![1, 3]]);
        let two = merged_steps(&batches, &owner, 1, &[0.5, 0.5]);
        assert_eq!(two, vec![vec![5, 7], vec![1, 3]]);
        let one = merged_steps(&batches, &owner, 0, &[1.0]);
        assert_eq!(one, vec![vec![0, 2, 4, 6]]);
    }

    #[test]
    fn shares_move_roots_between_steps() {
        let owner = vec![0u16; 12];
        let b: Vec<Vec<u32>> = vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8], vec![9, 10, 11]];
        let batches: Vec<&[u32]> = b.iter().map(|v| &v[..]).collect();
        let s = merged_steps(&batches, &owner, 0, &[0.75, 0.25]);
        // Step 0 keeps 0..3 and takes 6..12 (up to 9 roots); step 1 keeps its own 3.
        assert_eq!(s[0], vec![0, 1, 2, 6, 7, 8, 9, 10, 11]);
        assert_eq!(s[1], vec![3, 4, 5]);
        assert_eq!(targets(10, &[0.5, 0.25, 0.25], 3), vec![5, 3, 2]);
        assert_eq!(targets(7, &[], 3), vec![3, 2, 2]);
    }
}
