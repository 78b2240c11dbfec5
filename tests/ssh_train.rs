//! `leapgnn train --cluster PROFILE` with the ssh launcher, against a real
//! OpenSSH server on 127.0.0.1 whose remote directory starts empty: the same
//! loss curve as local worker processes, files shipped once, the checkpoint
//! fetched back, clear refusals, and no process left behind.

mod dist_support;

use dist_support::ports;
use dist_support::sshd::{self, LEFT_WITHIN, Sshd};
use dist_support::{
    Driver, LONG_EXIT, LONG_RUN, assert_noticed_not_waited_out, cora, epoch_losses, final_weights, json, leapgnn,
    max_abs_diff, predictions, remote_workers, signal, try_signal, wait_gone, weights,
};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const SMALL: &[&str] =
    &["--no-tui", "--epochs", "2", "--batch-size", "16", "--hidden", "16", "--fanout", "5,5", "--seed", "5"];

fn train(d: &Path, extra: &[&str]) -> serde_json::Value {
    json(d, &[&["train", "cora"], SMALL, extra].concat())
}

/// Every path under `dir`, relative to it, sorted (nothing when it does not exist).
fn walk(dir: &Path) -> Vec<String> {
    fn visit(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().map(Result::unwrap) {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                visit(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    visit(dir, dir, &mut out);
    out.sort();
    out
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// The per-epoch losses of two runs of SMALL agree (float summation order aside); returns the second's.
fn same_curve(local: &serde_json::Value, remote: &serde_json::Value) -> Vec<f64> {
    assert_eq!(epoch_losses(local).len(), 2);
    curves_agree(local, remote, "")
}

/// The per-epoch losses of two runs agree within 1e-6 (relative); returns the second's.
fn curves_agree(local: &serde_json::Value, remote: &serde_json::Value, what: &str) -> Vec<f64> {
    let (a, b) = (epoch_losses(local), epoch_losses(remote));
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6 * x.abs().max(1.0), "{what}: local {a:?} vs ssh {b:?}");
    }
    b
}

#[test]
fn ssh_training_matches_local_workers_ships_once_and_fetches_the_checkpoint() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    assert!(std::fs::read_dir(&sshd.remote).unwrap().next().is_none(), "the remote directory starts empty");

    let local = train(d, &["--workers", "2"]);
    let remote = train(d, &["--cluster", p]);
    assert_eq!(remote["workers"], 2);
    assert_eq!(local["iterations"], remote["iterations"]);
    let b = same_curve(&local, &remote);
    assert_eq!(local["test_accuracy"], remote["test_accuracy"]);
    // Owner-scored evaluation moves the same bytes whatever the launcher, and
    // the phases add up to the totals over SSH too.
    assert_eq!(local["bytes"]["eval"], remote["bytes"]["eval"]);
    assert!(remote["bytes"]["eval"]["features"].as_u64().unwrap() > 0);
    for c in ["features", "gradients", "migration", "activations", "control"] {
        let n = |v: &serde_json::Value| v.as_u64().unwrap();
        let bytes = &remote["bytes"];
        assert_eq!(n(&bytes["train"][c]) + n(&bytes["eval"][c]), n(&bytes[c]), "{c}: {bytes}");
    }

    // Shipped once: the binary (checked for both ranks, sent for the first),
    // the archive and manifest (shared), and each rank's own part.
    let run = d.join("runs").join(remote["run"].as_str().unwrap());
    let shipped = read_json(&run.join("shipped.json"));
    let shipped = shipped.as_array().unwrap();
    let sent: Vec<String> = shipped
        .iter()
        .filter(|s| s["sent"] == true)
        .map(|s| s["remote"].as_str().unwrap().strip_prefix(&sshd.remote.display().to_string()).unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert!(sent[0].starts_with("/bin/leapgnn-"), "{sent:?}");
    for f in ["/data/cora/dataset.lgnn", "/data/cora/parts/metis-2/manifest", "/data/cora/parts/metis-2/part-0.lgnn"] {
        assert!(sent.contains(&f.to_string()), "{f} not in {sent:?}");
    }
    assert!(sent.contains(&"/data/cora/parts/metis-2/part-1.lgnn".to_string()), "{sent:?}");
    let part = "cora/parts/metis-2/part-1.lgnn";
    assert_eq!(std::fs::read(sshd.remote.join("data").join(part)).unwrap(), std::fs::read(d.join(part)).unwrap());

    // Rank 0 checkpointed on its host; the driver fetched that checkpoint and
    // then removed the run's directory there (it holds nothing the driver lacks).
    let ck = run.join("checkpoint");
    let state = read_json(&ck.join("state.json"));
    assert_eq!(state["progress"]["global_iteration"], remote["iterations"]);
    for f in ["weights", "optimizer"] {
        assert!(ck.join(state[f].as_str().unwrap()).is_file(), "{f}");
    }
    for f in ["config.json", "metrics.jsonl", "summary.json"] {
        assert!(run.join(f).is_file(), "{f} missing in the driver's run directory");
    }
    let runs = sshd.remote.join("data/runs");
    assert_eq!(walk(&runs), Vec::<String>::new(), "the run directory was left on the host");
    sshd.assert_nothing_left();

    // Second run, keeping its directory on the host: everything is current
    // there, nothing is re-sent (the binary is compared by the preflight and
    // by each rank, the data by each rank).
    let again = train(d, &["--cluster", p, "--keep-remote", "--run", "kept"]);
    let shipped = read_json(&d.join("runs/kept/shipped.json"));
    assert_eq!(shipped.as_array().unwrap().len(), 9, "{shipped}");
    assert!(shipped.as_array().unwrap().iter().all(|s| s["sent"] == false), "re-sent: {shipped}");
    assert_eq!(epoch_losses(&again), b, "same seed, same curve");
    let (ck, remote_ck) = (d.join("runs/kept/checkpoint"), runs.join("kept/checkpoint"));
    let state = read_json(&ck.join("state.json"));
    for f in ["weights", "optimizer"] {
        let name = state[f].as_str().unwrap();
        assert_eq!(std::fs::read(ck.join(name)).unwrap(), std::fs::read(remote_ck.join(name)).unwrap(), "{f}");
    }
    assert_eq!(std::fs::read(ck.join("state.json")).unwrap(), std::fs::read(remote_ck.join("state.json")).unwrap());
    sshd.assert_nothing_left();

    // The first run resumes from the driver's copy alone (shipped again), and
    // its directory on the host is gone again when it ends.
    let name = remote["run"].as_str().unwrap();
    let resumed = json(d, &["train", "--resume", name, "--epochs", "3", "--no-tui"]);
    let per_epoch = remote["iterations"].as_u64().unwrap() / 2;
    assert_eq!(resumed["iterations"].as_u64(), Some(3 * per_epoch), "{resumed}");
    let left = walk(&runs);
    assert!(left.iter().all(|f| f.starts_with("kept")), "the resumed run's directory was left: {left:?}");
    assert!(left.contains(&"kept/checkpoint/state.json".to_string()), "the kept run was touched: {left:?}");
    sshd.assert_nothing_left();
    sshd.stop();
}

fn error_line(stderr: &str) -> &str {
    stderr.lines().rfind(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line in:\n{stderr}"))
}

#[test]
fn a_worker_killed_remotely_fails_the_run_without_a_timeout_naming_host_and_rank() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    // Checkpointing on rank 0's host, which stays up: the failed run's last checkpoint is copied back.
    let long = [LONG_RUN, &["--checkpoint-every", "2", "--run", "killed"]].concat();
    let mut drv =
        Driver::start(tmp.path(), &[&["train", "cora", "--cluster", profile.to_str().unwrap()], &long[..]].concat());
    // Each remote worker's stderr reaches the driver's as "[127.0.0.1:PORT rank R] pid P, mesh listening on A".
    let pids: [u32; 2] = remote_workers(&mut drv);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/1000"));
    signal(pids[1], "KILL");
    let (code, stderr) = drv.wait_exit(LONG_EXIT);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
    let line = error_line(&stderr);
    assert_noticed_not_waited_out(line);
    let host = format!("{}@127.0.0.1:{}", sshd.user, sshd.port);
    // Whoever notices first (the driver: rank 1's exit; rank 0: its peer gone), rank 1 and its host are named.
    assert!(line.contains(&host) && (line.contains("rank 1") || line.contains("worker 1")), "{line}");
    assert_eq!(wait_gone(&pids, LEFT_WITHIN), Vec::<u32>::new(), "the surviving worker was left running");
    // The host's run directory went once the driver held its checkpoint, which resumes.
    let state = read_json(&tmp.path().join("runs/killed/checkpoint/state.json"));
    assert!(state["progress"]["global_iteration"].as_u64().unwrap() >= 2, "{state}");
    assert_eq!(walk(&sshd.remote.join("data/runs")), Vec::<String>::new(), "the failed run's directory was left");
    sshd.assert_nothing_left();
    sshd.stop();
}

#[test]
fn train_refuses_an_unknown_host_key_a_wrong_key_a_dead_port_and_a_wrong_worker_count() {
    let mut sshd = Sshd::start();
    let tmp = cora();
    let d = tmp.path();
    let run = |profile: &Path, extra: &[&str]| {
        let mut out = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
        out.arg("--data-dir")
            .arg(d)
            .args([&["train", "cora", "--cluster", profile.to_str().unwrap()], SMALL, extra].concat());
        let out = dist_support::bounded::run_within(
            &mut out,
            dist_support::bounded::RUN_LIMIT,
            &format!("train over ssh {extra:?}"),
        );
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let host = format!("127.0.0.1:{}", sshd.port);

    // --workers must agree with the profile's slots: bad input, before any connection.
    let profile = sshd.profile(2, "");
    let (code, err) = run(&profile, &["--workers", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(error_line(&err).contains("--workers 3") && err.contains("2 worker slots"), "{err}");

    // An unknown host key: refused by the preflight, host named, nothing shipped, nothing recorded.
    std::fs::remove_file(&sshd.known_hosts).unwrap();
    let (code, err) = run(&profile, &[]);
    assert_eq!(code, Some(1), "{err}");
    let line = error_line(&err);
    assert!(line.contains(&host) && line.contains("host_key") && line.contains("--accept-new-host-keys"), "{line}");
    assert!(std::fs::read_dir(&sshd.remote).unwrap().next().is_none(), "nothing may be shipped to an unknown host");
    assert!(!sshd.known_hosts.exists());
    assert!(!d.join("runs").exists() || std::fs::read_dir(d.join("runs")).unwrap().next().is_none(), "no run begun");

    // Nothing listens on the port: refused fast, the address named.
    let dead_socket = ports::dead_port();
    let dead = dead_socket.port;
    let text =
        std::fs::read_to_string(&profile).unwrap().replace(&format!("port = {}", sshd.port), &format!("port = {dead}"));
    let dead_profile = sshd.path("dead.toml");
    std::fs::write(&dead_profile, text).unwrap();
    let (code, err) = run(&dead_profile, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(error_line(&err).contains(&format!("127.0.0.1:{dead}")) && err.contains("reachable"), "{err}");

    // A key the server does not authorize: refused with the user and the key named.
    sshd::keygen(&sshd.path("stranger"));
    let stranger = sshd.path("stranger.toml");
    std::fs::write(&stranger, std::fs::read_to_string(&profile).unwrap().replace("id_test", "stranger")).unwrap();
    let (code, err) = run(&stranger, &["--accept-new-host-keys"]);
    assert_eq!(code, Some(1), "{err}");
    let line = error_line(&err);
    assert!(line.contains(&host) && line.contains("auth") && line.contains("stranger"), "{line}");
    assert!(std::fs::read_dir(&sshd.remote).unwrap().next().is_none(), "nothing may be shipped before auth");

    // --accept-new-host-keys records the key and trains.
    let (code, err) = run(&profile, &["--accept-new-host-keys"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::read_to_string(&sshd.known_hosts).unwrap().starts_with(&format!("[127.0.0.1]:{} ", sshd.port)));
    sshd.assert_nothing_left();
    sshd.stop();
}

/// A remote binary of another build (`cluster.binary`, a wrapper claiming
/// another `build-id`) is refused by the preflight, before any worker starts:
/// the error names the host, the binary and both builds; nothing but the
/// binary reaches the host, and no worker says hello.
#[test]
fn train_refuses_a_remote_binary_of_another_build_before_starting_a_worker() {
    use std::os::unix::fs::PermissionsExt;
    let mut sshd = Sshd::start();
    let stale = "0.1.0+57a1e00000000000";
    let wrapper = sshd.path("leapgnn-stale");
    let var = leapgnn::cluster::worker_session::CLAIM_BUILD_TEST_VAR;
    let bin = env!("CARGO_BIN_EXE_leapgnn");
    std::fs::write(&wrapper, format!("#!/bin/sh\n{var}={stale} exec '{bin}' \"$@\"\n")).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profile = sshd.profile(2, &format!("binary = \"{}\"", wrapper.display()));
    let tmp = cora();
    let out = leapgnn(tmp.path(), &[&["train", "cora", "--cluster", profile.to_str().unwrap()], SMALL].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = error_line(&err);
    let host = format!("127.0.0.1:{}", sshd.port);
    let builds = format!("is leapgnn build {stale} but the driver is build {}", leapgnn::BUILD_ID);
    assert!(line.contains(&host) && line.contains(&builds) && line.contains("cluster.binary"), "{line}");
    assert!(!err.contains("rank 0]") && !err.contains("rank 1]"), "a worker started:\n{err}");
    assert_eq!(walk(&sshd.remote.join("data")), Vec::<String>::new(), "data was shipped for a worker");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// What the driver refuses before it starts a worker (here a `--run` that is
/// taken) is refused before the partition is cut, as for local workers: the
/// run leaves no partition behind.
#[test]
fn a_run_refused_before_launch_over_ssh_leaves_no_partition() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("runs/taken")).unwrap();
    let args = [&["train", "cora", "--cluster", profile.to_str().unwrap(), "--run", "taken"], SMALL].concat();
    let out = leapgnn(d, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(error_line(&err).contains("--run taken"), "{err}");
    assert!(!d.join("cora/parts").exists(), "a refused run cut a partition: {err}");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// `infer --cluster` scores by a METIS partition whatever the run was cut
/// with (RETEXO's is random): the hosts get that one, not the run's.
#[test]
fn infer_over_ssh_ships_the_metis_partition_its_workers_read() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let retexo = ["--strategy", "retexo", "--model", "sage", "--hidden", "16", "--rounds", "1", "--seed", "5"];
    json(d, &[&["train", "cora", "--no-tui", "--workers", "2", "--run", "r"], &retexo[..]].concat());
    let r = json(d, &["infer", "r", "--cluster", profile.to_str().unwrap()]);
    assert_eq!(r["workers"], 2, "{r}");
    let shipped = walk(&sshd.remote.join("data"));
    assert!(shipped.iter().any(|p| p.ends_with("parts/metis-2")), "{shipped:?}");
    assert!(!shipped.iter().any(|p| p.contains("random-2")), "{shipped:?}");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// `infer --cluster` with a one-slot profile: one worker owns every node, so
/// it reads no partition. Its ship list named `parts/metis-1/manifest` and
/// `part-0.lgnn`, a one-part partition that never exists. Now the dataset
/// alone is shipped, and the worker scores as in-process inference does.
#[test]
fn infer_over_ssh_on_one_slot_ships_the_dataset_alone() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let tmp = cora();
    let d = tmp.path();
    train(d, &["--run", "one"]);
    let r = json(d, &["infer", "one", "--cluster", profile.to_str().unwrap()]);
    assert_eq!(r["workers"], 1, "{r}");
    assert_eq!(r["accuracy"], json(d, &["infer", "one"])["accuracy"], "{r}");
    let shipped = walk(&sshd.remote.join("data"));
    assert!(shipped.iter().any(|p| p.ends_with("cora/dataset.lgnn")), "{shipped:?}");
    assert!(!shipped.iter().any(|p| p.contains("parts")), "{shipped:?}");
    assert!(!d.join("cora/parts").exists(), "a partition was cut for one worker");
    sshd.assert_nothing_left();
    sshd.stop();
}

#[test]
fn four_workers_on_two_host_entries_match_four_local_workers() {
    let mut sshd = Sshd::start();
    // Two [[host]] entries (the same server): ranks 0-1 on the first, 2-3 on the second.
    let profile = sshd.profile_with_hosts(&format!("{}{}", sshd.host_entry(2), sshd.host_entry(2)), "");
    let tmp = cora();
    let d = tmp.path();
    let local = train(d, &["--workers", "4"]);
    let out = leapgnn(d, &[&["train", "cora"], SMALL, &["--cluster", profile.to_str().unwrap(), "--json"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let remote: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Allowed, and said once: the preflight and every launch read the same profile.
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    let machine = format!("{}@127.0.0.1:{}", sshd.user, sshd.port);
    assert!(said[0].contains(&format!("host[0] and host[1] are the same machine, {machine}")), "{err}");
    assert_eq!(remote["workers"], 4);
    same_curve(&local, &remote);
    for r in 0..4 {
        assert!(sshd.remote.join(format!("data/cora/parts/metis-4/part-{r}.lgnn")).is_file(), "part {r} not shipped");
    }
    sshd.assert_nothing_left();
    sshd.stop();
}

/// The largest difference between two runs' final weights.
fn weight_gap(d: &Path, a: &str, b: &str) -> f32 {
    max_abs_diff(&weights(&final_weights(d, a)), &weights(&final_weights(d, b)))
}

#[test]
fn retexo_varco_and_gnnpipe_over_ssh_match_local_workers_and_infer_scores_retexo_there() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    let retexo = ["train", "cora", "--no-tui", "--strategy", "retexo", "--model", "sage", "--hidden", "16"];
    let varco = ["train", "cora", "--no-tui", "--strategy", "varco", "--hidden", "16", "--compression", "variable"];
    // GNNPipe: each worker a stage, every feature row shipped with the job.
    let gnnpipe =
        ["train", "cora", "--no-tui", "--strategy", "gnnpipe", "--hidden", "16", "--layers", "4", "--chunks", "3"];
    // RETEXO counts rounds per stage, the others epochs.
    let runs =
        [("retexo", &retexo[..], "--rounds"), ("varco", &varco[..], "--epochs"), ("gnnpipe", &gnnpipe[..], "--epochs")];
    for (name, args, len) in runs {
        let common = [len, "3", "--seed", "5"];
        let local = json(d, &[args, &common, &["--workers", "2", "--run", &format!("{name}-local")]].concat());
        let remote = json(d, &[args, &common, &["--cluster", p, "--run", &format!("{name}-ssh")]].concat());
        assert_eq!(remote["workers"], 2, "{name}");
        assert_eq!(local["iterations"], remote["iterations"], "{name}");
        curves_agree(&local, &remote, name);
        assert_eq!(local["test_accuracy"], remote["test_accuracy"], "{name}");
        // The same rows cross the network whichever launcher started the workers.
        assert!(local["bytes"]["activations"].as_u64().unwrap() > 0, "{name}: {}", local["bytes"]);
        for c in ["features", "activations"] {
            assert_eq!(local["bytes"][c], remote["bytes"][c], "{name} {c}");
        }
        // The final checkpoint was written on rank 0's host and fetched back.
        let gap = weight_gap(d, &format!("{name}-local"), &format!("{name}-ssh"));
        assert!(gap <= 1e-6, "{name}: final weights differ by {gap}");
        sshd.assert_nothing_left();
    }
    // RETEXO's stages scored on the ssh workers, from the weights shipped to
    // them: the predictions of in-process inference.
    let out = d.join("retexo-ssh.safetensors");
    let r = json(d, &["infer", "retexo-ssh", "--cluster", p, "--out", out.to_str().unwrap()]);
    assert_eq!(r["workers"], 2);
    json(d, &["infer", "retexo-ssh"]);
    assert_eq!(predictions(&out), predictions(&d.join("runs/retexo-ssh/predictions.safetensors")));
    // The checkpoint infer shipped to the host went when it ended.
    assert_eq!(walk(&sshd.remote.join("data/runs")), Vec::<String>::new(), "infer left its checkpoint copy");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// Damages `file` in place, its size unchanged: its middle byte inverted.
fn flip_a_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(file, bytes).unwrap();
}

/// Cora's part 1 of 2, damaged (a byte flipped, its size kept) on `sshd`'s
/// host after a run shipped it there: (the driver's copy, the host's).
fn damage_part_1(sshd: &Sshd, d: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let part = "cora/parts/metis-2/part-1.lgnn";
    let (mine, theirs) = (d.join(part), sshd.remote.join("data").join(part));
    flip_a_byte(&theirs);
    (mine, theirs)
}

/// The line of `err` (a run's stderr) saying the job was launched again
/// after worker 1 refused the host's damaged copy `theirs`, once it is
/// asserted that the line does not count it as a restart, that the copy was
/// sent again (equal to `mine`), and that `run` recorded no restart.
fn relaunched_for<'a>(err: &'a str, (mine, theirs): (&Path, &Path), d: &Path, run: &str) -> &'a str {
    let at = theirs.to_str().unwrap();
    let relaunched = err.lines().find(|l| l.contains("worker 1 refused")).unwrap_or_else(|| panic!("not said: {err}"));
    assert!(relaunched.contains(at) && relaunched.contains("not counted as a restart"), "{relaunched}");
    assert!(std::fs::read(mine).unwrap() == std::fs::read(theirs).unwrap(), "not sent again: {err}");
    let metrics = std::fs::read_to_string(d.join("runs").join(run).join("metrics.jsonl")).unwrap();
    assert!(!metrics.contains("\"restart\""), "the relaunch was recorded as a restart: {metrics}");
    relaunched
}

/// GNNPipe over ssh with more than one chunk: the chunks the driver cut and
/// stored go to the host beside the data, byte for byte, and the workers
/// train from that copy, to the local run's losses and weights. The host
/// shares this machine's files, so a worker reading the driver's path would
/// pass too: a copy there whose size and sidecar still call it current but
/// whose bytes were damaged is sent again, with a warning naming it, and the
/// run trains from the new copy to the same result.
#[test]
fn gnnpipe_over_ssh_ships_its_chunks_and_the_workers_train_from_that_copy() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    let gnnpipe = [
        "train",
        "cora",
        "--no-tui",
        "--strategy",
        "gnnpipe",
        "--hidden",
        "16",
        "--layers",
        "4",
        "--chunks",
        "3",
        "--epochs",
        "2",
        "--seed",
        "5",
    ];
    let local = json(d, &[&gnnpipe[..], &["--workers", "2", "--run", "local"]].concat());
    let remote = json(d, &[&gnnpipe[..], &["--cluster", p, "--run", "ssh"]].concat());
    let chunks = "cora/chunks/metis-3/manifest";
    let (mine, theirs) = (d.join(chunks), sshd.remote.join("data").join(chunks));
    assert!(std::fs::read(&mine).unwrap() == std::fs::read(&theirs).unwrap(), "the host's chunks differ");
    let shipped = read_json(&d.join("runs/ssh/shipped.json"));
    let sent =
        shipped.as_array().unwrap().iter().filter(|s| s["sent"] == true && s["remote"] == theirs.to_str().unwrap());
    assert_eq!(sent.count(), 1, "{shipped}");
    assert_eq!(local["iterations"], remote["iterations"]);
    curves_agree(&local, &remote, "gnnpipe");
    assert_eq!(local["test_accuracy"], remote["test_accuracy"]);
    let gap = weight_gap(d, "local", "ssh");
    assert!(gap <= 1e-6, "final weights differ by {gap}");
    sshd.assert_nothing_left();

    // Damaged on the host alone, its size and sidecar unchanged: sent again, and trained from.
    flip_a_byte(&theirs);
    let out = leapgnn(d, &[&gnnpipe[..], &["--cluster", p, "--run", "damaged", "--json"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the host's damaged copy was not replaced: {err}");
    let said = err.lines().find(|l| l.contains("is damaged")).unwrap_or_else(|| panic!("not said: {err}"));
    assert!(said.contains(theirs.to_str().unwrap()) && said.contains("sending the driver's copy again"), "{said}");
    assert!(std::fs::read(&mine).unwrap() == std::fs::read(&theirs).unwrap(), "not sent again: {err}");
    let shipped = read_json(&d.join("runs/damaged/shipped.json"));
    let sent =
        shipped.as_array().unwrap().iter().filter(|s| s["sent"] == true && s["remote"] == theirs.to_str().unwrap());
    assert_eq!(sent.count(), 1, "sent once, then current for the host's other rank: {shipped}");
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    curves_agree(&remote, &again, "gnnpipe after the resend");
    assert_eq!(remote["test_accuracy"], again["test_accuracy"]);
    let gap = weight_gap(d, "ssh", "damaged");
    assert!(gap <= 1e-6, "final weights differ by {gap} after the resend");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// A partition damaged in place on its host (its size, and so its
/// sidecar's verdict, unchanged) was found current there: its worker refused
/// it, naming its path on the host, and every `--restarts` attempt met the
/// same refusal. Now that refusal has every file shipped to that host
/// checked by its bytes, the damaged one sent again with a warning naming
/// it, and the job launched again once, not as a restart: with `--restarts
/// 0` the run trains from the new copy, to the curve of the run before.
#[test]
fn a_partition_damaged_on_its_host_is_sent_again_and_the_job_relaunched_once() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    let before = train(d, &["--cluster", p, "--run", "before"]);
    let (mine, theirs) = damage_part_1(&sshd, d);

    let args = ["--cluster", p, "--run", "damaged", "--restarts", "0", "--json"];
    let out = leapgnn(d, &[&["train", "cora"], SMALL, &args[..]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the host's damaged partition was not replaced: {err}");
    // It had no checkpoint to fetch yet, which the warning says of a relaunch, not a restart.
    let fetch = err.lines().find(|l| l.contains("cannot fetch the checkpoint")).unwrap_or_else(|| panic!("{err}"));
    assert!(fetch.contains("the relaunch uses the driver's copy"), "{fetch}");
    relaunched_for(&err, (&mine, &theirs), d, "damaged");
    let at = theirs.to_str().unwrap();
    let said = err.lines().find(|l| l.contains("is damaged")).unwrap_or_else(|| panic!("not said: {err}"));
    assert!(said.contains(at) && said.contains("sending the driver's copy again"), "{said}");
    let shipped = read_json(&d.join("runs/damaged/shipped.json"));
    let sent = shipped.as_array().unwrap().iter().filter(|s| s["sent"] == true && s["remote"] == at);
    assert_eq!(sent.count(), 1, "{shipped}");
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(epoch_losses(&again), epoch_losses(&before), "same seed, same curve");

    // The driver's own copy damaged too: sent as it is, checked, and refused again, which the error says.
    flip_a_byte(&mine);
    let args = ["--cluster", p, "--run", "both", "--restarts", "0"];
    let out = leapgnn(d, &[&["train", "cora"], SMALL, &args[..]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = error_line(&err);
    let again = format!("worker 1 refused {at} again after the driver checked them on its host");
    assert!(line.contains(&again) && line.contains("its own copy"), "{line}");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// A resumed run meets a partition damaged on its host as a new one does:
/// the file is checked, sent again, and the job relaunched once (not a
/// restart), here from the run's checkpoint, so the run ends on the curve
/// of one never stopped.
#[test]
fn a_resumed_run_whose_partition_was_damaged_on_its_host_resumes_after_it_is_sent_again() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    let straight = train(d, &["--cluster", p, "--run", "straight"]);
    let stopped = train(d, &["--cluster", p, "--run", "cut", "--stop-after", "6"]);
    assert_eq!(stopped["iterations"], 6);
    let (mine, theirs) = damage_part_1(&sshd, d);

    let out = leapgnn(d, &["train", "--resume", "cut", "--no-tui", "--restarts", "0", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the resumed run did not get past the damaged partition: {err}");
    let relaunched = relaunched_for(&err, (&mine, &theirs), d, "cut");
    assert!(relaunched.contains("resuming it from its last checkpoint"), "{relaunched}");
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(epoch_losses(&resumed), epoch_losses(&straight), "same seed, same curve");
    assert!(final_weights(d, "cut") == final_weights(d, "straight"), "final weights differ");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// `cluster clean` over real leftovers (a `--keep-remote` run) and planted
/// ones: a dry run lists and removes nothing; a run in progress here is left
/// alone; a host's checkpoint newer than the driver's is copied back first;
/// odd names and links in the run area (and links inside a run) are never
/// followed; a second clean has nothing to do; a run area that is a link
/// fails the host (exit 1); a --run that is a path is bad input (exit 2).
#[test]
fn cluster_clean_removes_what_runs_left_and_follows_no_link() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    train(d, &["--cluster", p, "--keep-remote", "--run", "kept"]);
    let runs = sshd.remote.join("data/runs");
    let remote_state = std::fs::read(runs.join("kept/checkpoint/state.json")).unwrap();
    // Planted: a run directory holding links out, a link, a hidden and an odd name.
    let outside = sshd.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    std::fs::create_dir_all(runs.join("planted/checkpoint")).unwrap();
    std::os::unix::fs::symlink(&outside, runs.join("planted/checkpoint/out")).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), runs.join("planted/file")).unwrap();
    std::os::unix::fs::symlink(&outside, runs.join("evil")).unwrap();
    for odd in [".hidden", "bad name"] {
        std::fs::create_dir_all(runs.join(odd)).unwrap();
    }
    // The driver lost its copy of the checkpoint: the host's is the only one.
    std::fs::remove_dir_all(d.join("runs/kept/checkpoint")).unwrap();
    let clean = |args: &[&str]| leapgnn(d, &[&["--json", "cluster", "clean", p], args].concat());
    let names = |v: &serde_json::Value, key: &str, field: &str| -> Vec<String> {
        v["hosts"][0][key].as_array().unwrap().iter().map(|r| r[field].as_str().unwrap().to_string()).collect()
    };

    let before = walk(&sshd.remote);
    let out = clean(&["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["dry_run"].clone(), v["ok"].clone()), (true.into(), true.into()), "{v}");
    assert_eq!(names(&v, "removed", "run"), ["kept", "planted"], "{v}");
    assert_eq!(names(&v, "kept", "name"), [".hidden", "bad name", "evil"], "{v}");
    let note = v["hosts"][0]["removed"][0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("would be copied"), "{v}");
    assert_eq!(walk(&sshd.remote), before, "a dry run removed something");
    assert!(!d.join("runs/kept/checkpoint").exists(), "a dry run copied something");
    let human = leapgnn(d, &["cluster", "clean", p, "--dry-run"]);
    let table = String::from_utf8_lossy(&human.stdout);
    assert!(table.contains("would remove kept") && table.contains("left evil: a symbolic link"), "{table}");

    // A run this data directory is training now (its lock held) is left alone.
    let lock = std::fs::File::create(d.join("runs/kept/.lock")).unwrap();
    lock.lock().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&clean(&["--run", "kept"]).stdout).unwrap();
    assert_eq!(names(&v, "removed", "run"), Vec::<String>::new(), "{v}");
    assert!(v["hosts"][0]["kept"][0]["why"].as_str().unwrap().contains("in progress here"), "{v}");
    assert!(runs.join("kept").is_dir());
    drop(lock);

    let out = clean(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(names(&v, "removed", "run"), ["kept", "planted"], "{v}");
    assert_eq!(walk(&runs), [".hidden", "bad name", "evil"], "only the run directories go");
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me", "a link was followed");
    // The host's checkpoint came back first, whole, and the run resumes from it.
    assert_eq!(std::fs::read(d.join("runs/kept/checkpoint/state.json")).unwrap(), remote_state);
    json(d, &["train", "--resume", "kept", "--epochs", "3", "--no-tui"]);
    assert_eq!(walk(&runs), [".hidden", "bad name", "evil"], "the resumed run's directory was left");

    let v: serde_json::Value = serde_json::from_slice(&clean(&[]).stdout).unwrap();
    assert_eq!(names(&v, "removed", "run"), Vec::<String>::new(), "a second clean removed {v}");

    // --binaries: what earlier builds shipped to bin/ goes; the binary this
    // leapgnn ships, an upload that may be in progress and anything that is
    // not leapgnn's (a link named like a binary included) stay.
    let bin = sshd.remote.join("bin");
    let current = walk(&bin);
    assert_eq!(current.len(), 2, "the binary and its .sha256: {current:?}");
    let old = "leapgnn-00000000deadbeef";
    std::fs::write(bin.join(old), vec![7u8; 1000]).unwrap();
    std::fs::write(bin.join(format!("{old}.sha256")), b"0  leapgnn\n").unwrap();
    let (stopped, uploading) = (format!(".{old}.tmp.1-a-0"), format!(".{old}.tmp.2-b-0"));
    std::fs::write(bin.join(&stopped), b"cut off").unwrap();
    let touched = Command::new("touch").args(["-d", "2 hours ago"]).arg(bin.join(&stopped)).status().unwrap();
    assert!(touched.success());
    std::fs::write(bin.join(&uploading), b"arriving").unwrap();
    std::fs::write(bin.join("notes.txt"), b"mine").unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), bin.join("leapgnn-1111111111111111")).unwrap();
    let planted = walk(&bin);
    let v: serde_json::Value = serde_json::from_slice(&clean(&[]).stdout).unwrap();
    assert_eq!(v["hosts"][0]["binaries"], serde_json::json!([]), "bin/ is cleaned only when asked: {v}");
    let out = clean(&["--binaries", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stale = [stopped.clone(), old.to_string(), format!("{old}.sha256")];
    assert_eq!(names(&v, "binaries", "name"), stale, "{v}");
    assert_eq!(v["hosts"][0]["binaries"][1]["bytes"], 1000, "{v}");
    assert_eq!(walk(&bin), planted, "a dry run removed something");
    let human = leapgnn(d, &["cluster", "clean", p, "--binaries", "--dry-run"]);
    let table = String::from_utf8_lossy(&human.stdout);
    assert!(table.contains(&format!("would remove {}", bin.join(old).display())), "{table}");
    assert!(table.contains("and 3 binary files"), "{table}");
    let out = clean(&["--binaries"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut left = [current.clone(), vec![uploading, "leapgnn-1111111111111111".into(), "notes.txt".into()]].concat();
    left.sort();
    assert_eq!(walk(&bin), left);
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me", "a link was followed");
    let v: serde_json::Value = serde_json::from_slice(&clean(&["--binaries"]).stdout).unwrap();
    assert_eq!(v["hosts"][0]["binaries"], serde_json::json!([]), "a second clean removed {v}");

    // A run area that is itself a link is refused whole.
    std::fs::remove_dir_all(&runs).unwrap();
    std::os::unix::fs::symlink(&outside, &runs).unwrap();
    std::fs::create_dir_all(outside.join("looks-like-a-run")).unwrap();
    let out = clean(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symbolic link") && err.contains(&format!("127.0.0.1:{}", sshd.port)), "{err}");
    assert!(outside.join("looks-like-a-run").is_dir() && outside.join("precious").is_file());

    let out = clean(&["--run", "../outside"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    sshd.assert_nothing_left();
    sshd.stop();
}

/// A host's checkpoint/state.json with a field this leapgnn does not know
/// (a newer leapgnn's run of that name, a hand edit) keeps the run's
/// directory there, and both the end of a run (here infer's) and `cluster
/// clean` name the field and the file, as the driver's own copy is refused:
/// the field was skipped, the state read as this leapgnn's, and the
/// directory removed without a word.
#[test]
fn a_hosts_state_with_an_unknown_field_is_kept_and_the_field_named() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let tmp = cora();
    let d = tmp.path();
    train(d, &["--cluster", p, "--keep-remote", "--run", "newer"]);
    let run = sshd.remote.join("data/runs/newer");
    let state = run.join("checkpoint/state.json");
    let mut s = read_json(&state);
    s["progress"].as_object_mut().unwrap().insert("f1".into(), 0.9.into());
    let planted = serde_json::to_vec_pretty(&s).unwrap();
    std::fs::write(&state, &planted).unwrap();
    let host = format!("127.0.0.1:{}", sshd.port);
    let says = "its checkpoint/state.json has field `progress.f1`, which this leapgnn does not know";

    let out = leapgnn(d, &["infer", "newer", "--cluster", p]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let kept = err.lines().find(|l| l.contains("kept ") && l.contains("runs/newer")).unwrap_or_else(|| panic!("{err}"));
    assert!(kept.contains(&host) && kept.contains(says), "{kept}");
    assert!(!kept.contains("cluster clean"), "`cluster clean` keeps it too: {kept}");
    assert_eq!(std::fs::read(&state).unwrap(), planted);

    // The host fails (exit 1), as for any run it cannot secure.
    let out = leapgnn(d, &["--json", "cluster", "clean", p]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("newer: {says}")), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hosts"][0]["removed"], serde_json::json!([]), "{v}");
    assert!(v["hosts"][0]["error"].as_str().unwrap_or_default().contains(says), "{v}");
    assert_eq!(std::fs::read(&state).unwrap(), planted);
    sshd.assert_nothing_left();
    sshd.stop();
}

/// Ctrl-C or SIGTERM during `cluster clean` exited at once from the
/// signal's thread: nothing printed of what was already removed, and a host's
/// `rm -rf` possibly cut short. The run being removed is finished, none after
/// it is touched, the report says what was done and that it was interrupted
/// (text and `--json`), and the exit is 130 / 143.
#[test]
fn cluster_clean_under_a_signal_finishes_the_run_in_progress_reports_it_and_touches_no_other() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let p = profile.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let runs = sshd.remote.join("data/runs");
    let pause = [("LEAPGNN_TEST_PAUSE", "clean-between-runs")];
    for (sig, code, as_json) in [("INT", 130, true), ("TERM", 143, false)] {
        for run in ["first", "second"] {
            std::fs::create_dir_all(runs.join(run).join("checkpoint")).unwrap();
            std::fs::write(runs.join(run).join("metrics.jsonl"), format!("{run}\n")).unwrap();
        }
        let second = walk(&runs.join("second"));
        let out = sshd.path(&format!("clean-{sig}.out"));
        let stdout = std::process::Stdio::from(std::fs::File::create(&out).unwrap());
        let args: &[&str] = if as_json { &["--json", "cluster", "clean", p] } else { &["cluster", "clean", p] };
        let mut drv = Driver::spawn_env(d, args, stdout, &pause);
        drv.wait_line(Duration::from_secs(60), |l| l.contains("test pause: clean-between-runs"));
        signal(drv.child.id(), sig);
        let (status, stderr) = drv.wait_exit(Duration::from_secs(60));
        assert_eq!(status, Some(code), "SIG{sig}: {stderr}");
        assert!(stderr.contains("stopped by a signal") && stderr.contains("again"), "SIG{sig}: {stderr}");
        assert!(!runs.join("first").exists(), "SIG{sig}: the run reported removed is there");
        assert_eq!(walk(&runs.join("second")), second, "SIG{sig}: the run after the signal was touched");
        let printed = std::fs::read_to_string(&out).unwrap();
        if as_json {
            let v: serde_json::Value = serde_json::from_str(&printed).unwrap();
            assert_eq!((v["interrupted"].clone(), v["ok"].clone()), (true.into(), false.into()), "{v}");
            let removed: Vec<&str> =
                v["hosts"][0]["removed"].as_array().unwrap().iter().map(|r| r["run"].as_str().unwrap()).collect();
            assert_eq!(removed, ["first"], "{v}");
            assert_eq!(v["hosts"][0]["kept"], serde_json::json!([]), "{v}");
        } else {
            assert!(printed.contains("removed first ("), "{printed}");
            assert!(!printed.contains("second"), "{printed}");
            assert!(printed.contains("removed 1 run directories") && printed.contains("interrupted"), "{printed}");
        }
    }
    sshd.assert_nothing_left();
    sshd.stop();
}

/// A signal between two hosts of a profile: `cluster clean` visits hosts one
/// after another, and the stop between two was untested (it needs two
/// servers). The host it was on is cleaned, the next is not even connected
/// to, the report says `interrupted` and lists only the host visited, and the
/// exit is 130 / 143. Both sshd share this machine's disk, so `--run` names
/// the one run the first host has to clean (the pause after it is then the
/// gap between the hosts), and whether the second host was visited is read
/// from its server's log.
#[test]
fn cluster_clean_under_a_signal_between_two_hosts_leaves_the_second_alone() {
    let mut s1 = Sshd::start();
    let mut s2 = Sshd::start();
    // The profile names one known_hosts file: it holds both servers' keys.
    let both = [&s1.known_hosts, &s2.known_hosts].map(|k| std::fs::read_to_string(k).unwrap()).concat();
    std::fs::write(&s1.known_hosts, both).unwrap();
    let profile = s1.profile_with_hosts(&format!("{}{}", s1.host_entry(1), s2.host_entry(1)), "");
    let p = profile.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let run = s1.remote.join("data/runs/first");
    let pause = [("LEAPGNN_TEST_PAUSE", "clean-between-runs")];
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        std::fs::create_dir_all(run.join("checkpoint")).unwrap();
        std::fs::write(run.join("metrics.jsonl"), "first\n").unwrap();
        let out = s1.path(&format!("clean-{sig}.out"));
        let stdout = std::process::Stdio::from(std::fs::File::create(&out).unwrap());
        let args = ["--json", "cluster", "clean", p, "--run", "first"];
        let mut drv = Driver::spawn_env(d, &args, stdout, &pause);
        drv.wait_line(Duration::from_secs(60), |l| l.contains("test pause: clean-between-runs"));
        signal(drv.child.id(), sig);
        let (status, stderr) = drv.wait_exit(Duration::from_secs(60));
        assert_eq!(status, Some(code), "SIG{sig}: {stderr}");
        assert!(!run.exists(), "SIG{sig}: the run the first host reported removed is there");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!((v["interrupted"].clone(), v["ok"].clone()), (true.into(), false.into()), "SIG{sig}: {v}");
        let hosts = v["hosts"].as_array().unwrap();
        assert_eq!(hosts.len(), 1, "SIG{sig}: only the first host was visited: {v}");
        assert_eq!((&hosts[0]["port"], &hosts[0]["ok"]), (&s1.port.into(), &true.into()), "SIG{sig}: {v}");
        assert_eq!(hosts[0]["removed"][0]["run"], "first", "SIG{sig}: {v}");
        assert!(s1.log().contains("Accepted publickey"), "SIG{sig}: {}", s1.log());
        assert!(!s2.log().contains("Accepted publickey"), "SIG{sig}: the second host was visited: {}", s2.log());
    }
    for s in [&mut s1, &mut s2] {
        s.assert_nothing_left();
        s.stop();
    }
}

/// A run whose workers run on a host is in progress there, whichever machine
/// drives it: `cluster clean` from another data directory (a second driver,
/// which holds no lock of it) leaves it alone, and removes what it left once
/// its workers are gone.
#[test]
fn cluster_clean_leaves_alone_a_run_another_driver_is_training() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let p = profile.to_str().unwrap();
    let (elsewhere, here) = (cora(), cora());
    let args = [&["train", "cora", "--cluster", p, "--run", "shared", "--checkpoint-every", "2"], LONG_RUN].concat();
    let mut drv = Driver::start(elsewhere.path(), &args);
    let pids: [u32; 2] = remote_workers(&mut drv);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/1000"));
    let runs = sshd.remote.join("data/runs");

    let out = leapgnn(here.path(), &["--json", "cluster", "clean", p]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hosts"][0]["removed"], serde_json::json!([]), "{v}");
    assert_eq!(v["hosts"][0]["kept"][0]["name"], "shared", "{v}");
    let why = v["hosts"][0]["kept"][0]["why"].as_str().unwrap();
    assert!(why.contains("in progress") && why.contains("rank 0, 1"), "{why}");
    assert!(runs.join("shared/checkpoint").is_dir(), "the run in progress lost its directory");

    // The machine driving it dies with its workers: what they left is no longer in progress.
    signal(drv.child.id(), "KILL");
    for pid in pids {
        // A worker that saw its driver go may have ended already: gone either way.
        try_signal(pid, "KILL");
    }
    assert_eq!(wait_gone(&pids, LEFT_WITHIN), Vec::<u32>::new());
    let out = leapgnn(here.path(), &["--json", "cluster", "clean", p]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hosts"][0]["removed"][0]["run"], "shared", "{v}");
    assert_eq!(walk(&runs), Vec::<String>::new());
    sshd.assert_nothing_left();
    sshd.stop();
}

/// Two ranks on one ssh host share its memory: with the host's MemAvailable
/// (the profile's `[cluster.env]` stands a smaller host in for this one)
/// one full-graph share and a half, each share fits alone, which each
/// worker was held to (both started), but not the two together: both
/// refuse, naming the host and their sum, before loading a row.
#[test]
fn two_ranks_on_one_ssh_host_hold_their_full_graph_shares_together() {
    let mut sshd = Sshd::start();
    let tmp = cora();
    let d = tmp.path();
    let run = |free_mib: u64| {
        let env = format!("[cluster.env]\n{} = \"{}\"\n", leapgnn::util::MEM_AVAILABLE_TEST_VAR, free_mib << 20);
        let profile = sshd.profile(2, &env);
        let a = ["train", "cora", "--no-tui", "--epochs", "1", "--mode", "full-graph", "--hidden", "8192"];
        let out = leapgnn(d, &[&a[..], &["--seed", "4", "--cluster", profile.to_str().unwrap()]].concat());
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    // Room for both workers' weights, not for one share: its figure.
    let (code, e) = run(400);
    assert_ne!(code, Some(0), "{e}");
    let after = "--mode full-graph needs an estimated ";
    let at = e.find(after).unwrap_or_else(|| panic!("no `{after}` in {e}")) + after.len();
    let share: u64 = e[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();
    let (code, e) = run(share * 3 / 2);
    assert_ne!(code, Some(0), "two shares over one and a half: {e}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for needle in [format!("MiB for the 2 workers on {} together", host.trim()), "in the cluster profile".into()] {
        assert!(e.contains(&needle), "no `{needle}` in {e}");
    }
    sshd.assert_nothing_left();
    sshd.stop();
}
