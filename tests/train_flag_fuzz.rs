//! `train` under seeded random combinations of flags and values, valid and
//! not (zero, negative, huge, unknown, flags of other strategies): every
//! invocation either trains (exit 0) or is refused with one `error:` line
//! naming what was wrong (exit 2); none panics, hangs or fails at run time,
//! except a run whose loss diverges, which says so (exit 1).

mod dist_support;

use dist_support::{Driver, Tiny, write_tiny};
use rand::seq::{IndexedRandom, IteratorRandom};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::time::Duration;

/// Each flag with values a user might give it, good and bad.
const FLAGS: &[(&str, &[&str])] = &[
    ("--model", &["sage", "sage-max", "gcn", "gat", "deepgcn", "film", "gin"]),
    (
        "--strategy",
        &[
            "model-centric",
            "micrograph",
            "pregather",
            "leapgnn",
            "p3",
            "retexo",
            "varco",
            "gnnpipe",
            "naive",
            "neutronstar",
        ],
    ),
    ("--workers", &["1", "2", "3", "0"]),
    ("--layers", &["1", "2", "3", "4", "0", "-1"]),
    ("--hidden", &["1", "3", "8", "0", "-8"]),
    ("--heads", &["1", "2", "3", "0"]),
    ("--batch-size", &["1", "7", "64", "100000", "0"]),
    ("--fanout", &["1", "2,2", "5,5", "all,all", "0", "3,all", "1,1,1,1", "-2"]),
    ("--eval-fanout", &["all", "2,2", "1", "x"]),
    ("--dropout", &["0", "0.5", "0.99", "1", "-0.1", "nan"]),
    ("--lr", &["0.01", "1e-30", "0", "-1", "inf"]),
    ("--weight-decay", &["0", "5e-4", "-0.5"]),
    ("--optimizer", &["adam", "adamw", "sgd", "lbfgs"]),
    ("--time-steps", &["1", "2", "4", "auto", "0", "1000"]),
    ("--migration", &["none", "ring", "all-to-all", "bogus"]),
    ("--chunks", &["1", "2", "3", "100", "0", "70000"]),
    ("--history", &["on", "off"]),
    ("--history-smoothing", &["0", "0.5", "0.99", "1", "-0.5"]),
    ("--pipeline-groups", &["1", "2", "3", "0"]),
    ("--rounds", &["1", "2", "0", "18446744073709551615"]),
    ("--compression", &["variable", "fixed", "none", "some"]),
    ("--ratio", &["1", "1.5", "1000000", "0.5", "-4"]),
    ("--max-ratio", &["1", "128", "1e12"]),
    ("--min-ratio", &["1", "1.5", "0"]),
    ("--slope", &["0", "5", "1e12", "-1"]),
    ("--aggr", &["max", "softmax", "mean"]),
    ("--softmax-t", &["0.001", "1", "0", "-2"]),
    ("--self-loops", &["on", "off"]),
    ("--gat-heads", &["concat", "mean"]),
    ("--partition", &["metis", "random", "hash", "ldg", "spectral"]),
    ("--parts", &["1", "2", "4", "5", "70000"]),
    ("--normalize", &["none", "l1"]),
    ("--cache-mb", &["0", "1", "100000"]),
    ("--eval", &["sampled", "full"]),
    ("--mode", &["minibatch", "full-graph"]),
    ("--factored-grads", &["on", "off"]),
    ("--checkpoint-every", &["0", "1", "3"]),
    ("--eval-batch-size", &["1", "1000000", "0"]),
    ("--memory-limit-mb", &["1", "100000"]),
    ("--comm-timeout", &["30", "0", "-1", "nan"]),
];
const SWITCHES: &[&str] = &["--full-batch", "--prefetch", "--dry-run", "--encrypt"];
const CASES: usize = 300;
/// No case trains for more than a few seconds on the tiny graph; one that runs this long is hung.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn random_flag_combinations_train_or_are_refused_naming_the_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let (mut trained, mut refused) = (0, 0);
    for case in 0..CASES {
        let mut args = vec!["train", "tiny", "--no-tui", "--epochs", "1"];
        let k = rng.random_range(1..=3);
        for (flag, values) in FLAGS.iter().choose_multiple(&mut rng, k) {
            args.extend([*flag, values.choose(&mut rng).unwrap()]);
        }
        if rng.random_bool(0.2) {
            args.push(SWITCHES.choose(&mut rng).unwrap());
        }
        // Panics past LIMIT (a hang), and the driver is killed on the way out.
        let (code, err) = Driver::start(d, &args).wait_exit(LIMIT);
        assert!(!err.contains("panicked"), "case {case}: {args:?} panicked:\n{err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        match code {
            Some(0) => trained += 1,
            Some(2) => {
                refused += 1;
                assert_eq!(errors.len(), 1, "case {case}: {args:?}: one error line expected:\n{err}");
                assert!(errors[0].contains("--") || errors[0].contains('`'), "case {case}: {args:?}: {}", errors[0]);
            }
            Some(1) if errors.iter().any(|l| l.contains("training diverged")) => {}
            other => panic!("case {case}: {args:?} exited {other:?}:\n{err}"),
        }
    }
    // Both outcomes are exercised, not only refusals.
    println!("{trained} trained, {refused} refused of {CASES}");
    assert!(trained >= 5 && refused >= 5, "{trained} trained, {refused} refused");
}
