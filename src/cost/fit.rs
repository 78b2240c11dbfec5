//! Non-negative least squares for a handful of unknowns: every subset of
//! free coefficients is solved by its normal equations (columns scaled to
//! unit norm first), and the feasible solution (all coefficients >= 0) with
//! the least squared error wins. Exact for up to ~6 unknowns, which is all
//! calibration needs; deterministic.

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
}
