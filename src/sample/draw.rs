//! The per-vertex draw: uniform without replacement, a pure function of its key.

use crate::util::rng::{SplitMix, hash_of, mix64};

/// Key shared by every vertex of one (seed, epoch, layer); combine it with a
/// vertex through `vertex_key`. `vertex_key(layer_key(s, e, l), v)` equals
/// `hash_of(s, &[e, l, v])`, one mix instead of four in the inner loop.
#[inline]
pub fn layer_key(seed: u64, epoch: u64, layer: u64) -> u64 {
    hash_of(seed, &[epoch, layer])
}

#[inline]
pub fn vertex_key(layer_key: u64, v: u32) -> u64 {
    mix64(layer_key ^ v as u64)
}

/// Fills `out` (length `min(k, nbrs.len())`, as `Fanout::take` gives) with
/// distinct elements of `nbrs` drawn uniformly without replacement. `nbrs`
/// must be duplicate-free (CSR rows are). Allocation-free: Floyd's algorithm
/// with a linear membership test, which beats any set for the small fanouts
/// GNNs use; for large samples it switches to selection sampling (O(deg)).
#[inline]
pub fn draw_neighbors(nbrs: &[u32], key: u64, out: &mut [u32]) {
    let (deg, k) = (nbrs.len(), out.len());
    debug_assert!(k <= deg);
    if k == deg {
        out.copy_from_slice(nbrs);
        return;
    }
    let mut rng = SplitMix(key);
    if k <= 64 || deg > 16 * k {
        // Floyd: for j in deg-k..deg pick t in [0, j]; take nbrs[j] if nbrs[t] is already in.
        for (filled, j) in (deg - k..deg).enumerate() {
            let t = nbrs[rng.below(j + 1)];
            out[filled] = if out[..filled].contains(&t) { nbrs[j] } else { t };
        }
    } else {
        // Knuth's Algorithm S: keep item i with probability (needed / remaining).
        let mut filled = 0;
        for (i, &u) in nbrs.iter().enumerate() {
            if rng.below(deg - i) < k - filled {
                out[filled] = u;
                filled += 1;
                if filled == k {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertex_key_matches_hash_of() {
        for v in [0u32, 1, 77, u32::MAX] {
            assert_eq!(vertex_key(layer_key(9, 3, 1), v), hash_of(9, &[3, 1, v as u64]));
        }
    }

    fn check_uniform(deg: usize, k: usize) {
        let nbrs: Vec<u32> = (0..deg as u32).map(|i| i * 3 + 1).collect();
        let mut counts = vec![0u32; deg];
        let mut out = vec![0u32; k];
        let trials = 20_000;
        for t in 0..trials {
            draw_neighbors(&nbrs, hash_of(1, &[t]), &mut out);
            let mut s = out.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), k, "duplicates in draw {out:?}");
            for &u in &out {
                counts[((u - 1) / 3) as usize] += 1;
            }
        }
        // Each element is kept with probability k/deg; allow 5 standard deviations.
        let p = k as f64 / deg as f64;
        let mean = trials as f64 * p;
        let sd = (trials as f64 * p * (1.0 - p)).sqrt();
        for (i, &c) in counts.iter().enumerate() {
            assert!(
                (c as f64 - mean).abs() < 5.0 * sd,
                "deg {deg} k {k}: element {i} drawn {c} times, expected {mean}"
            );
        }
    }

    #[test]
    fn floyd_draw_is_uniform_without_replacement() {
        check_uniform(30, 10);
        check_uniform(11, 10);
    }

    #[test]
    fn selection_draw_is_uniform_without_replacement() {
        check_uniform(300, 100);
    }

    #[test]
    fn small_degree_keeps_all_and_same_key_same_draw() {
        let nbrs = [5u32, 9, 11];
        let mut out = [0u32; 3];
        draw_neighbors(&nbrs, 42, &mut out);
        assert_eq!(out, nbrs);
        let big: Vec<u32> = (0..1000).collect();
        let (mut a, mut b, mut c) = ([0u32; 10], [0u32; 10], [0u32; 10]);
        draw_neighbors(&big, 7, &mut a);
        draw_neighbors(&big, 7, &mut b);
        draw_neighbors(&big, 8, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
