//! `leapgnn train --cluster PROFILE` with the ssh launcher, against a real
//! OpenSSH server on 127.0.0.1 whose remote directory starts empty: the same
//! loss curve as local worker processes, files shipped once, the checkpoint
//! fetched back, clear refusals, and no process left behind.

mod dist_support;
#[path = "support/sshd.rs"]
mod sshd;

use dist_support::{cora, json};
use sshd::{Sshd, wait_none_mentioning};
use std::path::Path;
use std::time::Duration;

const SMALL: &[&str] =
    &["--no-tui", "--epochs", "2", "--batch-size", "16", "--hidden", "16", "--fanout", "5,5", "--seed", "5"];

fn train(d: &Path, extra: &[&str]) -> serde_json::Value {
    json(d, &[&["train", "cora"], SMALL, extra].concat())
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn losses(s: &serde_json::Value) -> Vec<f64> {
    s["history"].as_array().unwrap().iter().map(|e| e["loss"].as_f64().unwrap()).collect()
}

/// Nothing the test started is left: no process mentions the remote
/// directory (workers run from it) and every ssh session has closed.
fn assert_nothing_left(sshd: &Sshd) {
    let marker = sshd.remote.display().to_string();
    assert_eq!(wait_none_mentioning(&marker, Duration::from_secs(5)), Vec::<u32>::new(), "processes left");
    assert_eq!(sshd.wait_sessions_closed(Duration::from_secs(5)), Vec::<u32>::new(), "ssh sessions left open");
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
    let (a, b) = (losses(&local), losses(&remote));
    assert_eq!(a.len(), 2);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6 * x.abs().max(1.0), "local {a:?} vs ssh {b:?}");
    }
    assert_eq!(local["test_accuracy"], remote["test_accuracy"]);

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

    // Rank 0 checkpointed on its host; the driver has the same checkpoint.
    let ck = run.join("checkpoint");
    let state = read_json(&ck.join("state.json"));
    assert_eq!(state["progress"]["global_iteration"], remote["iterations"]);
    let remote_ck = sshd.remote.join("data/runs").join(remote["run"].as_str().unwrap()).join("checkpoint");
    for f in ["weights", "optimizer"] {
        let name = state[f].as_str().unwrap();
        assert_eq!(std::fs::read(ck.join(name)).unwrap(), std::fs::read(remote_ck.join(name)).unwrap(), "{f}");
    }
    assert_eq!(std::fs::read(ck.join("state.json")).unwrap(), std::fs::read(remote_ck.join("state.json")).unwrap());
    for f in ["config.json", "metrics.jsonl", "summary.json"] {
        assert!(run.join(f).is_file(), "{f} missing in the driver's run directory");
    }
    assert_nothing_left(&sshd);

    // Second run: everything is current on the host, nothing is re-sent (the
    // binary is compared by the preflight and by each rank, the data by each rank).
    let again = train(d, &["--cluster", p]);
    let shipped = read_json(&d.join("runs").join(again["run"].as_str().unwrap()).join("shipped.json"));
    assert_eq!(shipped.as_array().unwrap().len(), 9, "{shipped}");
    assert!(shipped.as_array().unwrap().iter().all(|s| s["sent"] == false), "re-sent: {shipped}");
    assert_eq!(losses(&again), b, "same seed, same curve");
    assert_nothing_left(&sshd);
    sshd.stop();
}
