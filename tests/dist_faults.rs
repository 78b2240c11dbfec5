//! Faults in a distributed run, with real processes on 127.0.0.1: a worker
//! killed, a stranger on a worker's port, a worker
//! that stops answering. No leapgnn process may outlive the driver. (Ctrl-C
//! and SIGTERM: tests/train_signals.rs.)

mod dist_support;

use dist_support::{
    Driver, LONG_EXIT, LONG_RUN, assert_noticed_not_waited_out, cora, count, final_weights, json, signal, wait_gone,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn start(d: &std::path::Path, workers: &str, extra: &[&str]) -> Driver {
    Driver::start(d, &[&["train", "cora", "--workers", workers], LONG_RUN, extra].concat())
}

fn first_epoch(l: &str) -> bool {
    l.starts_with("epoch") && l.contains("/1000")
}

/// The epoch number of an `epoch E/N ...` progress line.
fn epoch_of(l: &str) -> Option<u64> {
    l.strip_prefix("epoch")?.split('/').next()?.trim().parse().ok()
}

fn error_line(stderr: &str) -> &str {
    stderr.lines().rfind(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line in:\n{stderr}"))
}

/// Waits for run `killed` to exit 0 and checks it ended with run `straight`'s
/// weights, accuracy and iteration count; returns its one restart record and
/// its step records' (epoch, iteration, worker), in file order.
fn ended_as_straight(
    mut drv: Driver,
    d: &std::path::Path,
    straight: &serde_json::Value,
) -> (serde_json::Value, Vec<(u64, u64, u64)>) {
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    ended_as(d, "killed", straight);
    let lines = std::fs::read_to_string(d.join("runs/killed/metrics.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (mut restarts, steps): (Vec<_>, Vec<_>) = recs.into_iter().partition(|r| r.get("restart").is_some());
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let steps = steps
        .iter()
        .map(|r| (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap(), r["worker"].as_u64().unwrap()))
        .collect();
    (restarts.remove(0), steps)
}

#[test]
fn a_killed_worker_stops_the_run_with_its_name_and_no_process_is_left() {
    let tmp = cora();
    let mut drv = start(tmp.path(), "3", &[]);
    let ws = drv.workers(3);
    drv.wait_line(Duration::from_secs(60), first_epoch);
    signal(ws[2].pid, "KILL");
    let (code, stderr) = drv.wait_exit(LONG_EXIT);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
    let line = error_line(&stderr);
    assert_noticed_not_waited_out(line);
    assert!(line.contains("worker 2"), "{line}");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

#[test]
fn a_stranger_on_a_worker_port_is_dropped_and_training_goes_on() {
    let tmp = cora();
    let mut drv = Driver::start(
        tmp.path(),
        &["train", "cora", "--workers", "2", "--epochs", "2", "--batch-size", "16", "--no-tui"],
    );
    let ws = drv.workers(2);
    // Knows the frame format but not the secret: a Hello then a made-up proof.
    if let Ok(mut s) = TcpStream::connect(&ws[1].mesh) {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut hello = vec![b'L', b'G', 3, 4];
        hello.extend_from_slice(&0u64.to_le_bytes());
        hello.extend_from_slice(&0u32.to_le_bytes());
        let _ = s.write_all(&hello);
        let _ = s.write_all(&[7u8; 64]);
        let mut sink = Vec::new();
        match s.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(e) => assert!(
                !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                "the stranger was left connected: {e}"
            ),
        }
    }
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_worker_that_stops_answering_is_named_in_a_timeout_error() {
    // Four workers: in the gradients' ring every survivor waits on the stopped
    // worker through its neighbours, so the first timeout to be reported
    // often names a survivor; the driver must name the one that went quiet.
    let tmp = cora();
    let mut drv = start(tmp.path(), "4", &["--comm-timeout", "2"]);
    let ws = drv.workers(4);
    drv.wait_line(Duration::from_secs(60), first_epoch);
    signal(ws[2].pid, "STOP");
    let (code, stderr) = drv.wait_exit(LONG_EXIT);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
    let line = error_line(&stderr);
    assert!(line.contains("worker 2 stopped answering"), "{line}");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

#[test]
fn a_killed_worker_is_restarted_from_the_checkpoint_and_the_run_ends_as_if_uninterrupted() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 3 x 8: 6 iterations per epoch.
    let run = ["train", "cora", "--workers", "3", "--epochs", "6", "--batch-size", "8", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--checkpoint-every", "2", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "killed", "--restarts", "1"]].concat());
    let ws = drv.workers(3);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/6"));
    signal(ws[1].pid, "KILL");
    let killed = std::time::Instant::now();
    drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1"));
    drv.workers(3);
    println!("from kill -9 to the relaunched workers running: {:.2} s", killed.elapsed().as_secs_f64());
    drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1: training again"));
    println!("from kill -9 to training again: {:.2} s", killed.elapsed().as_secs_f64());
    // The restart is a record of metrics.jsonl beside the step records, which are each there once.
    let (restart, steps) = ended_as_straight(drv, d, &straight);
    assert!(restart["reason"].as_str().unwrap().contains("worker 1"), "{restart}");
    // One per (iteration, worker), except the records of the iteration the checkpoint
    // follows from the workers that had not finished it: the ring all-reduce lets rank 0
    // finish and checkpoint while the killed worker, or the one waiting for its last
    // share, never does. Rank 0's is there, and every other iteration's: the driver
    // takes what the survivors sent before they noticed the loss.
    let per_epoch = 6;
    let at = restart["epoch"].as_u64().unwrap() * per_epoch + restart["iteration"].as_u64().unwrap();
    let before = ((at - 1) / per_epoch, (at - 1) % per_epoch);
    let iterations = straight["iterations"].as_u64().unwrap();
    assert_eq!(iterations, 6 * per_epoch);
    let all: Vec<(u64, u64, u64)> =
        (0..iterations).flat_map(|i| (0..3).map(move |w| (i / per_epoch, i % per_epoch, w))).collect();
    let mut sorted = steps.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), steps.len(), "records repeat: {steps:?}");
    let lost: Vec<_> = all.iter().filter(|x| !steps.contains(x)).collect();
    assert!(steps.iter().all(|x| all.contains(x)), "records of steps never trained: {steps:?}");
    assert!(lost.iter().all(|x| (x.0, x.1) == before && x.2 != 0), "records lost: {lost:?}, checkpoint at {before:?}");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// Waits (at most 60 s) for the checkpoint `state` to hold an evaluation.
fn evaluated_checkpoint(state: &std::path::Path) {
    let evaluated = || {
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(state).ok()?).ok()?;
        s["progress"]["history"].as_array().is_some_and(|h| !h.is_empty()).then_some(())
    };
    dist_support::bounded::within(Duration::from_secs(60), evaluated)
        .unwrap_or_else(|| panic!("no checkpoint with an evaluation at {} within 60 s", state.display()));
}

/// A first Ctrl-C during the pause before a restart (`--restarts 3`: none
/// before the first, 2 s before the second, 4 s before the third) ends the
/// pause at once, and the run stops at its last checkpoint without starting
/// the workers again: exit 0, 'stopped on request', a summary of that
/// checkpoint, the failed attempt's records after it dropped, and
/// `--resume` goes on. The driver used to sit out the pause, start the
/// workers again, train an iteration and only then stop.
#[test]
fn ctrl_c_while_waiting_to_restart_stops_at_the_checkpoint_without_relaunching() {
    let tmp = cora();
    let d = tmp.path();
    let mut drv = start(d, "2", &["--checkpoint-every", "1", "--restarts", "3", "--run", "paused"]);
    let mut all = Vec::new();
    let mut ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), first_epoch);
    // Two restarts, then the third failure's 4 s pause.
    for restart in 1..=3 {
        all.extend(ws.iter().map(|w| w.pid));
        if restart == 3 {
            // The run is to stop at a checkpoint with an evaluation in it. The
            // first ones (every iteration of epoch 1) come before epoch 1's, and
            // each attempt resumes from them, evaluating epoch 1 again: the
            // attempt killed last must have checkpointed past it.
            evaluated_checkpoint(&d.join("runs/paused/checkpoint/state.json"));
        }
        signal(ws[1].pid, "KILL");
        if restart == 3 {
            drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 3 of 3 in 4 s"));
            break;
        }
        ws = drv.workers(2);
        drv.wait_line(Duration::from_secs(60), |l| l.contains(&format!("restart {restart} of 3: training again")));
    }
    let waiting = drv.seen.len();
    signal(drv.child.id(), "INT");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    let after: Vec<&String> = drv.seen[waiting..].iter().collect();
    assert!(!after.iter().any(|l| l.contains("] pid ")), "workers started again after the stop: {after:?}");
    assert!(stderr.contains("stopped on request before restarting it"), "{stderr}");
    // The Ctrl-C is answered for what it does there: no iteration is running.
    assert!(stderr.contains("stopping instead of restarting (the workers are not started again"), "{stderr}");
    assert!(!stderr.contains("stopping after this iteration"), "{stderr}");
    assert!(stderr.contains("run paused: test accuracy"), "no summary:\n{stderr}");
    assert_eq!(wait_gone(&all, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
    let run = d.join("runs/paused");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("checkpoint/state.json")).unwrap()).unwrap();
    let p = &state["progress"];
    let done = p["global_iteration"].as_u64().unwrap();
    assert!(stderr.contains(&format!("stopped on request after iteration {done}, checkpoint")), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["iterations"], done, "{summary}");
    assert_eq!(summary["epochs"], p["epoch"], "{summary}");
    // Every worker's evaluations before the checkpoint, as a run of those epochs moves
    // them (what evaluation samples does not depend on the weights); it used to be rank 0's only.
    let bytes = &summary["bytes"];
    let evaluated = p["epoch"].as_u64().unwrap().to_string();
    assert!(evaluated != "0", "{state}");
    let flags = ["train", "cora", "--workers", "2", "--epochs", &evaluated, "--batch-size", "8", "--hidden", "16"];
    let reference = json(d, &[&flags[..], &["--fanout", "5,5", "--no-tui", "--run", "reference"]].concat());
    for c in ["features", "gradients", "migration", "activations", "control"] {
        assert_eq!(bytes["eval"][c], reference["bytes"]["eval"][c], "{c}: {bytes}");
        assert_eq!(count(&bytes[c]), count(&bytes["train"][c]) + count(&bytes["eval"][c]), "{c}: {bytes}");
    }
    // The step records are those before the checkpoint, each worker's of each iteration once.
    let at = (p["epoch"].as_u64().unwrap(), p["iteration"].as_u64().unwrap());
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let steps: Vec<(u64, u64)> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r.get("restart").is_none())
        .map(|r| (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap()))
        .collect();
    assert!(steps.iter().all(|&s| s < at), "records past the checkpoint {at:?}");
    let epochs = (at.0 + 2).to_string();
    let resumed = json(d, &["train", "--resume", "paused", "--epochs", &epochs]);
    assert!(resumed["iterations"].as_u64().unwrap() > done, "{resumed}");
}

/// A `--restarts` relaunch of a run whose dataset was re-imported since it
/// began refuses the new data (the weights would meet other nodes), and says
/// that the restart refused it: its error used to start `--resume r1:`, a flag
/// the user never typed.
#[test]
fn a_restart_that_meets_a_reimported_dataset_is_refused_as_the_restart() {
    let tmp = cora();
    let d = tmp.path();
    let mut drv = start(d, "2", &["--checkpoint-every", "1", "--restarts", "1", "--run", "r1"]);
    let ws = drv.workers(2);
    // The second epoch's line: the first epoch's checkpoint is written.
    drv.wait_line(Duration::from_secs(60), first_epoch);
    drv.wait_line(Duration::from_secs(60), first_epoch);
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/planetoid/converted/cora");
    let reimport = ["download", "cora", "--force", "--from", from.to_str().unwrap(), "--format", "text"];
    let j = json(d, &[&reimport[..], &["--features", "dense", "--split", "60,20,20", "--seed", "3"]].concat());
    assert_eq!(j["action"], "imported", "{j}");
    signal(ws[1].pid, "KILL");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(2), "{stderr}");
    let e = error_line(&stderr);
    assert!(e.contains("restart 1 of 1, resuming run r1: run `r1` cannot be used with dataset `cora`"), "{e}");
    assert!(e.contains("re-imported or replaced since"), "{e}");
    assert!(!e.contains("--resume"), "{e}");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// `--restarts` without `--checkpoint-every`: a worker lost before the run's
/// first checkpoint (here, its only one, at the end) used to end the run with
/// no restart and no word why. It now trains the run again from the start, and
/// ends with the uninterrupted run's weights and each step record once.
#[test]
fn a_worker_killed_before_the_first_checkpoint_restarts_the_run_from_the_start() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 2 x 8: 9 iterations per epoch.
    // Epochs of a tenth of a second: killed after the first, with seconds to go.
    let run = ["train", "cora", "--workers", "2", "--epochs", "40", "--batch-size", "8", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "killed", "--restarts", "1"]].concat());
    let ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/40"));
    signal(ws[1].pid, "KILL");
    let again = drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1"));
    assert!(again.contains("no checkpoint yet, so training it again from the start"), "{again}");
    drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1: training again"));
    let (restart, mut steps) = ended_as_straight(drv, d, &straight);
    assert_eq!((&restart["epoch"], &restart["iteration"]), (&0.into(), &0.into()), "{restart}");
    steps.sort_unstable();
    let iterations = straight["iterations"].as_u64().unwrap();
    let per_epoch = iterations / 40;
    let all: Vec<(u64, u64, u64)> =
        (0..iterations).flat_map(|i| (0..2).map(move |w| (i / per_epoch, i % per_epoch, w))).collect();
    assert_eq!(steps, all, "each step record once, the failed attempt's dropped");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// The full-graph strategies with loops of their own: GNNPipe (per-stage
/// optimizers and the embedding history in the checkpoint) and RETEXO (a
/// checkpoint per stage) restart from their checkpoints as the mini-batch
/// loop does, and end with the uninterrupted run's weights and, as a hand
/// resume of the checkpoint would, its bytes (RETEXO: but for the setup
/// done again).
#[test]
fn gnnpipe_and_retexo_restart_after_a_killed_worker_and_end_as_if_uninterrupted() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"];
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "4", "--epochs", "60", "--checkpoint-every", "5"];
    let retexo = ["--strategy", "retexo", "--rounds", "200"];
    for (name, flags) in [("gnnpipe", &gnnpipe[..]), ("retexo", &retexo[..])] {
        let run = [&common[..], flags].concat();
        let (straight, killed) = (format!("{name}-straight"), format!("{name}-killed"));
        let whole = json(d, &[&run[..], &["--run", &straight]].concat());
        let mut drv = Driver::start(d, &[&run[..], &["--run", &killed, "--restarts", "1"]].concat());
        let ws = drv.workers(2);
        // Killed with seconds of training still to go; for RETEXO in its second
        // stage, so that the first stage's checkpoint exists.
        let after = if name == "gnnpipe" { 7 } else { 205 };
        drv.wait_line(Duration::from_secs(60), |l| epoch_of(l).is_some_and(|e| e >= after));
        signal(ws[1].pid, "KILL");
        let again = drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1: training again"));
        // One step per epoch (GNNPipe) or round (RETEXO): the event names the step trained again.
        assert!(again.ends_with(" iteration 1"), "{name}: {again}");
        let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert_eq!(final_weights(d, &killed), final_weights(d, &straight), "{name}: the restarted run ended elsewhere");
        // Every round's or epoch's evaluation, the failed attempt's before the
        // checkpoint among them, as the uninterrupted run's: RETEXO's used to be
        // counted as training, and would be lost with the failed attempt unless reported.
        let summary = d.join("runs").join(&killed).join("summary.json");
        let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
        let (b, s) = (&summary["bytes"], &whole["bytes"]);
        let cats = ["features", "gradients", "migration", "activations", "control"];
        assert!(cats.iter().any(|c| count(&s["eval"][c]) > 0), "{name}: evaluations sent nothing: {s}");
        println!("{name}\nrestarted:     {b}\nuninterrupted: {s}");
        for c in cats {
            assert_eq!(b["eval"][c], s["eval"][c], "{name}: eval {c}: {b} vs {s}");
            assert_eq!(count(&b[c]), count(&b["train"][c]) + count(&b["eval"][c]), "{name}: {c}: {b}");
            // Training up to the checkpoint is its count, as a hand resume takes it:
            // GNNPipe's is the uninterrupted run's; RETEXO's resumed attempt fetches
            // its feature rows again and recomputes stage 1's embeddings (2 layers).
            let (r, u) = (count(&b["train"][c]), count(&s["train"][c]));
            let again = name == "retexo" && ["features", "activations"].contains(&c);
            assert_eq!(r, if again { 2 * u } else { u }, "{name}: train {c}: {b} vs {s}");
        }
        let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
        assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "{name}: workers left behind");
    }
}

/// Ctrl-Z, then `fg`: a driver stopped for longer than the workers' silence
/// timeout (10 s here) and continued. Its workers (process groups of their
/// own) trained on, then waited for it, and their reports were queued; the
/// driver used to count its own absence as their silence and, as it came
/// back, ended the run with `worker 0 sent nothing for 10s (no heartbeat):
/// presumed lost`. The run now ends as the uninterrupted one does. (SIGSTOP:
/// Ctrl-Z's SIGTSTP can be ignored by the kernel outside a terminal's job control.)
#[test]
fn a_driver_stopped_and_continued_ends_its_run_as_if_uninterrupted() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--full-batch", "--model", "gcn", "--hidden", "16"];
    let run = [&run[..], &["--epochs", "300", "--comm-timeout", "2", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "paused"]].concat());
    let ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/300"));
    let pid = drv.child.id();
    signal(pid, "STOP");
    // The fault itself, not a wait for something: stopped past the silence timeout.
    std::thread::sleep(Duration::from_secs(12));
    signal(pid, "CONT");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(final_weights(d, "paused"), final_weights(d, "straight"), "the continued run ended elsewhere");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/paused/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["test_accuracy"], straight["test_accuracy"]);
    assert_eq!(summary["iterations"], 300);
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// Ctrl-Z just as a checkpoint was due: rank 0 waits a bounded time for the
/// driver to confirm it holds every worker's records, and a driver away for
/// longer failed the whole run at that checkpoint (`the driver did not
/// confirm within 60 s ...`), although `fg` would have let it go on. The
/// driver is kept from listening at that checkpoint (a test hold, the only
/// way to keep it away for longer than rank 0's wait, shortened here,
/// without a sleep) and stopped and continued there; the checkpoint is now
/// skipped with a warning, and the run ends as the uninterrupted one does.
#[test]
fn a_driver_stopped_as_a_checkpoint_is_due_skips_that_checkpoint_and_ends_as_if_uninterrupted() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--full-batch", "--model", "gcn", "--hidden", "16"];
    let run = [&run[..], &["--epochs", "12", "--checkpoint-every", "4", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let stderr = skipping_checkpoints(d, &run, "paused", 1);
    assert!(stderr.contains("checkpoint after iteration 4 skipped"), "{stderr}");
    let summary = ended_as(d, "paused", &straight);
    // The final checkpoint loads: `infer` from it predicts as from the uninterrupted run's.
    let predictions = |run: &str| {
        assert_eq!(json(d, &["infer", run])["nodes"], 2708, "{run}");
        std::fs::read(d.join(format!("runs/{run}/predictions.safetensors"))).unwrap()
    };
    assert_eq!(predictions("paused"), predictions("straight"));
    assert_eq!(summary["run"], "paused");
}

/// Runs `run` as `name` with its driver kept from confirming its first
/// `holds` checkpoints (a test hold: the only way to keep it away for longer
/// than rank 0's wait, shortened here, without a sleep), stopped and
/// continued at the first, until rank 0 gave up on each (its lines are
/// relayed while the driver holds); every later hold passes at once. Checks
/// exit 0 and that no worker is left; returns the driver's stderr.
fn skipping_checkpoints(d: &std::path::Path, run: &[&str], name: &str, holds: usize) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("--data-dir").arg(d).args(run).args(["--run", name]);
    cmd.env("LEAPGNN_TEST_PAUSE", "records-due,records-unconfirmed").env("LEAPGNN_TEST_HELD_WAIT_MS", "1000");
    let mut drv = Driver::from_command(cmd.stdin(std::process::Stdio::piped()));
    let ws = drv.workers(2);
    let (hold, gave_up) = ("test hold: records-due", "[worker 0] test point: records-unconfirmed");
    drv.wait_line(Duration::from_secs(60), |l| l == hold);
    let pid = drv.child.id();
    signal(pid, "STOP");
    signal(pid, "CONT");
    drv.wait_line(Duration::from_secs(60), |l| l.contains(gave_up));
    for _ in 1..holds {
        writeln!(drv.child.stdin.as_mut().unwrap()).unwrap();
        // The next hold and rank 0's giving up on it come in either order.
        let (mut held, mut given) = (false, false);
        while !(held && given) {
            let l = drv.wait_line(Duration::from_secs(60), |l| l == hold || l.contains(gave_up));
            (held, given) = (held || l == hold, given || l != hold);
        }
    }
    drop(drv.child.stdin.take());
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{name}: {stderr}");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "{name}: workers left behind");
    stderr
}

/// Before the final checkpoint rank 0 waits for the driver to confirm it
/// holds every worker's records, and waits again while it has not (a driver
/// stopped, Ctrl-Z): each wait said "records sent" again, which the driver
/// read and ignored. The driver is kept from listening (a test hold) until
/// rank 0 has given up on two waits; each worker now says it once per
/// checkpoint, and the run ends as usual.
#[test]
fn a_held_final_checkpoint_says_its_records_are_sent_once_per_worker() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--epochs", "1", "--batch-size", "64", "--fanout", "5,5"];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("--data-dir").arg(d).args(run).args(["--hidden", "16", "--no-tui", "--run", "held"]);
    cmd.env("LEAPGNN_TEST_PAUSE", "records-due,records-unconfirmed,records-sent");
    cmd.env("LEAPGNN_TEST_HELD_WAIT_MS", "500");
    let mut drv = Driver::from_command(cmd.stdin(std::process::Stdio::piped()));
    drv.wait_line(Duration::from_secs(60), |l| l == "test hold: records-due");
    for _ in 0..2 {
        drv.wait_line(Duration::from_secs(60), |l| l.contains("[worker 0] test point: records-unconfirmed"));
    }
    drop(drv.child.stdin.take());
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("waiting again before this last checkpoint (3 of 10)"), "{stderr}");
    let said = stderr.lines().filter(|l| *l == "test point: records-sent").count();
    assert_eq!(said, 2, "one per worker: {stderr}");
}

/// Checks that run `name` ended with run `straight`'s weights, accuracy and
/// iteration count; returns its summary.
fn ended_as(d: &std::path::Path, name: &str, straight: &serde_json::Value) -> serde_json::Value {
    let run = straight["run"].as_str().unwrap();
    assert_eq!(final_weights(d, name), final_weights(d, run), "{name} ended elsewhere than {run}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs").join(name).join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["test_accuracy"], straight["test_accuracy"], "{name}");
    assert_eq!(summary["iterations"], straight["iterations"], "{name}");
    summary
}

/// Each step record's bytes, by (epoch, iteration, worker): the workers'
/// records interleave in the file as they arrive.
fn step_bytes(d: &std::path::Path, run: &str) -> std::collections::BTreeMap<[u64; 3], serde_json::Value> {
    let lines = std::fs::read_to_string(d.join("runs").join(run).join("metrics.jsonl")).unwrap();
    let recs = lines.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    let key = |r: &serde_json::Value| ["epoch", "iteration", "worker"].map(|k| count(&r[k]));
    let steps: std::collections::BTreeMap<_, _> =
        recs.filter(|r| r.get("bytes_out").is_some()).map(|r| (key(&r), r["bytes_out"].clone())).collect();
    assert!(!steps.is_empty(), "{run}: no step records");
    steps
}

/// GNNPipe's checkpoints gather every stage's state at rank 0, and a
/// periodic one the driver did not confirm in time (Ctrl-Z) failed the run
/// after ten waits (`the driver did not confirm within 10 s (10 waits) ...`,
/// exit 1) where the common loop skips it. Now the workers vote on each
/// periodic checkpoint (rank 0 decides), all skip it together, and the run
/// ends as the uninterrupted one does. Bytes: every step record is the
/// uninterrupted run's (the vote, like the save, goes to none); a skipped
/// checkpoint sends no state and no count, so each skip takes one
/// checkpoint's control bytes off the training totals, alike for one skip
/// and for two, and nothing else changes.
#[test]
fn gnnpipe_workers_skip_together_a_checkpoint_the_stopped_driver_did_not_confirm() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"];
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "2", "--epochs", "4", "--checkpoint-every", "1"];
    let run = [&common[..], &gnnpipe[..]].concat();
    let straight = json(d, &[&run[..], &["--run", "gnnpipe-straight"]].concat());
    let skips = |stderr: &str| stderr.matches(" skipped: the driver did not confirm").count() as u64;
    let mut train_control = Vec::new();
    for (name, holds) in [("gnnpipe-skip1", 1), ("gnnpipe-skip2", 2)] {
        let stderr = skipping_checkpoints(d, &run, name, holds);
        assert!(stderr.contains("checkpoint after iteration 1 skipped"), "{name}: {stderr}");
        // At least the held ones (a loaded host may cost one more).
        assert!(skips(&stderr) >= holds as u64, "{name}: {stderr}");
        let summary = ended_as(d, name, &straight);
        assert_eq!(step_bytes(d, name), step_bytes(d, "gnnpipe-straight"), "{name}");
        let (b, s) = (&summary["bytes"], &straight["bytes"]);
        for c in ["features", "gradients", "migration", "activations", "control"] {
            assert_eq!(b["eval"][c], s["eval"][c], "{name}: eval {c}: {b} vs {s}");
            if c != "control" {
                assert_eq!(b["train"][c], s["train"][c], "{name}: train {c}: {b} vs {s}");
            }
        }
        assert_eq!(summary["rows"], straight["rows"], "{name}");
        let less = count(&s["train"]["control"]) - count(&b["train"]["control"]);
        train_control.push((skips(&stderr), less));
    }
    let [(k1, less1), (k2, less2)] = train_control[..] else { unreachable!() };
    assert!(less1 > 0, "{train_control:?}");
    // One checkpoint's state and count, as many times as skipped.
    assert_eq!(less1 * k2, less2 * k1, "{train_control:?}");
}

/// RETEXO writes a checkpoint at each stage's start; the count it holds is
/// gathered from every worker first, and only rank 0 writes it. One the
/// stopped driver did not confirm in time (Ctrl-Z) failed the run after ten
/// waits (`the driver did not confirm within 10 s (10 waits) ...`, exit 1);
/// rank 0 now skips it alone, as the common loop does, and the run ends as
/// the uninterrupted one does, with its bytes: the count was gathered either
/// way, and a skip sends nothing.
#[test]
fn retexo_skips_a_stages_checkpoint_the_stopped_driver_did_not_confirm() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui", "--strategy", "retexo"];
    let run = [&run[..], &["--rounds", "20"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    // Stage 1's checkpoint, at iteration 0, has no records to wait for: the first held is stage 2's.
    let stderr = skipping_checkpoints(d, &run, "paused", 1);
    assert!(stderr.contains("checkpoint after iteration 20 skipped"), "{stderr}");
    let summary = ended_as(d, "paused", &straight);
    assert_eq!(step_bytes(d, "paused"), step_bytes(d, "straight"));
    same_totals(&summary, &straight);
}

/// `--json-stream` is `metrics.jsonl` as it is written. After a restart the
/// file drops the failed attempt's records from the checkpoint on and holds
/// a restart record; the stream cannot take lines back, and it had no restart
/// record either, so a reader got those steps twice with no sign of why. It
/// now gets the restart record before the steps trained again: dropping the
/// records it names as stale leaves exactly the file's lines. (VARCO, whose
/// step records are one per layer.)
#[test]
fn the_json_stream_of_a_restarted_run_says_where_training_went_on() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "3", "--strategy", "varco", "--hidden", "16", "--epochs", "200"];
    let run =
        [&run[..], &["--checkpoint-every", "5", "--restarts", "1", "--json-stream", "--run", "streamed"]].concat();
    let (mut drv, out) = Driver::start_streaming(d, &run);
    let ws = drv.workers(3);
    let parse = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    let mut stream = Vec::new();
    // Killed past two checkpoints (every 5 steps), with most of the run to go.
    while stream.last().is_none_or(|r: &serde_json::Value| r["epoch"].as_u64().unwrap() < 11) {
        stream.push(parse(&out.recv_timeout(Duration::from_secs(60)).expect("a record within 60 s")));
    }
    signal(ws[1].pid, "KILL");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    stream.extend(out.iter().map(|l| parse(&l)));
    let at = |r: &serde_json::Value| (r["epoch"].as_u64().unwrap(), r["iteration"].as_u64().unwrap());
    let restarts: Vec<usize> = (0..stream.len()).filter(|&i| stream[i].get("restart").is_some()).collect();
    assert_eq!(restarts.len(), 1, "one restart record in the stream");
    let (i, from) = (restarts[0], at(&stream[restarts[0]]));
    assert!(stream[i + 1..].iter().all(|r| at(r) >= from), "a step before the restart's position after it");
    let stale = stream[..i].iter().filter(|r| at(r) >= from).count();
    println!("{stale} records of the failed attempt past its checkpoint, then the restart at {from:?}");
    let kept: Vec<&serde_json::Value> =
        stream.iter().enumerate().filter(|&(j, r)| j >= i || at(r) < from).map(|x| x.1).collect();
    let file: Vec<serde_json::Value> =
        std::fs::read_to_string(d.join("runs/streamed/metrics.jsonl")).unwrap().lines().map(parse).collect();
    assert_eq!(kept, file.iter().collect::<Vec<_>>(), "the stream, less its stale records, is the file");
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// Checks that restarted run `killed` reports the uninterrupted run's
/// (`straight`, its summary) rows and bytes, by phase and category: the
/// checkpoint's count of the failed attempt, and the resumed attempt's own
/// setup in place of the failed one's.
fn reports_the_totals_of(d: &std::path::Path, straight: &serde_json::Value) {
    let killed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/killed/summary.json")).unwrap()).unwrap();
    same_totals(&killed, straight);
}

/// Checks that summary `killed` reports summary `straight`'s rows and
/// bytes, by phase and category.
fn same_totals(killed: &serde_json::Value, straight: &serde_json::Value) {
    let (b, s) = (&killed["bytes"], &straight["bytes"]);
    println!("resumed run:   {b}\nuninterrupted: {s}");
    for c in ["features", "gradients", "migration", "activations", "control"] {
        for phase in ["train", "eval"] {
            assert_eq!(count(&b[phase][c]), count(&s[phase][c]), "{phase} {c}: {b} vs {s}");
        }
        assert_eq!(count(&b[c]), count(&s[c]), "{c}: {b} vs {s}");
    }
    assert_eq!(killed["rows"], straight["rows"]);
}

/// Two runs with the same seed and flags reported the same bytes sent but
/// not the same received: a peer that reached the final checkpoint's gather
/// of counts first could have its count (128 bytes of control) arrive
/// before the worker took the snapshot the gather was measured from, so
/// `workers.json` counted it as received on one worker, another or none,
/// while its sender left it out. Every worker's bytes, sent and received,
/// in every category, now agree between the runs, and summed over the
/// workers what was received is what was sent.
#[test]
fn identical_runs_report_identical_bytes_sent_and_received() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--workers", "3", "--epochs", "2", "--batch-size", "16", "--fanout", "5,5"];
    let full = ["--workers", "2", "--mode", "full-graph", "--layers", "2", "--epochs", "2"];
    let retexo = ["--workers", "2", "--strategy", "retexo", "--layers", "2", "--rounds", "2"];
    let gnnpipe = ["--workers", "2", "--strategy", "gnnpipe", "--layers", "2", "--epochs", "2"];
    for (i, flags) in [&mb[..], &full[..], &retexo[..], &gnnpipe[..]].into_iter().enumerate() {
        let run = |name: String| {
            let s = json(d, &[&["train", "cora", "--hidden", "16", "--no-tui", "--run", &name], flags].concat());
            (s, dist_support::workers_json(d, &name))
        };
        let ((first, workers), (second, again)) = (run(format!("first{i}")), run(format!("second{i}")));
        same_totals(&first, &second);
        assert_eq!(workers.len(), again.len(), "{flags:?}");
        for c in ["features", "gradients", "migration", "activations", "control"] {
            for way in ["sent", "received"] {
                let of = |ws: &[serde_json::Value]| ws.iter().map(|w| count(&w["bytes"][way][c])).collect::<Vec<_>>();
                assert_eq!(of(&workers), of(&again), "{flags:?}: {way} {c} by worker");
            }
            let sum = |way: &str| workers.iter().map(|w| count(&w["bytes"][way][c])).sum::<u64>();
            assert_eq!(sum("received"), sum("sent"), "{flags:?}: {c} received vs sent: {workers:?}");
        }
    }
}

/// A run restarted after a worker was killed counts the bytes and rows of
/// the training its final model reflects: what the failed attempt's workers
/// sent up to the checkpoint (the checkpoint's count, training and
/// evaluation) and everything the resumed attempt moved (its workers' final
/// reports): for model-centric, the uninterrupted run's totals, wherever in
/// an iteration the worker is killed. It used to count from the checkpoint
/// on: Cora on 2 workers killed in its fourth epoch reported about half the
/// bytes.
#[test]
fn a_restarted_run_counts_what_the_failed_attempt_sent_before_its_checkpoint() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 2 x 8: 9 iterations per epoch.
    let run = ["train", "cora", "--workers", "2", "--epochs", "8", "--batch-size", "8", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--checkpoint-every", "3", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "killed", "--restarts", "1"]].concat());
    let ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| epoch_of(l).is_some_and(|e| e >= 3));
    signal(ws[1].pid, "KILL");
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(final_weights(d, "killed"), final_weights(d, "straight"), "the restarted run ended elsewhere");
    let lines = std::fs::read_to_string(d.join("runs/killed/metrics.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (restart, steps): (Vec<_>, Vec<_>) = recs.iter().partition(|r| r.get("restart").is_some());
    assert_eq!(restart.len(), 1, "{restart:?}");
    let at = |r: &serde_json::Value| (count(&r["epoch"]), count(&r["iteration"]));
    // The failed attempt's records: those before the checkpoint the resumed one started from.
    assert!(steps.iter().any(|r| at(r) < at(restart[0])), "killed before its first checkpoint");
    reports_the_totals_of(d, &straight);
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// A run restarted after a worker was killed (`--restarts`) took the failed
/// attempt's training up to its checkpoint from the workers' step records,
/// which leave out what moved between them (the checkpoint's own exchange of
/// counts, billed to the lost iteration after it): on Cora with 2 workers,
/// killed at the checkpoint after 7 of 10 iterations, it reported less
/// control than the uninterrupted run, and less than a hand `--resume` of the
/// same checkpoint. It now takes them from the checkpoint's count, as a hand
/// resume does, and model-centric reports the uninterrupted run's rows and
/// bytes in every category. Rank 0 holds at the checkpoint while worker 1 is
/// killed, so the restart resumes from that checkpoint; the relaunched
/// workers, which hold there too, have no periodic checkpoint after it.
#[test]
fn a_run_restarted_after_a_killed_worker_reports_the_uninterrupted_runs_byte_totals() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 2 x 16: 5 iterations per epoch; one checkpoint, after the 7th.
    let run = ["train", "cora", "--workers", "2", "--epochs", "2", "--batch-size", "16", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--checkpoint-every", "7", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let pause = [("LEAPGNN_TEST_PAUSE", "checkpoint-written")];
    let mut drv = Driver::start_env(d, &[&run[..], &["--run", "killed", "--restarts", "1"]].concat(), &pause);
    let ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| l.contains("test pause: checkpoint-written"));
    signal(ws[1].pid, "KILL");
    drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1: training again"));
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(final_weights(d, "killed"), final_weights(d, "straight"), "the restarted run ended elsewhere");
    reports_the_totals_of(d, &straight);
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<u32>::new(), "workers left behind");
}

/// Kills the driver of run `killed` with SIGKILL while rank 0 holds at its
/// first checkpoint (so no summary is written, and the checkpoint is after
/// a known iteration), waits for its workers to go, and resumes the run by
/// hand; returns the resumed run's summary and the resume's stderr.
fn driver_killed_and_resumed(
    d: &std::path::Path,
    run: &[&str],
    edit: impl FnOnce(&std::path::Path),
) -> (serde_json::Value, String) {
    driver_killed_at_and_resumed(d, run, ("checkpoint-written", &[]), edit)
}

/// `driver_killed_and_resumed`, with the driver killed while rank 0 holds at
/// test pause `at`, and the resume given `more` flags.
fn driver_killed_at_and_resumed(
    d: &std::path::Path,
    run: &[&str],
    (at, more): (&str, &[&str]),
    edit: impl FnOnce(&std::path::Path),
) -> (serde_json::Value, String) {
    driver_killed_at(d, run, at);
    edit(&d.join("runs/killed/checkpoint/state.json"));
    let out = dist_support::leapgnn(d, &[&["train", "--resume", "killed", "--no-tui", "--json"], more].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// Removes runs `killed` and `straight`, for the next case to use the names.
fn forget_runs(d: &std::path::Path) {
    for k in ["runs/killed", "runs/straight"] {
        std::fs::remove_dir_all(d.join(k)).unwrap();
    }
}

/// Runs `run` as run `killed` and kills its driver with SIGKILL while rank 0
/// holds at test pause `at`; waits for its workers to go.
fn driver_killed_at(d: &std::path::Path, run: &[&str], at: &str) {
    driver_of_killed_killed_at(d, &[run, &["--run", "killed"]].concat(), at);
    assert!(!d.join("runs/killed/summary.json").exists(), "a killed driver wrote a summary");
}

/// Runs `args` (a run `killed` or its `--resume`) and kills its driver with
/// SIGKILL while rank 0 holds at test pause `at`; waits for its workers to go.
fn driver_of_killed_killed_at(d: &std::path::Path, args: &[&str], at: &str) {
    let pause = [("LEAPGNN_TEST_PAUSE", at)];
    let mut drv = Driver::start_env(d, args, &pause);
    let ws = drv.workers(2);
    drv.wait_line(Duration::from_secs(60), |l| l.contains(&format!("test pause: {at}")));
    signal(drv.child.id(), "KILL");
    drv.child.wait().unwrap();
    let pids: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    assert_eq!(wait_gone(&pids, Duration::from_secs(30)), Vec::<u32>::new(), "workers outlived their driver");
}

/// Runs `run` as run `straight`, uninterrupted, and as run `killed`, its
/// driver killed at the first checkpoint and resumed; checks both end with
/// the same weights and rows, and returns the bytes of the resumed run's
/// summary and the uninterrupted one's.
fn straight_and_killed(d: &std::path::Path, run: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let straight = json(d, &[run, &["--run", "straight"]].concat());
    let (resumed, _) = driver_killed_and_resumed(d, run, |_| {});
    assert_eq!(final_weights(d, "killed"), final_weights(d, "straight"), "{run:?}: the resumed run ended elsewhere");
    let (b, s) = (&resumed["bytes"], &straight["bytes"]);
    println!("{run:?}\nresumed:       {b}\nuninterrupted: {s}");
    assert_eq!(resumed["rows"], straight["rows"], "{run:?}");
    (b.clone(), s.clone())
}

/// A run whose driver was killed (`kill -9`: no summary written) and that
/// was resumed by hand with `--resume` reported the bytes and rows from the
/// checkpoint on only: on Cora with 2 workers, killed after 7 of 20
/// iterations, a third of the training's bytes were missing. The checkpoint
/// now carries every worker's count up to it, and the resumed run reports
/// the uninterrupted run's totals: exactly, where the workers fetch every
/// row when they need it (model-centric, with or without a cache, which is
/// filled again as it was at the start); with pregather's prefetch, more by
/// the rows the lost attempt prefetched for the iteration after its
/// checkpoint, fetched again (at most what the resumed attempt's first
/// iteration moved). A checkpoint without the count (an older version's)
/// still resumes, from zero, with a warning naming its state file.
#[test]
fn a_run_whose_driver_was_killed_resumes_with_the_uninterrupted_runs_byte_totals() {
    let tmp = cora();
    let d = tmp.path();
    let cats = ["features", "gradients", "migration", "activations", "control"];
    for extra in [&[][..], &["--cache-mb", "1"], &["--strategy", "pregather"]] {
        // 140 roots in global batches of 2 x 16: 5 iterations per epoch; checkpoint after the 7th.
        let run = ["train", "cora", "--workers", "2", "--epochs", "4", "--batch-size", "16", "--hidden", "16"];
        let run = [&run[..], &["--fanout", "5,5", "--checkpoint-every", "7", "--no-tui"], extra].concat();
        let (b, s) = straight_and_killed(d, &run);
        let (b, s) = (&b, &s);
        for c in cats {
            assert_eq!(b["eval"][c], s["eval"][c], "{extra:?}: eval {c}");
            let (r, u) = (count(&b["train"][c]), count(&s["train"][c]));
            if extra.contains(&"pregather") && c == "features" {
                let lines = std::fs::read_to_string(d.join("runs/killed/metrics.jsonl")).unwrap();
                let first: u64 = lines
                    .lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                    .filter(|r| (count(&r["epoch"]), count(&r["iteration"])) == (1, 2))
                    .map(|r| count(&r["bytes_out"]["features"]))
                    .sum();
                assert!(
                    r >= u && r - u <= first,
                    "{extra:?}: train features {r}, uninterrupted {u}, refetched at most {first}"
                );
            } else {
                assert_eq!(r, u, "{extra:?}: train {c}");
            }
        }
        forget_runs(d);
    }
    // A checkpoint written before the count: the run's counts are unknown, saying which file lacks it.
    let run = ["train", "cora", "--workers", "2", "--epochs", "2", "--batch-size", "16", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--checkpoint-every", "7", "--no-tui"]].concat();
    let (resumed, stderr) = driver_killed_and_resumed(d, &run, |state| strip_counts(state, &["run_counts"]));
    counts_unknown(d, &resumed, &stderr);
}

/// Removes `keys` (a count, the final reports) from the checkpoint's
/// `state`, as an older version wrote it.
fn strip_counts(state: &std::path::Path, keys: &[&str]) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(state).unwrap()).unwrap();
    for k in keys {
        assert!(v["progress"].as_object_mut().unwrap().remove(*k).is_some(), "no {k} in {v}");
    }
    std::fs::write(state, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Checks that run `killed`'s summary, printed (`resumed`) and written, has
/// its rows, bytes and miss rate unknown (null), and that the resume said
/// so (`said`: its stderr, or its events), naming the checkpoint's state
/// file and how to measure them.
fn counts_unknown(d: &std::path::Path, resumed: &serde_json::Value, said: &str) {
    let state = d.join("runs/killed/checkpoint/state.json");
    // Named as every other warning about a run is (`run NAME: ...`).
    let warned = said.lines().any(|l| {
        l.contains("run killed: ")
            && l.contains(&*state.to_string_lossy())
            && l.contains("unknown (null)")
            && l.contains("again")
    });
    assert!(warned, "no warning naming {} and how to get the counts: {said}", state.display());
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/killed/summary.json")).unwrap()).unwrap();
    assert_eq!(&written, resumed);
    for k in ["rows", "bytes", "miss_rate"] {
        assert!(written[k].is_null(), "{k} is not null in the summary: {written}");
    }
}

/// A finished run's final checkpoint without a count (an older version's),
/// its driver killed before the summary, resumed for more epochs: the
/// summary gave the resumed epochs' rows and bytes as the whole run's. They
/// are unknown (null), with the warning of a finished run's summary
/// rebuilt from such a checkpoint, also as the dashboard's event, and the
/// run trains its epochs. The same for GNNPipe (its stages' state gathered
/// to rank 0) and RETEXO, which cannot be made longer: resumed from the
/// checkpoint at its second stage's start.
#[test]
fn a_run_resumed_from_a_checkpoint_without_a_count_has_unknown_counts() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--epochs", "2", "--batch-size", "16", "--fanout", "5,5"];
    // Without --checkpoint-every its final checkpoint holds no history to go on from.
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "2", "--epochs", "2", "--checkpoint-every", "2"];
    let retexo = ["--strategy", "retexo", "--layers", "2", "--rounds", "2"];
    let last = (Some(4), "final-checkpoint-written", &["run_counts", "final_reports"][..]);
    let cases = [(&mb[..], last), (&gnnpipe, last), (&retexo, (None, "checkpoint-written", &["run_counts"]))];
    for (flags, (epochs, at, keys)) in cases {
        let run = [&["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"], flags].concat();
        driver_killed_at(d, &run, at);
        strip_counts(&d.join("runs/killed/checkpoint/state.json"), keys);
        let launcher = leapgnn::cluster::LocalLauncher::new(
            env!("CARGO_BIN_EXE_leapgnn"),
            vec!["--data-dir".into(), d.display().to_string()],
        );
        let interrupted = std::sync::atomic::AtomicBool::new(false);
        let opts = dist_support::local_options(&launcher, &interrupted);
        let over = leapgnn::train::ResumeOverrides { epochs, ..Default::default() };
        let mut events = Events::default();
        let data = leapgnn::DataDir::new(d);
        let resumed = leapgnn::train::distributed::resume_distributed(
            &data,
            "killed",
            &over,
            &Default::default(),
            &opts,
            &mut events,
        );
        let resumed = serde_json::to_value(resumed.unwrap_or_else(|e| panic!("{flags:?}: {e:#}"))).unwrap();
        assert_eq!(count(&resumed["epochs"]), 4, "{flags:?}: {resumed}");
        counts_unknown(d, &resumed, &events.0.join("\n"));
        std::fs::remove_dir_all(d.join("runs/killed")).unwrap();
    }
}

/// The events a run tells its observers (the dashboard's event list).
#[derive(Default)]
struct Events(Vec<String>);

impl leapgnn::train::Observer for Events {
    fn event(&mut self, msg: &str) {
        self.0.push(msg.to_string());
    }
}

/// A run stopped during an evaluation (`--stop-in-evaluation`, a Ctrl-C
/// there) whose driver was killed before it wrote the stop's summary resumed
/// with a warning that the checkpoint held no count, and counted from the
/// checkpoint on: the epochs before the stop were missing. The stop's
/// checkpoint now carries the count, and the resumed run reports the
/// uninterrupted run's rows and bytes, with the stop's checkpoint on top:
/// model-centric's exchange of counts, 128 x W x (W - 1) bytes of control;
/// GNNPipe's checkpoint exchange, which an uninterrupted run checkpointing
/// at the same iteration moves too.
#[test]
fn a_run_stopped_in_an_evaluation_whose_driver_was_killed_resumes_with_the_uninterrupted_runs_byte_totals() {
    let tmp = cora();
    let d = tmp.path();
    // 140 roots in global batches of 2 x 16: 5 iterations per epoch; stopped in epoch 1's evaluation.
    let mb = ["--epochs", "3", "--batch-size", "16", "--fanout", "5,5", "--stop-in-evaluation", "1"];
    // One step per epoch: stopped in the second epoch's evaluation, after iteration 2. Each
    // run checkpoints three times: the stop, iteration 3 and the end; 2, 4 and the end.
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "2", "--epochs", "4"];
    let every = |k| [&gnnpipe[..], &["--checkpoint-every", k]].concat();
    // (the stopped run's flags, the uninterrupted run's, the stop's control on top of it)
    let cases: [(&[&str], &[&str], u64); 2] =
        [(&mb, &mb[..6], 128 * 2), (&[&every("3")[..], &["--stop-in-evaluation", "2"]].concat(), &every("2"), 0)];
    for (stopped, uninterrupted, gather) in cases {
        let run = ["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"];
        let straight = json(d, &[&run[..], uninterrupted, &["--run", "straight"]].concat());
        let (resumed, stderr) = driver_killed_and_resumed(d, &[&run[..], stopped].concat(), |_| {});
        assert!(!stderr.contains("holds no count"), "{stopped:?}: {stderr}");
        assert_eq!(final_weights(d, "killed"), final_weights(d, "straight"), "{stopped:?}: ended elsewhere");
        let (b, s) = (&resumed["bytes"], &straight["bytes"]);
        for c in ["features", "gradients", "migration", "activations", "control"] {
            assert_eq!(count(&b["eval"][c]), count(&s["eval"][c]), "{stopped:?}: eval {c}: {b} vs {s}");
            let on_top = if c == "control" { gather } else { 0 };
            assert_eq!(count(&b["train"][c]), count(&s["train"][c]) + on_top, "{stopped:?}: train {c}: {b} vs {s}");
        }
        assert_eq!(resumed["rows"], straight["rows"], "{stopped:?}");
        forget_runs(d);
    }
}

/// The same for the full-graph loops, killed at the checkpoint after epoch 2
/// of 4 and resumed by hand. GNNPipe (its own loop) wrote no count: the
/// resumed run reported half the uninterrupted run's training activations,
/// with a warning, and RETEXO (killed at a stage's start) the same; GNNPipe
/// now reports the totals exactly. `--mode full-graph` and VARCO (the common
/// loop, one step per epoch) report them but for the halo, which the resumed attempt
/// fetches again: one more halo fetch, counted in the evaluation after the
/// checkpoint. RETEXO reports one more feature fetch and one more embedding
/// of each frozen stage, which the resumed attempt does again.
#[test]
fn a_full_graph_run_whose_driver_was_killed_resumes_with_the_uninterrupted_runs_byte_totals() {
    let tmp = cora();
    let d = tmp.path();
    let cats = ["features", "gradients", "migration", "activations", "control"];
    let full = ["--mode", "full-graph", "--layers", "2", "--epochs", "4", "--checkpoint-every", "2"];
    let varco = ["--strategy", "varco", "--layers", "2", "--epochs", "4", "--checkpoint-every", "2"];
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "4", "--epochs", "4", "--checkpoint-every", "2"];
    // Checkpoints at every stage's start: killed at stage 2's, after 3 rounds.
    let retexo = ["--strategy", "retexo", "--layers", "2", "--rounds", "3"];
    for flags in [&full[..], &varco[..], &gnnpipe[..], &retexo[..]] {
        let run = [&["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"], flags].concat();
        let (b, s) = straight_and_killed(d, &run);
        let (b, s) = (&b, &s);
        for c in cats {
            let (r, u) = (count(&b["train"][c]), count(&s["train"][c]));
            if (flags == full || flags == varco) && c == "features" {
                // The resumed attempt fetches its halo again, as the evaluation
                // after the checkpoint (the first pass after it) begins: one more
                // halo fetch, which is every feature byte the run moves.
                assert!(u > 0, "no halo fetch: {s}");
                assert_eq!(count(&b["eval"][c]), count(&s["eval"][c]) + u, "{flags:?}: eval {c}: {b} vs {s}");
            } else {
                assert_eq!(b["eval"][c], s["eval"][c], "{flags:?}: eval {c}");
            }
            if flags == retexo && ["features", "activations"].contains(&c) {
                // RETEXO's resumed attempt fetches its feature rows again and
                // recomputes stage 1's embeddings: one more of each, the
                // run's only feature and activation bytes with 2 layers.
                assert!(u > 0, "{c}: {s}");
                assert_eq!(r, 2 * u, "{flags:?}: train {c}: {b} vs {s}");
            } else {
                assert_eq!(r, u, "{flags:?}: train {c}");
            }
        }
        forget_runs(d);
    }
}

/// A run's final checkpoint carried no count (its summary was to count it):
/// a driver killed after the workers wrote it and before it wrote the
/// summary left `train --resume RUN --epochs 4` of a 2-epoch model-centric
/// run on Cora with a warning that the checkpoint held no count, and a
/// summary of epochs 3 and 4 only; GNNPipe's (2 stages, checkpoints every 2
/// epochs) the same. The final checkpoint now carries the count (its own
/// gather left out, as a longer run takes none there, and GNNPipe's
/// exchange of its stages' state, which the resumed attempt's final
/// checkpoint makes again), and the resumed run reports the uninterrupted
/// 4-epoch run's rows and bytes in every category, and its weights.
#[test]
fn a_run_whose_driver_was_killed_at_its_final_checkpoint_resumes_for_more_epochs_with_the_longer_runs_totals() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--batch-size", "16", "--fanout", "5,5"];
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "2", "--checkpoint-every", "2"];
    // (the strategy's flags, a category its training moves)
    for (flags, moved) in [(&mb[..], "features"), (&gnnpipe[..], "activations")] {
        let run = [&["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"], flags].concat();
        let straight = json(d, &[&run[..], &["--epochs", "4", "--run", "straight"]].concat());
        // With periodic checkpoints' gathers of counts, and GNNPipe's exchanges of its stages.
        dist_support::workers_add_up_to(d, &straight);
        let at = ("final-checkpoint-written", &["--epochs", "4"][..]);
        let (resumed, stderr) = driver_killed_at_and_resumed(d, &[&run[..], &["--epochs", "2"]].concat(), at, |_| {});
        assert!(!stderr.contains("holds no count"), "{flags:?}: {stderr}");
        assert_eq!(
            final_weights(d, "killed"),
            final_weights(d, "straight"),
            "{flags:?}: the resumed run ended elsewhere"
        );
        same_totals(&resumed, &straight);
        assert!(count(&straight["bytes"]["train"][moved]) > 0, "{flags:?}: {straight}");
        forget_runs(d);
    }
}

/// RETEXO's final checkpoint carried no count either; a finished RETEXO run
/// cannot be resumed (its length is --layers x --rounds), but a restart from
/// that checkpoint, or a stop before one, takes its count. Killed at it, it
/// now holds the uninterrupted run's rows and bytes in every category but
/// control, of which it holds less: not the setup before training (the
/// mesh, the barrier that starts training), which a resumed attempt does
/// again and counts itself, nor the final gather of counts, which the
/// uninterrupted run's summary leaves out too.
#[test]
fn retexos_final_checkpoint_counts_the_runs_rows_and_bytes() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui", "--strategy", "retexo"];
    let run = [&run[..], &["--layers", "2", "--rounds", "3"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    driver_killed_at(d, &run, "final-checkpoint-written");
    let state = std::fs::read(d.join("runs/killed/checkpoint/state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
    let c = &state["progress"]["run_counts"];
    assert!(c.is_object(), "no count in the final checkpoint: {state}");
    let s = &straight["bytes"];
    println!("final checkpoint: {c}\nuninterrupted:    {s}");
    all_but_the_setup(c, s, "retexo");
    assert!(count(&s["train"]["gradients"]) > 0, "{s}");
    for r in ["requested", "local", "cache_hit", "remote"] {
        assert_eq!(c["rows"][r], straight["rows"][r], "rows {r}: {c} vs {straight}");
    }
}

/// Checks that `counted` (a final checkpoint's count of bytes, or a summary
/// taken from it) holds the uninterrupted run's bytes (`straight`) in every
/// category but training's control, of which it holds less: not the setup
/// before training (the mesh, the barrier that starts it), which a resumed
/// attempt does again and counts itself.
fn all_but_the_setup(counted: &serde_json::Value, straight: &serde_json::Value, what: &str) {
    let (c, s) = (counted, straight);
    for cat in ["features", "gradients", "migration", "activations"] {
        for phase in ["train", "eval"] {
            assert_eq!(count(&c[phase][cat]), count(&s[phase][cat]), "{what}: {phase} {cat}: {c} vs {s}");
        }
    }
    assert_eq!(count(&c["eval"]["control"]), count(&s["eval"]["control"]), "{what}: {c} vs {s}");
    let (k, u) = (count(&c["train"]["control"]), count(&s["train"]["control"]));
    assert!(0 < k && k < u, "{what}: train control {k}, uninterrupted {u}");
}

/// `train --resume killed --json` of a finished run without its summary:
/// checks it exits 0 saying it wrote the summary from the final checkpoint,
/// and prints what it wrote; returns that summary.
fn summary_written_by_resume(d: &std::path::Path) -> serde_json::Value {
    let out = dist_support::leapgnn(d, &["train", "--resume", "killed", "--no-tui", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("its summary was missing and is written from its final checkpoint"), "{stderr}");
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let written = std::fs::read(d.join("runs/killed/summary.json")).unwrap();
    assert_eq!(printed, serde_json::from_slice::<serde_json::Value>(&written).unwrap());
    printed
}

/// A finished run whose driver was killed after rank 0 wrote the final
/// checkpoint and before the driver wrote the summary (`kill -9`, a crash)
/// was refused by `train --resume RUN` as complete (exit 2), model-centric
/// (mini-batch and full-graph), RETEXO and GNNPipe alike, and never got its summary. The resume now
/// writes it from the final checkpoint, starting no worker and training
/// nothing (`metrics.jsonl` is left as it was), prints it as a finished
/// run's, and exits 0: the uninterrupted run's iterations, accuracies, loss,
/// rows and bytes in every category. The checkpoint's count leaves out the
/// last attempt's setup (the mesh, the initial weights, the barrier that
/// starts training), nearly all of the run's control: the summary lacked
/// it (128 bytes of model-centric's training control against 184,820 on
/// Cora with 2 workers) and `workers.json` and the peak memory were not
/// written; the final checkpoint now carries every worker's final report,
/// and with it both. A second `--resume` is refused, as for any run with
/// its summary. The replica checks (`--check-replicas`) were left out (the
/// summary had none, every worker 0 in `workers.json`): the reports now
/// carry them too.
#[test]
fn a_finished_run_whose_driver_was_killed_before_its_summary_gets_it_from_its_final_checkpoint() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--epochs", "2", "--batch-size", "16", "--fanout", "5,5", "--check-replicas", "4"];
    let retexo = ["--strategy", "retexo", "--layers", "2", "--rounds", "2"];
    let gnnpipe = ["--strategy", "gnnpipe", "--layers", "2", "--epochs", "2"];
    let full = ["--mode", "full-graph", "--layers", "2", "--epochs", "2"];
    for flags in [&mb[..], &full[..], &retexo[..], &gnnpipe[..]] {
        let run = [&["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"], flags].concat();
        let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
        dist_support::workers_add_up_to(d, &straight);
        driver_killed_at(d, &run, "final-checkpoint-written");
        let records = std::fs::read(d.join("runs/killed/metrics.jsonl")).unwrap();
        let printed = summary_written_by_resume(d);
        assert!(std::fs::read(d.join("runs/killed/metrics.jsonl")).unwrap() == records, "{flags:?}: it trained");
        let same = ["iterations", "epochs", "best_epoch", "test_accuracy", "best_val_accuracy", "final_loss", "rows"];
        for k in same.into_iter().chain(["replica_checks"]) {
            assert_eq!(printed[k], straight[k], "{flags:?}: {k}");
        }
        let checks = |run: &str| dist_support::workers_json(d, run).into_iter().map(|w| w["replica_checks"].clone());
        assert!(checks("killed").eq(checks("straight")), "{flags:?}: replica checks in workers.json");
        if flags.contains(&"--check-replicas") {
            assert!(straight["replica_checks"].as_u64().is_some_and(|n| n > 0), "{straight}");
        }
        assert!(printed["test_accuracy"].as_f64().is_some_and(|a| a > 0.0), "{printed}");
        println!("{flags:?}");
        same_totals(&printed, &straight);
        assert_eq!(printed["peak_rss_bytes"].as_array().map(Vec::len), Some(2), "{flags:?}: {printed}");
        dist_support::workers_add_up_to(d, &printed);
        // GNNPipe without --checkpoint-every is refused before: its final checkpoint has no history to go on from.
        let line = dist_support::fails(d, &["train", "--resume", "killed", "--no-tui"], 2);
        let refused = ["nothing to resume", "ended without --checkpoint-every"];
        assert!(refused.iter().any(|r| line.contains(r)), "{flags:?}: {line}");
        forget_runs(d);
    }
}

/// A finished run's final checkpoint written by an older version, with
/// neither the run's count nor the workers' reports, and its driver killed
/// before the summary: `--resume` wrote the summary with zero rows and
/// bytes, as if measured. Its counts are unknown: null in the summary (and
/// `--json`), "unknown" in the human report, with a warning naming the
/// checkpoint's state file and saying that only a rerun measures them.
#[test]
fn a_finished_run_from_an_older_versions_final_checkpoint_has_unknown_counts() {
    let tmp = cora();
    let d = tmp.path();
    let mb = ["--epochs", "2", "--batch-size", "16", "--fanout", "5,5"];
    let run = [&["train", "cora", "--workers", "2", "--hidden", "16", "--no-tui"], &mb[..]].concat();
    for json_out in [true, false] {
        driver_killed_at(d, &run, "final-checkpoint-written");
        let state = d.join("runs/killed/checkpoint/state.json");
        strip_counts(&state, &["run_counts", "final_reports"]);
        let resume = ["train", "--resume", "killed", "--no-tui"];
        let out = dist_support::leapgnn(d, &[&resume[..], if json_out { &["--json"][..] } else { &[][..] }].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let warned = stderr
            .lines()
            .any(|l| l.contains(&state.display().to_string()) && l.contains("unknown") && l.contains("again"));
        assert!(warned, "no warning naming {} and how to get the counts: {stderr}", state.display());
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("runs/killed/summary.json")).unwrap()).unwrap();
        for k in ["rows", "bytes", "miss_rate"] {
            assert!(written[k].is_null(), "{k} is not null in the summary: {written}");
        }
        assert!(written["test_accuracy"].as_f64().is_some_and(|a| a > 0.0), "{written}");
        if json_out {
            let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(printed, written);
        } else {
            assert!(stderr.contains("rows and bytes unknown"), "{stderr}");
        }
        assert!(!d.join("runs/killed/workers.json").exists(), "workers.json made up without reports");
        std::fs::remove_dir_all(d.join("runs/killed")).unwrap();
    }
}

/// The same run stopped first (`--stop-after`, which writes the stop's
/// summary), resumed, and its driver killed at the final checkpoint: the
/// stop's summary, short of that checkpoint, is not the run's, so a second
/// `--resume` writes the run's from the checkpoint, with the uninterrupted
/// run's iterations, accuracy and rows.
#[test]
fn a_finished_run_with_only_an_earlier_stops_summary_gets_its_own_from_its_final_checkpoint() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--epochs", "2", "--batch-size", "16", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let stopped = json(d, &[&run[..], &["--run", "killed", "--stop-after", "3"]].concat());
    assert_eq!(stopped["iterations"], 3, "{stopped}");
    driver_of_killed_killed_at(d, &["train", "--resume", "killed", "--no-tui"], "final-checkpoint-written");
    let summary = summary_written_by_resume(d);
    for k in ["iterations", "epochs", "test_accuracy", "best_val_accuracy", "final_loss", "rows"] {
        assert_eq!(summary[k], straight[k], "{k}");
    }
}

/// The same for a single worker, whose one process trains and writes the
/// summary: killed after its final checkpoint, `--resume` refused it as
/// complete (exit 2). It now writes the summary from the checkpoint, whose
/// progress is every count the process held: the uninterrupted run's rows
/// and bytes exactly, and its iterations, accuracies and loss.
#[test]
fn a_finished_single_worker_run_killed_before_its_summary_gets_it_from_its_final_checkpoint() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "1", "--epochs", "2", "--batch-size", "16", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    let pause = [("LEAPGNN_TEST_PAUSE", "final-checkpoint-written")];
    let mut drv = Driver::start_env(d, &[&run[..], &["--run", "killed"]].concat(), &pause);
    drv.wait_line(Duration::from_secs(60), |l| l.contains("test pause: final-checkpoint-written"));
    signal(drv.child.id(), "KILL");
    drv.child.wait().unwrap();
    assert!(!d.join("runs/killed/summary.json").exists(), "a killed process wrote a summary");
    let records = std::fs::read(d.join("runs/killed/metrics.jsonl")).unwrap();
    let summary = summary_written_by_resume(d);
    assert!(std::fs::read(d.join("runs/killed/metrics.jsonl")).unwrap() == records, "it trained");
    for k in ["iterations", "epochs", "test_accuracy", "best_val_accuracy", "final_loss", "rows", "bytes"] {
        assert_eq!(summary[k], straight[k], "{k}");
    }
}

/// A stop resumed from its summary counted the stopped attempt's setup (its
/// mesh, initial weights, the barriers that start training and end the
/// stop), which the checkpoint's count leaves out as the resumed attempt
/// sets up again: model-centric on Cora with 2 workers, stopped after 7 of
/// 20 iterations, reported more control resumed with its summary than
/// resumed after its driver was killed at the stop's checkpoint. Both now
/// take the checkpoint's count: the same rows and bytes, the uninterrupted
/// run's and the stop's exchange of counts, 128 x W x (W - 1) bytes.
#[test]
fn a_stop_resumed_from_its_summary_counts_what_one_resumed_after_its_driver_was_killed_counts() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--workers", "2", "--epochs", "4", "--batch-size", "16", "--hidden", "16"];
    let run = [&run[..], &["--fanout", "5,5", "--no-tui"]].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    json(d, &[&run[..], &["--run", "cut", "--stop-after", "7"]].concat());
    let cut = json(d, &["train", "--resume", "cut", "--no-tui"]);
    let (killed, _) = driver_killed_and_resumed(d, &[&run[..], &["--stop-after", "7"]].concat(), |_| {});
    // Resumed after its driver was killed, against resumed with its summary.
    same_totals(&killed, &cut);
    let (c, s) = (&cut["bytes"], &straight["bytes"]);
    for cat in ["features", "gradients", "migration", "activations", "control"] {
        for phase in ["train", "eval"] {
            let on_top = if (phase, cat) == ("train", "control") { 128 * 2 } else { 0 };
            assert_eq!(count(&c[phase][cat]), count(&s[phase][cat]) + on_top, "{phase} {cat}: {c} vs {s}");
        }
    }
    assert_eq!(cut["rows"], straight["rows"]);
}
