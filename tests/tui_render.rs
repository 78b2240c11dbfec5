//! The dashboard rendered with ratatui's TestBackend from a scripted run:
//! the numbers a user reads must be the ones the records add up to.

mod tui_support;

use leapgnn::tui::{DashboardState, Ui, View};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Color;
use tui_support::{
    draw_buffer, epoch0, info, iterations, line_with, record, render, scripted, words_with_background, worker_cells,
};

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

#[test]
fn overview_at_80x24_shows_progress_rows_miss_rates_and_traffic() {
    let s = scripted();
    let screen = render(&s, &Ui::default(), 80, 24);
    let head = line_with(&screen, "epoch 2/3");
    assert!(head.contains("iter 4/10"), "{screen}");
    // 16 iterations left at 1 s (2 steps x 0.5 s, workers in parallel) + 2 evaluations at 2 s.
    assert!(head.contains("ETA 0:20"), "{screen}");
    assert!(head.contains("loss 0.4000"), "{screen}");
    assert!(head.contains("val 71.2%") && head.contains("test 70.1%"), "{screen}");
    let what = line_with(&screen, "leapgnn");
    for part in ["synthetic-small", "micrograph", "sage", "W 2", "T 2", "run demo"] {
        assert!(what.contains(part), "{part} missing: {screen}");
    }

    // Epoch 1 so far: 4 iterations x 2 steps. Worker 0's last step is t 1, so it
    // visits model (0 + 1) mod 2 = 1. Rates: (1 MB in + 1.5 MB out) / 0.5 s.
    assert_eq!(
        worker_cells(&screen, 0),
        ["0", "1", "1", "800", "400", "200", "200", "25.0%", "5.00MB", "400kB", "0B"],
        "{screen}"
    );
    assert_eq!(
        worker_cells(&screen, 1),
        ["1", "1", "0", "1.60k", "1.20k", "240", "160", "10.0%", "1.00MB", "0B", "0B"]
    );
    // Only the columns that fit 80 columns: activations and control wait for a wider screen.
    assert!(screen.contains("migr/s") && !screen.contains("act/s"), "{screen}");

    // Miss rate of this epoch: (200 + 160) / (800 + 1600); epoch 0's 23.3 % is not mixed in.
    assert!(line_with(&screen, "workers, epoch 2").contains("miss 15.0%"), "{screen}");
    assert!(!screen.contains("23.3%") && !screen.contains("50.0%"), "{screen}");
    // Last time step: worker 0 sent 1.6 MB; (25 + 20) remote of (100 + 200) requested.
    assert!(screen.contains("comm/step 1.60MB (max 1.60MB)"), "{screen}");
    // A step whose first record alone is in (worker 1's, which sends nothing)
    // is not shown as a step that moved 0 B: the charts wait for it.
    let mut partial = scripted();
    partial.apply_record(&record(1, 4, 0, 1));
    let screen_partial = render(&partial, &Ui::default(), 80, 24);
    assert!(screen_partial.contains("comm/step 1.60MB (max 1.60MB)"), "{screen_partial}");
    assert!(screen.contains("miss/step 15.0% · epoch 15.0%"), "{screen}");
    // Each chart's scale on its bottom border: 0 to the largest bar shown (a fixed 100 % for rates).
    assert!(screen.contains(" 0..1.60MB · last ") && screen.contains(" 0..100.0% · last "), "{screen}");
    assert!(screen.contains("val 71.2% (best 71.2%) test 70.1%"), "{screen}");
    assert!(screen.contains("checkpoint written at iteration 12"), "{screen}");
    assert!(screen.contains("q stop") && screen.contains("? help"), "{screen}");
}

#[test]
fn a_larger_screen_shows_every_category_and_the_whole_log() {
    let mut s = scripted();
    s.push_event("worker 1 is slow");
    let screen = render(&s, &Ui::default(), 140, 40);
    for col in ["feat/s", "grad/s", "migr/s", "act/s", "ctrl/s"] {
        assert!(screen.contains(col), "{col} missing: {screen}");
    }
    for e in ["worker 0 started on 127.0.0.1", "worker 1 started", "checkpoint written", "worker 1 is slow"] {
        assert!(screen.contains(e), "{e} missing: {screen}");
    }
    assert!(screen.contains("events (4)"), "{screen}");
    assert!(screen.contains("it/s 1.00"), "{screen}");
}

#[test]
fn tab_switches_views_and_question_mark_opens_the_help() {
    let s = scripted();
    let mut ui = Ui::default();
    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Workers);
    let screen = render(&s, &ui, 80, 24);
    // Worker 0 per step: 1 MB in and 1.5 MB out of features in 0.5 s.
    assert!(line_with(&screen, "bytes/s in/out").contains("bytes/s"), "{screen}");
    assert!(screen.contains("2.00MB/3.00MB"), "{screen}");
    assert!(screen.contains("step miss"), "{screen}");

    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Curves);
    let screen = render(&s, &ui, 80, 24);
    assert!(screen.contains("loss per iteration") && screen.contains("accuracy per epoch"), "{screen}");
    let row: Vec<&str> = line_with(&screen, "1.2345").split_whitespace().filter(|c| *c != "│").collect();
    assert!(row.ends_with(&["1", "1.2345", "71.2%", "70.1%", "10.0", "2.0"]), "{row:?}");

    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Log);
    assert!(render(&s, &ui, 80, 24).contains("worker 0 started on 127.0.0.1"));
    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Steps);
    assert!(render(&s, &ui, 80, 24).contains("time steps: epoch 2"));
    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Overview);
    ui.on_key(key(KeyCode::BackTab));
    assert_eq!(ui.view, View::Steps);

    ui.on_key(key(KeyCode::Char('?')));
    let screen = render(&s, &ui, 80, 24);
    assert!(screen.contains("help: keys"), "{screen}");
    assert!(screen.contains("stop: checkpoint, then exit"), "{screen}");
    ui.on_key(key(KeyCode::Esc));
    assert!(!render(&s, &ui, 80, 24).contains("help: keys"));
}

#[test]
fn q_and_ctrl_c_ask_to_stop_other_keys_do_not() {
    let mut ui = Ui::default();
    assert_eq!(ui.on_key(key(KeyCode::Char('q'))), leapgnn::tui::Action::Stop);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(ui.on_key(ctrl_c), leapgnn::tui::Action::Interrupt);
    assert_eq!(ui.on_key(key(KeyCode::Char('c'))), leapgnn::tui::Action::Nothing);
    assert_eq!(ui.on_key(key(KeyCode::Char('x'))), leapgnn::tui::Action::Nothing);
}

#[test]
fn the_stopping_and_finished_states_are_shown() {
    let mut s = scripted();
    s.stopping = true;
    assert!(render(&s, &Ui::default(), 80, 24).contains("STOPPING after this iteration"));
    s.finished = true;
    let screen = render(&s, &Ui::default(), 80, 24);
    assert!(screen.contains("DONE") && screen.contains("ETA 0:00"), "{screen}");
}

#[test]
fn before_the_first_record_the_screen_waits_without_inventing_numbers() {
    let s = DashboardState::new(info());
    let screen = render(&s, &Ui::default(), 80, 24);
    assert!(line_with(&screen, "epoch 1/3").contains("ETA --"), "{screen}");
    assert_eq!(worker_cells(&screen, 0).iter().filter(|c| *c == "-").count(), 10, "{screen}");
    assert!(screen.contains("accuracy: after the first epoch"), "{screen}");
}

#[test]
fn history_stays_bounded_over_a_long_run() {
    let mut s = DashboardState::new(info());
    for e in 0..40u64 {
        for r in iterations(e, 0..1000) {
            s.apply_record(&r);
        }
        s.apply_epoch(&leapgnn::metrics::EpochRecord { epoch: e, ..epoch0() });
        s.push_event(format!("epoch {e} done"));
    }
    for i in 0..5000 {
        s.push_event(format!("event {i}"));
    }
    assert_eq!(s.steps().len(), s.steps().capacity());
    assert_eq!(s.iterations().len(), s.iterations().capacity());
    assert_eq!(s.events().len(), s.events().capacity());
    assert!(s.epochs().len() <= s.epochs().capacity());
    // The newest entries are the ones kept.
    let last = s.iterations().last().unwrap();
    assert_eq!((last.epoch, last.iteration), (39, 999));
    assert_eq!(s.events().last().unwrap(), "event 4999");
    assert!((last.loss - 0.4).abs() < 1e-9, "an iteration's loss is the sum of its 4 records");
    // A record from a finished epoch arriving late does not reopen that epoch.
    s.apply_record(&record(38, 999, 1, 0));
    assert_eq!(s.position(), Some((39, 999)));
    assert_eq!(s.epoch_rows().requested, 1000 * 2 * 300);
}

/// The time-step grid: one cell per worker and time step of the newest
/// iterations, each the step's miss rate and bytes received, as the records say.
#[test]
fn the_steps_view_shows_every_worker_and_time_step_of_the_latest_iterations() {
    let s = scripted();
    let ui = Ui { view: View::Steps, ..Ui::default() };
    let screen = render(&s, &ui, 80, 24);
    // Epoch 2 (index 1) has reached iteration 4: it comes first, then 3, 2, ...
    assert!(screen.contains("time steps: epoch 2, iteration 4 first"), "{screen}");
    let words = |l: &str| -> Vec<String> { l.split_whitespace().filter(|c| *c != "│").map(str::to_string).collect() };
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.contains("wkr")).unwrap();
    // 80 columns hold 7 step columns of 8 + 1: iterations 4, 3 and 2 with T = 2 each (whole iterations only).
    assert_eq!(words(lines[at]), ["wkr", "e2", "i4", "e2", "i4", "e2", "i3", "e2", "i3", "e2", "i2", "e2", "i2"]);
    assert_eq!(words(lines[at + 1]), ["t0", "t1", "t0", "t1", "t0", "t1"]);
    let cells = |label: &str| -> Vec<String> {
        line_with(&screen, label).split_whitespace().filter(|c| *c != "│").skip(2).map(str::to_string).collect()
    };
    // Worker 0 misses 25 of 100 rows per step in epoch 2 and receives 1 MB of features + 100 kB of gradients.
    assert_eq!(cells("w0 miss"), vec!["25.0%"; 6], "{screen}");
    assert_eq!(cells("w0 rcv"), vec!["1.10MB"; 6], "{screen}");
    assert_eq!(cells("w1 miss"), vec!["10.0%"; 6], "{screen}");
    assert_eq!(cells("w1 rcv"), vec!["500kB"; 6], "{screen}");
    assert!(screen.contains("miss = remote / requested") && screen.contains("colour: miss < 10% green"), "{screen}");
}

/// A restart (`--restarts`) resumes from its checkpoint and sends the
/// iterations after it again: the dashboard shows each once, not the failed
/// attempt's share added to the replay's.
#[test]
fn a_restart_replaces_what_it_trains_again_instead_of_adding_to_it() {
    let straight = {
        let mut s = DashboardState::new(info());
        iterations(0, 0..6).iter().for_each(|r| s.apply_record(r));
        s
    };
    let mut s = DashboardState::new(info());
    // The failed attempt got through iteration 5, then half of iteration 6's records.
    iterations(0, 0..6).iter().for_each(|r| s.apply_record(r));
    iterations(0, 6..7).iter().take(2).for_each(|r| s.apply_record(r));
    s.start(leapgnn::metrics::RunInfo { start_epoch: 0, start_iteration: 4, ..info() });
    assert_eq!(s.position(), Some((0, 3)), "the header goes back to the checkpoint");
    iterations(0, 4..6).iter().for_each(|r| s.apply_record(r));
    let cells = |s: &DashboardState| s.recent_cells(8);
    assert_eq!(cells(&s), cells(&straight));
    let losses = |s: &DashboardState| s.iterations().iter().map(|i| (i.iteration, i.loss)).collect::<Vec<_>>();
    assert_eq!(losses(&s), losses(&straight));
    assert_eq!(s.epoch_rows(), straight.epoch_rows());
    assert_eq!(s.position(), Some((0, 5)));
}

/// The header's loss and the loss chart show only iterations whose every
/// record has arrived: never a partial sum while the last ones come in.
#[test]
fn the_loss_shown_is_that_of_the_last_complete_iteration() {
    let mut s = DashboardState::new(info());
    iterations(0, 0..3).iter().for_each(|r| s.apply_record(r));
    // Records carry 0.1 each, 4 per iteration (2 workers x 2 time steps).
    s.apply_record(&record(0, 3, 0, 0));
    assert_eq!(s.last_loss().map(|l| (l * 1e6).round()), Some(0.4e6), "iteration 2's full loss, not 3's first share");
    assert_eq!(s.complete_iterations().count(), 3);
    s.finished = true;
    assert_eq!(s.complete_iterations().count(), 4, "once the run has ended, the last one counts");
}

/// The grid reaches back as far as the screen is wide: at 300 columns, 32
/// step columns, 16 iterations of T = 2 (it stopped at 8 iterations).
#[test]
fn a_wide_screen_shows_as_many_iterations_as_fit() {
    let mut s = DashboardState::new(info());
    iterations(0, 0..10).iter().chain(&iterations(1, 0..10)).for_each(|r| s.apply_record(r));
    let screen = render(&s, &Ui { view: View::Steps, ..Ui::default() }, 300, 24);
    let header = line_with(&screen, "wkr");
    let shown: Vec<&str> = header.split_whitespace().filter(|w| w.starts_with('i')).collect();
    assert_eq!(shown.len(), 32, "{screen}");
    // Newest first: epoch 2's ten iterations, then epoch 1's last six.
    assert!(header.contains("e2 i10") && header.contains("e1 i5") && !header.contains("e1 i4"), "{screen}");
}

/// At 50 columns the key hint took 25 of them and the view tabs were cut
/// ("overview │ wor"); now the hint makes way for them. Wide enough, both are there.
#[test]
fn a_narrow_screen_keeps_the_view_tabs_whole() {
    let s = scripted();
    let last = |w: u16| render(&s, &Ui::default(), w, 24).lines().last().unwrap_or_default().to_string();
    let narrow = last(50);
    assert!(narrow.contains("overview │ workers │ curves │ log │ steps"), "{narrow}");
    assert!(!narrow.contains("q stop"), "{narrow}");
    let wide = last(80);
    assert!(wide.contains("overview │ workers") && wide.contains("q stop  tab view  ↑↓ scroll  ? help"), "{wide}");
}

/// At 40 columns the five titles do not fit (they were cut to `overview │
/// workers │ curves │ log │ st`): the view shown keeps its name, the others
/// their initial, whichever view it is.
#[test]
fn a_screen_too_narrow_for_the_tab_titles_names_the_view_shown_and_initials_the_rest() {
    let s = scripted();
    let last = |view: View| {
        render(&s, &Ui { view, ..Ui::default() }, 40, 24).lines().last().unwrap_or_default().trim_end().to_string()
    };
    assert_eq!(last(View::Overview), " overview │ w │ c │ l │ s");
    assert_eq!(last(View::Steps), " o │ w │ c │ l │ steps");
    assert_eq!(last(View::Log), " o │ w │ c │ log │ s");
}

/// A record of a step that requested `requested` feature rows and fetched
/// `remote` of them from other workers (the rest local).
fn with_rows(mut r: leapgnn::metrics::StepRecord, requested: u64, remote: u64) -> leapgnn::metrics::StepRecord {
    r.rows = leapgnn::metrics::RowCounts { requested, local: requested - remote, cache_hit: 0, remote };
    r.miss_rate = r.rows.miss_rate().unwrap_or(0.0);
    r
}

/// A full-graph run: model-centric names a strategy of both engines, so the
/// header names the engine too; and its steps fetch no feature rows through
/// the cache, so no view shows a miss rate for them (it showed a green 0.0%).
#[test]
fn a_full_graph_run_names_its_engine_and_shows_no_miss_rate_for_steps_that_request_no_rows() {
    use leapgnn::metrics::RunInfo;
    let fg = RunInfo {
        strategy: "model-centric".into(),
        mode: Some("full-graph".into()),
        time_steps: 1,
        iterations_per_epoch: 1,
        ..info()
    };
    let mut s = DashboardState::new(fg);
    // Two epochs of one step, a record per worker and layer.
    for e in 0..2 {
        for layer in 0..2 {
            for w in 0..2 {
                let r = leapgnn::metrics::StepRecord { layer: Some(layer), ..with_rows(record(e, 0, 0, w), 0, 0) };
                s.apply_record(&r);
            }
        }
    }
    let screen = render(&s, &Ui::default(), 100, 30);
    let what = line_with(&screen, "leapgnn │");
    assert!(what.contains("│ model-centric · full-graph │"), "{screen}");
    // A mini-batch run's header is as it was.
    let minibatch = render(&scripted(), &Ui::default(), 100, 30);
    assert!(line_with(&minibatch, "leapgnn │").contains("│ micrograph │ sage"), "{minibatch}");

    assert!(line_with(&screen, "workers, epoch 2").contains("miss - "), "{screen}");
    for w in 0..2 {
        let cells = worker_cells(&screen, w);
        assert_eq!((cells[3].as_str(), cells[7].as_str()), ("0", "-"), "req 0, miss -: {screen}");
    }
    assert!(screen.contains("miss/step - · epoch -"), "{screen}");
    // The newest step is left out while the run goes on (its records may not all be in).
    assert!(screen.contains(" no rows requested · last 1 step "), "{screen}");
    assert!(!screen.contains("0.0%"), "no view may read 0 of 0 rows as a perfect rate:\n{screen}");
    let workers = render(&s, &Ui { view: View::Workers, ..Ui::default() }, 100, 30);
    assert_eq!(worker_cells(&workers, 1)[8], "-", "step miss: {workers}");

    let grid = draw_buffer(&s, &Ui { view: View::Steps, ..Ui::default() }, 100, 30);
    for w in 0..2 {
        let miss = words_with_background(&grid, &format!("w{w} miss"));
        // `w0`, `miss`, then the newest two epochs' step: `-`, uncoloured.
        assert_eq!(miss[2..], [("-".into(), Color::Reset), ("-".into(), Color::Reset)], "{miss:?}");
    }
}

/// In the grid, a step that requested rows and missed none is a real 0.0%
/// (green); one that requested none is `-` (uncoloured); one whose record has
/// not come in yet is `…` in both rows.
#[test]
fn the_grid_tells_zero_of_many_from_zero_of_none_and_from_not_yet() {
    let mut s = DashboardState::new(info());
    for t in 0..2 {
        s.apply_record(&with_rows(record(0, 0, t, 0), 0, 0));
        s.apply_record(&with_rows(record(0, 0, t, 1), 100, 0));
    }
    // Iteration 2: worker 1's step 1 has not arrived yet.
    s.apply_record(&with_rows(record(0, 1, 0, 0), 100, 40));
    s.apply_record(&with_rows(record(0, 1, 0, 1), 100, 0));
    s.apply_record(&with_rows(record(0, 1, 1, 0), 0, 0));
    let grid = draw_buffer(&s, &Ui { view: View::Steps, ..Ui::default() }, 80, 24);
    let cells = |label: &str| -> Vec<(String, Color)> { words_with_background(&grid, label)[2..].to_vec() };
    let (green, red) = (Color::Green, Color::Red);
    // Columns: i2 t0, i2 t1, i1 t0, i1 t1.
    let cell = |text: &str, bg: Color| (text.to_string(), bg);
    assert_eq!(
        cells("w0 miss"),
        [cell("40.0%", red), cell("-", Color::Reset), cell("-", Color::Reset), cell("-", Color::Reset)]
    );
    assert_eq!(
        cells("w1 miss"),
        [cell("0.0%", green), cell("…", Color::Reset), cell("0.0%", green), cell("0.0%", green)]
    );
    let rcv: Vec<String> = cells("w1 rcv").into_iter().map(|c| c.0).collect();
    assert_eq!(rcv, ["500kB", "…", "500kB", "500kB"]);
    let screen = render(&s, &Ui { view: View::Steps, ..Ui::default() }, 100, 24);
    assert!(screen.contains("(- none requested, … not in yet)"), "{screen}");
}

/// A loss that has fallen below a thousandth (full-graph training without
/// dropout reaches 1e-6) is shown with its digits, and its chart keeps its
/// bars: not `loss 0.0000 (min 0.0000)` over an empty chart scaled `0..0.0000`.
#[test]
fn a_loss_below_a_thousandth_keeps_its_digits_and_its_bars() {
    let mut s = DashboardState::new(info());
    // Iteration i's loss: (10 - i) x 1e-6 in all (4 records of 1/4 each).
    for (i, r) in iterations(0, 0..10).into_iter().enumerate() {
        let it = (i / 4) as f64;
        s.apply_record(&leapgnn::metrics::StepRecord { loss: (10.0 - it) * 0.25e-6, ..r });
    }
    s.apply_epoch(&leapgnn::metrics::EpochRecord { loss: 5.5e-6, ..epoch0() });
    let screen = render(&s, &Ui::default(), 80, 24);
    // The newest complete iteration is the 9th (index 8): 2e-6; the first 1e-5.
    assert!(line_with(&screen, "epoch 1/3").contains("loss 2.00e-6"), "{screen}");
    assert!(screen.contains(" loss 2.00e-6 (min 2.00e-6) "), "{screen}");
    assert!(screen.contains(" 0..1.00e-5 · last 9 iterations "), "{screen}");
    // The chart's bars: the row under its title holds the first (tallest) bar.
    let chart_row = screen.lines().skip_while(|l| !l.contains(" loss 2.00e-6 (min")).nth(1).unwrap();
    let left_half: String = chart_row.chars().take(40).collect();
    assert!(left_half.contains('█'), "no bar in the loss chart:\n{screen}");

    let mut ui = Ui::default();
    ui.on_key(key(KeyCode::Tab));
    ui.on_key(key(KeyCode::Tab));
    assert_eq!(ui.view, View::Curves);
    let screen = render(&s, &ui, 80, 24);
    let row: Vec<&str> = line_with(&screen, "5.50e-6").split_whitespace().filter(|c| *c != "│").collect();
    assert!(row.ends_with(&["1", "5.50e-6", "71.2%", "70.1%", "10.0", "2.0"]), "{row:?}");
    assert!(line_with(&screen, "1.00e-5│").contains("⠉"), "the loss curve is drawn on its own scale:\n{screen}");
}

/// RETEXO's epochs are rounds of one stage (layer) after another: the header
/// says which stage runs (it showed `epoch 4/6` alone).
#[test]
fn a_retexo_run_shows_its_stage_beside_the_epoch() {
    use leapgnn::metrics::RunInfo;
    let retexo = RunInfo {
        strategy: "retexo".into(),
        mode: Some("full-graph".into()),
        time_steps: 1,
        epochs: 6,
        iterations_per_epoch: 1,
        stages: Some(2),
        ..info()
    };
    for (epoch, stage) in [(0, "stage 1/2"), (2, "stage 1/2"), (3, "stage 2/2"), (5, "stage 2/2")] {
        let mut s = DashboardState::new(retexo.clone());
        s.apply_record(&record(epoch, 0, 0, 0));
        let screen = render(&s, &Ui::default(), 120, 30);
        let line = line_with(&screen, "epoch ");
        assert!(line.contains(&format!("{stage}  epoch {}/6", epoch + 1)), "epoch {epoch}: {line}");
    }
    // Every other strategy's header is as it was.
    let plain = render(&scripted(), &Ui::default(), 120, 30);
    assert!(!plain.contains("stage"), "{plain}");
}

/// Eight workers of eight time steps, a run and dataset named at length, a
/// worker's log line naming its 40-character host: what a cluster run sends.
fn crowded() -> DashboardState {
    let mut s = DashboardState::new(leapgnn::metrics::RunInfo {
        run: "sweep-2026-11-30-leapgnn-t8-cache512-seed7".into(),
        dataset: "/scratch/someone/datasets/ogbn-papers100M-relabelled".into(),
        workers: 8,
        time_steps: 8,
        ..info()
    });
    s.push_event("[worker 7] started on gpu-node-0123456789.cluster.example.org (pid 4242)");
    for e in 0..2 {
        for i in 0..5 {
            (0..8).flat_map(|t| (0..8).map(move |w| record(e, i, t, w))).for_each(|r| s.apply_record(&r));
        }
        s.apply_epoch(&leapgnn::metrics::EpochRecord { epoch: e, ..epoch0() });
    }
    s
}

/// The words of `line` between box borders.
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || c == '│').filter(|w| !w.is_empty()).collect()
}

/// At 40x10 the header cut the run's numbers (`loss 6.`), the overview's
/// worker table had no row left, the workers view dropped the miss rate for
/// the row counts, the grid squeezed eight step columns into three
/// (`e2 i5` read `2 i5`) and the epoch table cut its headers (`ain s`).
/// Now a part is whole or absent, names end in `…`, and what is left out is counted.
#[test]
fn eight_workers_and_long_names_at_40x10_keep_every_number_whole() {
    let s = crowded();
    let at = |view: View| render(&s, &Ui { view, ..Ui::default() }, 40, 10);
    let screen = at(View::Overview);
    let lines: Vec<&str> = screen.lines().collect();
    assert!(lines.iter().all(|l| fmt_width(l) <= 40), "{screen}");
    // The names are elided; W and T stay.
    assert!(lines[0].contains('…') && lines[0].contains("W 8") && lines[0].contains("T 8"), "{screen}");
    // Each progress field whole or absent: 64 records of 0.1 make the loss 6.4000.
    for whole in ["epoch 2/3", "iter 5/10", "loss 6.4000", "val 71.2%", "test 70.1%"] {
        let label = whole.split(' ').next().unwrap();
        assert!(!lines[1].contains(&format!("{label} ")) || lines[1].contains(whole), "{whole}: {screen}");
    }
    assert!(lines[1].contains("epoch 2/3") && lines[1].contains("ETA"), "{screen}");
    // Worker 0 misses (25 x 8 x 5) of (100 x 8 x 5) rows this epoch; the others 10 %.
    let w0 = worker_cells(&screen, 0);
    assert!(w0.contains(&"25.0%".into()) && w0.contains(&"1.00k".into()), "{screen}");
    assert!(screen.contains(" 1 of 8 workers shown "), "{screen}");

    let workers = at(View::Workers);
    assert!(worker_cells(&workers, 3).contains(&"10.0%".into()), "the miss rate gives way last: {workers}");
    assert!(workers.contains(" 4 of 8 workers shown "), "{workers}");

    let grid = at(View::Steps);
    let header = words(line_with(&grid, "wkr"));
    assert_eq!(header, ["wkr", "e2", "i5", "e2", "i5", "e2", "i5"], "{grid}");
    assert!(words(line_with(&grid, "w0 miss"))[2..] == ["25.0%"; 3], "{grid}");
    assert!(grid.contains("e2 i5: steps 0-2 of 8"), "{grid}");

    let curves = at(View::Curves);
    let head = words(line_with(&curves, "│epoch"));
    assert!(head.iter().all(|w| ["epoch", "loss", "val", "test", "train", "s", "eval"].contains(w)), "{curves}");
    assert!(head.contains(&"val") && head.contains(&"test"), "{curves}");

    let log = at(View::Log);
    assert!(line_with(&log, "[worker 7] started on gpu-node").trim_end().ends_with("…│"), "{log}");
}

/// Columns a line of the screen takes (every glyph the dashboard draws takes one).
fn fmt_width(l: &str) -> usize {
    l.chars().count()
}

/// The other sizes a terminal comes in, from one too small for any view to a
/// wall screen, and a resize from each to the next in one terminal: nothing
/// panics, no view is drawn where it cannot fit, and every resize leaves the
/// screen as a fresh one of its size.
#[test]
fn every_view_draws_at_20x5_80x24_and_300x80_and_after_resizes() {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    let s = crowded();
    let sizes = [(20, 5), (80, 24), (300, 80), (40, 10), (1, 1), (80, 24)];
    let mut t = Terminal::new(TestBackend::new(300, 80)).unwrap();
    for view in View::ALL {
        for help in [false, true] {
            let ui = Ui { view, help, ..Ui::default() };
            for (w, h) in sizes {
                t.backend_mut().resize(w, h);
                t.draw(|f| leapgnn::tui::draw(f, &s, &ui)).unwrap();
                let shown = tui_support::screen(&t);
                assert_eq!(shown, render(&s, &ui, w, h), "{view:?} at {w}x{h}");
            }
        }
    }
    let tiny = render(&s, &Ui::default(), 20, 5);
    assert!(tiny.contains("epoch 2/3") && tiny.contains("20x5: the views") && tiny.contains("40x10"), "{tiny}");
    assert!(!tiny.contains("┌"), "no view squeezed into 20x5:\n{tiny}");

    let wide = render(&s, &Ui::default(), 300, 80);
    let head = line_with(&wide, "leapgnn │");
    assert!(head.contains("/scratch/someone/datasets/ogbn-papers100M-relabelled") && !head.contains('…'), "{head}");
    assert!(head.contains("run sweep-2026-11-30-leapgnn-t8-cache512-seed7"), "{head}");
    for w in 0..8 {
        assert!(worker_cells(&wide, w).len() == 13, "every column for worker {w}: {wide}");
    }
    assert!(wide.contains("gpu-node-0123456789.cluster.example.org (pid 4242)"), "{wide}");

    let grid = render(&s, &Ui { view: View::Steps, ..Ui::default() }, 80, 24);
    assert!(grid.contains(" 7 of 8 workers shown "), "{grid}");
    assert!(line_with(&grid, "w6 rcv").contains("500kB"), "{grid}");
}

/// The accuracy chart's lines were told apart by colour alone (green val,
/// cyan test, both braille), and ratatui drops the legend at 80x24: under
/// NO_COLOR nothing said which line was which. Each line has its own mark,
/// and the chart's bottom border names it.
#[test]
fn the_accuracy_lines_are_told_apart_without_colour() {
    let mut s = scripted();
    s.apply_epoch(&leapgnn::metrics::EpochRecord { epoch: 1, val_accuracy: 0.9, test_accuracy: 0.3, ..epoch0() });
    let screen = render(&s, &Ui { view: View::Curves, ..Ui::default() }, 80, 24);
    let key = line_with(&screen, "⠒ val");
    assert!(key.contains("⠒ val  • test ┘"), "{screen}");
    // The chart's plot, left of the epoch table: both marks drawn, and never the same glyph.
    let plot: Vec<String> = screen
        .lines()
        .skip_while(|l| !l.contains("accuracy"))
        .map(|l| l.chars().take(80 - 46).collect::<String>())
        .collect();
    let glyphs = |keep: fn(char) -> bool| plot.iter().flat_map(|l| l.chars()).filter(|c| keep(*c)).count();
    assert!(glyphs(|c| c == '•') > 0, "no test mark:\n{screen}");
    assert!(glyphs(|c| ('\u{2801}'..='\u{28ff}').contains(&c)) > 0, "no val line:\n{screen}");
    // The x axis of epochs 1..2 is labelled 1 and 2 (it read `1 2 2`, 1.5 rounded).
    let labels = plot.iter().find(|l| words(l).first() == Some(&"1")).unwrap();
    assert_eq!(words(labels), ["1", "2"], "{screen}");
}

/// `--time-steps auto` changes T from one epoch to the next: the header said
/// the T the run started with (`T 2`) while the grid showed four steps.
#[test]
fn the_header_shows_the_time_steps_the_records_run() {
    let mut s = DashboardState::new(info());
    for i in 0..3 {
        (0..4).flat_map(|t| (0..2).map(move |w| record(1, i, t, w))).for_each(|r| s.apply_record(&r));
    }
    let screen = render(&s, &Ui::default(), 100, 24);
    assert!(line_with(&screen, "leapgnn │").contains("│ T 4 │"), "{screen}");
    let fresh = render(&DashboardState::new(info()), &Ui::default(), 100, 24);
    assert!(line_with(&fresh, "leapgnn │").contains("│ T 2 │"), "{fresh}");
}

/// Every worker of a 64-worker run can be brought on screen in each view
/// that lists workers, by ↓ one row at a time from the first page to End.
#[test]
fn down_reaches_every_worker_of_a_64_worker_run_in_every_worker_view() {
    let mut s = DashboardState::new(leapgnn::metrics::RunInfo { workers: 64, ..info() });
    for t in 0..2 {
        for w in 0..64 {
            s.apply_record(&record(0, 0, t, w));
        }
    }
    for view in [View::Overview, View::Workers, View::Steps] {
        let mut ui = Ui { view, ..Ui::default() };
        let mut seen = std::collections::BTreeSet::new();
        let mut page = 0;
        for _ in 0..64 {
            let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).expect("test terminal");
            t.draw(|f| page = leapgnn::tui::draw_paged(f, &s, &ui)).expect("draws");
            let screen = tui_support::screen(&t);
            let on_screen = |w: u32| match view {
                View::Steps => screen.contains(&format!("w{w} miss")),
                _ => screen.lines().any(|l| tui_support::row_of(l) == Some(w)),
            };
            seen.extend((0..64).filter(|&w| on_screen(w)));
            if let leapgnn::tui::Action::Scroll(how) = ui.on_key(key(KeyCode::Down)) {
                ui.scroll_by(how, page, s.workers().len());
            }
        }
        assert!(page > 0 && page < 64, "{view:?}: a page of {page}");
        assert_eq!(seen.len(), 64, "{view:?}: seen {seen:?}");
        assert_eq!(ui.scroll, 64 - page, "{view:?}: ↓ went past the last page");
    }
}

/// Each worker's host (the SSH profile's, the Slurm node) beside its rows,
/// a long name elided with `…` and the numbers kept whole; a run that does
/// not say where its workers run has no host column.
#[test]
fn the_worker_tables_show_where_each_worker_runs() {
    let long = "gpu-node-017.cluster.example.org";
    let mut s = DashboardState::new(leapgnn::metrics::RunInfo { hosts: vec![long.into(), "n2".into()], ..info() });
    for r in iterations(0, 0..2) {
        s.apply_record(&r);
    }
    let screen = render(&s, &Ui::default(), 100, 30);
    let row = worker_cells(&screen, 0);
    assert_eq!(row[1], "gpu-node-017.cl…", "{screen}");
    assert!(row.contains(&"50.0%".to_string()), "{screen}");
    assert_eq!(worker_cells(&screen, 1)[1], "n2", "{screen}");
    let workers = render(&s, &Ui { view: View::Workers, ..Ui::default() }, 100, 30);
    assert!(workers.matches("gpu-node-017.cl…").count() == 2, "{workers}");
    // Narrow: the host gives way before the miss rate.
    let narrow = render(&s, &Ui::default(), 40, 24);
    assert!(line_with(&narrow, "50.0%").contains("200") && !narrow.contains("host"), "{narrow}");
    assert!(!render(&scripted(), &Ui::default(), 100, 30).contains("host"));
}

/// Two SSH profile entries on one address (two sshd ports of one machine,
/// as the ssh tests run) are told apart in the host column by their ports,
/// a long address elided before its port: the column showed the address
/// alone, and the workers of both entries looked alike.
#[test]
fn two_ssh_entries_on_one_address_show_their_ports_in_the_host_column() {
    let long = "gpu-node-017.cluster.example.org";
    let hosts: String = [("127.0.0.1", 22001), ("127.0.0.1", 22002), (long, 22), (long, 2222)]
        .iter()
        .map(|(a, p)| format!("[[host]]\naddress = \"{a}\"\nport = {p}\nuser = \"gnn\"\nworkers = 1\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lab.toml");
    let profile = leapgnn::cluster::Profile::parse(&format!("[cluster]\nlauncher = \"ssh\"\n{hosts}"), &path).unwrap();
    let launcher = leapgnn::cluster::SshLauncher::new(profile).unwrap();
    // What the driver tells the dashboard (RunInfo::hosts, and `train --json-stream`'s run record).
    let placed: Vec<String> = (0..4).map(|r| leapgnn::cluster::Launcher::host_of(&launcher, r)).collect();
    assert_eq!(placed[..2], ["127.0.0.1:22001", "127.0.0.1:22002"]);
    let mut s = DashboardState::new(leapgnn::metrics::RunInfo { workers: 4, hosts: placed, ..info() });
    for r in iterations(0, 0..2) {
        s.apply_record(&r);
    }
    let screen = render(&s, &Ui::default(), 120, 30);
    let shown: Vec<String> = (0..4).map(|w| worker_cells(&screen, w)[1].clone()).collect();
    assert_eq!(shown, ["127.0.0.1:22001", "127.0.0.1:22002", "gpu-node-017…:22", "gpu-node-0…:2222"], "{screen}");
}
