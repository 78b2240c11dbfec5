//! The cost model on real counts (synthetic-small, METIS partitions): the
//! sanity properties every prediction must have, and the planner's rules.

use leapgnn::DataDir;
use leapgnn::cost::{Figures, Layout, PlanInput, Setup, Shape, layout_of, predict, tune};
use leapgnn::train::{StrategyKind, TrainConfig};

fn setup(dir: &std::path::Path, workers: usize, cache_mb: u64) -> Setup {
    let cfg = TrainConfig {
        dataset: "synthetic-small".into(),
        workers,
        parts: workers,
        batch_size: 128,
        hidden: 32,
        cache_mb,
        ..TrainConfig::default()
    };
    Setup::open(&DataDir::new(dir), &cfg).expect("synthetic-small is generated and partitioned")
}

fn layouts(w: usize) -> Vec<Layout> {
    let mut v = vec![
        layout_of(StrategyKind::ModelCentric, w, 1, &[]),
        layout_of(StrategyKind::Micrograph, w, w as u32, &[]),
        layout_of(StrategyKind::Pregather, w, w as u32, &[]),
    ];
    v.extend((1..=w as u32).map(|t| layout_of(StrategyKind::Leapgnn, w, t, &[])));
    v
}

#[test]
fn more_bandwidth_never_predicts_a_slower_run() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 4, 0);
    let job = s.job();
    let its = job.first_iterations(3);
    for prefetch in [false, true] {
        let shape = s.shape(prefetch);
        for layout in layouts(4) {
            let counts = job.count(&layout, &its);
            let mut last = f64::INFINITY;
            for bw in [1e6, 1e7, 1e8, 1e9, 1e10, 1e12] {
                let f = Figures { bandwidth: bw, ..Figures::default() };
                let p = predict(&counts, &f, &shape);
                assert!(p.iteration_seconds <= last * (1.0 + 1e-12), "{layout:?}: {bw} B/s predicts {p:?}");
                last = p.iteration_seconds;
            }
            // One faster link alone never slows anything either.
            let base = Figures { bandwidth: 1e8, ..Figures::default() };
            let mut one = base.clone();
            one.links.push(leapgnn::cost::Link { from: 1, to: 2, bandwidth: 1e10, latency: base.latency });
            assert!(
                predict(&counts, &one, &shape).iteration_seconds <= predict(&counts, &base, &shape).iteration_seconds
            );
        }
    }
}

#[test]
fn zero_remote_rows_predict_zero_network_gather() {
    let tmp = tempfile::tempdir().unwrap();
    let no_copy = Figures { local_byte_seconds: 0.0, ..Figures::default() };
    // One worker owns every row.
    let s = setup(tmp.path(), 1, 0);
    let job = s.job();
    let counts = job.count(&Layout::ModelCentric, &job.first_iterations(2));
    assert!(counts.iter().all(|c| c.workers[0].steps[0].rows.remote_rows() == 0));
    assert!(counts.iter().all(|c| c.workers[0].steps[0].rows.local > 0));
    assert_eq!(predict(&counts, &no_copy, &s.shape(false)).components.gather, 0.0);
    // Four workers whose caches hold every remote row (64 MB of 64-d rows): nothing is fetched.
    let s = setup(tmp.path(), 4, 64);
    let job = s.job();
    let its = job.first_iterations(2);
    for layout in layouts(4) {
        let counts = job.count(&layout, &its);
        for c in &counts {
            for w in &c.workers {
                assert!(w.steps.iter().all(|b| b.rows.remote_rows() == 0), "{layout:?}");
                assert!(w.pregather.as_ref().is_none_or(|u| u.remote_rows() == 0 && u.cache > 0));
            }
        }
        let p = predict(&counts, &no_copy, &s.shape(false));
        assert_eq!(p.components.gather, 0.0, "{layout:?}");
    }
    // Without the cache the same job does fetch, and pays for it.
    let s0 = setup(tmp.path(), 4, 0);
    let job0 = s0.job();
    let counts = job0.count(&Layout::ModelCentric, &its);
    assert!(predict(&counts, &no_copy, &s0.shape(false)).components.gather > 0.0);
}

#[test]
fn one_worker_gives_one_time_step() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 1, 0);
    let job = s.job();
    let its = job.first_iterations(2);
    let shape = s.shape(false);
    let f = Figures::default();
    let t = tune(&PlanInput { job: &job, shape: &shape, figures: &f, iterations: &its, prefetch: &[false] }).unwrap();
    assert_eq!(t.plan.time_steps, 1);
    assert_eq!(t.plan.workers, 1);
    assert!(t.candidates.iter().all(|c| c.time_steps == 1), "{:?}", t.candidates);
    t.plan.check(1, "test").unwrap();
}

#[test]
fn every_root_is_trained_once_whatever_the_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 4, 0);
    let job = s.job();
    let its = job.first_iterations(3);
    let shares = vec![vec![0.7, 0.2, 0.1]; 4];
    let mut all = layouts(4);
    all.push(layout_of(StrategyKind::Leapgnn, 4, 3, &shares));
    for layout in all {
        for c in job.count(&layout, &its) {
            let roots: u64 = c.workers.iter().flat_map(|w| &w.steps).map(|b| b.roots).sum();
            assert_eq!(roots, 4 * 128, "{layout:?}");
            assert!(c.workers.iter().all(|w| w.steps.len() == layout.time_steps(4)));
        }
    }
}

#[test]
fn the_planner_respects_the_memory_bound_and_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 4, 0);
    let job = s.job();
    let its = job.first_iterations(3);
    let shape: Shape = s.shape(false);
    let free = Figures::default();
    let plan =
        |f: &Figures| tune(&PlanInput { job: &job, shape: &shape, figures: f, iterations: &its, prefetch: &[false] });
    let a = plan(&free).unwrap();
    assert_eq!(a, plan(&free).unwrap(), "same inputs, same table and plan");
    assert!(a.candidates.iter().all(|c| c.fits_memory));
    let leap: Vec<_> = a.candidates.iter().filter(|c| c.strategy == StrategyKind::Leapgnn).collect();
    assert_eq!(leap.iter().map(|c| c.time_steps).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    // Fewer steps hold more roots at once: T = 1 needs the most memory.
    let peak = |t: u32| leap.iter().find(|c| c.time_steps == t).unwrap().peak_memory_bytes;
    assert!(peak(1) > peak(4), "T=1 {} B, T=4 {} B", peak(1), peak(4));
    // A bound below T = 1's need rules it out even if it is the fastest.
    let bound = Figures { memory_bytes: peak(1) - 1, ..free.clone() };
    let b = plan(&bound).unwrap();
    let chosen = b.chosen();
    assert!(chosen.fits_memory && chosen.peak_memory_bytes < peak(1) && chosen.time_steps > 1, "{chosen:?}");
    assert!(b.candidates.iter().filter(|c| c.peak_memory_bytes > bound.memory_bytes).all(|c| !c.fits_memory));
    // A bound nothing fits is refused with the need in the message.
    let tiny = Figures { memory_bytes: 1, ..free };
    let e = plan(&tiny).unwrap_err().to_string();
    assert!(e.contains("memory bound") && e.contains("--batch-size"), "{e}");
}

#[test]
fn the_search_covers_prefetch_which_hides_the_burst_and_costs_a_second_store() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 4, 0);
    let job = s.job();
    let its = job.first_iterations(3);
    let shape = s.shape(false);
    // A slow network: the pre-gather is worth hiding.
    let slow = Figures { bandwidth: 1e7, ..Figures::default() };
    let plan = |f: &Figures, prefetch: &[bool]| {
        tune(&PlanInput { job: &job, shape: &shape, figures: f, iterations: &its, prefetch }).unwrap()
    };
    let both = plan(&slow, &[false, true]);
    let find = |t: &leapgnn::cost::Tuning, s: StrategyKind, steps: u32, p: bool| {
        t.candidates.iter().find(|c| c.strategy == s && c.time_steps == steps && c.prefetch == p).cloned().unwrap()
    };
    for (strategy, steps) in [(StrategyKind::Pregather, 4), (StrategyKind::Leapgnn, 1), (StrategyKind::Leapgnn, 3)] {
        let (off, on) = (find(&both, strategy, steps, false), find(&both, strategy, steps, true));
        assert!(on.iteration_seconds < off.iteration_seconds, "{strategy} T={steps}: {on:?} vs {off:?}");
        assert!(on.peak_memory_bytes > off.peak_memory_bytes, "{strategy} T={steps}: two stores");
    }
    // Neither model-centric nor micrograph pre-gathers: they are predicted once, without.
    assert!(
        both.candidates
            .iter()
            .filter(|c| c.prefetch)
            .all(|c| matches!(c.strategy, StrategyKind::Pregather | StrategyKind::Leapgnn))
    );
    assert!(both.chosen().prefetch && both.plan.prefetch == Some(true), "{:?}", both.chosen());
    // Searching one setting only keeps to it.
    let off = plan(&slow, &[false]);
    assert!(off.candidates.iter().all(|c| !c.prefetch) && off.plan.prefetch == Some(false));
    // A memory bound the second store breaks rules prefetch out.
    let chosen = both.chosen().clone();
    let without = find(&both, StrategyKind::Leapgnn, chosen.time_steps, false);
    let tight = Figures { memory_bytes: without.peak_memory_bytes.max(1), ..slow.clone() };
    let bounded = plan(&tight, &[false, true]);
    assert!(
        bounded.candidates.iter().filter(|c| c.prefetch && c.strategy == StrategyKind::Leapgnn).all(|c| !c.fits_memory)
            || !bounded.chosen().prefetch,
        "{:?}",
        bounded.chosen()
    );
    assert!(bounded.chosen().peak_memory_bytes <= tight.memory_bytes);
}

#[test]
fn contention_slows_the_pregather_burst_only() {
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path(), 4, 0);
    let job = s.job();
    let its = job.first_iterations(3);
    let shape = s.shape(false);
    let at = |c: f64, layout: &Layout| {
        let f = Figures { bandwidth: 1e7, contention: c, ..Figures::default() };
        predict(&job.count(layout, &its), &f, &shape)
    };
    let pregather = layout_of(StrategyKind::Pregather, 4, 4, &[]);
    let micro = layout_of(StrategyKind::Micrograph, 4, 4, &[]);
    // Twice the transfer of the burst: the prediction grows by exactly the burst's transfer.
    let (none, one, two) = (at(0.0, &pregather), at(1.0, &pregather), at(2.0, &pregather));
    assert!(one.iteration_seconds > none.iteration_seconds);
    let (d1, d2) = (one.components.gather - none.components.gather, two.components.gather - one.components.gather);
    assert!((d1 - d2).abs() <= 1e-9 * d1.max(1e-12), "linear in contention: {d1} vs {d2}");
    // Per-step fetches spread out: micrograph and model-centric pay none of it.
    assert_eq!(at(0.0, &micro), at(2.0, &micro));
    assert_eq!(at(0.0, &Layout::ModelCentric), at(2.0, &Layout::ModelCentric));
}
