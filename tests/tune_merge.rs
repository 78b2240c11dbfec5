//! `leapgnn tune-merge` end to end: the prediction table and plan file, bad
//! input, calibration on 4 local worker processes, and predictions checked
//! against measured runs.

#[path = "support/interrupt.rs"]
mod interrupt;
#[path = "train_support/mod.rs"]
mod train_support;

use leapgnn::train::MergePlan;
use std::path::Path;
use train_support::bounded;
use train_support::{Tiny, fails, json, json_env, write_tiny};

/// A temp data dir holding synthetic-small (20k nodes, 64-d; generated, seeded).
fn data() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    json(tmp.path(), &["download", "synthetic-small"]);
    tmp
}

const JOB: &[&str] = &["synthetic-small", "--parts", "4", "--batch-size", "256"];

fn tune(d: &Path, extra: &[&str]) -> serde_json::Value {
    json(d, &[&["tune-merge"], JOB, extra].concat())
}

#[test]
fn predicts_every_strategy_and_t_and_writes_a_plan_train_accepts() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let out = d.join("plan.toml");
    let v = tune(d, &["--out", out.to_str().unwrap()]);
    let preds = v["predictions"].as_array().unwrap();
    let has = |s: &str, t: u64| preds.iter().any(|p| p["strategy"] == s && p["time_steps"] == t);
    assert!(has("model-centric", 1) && has("micrograph", 4) && has("pregather", 4));
    assert!((1..=4).all(|t| has("leapgnn", t)), "{preds:?}");
    // The search covers prefetch on and off for the pre-gathering strategies, and only for them.
    let has_p = |s: &str, t: u64, p: bool| {
        preds.iter().any(|x| x["strategy"] == s && x["time_steps"] == t && x["prefetch"] == p)
    };
    assert!([false, true].iter().all(|&p| has_p("pregather", 4, p) && (1..=4).all(|t| has_p("leapgnn", t, p))));
    assert!(!has_p("model-centric", 1, true) && !has_p("micrograph", 4, true));
    assert!(preds.iter().all(|p| p["iteration_seconds"].as_f64().unwrap() > 0.0));
    assert!(v["figures"].as_str().unwrap().contains("rough, uncalibrated"));
    assert_eq!(v["chosen"]["strategy"], "leapgnn");
    assert_eq!(v["plan"], out.to_str().unwrap());
    let plan = MergePlan::load(&out).unwrap();
    plan.check(4, "test").unwrap();
    assert_eq!(plan.time_steps as u64, v["chosen"]["time_steps"].as_u64().unwrap());
    assert_eq!(plan.prefetch, v["chosen"]["prefetch"].as_bool());
    let best = preds
        .iter()
        .filter(|p| p["strategy"] == "leapgnn")
        .map(|p| p["iteration_seconds"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let written = plan.predicted_iteration_seconds.unwrap();
    assert!((written - best).abs() <= 1e-12 * best, "plan says {written} s, table {best} s");
    // The same inputs give the same output, and the default plan path is under the dataset.
    let again = tune(d, &["--out", out.to_str().unwrap()]);
    assert_eq!(again["predictions"], v["predictions"]);
    let default = tune(d, &[]);
    assert!(default["plan"].as_str().unwrap().ends_with("synthetic-small/plans/leapgnn-4.toml"));
    // --prefetch off searches without it only.
    let off = tune(d, &["--out", d.join("off.toml").to_str().unwrap(), "--prefetch", "off"]);
    assert!(off["predictions"].as_array().unwrap().iter().all(|p| p["prefetch"] == false));
    assert_eq!(MergePlan::load(&d.join("off.toml")).unwrap().prefetch, Some(false));
}

#[test]
fn train_follows_the_plans_prefetch_unless_told() {
    let tmp = data();
    let d = tmp.path();
    let plan = |prefetch: bool| {
        let p = d.join(format!("plan-{prefetch}.toml"));
        MergePlan { prefetch: Some(prefetch), ..MergePlan::even(4, 2) }.save(&p).unwrap();
        p
    };
    let (on, off) = (plan(true), plan(false));
    let run_with = |name: &str, extra: &[&str], threads: &str| {
        let base = ["train", "synthetic-small", "--workers", "4", "--batch-size", "64", "--no-tui", "--run", name];
        let flags = [&base[..], &["--epochs", "1", "--stop-after", "3", "--strategy", "leapgnn"], extra].concat();
        json_env(d, &flags, &[("RAYON_NUM_THREADS", threads)])
    };
    // One thread per worker: the plan's choice holds.
    let run = |name: &str, extra: &[&str]| run_with(name, extra, "1");
    let used = |v: serde_json::Value| (v["prefetch"].as_bool().unwrap(), v["time_steps"].as_u64().unwrap());
    assert_eq!(used(run("on", &["--merge-plan", on.to_str().unwrap()])), (true, 2));
    assert_eq!(used(run("off", &["--merge-plan", off.to_str().unwrap()])), (false, 2));
    // The flag wins over the plan, both ways.
    assert_eq!(used(run("forced", &["--merge-plan", off.to_str().unwrap(), "--prefetch"])), (true, 2));
    assert_eq!(used(run("kept-off", &["--merge-plan", on.to_str().unwrap(), "--prefetch", "off"])), (false, 2));
    // Without a plan, auto prefetches, however few cores a worker has.
    assert_eq!(used(run("auto", &["--time-steps", "3"])), (true, 3));
    assert_eq!(used(run_with("auto2", &["--time-steps", "3"], "2")), (true, 3));
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let tmp = data();
    let d = tmp.path();
    let e = fails(d, &["tune-merge", "synthetic-small", "--parts", "0"], 2);
    assert!(e.contains("--parts"), "{e}");
    let e = fails(d, &[&["tune-merge"], JOB, &["--validate", "nosuchrun"]].concat(), 2);
    assert!(e.contains("nosuchrun") && e.contains("runs"), "{e}");
    // A full-graph run has no sampled iterations to predict: it used to be compared with model-centric
    // blocks and report errors of +150 % (--full-batch) to +1100 % (RETEXO).
    for (run, strategy, how) in [
        ("fg", "model-centric", ["--full-batch", "--epochs", "1", "--no-tui"]),
        ("rx", "retexo", ["--rounds", "1", "--hidden", "16"]),
    ] {
        let args = ["train", "synthetic-small", "--workers", "2", "--strategy", strategy, "--no-tui", "--run", run];
        json(d, &[&args[..], &how].concat());
        let e = fails(d, &[&["tune-merge"], JOB, &["--validate", run]].concat(), 2);
        assert!(e.contains(&format!("--validate {run}")) && e.contains("full-graph mode"), "{e}");
        assert!(e.contains(&format!("--strategy {strategy}")) && e.contains("mini-batch run"), "{e}");
    }
    let prof = d.join("lab.toml");
    std::fs::write(&prof, "[cluster]\nlauncher = \"local\"\n[cost]\nbandwidth = -3.0\n").unwrap();
    let e = fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap()]].concat(), 2);
    assert!(e.contains("lab.toml") && e.contains("cost.bandwidth"), "{e}");
    // Finite figures beyond any cluster predicted inf or NaN ms per iteration, chose a plan from
    // them and wrote it, exit 0; and a second link entry for a pair was ignored without a word.
    for (table, key) in [
        ("latency = 1e308", "cost.latency = 100000000"),
        ("bandwidth = 1e-300", "cost.bandwidth = 0.000"),
        ("jitter = 1e300", "cost.jitter = 1000000"),
        (
            "[cost.compute.sage]\nedge_seconds = 1e300\nrow_seconds = 0\ninput_seconds = 0\nblock_seconds = 0",
            "cost.compute.sage.edge_seconds",
        ),
        (
            "[[cost.links]]\nfrom = 0\nto = 1\nbandwidth = 1e9\nlatency = 1e-5\n[[cost.links]]\nfrom = 0\nto = 1\nbandwidth = 1.0\nlatency = 0.0",
            "cost.links[0 -> 1]",
        ),
    ] {
        let table = if table.starts_with('[') { table.to_string() } else { format!("[cost]\n{table}") };
        std::fs::write(&prof, format!("[cluster]\nlauncher = \"local\"\n{table}\n")).unwrap();
        let e = fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap()]].concat(), 2);
        assert!(e.contains("lab.toml") && e.contains(key), "{table}: {e}");
    }
    // A link to a worker no host has (a typo in from/to) priced every transfer at the default link, silently.
    std::fs::write(
        &prof,
        "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"127.0.0.1\"\nuser = \"gnn\"\nworkers = 2\n\
         [[host]]\naddress = \"127.0.0.2\"\nuser = \"gnn\"\n\
         [[cost.links]]\nfrom = 0\nto = 2\nbandwidth = 1e9\nlatency = 1e-5\n\
         [[cost.links]]\nfrom = 3\nto = 0\nbandwidth = 1e9\nlatency = 1e-5\n",
    )
    .unwrap();
    let e = fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap()]].concat(), 2);
    assert!(e.contains("lab.toml") && e.contains("cost.links[3 -> 0]: there is no worker 3"), "{e}");
    assert!(e.contains("gnn@127.0.0.1:22 (ranks 0..=1), gnn@127.0.0.2:22 (rank 2)"), "{e}");
    std::fs::write(&prof, "[cluster]\nlauncher = \"local\"\n[cost]\nbandwith = 3.0\n").unwrap();
    let e = fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap()]].concat(), 2);
    assert!(e.contains("lab.toml") && e.contains("bandwith"), "{e}");
    // Figures calibrated on another dataset are refused unless asked for by name.
    std::fs::write(&prof, "[cluster]\nlauncher = \"local\"\n[cost]\nsource = \"calibrated\"\ndataset = \"facebook\"\n")
        .unwrap();
    let e = fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap()]].concat(), 2);
    assert!(e.contains("calibrated on facebook, not synthetic-small") && e.contains("--figures-from facebook"), "{e}");
    let v =
        json(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap(), "--figures-from", "facebook"]].concat());
    assert_eq!(v["figures"], "calibrated");
    // --figures-from names the figures' own dataset, and calibration measures its own.
    let e =
        fails(d, &[&["tune-merge"], JOB, &["--cluster", prof.to_str().unwrap(), "--figures-from", "cora"]].concat(), 2);
    assert!(e.contains("--figures-from cora: the figures in") && e.contains("were calibrated on facebook"), "{e}");
    let e = fails(d, &[&["tune-merge"], JOB, &["--figures-from", "facebook", "--calibrate"]].concat(), 2);
    assert!(e.contains("--figures-from facebook with --calibrate"), "{e}");
    // A directory for --out is a wrong value (it was a failed write, exit 1), said before any work.
    let e = fails(d, &[&["tune-merge"], JOB, &["--out", d.to_str().unwrap()]].concat(), 2);
    assert!(e.contains(&format!("--out {} is a directory", d.display())), "{e}");
    // A plan written onto a symbolic link (kept in a shared directory) replaced the link with a
    // file of its own; it now goes to the file linked to. A link to nothing is refused, naming it.
    std::fs::create_dir_all(d.join("shared")).unwrap();
    std::fs::write(d.join("shared/plan.toml"), "old").unwrap();
    let link = d.join("plan.toml");
    std::os::unix::fs::symlink("shared/plan.toml", &link).unwrap();
    let v = json(d, &[&["tune-merge"], JOB, &["--out", link.to_str().unwrap()]].concat());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    let plan = std::fs::read_to_string(d.join("shared/plan.toml")).unwrap();
    assert!(plan.starts_with("workers = 4\ntime_steps = "), "{plan}");
    assert_eq!(v["plan"], link.to_str().unwrap(), "the plan is reported where it was asked for");
    assert!(
        std::fs::read_dir(d.join("shared")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp."))
    );
    let dangling = d.join("gone.toml");
    std::os::unix::fs::symlink("nowhere/plan.toml", &dangling).unwrap();
    let e = fails(d, &[&["tune-merge"], JOB, &["--out", dangling.to_str().unwrap()]].concat(), 2);
    assert!(e.contains("gone.toml: a symbolic link to nowhere/plan.toml, which does not exist"), "{e}");
    assert!(!d.join("nowhere").exists());
}

fn train(d: &Path, run: &str, extra: &[&str]) -> serde_json::Value {
    let base = ["train", "synthetic-small", "--workers", "4", "--batch-size", "256", "--no-tui", "--run", run];
    json(d, &[&base[..], &["--epochs", "4", "--stop-after", "40"], extra].concat())
}

/// The calibrated tests measure time: run them one at a time, so that each
/// is calibrated and measured under the same load (the others would be
/// calibrating 4 workers of their own on the same cores).
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timed() -> std::sync::MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Calibrates on 4 local workers (figures written into the profile), then
/// predicts a separately measured run.
fn calibrated(d: &Path) -> serde_json::Value {
    let prof = d.join("profiles/local.toml");
    let v = tune(d, &["--calibrate", "--cluster", prof.to_str().unwrap()]);
    let text = std::fs::read_to_string(&prof).unwrap();
    assert!(text.contains("[cost]") && text.contains("[[cost.links]]"), "{text}");
    // 12 ordered pairs of 4 workers, each with a measured bandwidth and latency.
    assert_eq!(text.matches("[[cost.links]]").count(), 12);
    assert!(v["figures"].as_str().unwrap().starts_with("calibrated"));
    assert!(v["calibration"]["runs"].as_array().unwrap().iter().any(|r| r["strategy"] == "model-centric"));
    v
}

/// How far a test may find a calibrated prediction from its run. Their
/// accuracy (35 % on a quiet machine) is a timing target, measured by `cargo
/// bench --bench tune_merge_accuracy`: on CI's two shared cores one
/// configuration's 40-iteration runs differed by 2.7x between rounds, and a
/// 35 % bound failed twice in a row. A wrong unit (ms for s) or a figure per
/// run instead of per iteration (40 iterations) is off by more than this; noise
/// is not: a calibration 2x off and a round 2.7x off, the worst of each
/// seen, make 5.4x together.
const GROSS: f64 = 10.0;

/// Checks a `--validate` summary's own arithmetic and that its prediction is
/// within `GROSS` of the measurement; returns the validation.
fn checked_prediction<'a>(v: &'a serde_json::Value, what: &str) -> &'a serde_json::Value {
    let measured = v["measured_iteration_seconds"].as_f64().unwrap();
    let predicted = v["validation"]["predicted"]["iteration_seconds"].as_f64().unwrap();
    let err = v["error"]["iteration"].as_f64().unwrap();
    eprintln!(
        "{what}: predicted {:.2} ms, measured {:.2} ms, error {:+.1}%",
        predicted * 1e3,
        measured * 1e3,
        err * 100.0
    );
    assert!(measured > 0.0 && predicted > 0.0 && predicted.is_finite(), "{what}: {v}");
    assert!(
        (err - (predicted - measured) / measured).abs() <= 1e-12,
        "{what}: error {err} is not (predicted - measured) / measured: {v}"
    );
    for k in ["sample", "gather", "compute", "sync"] {
        assert!(v["error"][k].as_f64().is_some(), "{what}: no {k} error in {v}");
    }
    // 40 iterations less 2 of warm-up: each is compared or left out as slow,
    // fewer than half of them slow (they lie above the median), and the
    // mean of all is the steady mean or, with slow ones, above it.
    let (steady, slow) =
        (v["validation"]["iterations"].as_u64().unwrap(), v["validation"]["slow_iterations"].as_u64().unwrap());
    assert!(steady + slow == 38 && slow < steady, "{what}: {steady} steady and {slow} slow iterations: {v}");
    let all = v["validation"]["all_iteration_seconds"].as_f64().unwrap();
    assert!(
        if slow == 0 { (all - measured).abs() <= 1e-12 * measured } else { all > measured },
        "{what}: mean of all {all} s: {v}"
    );
    let ratio = predicted / measured;
    assert!(
        (1.0 / GROSS..=GROSS).contains(&ratio),
        "{what}: predicted {predicted} s per iteration, measured {measured} s: off by more than {GROSS}x, which noise on \
         these runs has never been; look for a wrong unit or a figure per run"
    );
    &v["validation"]
}

#[test]
fn a_calibrated_model_centric_prediction_scores_its_run() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    calibrated(d);
    train(d, "mc", &[]);
    // The calibrated profile is read from <data-dir>/profiles/local.toml.
    let v = tune(d, &["--validate", "mc"]);
    let validation = checked_prediction(&v, "model-centric");
    assert_eq!((&validation["strategy"], &validation["workers"]), (&"model-centric".into(), &4.into()), "{v}");
}

/// leapgnn at every T and with the plan `tune-merge` chose, each scored by
/// `--validate` against the calibrated figures: the validation replays the
/// T and the plan each run trained with. Whether the chosen plan is the
/// fastest measured is a timing target: `cargo bench --bench
/// tune_merge_accuracy` measures it.
#[test]
fn calibrated_leapgnn_predictions_score_runs_at_every_t_and_of_the_chosen_plan() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let v = calibrated(d);
    assert!(
        v["calibration"]["skipped"].as_array().unwrap().is_empty(),
        "calibration skipped strategies: {}",
        v["calibration"]["skipped"]
    );
    let out = d.join("plan.toml");
    let chosen = tune(d, &["--out", out.to_str().unwrap()])["chosen"].clone();
    assert_eq!(chosen["strategy"], "leapgnn", "{chosen}");
    let plan = out.to_str().unwrap();
    let mut configs: Vec<(Vec<&str>, serde_json::Value)> =
        ["1", "2", "3", "4"].iter().map(|t| (vec!["--time-steps", *t], t.parse::<u64>().unwrap().into())).collect();
    configs.push((vec!["--merge-plan", plan], chosen["time_steps"].clone()));
    for (c, (flags, steps)) in configs.iter().enumerate() {
        let run = format!("c{c}");
        let trained = train(d, &run, &[&["--strategy", "leapgnn"], &flags[..]].concat());
        assert_eq!(&trained["time_steps"], steps, "{flags:?}: {trained}");
        let v = tune(d, &["--validate", &run]);
        let validation = checked_prediction(&v, &format!("leapgnn {flags:?}"));
        assert_eq!((&validation["strategy"], &validation["time_steps"]), (&"leapgnn".into(), steps), "{v}");
    }
}

/// `--calibrate` off a terminal shows no progress bar (no control
/// characters) and none of the workers' lines; `-v` logs every stage (probe,
/// each strategy's run, the fit) and the workers' lines.
#[test]
fn calibration_stages_and_worker_lines_are_shown_with_v_only_off_a_terminal() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let prof = d.join("quiet.toml");
    let job = ["tune-merge", "synthetic-small", "--parts", "2", "--batch-size", "256", "--calibrate"];
    let args = [&job[..], &["--calibrate-iterations", "2", "--cluster", prof.to_str().unwrap()]].concat();
    let quiet = train_support::leapgnn(d, &args);
    let err = String::from_utf8_lossy(&quiet.stderr);
    assert!(quiet.status.success(), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "a bar or colour off a terminal: {err:?}");
    // What it wrote (the partition it made, the figures), nothing from the workers or the stages.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.last().copied(), Some(format!("calibrated figures written into {}", prof.display()).as_str()));
    assert!(lines.iter().all(|l| l.contains("partition") || l.starts_with("calibrated figures")), "{err}");
    assert!(String::from_utf8_lossy(&quiet.stdout).contains("leapgnn"), "the table goes to stdout");

    let loud = train_support::leapgnn(d, &[&["-v"], &args[..]].concat());
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(loud.status.success(), "{err}");
    assert!(!err.contains('\r'), "no bar off a terminal: {err:?}");
    // 2 workers: the probe, model-centric at batch 256 and 64, micrograph, pregather, leapgnn, the fit.
    for (i, what) in [
        "probing the links between 2 workers",
        "2 iterations of model-centric (T = 1, batch 256)",
        "2 iterations of model-centric (T = 1, batch 64)",
        "2 iterations of micrograph (T = 2, batch 256)",
        "2 iterations of pregather (T = 2, batch 256)",
        "2 iterations of leapgnn (T = 1, batch 256)",
        "fitting the figures",
    ]
    .iter()
    .enumerate()
    {
        let want = format!("calibration stage {}/7: {what}", i + 1);
        assert!(err.contains(&want), "{want:?} not logged with -v:\n{err}");
    }
    assert!(err.contains("] pid "), "the workers' lines are shown with -v:\n{err}");
}

/// `--calibrate` whose profile or plan is a symbolic link to nothing (or in a
/// circle) ran the whole calibration, workers and all, and only then failed to
/// write it (the loop as a runtime failure, exit 1). It is refused first, exit 2,
/// naming the link, with nothing partitioned and the link left as it was.
#[test]
fn calibration_onto_a_dangling_or_looping_link_is_refused_before_it_starts() {
    let tmp = data();
    let d = tmp.path();
    let dangling = d.join("lab.toml");
    std::os::unix::fs::symlink("gone/lab.toml", &dangling).unwrap();
    let looped = d.join("loop.toml");
    std::os::unix::fs::symlink("loop.toml", &looped).unwrap();
    let job = ["tune-merge", "synthetic-small", "--parts", "2", "--batch-size", "256", "--calibrate"];
    for flag in ["--cluster", "--out"] {
        for (link, said) in
            [(&dangling, "a symbolic link to gone/lab.toml, which does not exist"), (&looped, "cannot be followed")]
        {
            let args = [&job[..], &["--calibrate-iterations", "2", flag, link.to_str().unwrap()]].concat();
            let e = fails(d, &args, 2);
            assert!(e.contains(said), "{flag}: {e}");
            assert!(e.contains(&link.display().to_string()), "{flag}: the link is not named: {e}");
            assert!(std::fs::symlink_metadata(link).unwrap().file_type().is_symlink(), "{flag}: the link was replaced");
        }
    }
    assert!(!d.join("synthetic-small/parts").exists(), "calibration partitioned the dataset before refusing");
    assert!(!d.join("gone").exists(), "a directory was made for the dangling link");
}

/// `--validate` replays each record's batch, so a record the run cannot have
/// written (an iteration past the epoch, a worker it did not have, a negative
/// time, the same step twice) is refused naming the file, the line and the field.
#[test]
fn validate_refuses_records_the_run_cannot_have_written() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let run = ["train", "tiny", "--workers", "2", "--batch-size", "32", "--epochs", "2", "--no-tui", "--run", "r"];
    json(d, &run);
    fn validate(run: &str) -> Vec<&str> {
        vec!["tune-merge", "tiny", "--parts", "2", "--batch-size", "32", "--validate", run]
    }
    let v = json(d, &validate("r"));
    assert_eq!(v["validation"]["workers"], 2, "{v}");
    let text = std::fs::read_to_string(d.join("runs/r/metrics.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Each case: a copy of the run with `metrics` for its metrics.jsonl, refused
    // at line `line` for `field`.
    let refused = |name: &str, metrics: Vec<String>, line: usize, field: &str| {
        let dir = d.join("runs").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(d.join("runs/r/config.json"), dir.join("config.json")).unwrap();
        let path = dir.join("metrics.jsonl");
        std::fs::write(&path, metrics.join("\n") + "\n").unwrap();
        let e = fails(d, &validate(name), 2);
        let at = format!("{} line {line}: `{field}`", path.display());
        assert!(e.contains(&at), "{name}: expected {at:?} in {e}");
        e
    };
    let record = |line: &str| serde_json::from_str::<serde_json::Value>(line).unwrap();
    let far = serde_json::Value::from(1_000_000_000_000_000u64);
    // The run's records with line 4's `field` set to `value`.
    let at_line_4 = |field: &str, value: serde_json::Value| {
        let mut r = record(lines[3]);
        r[field] = value;
        let mut all: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        all[3] = r.to_string();
        all
    };
    refused("iteration", at_line_4("iteration", far.clone()), 4, "iteration");
    refused("worker", at_line_4("worker", 99.into()), 4, "worker");
    refused("seconds", at_line_4("compute_seconds", (-1.0).into()), 4, "compute_seconds");
    // Every worker's record of line 4's step moved past the epoch's end: a
    // complete iteration, which the prediction replays (the old code panicked).
    let step = record(lines[3]);
    let same_step = |r: &serde_json::Value| r["epoch"] == step["epoch"] && r["iteration"] == step["iteration"];
    let first = lines.iter().position(|l| same_step(&record(l))).unwrap();
    let moved = lines
        .iter()
        .map(|l| {
            let mut r = record(l);
            if same_step(&r) {
                r["iteration"] = far.clone();
            }
            r.to_string()
        })
        .collect();
    refused("whole-step", moved, first + 1, "iteration");
    // Line 4 again, at the end.
    let twice: Vec<String> = lines.iter().chain(&[lines[3]]).map(|l| l.to_string()).collect();
    let e = refused("twice", twice, lines.len() + 1, "iteration");
    assert!(e.contains("recorded twice (first at line 4)"), "{e}");
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `--validate RUN` predicts the run with the figures in use, so figures
/// calibrated on another dataset than the run's are refused as they are for
/// the dataset tuned (unless `--figures-from` accepts them), and `--calibrate`
/// (which measures the dataset tuned) with a run of another dataset is
/// refused before it starts: figures calibrated on one dataset scored a run
/// of another (a Cora run with synthetic-small's figures at +606 %) with exit 0.
#[test]
fn validate_refuses_figures_calibrated_on_another_dataset_than_the_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    write_tiny(d, "other", Tiny { nodes: 300, ..Tiny::default() });
    let run = ["train", "tiny", "--workers", "2", "--batch-size", "32", "--epochs", "1", "--no-tui", "--run", "r"];
    json(d, &run);
    let prof = d.join("lab.toml");
    let calibrated_on = |dataset: &str| {
        let text =
            format!("[cluster]\nlauncher = \"local\"\n[cost]\nsource = \"calibrated\"\ndataset = \"{dataset}\"\n");
        std::fs::write(&prof, text).unwrap();
    };
    let tune = |dataset: &str, extra: &[&str]| -> Vec<String> {
        let base = ["tune-merge", dataset, "--parts", "2", "--batch-size", "32", "--validate", "r", "--cluster"];
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        args.push(prof.to_str().unwrap().into());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    // The run's own dataset's figures predict it.
    calibrated_on("tiny");
    let v = json(d, &refs(&tune("tiny", &[])));
    assert_eq!(v["validation"]["run"], "r", "{v}");
    // Another dataset's: refused as for the dataset tuned, unless accepted by name.
    calibrated_on("other");
    let e = fails(d, &refs(&tune("other", &[])), 2);
    assert!(e.contains("--validate r: run `r` trained on tiny"), "{e}");
    assert!(e.contains("calibrated on other, not tiny") && e.contains("--figures-from other"), "{e}");
    let v = json(d, &refs(&tune("other", &["--figures-from", "other"])));
    assert_eq!(v["validation"]["run"], "r", "{v}");
    // Calibrating `other` cannot give the figures of a run on `tiny`: refused before it starts.
    let before = std::fs::read(&prof).unwrap();
    let e = fails(d, &refs(&tune("other", &["--calibrate"])), 2);
    assert!(
        e.contains("--validate r with --calibrate: run `r` trained on tiny") && e.contains("figures of other"),
        "{e}"
    );
    assert_eq!(std::fs::read(&prof).unwrap(), before, "the profile was not rewritten");
}

/// A profile's `encrypt = true` holds for the calibration too: its probe and
/// runs move the dataset's features between the workers.
#[test]
fn calibration_with_a_profile_that_encrypts_seals_its_workers_connections() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let prof = d.join("sealed.toml");
    std::fs::write(&prof, "[cluster]\nlauncher = \"local\"\nencrypt = true\n").unwrap();
    let job = ["tune-merge", "synthetic-small", "--parts", "2", "--batch-size", "256", "--calibrate"];
    let args = [&job[..], &["--calibrate-iterations", "2", "--cluster", prof.to_str().unwrap()]].concat();
    // RUST_LOG reaches the workers, whose info line says they seal.
    let out = train_support::leapgnn_env(d, &args, &[("RUST_LOG", "info")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let sealed = err.lines().filter(|l| l.contains("carry sealed records (--encrypt)")).count();
    // The probe's 2 workers, and each 2-worker run's.
    assert!(sealed >= 2 * 4, "only {sealed} workers sealed their connections:\n{err}");
}

/// The copy of local rows has a cost: a pre-gathering run's later steps only
/// copy (their rows are this worker's or already fetched) and measure a
/// gather above 0, so the fitted `local_byte_seconds` is above 0 and every
/// prefetched configuration predicts a gather above 0. The joint fit with the
/// fetching records set it to 0 (Cora, 2 workers: predicted 0.00 ms, measured
/// 0.16 ms at T = 1).
#[test]
fn calibrated_copy_cost_is_positive_and_prefetch_predicts_a_gather() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let prof = d.join("copy.toml");
    let v = json(
        d,
        &[
            "tune-merge",
            "synthetic-small",
            "--parts",
            "2",
            "--batch-size",
            "256",
            "--calibrate",
            "--calibrate-iterations",
            "4",
            "--cluster",
            prof.to_str().unwrap(),
        ],
    );
    let runs = v["calibration"]["runs"].as_array().unwrap();
    let pregather = runs.iter().find(|r| r["strategy"] == "pregather").expect("a pregather calibration run");
    let metrics =
        std::fs::read_to_string(d.join("runs").join(pregather["run"].as_str().unwrap()).join("metrics.jsonl")).unwrap();
    let copy_only: Vec<f64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["time_step"] == 1 && r["rows"]["remote"] == 0 && r["roots"].as_u64() > Some(0))
        .map(|r| r["gather_seconds"].as_f64().unwrap())
        .collect();
    assert!(!copy_only.is_empty() && copy_only.iter().all(|g| *g > 0.0), "{copy_only:?}");
    let figures: toml::Table = toml::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    let per_byte = figures["cost"]["local_byte_seconds"].as_float().unwrap();
    assert!(per_byte > 0.0, "copies measured {copy_only:?} s, fitted {per_byte} s per byte");
    for p in v["predictions"].as_array().unwrap().iter().filter(|p| p["prefetch"] == true) {
        assert!(p["components"]["gather"].as_f64().unwrap() > 0.0, "{p}");
    }
}

/// Ctrl-C or SIGTERM during `--calibrate`: the workers are stopped, the
/// command exits 130 / 143 (it exited 1, 'calibration failed: ...
/// interrupted: all workers stopped'), the profile is as it was, and the
/// interrupted calibration run leaves no run directory (it left one with an
/// empty metrics.jsonl, named by nothing).
#[test]
fn an_interrupted_calibration_exits_130_or_143_with_its_workers_stopped_and_the_profile_kept() {
    let _one = timed();
    let tmp = data();
    let d = tmp.path();
    let prof = d.join("lab.toml");
    let before = "# my lab\n[cluster]\nlauncher = \"local\"\n";
    std::fs::write(&prof, before).unwrap();
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let args = [&["-v", "tune-merge"], JOB, &["--calibrate", "--cluster", prof.to_str().unwrap()]].concat();
        // The probe is done and the first calibration run starts.
        let ended = interrupt::interrupt_at(d, &args, &[], "calibration stage 2/", sig);
        assert_eq!(ended.code, Some(code), "SIG{sig}: {}", ended.stderr);
        assert_eq!(std::fs::read_to_string(&prof).unwrap(), before, "SIG{sig}");
        assert_eq!(interrupt::temporaries(d), Vec::<String>::new(), "SIG{sig}");
        let pids: Vec<&str> =
            ended.stderr.lines().filter_map(|l| l.split("] pid ").nth(1)?.split(',').next()).collect();
        assert!(pids.len() >= 4, "the probe's and a run's workers announce themselves: {}", ended.stderr);
        for pid in pids {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "SIG{sig}: worker {pid} still running");
        }
        for run in std::fs::read_dir(d.join("runs")).into_iter().flatten() {
            let run = run.unwrap().path();
            assert!(run.join("summary.json").exists(), "SIG{sig}: an interrupted run left {}", run.display());
        }
    }
}
