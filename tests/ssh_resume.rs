//! Resume and automatic restarts over the ssh launcher, against a real
//! OpenSSH server on 127.0.0.1: the driver ships its checkpoint to every
//! host, fetches rank 0's before a restart, and the run ends with the
//! uninterrupted run's weights, bit for bit.

mod dist_support;

use dist_support::sshd::{LEFT_WITHIN, Sshd};
use dist_support::{
    Driver, cora, final_weights, json, losses, records, remote_workers, scores, signal, straight_and_resumed, wait_gone,
};
use std::time::{Duration, Instant};

/// 140 roots in global batches of 2 x 8: 9 iterations per epoch.
const RUN: &[&str] =
    &["train", "cora", "--no-tui", "--batch-size", "8", "--hidden", "16", "--fanout", "5,5", "--seed", "5"];

#[test]
fn a_run_stopped_over_ssh_resumes_over_ssh_to_the_uninterrupted_weights() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let run = [RUN, &["--cluster", profile.to_str().unwrap(), "--epochs", "2", "--checkpoint-every", "4"]].concat();
    // The driver removed the host's run directory when the stop ended the run: the resume must ship its copy.
    let gone = || assert!(!sshd.remote.join("data/runs/mid").exists(), "the stopped run's remote directory was left");
    let (straight, resumed) = straight_and_resumed(d, &run, ["straight", "mid"], 6, gone);
    assert_eq!(resumed["workers"], 2);
    for k in ["iterations", "final_loss", "test_accuracy", "epochs"] {
        assert_eq!(resumed[k], straight[k], "{k}");
    }
    assert!(final_weights(d, "mid") == final_weights(d, "straight"), "final weights differ");
    assert_eq!(losses(d, "mid"), losses(d, "straight"));
    assert!(!sshd.remote.join("data/runs/mid").exists(), "the resumed run's remote directory was left");
    sshd.assert_nothing_left();
    sshd.stop();
}

/// GNNPipe's stages keep their own optimizer state and embedding history: a
/// stop gathers them into rank 0's checkpoint, the driver fetches it, and a
/// resume ships it to every host, where each stage takes its share back.
#[test]
fn a_gnnpipe_run_stopped_over_ssh_resumes_its_stages_from_the_shipped_checkpoint() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let run = [
        "train",
        "cora",
        "--no-tui",
        "--cluster",
        profile.to_str().unwrap(),
        "--strategy",
        "gnnpipe",
        "--layers",
        "3",
        "--chunks",
        "3",
        "--hidden",
        "16",
        "--epochs",
        "4",
        "--seed",
        "5",
    ];
    // The driver removed the host's run directory when the stop ended the run: the resume must ship its copy.
    let gone = || assert!(!sshd.remote.join("data/runs/mid").exists(), "the stopped run's remote directory was left");
    let (straight, resumed) = straight_and_resumed(d, &run, ["straight", "mid"], 2, gone);
    assert_eq!(resumed["workers"], 2);
    assert_eq!(scores(&resumed), scores(&straight));
    assert!(final_weights(d, "mid") == final_weights(d, "straight"), "final weights differ");
    assert_eq!(losses(d, "mid"), losses(d, "straight"));
    assert!(!sshd.remote.join("data/runs/mid").exists(), "the resumed run's remote directory was left");
    sshd.assert_nothing_left();
    sshd.stop();
}

#[test]
fn a_worker_killed_over_ssh_is_restarted_and_the_run_ends_as_if_uninterrupted() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let run = [RUN, &["--cluster", profile.to_str().unwrap(), "--epochs", "30", "--checkpoint-every", "2"]].concat();
    json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "killed", "--restarts", "1"]].concat());
    let pids = remote_workers::<2>(&mut drv);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/30"));
    signal(pids[1], "KILL");
    let killed = Instant::now();
    drv.wait_line(Duration::from_secs(30), |l| l.contains("restart 1 of 1"));
    let again = remote_workers::<2>(&mut drv);
    // Training again: the first step of the resumed run reached the driver.
    drv.wait_line(Duration::from_secs(60), |l| l.contains("restart 1 of 1: training again"));
    println!("over ssh, from kill -9 to training again: {:.2} s", killed.elapsed().as_secs_f64());
    let (code, stderr) = drv.wait_exit(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    // One restart record, at the checkpoint the run resumed from (every 2 iterations).
    let restarts: Vec<serde_json::Value> = records(d, &serde_json::json!({ "run": "killed" }))
        .into_iter()
        .filter(|r| r.get("restart").is_some())
        .collect();
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let r = &restarts[0];
    assert_eq!((r["restart"].as_u64(), r["of"].as_u64()), (Some(1), Some(1)));
    assert!(r["reason"].as_str().unwrap().contains("worker 1"), "{r}");
    // Cora's 140 training roots, batches of 8 on each of 2 workers: 9 iterations an epoch.
    let per_epoch = 9;
    let at = r["epoch"].as_u64().unwrap() * per_epoch + r["iteration"].as_u64().unwrap();
    assert!(at >= 8 && at.is_multiple_of(2), "resumed from a checkpoint after the first epoch began: {r}");
    assert!(r["seconds"].as_f64().unwrap() > 0.0);
    assert!(final_weights(d, "killed") == final_weights(d, "straight"), "the restarted run ended elsewhere");
    assert!(!sshd.remote.join("data/runs/killed").exists(), "the restarted run's remote directory was left");
    // Every record once, with the same loss; one may be missing: the killed
    // worker's of the iteration before the checkpoint (killed after that
    // iteration's all-reduce, which the checkpoint needed, and before it
    // reported). The survivor's is there: the driver takes what the survivor
    // sent before it noticed the loss, before stopping it.
    let (k, s) = (losses(d, "killed"), losses(d, "straight"));
    // The iteration before the checkpoint, which may lie in the epoch before.
    let before = ((at - 1) / per_epoch, (at - 1) % per_epoch);
    let lost: Vec<_> = s.iter().filter(|x| !k.contains(x)).collect();
    assert!(k.iter().all(|x| s.contains(x)) && k.windows(2).all(|w| w[0] != w[1]), "records differ or repeat");
    assert!(lost.iter().all(|x| (x.0, x.1, x.3) == (before.0, before.1, 1)), "records lost: {lost:?}");
    assert_eq!(wait_gone(&[&pids[..], &again[..]].concat(), LEFT_WITHIN), Vec::<u32>::new());
    sshd.assert_nothing_left();
    sshd.stop();
}

/// Rank 0's host is the one lost, with the checkpoints it wrote: the driver
/// resumes from the copy it took of the last one.
#[test]
fn the_ranks_of_a_host_lost_mid_run_restart_on_a_spare_host() {
    let mut s1 = Sshd::start();
    let mut s2 = Sshd::start();
    // Rank 0 on s2, rank 1 on s1; the spare is another entry for s1's server.
    let hosts = format!("{}{}{}spare = true\n", s2.host_entry(1), s1.host_entry(1), s1.host_entry(1));
    let both = s1.path("known_hosts_both");
    let keys = [&s1.known_hosts, &s2.known_hosts].map(|k| std::fs::read_to_string(k).unwrap()).concat();
    std::fs::write(&both, keys).unwrap();
    let profile = s1.profile_with_hosts(&hosts, "");
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(&profile, text.replace(&s1.known_hosts.display().to_string(), &both.display().to_string())).unwrap();
    let tmp = cora();
    let d = tmp.path();
    let run = [RUN, &["--cluster", profile.to_str().unwrap(), "--epochs", "30", "--checkpoint-every", "2"]].concat();
    json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "moved", "--restarts", "1"]].concat());
    let pids = remote_workers::<2>(&mut drv);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/30"));
    // The driver copies each checkpoint back while training goes on: wait for one.
    let copied = d.join("runs/moved/checkpoint/state.json");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !copied.is_file() {
        assert!(Instant::now() < deadline, "no checkpoint copied back within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // s2 goes away with rank 0 (its sessions are killed): the restart finds it unreachable.
    s2.stop();
    drv.wait_line(Duration::from_secs(30), |l| l.contains("the restart uses the driver's copy"));
    drv.wait_line(Duration::from_secs(30), |l| l.contains("restart 1 of 1"));
    let spare = format!("spare host {}@127.0.0.1:{}", s1.user, s1.port);
    drv.wait_line(Duration::from_secs(30), |l| l.contains("cannot connect") && l.contains(&spare));
    let again = remote_workers::<2>(&mut drv);
    let (code, stderr) = drv.wait_exit(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(final_weights(d, "moved") == final_weights(d, "straight"), "the run on the spare ended elsewhere");
    assert_eq!(losses(d, "moved"), losses(d, "straight"));
    assert_eq!(wait_gone(&[&pids[..], &again[..]].concat(), LEFT_WITHIN), Vec::<u32>::new());
    s1.assert_nothing_left();
    s1.stop();
}

/// A relaunch that cannot reach a host is one more failure, not the end:
/// with `--restarts 2` and rank 1's host gone for good, the driver uses both
/// restarts, the second after a pause, and then says why it gave up.
#[test]
fn a_relaunch_that_cannot_reach_its_host_uses_the_restarts_left() {
    let mut s1 = Sshd::start();
    let mut s2 = Sshd::start();
    let both = s1.path("known_hosts_both");
    let keys = [&s1.known_hosts, &s2.known_hosts].map(|k| std::fs::read_to_string(k).unwrap()).concat();
    std::fs::write(&both, keys).unwrap();
    let profile = s1.profile_with_hosts(&format!("{}{}", s1.host_entry(1), s2.host_entry(1)), "");
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(&profile, text.replace(&s1.known_hosts.display().to_string(), &both.display().to_string())).unwrap();
    let tmp = cora();
    let d = tmp.path();
    let run = [RUN, &["--cluster", profile.to_str().unwrap(), "--epochs", "1000", "--checkpoint-every", "2"]].concat();
    let mut drv = Driver::start(d, &[&run[..], &["--run", "gone", "--restarts", "2"]].concat());
    let pids = remote_workers::<2>(&mut drv);
    drv.wait_line(Duration::from_secs(60), |l| l.starts_with("epoch") && l.contains("/1000"));
    s2.stop();
    drv.wait_line(Duration::from_secs(30), |l| l.contains("restart 1 of 2"));
    let waited = drv.wait_line(Duration::from_secs(30), |l| l.contains("restart 2 of 2 in 2 s"));
    assert!(waited.contains("cannot start worker 1") && waited.contains("cannot connect"), "{waited}");
    drv.wait_line(Duration::from_secs(30), |l| l.contains("restart 2 of 2:"));
    let (code, stderr) = drv.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.lines().rfind(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(last.contains("cannot start worker 1") && last.contains(&format!("127.0.0.1:{}", s2.port)), "{last}");
    assert_eq!(wait_gone(&pids, LEFT_WITHIN), Vec::<u32>::new());
    s1.assert_nothing_left();
    s1.stop();
}

/// RETEXO checkpoints at the start of each stage. Without shared files the
/// driver copies rank 0's checkpoints back as rank 0 announces them, and
/// RETEXO's announcement did not read as one: the driver never had a copy
/// until the run ended, so a driver killed in stage 2 left a run that could
/// not be resumed (no checkpoint), and a lost rank-0 host restarted the run
/// from the start. Now the copy follows each stage's checkpoint, and a run
/// whose driver was killed in stage 2 resumes there to the uninterrupted
/// run's weights.
#[test]
fn a_retexo_run_whose_driver_was_killed_over_ssh_resumes_from_its_stage() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--cluster", profile.to_str().unwrap(), "--strategy", "retexo"];
    let run = [&run[..], &["--hidden", "16", "--rounds", "300", "--seed", "5"]].concat();
    json(d, &[&run[..], &["--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--run", "cut"]].concat());
    let pids = remote_workers::<2>(&mut drv);
    // In stage 2 (rounds 301 to 600).
    drv.wait_line(Duration::from_secs(60), |l| {
        l.strip_prefix("epoch").and_then(|e| e.split('/').next()?.trim().parse::<u64>().ok()).is_some_and(|e| e > 301)
    });
    // The driver copies stage 2's checkpoint back while training goes on: wait for it, the
    // workers frozen meanwhile, so that stage 2 cannot end (and its final checkpoint replace
    // that one) before a copy slowed by a loaded machine comes; the copy needs only sshd.
    for &pid in &pids {
        signal(pid, "STOP");
    }
    let copied = d.join("runs/cut/checkpoint/state.json");
    let at_stage_2 = || {
        let state: Option<serde_json::Value> =
            std::fs::read(&copied).ok().and_then(|b| serde_json::from_slice(&b).ok());
        state.is_some_and(|s| s["progress"]["epoch"] == 300)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !at_stage_2() {
        if Instant::now() >= deadline {
            for &pid in &pids {
                signal(pid, "KILL");
            }
            panic!("stage 2's checkpoint was not copied back within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(drv.child.id(), "KILL");
    let _ = drv.wait_exit(Duration::from_secs(10));
    // Thawed, they find their driver gone.
    for &pid in &pids {
        signal(pid, "CONT");
    }
    // The workers go when their driver does.
    assert_eq!(wait_gone(&pids, Duration::from_secs(30)), Vec::<u32>::new());
    let resumed = json(d, &["train", "--resume", "cut", "--no-tui"]);
    assert_eq!(resumed["workers"], 2);
    assert!(final_weights(d, "cut") == final_weights(d, "straight"), "the resumed run ended elsewhere");
    sshd.stop();
}

/// Without shared files rank 0 writes the final checkpoint on its host, and
/// the driver copies it back only after every worker's report: a driver
/// killed between the two held an older copy, from which `--resume` trained
/// the end of the run again. Now the resume takes rank 0's newer checkpoint
/// and finds the run finished: nothing is trained, and the summary is the
/// uninterrupted run's.
#[test]
fn a_driver_killed_after_the_final_checkpoint_over_ssh_resumes_from_rank_0s_newer_copy() {
    let mut sshd = Sshd::start();
    let pause = "[cluster.env]\nLEAPGNN_TEST_PAUSE = \"final-checkpoint-written\"\n";
    let profile = sshd.profile(2, pause);
    let tmp = cora();
    let d = tmp.path();
    // 270 iterations, periodic checkpoints after the 100th and 200th: the driver's copy is 70 behind the final one.
    let run = [RUN, &["--epochs", "30", "--checkpoint-every", "100"]].concat();
    let plain = sshd.profile(2, "");
    let straight = json(d, &[&run[..], &["--cluster", plain.to_str().unwrap(), "--run", "straight"]].concat());
    let mut drv = Driver::start(d, &[&run[..], &["--cluster", profile.to_str().unwrap(), "--run", "cut"]].concat());
    let pids = remote_workers::<2>(&mut drv);
    let iteration = |p: &std::path::Path| {
        let state: Option<serde_json::Value> = std::fs::read(p).ok().and_then(|b| serde_json::from_slice(&b).ok());
        state.and_then(|s| s["progress"]["global_iteration"].as_u64())
    };
    // Rank 1 is frozen (and rank 0 with it, at the next all-reduce) at the 200th's checkpoint
    // until the driver has copied it back, so that a copy slowed by a loaded machine cannot read
    // the final one instead. Rank 0 is not: it still has to announce the checkpoint.
    let on_host = sshd.remote.join("data/runs/cut/checkpoint/state.json");
    let copied = d.join("runs/cut/checkpoint/state.json");
    let frozen_at = |p: &std::path::Path, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while iteration(p) != Some(200) {
            if Instant::now() >= deadline || iteration(p).is_some_and(|i| i > 200) {
                for &pid in &pids {
                    signal(pid, "KILL");
                }
                panic!("{what}: {:?}", iteration(p));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    frozen_at(&on_host, "rank 0 did not stop at its checkpoint after iteration 200");
    signal(pids[1], "STOP");
    frozen_at(&copied, "the driver did not copy the checkpoint after iteration 200 back");
    signal(pids[1], "CONT");
    drv.wait_line(Duration::from_secs(120), |l| l.contains("test pause: final-checkpoint-written"));
    signal(drv.child.id(), "KILL");
    let _ = drv.wait_exit(Duration::from_secs(10));
    assert_eq!(wait_gone(&pids, Duration::from_secs(30)), Vec::<u32>::new(), "workers outlived their driver");
    let (there, here) = (iteration(&on_host).unwrap(), iteration(&copied).unwrap());
    assert!(there > here, "rank 0's checkpoint (after {there}) is not newer than the driver's (after {here})");
    let metrics = std::fs::read(d.join("runs/cut/metrics.jsonl")).unwrap();
    // A resume that trains (as one did) must end, not pause: its workers take the profile as it is now.
    std::fs::write(&profile, std::fs::read_to_string(&profile).unwrap().replace(pause, "")).unwrap();
    let mut resume = Driver::start(d, &["train", "--resume", "cut", "--no-tui"]);
    let (code, stderr) = resume.wait_exit(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    let fetched = format!("newer checkpoint (after iteration {there}) than the driver's copy (after iteration {here})");
    assert!(stderr.contains(&fetched) && stderr.contains("nothing was trained"), "{stderr}");
    assert!(std::fs::read(d.join("runs/cut/metrics.jsonl")).unwrap() == metrics, "the resume trained again");
    let resumed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/cut/summary.json")).unwrap()).unwrap();
    for k in ["iterations", "final_loss", "test_accuracy", "epochs"] {
        assert_eq!(resumed[k], straight[k], "{k}");
    }
    assert!(final_weights(d, "cut") == final_weights(d, "straight"), "the resumed run ended elsewhere");
    sshd.stop();
}
