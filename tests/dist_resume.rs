//! Resuming multi-worker runs on Facebook with real worker processes on
//! 127.0.0.1: a run stopped in mid-epoch and resumed ends as the
//! uninterrupted run does, bit for bit (model-centric, and leapgnn with
//! `--time-steps auto`, whose tuning the checkpoint carries), and on another
//! number of workers within float summation order (also micrograph and
//! pregather runs on Cora); losses read back from a checkpoint or a
//! worker's report as they were written (Cora, full-graph).

mod dist_support;

use dist_support::{
    Driver, LONG_RUN, cora, facebook, fails, final_weights, json, leapgnn, local_options, losses, rel_diff, signal,
    weights,
};
use leapgnn::DataDir;
use leapgnn::cluster::LocalLauncher;
use leapgnn::train::distributed::{resume_distributed, train_distributed};
use leapgnn::train::{Quiet, ResumeOverrides, RunOptions, StrategyKind, TrainConfig};
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn summary(d: &Path, run: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(d.join("runs").join(run).join("summary.json")).unwrap()).unwrap()
}

/// The run `b` ended where run `a` did: same records, accuracy, weights.
fn assert_same_run(d: &Path, a: &str, b: &str) {
    let (sa, sb) = (summary(d, a), summary(d, b));
    for k in ["iterations", "final_loss", "test_accuracy", "best_val_accuracy", "epochs", "time_steps"] {
        assert_eq!(sa[k], sb[k], "{a} vs {b}: {k}");
    }
    assert!(sa["test_accuracy"].as_f64().unwrap() > 0.5, "Facebook's 4 classes are learnt: {sa}");
    assert_eq!(losses(d, a), losses(d, b), "{a} vs {b}: every record once, the same losses");
    assert!(final_weights(d, a) == final_weights(d, b), "{a} vs {b}: final weights differ");
}

/// 13,482 train roots in global batches of 4 x 1024: 4 iterations per epoch.
const RUN: &[&str] = &["--workers", "4", "--batch-size", "1024", "--hidden", "16", "--fanout", "5,5", "--no-tui"];

#[test]
fn facebook_four_workers_resume_model_centric_and_auto_leapgnn_bit_for_bit() {
    let tmp = facebook();
    let d = tmp.path();
    for (name, strategy) in [("mc", &["--strategy", "model-centric"][..]), ("auto", &["--strategy", "leapgnn"])] {
        let run = [&["train", "facebook", "--epochs", "2", "--checkpoint-every", "3"], RUN, strategy].concat();
        json(d, &[&run[..], &["--run", &format!("{name}-straight")]].concat());
        let stopped = json(d, &[&run[..], &["--run", &format!("{name}-mid"), "--stop-after", "6"]].concat());
        assert_eq!(stopped["iterations"], 6, "{name}: stopped in mid-epoch 2");
        let resumed = json(d, &["train", "--resume", &format!("{name}-mid"), "--no-tui"]);
        assert_eq!(resumed["workers"], 4);
        assert_same_run(d, &format!("{name}-straight"), &format!("{name}-mid"));
    }
}

/// Without the cost model's predictions `auto` tries T = 4, 3, 2, 1, one
/// epoch each: a run stopped in epoch 3 must resume with T = 2 and go on to
/// T = 1, which only the tuning state in the checkpoint tells it.
#[test]
fn auto_time_steps_resume_with_the_t_and_the_measurements_of_the_stopped_run() {
    let tmp = facebook();
    let d = tmp.path();
    let data = DataDir::new(d);
    let launcher =
        LocalLauncher::new(env!("CARGO_BIN_EXE_leapgnn"), vec!["--data-dir".into(), d.display().to_string()]);
    let interrupted = AtomicBool::new(false);
    let mut opts = local_options(&launcher, &interrupted);
    opts.auto_planner = None;
    let cfg = TrainConfig {
        dataset: "facebook".into(),
        workers: 4,
        parts: 4,
        epochs: 4,
        batch_size: 1024,
        hidden: 16,
        fanouts: "5,5".parse().unwrap(),
        eval_fanouts: "5,5".parse().unwrap(),
        strategy: StrategyKind::Leapgnn,
        time_steps: None,
        seed: 2,
        ..TrainConfig::default()
    };
    let named = |n: &str, stop_after| RunOptions { run: Some(n.into()), stop_after, ..Default::default() };
    let straight = train_distributed(&data, cfg.clone(), &named("straight", None), &opts, &mut Quiet).unwrap();
    let stopped = train_distributed(&data, cfg, &named("mid", Some(10)), &opts, &mut Quiet).unwrap();
    assert_eq!(stopped.iterations, 10, "stopped after iteration 3 of epoch 3");
    resume_distributed(&data, "mid", &ResumeOverrides::default(), &RunOptions::default(), &opts, &mut Quiet).unwrap();
    // The T of every epoch, from the records: every T once, largest first.
    let steps_per_epoch = |run: &str| -> Vec<u64> {
        let recs = losses(d, run);
        (0..4).map(|e| recs.iter().filter(|r| r.0 == e && r.1 == 0 && r.3 == 0).count() as u64).collect()
    };
    assert_eq!(steps_per_epoch("straight"), [4, 3, 2, 1]);
    assert_eq!(steps_per_epoch("mid"), [4, 3, 2, 1]);
    assert_eq!(straight.time_steps, 1);
    assert_same_run(d, "straight", "mid");
}

/// Stopped on 4 workers, resumed on 2: the same global batches (4 x 1024 =
/// 2 x 2048) over the same 4 parts, so the same run up to summation order.
#[test]
fn facebook_resumed_from_four_workers_on_two_ends_within_1e5() {
    let tmp = facebook();
    let d = tmp.path();
    let run = [&["train", "facebook", "--epochs", "2", "--checkpoint-every", "3"], RUN].concat();
    let straight = json(d, &[&run[..], &["--run", "straight"]].concat());
    json(d, &[&run[..], &["--run", "mid", "--stop-after", "6"]].concat());
    // What a restart looks at: a lost worker after the last checkpoint is not restarted.
    let ck = |run: &str| leapgnn::train::checkpoint::dir(&d.join("runs").join(run));
    assert_eq!(leapgnn::train::checkpoint::finished(&ck("straight")), Some(2));
    assert_eq!(leapgnn::train::checkpoint::finished(&ck("mid")), None);
    // A global batch that 3 workers cannot split is refused, naming the flag; nothing changes.
    let line = fails(d, &["train", "--resume", "mid", "--workers", "3", "--no-tui"], 2);
    assert!(line.contains("--workers 3") && line.contains("4096"), "{line}");
    let resumed = json(d, &["train", "--resume", "mid", "--workers", "2", "--no-tui"]);
    assert_eq!(resumed["workers"], 2);
    assert_eq!(resumed["iterations"], straight["iterations"]);
    let e = rel_diff(&weights(&final_weights(d, "straight")), &weights(&final_weights(d, "mid")));
    println!("4 -> 2 workers: final weights differ by {e:e} (relative)");
    assert!(e <= 1e-5, "final weights differ by {e}");
    let loss = |s: &serde_json::Value| s["final_loss"].as_f64().unwrap();
    assert!((loss(&straight) - loss(&resumed)).abs() <= 1e-5 * loss(&straight), "{straight} vs {resumed}");
    let acc = |s: &serde_json::Value| s["test_accuracy"].as_f64().unwrap();
    assert!((acc(&straight) - acc(&resumed)).abs() <= 1e-3, "{straight} vs {resumed}");
    // The records after the checkpoint come from 2 workers, those before from 4.
    let recs = losses(d, "mid");
    assert!(recs.iter().filter(|r| r.0 == 0).all(|r| r.3 < 4) && recs.iter().any(|r| r.0 == 0 && r.3 == 3));
    assert!(recs.iter().filter(|r| r.0 == 1 && r.1 >= 2).all(|r| r.3 < 2), "{recs:?}");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/mid/config.json")).unwrap()).unwrap();
    assert_eq!(
        (cfg["workers"].as_u64(), cfg["batch_size"].as_u64(), cfg["parts"].as_u64()),
        (Some(2), Some(2048), Some(4))
    );
}

/// micrograph and pregather take one time step per worker, so a run of
/// theirs moves to another number of workers as any other: the config they
/// saved holds the old W as their time steps, which the resume once took
/// for a `--time-steps` the user gave (4 -> 2 was refused naming a flag the
/// strategy does not take; 2 -> 4 too, as "--time-steps 2 does not apply").
/// Cora, 4 parts, 40 roots a global batch: 4 iterations an epoch, stopped
/// in the first epoch's third.
#[test]
fn micrograph_and_pregather_resume_on_another_number_of_workers() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["--fanout", "5,5", "--hidden", "16", "--seed", "3", "--epochs", "2", "--parts", "4", "--no-tui"];
    for (strategy, from, batch, to) in [("micrograph", "4", "10", "2"), ("pregather", "2", "20", "4")] {
        let args = [&["train", "cora", "--strategy", strategy, "--workers", from, "--batch-size", batch], &common[..]];
        let (straight, cut) = (format!("{strategy}-straight"), format!("{strategy}-mid"));
        let whole = json(d, &[&args.concat()[..], &["--run", &straight]].concat());
        let stopped =
            json(d, &[&args.concat()[..], &["--run", &cut, "--stop-after", "3", "--checkpoint-every", "3"]].concat());
        assert_eq!(stopped["iterations"], 3, "{strategy}");
        let resumed = json(d, &["train", "--resume", &cut, "--workers", to, "--no-tui"]);
        assert_eq!(resumed["workers"].to_string(), to, "{strategy}: {resumed}");
        assert_eq!(resumed["time_steps"].to_string(), to, "{strategy}: one time step per worker: {resumed}");
        assert_eq!(resumed["iterations"], whole["iterations"], "{strategy}");
        let e = rel_diff(&weights(&final_weights(d, &straight)), &weights(&final_weights(d, &cut)));
        assert!(e <= 1e-5, "{strategy} {from} -> {to} workers: final weights differ by {e}");
        // The records after the checkpoint come from the new workers, one per time step.
        let recs = losses(d, &cut);
        let after: Vec<_> = recs.iter().filter(|r| r.0 == 1).collect();
        assert_eq!(after.len(), 4 * to.parse::<usize>().unwrap().pow(2), "{strategy}: {after:?}");
    }
}

/// The digits of every `"loss"` of a JSON text, as written: compared as
/// text, since a JSON parser that rounds (serde_json without
/// `float_roundtrip`) would map two neighbouring floats to the same value.
fn loss_digits(text: &str) -> Vec<String> {
    text.split("\"loss\":")
        .skip(1)
        .map(|s| s.trim_start().split([',', '}', '\n']).next().unwrap().trim().to_string())
        .collect()
}

/// Losses cross JSON bit for bit. serde_json read a float to within one
/// ulp only, so a value written and read back could come back as its
/// neighbour: a one-worker full-graph run stopped and resumed reported
/// epoch 4's loss of Cora as 1.5475544929504397 where the uninterrupted run
/// had 1.5475544929504395 (the history, and the stopped step's loss, are
/// read back from `state.json`), and a two-worker run's summary (rank 0's
/// history, read from its report) differed from rank 0's own checkpoint.
#[test]
fn losses_are_read_back_exactly_from_a_checkpoint_and_a_workers_report() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--full-batch", "--model", "gcn", "--hidden", "16", "--epochs", "20"];
    let text = |args: &[&str]| {
        let out = leapgnn(d, &[args, &["--json"]].concat());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let straight = loss_digits(&text(&[&run[..], &["--run", "one"]].concat()));
    assert_eq!(straight.len(), 20, "one loss per epoch: {straight:?}");
    text(&[&run[..], &["--run", "cut", "--stop-after", "19"]].concat());
    let resumed = loss_digits(&text(&["train", "--resume", "cut", "--no-tui"]));
    assert_eq!(resumed, straight, "the resumed run's losses are not the uninterrupted run's");
    let two = loss_digits(&text(&[&run[..], &["--workers", "2", "--run", "two"]].concat()));
    let state = std::fs::read_to_string(d.join("runs/two/checkpoint/state.json")).unwrap();
    assert_eq!(two, loss_digits(&state), "the summary's history is not what rank 0 checkpointed");
}

/// `--workers` naming the run's own number of workers is no move. A
/// full-graph run resumed with it (a script that always gives `--workers`)
/// was refused, exit 2: `--workers 2 with --resume: a full-graph run's
/// batches are cut per worker; resume on the run's own 2 workers (omit
/// --workers)`. Another number is still refused.
#[test]
fn a_full_graph_run_resumes_with_its_own_number_of_workers_given() {
    let tmp = cora();
    let d = tmp.path();
    let base = ["train", "cora", "--no-tui", "--workers", "2", "--hidden", "16"];
    let cases: [&[&str]; 4] = [
        &["--full-batch", "--model", "deepgcn", "--layers", "2", "--epochs", "4"],
        &["--strategy", "varco", "--epochs", "4"],
        &["--strategy", "gnnpipe", "--layers", "2", "--epochs", "4"],
        &["--strategy", "retexo", "--rounds", "2"],
    ];
    for (k, flags) in cases.iter().enumerate() {
        let args = [&base[..], flags].concat();
        let (straight, cut) = (format!("straight{k}"), format!("cut{k}"));
        json(d, &[&args[..], &["--run", &straight]].concat());
        json(d, &[&args[..], &["--run", &cut, "--stop-after", "3"]].concat());
        let e = fails(d, &["train", "--resume", &cut, "--workers", "3", "--no-tui"], 2);
        assert!(e.contains("--workers 3") && e.contains("full-graph"), "{flags:?}: {e}");
        let resumed = json(d, &["train", "--resume", &cut, "--workers", "2", "--no-tui"]);
        assert_eq!(resumed["workers"], 2, "{flags:?}");
        assert_eq!(final_weights(d, &cut), final_weights(d, &straight), "{flags:?}: final weights differ");
    }
}

/// `download --force` and `partition --force` of the very dataset and
/// partitioning a run trains on, while it trains: both go ahead, writing new
/// files renamed into place, while the run's workers keep the files they
/// mapped. So the run neither fails nor meets the new data: its records are
/// those of the same run on the data as it was. Its `--resume` then refuses
/// the re-imported dataset.
#[test]
fn a_forced_reimport_and_repartition_while_a_run_trains_leave_it_on_its_data() {
    let tmp = cora();
    let d = tmp.path();
    // The dataset as the run starts on it, for the undisturbed run below.
    let before = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(before.path().join("cora")).unwrap();
    std::fs::copy(d.join("cora/dataset.lgnn"), before.path().join("cora/dataset.lgnn")).unwrap();
    fn train(run: &str) -> Vec<&str> {
        [&["train", "cora", "--workers", "2", "--seed", "4", "--run", run][..], LONG_RUN].concat()
    }
    let epoch_line = |l: &str| l.starts_with("epoch ") && l.contains("/1000");
    let within = std::time::Duration::from_secs(120);

    let mut drv = Driver::start(d, &train("busy"));
    drv.wait_line(within, epoch_line);
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/planetoid/converted/cora");
    let reimport = ["download", "cora", "--force", "--from", from.to_str().unwrap(), "--format", "text"];
    let other_split = ["--features", "dense", "--split", "60,20,20", "--seed", "3"];
    let out = leapgnn(d, &[&reimport[..], &other_split, &["--json"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!((j["action"].as_str(), j["train"].as_u64()), (Some("imported"), Some(1624)), "{j}");
    // It said nothing of the run it replaced the data under, whose resume then failed.
    let named = format!("warning: dataset `cora` was replaced while run `busy` (pid {}) trains on it", drv.child.id());
    assert!(err.contains(&named) && err.contains("`train --resume busy`"), "{err}");
    let j = json(d, &["partition", "cora", "--parts", "2", "--force", "--seed", "5"]);
    assert_eq!((j["reused"].as_bool(), j["seed"].as_u64()), (Some(false), Some(5)), "{j}");
    // An epoch trained wholly after both.
    drv.wait_line(within, epoch_line);
    drv.wait_line(within, epoch_line);
    signal(drv.child.id(), "INT");
    let (code, stderr) = drv.wait_exit(within);
    assert_eq!(code, Some(0), "the run failed: {stderr}");
    // The run has ended: a forced import under nothing running says no more.
    let out = leapgnn(d, &[&reimport[..], &other_split].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("warning"), "{err}");
    let busy = summary(d, "busy");
    let done = busy["iterations"].as_u64().unwrap();
    assert!(done >= 3 * 9, "{done} iterations: three epochs of 9 expected");

    let done = done.to_string();
    let straight = [&train("straight")[..], &["--stop-after", &done]].concat();
    json(before.path(), &straight);
    assert_eq!(losses(d, "busy"), losses(before.path(), "straight"), "the run met the re-imported data");

    let e = fails(d, &["train", "--resume", "busy", "--no-tui"], 2);
    assert!(e.contains("re-imported or replaced since"), "{e}");
}
