//! `leapgnn analyze-locality` end to end: the real binary on the shared graphs.

mod import_support;
#[path = "support/interrupt.rs"]
mod interrupt;
mod locality_support;

use import_support::bounded;
use import_support::{leapgnn, ok_json, shared};
use locality_support::*;

#[test]
fn facebook_metis_micrographs_are_local_and_outputs_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    facebook(data);
    let csv = data.join("out/locality.csv");
    let svg = data.join("out/locality.svg");
    let args = [
        "--parts",
        "4",
        "--method",
        "metis,random",
        "--sampling",
        "node",
        "--layers",
        "2",
        "--fanout",
        "10",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ];
    let report = analyze(data, "facebook", &args);
    assert_eq!(report["rows"].as_array().unwrap().len(), 2);
    let metis = row(&report, "metis", 4, "node", 2);
    let f = |k: &str| metis[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {metis}"));
    assert_eq!(f("r_sub_pct"), 25.0);
    assert!(f("locality_pct") > 2.0 * f("r_sub_pct"), "{metis}");
    assert!(f("miss_micrograph") < 0.5 * f("miss_model_centric"), "{metis}");
    // Model-centric roots land on random servers: about (S-1)/S of their rows are remote.
    assert!((f("miss_model_centric") - 0.75).abs() < 0.02, "{metis}");
    assert!(f("rows_pregather") <= f("rows_micrograph"), "{metis}");
    // Facebook's rows are stored sparse: they cross as their non-zeros, far fewer bytes than 4,714 floats.
    assert!(f("bytes_model_centric") < f("rows_model_centric") * 4714.0 * 4.0 / 10.0, "{metis}");
    assert!(f("bytes_naive_migration") > 0.0 && f("seconds") >= 0.0);
    let random = row(&report, "random", 4, "node", 2);
    let locality = random["locality_pct"].as_f64().unwrap();
    assert!((locality - 25.0).abs() < 1.5, "{random}");
    // Partitions made on the fly are kept.
    assert!(data.join("facebook/parts/metis-4/manifest").is_file());
    assert!(data.join("facebook/parts/random-4/manifest").is_file());

    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(&header[..4], ["method", "parts", "sampling", "layers"]);
    let cells: Vec<&str> = lines[1].split(',').collect();
    let at = |k: &str| cells[header.iter().position(|h| *h == k).unwrap()];
    assert_eq!(at("method"), "metis");
    assert_eq!(at("locality_pct").parse::<f64>().unwrap(), f("locality_pct"));

    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg"), "{}", &plot[..plot.len().min(100)]);
    for needle in
        ["Data locality in micrographs: facebook", "S = 4", "R_sub", "metis node-wise 2L: miss rate", "pregather"]
    {
        assert!(plot.contains(needle), "`{needle}` not in the SVG");
    }
}

#[test]
fn the_same_seed_gives_the_same_json_and_the_terminal_table_is_the_papers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    cora(data);
    let args = ["--parts", "2,4", "--method", "metis", "--batch-size", "16", "--batches", "8", "--seed", "3"];
    let a = analyze(data, "cora-planetoid", &args);
    let b = analyze(data, "cora-planetoid", &args);
    assert_eq!(without_seconds(a.clone()), without_seconds(b));
    let mut other = args.to_vec();
    *other.last_mut().unwrap() = "4";
    let c = analyze(data, "cora-planetoid", &other);
    assert_ne!(without_seconds(a.clone()), without_seconds(c));
    assert_eq!(a["rows"].as_array().unwrap().len(), 2 * 2 * 2);
    for key in [
        "locality_pct",
        "r_sub_pct",
        "miss_model_centric",
        "miss_micrograph",
        "miss_pregather",
        "rows_model_centric",
        "rows_micrograph",
        "rows_pregather",
        "bytes_naive_migration",
        "seconds",
    ] {
        assert!(a["rows"][0][key].is_number(), "{key} missing in {}", a["rows"][0]);
    }
    assert_eq!(row(&a, "metis", 4, "layer", 10)["fanout"], 2);

    let human = leapgnn(data, &["analyze-locality", "cora-planetoid", "--parts", "2,4", "--method", "metis"]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    let lines: Vec<&str> = human.stdout.lines().collect();
    assert!(lines[0].starts_with("Data locality in micrographs (%): cora-planetoid"), "{}", human.stdout);
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header, ["sampling", "S", "metis", "2L", "metis", "10L", "R_sub"]);
    assert!(lines[2].starts_with("node") && lines[2].trim_end().ends_with("50.0"), "{}", lines[2]);
    assert!(lines[4].starts_with("layer"), "{}", human.stdout);
}

#[test]
fn bad_input_is_one_error_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    cora(data);
    let blocker = data.join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let under_file = blocker.join("plot.svg");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["no-such-graph"], vec!["no-such-graph"]),
        (vec!["cora-planetoid", "--parts", "5000"], vec!["--parts 5000", "2708 nodes"]),
        (vec!["cora-planetoid", "--fanout", "0"], vec!["--fanout 0"]),
        (vec!["cora-planetoid", "--plot", under_file.to_str().unwrap()], vec!["--plot", "cannot write"]),
        (vec!["cora-planetoid", "--plot", "figure.png"], vec!["--plot figure.png", "svg"]),
        (vec!["cora-planetoid", "--csv", data.to_str().unwrap()], vec!["--csv", "a directory; name a file"]),
        (vec!["cora-planetoid", "--sampling", "node,edge"], vec!["--sampling edge"]),
        (vec!["cora-planetoid", "--method", "metis,magic"], vec!["--method magic"]),
        (vec!["cora-planetoid", "--batch-size", "0"], vec!["--batch-size"]),
        (vec!["cora-planetoid", "--layers", "2,x"], vec!["--layers 2,x"]),
        (vec!["cora-planetoid", "--fanout", "10,5"], vec!["--fanout 10,5", "every layer alike"]),
        (vec!["cora-planetoid", "--fanout", "5,5", "--layers", "3"], vec!["--fanout 5,5", "--layers"]),
        (vec!["cora-planetoid", "--fanout", "-3"], vec!["--fanout -3"]),
        (vec!["cora-planetoid", "--layers", "-1"], vec!["--layers -1"]),
        (vec!["cora-planetoid", "--parts", "-2"], vec!["--parts -2"]),
    ];
    for (args, needles) in cases {
        let mut all = vec!["analyze-locality"];
        all.extend(args.iter());
        let out = leapgnn(data, &all);
        out.assert_error(2, &needles);
        assert_eq!(out.stderr.lines().filter(|l| l.starts_with("error:")).count(), 1, "{}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    // Nothing was partitioned for the rejected runs.
    assert!(!data.join("cora-planetoid/parts").exists());
}

/// `--fanout` as `train` takes it: `5,5` is fanout 5 over 2 layers.
#[test]
fn fanout_takes_trains_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    cora(data);
    let args = ["--parts", "2", "--method", "random", "--sampling", "node", "--fanout", "5,5", "--batches", "2"];
    let report = analyze(data, "cora-planetoid", &args);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["layers"], 2);
    assert_eq!(rows[0]["fanout"], 5);
    // The random-2 partition it made is kept for `train`, unless --no-keep.
    assert!(data.join("cora-planetoid/parts/random-2").is_dir());
    let out = leapgnn(
        data,
        &[
            "analyze-locality",
            "cora-planetoid",
            "--parts",
            "4",
            "--method",
            "random",
            "--sampling",
            "node",
            "--layers",
            "2",
            "--batches",
            "4",
            "--no-keep",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("MB to") && out.stderr.contains("removed"), "{}", out.stderr);
    assert!(!data.join("cora-planetoid/parts/random-4").exists(), "--no-keep left the partition");
    assert!(data.join("cora-planetoid/parts/random-2").is_dir(), "--no-keep removed one it did not make");
}

/// A dataset given as a path has its partitions beside the archive, where
/// `partition` puts them: analyze-locality uses the ones there and `--no-keep`
/// removes only those it made. It looked under --data-dir instead, so it took
/// every partition for new and `--no-keep` deleted ones `partition` had made.
#[test]
fn a_dataset_path_keeps_the_partitions_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    cora(&data);
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let archive = elsewhere.join("c.lgnn");
    std::fs::copy(data.join("cora-planetoid/dataset.lgnn"), &archive).unwrap();
    let a = archive.to_str().unwrap();
    let made = crate::import_support::ok_json(&data, &["partition", a, "--parts", "2", "--method", "random", "--json"]);
    let kept = elsewhere.join("c.parts/random-2");
    assert_eq!(made["path"].as_str(), Some(kept.to_str().unwrap()));
    let manifest = std::fs::read(kept.join("manifest")).unwrap();

    let args = ["--parts", "2,4", "--method", "random", "--sampling", "node", "--layers", "2", "--batches", "2"];
    let out = leapgnn(&data, &[&["analyze-locality", a, "--no-keep"][..], &args[..]].concat());
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(kept.is_dir(), "--no-keep removed the partition `partition` made: {}", out.stderr);
    assert_eq!(std::fs::read(kept.join("manifest")).unwrap(), manifest, "the partition was rewritten");
    assert!(!elsewhere.join("c.parts/random-4").exists(), "--no-keep left the partition it made");
    assert!(out.stderr.contains("random-4") && !out.stderr.contains("random-2"), "{}", out.stderr);
    let under_data: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(under_data, ["cora-planetoid"], "wrote under --data-dir");
}

/// The feature bytes the analysis predicts are those `train` moves on the
/// same partition and batches. Facebook's bag-of-words rows are stored sparse
/// (the import's default) and `train` sends a row as its non-zeros; the
/// analysis billed every row as 4,714 floats, 157 times what was measured
/// (model-centric, 4 workers: 181 MB of remote rows per iteration and worker
/// predicted, 1.15 MB moved). Now the remote rows' bytes plus the 4-byte id
/// each request carries are the measured feature bytes but for the messages'
/// framing; the rows are equal. Dense rows stay 4 x dim bytes.
#[test]
fn predicted_feature_bytes_are_what_train_moves() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    facebook(data);
    let args = ["--parts", "2", "--method", "metis", "--sampling", "node", "--layers", "2", "--fanout", "10"];
    let report = analyze(data, "facebook", &args);
    let r = row(&report, "metis", 2, "node", 2);
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {r}"));
    let iterations = r["iterations"].as_u64().unwrap();
    // Per iteration and worker in the report; the run's totals are over 2 workers.
    let per = (iterations * 2) as f64;
    // leapgnn with one time step fetches each iteration's rows as pregather does.
    for (strategy, name) in [("model-centric", "model_centric"), ("leapgnn", "pregather")] {
        let train = ["train", "facebook", "--workers", "2", "--strategy", strategy, "--time-steps", "1"];
        let rest = ["--batch-size", "1024", "--fanout", "10,10", "--epochs", "1", "--eval-fanout", "all"];
        let s = ok_json(data, &[&train[..], &rest, &["--no-tui", "--json", "--run", strategy]].concat());
        assert_eq!(s["iterations"].as_u64(), Some(iterations), "{strategy}: {s}");
        let remote = s["rows"]["remote"].as_u64().unwrap();
        // The report's rows are means: times the worker batches, whole again but for the float rounding.
        assert_eq!(remote as f64, (f(&format!("remote_rows_{name}")) * per).round(), "{strategy}");
        let want = f(&format!("remote_bytes_{name}")) * per + 4.0 * remote as f64;
        let got = s["bytes"]["train"]["features"].as_u64().unwrap() as f64;
        assert!(got >= want && got - want <= 0.01 * want, "{strategy}: predicted {want} feature bytes, {got} moved");
    }
    let cora = shared("planetoid/converted/cora");
    ok_json(data, &["download", "cora-planetoid", "--from", cora.to_str().unwrap(), "--features", "dense", "--json"]);
    let report = analyze(data, "cora-planetoid", &args);
    let r = row(&report, "metis", 2, "node", 2);
    for name in ["model_centric", "micrograph", "pregather"] {
        let (rows, bytes) = (r[format!("rows_{name}")].as_f64().unwrap(), r[format!("bytes_{name}")].as_f64().unwrap());
        assert_eq!(bytes, rows * 1433.0 * 4.0, "{name}: {r}");
    }
}

/// Ctrl-C or SIGTERM while analyze-locality partitions and samples: exit
/// 130 / 143 (the signal's default killed it, no exit code), no temporary
/// left beside the partitions, and the CSV of an earlier run untouched.
#[test]
fn an_interrupted_analysis_exits_130_or_143_and_leaves_earlier_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    facebook(data);
    let csv = data.join("locality.csv");
    std::fs::write(&csv, "an earlier run's table\n").unwrap();
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let args = ["analyze-locality", "facebook", "--parts", "2,4", "--method", "metis,random", "--csv"];
        let args = [&args[..], &[csv.to_str().unwrap()]].concat();
        // Paused with the first partition written, before it is put in place.
        let pause = [("LEAPGNN_TEST_PAUSE", "partition-staged")];
        let ended = interrupt::interrupt_at(data, &args, &pause, "test pause: partition-staged", sig);
        assert_eq!(ended.code, Some(code), "SIG{sig}: {}", ended.stderr);
        let parts = data.join("facebook/parts");
        assert_eq!(interrupt::temporaries(&parts), Vec::<String>::new(), "SIG{sig}");
        assert_eq!(interrupt::temporaries(data), Vec::<String>::new(), "SIG{sig}");
        assert_eq!(std::fs::read_to_string(&csv).unwrap(), "an earlier run's table\n", "SIG{sig}");
        std::fs::remove_dir_all(&parts).unwrap();
    }
}
