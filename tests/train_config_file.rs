//! `leapgnn train --config FILE`: a TOML file of flags is the same run as the
//! flags themselves, the command line overrides it, bad keys and values are
//! refused naming the file, and a run's own `config.json` replays the run.

mod train_support;

use serde_json::Value;
use std::path::Path;
use train_support::{Tiny, fails, json, losses, weights, write_tiny};

fn config_of(d: &Path, run: &str) -> Value {
    serde_json::from_slice(&std::fs::read(d.join("runs").join(run).join("config.json")).unwrap()).unwrap()
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    write_tiny(tmp.path(), "tiny", Tiny::default());
    tmp
}

#[test]
fn a_toml_file_is_the_run_its_flags_give_and_the_command_line_overrides_it() {
    let tmp = setup();
    let d = tmp.path();
    let file = d.join("job.toml");
    std::fs::write(
        &file,
        "# the flags of `leapgnn train`, without the dashes\n\
         dataset = \"tiny\"\nbatch-size = 64\nfanout = [5, 5]\nhidden = 32\nepochs = 2\nseed = 5\n\
         model = \"gat\"\nno-tui = true\nprefetch = false\n",
    )
    .unwrap();
    let cfg = file.to_str().unwrap();
    let by_file = json(d, &["train", "--config", cfg, "--run", "file"]);
    let by_flags = json(
        d,
        &[
            "train",
            "tiny",
            "--batch-size",
            "64",
            "--fanout",
            "5,5",
            "--hidden",
            "32",
            "--epochs",
            "2",
            "--seed",
            "5",
            "--model",
            "gat",
            // `prefetch = false` in TOML is `--prefetch off`.
            "--prefetch",
            "off",
            "--run",
            "flags",
        ],
    );
    assert_eq!(config_of(d, "file"), config_of(d, "flags"));
    assert_eq!(losses(d, "file"), losses(d, "flags"));
    assert_eq!(weights(d, "file"), weights(d, "flags"));
    assert_eq!(by_file["final_loss"], by_flags["final_loss"]);

    // Later flags win: the command line's --epochs and --seed over the file's.
    let over = json(d, &["train", "--config", cfg, "--epochs", "3", "--seed", "6", "--run", "over"]);
    assert_eq!(over["epochs"], 3);
    let c = config_of(d, "over");
    assert_eq!((c["epochs"].as_u64(), c["seed"].as_u64(), c["hidden"].as_u64()), (Some(3), Some(6), Some(32)));
    // The dataset on the command line replaces the file's.
    write_tiny(d, "tiny2", Tiny { nodes: 500, ..Tiny::default() });
    json(d, &["train", "tiny2", "--config", cfg, "--epochs", "1", "--run", "other"]);
    assert_eq!(config_of(d, "other")["dataset"], "tiny2");
}

#[test]
fn bad_files_are_refused_with_exit_2_naming_the_file_and_the_key() {
    let tmp = setup();
    let d = tmp.path();
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let unknown = write("unknown.toml", "dataset = \"tiny\"\nepoch = 3\n");
    let e = fails(d, &["train", "--config", &unknown], 2);
    assert!(e.contains(&unknown) && e.contains("unknown key `epoch`"), "{e}");

    // A value of the wrong type is put to its key, as the file writes it, and
    // to what the flag takes; nothing is started.
    let value = write("value.toml", "dataset = \"tiny\"\nepochs = \"many\"\n");
    let e = fails(d, &["train", "--config", &value], 2);
    assert!(
        e.contains(&format!(
            "--config {value}: epochs = \"many\": expected a whole number, 0 or more (as --epochs takes)"
        )),
        "{e}"
    );
    assert!(!d.join("runs").exists(), "a run was started");
    for (text, said) in [
        ("lr = \"fast\"", "lr = \"fast\": expected a number (as --lr takes)"),
        ("hidden = 2.5", "hidden = 2.5: expected a whole number, 0 or more (as --hidden takes)"),
        ("workers = -1", "workers = -1: expected a whole number, 0 or more (as --workers takes)"),
        ("model = \"gcnn\"", "model = \"gcnn\": expected one of sage, sage-max, gcn, gat,"),
        ("prefetch = \"maybe\"", "prefetch = \"maybe\": expected one of on, off, auto (as --prefetch takes)"),
        ("fanout = [5, \"x\"]", "fanout = [5, \"x\"]: bad fanout `x` in `5,x`"),
        // A negative count was taken for a flag ("unexpected argument '-1' found"), the
        // others reached the strategy's own check, naming `--time-steps on` for `true`.
        ("time-steps = -1", "time-steps = -1: expected `auto` or a whole number of time steps, 1 or more"),
        ("time-steps = 2.5", "time-steps = 2.5: expected `auto` or a whole number of time steps, 1 or more"),
        ("time-steps = true", "time-steps = true: expected `auto` or a whole number of time steps, 1 or more"),
        ("time-steps = 0", "time-steps = 0: expected `auto` or a whole number of time steps, 1 or more"),
    ] {
        let file = write("typed.toml", &format!("dataset = \"tiny\"\n{text}\n"));
        let e = fails(d, &["train", "--config", &file], 2);
        assert!(e.contains(&format!("--config {file}: {said}")), "{text}: {e}");
    }
    // A value starting with `-` is the key's value, not a flag: as two words
    // (`--cluster -lab.toml`) clap took it for one ("unexpected argument").
    let dashed = write("dashed.toml", "dataset = \"tiny\"\ncluster = \"-lab.toml\"\n");
    let e = fails(d, &["train", "--config", &dashed], 2);
    assert!(e.contains("cannot read cluster profile -lab.toml"), "{e}");
    // The command line's own flags keep clap's message.
    let e = fails(d, &["train", "tiny", "--epochs", "many"], 2);
    assert!(e.contains("invalid value 'many' for '--epochs <EPOCHS>'"), "{e}");

    // A GPU index reads from a file as from the command line (this build has no CUDA).
    let gpu = write("gpu.toml", "dataset = \"tiny\"\ndevice = \"cuda:1\"\n");
    let e = fails(d, &["train", "--config", &gpu], 2);
    assert!(e.contains("--device cuda:1: this leapgnn was built without CUDA"), "{e}");
    let gpu = write("gpu-bad.toml", "dataset = \"tiny\"\ndevice = \"cuda:one\"\n");
    let e = fails(d, &["train", "--config", &gpu], 2);
    assert!(e.contains(&gpu) && e.contains("cuda:one"), "{e}");

    let switch = write("switch.toml", "dataset = \"tiny\"\nno-tui = 1\n");
    let e = fails(d, &["train", "--config", &switch], 2);
    assert!(e.contains(&switch) && e.contains("`no-tui`") && e.contains("true or false"), "{e}");

    let toml = write("broken.toml", "epochs = [1,\n");
    let e = fails(d, &["train", "--config", &toml], 2);
    assert!(e.contains(&toml) && e.contains("not valid TOML"), "{e}");

    let missing = d.join("nowhere.toml");
    let e = fails(d, &["train", "--config", missing.to_str().unwrap()], 2);
    assert!(e.contains("nowhere.toml") && e.contains("cannot read"), "{e}");

    let json_file = write("other.json", "{\"epochs\": 3}");
    let e = fails(d, &["train", "--config", &json_file], 2);
    assert!(e.contains(&json_file) && e.contains("config.json"), "{e}");

    json(d, &["train", "tiny", "--batch-size", "64", "--fanout", "5,5", "--epochs", "1", "--run", "r"]);
    let out = train_support::leapgnn(d, &["train", "--config", &unknown, "--resume", "r"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("--config") && e.contains("--resume"), "{e}");
}

/// `--config runs/RUN/config.json --run NEW` trains RUN again: the same
/// config, loss curve and weights, for one process and for two, for both
/// engines, and for a strategy with flags of its own.
#[test]
fn a_runs_config_json_replays_the_run() {
    let tmp = setup();
    let d = tmp.path();
    let jobs: [&[&str]; 5] = [
        &["--batch-size", "64", "--fanout", "5,5", "--hidden", "32", "--epochs", "2", "--seed", "9"],
        &["--workers", "2", "--strategy", "leapgnn", "--time-steps", "2", "--batch-size", "32", "--epochs", "2"],
        &["--mode", "full-graph", "--workers", "2", "--model", "sage", "--epochs", "4", "--dropout", "0.2"],
        &["--strategy", "varco", "--workers", "2", "--epochs", "4", "--ratio", "4", "--partition", "random"],
        &["--strategy", "retexo", "--workers", "2", "--rounds", "3", "--hidden", "16", "--model", "gcn"],
    ];
    for (i, job) in jobs.iter().enumerate() {
        let (first, again) = (format!("job{i}"), format!("job{i}-again"));
        let a = json(d, &[&["train", "tiny", "--run", &first], &job[..]].concat());
        let cfg = d.join("runs").join(&first).join("config.json");
        let b = json(d, &["train", "--config", cfg.to_str().unwrap(), "--run", &again]);
        assert_eq!(config_of(d, &first), config_of(d, &again), "job {job:?}");
        assert_eq!(weights(d, &first), weights(d, &again), "job {job:?}");
        assert_eq!(a["final_loss"], b["final_loss"], "job {job:?}");
        let loss_curve =
            |s: &Value| -> Vec<Value> { s["history"].as_array().unwrap().iter().map(|e| e["loss"].clone()).collect() };
        assert_eq!(loss_curve(&a), loss_curve(&b), "job {job:?}");
    }
}

/// A micrograph or pregather run's `config.json` holds its time steps, one
/// per worker, which are not a flag of theirs: a replay with another
/// `--workers` (or `--strategy`) takes the count of its own, as the same
/// flags on the command line do (it once failed: `--time-steps 4 does not
/// apply to --strategy micrograph, which always takes one time step per
/// worker (2)`).
#[test]
fn a_micrograph_runs_config_json_replays_on_other_workers_and_strategies() {
    let tmp = setup();
    let d = tmp.path();
    let job = ["--batch-size", "16", "--fanout", "5,5", "--hidden", "16", "--epochs", "1", "--parts", "4"];
    for strategy in ["micrograph", "pregather"] {
        let first = format!("{strategy}-4");
        json(d, &[&["train", "tiny", "--run", &first, "--workers", "4", "--strategy", strategy], &job[..]].concat());
        assert_eq!(config_of(d, &first)["time_steps"], 4);
        let cfg = d.join("runs").join(&first).join("config.json");
        let cfg = cfg.to_str().unwrap();
        for (over, steps) in [
            (&["--workers", "2"][..], 2),
            (&["--workers", "3"], 3),
            (&["--strategy", "model-centric"], 1),
            (&["--strategy", "leapgnn", "--time-steps", "2"], 2),
        ] {
            let again = format!("{first}-{}", over.join("").replace('-', ""));
            let s = json(d, &[&["train", "--config", cfg, "--run", &again], over].concat());
            assert_eq!(s["time_steps"], steps, "{strategy} {over:?}: {s}");
            let c = config_of(d, &again);
            assert_eq!(c["time_steps"], steps, "{strategy} {over:?}: {c}");
            // The rest is the replayed run's: from the file, not from the defaults.
            assert_eq!((c["parts"].as_u64(), c["batch_size"].as_u64()), (Some(4), Some(16)), "{c}");
        }
        // Replayed as it was, it is the same run.
        let same = format!("{first}-again");
        json(d, &["train", "--config", cfg, "--run", &same]);
        assert_eq!(config_of(d, &first), config_of(d, &same), "{strategy}");
        assert_eq!(weights(d, &first), weights(d, &same), "{strategy}");
    }
}

/// A run's `config.json` is held to what a TOML file is: a key the config does
/// not have is refused naming it, as is a value of the wrong type, by its key.
#[test]
fn a_runs_config_json_refuses_unknown_keys_and_wrong_types_naming_the_key() {
    let tmp = setup();
    let d = tmp.path();
    json(d, &["train", "tiny", "--batch-size", "64", "--fanout", "5,5", "--epochs", "1", "--run", "r"]);
    let edited = |name: &str, edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut cfg = config_of(d, "r");
        edit(cfg.as_object_mut().unwrap());
        let p = d.join(name);
        std::fs::write(&p, serde_json::to_string(&cfg).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let bogus = edited("bogus.json", &|c| {
        c.insert("bogus".into(), 1.into());
    });
    let e = fails(d, &["train", "--config", &bogus, "--run", "b"], 2);
    assert!(e.contains(&bogus) && e.contains("unknown key `bogus`"), "{e}");
    assert!(!d.join("runs/b").exists(), "a refused config starts no run");

    let typed = edited("typed.json", &|c| {
        c.insert("epochs".into(), "many".into());
    });
    let e = fails(d, &["train", "--config", &typed, "--run", "t"], 2);
    assert!(e.contains(&typed) && e.contains("`epochs`") && e.contains("many"), "{e}");
    assert!(!e.contains("column"), "the key, not a position in a one-line file: {e}");

    let nested = edited("nested.json", &|c| {
        c.insert("gnnpipe".into(), serde_json::json!({"chunks": 2, "history": true, "groups": 1, "bogus": 1}));
    });
    let e = fails(d, &["train", "--config", &nested, "--run", "n"], 2);
    assert!(e.contains("unknown key `gnnpipe.bogus`"), "{e}");

    // The file as the run wrote it still replays.
    let cfg = d.join("runs/r/config.json");
    json(d, &["train", "--config", cfg.to_str().unwrap(), "--run", "again"]);
}
