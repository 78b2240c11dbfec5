//! The real binary on a real terminal (tmux): the dashboard shows live
//! numbers, `tab` and `?` work, and `q` stops the run gracefully: checkpoint,
//! terminal restored, summary printed, exit 0, and the run resumes from there.
//! The time-step grid shows exactly what `metrics.jsonl` records.

#[path = "support/bounded.rs"]
mod bounded;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/sshd.rs"]
mod sshd;

use bounded::{Bounded, QUICK_LIMIT, RUN_LIMIT};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a key gets to show on screen: the TUI reads it and redraws on its
/// next tick, and tmux redraws the pane, while the run's own workers hold both
/// cores of a loaded machine. Only a key never answered outlasts it.
const KEY_ANSWERED: Duration = Duration::from_secs(60);

/// A private tmux server (its socket in the test's temp dir, no user
/// config), killed on drop with everything running in it, whatever the
/// test's outcome.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path, width: u16, height: u16, command: &str) -> Tmux {
        let t = Tmux { socket: dir.join("tmux.sock") };
        let (w, h) = (width.to_string(), height.to_string());
        let out = t.run(&["-f", "/dev/null", "new-session", "-d", "-s", "run", "-x", &w, "-y", &h, command]);
        assert!(out.status.success(), "tmux new-session failed: {}", String::from_utf8_lossy(&out.stderr));
        t
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output_in(QUICK_LIMIT, &format!("tmux {args:?} (CI installs tmux: apt-get install tmux)"))
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut tmux = Command::new("tmux");
        tmux.arg("-S").arg(&self.socket).args(args);
        tmux
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "run"]).stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(self.run(&["send-keys", "-t", "run", keys]).status.success());
    }

    /// Polls the screen until `ready` accepts it; panics with the last screen at the deadline.
    fn wait(&self, what: &str, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.screen();
            if ready(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "no {what} within {limit:?}; the screen:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]).stdout(Stdio::null()).stderr(Stdio::null()).ended_in(QUICK_LIMIT);
    }
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// `leapgnn train` on synthetic-small in a 100x30 pane, for far more epochs
/// than a test waits for. The shell stays after it so the pane shows the
/// exit status.
fn train_in_tmux(data: &Path, extra: &str) -> Tmux {
    let cmd = format!(
        "{} --data-dir {} train synthetic-small --epochs 1000 {extra}; echo \"leapgnn exited $?\"; exec sleep 600",
        quote(Path::new(env!("CARGO_BIN_EXE_leapgnn"))),
        quote(data)
    );
    Tmux::start(data, 100, 30, &cmd)
}

#[test]
fn q_stops_the_run_with_a_checkpoint_and_gives_the_terminal_back() {
    let tmp = tempfile::tempdir().unwrap();
    // Only `q` ends this run.
    let tmux = train_in_tmux(tmp.path(), "--run tmux");

    let live = tmux.wait("dashboard with a finished epoch", Duration::from_secs(90), |s| {
        s.contains("workers, epoch") && s.contains("val ") && s.contains("q stop")
    });
    assert!(live.contains("synthetic-small") && live.contains("run tmux"), "{live}");
    assert!(live.contains("worker 0 started"), "{live}");
    tmux.keys("Tab");
    tmux.wait("workers view", KEY_ANSWERED, |s| s.contains("bytes/s in/out"));
    tmux.keys("?");
    tmux.wait("help", KEY_ANSWERED, |s| s.contains("help: keys"));

    tmux.keys("q");
    let after = tmux.wait("exit", Duration::from_secs(30), |s| s.contains("leapgnn exited"));
    assert!(after.contains("leapgnn exited 0"), "{after}");
    // The alternate screen is gone: the pane shows the shell's lines, not the dashboard.
    assert!(!after.contains("q stop") && !after.contains("help: keys"), "{after}");
    assert!(after.contains("run tmux: test accuracy"), "{after}");
    let said: u64 = after
        .split("stopped on request after iteration ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stop message: {after}"));

    let run = tmp.path().join("runs/tmux");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("checkpoint/state.json")).expect("a checkpoint")).unwrap();
    let progress = &state["progress"];
    assert_eq!(progress["global_iteration"].as_u64(), Some(said));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["iterations"].as_u64(), Some(said));

    // The checkpoint is a real resume point: the run goes on from the stopped
    // iteration (which may be the epoch's last, stopped before its evaluation)
    // and runs one epoch more.
    let (epoch, iteration) = (progress["epoch"].as_u64().unwrap(), progress["iteration"].as_u64().unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .arg("--data-dir")
        .arg(tmp.path())
        .args(["train", "--resume", "tmux", "--json", "--epochs", &(epoch + 2).to_string()])
        .output_in(RUN_LIMIT, "leapgnn train --resume tmux");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resumed["epochs"].as_u64(), Some(epoch + 2));
    let history = resumed["history"].as_array().unwrap();
    assert_eq!(history.len() as u64, epoch + 2, "resumed from {progress}: {resumed}");
    let per_epoch = history[history.len() - 1]["iterations"].as_u64().unwrap();
    assert_eq!(
        resumed["iterations"].as_u64(),
        Some(said + (per_epoch - iteration) + per_epoch),
        "resumed from {progress}: {resumed}"
    );
}

/// The pids of leapgnn processes training run `run` (not the shell that
/// started them, whose command line quotes the binary's path).
fn training(run: &str) -> Vec<u32> {
    let pattern = format!("leapgnn --data-dir .* --run {run}");
    let out = Command::new("pgrep").args(["-f", &pattern]).output_in(QUICK_LIMIT, "pgrep (procps)");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// With one worker a second signal exits at once (130): the terminal is
/// given back first, not left in raw mode on the alternate screen. SIGINT
/// then SIGTERM, two signals that cannot merge into one delivery.
#[test]
fn a_forced_stop_gives_the_terminal_back() {
    let tmp = tempfile::tempdir().unwrap();
    let cmd = format!(
        "{} --data-dir {} train synthetic-small --epochs 1000 --run forced-9f3; echo \"leapgnn exited $?\"; stty -a; \
         exec sleep 600",
        quote(Path::new(env!("CARGO_BIN_EXE_leapgnn"))),
        quote(tmp.path())
    );
    let tmux = Tmux::start(tmp.path(), 100, 40, &cmd);
    tmux.wait("dashboard with a finished epoch", Duration::from_secs(90), |s| {
        s.contains("val ") && s.contains("q stop")
    });
    let pids = training("forced-9f3");
    assert_eq!(pids.len(), 1, "{pids:?}");
    for sig in ["INT", "TERM"] {
        assert!(Command::new("kill").args([&format!("-{sig}"), &pids[0].to_string()]).status().unwrap().success());
    }
    // `stty -a` prints icanon or -icanon after the exit line: wait for it too.
    let after =
        tmux.wait("exit and stty", Duration::from_secs(30), |s| s.contains("leapgnn exited") && s.contains("icanon"));
    assert!(after.contains("leapgnn exited 130"), "{after}");
    assert!(after.contains("forced stop"), "{after}");
    let modes = tmux.run(&["display-message", "-p", "-t", "run", "#{alternate_on} #{cursor_flag}"]);
    assert_eq!(String::from_utf8_lossy(&modes.stdout).trim(), "0 1", "alternate screen on, or cursor hidden:\n{after}");
    // `stty -a` of the shell after it: line mode and echo are back.
    let words: Vec<&str> = after.split_whitespace().collect();
    assert!(words.contains(&"icanon") && words.contains(&"echo"), "the terminal is still raw:\n{after}");
}

/// Closing the terminal (here: killing the tmux session, which hangs up the
/// pane) stops the run as `q` does: the hangup is a stop request, never a
/// forced stop, and the process ends even though its terminal is gone.
#[test]
fn a_closed_terminal_stops_the_run_with_a_checkpoint_and_the_process_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let tmux = train_in_tmux(tmp.path(), "--run hangup-7c1");
    tmux.wait("dashboard with a finished epoch", Duration::from_secs(90), |s| {
        s.contains("val ") && s.contains("q stop")
    });
    let pids = training("hangup-7c1");
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(tmux.run(&["kill-session", "-t", "run"]).status.success());
    let left = sshd::wait_gone(&pids, Duration::from_secs(30));
    assert_eq!(left, Vec::<u32>::new(), "leapgnn still runs 30 s after its terminal closed");
    let run = tmp.path().join("runs/hangup-7c1");
    assert!(run.join("checkpoint/state.json").is_file(), "no checkpoint after the hangup");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert!(summary["iterations"].as_u64().unwrap() >= 1, "{summary}");
}

/// With `-v` the driver's log lines go to the dashboard's log view while it
/// holds the terminal, instead of being printed over the panels.
#[test]
fn log_lines_go_to_the_log_view_not_over_the_dashboard() {
    let tmp = tempfile::tempdir().unwrap();
    let tmux = train_in_tmux(tmp.path(), "--run logs --workers 2 -v");
    // The steps view (two workers) after two epochs, each of which the driver logs at INFO.
    let s = tmux.wait("two epochs on the dashboard", Duration::from_secs(90), |s| {
        s.contains("q stop") && s.contains("epoch ") && !s.contains("epoch 1/") && !s.contains("epoch 2/")
    });
    assert!(!s.contains("INFO"), "a log line printed over the dashboard:\n{s}");
    tmux.keys("BTab");
    let log = tmux.wait("the log view", KEY_ANSWERED, |s| s.contains(" log "));
    let wanted = |s: &str| s.lines().any(|l| l.contains("INFO") && l.contains("epoch") && !l.contains("Z  INFO"));
    let log =
        if wanted(&log) { log } else { tmux.wait("an INFO line in the log view", Duration::from_secs(30), wanted) };
    assert!(!log.contains('\u{1b}'), "colour codes in the log view:\n{log}");
}

#[test]
fn no_tui_on_a_terminal_draws_bars_with_epoch_lines_above_them() {
    let tmp = tempfile::tempdir().unwrap();
    let tmux = train_in_tmux(tmp.path(), "--run bars --no-tui");
    let s = tmux.wait("bars after two epochs", Duration::from_secs(90), |s| s.contains("epoch   2/1000  loss"));
    let bar = s.lines().find(|l| l.trim_start().starts_with("epoch [")).unwrap_or_else(|| panic!("no epoch bar:\n{s}"));
    assert!(bar.contains("/1000") && bar.contains("val "), "{s}");
    let iter =
        s.lines().find(|l| l.trim_start().starts_with("iter [")).unwrap_or_else(|| panic!("no iteration bar:\n{s}"));
    assert!(iter.contains("/12") && iter.contains("eta"), "{s}");
    assert!(!s.contains("q stop"), "the dashboard started despite --no-tui:\n{s}");
    // Dropping `tmux` hangs the run up.
}

/// The sum of a record's byte counts (every category).
fn total(v: &serde_json::Value) -> f64 {
    v.as_object().unwrap().values().map(|b| b.as_u64().unwrap()).sum::<u64>() as f64
}

/// Opens on the time-step grid (T = 2, two workers), then every view in turn back to it:
/// each cell on screen is the miss rate and bytes received of one record.
#[test]
fn the_time_step_grid_shows_what_the_records_say() {
    use leapgnn::tui::fmt::{bytes, pct};
    let tmp = tempfile::tempdir().unwrap();
    let tmux = train_in_tmux(tmp.path(), "--run steps --workers 2 --strategy leapgnn --time-steps 2");
    // Two workers: the dashboard opens on the grid; tab goes round to it again.
    tmux.wait("dashboard", Duration::from_secs(90), |s| {
        s.contains("q stop") && s.contains("W 2") && s.contains("time steps: epoch")
    });
    for (view, says) in [
        ("overview", "comm/step"),
        ("workers", "bytes/s in/out"),
        ("curves", "loss per iteration"),
        ("log", "events ("),
        ("steps", "time steps: epoch"),
    ] {
        tmux.keys("Tab");
        tmux.wait(view, KEY_ANSWERED, |s| s.contains(says));
    }
    // Three iterations or more on screen with at least 12 cells filled: steps
    // arrive as they end, so the newest iterations may still be partly empty.
    let grid = tmux.wait("three iterations, 12 cells", Duration::from_secs(60), |s| {
        let lines: Vec<&str> = s.lines().collect();
        // The grid's rows only: the legend below it ("miss < 10% green") has percentages too.
        let filled = lines
            .iter()
            .filter(|l| l.contains("w0 miss") || l.contains("w1 miss"))
            .map(|l| l.matches('%').count())
            .sum::<usize>();
        filled >= 12
            && lines.iter().position(|l| l.contains("wkr")).is_some_and(|at| lines[at + 1].matches("t1").count() >= 3)
    });
    tmux.keys("q");
    let after = tmux.wait("exit", Duration::from_secs(30), |s| s.contains("leapgnn exited"));
    assert!(after.contains("leapgnn exited 0"), "{after}");

    let words = |l: &str| -> Vec<String> {
        l.split_whitespace().filter(|c| *c != "│").map(str::to_string).collect::<Vec<_>>()
    };
    let lines: Vec<&str> = grid.lines().collect();
    let at = lines.iter().position(|l| l.contains("wkr")).unwrap();
    // `wkr eE iI eE iI ...`, then `tT tT ...` below.
    let its = words(lines[at]);
    let steps = words(lines[at + 1]);
    let cols: Vec<(u64, u64, u64)> = its[1..]
        .chunks(2)
        .zip(&steps)
        .map(|(p, t)| (p[0][1..].parse().unwrap(), p[1][1..].parse().unwrap(), t[1..].parse().unwrap()))
        .collect();
    assert_eq!(cols.len(), steps.len(), "{grid}");
    let records: Vec<serde_json::Value> = std::fs::read_to_string(tmp.path().join("runs/steps/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut checked = 0;
    for w in 0..2u64 {
        let miss = words(grid.lines().find(|l| l.contains(&format!("w{w} miss"))).unwrap());
        let rcv = words(grid.lines().find(|l| l.contains(&format!("w{w} rcv"))).unwrap());
        for (k, &(e, i, t)) in cols.iter().enumerate() {
            // Each worker's steps arrive on its own connection, as they end: a
            // busy machine may delay one worker's records by an iteration or two,
            // so a cell may still be waiting for its record (`…` in both rows).
            if miss[k + 2] == "…" {
                assert_eq!(rcv[k + 2], "…", "{grid}");
                continue;
            }
            let r = records
                .iter()
                .find(|r| r["epoch"] == e - 1 && r["iteration"] == i - 1 && r["time_step"] == t && r["worker"] == w)
                .unwrap_or_else(|| panic!("no record for epoch {e} iteration {i} step {t} worker {w}"));
            let rows = &r["rows"];
            let (req, remote) = (rows["requested"].as_u64().unwrap(), rows["remote"].as_u64().unwrap());
            // A step that requested no rows has no miss rate: `-`, not 0.0%.
            let want = if req == 0 { "-".into() } else { pct(remote as f64 / req as f64) };
            assert_eq!(miss[k + 2], want, "worker {w}, epoch {e} iteration {i}, step {t}:\n{grid}");
            assert_eq!(
                rcv[k + 2],
                bytes(total(&r["bytes_in"])),
                "worker {w}, epoch {e} iteration {i}, step {t}:\n{grid}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "{grid}");
    eprintln!("the time-step grid:\n{grid}");
}

/// A full-graph run on the real binary: the header names the engine beside
/// the strategy, and the grid's miss cells read `-` (its steps request no
/// feature rows) where they read a green 0.0%; the bytes are there.
#[test]
fn a_full_graph_run_names_its_engine_and_its_steps_have_no_miss_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let tmux = train_in_tmux(tmp.path(), "--run fg --workers 2 --full-batch");
    let grid = tmux.wait("the grid with two epochs", Duration::from_secs(90), |s| {
        s.contains("time steps: epoch") && s.lines().any(|l| l.contains(" rcv ") && l.matches("B ").count() >= 2)
    });
    let header = grid.lines().find(|l| l.contains("leapgnn │")).unwrap_or_else(|| panic!("no header:\n{grid}"));
    assert!(header.contains("│ model-centric · full-graph │"), "{grid}");
    for w in 0..2 {
        let miss = grid.lines().find(|l| l.contains(&format!("w{w} miss"))).unwrap();
        let cells: Vec<&str> = miss.split_whitespace().filter(|c| *c != "│").skip(2).collect();
        assert!(cells.contains(&"-") && cells.iter().all(|c| *c == "-" || *c == "…"), "{grid}");
    }
    tmux.keys("q");
    let after = tmux.wait("exit", Duration::from_secs(30), |s| s.contains("leapgnn exited"));
    assert!(after.contains("leapgnn exited 0"), "{after}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("runs/fg/summary.json")).unwrap()).unwrap();
    assert!(summary["mode"] == "full-graph" && summary["rows"]["requested"] == 0, "{summary}");
}

/// `TERM=dumb` has no cursor addressing and no alternate screen: the run
/// prints the epoch lines of `--no-tui` instead of drawing the dashboard
/// (which wrote its escape sequences there regardless, and left nothing of
/// the run but the summary line).
#[test]
fn a_dumb_terminal_gets_epoch_lines_not_the_dashboard() {
    let tmp = tempfile::tempdir().unwrap();
    let cmd = format!(
        "env TERM=dumb {} --data-dir {} train synthetic-small --epochs 2 --run dumb; echo \"leapgnn exited $?\"; exec sleep 600",
        quote(Path::new(env!("CARGO_BIN_EXE_leapgnn"))),
        quote(tmp.path())
    );
    let tmux = Tmux::start(tmp.path(), 100, 30, &cmd);
    let after = tmux.wait("exit", Duration::from_secs(90), |s| s.contains("leapgnn exited"));
    assert!(after.contains("leapgnn exited 0"), "{after}");
    assert!(after.contains("epoch   1/2  loss") && after.contains("epoch   2/2  loss"), "{after}");
    assert!(after.contains("run dumb: test accuracy"), "{after}");
}
