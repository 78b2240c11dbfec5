//! Non-negative least squares for a handful of unknowns: every subset of
//! free coefficients is solved by its normal equations (columns scaled to
//! unit norm first), and the feasible solution (all coefficients >= 0) with
//! the least squared error wins. Exact for up to ~6 unknowns, which is all
//! calibration needs; deterministic.
//!
//! Calibration's records carry outliers that are not the model's: a worker
//! preempted on a shared host, a step that waited on a peer's evaluation, a
//! cold first run. They only ever add seconds, and least squares follows
//! them: two calibrations of the same job, one after a fresh download, put
//! model-centric at 54 and 27 ms per iteration (the first run's first 14
//! iterations took up to 404 ms, the rest about 27). `nnls_robust` drops
//! such records and refits.

/// Coefficients `c >= 0` minimising sum over rows of (y - x . c)^2.
/// Rows with a non-finite entry are ignored; no rows give all zeros.
pub fn nnls(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let k = x.first().map_or(0, Vec::len);
    let rows: Vec<(&Vec<f64>, f64)> = x
        .iter()
        .zip(y)
        .filter(|(r, v)| r.len() == k && v.is_finite() && r.iter().all(|a| a.is_finite()))
        .map(|(r, &v)| (r, v))
        .collect();
    let mut best = (vec![0.0; k], rows.iter().map(|(_, v)| v * v).sum::<f64>());
    if rows.is_empty() || k == 0 {
        return best.0;
    }
    let norm: Vec<f64> = (0..k)
        .map(|j| rows.iter().map(|(r, _)| r[j] * r[j]).sum::<f64>().sqrt())
        .map(|n| if n > 0.0 { n } else { 1.0 })
        .collect();
    for mask in 1u32..(1 << k) {
        let free: Vec<usize> = (0..k).filter(|j| mask & (1 << j) != 0).collect();
        let n = free.len();
        // Normal equations over the scaled free columns.
        let mut a = vec![vec![0.0; n + 1]; n];
        for (r, v) in &rows {
            for (p, &i) in free.iter().enumerate() {
                let xi = r[i] / norm[i];
                for (q, &j) in free.iter().enumerate() {
                    a[p][q] += xi * r[j] / norm[j];
                }
                a[p][n] += xi * v;
            }
        }
        let Some(sol) = solve(a) else { continue };
        if sol.iter().any(|c| *c < 0.0) {
            continue;
        }
        let mut c = vec![0.0; k];
        for (p, &i) in free.iter().enumerate() {
            c[i] = sol[p] / norm[i];
        }
        let err: f64 = rows.iter().map(|(r, v)| (v - r.iter().zip(&c).map(|(a, b)| a * b).sum::<f64>()).powi(2)).sum();
        if err < best.1 * (1.0 - 1e-12) {
            best = (c, err);
        }
    }
    best.0
}

/// How far above the median residual a record may lie before it counts as an
/// outlier, in robust standard deviations (1.4826 x the median absolute
/// deviation, which is the standard deviation for normal noise).
const OUTLIER_SIGMAS: f64 = 3.0;
/// The least excess over the median that counts as an outlier, as a fraction
/// of the median value: where the fit is near exact the MAD is near 0 and
/// every record above the median would otherwise go.
const OUTLIER_FLOOR: f64 = 0.1;
/// Refits at most this often; each drops records only.
const ROBUST_ROUNDS: usize = 4;

/// The median of `v` (the upper one for an even count); None when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

/// Which of `residuals` (measured less predicted) are slow outliers: above
/// the median residual by more than `OUTLIER_SIGMAS` robust deviations and
/// by more than `OUTLIER_FLOOR` x `typical` (the median measurement).
/// Fewer than half the rows are ever flagged, since the median bounds them.
pub fn slow_outliers(residuals: &[f64], typical: f64) -> Vec<bool> {
    let Some(mid) = median(residuals) else { return vec![false; residuals.len()] };
    let deviations: Vec<f64> = residuals.iter().map(|r| (r - mid).abs()).collect();
    let sigma = 1.4826 * median(&deviations).unwrap_or(0.0);
    let cut = mid + (OUTLIER_SIGMAS * sigma).max(OUTLIER_FLOOR * typical.abs());
    residuals.iter().map(|r| *r > cut).collect()
}

/// Which of the measurements `v` are slow outliers (`slow_outliers` of
/// their excess over the median).
pub fn slow_values(v: &[f64]) -> Vec<bool> {
    let mid = median(v).unwrap_or(0.0);
    slow_outliers(&v.iter().map(|x| x - mid).collect::<Vec<_>>(), mid)
}

/// `nnls` without slow outliers: fit, drop the records `slow_outliers`
/// flags among those kept, refit, until none is dropped (at most
/// `ROBUST_ROUNDS` fits). Records are only dropped, never taken back, so it ends.
pub fn nnls_robust(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let mut keep: Vec<bool> = vec![true; y.len().min(x.len())];
    let mut c = nnls(x, y);
    for _ in 1..ROBUST_ROUNDS {
        let kept: Vec<usize> = (0..keep.len()).filter(|&i| keep[i]).collect();
        let residuals: Vec<f64> =
            kept.iter().map(|&i| y[i] - x[i].iter().zip(&c).map(|(a, b)| a * b).sum::<f64>()).collect();
        let typical = median(&kept.iter().map(|&i| y[i]).collect::<Vec<_>>()).unwrap_or(0.0);
        let out = slow_outliers(&residuals, typical);
        if !out.iter().any(|o| *o) {
            break;
        }
        for (&i, o) in kept.iter().zip(&out) {
            keep[i] &= !o;
        }
        let (xs, ys): (Vec<Vec<f64>>, Vec<f64>) =
            (0..keep.len()).filter(|&i| keep[i]).map(|i| (x[i].clone(), y[i])).unzip();
        c = nnls(&xs, &ys);
    }
    c
}

/// Gaussian elimination with partial pivoting on an augmented n x (n+1) matrix.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let n = a.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        let pivot = a[col].clone();
        for (_, r) in a.iter_mut().enumerate().filter(|(row, _)| *row != col) {
            let f = r[col] / pivot[col];
            for (x, p) in r[col..].iter_mut().zip(&pivot[col..]) {
                *x -= f * p;
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_non_negative_coefficients() {
        let x: Vec<Vec<f64>> = (0..20).map(|i| vec![i as f64 * 1000.0, ((i * 7) % 5) as f64, 1.0]).collect();
        let y: Vec<f64> = x.iter().map(|r| 2e-6 * r[0] + 0.5 * r[1] + 0.1).collect();
        let c = nnls(&x, &y);
        assert!((c[0] - 2e-6).abs() < 1e-12 && (c[1] - 0.5).abs() < 1e-9 && (c[2] - 0.1).abs() < 1e-9, "{c:?}");
        // A negative truth is clamped to zero, the rest refitted.
        let y: Vec<f64> = x.iter().map(|r| 2e-6 * r[0] - 0.5 * r[1] + 3.0).collect();
        let c = nnls(&x, &y);
        assert!(c.iter().all(|v| *v >= 0.0) && c[1] == 0.0, "{c:?}");
        assert_eq!(nnls(&[], &[]), Vec::<f64>::new());
    }

    /// Records that follow known figures, a third of them slowed by up to
    /// 15x (as a preempted worker's are): least squares is pulled far off,
    /// the robust fit recovers the figures; on clean records both agree.
    #[test]
    fn the_robust_fit_ignores_slowed_records_and_equals_least_squares_on_clean_ones() {
        let x: Vec<Vec<f64>> = (0..60).map(|i| vec![1000.0 + (i * 37 % 50) as f64 * 100.0, 1.0]).collect();
        let truth = [2e-6, 1e-3];
        let clean: Vec<f64> = x.iter().map(|r| r[0] * truth[0] + r[1] * truth[1]).collect();
        // Small symmetric noise on every record, and every third one slowed.
        let y: Vec<f64> = clean
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v * (1.0 + 0.02 * ((i % 5) as f64 - 2.0)) + if i % 3 == 0 { v * (1 + i % 15) as f64 } else { 0.0 }
            })
            .collect();
        let plain = nnls(&x, &y);
        let robust = nnls_robust(&x, &y);
        let off = |c: &[f64]| c.iter().zip(&truth).map(|(a, b)| (a - b).abs() / b).fold(0.0, f64::max);
        assert!(off(&plain) > 1.0, "least squares should be pulled off by the slowed third: {plain:?}");
        assert!(off(&robust) < 0.05, "the robust fit is {robust:?}, the truth {truth:?}");
        assert_eq!(nnls_robust(&x, &clean), nnls(&x, &clean));
        assert_eq!(nnls_robust(&[], &[]), Vec::<f64>::new());
    }

    #[test]
    fn slow_values_are_the_outliers_above_the_median_only() {
        // A cold run's iterations (ms): two took 404 and 357.
        let v = [20.0, 22.0, 21.0, 404.0, 19.0, 23.0, 357.0, 20.0, 18.0];
        let slow: Vec<usize> = slow_values(&v).iter().enumerate().filter(|(_, s)| **s).map(|(i, _)| i).collect();
        assert_eq!(slow, [3, 6]);
        // A fast value stays (only waits are outliers), and so does one 10 %
        // above the median where the rest agree exactly.
        assert!(!slow_values(&[10.0, 1.0, 10.0, 11.0, 10.0]).contains(&true));
        assert!(slow_values(&[]).is_empty());
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
