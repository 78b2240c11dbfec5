//! `train --workers 4` checks every flag and combination a worker would
//! reject before it creates or starts anything: exit 2, one `error:` line
//! naming the flag, the same line as one worker gives, and no run directory,
//! partition or worker left behind. Also what an operator sees around that:
//! dataset paths on several workers, `-v` / `-vv`.

mod train_support;

use train_support::{Tiny, fails, json, traced, write_tiny};

const BASE: &[&str] = &["train", "tiny", "--no-tui"];

/// Extra flags, what the error line must contain, and whether one worker
/// refuses them with the very same line (some checks involve W itself).
const BAD: &[(&[&str], &str, bool)] = &[
    (&["--model", "gat", "--heads", "3"], "--heads 3", true),
    (&["--model", "gat", "--heads", "0"], "--heads 0", true),
    (&["--dropout", "1.5"], "--dropout 1.5", true),
    (&["--hidden", "0"], "--hidden", true),
    // Refused before the weights are allocated (this aborted the process).
    (&["--hidden", "4000000000"], "--hidden 4000000000", true),
    (&["--batch-size", "0"], "--batch-size", true),
    (&["--eval-batch-size", "0"], "--eval-batch-size", true),
    (&["--epochs", "0"], "--epochs", true),
    (&["--lr", "0"], "--lr 0", true),
    (&["--lr=-1"], "--lr -1", true),
    (&["--weight-decay=-0.5"], "--weight-decay -0.5", true),
    (&["--fanout", "5,x"], "--fanout", true),
    (&["--layers", "3"], "--layers 3", true),
    (&["--eval-fanout", "5"], "--eval-fanout 5", true),
    (&["--eval-fanout", "5,0"], "--eval-fanout", true),
    (&["--model", "gcnx"], "--model", true),
    (&["--optimizer", "lbfgs"], "--optimizer", true),
    (&["--device", "tpu"], "--device", true),
    (&["--normalize", "l7"], "--normalize", true),
    (&["--cache-policy", "lru"], "--cache-policy", true),
    (&["--strategy", "nope"], "--strategy", true),
    (&["--strategy", "p3", "--model", "gat"], "--strategy p3", true),
    (&["--migration", "ring"], "--migration ring", true),
    (&["--prefetch"], "--prefetch", true),
    (&["--prefetch", "sometimes"], "--prefetch", true),
    (&["--time-steps", "2"], "--time-steps 2", true),
    (&["--time-steps", "two"], "--time-steps", true),
    (&["--strategy", "leapgnn", "--time-steps", "0"], "'0' for '--time-steps", true),
    (&["--strategy", "micrograph", "--merge-plan", "plan.json"], "--merge-plan", true),
    (&["--run", "../elsewhere"], "--run", true),
    (&["--strategy", "varco", "--mode", "minibatch"], "--mode minibatch", true),
    (&["--strategy", "varco", "--ratio", "0.5"], "--ratio 0.5", true),
    (&["--strategy", "varco", "--min-ratio", "0.5"], "--min-ratio 0.5", true),
    (&["--strategy", "varco", "--compression", "fixed"], "--compression fixed", true),
    (&["--strategy", "varco", "--compression", "some"], "--compression", true),
    (&["--max-ratio", "8"], "--max-ratio", true),
    (&["--strategy", "neutronstar"], "--dry-run", true),
    (&["--partition", "kway"], "'kway' for '--partition", true),
    (&["--strategy", "retexo", "--mode", "minibatch"], "--mode minibatch", true),
    (&["--strategy", "retexo", "--rounds", "0"], "--rounds 0", true),
    (&["--strategy", "retexo", "--epochs", "5"], "--epochs 5", true),
    (&["--strategy", "retexo", "--checkpoint-every", "3"], "--checkpoint-every 3", true),
    (&["--rounds", "5"], "--rounds 5", true),
    (&["--factored-grads", "off"], "--factored-grads", true),
    (&["--model", "sage", "--self-loops", "off"], "--self-loops off", true),
    (&["--model", "sage", "--gat-heads", "mean"], "--gat-heads mean", true),
    (&["--model", "gat", "--strategy", "retexo", "--gat-heads", "concat"], "--gat-heads concat", true),
    (&["--model", "gat", "--gat-heads", "average"], "--gat-heads", true),
    (&["--partition", "spectral"], "'spectral' for '--partition", true),
    (&["--strategy", "leapgnn", "--time-steps", "5"], "--time-steps 5", false),
    (&["--parts", "3"], "--parts 3", false),
    (&["--comm-timeout", "0"], "--comm-timeout", true),
    // Negative numbers are values, so the range checks name them.
    (&["--comm-timeout", "-1"], "--comm-timeout -1", true),
    (&["--strategy", "neutronstar", "--dry-run", "--comm-timeout", "nan"], "--comm-timeout NaN", true),
    (&["--strategy", "varco", "--slope", "-1"], "--slope -1", true),
    (&["--strategy", "gnnpipe", "--layers", "4", "--history-smoothing", "-0.1"], "--history-smoothing -0.1", true),
    (&["--model", "deepgcn", "--aggr", "softmax", "--softmax-t", "-2"], "--softmax-t -2", true),
    (&["--model", "deepgcn", "--layers", "0"], "--layers must be at least 1", true),
    (&["--strategy", "retexo", "--rounds", "18446744073709551615"], "--rounds 18446744073709551615: 2 layers", true),
    (&["--epochs", "-5"], "'-5' for '--epochs", true),
    // Flags that did nothing where they were given (the run trained without them, silently).
    (&["--full-batch", "--cache-mb", "8"], "--cache-mb 8: the feature cache", true),
    (&["--strategy", "varco", "--cache-policy", "presample"], "--cache-policy: the feature cache", true),
    (&["--cache-policy", "presample"], "--cache-policy presample chooses", true),
    // Layer-wise evaluation takes no batches: the run evaluated the same with any value.
    (&["--full-batch", "--eval-batch-size", "64"], "--eval-batch-size 64 sizes sampled", true),
    (&["--strategy", "varco", "--eval-batch-size", "8"], "--eval-batch-size 8 sizes sampled", true),
    (&["--eval-fanout", "all", "--eval-batch-size", "64"], "--eval full (the default with --eval-fanout all)", true),
    (
        &["--strategy", "gnnpipe", "--layers", "4", "--check-replicas", "5"],
        "--check-replicas 5 with --strategy gnnpipe",
        true,
    ),
    (&["--strategy", "retexo", "--check-replicas", "5"], "--check-replicas 5 with --strategy retexo", true),
    // Partitioning happens after the run directory is made, so its limits are checked before.
    (&["--parts", "70000"], "--parts 70000: at most 65535 parts", false),
    (&["--parts", "5000"], "--parts 5000: more parts than the", false),
];

#[test]
fn bad_flags_for_four_workers_exit_2_naming_the_flag_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    assert!(BAD.len() >= 20);
    for (extra, says, same) in BAD {
        let four = fails(d, &[BASE, &["--workers", "4"], extra].concat(), 2);
        assert!(four.contains(says), "{extra:?}: `{four}` does not name {says}");
        if *same {
            let one = fails(d, &[BASE, &["--workers", "1"], extra].concat(), 2);
            assert_eq!(four, one, "{extra:?}: four workers and one say different things");
        }
        assert!(!d.join("runs").exists(), "{extra:?}: a run directory was created");
        assert!(!d.join("tiny/parts").exists(), "{extra:?}: a partition was created");
    }
}

#[test]
fn datasets_without_labels_or_a_taken_run_name_are_refused_before_launch() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    write_tiny(d, "bare", Tiny { classes: 0, ..Tiny::default() });
    let line = fails(d, &["train", "bare", "--workers", "4", "--no-tui"], 2);
    assert!(line.contains("--generated-classes"), "{line}");
    assert!(!d.join("runs").exists() && !d.join("bare/parts").exists());
    // A run directory left without a checkpoint (its run killed early): neither
    // a new run nor a resume can have it, and both say how to free the name.
    std::fs::create_dir_all(d.join("runs/taken")).unwrap();
    let line = fails(d, &[BASE, &["--workers", "4", "--run", "taken"]].concat(), 2);
    assert!(line.contains("run `taken` exists") && line.contains("Remove that directory"), "{line}");
    let line = fails(d, &["train", "--resume", "taken"], 2);
    assert!(line.contains("has no checkpoint") && line.contains("Remove that directory"), "{line}");
    assert!(!d.join("tiny/parts").exists());
}

#[test]
fn a_partitioning_that_fails_leaves_no_run_to_block_the_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    // A file where the partitions' directory goes: partitioning on demand fails.
    std::fs::write(d.join("tiny/parts"), b"").unwrap();
    let run = [BASE, &["--workers", "2", "--epochs", "1", "--run", "p"]].concat();
    let line = fails(d, &run, 1);
    assert!(line.contains("cannot partition tiny"), "{line}");
    assert!(!d.join("runs/p").exists(), "the failed run left its directory");
    std::fs::remove_file(d.join("tiny/parts")).unwrap();
    assert_eq!(json(d, &run)["run"], "p");
}

/// A dataset given by path trains on several workers as on one; its
/// partition is written beside the archive.
#[test]
fn a_dataset_path_trains_on_several_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let elsewhere = tempfile::tempdir().unwrap();
    write_tiny(elsewhere.path(), "mine", Tiny::default());
    let dir = elsewhere.path().join("mine");
    let s =
        json(d, &["train", dir.to_str().unwrap(), "--workers", "2", "--epochs", "1", "--batch-size", "64", "--no-tui"]);
    assert_eq!(s["workers"], 2);
    assert!(s["iterations"].as_u64().unwrap() >= 1);
    assert!(dir.join("parts/metis-2").is_dir(), "the partition is beside the archive");
}

/// `-v` shows the run's stages and epochs, from the driver and from every
/// worker (relayed as `[worker r]` lines); `-vv` adds a line per step record.
#[test]
fn verbose_flags_trace_the_driver_and_the_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let run = |v: &str| {
        let out = train_support::leapgnn(d, &[v, "train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stderr).unwrap()
    };
    let v = run("-v");
    assert!(v.lines().any(|l| l.contains("INFO") && l.contains("epoch 1/1: loss")), "{v}");
    assert!(v.lines().any(|l| l.starts_with("[worker 1]") && l.contains("INFO")), "{v}");
    assert!(!v.contains("DEBUG"), "{v}");
    assert!(!v.contains('\u{1b}'), "colour codes in piped stderr");
    let vv = run("-vv");
    assert!(vv.lines().any(|l| l.contains("DEBUG") && l.contains("worker 1: epoch 1 iteration 1 step 0")), "{vv}");
}

/// Every line on stderr, the driver's and its workers', leaves its process in
/// one write. stderr is unbuffered, so a line written piece by piece could be
/// cut by the kill that stops a worker: the relayed line then read `error: `
/// with nothing after it. Checked with strace on a 2-worker run and on an
/// error.
#[test]
fn stderr_lines_leave_each_process_in_one_write() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let runs: [&[&str]; 2] =
        [&["-v", "train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui"], &["train", "missing", "--no-tui"]];
    for (i, args) in runs.into_iter().enumerate() {
        let filters = ["-s", "65536", "-e", "trace=write,writev"];
        let Some((out, trace)) = traced(d, &filters, args, &d.join(format!("trace-{i}"))) else { return };
        let err = String::from_utf8_lossy(&out.stderr);
        // `PID write(2, "text\n", N) = N`: the text must end the line it starts.
        let writes: Vec<&str> =
            trace.lines().filter(|l| l.contains(" write(2, ") || l.contains(" writev(2, ")).collect();
        assert!(!writes.is_empty(), "no writes to stderr traced for {args:?}: {err}");
        for w in &writes {
            assert!(w.contains("\\n\", ") && !w.contains("writev"), "a piece of a line, for {args:?}: {w}");
        }
        if i == 0 {
            assert!(out.status.success(), "{err}");
            assert!(writes.iter().any(|w| w.contains("[worker 1]")), "the workers' lines are relayed");
        } else {
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.starts_with("error: ") && err.contains("no dataset `missing`"), "{err}");
        }
    }
}

/// A `--data-dir` that is a file is said to be one, once, by every command
/// that reads it (they answered "no dataset ... download it first", and
/// download itself "Not a directory").
#[test]
fn a_data_dir_that_is_a_file_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    for args in [
        &["info", "cora"][..],
        &["download", "cora-planetoid"],
        &["partition", "cora", "--parts", "2"],
        &["train", "cora", "--no-tui"],
        &["infer", "some-run"],
    ] {
        let line = fails(&file, args, 2);
        assert!(
            line.contains(&format!("--data-dir {} is a file, not a directory", file.display())),
            "{args:?}: {line}"
        );
    }
}
