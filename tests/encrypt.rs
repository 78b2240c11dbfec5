//! `--encrypt`: the mesh's links carry sealed records (a recording of a link
//! holds none of the payload, and the payload still arrives), and a training
//! run with it ends exactly where the same run without it does. (The control
//! connection: tests/control_secret.rs.)

mod comm_support;
mod dist_support;

// comm_support finds it as `super::bounded`.
use comm_support::with_mesh;
use dist_support::bounded;
use dist_support::{cora, final_weights, json, leapgnn};
use leapgnn::comm::Category;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A message no sealed record could contain by chance.
fn marked(len: usize) -> Vec<u8> {
    b"LEAPGNN-PLAINTEXT-MARKER-".iter().copied().cycle().take(len).collect()
}

/// Worker 1 reaches worker 0 through a proxy that records both directions;
/// each sends the other a marked message. Returns the recording.
fn recorded_link(encrypt: bool) -> Vec<u8> {
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let via = proxy.local_addr().unwrap();
    let target: Arc<OnceLock<SocketAddr>> = Arc::new(OnceLock::new());
    let record = Arc::new(Mutex::new(Vec::new()));
    let (t, r) = (target.clone(), record.clone());
    std::thread::spawn(move || {
        let (down, _) = proxy.accept().unwrap();
        let up = TcpStream::connect(t.wait()).unwrap();
        for (mut from, mut to) in [(down.try_clone().unwrap(), up.try_clone().unwrap()), (up, down)] {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 << 10];
                while let Ok(n @ 1..) = from.read(&mut buf) {
                    r.lock().unwrap().extend_from_slice(&buf[..n]);
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    let msg = marked(300_000);
    let got = with_mesh(
        2,
        |cfg| {
            cfg.encrypt = encrypt;
            if cfg.rank == 1 {
                target.set(cfg.addrs[0]).unwrap();
                cfg.addrs[0] = via;
            }
        },
        |m| {
            let peer = 1 - m.rank();
            m.send(peer, 7, Category::Features, msg.clone()).unwrap();
            m.recv(peer, 7, Duration::from_secs(20)).unwrap()
        },
    );
    assert!(got.iter().all(|g| *g == msg), "the message arrived whole both ways");
    record.lock().unwrap().clone()
}

#[test]
fn an_encrypted_mesh_link_carries_no_plaintext() {
    let needle = &marked(64)[..];
    let plain = recorded_link(false);
    assert!(plain.windows(needle.len()).any(|w| w == needle), "without --encrypt the payload is on the wire");
    let sealed = recorded_link(true);
    assert!(sealed.len() >= 2 * 300_000, "both messages crossed the proxy ({} bytes)", sealed.len());
    assert!(!sealed.windows(needle.len()).any(|w| w == needle), "--encrypt left plaintext on the wire");
}

#[test]
fn training_with_encrypt_ends_where_training_without_it_does() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--workers", "3", "--epochs", "2", "--batch-size", "16", "--hidden", "16"];
    let plain = json(d, &[&run[..], &["--run", "plain"]].concat());
    let sealed = json(d, &[&run[..], &["--run", "sealed", "--encrypt"]].concat());
    for k in ["iterations", "final_loss", "test_accuracy"] {
        assert_eq!(plain[k], sealed[k], "{k}");
    }
    assert!(final_weights(d, "plain") == final_weights(d, "sealed"));
    // The byte counts are the frames' (the same), not the records' framing.
    assert_eq!(plain["bytes"]["features"], sealed["bytes"]["features"]);
}

#[test]
fn infer_with_a_profile_that_encrypts_seals_its_workers_connections() {
    let tmp = cora();
    let d = tmp.path();
    json(d, &["train", "cora", "--no-tui", "--full-batch", "--epochs", "1", "--hidden", "16", "--run", "one"]);
    // Each worker says so once it has switched its control connection to sealed records.
    let sealed_workers = |profile: &str| {
        let path = d.join("profile.toml");
        std::fs::write(&path, profile).unwrap();
        let out = leapgnn(d, &["-v", "infer", "one", "--cluster", path.to_str().unwrap(), "--workers", "2"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err.lines().filter(|l| l.contains("carry sealed records (--encrypt)")).count()
    };
    assert_eq!(sealed_workers("[cluster]\nlauncher = \"local\"\n"), 0);
    assert_eq!(sealed_workers("[cluster]\nlauncher = \"local\"\nencrypt = true\n"), 2, "infer ignored encrypt = true");
}

#[test]
fn a_run_started_with_encrypt_resumes_encrypted_without_the_flag() {
    let tmp = cora();
    let d = tmp.path();
    let run = ["train", "cora", "--no-tui", "--workers", "2", "--epochs", "1", "--batch-size", "64", "--hidden", "16"];
    json(d, &[&run[..], &["--run", "sealed", "--encrypt"]].concat());
    let out = leapgnn(d, &["-v", "train", "--resume", "sealed", "--epochs", "2", "--no-tui"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let sealed = err.lines().filter(|l| l.contains("carry sealed records (--encrypt)")).count();
    assert_eq!(sealed, 2, "the resumed run's workers did not encrypt: {err}");
}

/// A run trained with --encrypt is scored the same way: `infer` has no flag
/// of its own, and its workers move every node's features and embeddings
/// (they went in clear unless the profile said `encrypt = true`).
#[test]
fn infer_of_a_run_trained_with_encrypt_seals_its_workers_connections() {
    let tmp = cora();
    let d = tmp.path();
    let train =
        ["train", "cora", "--no-tui", "--workers", "2", "--epochs", "1", "--batch-size", "64", "--hidden", "16"];
    let sealed_workers = |run: &str, encrypt: &[&str]| {
        json(d, &[&train[..], &["--run", run], encrypt].concat());
        let out = leapgnn(d, &["-v", "infer", run, "--workers", "2"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err.lines().filter(|l| l.contains("carry sealed records (--encrypt)")).count()
    };
    assert_eq!(sealed_workers("sealed", &["--encrypt"]), 2, "infer dropped the run's --encrypt");
    assert_eq!(sealed_workers("plain", &[]), 0);
}

#[test]
fn a_neutronstar_estimate_with_encrypt_seals_its_workers_connections() {
    let tmp = cora();
    let d = tmp.path();
    let args = ["-v", "train", "cora", "--no-tui", "--strategy", "neutronstar", "--dry-run", "--workers", "2"];
    let out =
        leapgnn(d, &[&args[..], &["--epochs", "1", "--batch-size", "64", "--hidden", "16", "--encrypt"]].concat());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let sealed = err.lines().filter(|l| l.contains("carry sealed records (--encrypt)")).count();
    assert_eq!(sealed, 2, "the estimate's run ignored --encrypt: {err}");
}
