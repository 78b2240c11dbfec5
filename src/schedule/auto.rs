//! `train --time-steps auto`: which number of time steps to try next, from
//! the cost model's predictions and the times measured so far.

/// An unmeasured T is tried while its estimate is within this factor of the
/// fastest measured one: the model's ranking can be wrong by that much (its
/// figures are rough until calibrated), so a close T is measured once rather
/// than ruled out on the model's word.
pub const EXPLORE: f64 = 1.5;

/// `train --time-steps auto`: the T to run next, from the model's predictions
/// per T and the mean iteration seconds measured so far per T (each T at most
/// once in either list). Unmeasured T are estimated as their prediction times
/// the median measured/predicted ratio. Nothing measured: the predicted
/// fastest. Else the unmeasured T with the lowest estimate is tried if that
/// is within `EXPLORE` of the fastest measured T, and otherwise the fastest
/// measured T is kept, so the search ends on the fastest T it measured.
/// Deterministic; ties go to the smaller T.
pub fn next_time_steps(predicted: &[(u32, f64)], measured: &[(u32, f64)]) -> u32 {
    let fastest = |v: &mut dyn Iterator<Item = (u32, f64)>| {
        v.filter(|a| a.1.is_finite()).min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
    };
    let Some(best) = fastest(&mut measured.iter().copied()) else {
        return fastest(&mut predicted.iter().copied()).map_or(1, |p| p.0);
    };
    let mut ratios: Vec<f64> = measured
        .iter()
        .filter_map(|&(t, m)| predicted.iter().find(|p| p.0 == t).map(|p| m / p.1))
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let scale = if ratios.is_empty() { 1.0 } else { ratios[ratios.len() / 2] };
    let mut untried = predicted.iter().filter(|p| !measured.iter().any(|m| m.0 == p.0)).map(|&(t, p)| (t, p * scale));
    match fastest(&mut untried) {
        Some(next) if next.1 <= best.1 * EXPLORE => next.0,
        _ => best.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_the_predicted_best_then_the_close_ones_then_settles() {
        let pred = [(1, 10.0), (2, 8.0), (3, 9.0), (4, 12.0)];
        assert_eq!(next_time_steps(&pred, &[]), 2);
        // T = 2 measured twice as slow as predicted: the others are estimated at
        // twice their prediction (T 1: 20, 3: 18, 4: 24), all within 1.5 x 16; T = 3 is the lowest.
        assert_eq!(next_time_steps(&pred, &[(2, 16.0)]), 3);
        // T = 3 measured at 12 s: T = 1 (20) and T = 4 (24) are beyond 1.5 x 12; stay at 3.
        assert_eq!(next_time_steps(&pred, &[(2, 16.0), (3, 12.0)]), 3);
        // A T the model ranks far off is never tried; a measured one that is faster wins.
        assert_eq!(next_time_steps(&pred, &[(2, 8.0), (3, 30.0)]), 2);
        assert_eq!(next_time_steps(&pred, &[(1, 5.0), (2, 8.0), (3, 9.0), (4, 12.0)]), 1);
    }
}
