//! A scripted run for the dashboard tests: numbers chosen so every figure on
//! screen can be worked out by hand.

#![allow(dead_code)]

use leapgnn::metrics::{ByteCounts, EpochRecord, RowCounts, RunInfo, StepRecord};
use leapgnn::tui::{DashboardState, Ui, draw};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

pub fn info() -> RunInfo {
    RunInfo {
        run: "demo".into(),
        dataset: "synthetic-small".into(),
        strategy: "micrograph".into(),
        mode: None,
        model: "sage".into(),
        workers: 2,
        time_steps: 2,
        epochs: 3,
        iterations_per_epoch: 10,
        start_epoch: 0,
        start_iteration: 0,
        stages: None,
        hosts: vec![],
    }
}

/// Worker 0 misses 50 % of its rows in epoch 0 and 25 % in epoch 1; worker 1
/// misses 10 % throughout. Each record takes 0.5 s and carries loss 0.1;
/// worker 0 receives 1 MB and sends 1.5 MB of features and 100 kB of
/// gradients each way per step, worker 1 receives 0.5 MB of features.
pub fn record(epoch: u64, iteration: u64, time_step: u32, worker: u32) -> StepRecord {
    let (rows, bytes_in, bytes_out) = if worker == 0 {
        let remote = if epoch == 0 { 50 } else { 25 };
        (
            RowCounts { requested: 100, local: 75 - remote, cache_hit: 25, remote },
            ByteCounts { features: 1_000_000, gradients: 100_000, ..Default::default() },
            ByteCounts { features: 1_500_000, gradients: 100_000, ..Default::default() },
        )
    } else {
        (
            RowCounts { requested: 200, local: 150, cache_hit: 30, remote: 20 },
            ByteCounts { features: 500_000, ..Default::default() },
            ByteCounts::default(),
        )
    };
    StepRecord {
        epoch,
        iteration,
        time_step,
        worker,
        model: (worker + time_step) % 2,
        roots: 64,
        edges: 640,
        rows,
        miss_rate: rows.miss_rate().unwrap_or(0.0),
        bytes_in,
        bytes_out,
        sample_seconds: 0.1,
        gather_seconds: 0.2,
        compute_seconds: 0.15,
        sync_seconds: 0.05,
        loss: 0.1,
        layer: None,
        columns: None,
    }
}

/// Every record of iterations `its` of `epoch`, in the order a driver would
/// forward them (workers interleaved per time step).
pub fn iterations(epoch: u64, its: std::ops::Range<u64>) -> Vec<StepRecord> {
    its.flat_map(|i| (0..2).flat_map(move |t| (0..2).map(move |w| record(epoch, i, t, w)))).collect()
}

pub fn epoch0() -> EpochRecord {
    EpochRecord {
        epoch: 0,
        loss: 1.2345,
        val_accuracy: 0.712,
        test_accuracy: 0.701,
        seconds: 10.0,
        eval_seconds: 2.0,
        iterations: 10,
        layer: None,
    }
}

/// Epoch 0 done and evaluated, epoch 1 at its 4th iteration.
pub fn scripted() -> DashboardState {
    let mut s = DashboardState::new(info());
    s.push_event("worker 0 started on 127.0.0.1");
    s.push_event("worker 1 started on 127.0.0.1");
    for r in iterations(0, 0..10) {
        s.apply_record(&r);
    }
    s.apply_epoch(&epoch0());
    s.push_event("checkpoint written at iteration 12");
    for r in iterations(1, 0..4) {
        s.apply_record(&r);
    }
    s
}

/// The screen as text, one line per row.
pub fn screen(t: &Terminal<TestBackend>) -> String {
    let buf = t.backend().buffer();
    (0..buf.area.height)
        .map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>() + "\n")
        .collect()
}

pub fn render(s: &DashboardState, ui: &Ui, width: u16, height: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    t.draw(|f| draw(f, s, ui)).expect("draws");
    screen(&t)
}

/// The screen line that contains `needle` (panics with the screen if none does).
pub fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no line with {needle:?} in\n{screen}"))
}

/// The worker whose table row `line` is (a number, then more than five cells).
pub fn row_of(line: &str) -> Option<u32> {
    let cells: Vec<&str> = line.trim_matches(|c: char| c == '│' || c.is_whitespace()).split_whitespace().collect();
    if cells.len() > 5 { cells[0].parse().ok() } else { None }
}

/// The whitespace-separated cells of the table row of worker `w`.
pub fn worker_cells(screen: &str, w: u32) -> Vec<String> {
    screen
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '│' || c.is_whitespace()))
        .find(|l| l.split_whitespace().next() == Some(&w.to_string()) && l.split_whitespace().count() > 5)
        .unwrap_or_else(|| panic!("no row for worker {w} in\n{screen}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The screen drawn, for tests that look at colours as well as text.
pub fn draw_buffer(s: &DashboardState, ui: &Ui, width: u16, height: u16) -> ratatui::buffer::Buffer {
    let mut t = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    t.draw(|f| draw(f, s, ui)).expect("draws");
    t.backend().buffer().clone()
}

/// The words of the screen line containing `needle`, each with the background
/// colour of its first character (box-drawing borders left out).
pub fn words_with_background(buf: &ratatui::buffer::Buffer, needle: &str) -> Vec<(String, ratatui::style::Color)> {
    let line = |y: u16| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>();
    let y =
        (0..buf.area.height).find(|&y| line(y).contains(needle)).unwrap_or_else(|| panic!("no line with {needle:?}"));
    let mut words: Vec<(String, ratatui::style::Color)> = Vec::new();
    let mut in_word = false;
    for x in 0..buf.area.width {
        let c = &buf[(x, y)];
        let blank = c.symbol().trim().is_empty() || c.symbol() == "│";
        match (blank, in_word) {
            (true, _) => in_word = false,
            (false, false) => {
                words.push((c.symbol().to_string(), c.bg));
                in_word = true;
            }
            (false, true) => words.last_mut().expect("a word is open").0.push_str(c.symbol()),
        }
    }
    words
}
