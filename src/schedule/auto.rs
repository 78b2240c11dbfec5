//! `train --time-steps auto`: which number of time steps to try next, from
//! the cost model's predictions and the times measured so far.

/// `train --time-steps auto`: the T to run next, from the model's predictions
/// per T and the mean iteration seconds measured so far per T (each T at most
/// once in either list). Unmeasured T are estimated as their prediction times
/// the median measured/predicted ratio, so a T the model favours is tried
/// before the search settles on the fastest measured one. Deterministic; ties
/// go to the smaller T.
pub fn next_time_steps(predicted: &[(u32, f64)], measured: &[(u32, f64)]) -> u32 {
    let mut ratios: Vec<f64> = measured
        .iter()
        .filter_map(|&(t, m)| predicted.iter().find(|p| p.0 == t).map(|p| m / p.1))
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let scale = if ratios.is_empty() { 1.0 } else { ratios[ratios.len() / 2] };
    let mut all: Vec<(u32, f64)> =
        predicted.iter().map(|&(t, p)| (t, measured.iter().find(|m| m.0 == t).map_or(p * scale, |m| m.1))).collect();
    for &(t, m) in measured {
        if !all.iter().any(|a| a.0 == t) {
            all.push((t, m));
        }
    }
    all.iter().min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0))).map_or(1, |a| a.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_the_predicted_best_then_settles() {
        let pred = [(1, 10.0), (2, 8.0), (3, 9.0), (4, 12.0)];
        assert_eq!(next_time_steps(&pred, &[]), 2);
        // T = 2 measured slower than predicted; everything scales, T = 2 stays best by the model.
        assert_eq!(next_time_steps(&pred, &[(2, 16.0)]), 2);
        // Measured T = 2 at 16 s and T = 3 at 12 s: unmeasured T = 1 is estimated 10 x 1.33... > 12.
        assert_eq!(next_time_steps(&pred, &[(2, 16.0), (3, 12.0)]), 3);
    }
}
