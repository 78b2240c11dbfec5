//! The terminal loop on a TestBackend: records arrive over the channel, keys
//! come from a script, and `q` raises the stop flag the trainer polls.

mod tui_support;

use leapgnn::tui::app::{Input, Msg, run_terminal};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;
use tui_support::{epoch0, info, iterations, line_with, screen};

/// Plays keys, then hangs up the run's channel (as a finished run does).
struct Script {
    keys: VecDeque<KeyCode>,
    run: Option<Sender<Msg>>,
    polls: usize,
}

impl Input for Script {
    fn next(&mut self, _wait: Duration) -> io::Result<Option<Event>> {
        self.polls += 1;
        match self.keys.pop_front() {
            Some(k) => Ok(Some(Event::Key(KeyEvent::new(k, KeyModifiers::NONE)))),
            None => {
                self.run = None;
                Ok(None)
            }
        }
    }
}

fn play(keys: &[KeyCode], msgs: Vec<Msg>) -> (Terminal<TestBackend>, leapgnn::tui::DashboardState, bool, usize) {
    let (tx, rx) = mpsc::channel();
    for m in msgs {
        tx.send(m).unwrap();
    }
    let mut script = Script { keys: keys.iter().copied().collect(), run: Some(tx), polls: 0 };
    let stop = AtomicBool::new(false);
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    let state = run_terminal(&mut t, &rx, &mut script, &stop, &|| {}, Duration::ZERO).expect("the loop ends cleanly");
    (t, state, stop.load(Ordering::SeqCst), script.polls)
}

fn run_messages() -> Vec<Msg> {
    let mut msgs = vec![Msg::Start(info()), Msg::Event("worker 0 started".into())];
    msgs.extend(iterations(0, 0..10).into_iter().map(Msg::Record));
    msgs.push(Msg::Epoch(epoch0()));
    msgs.extend(iterations(1, 0..4).into_iter().map(Msg::Record));
    msgs
}

#[test]
fn q_raises_the_stop_flag_and_the_screen_says_so_until_the_run_ends() {
    let (t, state, stop, _) =
        play(&[KeyCode::Char('?'), KeyCode::Char('?'), KeyCode::Tab, KeyCode::Tab, KeyCode::Char('q')], run_messages());
    assert!(stop, "q did not raise the stop flag");
    assert!(state.stopping && state.finished);
    // Epoch 2 is at its 4th iteration of 10: training.
    assert_eq!(state.events().last().unwrap(), "stop requested: checkpoint after this iteration, then exit");
    // Everything sent before the keys was applied.
    assert_eq!(state.position(), Some((1, 3)));
    let s = screen(&t);
    // The last frame: the workers view (two tabs after the steps view a
    // two-worker run opens on), help closed again, the run done.
    assert!(s.contains("bytes/s in/out") && !s.contains("help: keys"), "{s}");
    assert!(line_with(&s, "epoch 2/3").contains("DONE"), "{s}");
}

#[test]
fn a_finish_message_ends_the_loop_without_any_key() {
    let mut msgs = run_messages();
    msgs.push(Msg::Finish);
    let (t, state, stop, polls) = play(&[], msgs);
    assert!(!stop && !state.stopping && state.finished);
    assert_eq!(polls, 0, "the loop waited for a key after the run finished");
    assert!(screen(&t).contains("ETA 0:00"));
}

#[test]
fn a_second_q_does_not_log_a_second_request() {
    let (_, state, stop, _) = play(&[KeyCode::Char('q'), KeyCode::Char('q')], run_messages());
    assert!(stop);
    let requests = state.events().iter().filter(|e| e.starts_with("stop requested")).count();
    assert_eq!(requests, 1);
}

#[test]
fn a_run_opens_on_the_step_grid_with_several_workers_and_on_the_overview_alone() {
    let mut msgs = run_messages();
    msgs.push(Msg::Finish);
    let (t, _, _, _) = play(&[], msgs.clone());
    let s = screen(&t);
    assert!(s.contains("time steps: epoch") && !s.contains("comm/step"), "{s}");
    let mut solo = info();
    (solo.workers, solo.time_steps) = (1, 1);
    msgs[0] = Msg::Start(solo);
    let (t, _, _, _) = play(&[], msgs);
    let s = screen(&t);
    assert!(s.contains("comm/step") && !s.contains("time steps: epoch"), "{s}");
}

/// Ctrl-C is a key in raw mode, which no signal follows: the first stops the
/// run as `q` does, a second forces the stop, as two Ctrl-C do outside the
/// dashboard (and `q` twice does not).
#[test]
fn ctrl_c_twice_forces_the_stop_and_q_twice_does_not() {
    struct Keys(VecDeque<KeyEvent>, Option<Sender<Msg>>);
    impl Input for Keys {
        fn next(&mut self, _wait: Duration) -> io::Result<Option<Event>> {
            let k = self.0.pop_front();
            if k.is_none() {
                self.1 = None;
            }
            Ok(k.map(Event::Key))
        }
    }
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    let q = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
    for (keys, forced) in [(vec![ctrl_c], 0), (vec![ctrl_c, ctrl_c], 1), (vec![q, ctrl_c], 1), (vec![q, q], 0)] {
        let (tx, rx) = mpsc::channel();
        tx.send(Msg::Start(info())).unwrap();
        let mut input = Keys(keys.iter().copied().collect(), Some(tx));
        let (stop, count) = (AtomicBool::new(false), std::cell::Cell::new(0));
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let force = || count.set(count.get() + 1);
        run_terminal(&mut t, &rx, &mut input, &stop, &force, Duration::ZERO).expect("the loop ends cleanly");
        assert!(stop.load(Ordering::SeqCst), "{keys:?}");
        assert_eq!(count.get(), forced, "{keys:?}");
    }
}

/// A stop asked for by a signal reaches the screen as `q`'s does: the
/// STOPPING state and one event, however often the run says so.
#[test]
fn a_signal_stop_shows_the_stopping_state_once() {
    let mut msgs = run_messages();
    msgs.push(Msg::Stopping("a signal".into()));
    msgs.push(Msg::Stopping("a signal".into()));
    let (_, state, stop, _) = play(&[], msgs);
    assert!(state.stopping, "no STOPPING state");
    assert!(!stop, "the dashboard's own stop flag is for its keys");
    let said = state.events().iter().filter(|e| e.contains("by a signal")).count();
    assert_eq!(said, 1);
}

/// A run of `workers` workers: epoch 0's first two iterations, every worker's records.
fn wide_run(workers: u32) -> Vec<Msg> {
    let mut msgs = vec![Msg::Start(leapgnn::metrics::RunInfo { workers, ..info() })];
    for i in 0..2 {
        for t in 0..2 {
            msgs.extend((0..workers).map(|w| Msg::Record(tui_support::record(0, i, t, w))));
        }
    }
    msgs
}

/// The workers whose rows the time-step grid (the view a many-worker run opens on) shows.
fn grid_workers(screen: &str, workers: u32) -> Vec<u32> {
    (0..workers).filter(|w| screen.contains(&format!("w{w} miss"))).collect()
}

/// The grid at 80x24 holds 7 of 16 workers: the keys move it through all of
/// them, a page at a time or one row, and the border says which are shown.
#[test]
fn arrow_page_home_and_end_keys_scroll_the_worker_grid_and_tables() {
    use KeyCode::*;
    let cases: [(&[KeyCode], std::ops::Range<u32>, &str); 9] = [
        (&[], 0..7, " 7 of 16 workers shown "),
        (&[Down, Down], 2..9, " 3-9 of 16 workers shown "),
        (&[Char('j'), Char('j'), Char('k')], 1..8, " 2-8 of 16 workers shown "),
        (&[End], 9..16, " 10-16 of 16 workers shown "),
        // Past the end nothing moves, and the first step back up shows at once.
        (&[End, Down, Down, Up], 8..15, " 9-15 of 16 workers shown "),
        (&[PageDown], 7..14, " 8-14 of 16 workers shown "),
        (&[PageDown, PageDown, PageDown], 9..16, " 10-16 of 16 workers shown "),
        (&[End, PageUp], 2..9, " 3-9 of 16 workers shown "),
        (&[End, Home], 0..7, " 7 of 16 workers shown "),
    ];
    for (keys, rows, note) in cases {
        let (t, _, stop, _) = play(keys, wide_run(16));
        let s = screen(&t);
        assert!(!stop);
        assert_eq!(grid_workers(&s, 16), rows.collect::<Vec<_>>(), "{keys:?}\n{s}");
        assert!(s.contains(note), "{keys:?}\n{s}");
    }
    // The overview's table (9 rows here) scrolls with the grid: after a page
    // down it shows workers 7 to 15, the last page.
    let (t, _, _, _) = play(&[PageDown, Tab], wide_run(16));
    let s = screen(&t);
    let shown: Vec<u32> = (0..16).filter(|&w| s.lines().any(|l| tui_support::row_of(l) == Some(w))).collect();
    assert_eq!(shown, (7..16).collect::<Vec<_>>(), "{s}");
    assert!(s.contains(" 8-16 of 16 workers shown "), "{s}");
}

/// `q` once every iteration of an epoch has ended (the last one's last step
/// included) and before the epoch's record: the workers are evaluating, and
/// the stop comes at the end of the evaluation, as the screen now says. A
/// last iteration whose last step is still to come is training still.
#[test]
fn a_stop_during_evaluation_says_it_comes_at_the_end_of_the_evaluation() {
    let mut msgs = vec![Msg::Start(info())];
    msgs.extend(iterations(0, 0..10).into_iter().map(Msg::Record));
    // The header as drawn while the run checkpoints (the loop's last frame is the finished run's).
    let header = |mut state: leapgnn::tui::DashboardState| {
        state.finished = false;
        line_with(&tui_support::render(&state, &leapgnn::tui::Ui::default(), 80, 24), "epoch 1/3").to_string()
    };
    let (_, state, stop, _) = play(&[KeyCode::Char('q')], msgs.clone());
    assert!(stop && state.stop_in_evaluation);
    let said = "stop requested: checkpoint at the end of this epoch's evaluation, then exit";
    assert_eq!(state.events().last().unwrap(), said);
    let h = header(state);
    assert!(h.contains("STOPPING at the end of this epoch's evaluation"), "{h}");

    // The last iteration's step 0 alone: its all-reduce, where the stop is voted on, is still ahead.
    msgs.truncate(msgs.len() - 2);
    let (_, state, _, _) = play(&[KeyCode::Char('q')], msgs.clone());
    assert_eq!(state.events().last().unwrap(), "stop requested: checkpoint after this iteration, then exit");
    let h = header(state);
    assert!(h.contains("STOPPING after this iteration"), "{h}");

    // A signal during the evaluation: the same words, and who asked.
    msgs.extend(iterations(0, 9..10).into_iter().skip(2).map(Msg::Record));
    msgs.push(Msg::Stopping("a signal".into()));
    let (_, state, _, _) = play(&[], msgs);
    let said = "stop requested by a signal: checkpoint at the end of this epoch's evaluation, then exit";
    assert_eq!(state.events().last().unwrap(), said);
}
