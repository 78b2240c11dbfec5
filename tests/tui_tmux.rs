//! The real binary on a real terminal (tmux): the dashboard shows live
//! numbers, `tab` and `?` work, and `q` stops the run gracefully: checkpoint,
//! terminal restored, summary printed, exit 0, and the run resumes from there.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (CI installs it: apt-get install tmux)")
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
        let _ = self.run(&["kill-server"]);
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
    tmux.wait("workers view", Duration::from_secs(10), |s| s.contains("bytes/s in/out"));
    tmux.keys("?");
    tmux.wait("help", Duration::from_secs(10), |s| s.contains("help: keys"));

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

    // The checkpoint is a real resume point: finishing the current epoch continues from it.
    let epoch = progress["epoch"].as_u64().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
        .arg("--data-dir")
        .arg(tmp.path())
        .args(["train", "--resume", "tmux", "--json", "--epochs", &(epoch + 1).to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resumed["epochs"].as_u64(), Some(epoch + 1));
    assert!(resumed["iterations"].as_u64().unwrap() > said);
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
