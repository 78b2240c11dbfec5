//! `--strategy gnnpipe` (layer-level model parallelism, graph chunks
//! pipelined through the stages): with one chunk and no history its gradient
//! is the full-graph engine's, and so with chunks whose cross edges all run
//! from an earlier chunk to a later one; what crosses the network is exactly
//! each chunk's rows between consecutive stages and their gradients (no
//! gradient all-reduce); it learns Cora; bad flags exit 2 naming the flag.
//! Real processes, real data.

mod dist_support;

use dist_support::{
    Driver, LONG_EXIT, cora, count, epoch_losses, fails, final_weights, first_gradient, json, leapgnn, leapgnn_env,
    predictions, records, rel_diff, scores, straight_and_resumed,
};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[test]
fn one_chunk_without_history_gives_the_full_graph_gradient() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["--normalize", "l1", "--hidden", "16", "--seed", "2"];
    // 4 layers on 4 stages, 5 layers on 2 (stages of 2 and 3 layers), and
    // deepgcn, whose BatchNorm statistics each stage warms up and keeps for its own layers;
    // one stage runs in the driver's process, whose gradient dump must be asked for through
    // every observer it passes.
    for (model, layers, workers) in [("gcn", "4", "4"), ("sage", "5", "2"), ("deepgcn", "4", "4"), ("gcn", "3", "1")] {
        let full = [&["--full-batch", "--model", model, "--layers", layers, "--workers", "1"], &common[..]].concat();
        let (reference, _) = first_gradient(d, "cora", &full);
        assert!(reference.iter().any(|&g| g != 0.0));
        let pipe = [
            &["--strategy", "gnnpipe", "--model", model, "--layers", layers, "--workers", workers][..],
            &["--chunks", "1", "--history", "off"],
            &common[..],
        ]
        .concat();
        let (g, s) = first_gradient(d, "cora", &pipe);
        assert_eq!(s["mode"], "full-graph");
        let e = rel_diff(&reference, &g);
        assert!(e <= 1e-5, "{model}, {layers} layers on {workers} stages: relative difference {e}");
        if workers != "1" {
            assert!(count(&s["bytes"]["activations"]) > 0, "{model}: no rows crossed between stages");
        }
    }
}

/// Two clusters of 60 vertices (0..60 and 60..120), dense inside, joined by
/// 12 edges that all run one way: from the first cluster to the second
/// (`forward`) or back. As an edge list in `<d>/<name>.txt`, imported.
fn two_clusters(d: &Path, name: &str, forward: bool) {
    let mut lines = String::new();
    let mut rng = 7u64;
    let mut next = |m: u64| {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (rng >> 33) % m
    };
    for base in [0u64, 60] {
        for a in 0..60 {
            for _ in 0..6 {
                let b = next(60);
                if a != b {
                    lines += &format!("{} {}\n{} {}\n", base + a, base + b, base + b, base + a);
                }
            }
        }
    }
    for _ in 0..12 {
        let (a, b) = (next(60), 60 + next(60));
        let (a, b) = if forward { (a, b) } else { (b, a) };
        lines += &format!("{a} {b}\n");
    }
    let file = d.join(format!("{name}.txt"));
    std::fs::write(&file, lines).unwrap();
    let args = ["download", name, "--from", file.to_str().unwrap(), "--format", "edgelist", "--feature-dim", "8"];
    // Download seed 4 splits the training vertices 30/30 (METIS balances
    // them too), so METIS cuts exactly the 12 cross edges: checked below.
    json(d, &[&args[..], &["--generated-classes", "3", "--split", "50,20,30", "--seed", "4"]].concat());
    let p = json(d, &["partition", name, "--parts", "2", "--seed", "3"]);
    assert_eq!((p["edge_cut"].as_u64(), &p["part_nodes"]), (Some(12), &serde_json::json!([60, 60])), "{p}");
}

#[test]
fn gradient_reaches_the_rows_a_later_chunk_read_this_epoch() {
    // Chunks are numbered by their lowest vertex, so the cluster of vertex 0
    // is chunk 0. With every cross edge from chunk 0 to chunk 1, chunk 1 reads
    // chunk 0's rows of this epoch and nothing from the history: the forward
    // is the full graph's, and so must be the gradient, which reaches chunk
    // 0's rows back through chunk 1's halo. With the edges the other way,
    // chunk 0 reads chunk 1's rows from the (disabled) history: not equal.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let common = ["--model", "gcn", "--layers", "4", "--hidden", "16", "--seed", "3"];
    for (name, forward) in [("ahead", true), ("behind", false)] {
        two_clusters(d, name, forward);
        let (reference, _) = first_gradient(d, name, &[&["--full-batch", "--workers", "1"], &common[..]].concat());
        let pipe = [&["--strategy", "gnnpipe", "--workers", "2", "--chunks", "2", "--history", "off"], &common[..]];
        let (g, _) = first_gradient(d, name, &pipe.concat());
        let e = rel_diff(&reference, &g);
        if forward {
            assert!(e <= 1e-5, "cross edges into the later chunk: relative difference {e}");
        } else {
            assert!(e > 1e-3, "cross edges into the earlier chunk read the zero history, yet {e}");
        }
    }
}

#[test]
fn only_chunk_rows_and_their_gradients_cross_between_stages() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden, chunks, epochs) = (3u64, 16u64, 4u64, 2u64);
    let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "3", "--layers", "4"];
    let s = json(d, &[&args[..], &["--hidden", "16", "--chunks", "4", "--epochs", "2", "--seed", "1"]].concat());
    assert_eq!(count(&s["epochs"]), epochs);
    assert_eq!(count(&s["bytes"]["gradients"]), 0, "no gradient all-reduce: {}", s["bytes"]);
    let n = 2708u64;
    // Per epoch, each of the W - 1 stage boundaries carries every vertex's
    // row forward and its gradient back; each tick but the last is one
    // all-to-all, a 16-byte frame per message (W (W - 1) messages).
    let ticks = chunks + w - 1;
    let frames = |exchanges: u64| exchanges * w * (w - 1) * 16;
    let train = (w - 1) * 2 * n * hidden * 4 + frames(2 * (ticks - 1));
    // Evaluation sends every row once across each boundary (W - 1 exchanges).
    let eval = (w - 1) * n * hidden * 4 + frames(w - 1);
    assert_eq!(count(&s["bytes"]["train"]["activations"]), epochs * train, "{}", s["bytes"]);
    assert_eq!(count(&s["bytes"]["eval"]["activations"]), epochs * eval, "{}", s["bytes"]);
    let recs = records(d, &s);
    assert_eq!(recs.len() as u64, epochs * w, "one record per stage and epoch");
    for r in &recs {
        let stage = count(&r["worker"]);
        // Stage s sends its chunks' rows forward (unless last) and their gradients back (unless first).
        let rows = n * hidden * 4 * (u64::from(stage + 1 < w) + u64::from(stage > 0));
        let sent = rows + 2 * (ticks - 1) * (w - 1) * 16;
        assert_eq!(count(&r["bytes_out"]["activations"]), sent, "{r}");
        assert_eq!(count(&r["layer"]), [0, 1, 2][stage as usize], "the stage's first layer: {r}");
    }
}

/// `--chunks` up to the node count is accepted before launch, and so it
/// trains: METIS leaves chunks empty when they are many (most of 2,708 on
/// Cora), and the pipeline runs the chunks that hold vertices, as many ticks
/// as there are of them. Workers failed with 'error: --parts 2708: --method
/// metis left 2439 of the 2708 parts without a node', a flag not given.
#[test]
fn as_many_chunks_as_nodes_trains_on_the_chunks_metis_fills() {
    let tmp = cora();
    let d = tmp.path();
    let (w, hidden, n) = (2u64, 16u64, 2708u64);
    let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--chunks", "2708", "--hidden", "16"];
    let one = json(d, &[&args[..], &["--workers", "1", "--epochs", "2"]].concat());
    assert_eq!(count(&one["epochs"]), 2, "{one}");
    // Two stages, -v: the driver logs the stage's line saying how many chunks METIS filled.
    let out = dist_support::leapgnn(d, &[&["-v"][..], &args, &["--workers", "2", "--epochs", "1", "--json"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = err.lines().find_map(|l| l.split("METIS left ").nth(1)).unwrap_or_else(|| panic!("{err}"));
    let used: u64 = said.rsplit(": ").next().unwrap().trim_end_matches(" chunks").parse().unwrap();
    assert!((2..n).contains(&used), "{said}");
    assert!(said.starts_with(&format!("{} of the 2708 chunks empty", n - used)), "{said}");
    // As many ticks as filled chunks: each but the last an all-to-all of 16-byte frames, twice (rows, gradients).
    let ticks = used + w - 1;
    let train = (w - 1) * 2 * n * hidden * 4 + 2 * (ticks - 1) * w * (w - 1) * 16;
    assert_eq!(count(&s["bytes"]["train"]["activations"]), train, "{}", s["bytes"]);
}

#[test]
fn learns_cora_close_to_full_graph_training() {
    let tmp = cora();
    let d = tmp.path();
    let common = ["train", "cora", "--no-tui", "--model", "gcn", "--layers", "4", "--hidden", "64", "--epochs", "60"];
    let full = json(d, &[&common[..], &["--full-batch", "--workers", "2", "--normalize", "l1"]].concat());
    let pipe = json(
        d,
        &[&common[..], &["--strategy", "gnnpipe", "--workers", "2", "--chunks", "4", "--normalize", "l1"]].concat(),
    );
    let (a, b) = (full["test_accuracy"].as_f64().unwrap(), pipe["test_accuracy"].as_f64().unwrap());
    eprintln!("4-layer GCN on Cora: full-graph {a:.3}, gnnpipe (2 stages, 4 chunks, history) {b:.3}");
    // Majority class 0.319.
    assert!(b >= 0.7, "gnnpipe test accuracy {b}");
    assert!(b >= a - 0.05, "gnnpipe {b} vs full-graph {a}");
}

#[test]
fn history_smoothing_changes_only_what_is_read_from_the_history() {
    let tmp = cora();
    let d = tmp.path();
    let base =
        ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "2", "--layers", "4", "--epochs", "4"];
    let losses_of = |more: &[&str]| epoch_losses(&json(d, &[&base[..], more].concat()));
    let losses = |chunks: &str, g: &str| losses_of(&["--chunks", chunks, "--history-smoothing", g]);
    // One chunk reads nothing from the history: smoothing it changes nothing.
    assert_eq!(losses("1", "0.5"), losses("1", "0"));
    // Three chunks read it from epoch 1 on: epoch 0 alike, then not.
    let (smooth, plain) = (losses("3", "0.5"), losses("3", "0"));
    assert_eq!(smooth[..2], plain[..2], "epoch 0 warms the history and epoch 1 reads it unsmoothed");
    assert!(smooth[2..].iter().zip(&plain[2..]).all(|(a, b)| a != b), "{smooth:?} vs {plain:?}");
    // The default smooths with G = 0.8 (`--history off` alone, which refuses an explicit G, is
    // accepted: one_chunk_without_history_gives_the_full_graph_gradient).
    assert_eq!(losses_of(&["--chunks", "3"]), losses("3", "0.8"), "the default G");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let tmp = cora();
    let d = tmp.path();
    let base = ["train", "cora", "--no-tui", "--strategy", "gnnpipe"];
    let err = fails(d, &[&base[..], &["--workers", "4", "--layers", "2"]].concat(), 2);
    assert!(err.contains("--layers 2 with --strategy gnnpipe and --workers 4"), "{err}");
    let err = fails(d, &[&base[..], &["--chunks", "0"]].concat(), 2);
    assert!(err.contains("--chunks 0: "), "{err}");
    let err = fails(d, &[&base[..], &["--workers", "4", "--layers", "4", "--pipeline-groups", "3"]].concat(), 2);
    assert!(err.contains("--pipeline-groups 3 with --workers 4"), "{err}");
    let err = fails(d, &[&base[..], &["--history", "sometimes"]].concat(), 2);
    assert!(err.contains("--history"), "{err}");
    let err = fails(d, &[&base[..], &["--history-smoothing", "1"]].concat(), 2);
    assert!(err.contains("--history-smoothing 1: "), "{err}");
    let err = fails(d, &[&base[..], &["--history-smoothing", "0.5", "--history", "off"]].concat(), 2);
    assert!(err.contains("--history-smoothing 0.5 with --history off"), "{err}");
    let err = fails(d, &["train", "cora", "--no-tui", "--full-batch", "--history-smoothing", "0.5"], 2);
    assert!(err.contains("--history-smoothing") && err.contains("gnnpipe only"), "{err}");
    let err = fails(d, &["train", "cora", "--no-tui", "--full-batch", "--chunks", "4"], 2);
    assert!(err.contains("--chunks") && err.contains("gnnpipe only"), "{err}");
    // On one worker and on several: the driver refuses it before any worker starts.
    for workers in ["1", "4"] {
        let err = fails(d, &[&base[..], &["--workers", workers, "--layers", "4", "--chunks", "9999"]].concat(), 2);
        assert!(err.contains("--chunks 9999: the graph has 2708 nodes"), "{err}");
        assert!(!err.contains("[worker"), "refused by a worker, not before launch: {err}");
    }
    let err = fails(d, &[&base[..], &["--workers", "4", "--layers", "4", "--pipeline-groups", "0"]].concat(), 2);
    assert!(err.contains("--pipeline-groups 0: ") && err.contains("--pipeline-groups 1"), "{err}");
}

#[test]
fn the_final_checkpoint_holds_every_stages_layers() {
    let tmp = cora();
    let d = tmp.path();
    let ds = leapgnn::format::DatasetFile::open(d.join("cora/dataset.lgnn")).unwrap();
    // deepgcn: each stage's BatchNorm statistics too, which only its owner kept up to date.
    for model in ["gcn", "deepgcn"] {
        let run = format!("gp-{model}");
        let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "3", "--layers", "4"];
        let more = ["--model", model, "--chunks", "3", "--epochs", "4", "--normalize", "l1", "--run", &run];
        let s = json(d, &[&args[..], &more].concat());
        // `infer` runs the checkpoint's weights over the whole graph: the stages'
        // final layers, or its test accuracy would not be the last evaluation's.
        let r = json(d, &["infer", &run]);
        let pred = predictions(Path::new(r["out"].as_str().unwrap()));
        let correct = ds.test().iter().filter(|&&v| pred[v as usize] as i32 == ds.labels()[v as usize]).count();
        let last = s["history"][3]["test_accuracy"].as_f64().unwrap();
        assert_eq!(correct as f64 / ds.test().len() as f64, last, "{model}");
    }
}

/// A periodic checkpoint's control bytes, to the byte: the vote on it
/// (`all_may_checkpoint`: one f32 from every worker to every other), the
/// stages' state to rank 0 (one frame per pair; stage 1's layer, its two
/// Adam moments and its history of hidden rows) and the checkpoint's count
/// (14 u64s per pair); the final checkpoint holds the history only when the
/// run asked for checkpoints. The vote was checked only as a share of a
/// skipped checkpoint's bytes, so a vote counted twice or not at all went
/// unseen; nothing else moves.
#[test]
fn a_periodic_checkpoint_moves_its_vote_state_and_count_in_control() {
    let tmp = cora();
    let d = tmp.path();
    let (w, epochs, hidden, classes, nodes, frame) = (2u64, 3u64, 16u64, 7u64, 2708u64, 16u64);
    let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "2", "--layers", "2"];
    let more = ["--model", "gcn", "--hidden", "16", "--optimizer", "adam", "--epochs", "3"];
    let run = |every: &str| json(d, &[&args[..], &more, &["--checkpoint-every", every, "--run", every]].concat());
    let (none, each) = (run("0"), run("1"));
    // Layer 1 (stage 1): a [classes, hidden] weight and its bias.
    let layer1 = classes * hidden + classes;
    assert_eq!(weights_len(d, "1"), 1433 * hidden + hidden + layer1, "a GCN of 2 layers");
    let history = nodes * hidden;
    let vote = w * (w - 1) * (frame + 4);
    let state = w * (w - 1) * frame + 4 * (3 * layer1 + history);
    let gather = w * (w - 1) * (frame + 14 * 8);
    let (a, b) = (&none["bytes"], &each["bytes"]);
    let more_control = count(&b["train"]["control"]) - count(&a["train"]["control"]);
    assert_eq!(more_control, epochs * (vote + state + gather) + 4 * history, "{a} vs {b}");
    assert_eq!(count(&b["control"]) - count(&a["control"]), more_control, "{a} vs {b}");
    for c in ["features", "gradients", "migration", "activations", "control"] {
        assert_eq!(a["eval"][c], b["eval"][c], "eval {c}: {a} vs {b}");
        if c != "control" {
            assert_eq!(a["train"][c], b["train"][c], "train {c}: {a} vs {b}");
        }
    }
}

/// The number of f32 weights in run `run`'s final checkpoint.
fn weights_len(d: &Path, run: &str) -> u64 {
    dist_support::weights(&final_weights(d, run)).len() as u64
}

#[test]
fn hybrid_groups_sum_only_their_matching_stages_gradients_and_learn_cora() {
    let tmp = cora();
    let d = tmp.path();
    let (w, g, epochs) = (4u64, 2u64, 60u64);
    let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "4", "--pipeline-groups", "2"];
    let more =
        ["--layers", "4", "--hidden", "64", "--chunks", "2", "--epochs", "60", "--normalize", "l1", "--run", "hy"];
    let s = json(d, &[&args[..], &more].concat());
    let acc = s["test_accuracy"].as_f64().unwrap();
    // 2 groups of 2 stages; majority class 0.319, full-graph GCN about 0.78 here.
    assert!(acc >= 0.7, "hybrid test accuracy {acc}");
    // Every epoch each stage sends its layers' gradient to the matching stage
    // of the other group: the whole model's parameters x 4 bytes per group,
    // plus one all-to-all's frames.
    let weights = final_weights(d, "hy");
    let st = safetensors::SafeTensors::deserialize(&weights).unwrap();
    let params: u64 = st.tensors().iter().map(|(_, v)| v.shape().iter().product::<usize>() as u64).sum();
    let want = epochs * (g * (g - 1) * params * 4 + w * (w - 1) * 16);
    assert_eq!(count(&s["bytes"]["train"]["gradients"]), want, "{}", s["bytes"]);
}

/// (epoch, worker, bytes sent, loss) of every step record of a run, sorted.
fn steps(d: &Path, run: &str) -> Vec<(u64, u64, String, String)> {
    let mut v: Vec<_> = records(d, &serde_json::json!({ "run": run }))
        .iter()
        .filter(|r| r.get("time_step").is_some())
        .map(|r| {
            (
                r["epoch"].as_u64().unwrap(),
                r["worker"].as_u64().unwrap(),
                r["bytes_out"].to_string(),
                r["loss"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_stopped_run_resumes_with_its_stages_history_and_optimizers_and_ends_as_an_uninterrupted_one() {
    let tmp = cora();
    let d = tmp.path();
    // deepgcn on 3 stages (BatchNorm statistics per stage; the default
    // smoothing), a hybrid of 2 pipelines of 2 stages (each group's rows of
    // the history, unsmoothed), and a history smoothed with G = 0.5. All read
    // the history from epoch 1 on, so a resume that lost it (or its
    // smoothing) would diverge.
    let cases: [&[&str]; 3] = [
        &["--workers", "3", "--model", "deepgcn", "--layers", "4", "--chunks", "3"],
        &[
            "--workers",
            "4",
            "--pipeline-groups",
            "2",
            "--model",
            "gcn",
            "--layers",
            "4",
            "--chunks",
            "2",
            "--history-smoothing",
            "0",
        ],
        &["--workers", "2", "--model", "gcn", "--layers", "4", "--chunks", "3", "--history-smoothing", "0.5"],
    ];
    for (k, case) in cases.iter().enumerate() {
        let base =
            [&["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--normalize", "l1", "--hidden", "16"], *case]
                .concat();
        let run = |name: &str, more: &[&str]| json(d, &[&base[..], &["--run", name], more].concat());
        let [whole, cut, five, seven] = ["whole", "cut", "five", "seven"].map(|r| format!("{r}{k}"));
        // Stopped after the step of epoch 2, before its evaluation: a stop
        // always checkpoints the history.
        let ck = d.join("runs").join(&cut).join("checkpoint");
        let has_history = || {
            let mut files = std::fs::read_dir(&ck).unwrap().flatten();
            assert!(files.any(|e| e.file_name().to_string_lossy().starts_with("history-")), "no history in {ck:?}");
        };
        let args = [&base[..], &["--epochs", "5"]].concat();
        let (w, r) = straight_and_resumed(d, &args, [&whole, &cut], 3, has_history);
        assert_eq!(r["iterations"], 5);
        assert_eq!(scores(&r), scores(&w), "case {k}");
        assert_eq!(steps(d, &cut), steps(d, &whole), "case {k}: step records");
        assert_eq!(final_weights(d, &cut), final_weights(d, &whole), "case {k}: final weights");
        // A finished run with periodic checkpoints goes on to more epochs as
        // a longer run would have.
        let longer = run(&seven, &["--epochs", "7"]);
        run(&five, &["--epochs", "5", "--checkpoint-every", "2"]);
        let more = json(d, &["train", "--resume", &five, "--epochs", "7", "--no-tui"]);
        assert_eq!(scores(&more), scores(&longer), "case {k}: 5 + 2 epochs");
        assert_eq!(final_weights(d, &five), final_weights(d, &seven), "case {k}: 5 + 2 epochs");
        // Without periodic checkpoints the final one has no history to go on from.
        let err = fails(d, &["train", "--resume", &whole, "--epochs", "9", "--no-tui"], 2);
        assert!(err.contains("--checkpoint-every"), "{err}");
    }
}

/// The driver cuts the chunks once, into `<dataset>/chunks/metis-<C>/`, and
/// says so; a second run with the same chunks reads the same file (not
/// rewritten, nothing cut). A damaged one (truncated, a byte flipped, or a
/// manifest whose sums do not match its map) is cut again by the driver,
/// which says so naming it and what was wrong, without advice to re-create
/// what it has re-created: the same chunks, and the run ends as the
/// undamaged one did.
#[test]
fn the_driver_cuts_the_chunks_once_and_later_runs_read_them() {
    let tmp = cora();
    let d = tmp.path();
    let run = |name: &str| {
        let args = ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "2", "--chunks", "4"];
        leapgnn(d, &[&args[..], &["--hidden", "16", "--epochs", "1", "--run", name]].concat())
    };
    let file = d.join("cora/chunks/metis-4/manifest");
    let first = run("one");
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{err}");
    assert_eq!(err.matches("GNNPipe chunks (--chunks 4)").count(), 1, "one cut, by the driver: {err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    let before = std::fs::metadata(&file).unwrap();

    let second = run("two");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(!err.contains("GNNPipe chunks"), "the stored chunks are read, not cut again: {err}");
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!((after.ino(), after.mtime_nsec(), after.mtime()), (before.ino(), before.mtime_nsec(), before.mtime()));

    let cut = std::fs::read(&file).unwrap();
    let undamaged = final_weights(d, "one");
    assert_eq!(final_weights(d, "two"), undamaged, "a run on the stored chunks ends as the first");
    let truncated = cut[..cut.len() / 2].to_vec();
    let mut flipped = cut.clone();
    let at = flipped.len() - 9;
    flipped[at] ^= 0x40;
    let mismatched = {
        // A valid checksum over counts that do not add up to the map's.
        let m = leapgnn::format::ManifestFile::open(file.parent().unwrap()).unwrap();
        let mut part_nodes = m.part_nodes().to_vec();
        part_nodes[0] += 1;
        let bad = leapgnn::format::PartManifest {
            dataset: m.archived().dataset.to_string(),
            dataset_checksum: m.dataset_checksum(),
            method: m.method().into(),
            parts: m.parts() as u32,
            seed: m.seed(),
            constraints: m.constraints().into(),
            node_part: m.node_part().to_vec(),
            local_index: m.local_index().to_vec(),
            part_nodes,
            part_train: m.part_train().to_vec(),
            edge_cut: m.edge_cut(),
            edges: m.edges(),
        };
        let dir = d.join("mismatched");
        std::fs::create_dir_all(&dir).unwrap();
        bad.write(&dir).unwrap();
        std::fs::read(dir.join("manifest")).unwrap()
    };
    for (how, bytes) in [("truncated", truncated), ("flipped", flipped), ("mismatched", mismatched)] {
        std::fs::write(&file, &bytes).unwrap();
        let out = run(how);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{how}: {err}");
        let said = err.lines().find(|l| l.contains("damaged")).unwrap_or_else(|| panic!("{how}: not said: {err}"));
        assert!(said.contains(&file.display().to_string()), "{how}: {said}");
        // The driver has already re-created it: no advice to do so.
        assert!(said.contains("cut again in their place") && !said.contains("delete it"), "{how}: {said}");
        assert_eq!(err.matches("GNNPipe chunks (--chunks 4)").count(), 1, "{how}: cut again once: {err}");
        assert_eq!(std::fs::read(&file).unwrap(), cut, "{how}: the same chunks are cut again");
        assert_eq!(final_weights(d, how), undamaged, "{how}: the run ends as the undamaged one");
    }
}

/// A GNNPipe chunk's block counts its edges in 32-bit offsets. The driver
/// could only hold an even share of the graph to that before the workers
/// cut the real chunks; now it checks the real largest chunk, before any
/// worker starts. A graph of a dense and a sparse cluster: METIS balances
/// the chunks' vertices, not their edges, so the dense cluster's chunk
/// holds more than an even share, and a limit (lowered by the test hook)
/// between the two refuses it, exit 2, with no run made.
#[test]
fn the_driver_refuses_the_real_largest_chunk_before_any_worker_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut lines = String::new();
    let mut rng = 11u64;
    let mut next = |m: u64| {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (rng >> 33) % m
    };
    // 0..60 dense (about 20 in-edges each), 60..120 a ring, joined by a few edges.
    for a in 0..60u64 {
        for _ in 0..10 {
            let b = next(60);
            if a != b {
                lines += &format!("{a} {b}\n{b} {a}\n");
            }
        }
        lines += &format!("{} {}\n{} {}\n", 60 + a, 60 + (a + 1) % 60, 60 + (a + 1) % 60, 60 + a);
    }
    for _ in 0..4 {
        lines += &format!("{} {}\n", next(60), 60 + next(60));
    }
    let edges = d.join("skew.txt");
    std::fs::write(&edges, lines).unwrap();
    let args = ["download", "skew", "--from", edges.to_str().unwrap(), "--format", "edgelist", "--feature-dim", "8"];
    json(d, &[&args[..], &["--generated-classes", "3", "--split", "50,20,30", "--seed", "4"]].concat());
    let ds = leapgnn::format::DatasetFile::open(d.join("skew/dataset.lgnn")).unwrap();
    let (n, e) = (ds.num_nodes() as u64, ds.graph().num_edges() as u64);
    // GCN adds a self loop per vertex: an even half holds e/2 edges and n/2 loops.
    let even = e / 2 + n / 2;
    let limit = even.to_string();
    let train = ["train", "skew", "--no-tui", "--strategy", "gnnpipe", "--model", "gcn", "--workers", "2"];
    let args = [&train[..], &["--chunks", "2", "--hidden", "8", "--epochs", "1", "--run", "skewed"]].concat();
    let out = leapgnn_env(d, &args, &[("LEAPGNN_TEST_CSR_MAX_EDGES", &limit)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("share ") && err.contains(" of 2 of the graph would hold"), "{err}");
    assert!(err.contains("give more workers, chunks or groups"), "{err}");
    assert!(!d.join("runs").join("skewed").exists(), "refused before the run was made: {err}");
    assert!(!d.join("skew/chunks/metis-2/manifest").exists(), "a refused cut is not stored");

    // Without the limit, the same chunks are stored: the largest holds more than the even share.
    json(d, &args);
    let m = leapgnn::format::ManifestFile::open(d.join("skew/chunks/metis-2")).unwrap();
    let largest = (0..2u16)
        .map(|c| {
            let own: Vec<u32> = (0..n as u32).filter(|&v| m.node_part()[v as usize] == c).collect();
            own.iter().map(|&v| ds.graph().in_neighbors(v).len() as u64 + 1).sum::<u64>()
        })
        .max()
        .unwrap();
    assert!(largest > even, "largest chunk {largest} edges and loops, an even half {even}");
}

/// A worker reads the chunks its driver stored and never cuts them: a file
/// gone after the driver read it (or replaced, or damaged) is refused by the
/// worker, naming it, and nothing is cut in its place.
#[test]
fn a_worker_refuses_a_chunk_file_gone_after_its_driver_read_it() {
    use std::io::Write;
    let tmp = cora();
    let d = tmp.path();
    let args =
        ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--workers", "2", "--chunks", "4", "--epochs", "1"];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.arg("--data-dir").arg(d).args(args).env("LEAPGNN_TEST_PAUSE", "chunks-stored");
    let mut drv = Driver::from_command(cmd.stdin(std::process::Stdio::piped()));
    drv.wait_line(LONG_EXIT, |l| l == "test hold: chunks-stored");
    let file = d.join("cora/chunks/metis-4/manifest");
    std::fs::remove_file(&file).unwrap();
    writeln!(drv.child.stdin.as_mut().unwrap()).unwrap();
    let (code, err) = drv.wait_exit(LONG_EXIT);
    assert_ne!(code, Some(0), "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line: {err}"));
    assert!(line.contains("worker ") && line.contains(&file.display().to_string()), "{line}");
    assert!(!file.exists(), "a worker never cuts the chunks: {err}");
}
