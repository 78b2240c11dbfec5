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
    let t = tune(&PlanInput { job: &job, shape: &shape, figures: &f, iterations: &its }).unwrap();
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
    let plan = |f: &Figures| tune(&PlanInput { job: &job, shape: &shape, figures: f, iterations: &its });
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
