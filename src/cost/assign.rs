//! Which roots worker r trains at each time step of one iteration, for the
//! micrograph strategies (ARCHITECTURE.md section 5), as the cost model sees
//! them. These call the training strategies' own routing, so the model
//! counts exactly what training runs.

use crate::schedule::routing::{merge, route};

/// The roots of b(i, (r + t) mod W) that worker `r` owns, for t = 0..W.
pub fn own_groups(batches: &[&[u32]], owner: &[u16], r: usize) -> Vec<Vec<u32>> {
    let mut steps = Vec::new();
    route(batches, Some(owner), r, &mut steps);
    steps
}

/// Worker `r`'s roots at each of `shares.len()` steps (1 <= T <= W): step t
/// keeps its own group, then takes roots of the steps >= T, in step order,
/// until it holds its share of the worker's roots.
pub fn merged_steps(batches: &[&[u32]], owner: &[u16], r: usize, shares: &[f64]) -> Vec<Vec<u32>> {
    let mut steps = own_groups(batches, owner, r);
    merge(&mut steps, shares);
    steps
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
    }
}
