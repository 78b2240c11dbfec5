//! The planner: predict every strategy and, for `leapgnn`, every T = 1..W;
//! choose the T and the per-worker step shares that minimise the predicted
//! iteration time within the memory bound.
//!
//! Shares for a given T come in two candidates, both evaluated on the real
//! counts: even (each step gets 1/T of a worker's roots) and balanced. The
//! balanced one starts from the cost of each worker's own micrograph groups
//! (predicted at T = W): a step lasts as long as its most loaded worker, so
//! each kept step is levelled up to the largest own group any worker has
//! there, the levels are raised (lowest first) until the busiest worker's
//! whole work fits, and every worker pours its merged roots into the room
//! below those levels. Balancing is in seconds, so a worker whose roots are
//! costly (many remote rows) gets fewer of them into a crowded step.

use super::counts::{CountJob, IterationCounts, Layout};
use super::figures::Figures;
use super::model::{Components, Shape, block_seconds, predict_iteration, predict_per_epoch};
use crate::BadInput;
use crate::schedule::MergePlan;
use crate::train::StrategyKind;

/// One row of the prediction table.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    pub strategy: StrategyKind,
    pub time_steps: u32,
    pub iteration_seconds: f64,
    pub components: Components,
    pub peak_memory_bytes: u64,
    pub fits_memory: bool,
    /// pregather / leapgnn: gathers the next iteration's rows during this one.
    #[serde(default)]
    pub prefetch: bool,
    /// `leapgnn` only: per worker, per step share of its roots (empty: even).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance: Vec<Vec<f64>>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tuning {
    pub candidates: Vec<Candidate>,
    /// Index of the chosen `leapgnn` candidate.
    pub chosen: usize,
    pub plan: MergePlan,
}

impl Tuning {
    pub fn chosen(&self) -> &Candidate {
        &self.candidates[self.chosen]
    }
}

/// What to plan for.
pub struct PlanInput<'a> {
    pub job: &'a CountJob<'a>,
    pub shape: &'a Shape,
    pub figures: &'a Figures,
    /// The sampled iterations the prediction averages over.
    pub iterations: &'a [(u64, u64)],
    /// The prefetch settings pregather and leapgnn are predicted with (the
    /// search covers each); the shape's own is ignored.
    pub prefetch: &'a [bool],
}

/// The strategy's layout at T time steps with `shares` (empty: even).
pub fn layout_of(strategy: StrategyKind, workers: usize, time_steps: u32, shares: &[Vec<f64>]) -> Layout {
    match strategy {
        // RETEXO, VARCO and GNNPipe never sample; the cost model counts them as model-centric.
        StrategyKind::ModelCentric
        | StrategyKind::P3
        | StrategyKind::Varco
        | StrategyKind::Retexo
        | StrategyKind::Gnnpipe => Layout::ModelCentric,
        StrategyKind::Micrograph => Layout::Micrograph { pregather: false },
        StrategyKind::Pregather => Layout::Micrograph { pregather: true },
        StrategyKind::Leapgnn => {
            let t = (time_steps as usize).clamp(1, workers.max(1));
            let shares = if shares.len() == workers && shares.iter().all(|r| r.len() == t) {
                shares.to_vec()
            } else {
                vec![vec![1.0 / t as f64; t]; workers]
            };
            Layout::Merged { shares }
        }
    }
}

/// Predicts every strategy, T and prefetch setting and picks the `leapgnn` plan.
pub fn tune(inp: &PlanInput<'_>) -> Result<Tuning, BadInput> {
    let w = inp.job.workers;
    let bound = inp.figures.memory_bytes;
    let fits = |m: u64| bound == 0 || m <= bound;
    // One worker fetches nothing: prefetching has nothing to hide.
    let settings: &[bool] = if w > 1 && !inp.prefetch.is_empty() { inp.prefetch } else { &[false] };
    let per_epoch = inp.job.iterations_per_epoch();
    // Counting samples the iterations: once per layout, predicted per prefetch setting.
    let count = |strategy: StrategyKind, t: u32, balance: &[Vec<f64>]| {
        inp.job.count(&layout_of(strategy, w, t, balance), inp.iterations)
    };
    let predicted = |counts: &[IterationCounts], strategy: StrategyKind, t: u32, balance: &[Vec<f64>], prefetch| {
        let p = predict_per_epoch(counts, inp.figures, &Shape { prefetch, ..inp.shape.clone() }, per_epoch);
        Candidate {
            strategy,
            time_steps: t,
            iteration_seconds: p.iteration_seconds,
            components: p.components,
            peak_memory_bytes: p.peak_memory_bytes,
            fits_memory: fits(p.peak_memory_bytes),
            prefetch,
            balance: balance.to_vec(),
        }
    };
    let mut candidates = Vec::new();
    for (strategy, t) in [(StrategyKind::ModelCentric, 1), (StrategyKind::Micrograph, w as u32)] {
        candidates.push(predicted(&count(strategy, t, &[]), strategy, t, &[], false));
    }
    let groups = count(StrategyKind::Pregather, w as u32, &[]);
    candidates.extend(settings.iter().map(|&p| predicted(&groups, StrategyKind::Pregather, w as u32, &[], p)));
    let group_cost = own_group_seconds(&groups, inp.figures, &Shape { prefetch: false, ..inp.shape.clone() });
    for t in 1..=w as u32 {
        let even = count(StrategyKind::Leapgnn, t, &[]);
        let balanced = balanced_shares(&group_cost, t as usize)
            .filter(|_| t > 1)
            .map(|b| (count(StrategyKind::Leapgnn, t, &b), b));
        for &prefetch in settings {
            let even = predicted(&even, StrategyKind::Leapgnn, t, &[], prefetch);
            let best = match &balanced {
                Some((counts, b)) => {
                    let bal = predicted(counts, StrategyKind::Leapgnn, t, b, prefetch);
                    // The balanced shares must earn their place: ties keep the even split.
                    if better(&bal, &even) { bal } else { even }
                }
                None => even,
            };
            candidates.push(best);
        }
    }
    let chosen = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.strategy == StrategyKind::Leapgnn && c.fits_memory)
        .min_by(|a, b| a.1.iteration_seconds.total_cmp(&b.1.iteration_seconds).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i);
    let Some(chosen) = chosen else {
        let least =
            candidates.iter().filter(|c| c.strategy == StrategyKind::Leapgnn).map(|c| c.peak_memory_bytes).min();
        return Err(BadInput::new(format!(
            "no number of time steps fits the memory bound of {} MB per worker (cost.memory_bytes); the smallest plan needs {} MB: raise the bound or lower --batch-size",
            bound >> 20,
            least.unwrap_or(0).div_ceil(1 << 20)
        )));
    };
    let c = &candidates[chosen];
    let plan = MergePlan {
        workers: w,
        time_steps: c.time_steps,
        balance: c.balance.clone(),
        predicted_iteration_seconds: Some(c.iteration_seconds),
        prefetch: (w > 1).then_some(c.prefetch),
    };
    Ok(Tuning { candidates, chosen, plan })
}

/// Strictly faster, beyond float noise.
fn better(a: &Candidate, b: &Candidate) -> bool {
    a.fits_memory && (!b.fits_memory || a.iteration_seconds < b.iteration_seconds * (1.0 - 1e-9))
}

/// Mean seconds of worker r's own group t (sample + gather + compute), from
/// the W-step pre-gathered counts; the pre-gather fetch is spread over the
/// groups by their rows.
fn own_group_seconds(counts: &[IterationCounts], f: &Figures, s: &Shape) -> Vec<Vec<f64>> {
    let Some(first) = counts.first() else { return Vec::new() };
    let w = first.workers.len();
    let t_steps = first.workers.first().map_or(0, |wc| wc.steps.len());
    let mut cost = vec![vec![0.0; t_steps]; w];
    for c in counts {
        let p = predict_iteration(c, f, s);
        for (r, wc) in c.workers.iter().enumerate() {
            let rows: u64 = wc.steps.iter().map(|b| b.input_rows).sum();
            let blocks: Vec<Components> = wc.steps.iter().map(|b| block_seconds(b, r, f, s)).collect();
            let fetch = p.workers[r].gather - blocks.iter().map(|k| k.gather).sum::<f64>();
            for (t, (b, k)) in wc.steps.iter().zip(&blocks).enumerate() {
                let own = k.work();
                let part = if rows > 0 { fetch * b.input_rows as f64 / rows as f64 } else { 0.0 };
                cost[r][t] += (own + part) / counts.len() as f64;
            }
        }
    }
    cost
}

/// Balanced shares for T steps from the own-group costs (None when they are all zero).
pub fn balanced_shares(group: &[Vec<f64>], t_steps: usize) -> Option<Vec<Vec<f64>>> {
    let w = group.len();
    if w == 0 || t_steps == 0 {
        return None;
    }
    let total: Vec<f64> = group.iter().map(|g| g.iter().sum()).collect();
    let busiest = total.iter().copied().fold(0.0, f64::max);
    if busiest <= 0.0 {
        return None;
    }
    let own = |r: usize, t: usize| group[r].get(t).copied().unwrap_or(0.0);
    let mut level: Vec<f64> = (0..t_steps).map(|t| (0..w).map(|r| own(r, t)).fold(0.0, f64::max)).collect();
    raise_lowest(&mut level, busiest);
    let shares = (0..w)
        .map(|r| {
            if total[r] <= 0.0 {
                return vec![1.0 / t_steps as f64; t_steps];
            }
            let kept: Vec<f64> = (0..t_steps).map(|t| own(r, t)).collect();
            let extra = total[r] - kept.iter().sum::<f64>();
            let room: Vec<f64> = (0..t_steps).map(|t| (level[t] - kept[t]).max(0.0)).collect();
            let room_sum: f64 = room.iter().sum();
            (0..t_steps)
                .map(|t| {
                    let add = if room_sum > 0.0 { extra * room[t] / room_sum } else { extra / t_steps as f64 };
                    (kept[t] + add) / total[r]
                })
                .collect()
        })
        .collect();
    Some(shares)
}

/// Raises the lowest entries of `level` to a common height until they sum to at least `need`.
fn raise_lowest(level: &mut [f64], need: f64) {
    if level.iter().sum::<f64>() >= need || level.is_empty() {
        return;
    }
    let mut sorted = level.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // Raising the k lowest to h: k * h + (sum of the others) = need, with h between sorted[k-1] and sorted[k].
    let mut h = need / n as f64;
    for k in 1..=n {
        let cand = (need - sorted[k..].iter().sum::<f64>()) / k as f64;
        if cand >= sorted[k - 1] && (k == n || cand <= sorted[k]) {
            h = cand;
            break;
        }
    }
    for x in level.iter_mut() {
        *x = x.max(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rise_lowest_first() {
        let mut l = vec![1.0, 4.0, 2.0];
        raise_lowest(&mut l, 10.0);
        // 3, 4, 3 sums to 10.
        assert!((l.iter().sum::<f64>() - 10.0).abs() < 1e-9, "{l:?}");
        assert_eq!(l[1], 4.0);
        assert!((l[0] - 3.0).abs() < 1e-9);
        let mut l = vec![5.0, 5.0];
        raise_lowest(&mut l, 4.0);
        assert_eq!(l, vec![5.0, 5.0]);
    }

    #[test]
    fn balanced_shares_sum_to_one_and_keep_own_groups() {
        let group = vec![vec![4.0, 1.0, 1.0, 2.0], vec![1.0, 1.0, 3.0, 3.0]];
        let s = balanced_shares(&group, 2).unwrap();
        for row in &s {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{row:?}");
        }
        // Worker 0 keeps its 4 s group at step 0 (share >= 0.5 of 8 s).
        assert!(s[0][0] >= 0.5 - 1e-9);
    }
}
